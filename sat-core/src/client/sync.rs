//! Synchronization objects as a client uses them (section 2.4); their
//! semantics are set by the coordinator, see [`crate::sync`].

use std::collections::{HashMap, VecDeque};

use super::events::Queue;
use super::Client;
use crate::error::{SatError, SatResult};
use crate::transport::Payload;
use crate::wire::{self, Message, SyncOp};

/// Answers from coordinators, not yet taken.
#[derive(Default)]
pub(crate) struct Answers {
    /// The newest generation heard of, per rendezvous.
    awake: HashMap<u32, u64>,
    /// The generation this client last consumed, per rendezvous.
    consumed: HashMap<u32, u64>,
    /// Barrier answers per id, in arrival order: Ok, or the count in force.
    barriers: HashMap<u32, VecDeque<Result<(), u32>>>,
}

impl Answers {
    pub fn on_answer(&mut self, op: SyncOp, events: &mut Queue) {
        match op {
            SyncOp::Awake { id, generation } => {
                let g = self.awake.entry(id).or_default();
                *g = (*g).max(generation);
            }
            SyncOp::BarrierDone { id } => self.barriers.entry(id).or_default().push_back(Ok(())),
            SyncOp::BarrierRefused { id, count } => {
                self.barriers.entry(id).or_default().push_back(Err(count))
            }
            SyncOp::SignalSubscribed { id } => events.signal_subscribed(id),
            SyncOp::Signal { id } => events.signalled(id),
            other => tracing::warn!("dropped {other:?}: a request, not an answer"),
        }
    }
}

impl Client {
    fn sync_send(&self, op: SyncOp) -> SatResult<()> {
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
        st.transport
            .send(self.server, &st.header[..n], Payload::None)?;
        Ok(())
    }

    /// wakeup: wakes every process sleeping on rendezvous `id`, and is
    /// remembered for the next one to come (a rendezvous after a wakeup
    /// returns at once). Wakeups that no rendezvous consumed in between
    /// count as one.
    pub fn wakeup(&self, id: u32) -> SatResult<()> {
        self.sync_send(SyncOp::Wakeup { id })
    }

    /// rendezvous (the report's `sleep`): waits for a wakeup on `id` that
    /// this process has not consumed yet, sent before or after this call.
    pub fn rendezvous(&self, id: u32) -> SatResult<()> {
        let seen = self
            .lock()
            .mail
            .sync
            .consumed
            .get(&id)
            .copied()
            .unwrap_or(0);
        self.sync_send(SyncOp::Sleep { id, seen })?;
        self.wait_running_handlers(None, |st| {
            let g = st.mail.sync.awake.get(&id).copied().unwrap_or(0);
            (g > seen).then(|| {
                let c = st.mail.sync.consumed.entry(id).or_default();
                *c = (*c).max(g);
            })
        })?;
        Ok(())
    }

    /// barrier: waits until `count` calls of barrier `id` (from any
    /// processes) have arrived, then all of them return. The first arrival
    /// of a round fixes its count: another count is an error.
    pub fn barrier(&self, id: u32, count: u32) -> SatResult<()> {
        if count == 0 {
            return Err(SatError::Usage(format!(
                "barrier {id} with a count of 0: give the number of processes to wait for"
            )));
        }
        self.sync_send(SyncOp::Barrier { id, count })?;
        let answer = self.wait_running_handlers(None, |st| {
            st.mail
                .sync
                .barriers
                .get_mut(&id)
                .and_then(VecDeque::pop_front)
        })?;
        match answer {
            Some(Ok(())) => Ok(()),
            Some(Err(in_force)) => Err(SatError::Usage(format!(
                "barrier {id} with a count of {count}: the round in progress waits for \
                 {in_force} processes; every process must give the same count"
            ))),
            None => Err(SatError::Timeout(format!("barrier {id}: no answer"))),
        }
    }

    /// Raises signal `id`: every process subscribed to it runs its handler.
    pub fn raise(&self, id: u32) -> SatResult<()> {
        self.sync_send(SyncOp::Raise { id })
    }
}
