//! Publish-subscribe on the client side (section 2.5): subscriptions, the
//! queue of events, and where handlers run.
//!
//! Rules, where the report leaves them open:
//! - **What a notification carries**: the chunk, the version the home had
//!   just applied when it left, and the data of that version when the
//!   subscription asked for it. The home applies a release before it
//!   notifies, so a handler's READ sees at least that version.
//! - **Chunks and chains**: [`Client::subscribe`] is to one chunk,
//!   [`Client::subscribe_chain`] to every chunk of a chain with one handler
//!   (the report's SUBSCRIBE on a chain: the subscriber hears of every
//!   modification of the chain). A chain's event names the chunk whose
//!   release it tells of, with that chunk's version and, with data, that
//!   chunk's bytes.
//! - **Coalescing**: every write release notifies every subscriber, but
//!   notifications that arrive while an earlier one of the same
//!   subscription still waits to be handled merge into it: per chunk for a
//!   chunk subscription (the newest version and data win), per chain for a
//!   chain subscription (the latest notification wins, whichever chunk it
//!   is of). So a handler always runs after the last release; one that
//!   reads its chunk or chain then sees every last version, and a slow one
//!   does not run once per release (nor, for a chain, once per chunk).
//!   Signals merge the same way: a handler runs at least once after each
//!   raise.
//! - **Never behind a read, never backwards**: a chunk's events only go
//!   forward in version (a notification of a version already told is
//!   discarded), and a process is told of a version no later than it reads
//!   it. Through the servers the home's notification comes before its
//!   answer to the read; on one host the read takes the version from the
//!   slot, and queues the event itself ([`Queue::read_at`]). So a
//!   subscriber that reads version N after the publisher's last release
//!   (past a barrier, say) sees its handler run once more, with N.
//!   Notifications of different chunks come in no set order: on one host
//!   a releaser tells the subscribers that want no data itself, through
//!   their inboxes ([`Queue::slot_moved`]), and the home tells the others.
//! - **One home subscription per chunk**: however many subscriptions of a
//!   process include a chunk (the chunk itself, and every subscribed chain
//!   it is in), its home records the process once and sends one
//!   notification per release, which reaches each of them here; the data
//!   travels when one of them asked for it. So the quiescence detection's
//!   counts stay balanced: every notification the home counts as sent is
//!   counted here once as received, used or discarded.
//! - **Where handlers run**: on the role's thread, one at a time, after the
//!   role function returns (the client loop) and also while the role waits
//!   on other processes (rendezvous, barrier, recv; not inside an acquire,
//!   which waits on the chunk's own protocol). A handler may
//!   call the whole API, subscribe and unsubscribe; events that arrive while
//!   it runs wait until it returns.
//! - **Unsubscribing** drops the pending events of that subscription at
//!   once; notifications still on their way are discarded on arrival. The
//!   home forgets the process only when no subscription of it includes the
//!   chunk any more.
//! - **The client loop** ends when no subscription and no pending event is
//!   left, or when the run has nothing left that could notify it
//!   ([`crate::quiescence`]).

use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::{Client, ClientState, WaitFor};
use crate::chunk::NO_LABEL;
use crate::error::{SatError, SatResult};
use crate::store::Chain;
use crate::transport::Payload;
use crate::wire::{self, Message, SyncOp};

/// What a handler is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A write release of `chunk` was applied at its home; `version` is the
    /// newest one when the notification left, `data` its bytes when the
    /// subscription asked for them. For a chain subscription, `chunk` is
    /// the chain's chunk whose release is told (the latest one, when
    /// notifications merged).
    #[allow(missing_docs)] // the fields are the variant's text
    Chunk {
        chunk: u64,
        version: u64,
        data: Option<Arc<[u8]>>,
    },
    /// Signal `id` was raised.
    #[allow(missing_docs)]
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
    /// A chain, by its region: each chain of this process has its own
    /// (two chains that start at the same chunk are two subscriptions, the
    /// same chain allocated twice is one). `first` and `len` name it.
    Chain {
        region: u64,
        first: u64,
        len: usize,
    },
    Signal(u32),
}

impl Topic {
    fn of_chain(chain: &Chain) -> Topic {
        Topic::Chain {
            region: chain.region(),
            first: chain.first(),
            len: chain.len(),
        }
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Topic::Chunk(c) => write!(f, "chunk {c}"),
            Topic::Chain { first, len: 1, .. } => write!(f, "the chain of chunk {first} (1 chunk)"),
            Topic::Chain { first, len, .. } => {
                write!(f, "the chain of chunk {first} ({len} chunks)")
            }
            Topic::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

#[derive(Default)]
pub(crate) struct Handlers {
    map: HashMap<Topic, Handler>,
}

/// A subscription of this process.
struct Subscription {
    with_data: bool,
    /// The chunks it hears of (none for a signal).
    chunks: Vec<u64>,
    /// Per chunk in a host slot: the slot's version when the subscription
    /// was in place. A read of that version or an older one tells it
    /// nothing ([`Queue::read_at`]): those releases came before it.
    since: HashMap<u64, u64>,
}

/// A chunk as its home knows this process's subscriptions to it.
#[derive(Default)]
struct Wire {
    /// The subscriptions of this process that include the chunk.
    topics: Vec<Topic>,
    /// How many of them asked for data.
    data_users: usize,
    /// What the home was last asked for: notifications with data or not.
    with_data: bool,
    /// SUBSCRIBEs sent for the chunk, and confirmations received. The home
    /// answers them in order (one path, FIFO), so the n-th confirmation
    /// answers the n-th SUBSCRIBE. Both only grow, even while nothing is
    /// subscribed, so a late answer is never counted for a newer request.
    asked: u64,
    confirmed: u64,
    /// The newest version of the chunk told to its subscriptions here, by a
    /// notification or by a read of this process (see [`Queue::read_at`]).
    /// A notification of that version or an older one tells nothing new:
    /// it is discarded, so a handler's last event is the newest version.
    newest: u64,
}

/// A chunk and the number of confirmations of it that a SUBSCRIBE waits for.
type Target = (u64, u64);

/// A SUBSCRIBE to send, and the confirmation count that answers it.
#[derive(Debug, Clone, Copy)]
struct Ask {
    chunk: u64,
    with_data: bool,
    ticket: u64,
}

/// Subscriptions, pending events and the counters of the quiescence
/// detection; filled by the progress engine.
#[derive(Default)]
pub(crate) struct Queue {
    subscriptions: HashMap<Topic, Subscription>,
    wires: HashMap<u64, Wire>,
    /// Signal subscriptions the coordinator has confirmed, not yet taken.
    signals_confirmed: HashSet<u32>,
    /// Signal subscriptions sent and not confirmed yet, per signal.
    signal_asks: HashMap<u32, u32>,
    /// Events to handle, with the subscription each is for.
    pending: VecDeque<(Topic, Event)>,
    /// The subscription whose event is being handled (its handler runs, on
    /// the role's thread): UNSUBSCRIBE and FREE from another thread wait
    /// for it to end ([`Client::lock_outside_dispatch_of`]).
    handling: Option<Topic>,
    /// Subscriptions that UNSUBSCRIBE or FREE on another thread end, with
    /// how many such calls wait for the running handler: no new run of
    /// theirs starts, so that "will not run again" holds from the call on.
    ending: HashMap<Topic, u32>,
    published: u64,
    received: u64,
    /// Releases this process told its subscribers itself
    /// ([`Queue::count_direct`]).
    direct: u64,
}

impl Queue {
    /// The home confirmed a SUBSCRIBE of `chunk`.
    pub fn subscribed(&mut self, chunk: u64) {
        match self.wires.get_mut(&chunk) {
            Some(w) => w.confirmed += 1,
            None => tracing::warn!("a confirmation of chunk {chunk}, never asked for: dropped"),
        }
    }

    /// A subscription to signal `id` is sent: its confirmation is awaited.
    pub fn signal_asked(&mut self, id: u32) {
        *self.signal_asks.entry(id).or_default() += 1;
    }

    pub fn signal_subscribed(&mut self, id: u32) {
        match self.signal_asks.get_mut(&id) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.signal_asks.remove(&id);
                }
                self.signals_confirmed.insert(id);
            }
            None => tracing::debug!("a confirmation of signal {id}, not awaited: dropped"),
        }
    }

    /// The signals this process subscribes to, each to be asked for again:
    /// its server was lost, and the coordinator forgot what it knew of the
    /// process with it (`client/failover.rs`). A subscription still on its
    /// way is among them; its confirmation comes from the new one.
    pub fn signals_again(&mut self) -> Vec<u32> {
        let ids: Vec<u32> = (self.subscriptions.keys())
            .filter_map(|t| match t {
                Topic::Signal(id) => Some(*id),
                _ => None,
            })
            .collect();
        self.signal_asks = ids.iter().map(|&id| (id, 1)).collect();
        self.signals_confirmed.clear();
        ids
    }

    /// A notification: counted once, then handed to every subscription of
    /// this process that includes the chunk.
    pub fn notified(&mut self, chunk: u64, version: u64, data: Option<Arc<[u8]>>) {
        self.received += 1;
        let Some(w) = self.wires.get_mut(&chunk).filter(|w| !w.topics.is_empty()) else {
            tracing::debug!(
                "notification of chunk {chunk} version {version} discarded: unsubscribed"
            );
            return;
        };
        if version <= w.newest {
            tracing::debug!(
                "notification of chunk {chunk} version {version} discarded: version {} was \
                 already told",
                w.newest
            );
            return;
        }
        w.newest = version;
        self.queue_for_topics(chunk, version, data);
    }

    /// This process opened a scope that reads `version` of `chunk` straight
    /// from its host slot, where no home answer orders the notification
    /// before the read. So that a process never reads a version before it
    /// is told of it, a subscribed chunk's newer version is told here, as
    /// if notified, to each subscription it is newer than the slot's
    /// version when that subscription was in place (older releases were
    /// never promised to it). `bytes` gives the data, called only when a
    /// subscription told wants it. The home's notification of this version,
    /// when it comes, is then discarded. Not counted by the quiescence
    /// detection: no home sent it.
    pub fn read_at(&mut self, chunk: u64, version: u64, bytes: impl FnOnce() -> Arc<[u8]>) {
        self.tell_from_slot(chunk, version, Some(bytes));
    }

    /// `chunk`'s host slot holds `version`, and a releaser said it moved
    /// (through this process's inbox, `segment/inbox.rs`, or this process
    /// released it): told as [`Queue::read_at`] tells it, without data.
    /// A releaser tells a chunk's subscribers itself only when none of them
    /// wants data, as its home recorded them, so a subscription that wants
    /// data and is skipped here was still being set up when the release
    /// was made: that release was not promised to it.
    pub fn slot_moved(&mut self, chunk: u64, version: u64) {
        self.tell_from_slot(chunk, version, None::<fn() -> Arc<[u8]>>);
    }

    /// The home of `chunks` was lost with their subscriptions: the
    /// confirmations still due from it will never come, and each chunk some
    /// subscription includes is to be asked for again. Returns the
    /// SUBSCRIBEs to send: (chunk, with data, the newest version told).
    pub fn subscribe_again(&mut self, chunks: &[u64]) -> Vec<(u64, bool, u64)> {
        let mut asks = Vec::new();
        for chunk in chunks {
            if let Some(w) = self.wires.get_mut(chunk).filter(|w| !w.topics.is_empty()) {
                w.confirmed = w.asked;
                w.asked += 1;
                asks.push((*chunk, w.with_data, w.newest));
            }
        }
        asks
    }

    /// The chunks some subscription includes (an inbox that overflowed
    /// names none: every one of them is looked at).
    pub fn subscribed_chunks(&self) -> Vec<u64> {
        self.wires
            .iter()
            .filter(|(_, w)| !w.topics.is_empty())
            .map(|(&c, _)| c)
            .collect()
    }

    fn tell_from_slot<F: FnOnce() -> Arc<[u8]>>(
        &mut self,
        chunk: u64,
        version: u64,
        bytes: Option<F>,
    ) {
        let Some(w) = self.wires.get_mut(&chunk) else {
            return;
        };
        if w.topics.is_empty() || version <= w.newest {
            return;
        }
        w.newest = version;
        let subscriptions = &self.subscriptions;
        let can_give_data = bytes.is_some();
        let told: Vec<(Topic, bool)> = w
            .topics
            .iter()
            .filter_map(|t| {
                let sub = subscriptions.get(t)?;
                let since = *sub.since.get(&chunk)?;
                (version > since && (can_give_data || !sub.with_data))
                    .then_some((*t, sub.with_data))
            })
            .collect();
        let data = match bytes {
            Some(bytes) if told.iter().any(|&(_, d)| d) => Some(bytes()),
            _ => None,
        };
        for (topic, wants_data) in told {
            let data = if wants_data { data.clone() } else { None };
            merge(&mut self.pending, topic, chunk, version, data);
        }
    }

    /// Subscription `topic` is in place; `chunk`'s host slot then held
    /// `version`.
    pub fn set_since(&mut self, topic: Topic, chunk: u64, version: u64) {
        if let Some(sub) = self.subscriptions.get_mut(&topic) {
            sub.since.insert(chunk, version);
        }
    }

    /// Hands a version of `chunk` to every subscription that includes it.
    fn queue_for_topics(&mut self, chunk: u64, version: u64, data: Option<Arc<[u8]>>) {
        let topics = self.wires.get(&chunk).map_or(&[][..], |w| &w.topics[..]);
        for topic in topics {
            let wants_data = self.subscriptions.get(topic).is_some_and(|s| s.with_data);
            if wants_data && data.is_none() {
                // Sent before the home recorded that this subscription wants
                // data: before the SUBSCRIBE returned, so not promised to it.
                continue;
            }
            let data = if wants_data { data.clone() } else { None };
            merge(&mut self.pending, *topic, chunk, version, data);
        }
    }

    pub fn signalled(&mut self, id: u32) {
        self.received += 1;
        let topic = Topic::Signal(id);
        if self.subscriptions.contains_key(&topic) && !self.pending.iter().any(|(t, _)| *t == topic)
        {
            self.pending.push_back((topic, Event::Signal { id }));
        }
    }

    pub fn count_published(&mut self) {
        self.published += 1;
    }

    /// A release whose subscribers this process told itself, through their
    /// inboxes: no message carries it, so a probe counts it as both sent
    /// and received. The totals still move, so the quiescence detection's
    /// next wave cannot match the last one, and that wave finds the event
    /// in the subscriber (which takes its inbox before it answers a probe).
    pub fn count_direct(&mut self) {
        self.direct += 1;
    }

    /// (busy, published, received) for a probe of the quiescence detection.
    pub fn probe(&self) -> (bool, u64, u64) {
        (
            self.handling.is_some() || !self.pending.is_empty(),
            self.published + self.direct,
            self.received + self.direct,
        )
    }

    /// (published, received) for the server, once this client is done:
    /// without the releases told through inboxes, which balance, so that
    /// the server can tell which of its notifications never arrived.
    pub fn counters(&self) -> (u64, u64) {
        (self.published, self.received)
    }

    /// Whether an event waits whose handler may run now (not one of a
    /// subscription being ended).
    pub fn pending(&self) -> bool {
        self.pending
            .iter()
            .any(|(t, _)| !self.ending.contains_key(t))
    }

    /// The oldest event whose handler may run now, taken from the queue.
    fn next_to_handle(&mut self) -> Option<(Topic, Event)> {
        let i = self
            .pending
            .iter()
            .position(|(t, _)| !self.ending.contains_key(t))?;
        self.pending.remove(i)
    }

    /// Whether an UNSUBSCRIBE or FREE on another thread is ending `topic`.
    #[cfg(test)]
    pub fn is_ending(&self, topic: Topic) -> bool {
        self.ending.contains_key(&topic)
    }

    /// Whether an event of `topic` waits to be handled.
    #[cfg(test)]
    pub fn pending_for(&self, topic: Topic) -> bool {
        self.pending.iter().any(|(t, _)| *t == topic)
    }

    /// Records subscription `topic` to `chunks`; returns the SUBSCRIBEs to
    /// send and the confirmation count each chunk must reach (a chunk whose
    /// home already has what it needs waits only for what is on its way).
    fn add(
        &mut self,
        topic: Topic,
        chunks: &[u64],
        with_data: bool,
    ) -> Result<(Vec<Ask>, Vec<Target>), SatError> {
        if self.subscriptions.contains_key(&topic) {
            return Err(SatError::Usage(format!(
                "SUBSCRIBE to {topic}: this process is already subscribed; UNSUBSCRIBE first"
            )));
        }
        self.subscriptions.insert(
            topic,
            Subscription {
                with_data,
                chunks: chunks.to_vec(),
                since: HashMap::new(),
            },
        );
        let (mut asks, mut targets) = (Vec::new(), Vec::with_capacity(chunks.len()));
        for &chunk in chunks {
            let w = self.wires.entry(chunk).or_default();
            w.topics.push(topic);
            w.data_users += usize::from(with_data);
            if w.topics.len() == 1 || (with_data && !w.with_data) {
                w.with_data = w.data_users > 0;
                w.asked += 1;
                asks.push(Ask {
                    chunk,
                    with_data: w.with_data,
                    ticket: w.asked,
                });
            }
            targets.push((chunk, w.asked));
        }
        Ok((asks, targets))
    }

    /// Forgets subscription `topic` and its pending events; returns what
    /// to tell the homes, per chunk: None to UNSUBSCRIBE (no subscription
    /// includes it any more), `Some(false)` to SUBSCRIBE without data (this
    /// was its last subscription with data).
    fn remove(&mut self, topic: Topic) -> Result<Vec<(u64, Option<bool>)>, SatError> {
        let Some(sub) = self.subscriptions.remove(&topic) else {
            return Err(SatError::Usage(format!(
                "UNSUBSCRIBE from {topic}: this process is not subscribed to it"
            )));
        };
        self.pending.retain(|(t, _)| *t != topic);
        let mut msgs = Vec::new();
        for chunk in sub.chunks {
            let Some(w) = self.wires.get_mut(&chunk) else {
                continue;
            };
            w.topics.retain(|t| *t != topic);
            w.data_users -= usize::from(sub.with_data);
            if w.topics.is_empty() {
                w.with_data = false;
                msgs.push((chunk, None));
            } else if w.with_data && w.data_users == 0 {
                // Counted like any SUBSCRIBE, so the confirmation counts
                // stay in step; nothing waits for this one.
                w.with_data = false;
                w.asked += 1;
                msgs.push((chunk, Some(false)));
            }
        }
        Ok(msgs)
    }

    /// Whether every chunk of `targets` has the confirmations it waits for.
    fn confirmed(&self, targets: &[Target]) -> bool {
        targets
            .iter()
            .all(|&(c, t)| self.wires.get(&c).is_some_and(|w| w.confirmed >= t))
    }
}

/// Merges a notification into the pending event of `topic`, or queues one.
fn merge(
    pending: &mut VecDeque<(Topic, Event)>,
    topic: Topic,
    chunk: u64,
    version: u64,
    data: Option<Arc<[u8]>>,
) {
    for (t, e) in pending.iter_mut() {
        if *t != topic {
            continue;
        }
        if let Event::Chunk {
            chunk: c,
            version: v,
            data: d,
        } = e
        {
            // One chunk's notifications come from its home in order, the
            // newest version last; a chain's event tells of the latest
            // notification, whichever chunk it is of.
            if *c != chunk || version > *v {
                *c = chunk;
                *v = version;
                *d = data;
            }
        }
        return;
    }
    pending.push_back((
        topic,
        Event::Chunk {
            chunk,
            version,
            data,
        },
    ));
}

thread_local! {
    /// Set while this thread runs a handler: handlers do not nest.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// SUBSCRIBEs go out this many at a time, each group once the previous one
/// is confirmed: a chain of 1,024 chunks is a few round trips, and a
/// server's receive queue is not flooded (as allocation requests are
/// windowed, docs/DESIGN.md).
const SUBSCRIBE_WINDOW: usize = 32;

/// How long a SUBSCRIBE waits for its home's confirmation.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(60);

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
        self.start_chunk_subscription(Topic::Chunk(chunk), &[chunk], with_data, Arc::new(handler))
    }

    /// UNSUBSCRIBE: `chunk`'s handler will not run again, not even for
    /// notifications already received.
    pub fn unsubscribe(&self, chunk: u64) -> SatResult<()> {
        self.end_chunk_subscription(Topic::Chunk(chunk))
    }

    /// SUBSCRIBE to a chain: from now on, every write release of any chunk
    /// of `chain`, from any process, runs `handler` here, with an
    /// [`Event::Chunk`] naming the chunk released, its version and, with
    /// `with_data`, that chunk's bytes (not the whole chain's). Returns
    /// once every chunk's home has recorded the subscription.
    ///
    /// Notifications that arrive while an earlier one of the chain waits
    /// to be handled merge into it, whichever chunk they are of: the
    /// handler runs at least once after each release of any chunk, the
    /// event then names the latest, and a slow handler does not run once
    /// per chunk per release. A handler that reads the chain sees every
    /// chunk at least at its notified version.
    ///
    /// Each chain of this process is a subscription of its own: two chains
    /// that start at the same chunk (say chunks 10-13 and 10-11) each have
    /// their handler, a release of chunk 10 runs both, and unsubscribing
    /// one leaves the other. The same chain allocated twice is the same
    /// chain: subscribing it twice is an error. Subscribing to a chunk
    /// with [`Client::subscribe`] is separate from subscribing to a chain
    /// that holds it.
    ///
    /// A protected chain (the encryption layer), or a chunk of one, is
    /// refused `with_data` ([`SatError::Usage`]): its bytes are sealed as
    /// one version of the whole chain, so one chunk's bytes could be neither
    /// opened nor checked. Subscribe without data and READ the chain.
    pub fn subscribe_chain(
        &self,
        chain: &Chain,
        with_data: bool,
        handler: impl Fn(&Client, &Event) -> HandlerResult + Send + Sync + 'static,
    ) -> SatResult<()> {
        let topic = Topic::of_chain(chain);
        {
            let st = self.lock();
            if !st.store.holds(chain) {
                return Err(SatError::Usage(format!(
                    "SUBSCRIBE to {topic}: this chain is not (or no longer) in this process; \
                     MALLOC, LOOKUP or MAP it first"
                )));
            }
        }
        let chunks: Vec<u64> = chain.ids().collect();
        self.start_chunk_subscription(topic, &chunks, with_data, Arc::new(handler))
    }

    /// UNSUBSCRIBE from a chain: its handler will not run again, not even
    /// for notifications already received. Other subscriptions to its
    /// chunks (another chain's, or a chunk's own) go on.
    pub fn unsubscribe_chain(&self, chain: &Chain) -> SatResult<()> {
        self.end_chunk_subscription(Topic::of_chain(chain))
    }

    /// Ends this process's subscription to `chain`, if any, under the
    /// caller's hold of the client's lock: FREE ends it in the same critical
    /// section that gives the chain back, so that no event of the freed
    /// chain is queued, nor its handler run, in between.
    pub(super) fn end_chain_subscription_locked(&self, st: &mut ClientState, chain: &Chain) {
        if st
            .mail
            .events
            .subscriptions
            .contains_key(&Topic::of_chain(chain))
        {
            let _ = self.end_chunk_subscription_locked(st, Topic::of_chain(chain));
        }
    }

    /// Runs `handler` after signal `id` is raised, by any process: at least
    /// once after each raise. Raises that come while an earlier one still
    /// waits for its handler merge into it, as a chunk's notifications do,
    /// so the number of runs counts nothing.
    /// Returns once the signal's coordinator has recorded the subscription.
    pub fn subscribe_signal(
        &self,
        id: u32,
        handler: impl Fn(&Client, &Event) -> HandlerResult + Send + Sync + 'static,
    ) -> SatResult<()> {
        let topic = Topic::Signal(id);
        {
            let mut st = self.lock();
            let st = &mut *st;
            st.mail.events.add(topic, &[], false)?;
            self.handlers_lock().map.insert(topic, Arc::new(handler));
            st.mail.events.signal_asked(id);
            let msg = Message::Sync {
                client: self.rank,
                op: SyncOp::SignalSubscribe { id },
            };
            let n = wire::encode(&msg, &mut st.header).expect("fits");
            st.transport
                .send(st.server, &st.header[..n], Payload::None)?;
        }
        let deadline = self.clock.now() + SUBSCRIBE_WAIT;
        let done = self.wait(Some(deadline), |st| {
            st.mail.events.signals_confirmed.remove(&id).then_some(())
        })?;
        done.ok_or_else(|| SatError::Timeout(format!("SUBSCRIBE to {topic}: no confirmation")))
    }

    /// Stops the handler of signal `id`: it will not run again, not even
    /// for raises already heard of. Called from another thread while that
    /// handler runs on the role's thread, returns once that run has ended.
    pub fn unsubscribe_signal(&self, id: u32) -> SatResult<()> {
        let mut st = self.lock_outside_dispatch_of(Topic::Signal(id))?;
        let st = &mut *st;
        st.mail.events.remove(Topic::Signal(id))?;
        self.handlers_lock().map.remove(&Topic::Signal(id));
        let msg = Message::Sync {
            client: self.rank,
            op: SyncOp::SignalUnsubscribe { id },
        };
        let n = wire::encode(&msg, &mut st.header).expect("fits");
        st.transport
            .send(st.server, &st.header[..n], Payload::None)?;
        Ok(())
    }

    /// Records `topic` and sends the SUBSCRIBEs its chunks need, a window
    /// at a time; returns once every chunk's home has confirmed.
    fn start_chunk_subscription(
        &self,
        topic: Topic,
        chunks: &[u64],
        with_data: bool,
        handler: Handler,
    ) -> SatResult<()> {
        let (asks, targets) = {
            let mut st = self.lock();
            // A protected chunk's bytes are sealed, and a chain's seal
            // covers all its chunks: one chunk's bytes could be neither
            // opened nor checked in a notification.
            let sealed = chunks
                .iter()
                .find(|c| st.labels.get(c).is_some_and(|&l| l != NO_LABEL));
            if let (true, Some(chunk)) = (with_data, sealed) {
                return Err(SatError::Usage(format!(
                    "SUBSCRIBE with data to {topic}: chunk {chunk} is protected and its bytes \
                     are sealed; subscribe without data and READ the chain in the handler"
                )));
            }
            let planned = st.mail.events.add(topic, chunks, with_data)?;
            self.handlers_lock().map.insert(topic, handler);
            planned
        };
        for window in asks.chunks(SUBSCRIBE_WINDOW) {
            {
                let mut st = self.lock();
                let st = &mut *st;
                for ask in window {
                    let msg = Message::Subscribe {
                        chunk: ask.chunk,
                        client: self.rank,
                        with_data: ask.with_data,
                    };
                    let n = wire::encode(&msg, &mut st.header).expect("fits");
                    st.transport
                        .send(st.server, &st.header[..n], Payload::None)?;
                }
            }
            let sent: Vec<Target> = window.iter().map(|a| (a.chunk, a.ticket)).collect();
            self.await_confirmations(topic, &sent)?;
        }
        // Chunks whose SUBSCRIBE another subscription sent and that are
        // still on their way.
        self.await_confirmations(topic, &targets)?;
        // What a read on one host may tell this subscription: only versions
        // newer than those its slots hold now (see `Queue::read_at`).
        let mut st = self.lock();
        let st = &mut *st;
        for &chunk in chunks {
            if let Some(slot) = st.store.get(chunk).and_then(|c| c.host.as_ref()) {
                let version = slot.slot().peek_version();
                st.mail.events.set_since(topic, chunk, version);
            }
        }
        Ok(())
    }

    fn await_confirmations(&self, topic: Topic, targets: &[Target]) -> SatResult<()> {
        let deadline = self.clock.now() + SUBSCRIBE_WAIT;
        let done = self.wait(Some(deadline), |st| {
            st.mail.events.confirmed(targets).then_some(())
        })?;
        done.ok_or_else(|| SatError::Timeout(format!("SUBSCRIBE to {topic}: no confirmation")))
    }

    fn end_chunk_subscription(&self, topic: Topic) -> SatResult<()> {
        let mut st = self.lock_outside_dispatch_of(topic)?;
        self.end_chunk_subscription_locked(&mut st, topic)
    }

    /// The client's lock, taken once no handler of `topic` runs on another
    /// thread: an UNSUBSCRIBE or FREE that returns while the role's thread
    /// is still inside that handler (its event taken just before) would
    /// break "the handler will not run again", and after FREE hand the
    /// handler a chain given back. From inside a handler (the role's
    /// thread) there is nothing to wait for: the running handler is the
    /// caller's.
    fn lock_outside_dispatch_of(
        &self,
        topic: Topic,
    ) -> SatResult<std::sync::MutexGuard<'_, ClientState>> {
        let mut st = self.lock();
        if st.mail.events.handling != Some(topic) || IN_HANDLER.with(Cell::get) {
            return Ok(st);
        }
        // Its handler runs: no new run of it starts from now on (without
        // this, the role's thread took the next event of the subscription,
        // one that came while the handler ran, before this thread saw the
        // run end, and the handler ran once more).
        *st.mail.events.ending.entry(topic).or_default() += 1;
        drop(st);
        let waited = self.wait_inner(None, WaitFor::Peers, None, |st| {
            (st.mail.events.handling != Some(topic)).then_some(())
        });
        let mut st = self.lock();
        let q = &mut st.mail.events;
        if let Some(n) = q.ending.get_mut(&topic) {
            *n -= 1;
            if *n == 0 {
                q.ending.remove(&topic);
            }
        }
        waited?;
        Ok(st)
    }

    /// [`Client::lock_outside_dispatch_of`] for FREE of `chain`: its
    /// subscription's handler.
    pub(super) fn lock_outside_dispatch_of_chain(
        &self,
        chain: &Chain,
    ) -> SatResult<std::sync::MutexGuard<'_, ClientState>> {
        self.lock_outside_dispatch_of(Topic::of_chain(chain))
    }

    /// [`Client::end_chunk_subscription`] under the caller's hold of the
    /// client's lock.
    fn end_chunk_subscription_locked(&self, st: &mut ClientState, topic: Topic) -> SatResult<()> {
        let msgs = st.mail.events.remove(topic)?;
        self.handlers_lock().map.remove(&topic);
        for (chunk, subscribe) in msgs {
            let client = self.rank;
            let msg = match subscribe {
                None => Message::Unsubscribe { chunk, client },
                Some(with_data) => Message::Subscribe {
                    chunk,
                    client,
                    with_data,
                },
            };
            let n = wire::encode(&msg, &mut st.header).expect("fits");
            st.transport
                .send(st.server, &st.header[..n], Payload::None)?;
        }
        Ok(())
    }

    fn handlers_lock(&self) -> std::sync::MutexGuard<'_, Handlers> {
        self.handlers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the calling thread as the role's: the one that runs handlers.
    pub(crate) fn enter_role(&self) {
        let _ = self.role_thread.set(std::thread::current().id());
        crate::balance::enter_role();
    }

    pub(crate) fn may_run_handlers(&self) -> bool {
        self.role_thread.get() == Some(&std::thread::current().id()) && !IN_HANDLER.with(Cell::get)
    }

    /// Runs, now, the handlers of the events that have arrived, and returns
    /// how many ran (0: none was waiting). Handlers otherwise run only while
    /// the role waits (in `rendezvous`, `barrier`, `recv`) and after it
    /// returns: a role that computes for long between its waits calls this
    /// to serve its subscriptions meanwhile, as an MPI program calls
    /// `MPI_Test` to make progress. It never waits: it takes in what has
    /// reached this process, runs the handlers of the pending events oldest
    /// first (those that arrive while they run too), and returns.
    ///
    /// Only on the role's thread (the thread of the role function, of
    /// `service::connect`), and not from a handler: handlers run one at a
    /// time on that thread, so elsewhere it is a usage error. A handler's
    /// error is returned, as from a wait, and the events after it stay
    /// pending for the next call. The handlers run on the caller's thread:
    /// one that acquires a chunk the caller holds in a scope is refused, as
    /// a thread acquiring twice is; call it holding no scope on what the
    /// handlers use.
    pub fn run_handlers(&self) -> SatResult<usize> {
        if self.finished.load(std::sync::atomic::Ordering::Acquire) {
            return Err(SatError::Usage(
                "run_handlers: this client has ended (it detached from its service, or its role \
                 returned): attach again to use the S-DSM"
                    .into(),
            ));
        }
        if !self.may_run_handlers() {
            return Err(SatError::Usage(
                "run_handlers: handlers run on the role's thread, one at a time: call it from the \
                 role function's thread (or the thread that connected), outside a handler"
                    .into(),
            ));
        }
        self.fatal()?;
        self.lock().progress(self.rank)?;
        self.run_pending_handlers()
    }

    /// Runs the handlers of every pending event, oldest first; returns how
    /// many ran.
    pub(crate) fn run_pending_handlers(&self) -> SatResult<usize> {
        let mut ran = 0;
        loop {
            let (topic, event) = {
                let mut st = self.lock();
                let Some(next) = st.mail.events.next_to_handle() else {
                    return Ok(ran);
                };
                st.mail.events.handling = Some(next.0);
                next
            };
            let handler = self.handlers_lock().map.get(&topic).cloned();
            let outcome = handler.map(|h| {
                IN_HANDLER.with(|f| f.set(true));
                // A handler is the application's code, even inside a SAT call.
                let _user = crate::stats::doing(crate::stats::Activity::User);
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(self, &event)));
                IN_HANDLER.with(|f| f.set(false));
                r
            });
            self.lock().mail.events.handling = None;
            ran += usize::from(outcome.is_some());
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
        loop {
            self.run_pending_handlers()?;
            {
                let mut st = self.lock();
                let st = &mut *st;
                let q = &st.mail.events;
                if (q.subscriptions.is_empty() && q.pending.is_empty()) || st.mail.stop {
                    return Ok(());
                }
                if !std::mem::replace(&mut st.mail.idle_told, true) {
                    tracing::debug!(
                        "role returned: waiting for the events of {} subscriptions",
                        q.subscriptions.len()
                    );
                    let n = wire::encode(&Message::ClientIdle, &mut st.header).expect("fits");
                    st.transport
                        .send(st.server, &st.header[..n], Payload::None)?;
                }
            }
            self.wait_inner(None, WaitFor::Peers, None, |st| {
                let q = &st.mail.events;
                (q.pending() || q.subscriptions.is_empty() || st.mail.stop).then_some(())
            })?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A confirmation counts only for a subscription on its way; one that
    /// the loss of the client's server made again is confirmed by the new
    /// request, once.
    #[test]
    fn signal_confirmations_answer_only_what_was_asked() {
        let mut q = Queue::default();
        q.signal_subscribed(7);
        assert!(!q.signals_confirmed.contains(&7), "nobody asked");
        q.add(Topic::Signal(7), &[], false).unwrap();
        q.signal_asked(7);
        // Its server is lost before the confirmation comes: asked again.
        assert_eq!(q.signals_again(), vec![7]);
        q.signal_subscribed(7);
        assert!(q.signals_confirmed.remove(&7));
        q.signal_subscribed(7);
        assert!(
            !q.signals_confirmed.contains(&7),
            "a second confirmation answers nothing"
        );
    }
}
