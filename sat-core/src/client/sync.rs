//! Synchronization objects as a client uses them (section 2.4); their
//! semantics are set by the coordinator, see [`crate::sync`].

use std::collections::{HashMap, HashSet};
use std::thread::ThreadId;

use super::events::Queue;
use super::{Client, WaitFor};
use crate::error::{SatError, SatResult};
use crate::segment::barrier::{Arrival, HostBarrier, MAX_COUNT};
use crate::segment::SlotPlace;
use crate::transport::Payload;
use crate::wire::{self, Message, SyncOp};

/// Answers from coordinators, not yet taken.
#[derive(Default)]
pub(crate) struct Answers {
    /// The newest generation heard of, per rendezvous.
    awake: HashMap<u32, u64>,
    /// The generation this client last consumed, per rendezvous.
    pub(super) consumed: HashMap<u32, u64>,
    /// The ticket of this client's next barrier arrival or wakeup: the
    /// coordinator echoes it, so each answer reaches the call it answers.
    next_ticket: u64,
    /// Wakeups sent and not answered yet: ticket -> rendezvous.
    wakeups: HashMap<u64, u32>,
    /// Rendezvous calls waiting: how many, by id and the generation they
    /// have seen (`client/failover.rs` asks again for them).
    sleeping: HashMap<(u32, u64), u32>,
    /// Tickets of wakeups applied whose calls have not taken the answer
    /// yet.
    wakeups_done: HashSet<u64>,
    /// Barrier answers not taken yet, by ticket.
    barriers: HashMap<u64, BarrierAnswer>,
    /// Barrier arrivals sent and not answered yet: ticket -> the arrival
    /// and its pushes (sent again as they were if this client's server is
    /// lost with them: `client/failover.rs`).
    pending: HashMap<u64, (SyncOp, Vec<u8>)>,
    /// How many lost processes coordinators have told each thread of (a
    /// run with recovery) through its barrier calls: its barrier arrivals
    /// say so ([`crate::sync`]). Per thread, not per process: every thread
    /// learns of a loss from a failed call of its own, and so knows to call
    /// again with the count left, whatever the other threads did first.
    losses: HashMap<ThreadId, u32>,
    /// The thread that made each barrier arrival not answered yet.
    callers: HashMap<u64, ThreadId>,
    /// The same, told through its rendezvous calls: its sleeps say so.
    /// Apart, so that each kind of call fails once after a loss, whichever
    /// comes first.
    sleep_losses: u32,
    /// Per rendezvous, how many times its coordinator dropped this client's
    /// sleepers for a loss ([`SyncOp::SleepLost`]): a call that waits fails
    /// when it grows.
    sleeps_lost: HashMap<u32, u64>,
    /// Barrier calls that gave up before their answer came (a handler
    /// failed while they waited), by ticket: the barrier and the calling
    /// thread. Their answers are discarded when they come.
    abandoned: HashMap<u64, (u32, ThreadId)>,
    /// Where each barrier lives, as its coordinator answered: a host slot,
    /// or None for messages.
    places: HashMap<u32, Option<SlotPlace>>,
    /// The host barriers mapped here.
    host_barriers: HashMap<u32, Option<HostBarrier>>,
    /// Host barrier rounds a call gave up waiting for (a handler failed):
    /// the barrier, the thread and the round's generation. The thread's
    /// next arrival at that barrier waits for the round to end.
    host_abandoned: Vec<(u32, ThreadId, u32)>,
}

/// A coordinator's answer to one barrier arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BarrierAnswer {
    Done,
    /// Refused: the round in progress has this count.
    Refused(u32),
    /// Dropped from its round: the run has lost this many processes.
    Lost(u32),
}

impl Answers {
    pub fn on_answer(&mut self, op: SyncOp, events: &mut Queue) {
        match op {
            SyncOp::Awake { id, generation } => {
                let g = self.awake.entry(id).or_default();
                *g = (*g).max(generation);
            }
            SyncOp::BarrierDone { id, ticket } => {
                self.barrier_answer(id, ticket, BarrierAnswer::Done)
            }
            SyncOp::BarrierRefused { id, count, ticket } => {
                self.barrier_answer(id, ticket, BarrierAnswer::Refused(count))
            }
            SyncOp::BarrierLost { id, ticket, losses } => {
                // Told, even if the call gave up: its thread's next arrival
                // is not dropped again for the same losses.
                if let Some(&thread) = self.callers.get(&ticket) {
                    let told = self.losses.entry(thread).or_default();
                    *told = (*told).max(losses);
                }
                self.barrier_answer(id, ticket, BarrierAnswer::Lost(losses))
            }
            SyncOp::SleepLost { id, losses } => {
                self.sleep_losses = self.sleep_losses.max(losses);
                *self.sleeps_lost.entry(id).or_default() += 1;
            }
            SyncOp::BarrierAt { id, place } => {
                self.places.insert(id, place);
            }
            SyncOp::WakeupDone { ticket, .. } => {
                if self.wakeups.remove(&ticket).is_some() {
                    self.wakeups_done.insert(ticket);
                }
            }
            SyncOp::SignalSubscribed { id } => events.signal_subscribed(id),
            SyncOp::Signal { id } => events.signalled(id),
            other => tracing::warn!("dropped {other:?}: a request, not an answer"),
        }
    }

    /// This client's server was lost with the arrivals and wakeups it
    /// carried (`client/failover.rs`): the requests to send again, as they
    /// were, through the stand-in. Each may have reached its coordinator
    /// or not; the coordinator knows which of a client's tickets it has
    /// taken (`Coordinator::on_request`), so that a wakeup is applied once
    /// and an arrival counted once, and the waiting call gets the answer
    /// its first request would have had.
    pub fn in_flight(&self) -> Vec<(SyncOp, Vec<u8>)> {
        let mut again: Vec<(u64, (SyncOp, Vec<u8>))> = (self.pending.iter())
            .map(|(&t, a)| (t, a.clone()))
            .collect();
        again.extend(
            (self.wakeups.iter())
                .map(|(&ticket, &id)| (ticket, (SyncOp::Wakeup { id, ticket }, Vec::new()))),
        );
        // In the order they were first made.
        again.sort_unstable_by_key(|(t, _)| *t);
        again.into_iter().map(|(_, a)| a).collect()
    }

    /// The rendezvous calls waiting: (id, the generation they have seen),
    /// the lowest first for each id. Asked again in that order, the
    /// coordinator answers those past which a wakeup came, and keeps an
    /// entry for the first that must wait.
    pub fn sleeps_again(&self) -> Vec<(u32, u64)> {
        let mut again: Vec<(u32, u64)> = self.sleeping.keys().copied().collect();
        again.sort_unstable();
        again
    }

    /// How many lost processes this client's rendezvous calls have been
    /// told of.
    pub fn sleep_losses(&self) -> u32 {
        self.sleep_losses
    }

    fn sleep_started(&mut self, id: u32, seen: u64) {
        *self.sleeping.entry((id, seen)).or_default() += 1;
    }

    fn sleep_ended(&mut self, id: u32, seen: u64) {
        if let Some(n) = self.sleeping.get_mut(&(id, seen)) {
            *n -= 1;
            if *n == 0 {
                self.sleeping.remove(&(id, seen));
            }
        }
    }

    fn barrier_answer(&mut self, id: u32, ticket: u64, answer: BarrierAnswer) {
        self.callers.remove(&ticket);
        if self.pending.remove(&ticket).is_none() {
            // Answered already: an arrival sent again after a server's loss
            // (`client/failover.rs`) may be answered twice.
            tracing::debug!("barrier {id}: a second answer to arrival {ticket}: dropped");
            return;
        }
        if self.abandoned.remove(&ticket).is_some() {
            tracing::debug!(
                "barrier {id}: the answer to arrival {ticket} ({answer:?}) is discarded: \
                 its call gave up when a handler failed"
            );
        } else {
            self.barriers.insert(ticket, answer);
        }
    }
}

impl Client {
    fn sync_send(&self, op: SyncOp) -> SatResult<()> {
        self.sync_send_with(op, &[])
    }

    /// [`Client::sync_send`] with a payload (a barrier arrival's pushes).
    fn sync_send_with(&self, op: SyncOp, payload: &[u8]) -> SatResult<()> {
        let mut st = self.lock();
        let st = &mut *st;
        if matches!(op, SyncOp::Raise { .. }) {
            st.mail.events.count_published();
        }
        let msg = Message::Sync {
            client: self.rank,
            op,
        };
        let n = wire::encode(&msg, &mut st.header).expect("fits");
        let payload = if payload.is_empty() {
            Payload::None
        } else {
            Payload::Copy(payload)
        };
        st.transport.send(st.server, &st.header[..n], payload)?;
        Ok(())
    }

    /// wakeup: wakes every process sleeping on rendezvous `id`, and is
    /// remembered for the next one to come (a rendezvous after a wakeup
    /// returns at once). Wakeups that no rendezvous consumed in between
    /// count as one. Returns once the rendezvous' coordinator has applied
    /// it (one round trip), so that a rendezvous called after it returned,
    /// in any process, sees it ([`crate::sync`]).
    pub fn wakeup(&self, id: u32) -> SatResult<()> {
        let ticket = {
            let mut st = self.lock();
            let sync = &mut st.mail.sync;
            let ticket = sync.next_ticket;
            sync.next_ticket += 1;
            sync.wakeups.insert(ticket, id);
            ticket
        };
        if let Err(e) = self.sync_send(SyncOp::Wakeup { id, ticket }) {
            self.lock().mail.sync.wakeups.remove(&ticket);
            return Err(e);
        }
        // A server's loss does not end the wait: the wakeup is sent again
        // through the stand-in and applied once (`client/failover.rs`).
        self.wait_inner(None, WaitFor::Reply, None, |st| {
            st.mail.sync.wakeups_done.remove(&ticket).then_some(())
        })?
        .expect("a wait without a deadline ends with its value");
        Ok(())
    }

    /// rendezvous (the report's `sleep`): waits for a wakeup on `id` that
    /// this process has not consumed yet, sent before or after this call.
    ///
    /// Threads of one process: a call returns on a wakeup newer than the
    /// process had consumed when the call began, so a wakeup releases every
    /// call that began before one of them returned on it; a later call
    /// waits for the next wakeup. How many of several threads' calls made
    /// close together one wakeup releases depends on their timing: one id
    /// per thread hands each wakeup to one thread.
    ///
    /// A rendezvous that fails (a handler run while it waits returned an
    /// error) consumes no wakeup: one that comes later, or came while the
    /// handler ran, is kept for the next rendezvous, which returns with it;
    /// the one after that waits for another wakeup. Nothing else is left
    /// behind: the coordinator keeps one sleeper entry per client, and one
    /// Awake only raises the generation this client has heard of.
    ///
    /// In a run with recovery, a call that waits when the run loses a
    /// process, or the first one after the loss, fails with
    /// [`SatError::ProcessLost`] ([`crate::sync`]): its wakeup may have been
    /// the lost process's to send. Called again, it returns on a wakeup sent
    /// before or after.
    pub fn rendezvous(&self, id: u32) -> SatResult<()> {
        let (seen, losses, dropped) = {
            let mut st = self.lock();
            let seen = st.mail.sync.consumed.get(&id).copied().unwrap_or(0);
            // Counted before the request leaves: a loss of this process's
            // server after it asks again (`client/failover.rs`).
            st.mail.sync.sleep_started(id, seen);
            let dropped = st.mail.sync.sleeps_lost.get(&id).copied().unwrap_or(0);
            (seen, st.mail.sync.sleep_losses, dropped)
        };
        let waited = self
            .sync_send(SyncOp::Sleep { id, seen, losses })
            .and_then(|()| {
                self.wait_running_handlers(None, |st| {
                    let g = st.mail.sync.awake.get(&id).copied().unwrap_or(0);
                    if g > seen {
                        let c = st.mail.sync.consumed.entry(id).or_default();
                        *c = (*c).max(g);
                        return Some(Ok(()));
                    }
                    let now = st.mail.sync.sleeps_lost.get(&id).copied().unwrap_or(0);
                    (now > dropped).then(|| {
                        Err(SatError::ProcessLost(format!(
                            "rendezvous {id}: the run has lost {} process(es) since this \
                             process was last told, and the wakeup this call waits for may \
                             have been one of theirs to send; call it again if another process \
                             will wake it (a wakeup sent before or after still counts)",
                            st.mail.sync.sleep_losses
                        )))
                    })
                })
            });
        self.lock().mail.sync.sleep_ended(id, seen);
        waited?.unwrap_or(Ok(()))
    }

    /// barrier: waits until `count` calls of barrier `id` (from any
    /// processes) have arrived, then all of them return. The first arrival
    /// of a round fixes its count: another count is an error.
    ///
    /// A call that fails while it waits (a handler run meanwhile returned an
    /// error) has still arrived: the coordinator counted it, and withdrawing
    /// it could not be made reliable (the round may have closed already, so
    /// whether the others pass would depend on timing). So its round goes on
    /// without this call, the round's answer is discarded when it comes, and
    /// the same thread's next call of barrier `id` first waits for that
    /// round to end, then arrives in the next one. Every process is thus in
    /// each round once, and a later round never opens early on the answer
    /// of an earlier one.
    ///
    /// Chunks whose protocol learns ([`crate::protocol::ProtocolId::learns`])
    /// and that this process read after the same barrier last time are
    /// pushed to it as the round ends (`super::learned`).
    ///
    /// In a run with recovery, each thread's first call after the run lost
    /// a process fails with [`SatError::ProcessLost`] and does not count,
    /// whether it arrived before the loss or after ([`crate::sync`]): call
    /// again with the number of calls the round can still get (a lost
    /// client's calls are gone; a lost server takes no client with it).
    /// Every thread learns of a loss from a call of its own (a thread that
    /// starts after the loss, at its first call), so each knows to call
    /// again with the new count whatever the others did first.
    pub fn barrier(&self, id: u32, count: u32) -> SatResult<()> {
        let fetch = self.learned_arrival(id);
        self.barrier_round(id, count, &fetch)?;
        self.lock().learned.passed(id);
        crate::stats::barrier(id);
        Ok(())
    }

    fn barrier_round(&self, id: u32, count: u32, fetch: &[u8]) -> SatResult<()> {
        if count == 0 {
            return Err(SatError::Usage(format!(
                "barrier {id} with a count of 0: give the number of calls to wait for (each calling thread of each process arrives once)"
            )));
        }
        if self.host_sync.load(std::sync::atomic::Ordering::Relaxed) {
            if let Some(b) = self.host_barrier(id)? {
                return self.barrier_on_host(&b, id, count);
            }
        }
        let me = std::thread::current().id();
        // This thread's arrival in a round it gave up on is still counted
        // there: arriving again before that round ends would count this
        // thread twice in one round.
        self.wait_running_handlers(None, |st| {
            let mut abandoned = st.mail.sync.abandoned.values();
            (!abandoned.any(|&(b, t)| b == id && t == me)).then_some(())
        })?;
        let (ticket, arrival) = {
            let mut st = self.lock();
            let sync = &mut st.mail.sync;
            let ticket = sync.next_ticket;
            sync.next_ticket += 1;
            let arrival = SyncOp::Barrier {
                id,
                count,
                ticket,
                losses: sync.losses.get(&me).copied().unwrap_or(0),
            };
            sync.pending.insert(ticket, (arrival, fetch.to_vec()));
            sync.callers.insert(ticket, me);
            (ticket, arrival)
        };
        self.sync_send_with(arrival, fetch)?;
        let waited = self.wait_running_handlers(None, |st| st.mail.sync.barriers.remove(&ticket));
        let answer = match waited {
            Ok(answer) => answer,
            Err(e) => {
                // The answer may have come while the handler ran (the round
                // is over: drop it); else it is discarded when it comes.
                let mut st = self.lock();
                if st.mail.sync.barriers.remove(&ticket).is_none() {
                    st.mail.sync.abandoned.insert(ticket, (id, me));
                }
                return Err(e);
            }
        };
        match answer {
            Some(BarrierAnswer::Done) => Ok(()),
            Some(BarrierAnswer::Refused(in_force)) => Err(SatError::Usage(format!(
                "barrier {id} with a count of {count}: the round in progress waits for \
                 {in_force} calls; every call of a round must give the same count"
            ))),
            Some(BarrierAnswer::Lost(losses)) => Err(SatError::ProcessLost(format!(
                "barrier {id}: the run has lost {losses} process(es) since this thread was \
                 last told, and the round may count on one of them; call the barrier again \
                 with the number of calls the round can still get: a lost client's are gone, a \
                 lost server takes no client with it (this call did not count)"
            ))),
            None => Err(SatError::Timeout(format!("barrier {id}: no answer"))),
        }
    }

    /// Barrier `id` in its host slot, asking its coordinator where that is
    /// the first time; None when the barrier works by messages.
    fn host_barrier(&self, id: u32) -> SatResult<Option<HostBarrier>> {
        if let Some(b) = self.lock().mail.sync.host_barriers.get(&id) {
            return Ok(b.clone());
        }
        self.sync_send(SyncOp::BarrierPlace { id })?;
        let place = self
            .wait(None, |st| st.mail.sync.places.get(&id).copied())?
            .flatten();
        let mut st = self.lock();
        let st = &mut *st;
        let barrier = match place {
            Some(place) => Some(st.host.open_barrier(id, &place)?),
            None => None,
        };
        st.mail.sync.host_barriers.insert(id, barrier.clone());
        Ok(barrier)
    }

    /// [`Client::barrier`] on a host barrier: an atomic arrival in the slot,
    /// then a wait for the round to end, no message either way. Handlers of
    /// events run meanwhile, as in a barrier by messages.
    fn barrier_on_host(&self, b: &HostBarrier, id: u32, count: u32) -> SatResult<()> {
        if count > MAX_COUNT {
            return Err(SatError::Usage(format!(
                "barrier {id} with a count of {count}: at most {MAX_COUNT} processes"
            )));
        }
        let me = std::thread::current().id();
        // A round this thread gave up on still counts it: arriving again
        // before that round ends would count it twice.
        self.wait_running_handlers(None, |st| {
            let abandoned = &mut st.mail.sync.host_abandoned;
            abandoned.retain(|&(bid, t, g)| !(bid == id && t == me && b.passed(g)));
            (!abandoned.iter().any(|&(bid, t, _)| bid == id && t == me)).then_some(())
        })?;
        let generation = match b.arrive(count) {
            Arrival::Refused { in_force } => {
                return Err(SatError::Usage(format!(
                    "barrier {id} with a count of {count}: the round in progress waits for \
                     {in_force} calls; every call of a round must give the same count"
                )))
            }
            Arrival::Counted { last: true, .. } => return Ok(()),
            Arrival::Counted { generation, .. } => generation,
        };
        // The last arrival announces the round's end in the slot.
        match self.wait_inner(None, WaitFor::PeersRunningHandlers, Some(b.slot()), |_| {
            b.passed(generation).then_some(())
        }) {
            Ok(_) => Ok(()),
            Err(e) => {
                let mut st = self.lock();
                st.mail.sync.host_abandoned.push((id, me, generation));
                Err(e)
            }
        }
    }

    /// Raises signal `id`: every process subscribed to it runs its handler.
    pub fn raise(&self, id: u32) -> SatResult<()> {
        self.sync_send(SyncOp::Raise { id })
    }
}

#[cfg(test)]
mod tests {
    use super::Answers;

    /// The rendezvous a failover asks for again: each waiting (id, seen)
    /// once, the lowest seen first for an id, gone when its calls end.
    #[test]
    fn waiting_rendezvous_are_asked_again_lowest_seen_first() {
        let mut a = Answers::default();
        a.sleep_started(5, 2);
        a.sleep_started(5, 0);
        a.sleep_started(5, 2);
        a.sleep_started(3, 1);
        assert_eq!(a.sleeps_again(), [(3, 1), (5, 0), (5, 2)]);
        a.sleep_ended(5, 2);
        assert_eq!(a.sleeps_again(), [(3, 1), (5, 0), (5, 2)]);
        a.sleep_ended(5, 2);
        a.sleep_ended(3, 1);
        assert_eq!(a.sleeps_again(), [(5, 0)]);
    }
}
