//! Publish-subscribe on the client side (section 2.5): subscriptions, the
//! queue of events, and where handlers run.
//!
//! Rules, where the report leaves them open:
//! - **What a notification carries**: the chunk, the version the home had
//!   just applied when it left, and the data of that version when the
//!   subscription asked for it. The home applies a release before it
//!   notifies, so a handler's READ sees at least that version.
//! - **Coalescing**: every write release notifies every subscriber, but
//!   notifications of one chunk that arrive while an earlier one still waits
//!   to be handled merge into it (the newest version and data win). So a
//!   handler always runs after the last release and sees the last version;
//!   a slow handler does not see every intermediate one. Signals merge the
//!   same way: a handler runs at least once after each raise.
//! - **Where handlers run**: on the role's thread, one at a time, after the
//!   role function returns (the client loop) and also while the role waits
//!   on other processes (rendezvous, barrier, recv; not inside an acquire,
//!   which waits on the chunk's own protocol). A handler may
//!   call the whole API, subscribe and unsubscribe; events that arrive while
//!   it runs wait until it returns.
//! - **Unsubscribing** drops the pending events of that subscription at
//!   once; notifications still on their way are discarded on arrival.
//! - **The client loop** ends when no subscription and no pending event is
//!   left, or when the run has nothing left that could notify it
//!   ([`crate::quiescence`]).

use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use super::Client;
use crate::error::{SatError, SatResult};
use crate::transport::Payload;
use crate::wire::{self, Message, SyncOp};

/// What a handler is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A write release of `chunk` was applied at its home; `version` is the
    /// newest one when the notification left, `data` its bytes when the
    /// subscription asked for them.
    Chunk {
        chunk: u64,
        version: u64,
        data: Option<Arc<[u8]>>,
    },
    /// Signal `id` was raised.
    Signal { id: u32 },
}

/// What a handler returns: an error ends the client's loop, and its role
/// fails with that message.
pub type HandlerResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

type Handler = Arc<dyn Fn(&Client, &Event) -> HandlerResult + Send + Sync>;

/// What a subscription is to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Topic {
    Chunk(u64),
    Signal(u32),
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Topic::Chunk(c) => write!(f, "chunk {c}"),
            Topic::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

fn topic_of(e: &Event) -> Topic {
    match *e {
        Event::Chunk { chunk, .. } => Topic::Chunk(chunk),
        Event::Signal { id } => Topic::Signal(id),
    }
}

#[derive(Default)]
pub(crate) struct Handlers {
    map: HashMap<Topic, Handler>,
}

/// Subscriptions, pending events and the counters of the quiescence
/// detection; filled by the progress engine.
#[derive(Default)]
pub(crate) struct Queue {
    subscribed: HashSet<Topic>,
    /// Subscriptions the home or coordinator has confirmed, not yet taken.
    confirmed: HashSet<Topic>,
    pending: VecDeque<Event>,
    handling: bool,
    published: u64,
    received: u64,
}

impl Queue {
    pub fn subscribed(&mut self, chunk: u64) {
        self.confirmed.insert(Topic::Chunk(chunk));
    }

    pub fn signal_subscribed(&mut self, id: u32) {
        self.confirmed.insert(Topic::Signal(id));
    }

    pub fn notified(&mut self, chunk: u64, version: u64, data: Option<Arc<[u8]>>) {
        self.received += 1;
        if !self.subscribed.contains(&Topic::Chunk(chunk)) {
            tracing::debug!(
                "notification of chunk {chunk} version {version} discarded: unsubscribed"
            );
            return;
        }
        for e in self.pending.iter_mut() {
            if let Event::Chunk {
                chunk: c,
                version: v,
                data: d,
            } = e
            {
                if *c == chunk {
                    if version > *v {
                        *v = version;
                        *d = data;
                    }
                    return;
                }
            }
        }
        self.pending.push_back(Event::Chunk {
            chunk,
            version,
            data,
        });
    }

    pub fn signalled(&mut self, id: u32) {
        self.received += 1;
        let ev = Event::Signal { id };
        if self.subscribed.contains(&Topic::Signal(id)) && !self.pending.contains(&ev) {
            self.pending.push_back(ev);
        }
    }

    pub fn count_published(&mut self) {
        self.published += 1;
    }

    /// (busy, published, received) for a probe of the quiescence detection.
    pub fn probe(&self) -> (bool, u64, u64) {
        (
            self.handling || !self.pending.is_empty(),
            self.published,
            self.received,
        )
    }

    pub fn counters(&self) -> (u64, u64) {
        (self.published, self.received)
    }

    pub fn pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

thread_local! {
    /// Set while this thread runs a handler: handlers do not nest.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

impl Client {
    /// SUBSCRIBE: from now on, every write release of `chunk` (allocated or
    /// looked up by this process), from any process, runs `handler` here;
    /// with `with_data`, the event carries the new data. Returns once the
    /// home has recorded the subscription, so any release the home applies
    /// after this call returns is notified. See the module docs for when
    /// handlers run and how notifications merge.
    pub fn subscribe(
        &self,
        chunk: u64,
        with_data: bool,
        handler: impl Fn(&Client, &Event) -> HandlerResult + Send + Sync + 'static,
    ) -> SatResult<()> {
        if self.lock().store.get(chunk).is_none() {
            return Err(super::unknown(chunk));
        }
        let msg = Message::Subscribe {
            chunk,
            client: self.rank,
            with_data,
        };
        self.start_subscription(Topic::Chunk(chunk), Arc::new(handler), &msg)
    }

    /// UNSUBSCRIBE: `chunk`'s handler will not run again, not even for
    /// notifications already received.
    pub fn unsubscribe(&self, chunk: u64) -> SatResult<()> {
        let msg = Message::Unsubscribe {
            chunk,
            client: self.rank,
        };
        self.end_subscription(Topic::Chunk(chunk), &msg)
    }

    /// Runs `handler` each time signal `id` is raised, by any process.
    /// Returns once the signal's coordinator has recorded the subscription.
    pub fn subscribe_signal(
        &self,
        id: u32,
        handler: impl Fn(&Client, &Event) -> HandlerResult + Send + Sync + 'static,
    ) -> SatResult<()> {
        let msg = Message::Sync {
            client: self.rank,
            op: SyncOp::SignalSubscribe { id },
        };
        self.start_subscription(Topic::Signal(id), Arc::new(handler), &msg)
    }

    /// Stops the handler of signal `id`.
    pub fn unsubscribe_signal(&self, id: u32) -> SatResult<()> {
        let msg = Message::Sync {
            client: self.rank,
            op: SyncOp::SignalUnsubscribe { id },
        };
        self.end_subscription(Topic::Signal(id), &msg)
    }

    fn start_subscription(&self, topic: Topic, handler: Handler, msg: &Message) -> SatResult<()> {
        {
            let mut st = self.lock();
            let st = &mut *st;
            if !st.mail.events.subscribed.insert(topic) {
                return Err(SatError::Usage(format!(
                    "SUBSCRIBE to {topic}: this process is already subscribed; UNSUBSCRIBE first"
                )));
            }
            self.handlers_lock().map.insert(topic, handler);
            let n = wire::encode(msg, &mut st.header).expect("fits");
            st.transport
                .send(self.server, &st.header[..n], Payload::None)?;
        }
        let deadline = self.clock.now() + std::time::Duration::from_secs(60);
        let done = self.wait(Some(deadline), |st| {
            st.mail.events.confirmed.remove(&topic).then_some(())
        })?;
        done.ok_or_else(|| SatError::Timeout(format!("SUBSCRIBE to {topic}: no confirmation")))
    }

    fn end_subscription(&self, topic: Topic, msg: &Message) -> SatResult<()> {
        let mut st = self.lock();
        let st = &mut *st;
        if !st.mail.events.subscribed.remove(&topic) {
            return Err(SatError::Usage(format!(
                "UNSUBSCRIBE from {topic}: this process is not subscribed to it"
            )));
        }
        st.mail.events.pending.retain(|e| topic_of(e) != topic);
        self.handlers_lock().map.remove(&topic);
        let n = wire::encode(msg, &mut st.header).expect("fits");
        st.transport
            .send(self.server, &st.header[..n], Payload::None)?;
        Ok(())
    }

    fn handlers_lock(&self) -> std::sync::MutexGuard<'_, Handlers> {
        self.handlers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the calling thread as the role's: the one that runs handlers.
    pub(crate) fn enter_role(&self) {
        let _ = self.role_thread.set(std::thread::current().id());
    }

    pub(crate) fn may_run_handlers(&self) -> bool {
        self.role_thread.get() == Some(&std::thread::current().id()) && !IN_HANDLER.with(Cell::get)
    }

    /// Runs the handlers of every pending event, oldest first.
    pub(crate) fn run_pending_handlers(&self) -> SatResult<()> {
        loop {
            let event = {
                let mut st = self.lock();
                let Some(event) = st.mail.events.pending.pop_front() else {
                    return Ok(());
                };
                st.mail.events.handling = true;
                event
            };
            let topic = topic_of(&event);
            let handler = self.handlers_lock().map.get(&topic).cloned();
            let outcome = handler.map(|h| {
                IN_HANDLER.with(|f| f.set(true));
                // A handler is the application's code, even inside a SAT call.
                let _user = crate::stats::doing(crate::stats::Activity::User);
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(self, &event)));
                IN_HANDLER.with(|f| f.set(false));
                r
            });
            self.lock().mail.events.handling = false;
            match outcome {
                None | Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => {
                    return Err(SatError::Role(format!(
                        "the handler of {topic} failed: {e}"
                    )))
                }
                Some(Err(panic)) => std::panic::resume_unwind(panic),
            }
        }
    }

    /// The client loop of section 2.5, after the role function returned:
    /// runs handlers until no subscription and no event is left, or the run
    /// says nothing can notify this client any more.
    pub(crate) fn serve_subscriptions(&self) -> SatResult<()> {
        let mut told_server = false;
        loop {
            self.run_pending_handlers()?;
            {
                let mut st = self.lock();
                let st = &mut *st;
                let q = &st.mail.events;
                if (q.subscribed.is_empty() && q.pending.is_empty()) || st.mail.stop {
                    return Ok(());
                }
                if !told_server {
                    told_server = true;
                    tracing::debug!(
                        "role returned: waiting for the events of {} subscriptions",
                        q.subscribed.len()
                    );
                    let n = wire::encode(&Message::ClientIdle, &mut st.header).expect("fits");
                    st.transport
                        .send(self.server, &st.header[..n], Payload::None)?;
                }
            }
            self.wait(None, |st| {
                let q = &st.mail.events;
                (q.pending() || q.subscribed.is_empty() || st.mail.stop).then_some(())
            })?;
        }
    }
}
