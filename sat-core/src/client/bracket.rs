//! A chain's release, all or nothing, where the run outlives its clients
//! (a service, a run with recovery): the client's side of
//! `server/bracket.rs`.
//!
//! The chunks' releases leave between `ChainBegin` and `ChainCommit`, all
//! under one hold of the client's lock and with nothing waited for in
//! between: the server holds what comes inside the bracket, so a wait there
//! (a closure that has a chunk's bytes and calls the client, the home's
//! acknowledgement of a diff) would wait for a message held behind it.
//! Host-slot chunks are staged: their bytes go into the slot's next buffer,
//! the write lock stays, and the home makes them the version when the
//! commit comes (`Message::Staged`).

use super::{Chain, Client, ClientState, WaitFor};
use crate::chunk::ChunkId;
use crate::error::{SatError, SatResult};
use crate::transport::{Payload, Rank};
use crate::wire::{self, Message};

/// The largest chain released all or nothing: its server holds the whole
/// release in memory until the commit, which a server with a memory
/// capacity (`server/spill.rs`) could not afford for more. A larger chain
/// is released chunk by chunk.
pub(crate) const MAX_BRACKETED: usize = 256 << 20;

impl Client {
    /// Chain releases of this client apply all or nothing from now on:
    /// where the run outlives its clients (set before the role starts).
    pub(crate) fn release_chains_atomically(&self) {
        self.lock().atomic_chains = true;
    }

    /// Whether `chain`'s release goes in a bracket: several chunks, one of
    /// them written, at most [`MAX_BRACKETED`] bytes, and a run that
    /// outlives its clients.
    pub(super) fn bracketed(&self, chain: &Chain) -> bool {
        let st = self.lock();
        st.atomic_chains
            && chain.len() > 1
            && chain.size() <= MAX_BRACKETED
            && chain
                .ids()
                .any(|id| st.store.get(id).is_some_and(|c| c.side.writing()))
    }

    /// [`Client::release_chain`] in a bracket: every chunk's end under one
    /// hold of the lock, once no closure of another thread has one's bytes;
    /// then the acknowledgements the releases wait for.
    pub(super) fn release_chain_bracketed(&self, chain: &Chain) -> SatResult<()> {
        self.fatal()?;
        let me = super::loans::me();
        let ids: Vec<ChunkId> = chain.ids().collect();
        let released = self.wait(None, |st| {
            // A bracket opens behind what the last one still has to send.
            let to = (self.rank, st.server);
            if !st.bracket_unsent.is_empty() {
                st.flush_bracket(to);
                return None;
            }
            let mut mine = None;
            for &id in &ids {
                match st.loans.in_the_way_of_ending(&self.quick_loan, id, me) {
                    super::loans::Conflict::None => {}
                    super::loans::Conflict::Mine => mine = Some(id),
                    super::loans::Conflict::Others => return None,
                }
            }
            Some(match mine {
                Some(id) => Err(SatError::Usage(format!(
                    "RELEASE of chunk {id} inside a closure that has its bytes (with_data, \
                     with_chain or Scope::data): end the scope after the closure returns"
                ))),
                None => st.release_bracketed(to, &ids),
            })
        })?;
        let (acks, mut first) = released.expect("a wait without a deadline ends with its value")?;
        for (chunk, due) in acks {
            let acked = self.wait_inner(None, WaitFor::Reply, None, |st| due.met(st, chunk))?;
            if let Some(Err(e)) = acked {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// What a bracket leaves to do: the acknowledgements its releases wait
/// for, and the first chunk's error.
type Bracketed = (Vec<(ChunkId, super::AckDue)>, Option<SatError>);

impl ClientState {
    /// The bracket: `ChainBegin`, each chunk's end, `ChainCommit`. Returns
    /// the acknowledgements to wait for, and the first chunk's error (that
    /// chunk stays in its scope; the others are released).
    fn release_bracketed(&mut self, to: (Rank, Rank), ids: &[ChunkId]) -> SatResult<Bracketed> {
        self.send_to_server(to, &Message::ChainBegin { client: to.0 })?;
        self.staging = true;
        let mut acks = Vec::new();
        let mut first = None;
        for &id in ids {
            match self.end_scope_acked(to, id, super::Ending::Release) {
                Ok(Some(ack)) => acks.push((id, ack)),
                Ok(None) => {}
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        self.staging = false;
        #[cfg(debug_assertions)]
        self.pause_before_commit_if_asked();
        // What was sent must be committed, whatever failed in between: what
        // the transport refuses now leaves at the next poll, in order.
        self.bracket_unsent
            .push_back(Message::ChainCommit { client: to.0 });
        self.flush_bracket(to);
        Ok((acks, first))
    }

    /// Debug builds only: with `SAT_TEST_PAUSE_IN_CHAIN_RELEASE` set, a
    /// bracket stops here for good, every chunk's release sent and the
    /// commit not, once the transport has handed them all on; it says so on
    /// stderr. `tests/service.rs` kills the process there, so that a kill
    /// inside a chain's release is certain rather than a matter of timing.
    #[cfg(debug_assertions)]
    fn pause_before_commit_if_asked(&mut self) {
        if std::env::var_os("SAT_TEST_PAUSE_IN_CHAIN_RELEASE").is_none() {
            return;
        }
        let mut announced = false;
        loop {
            // Progress only: this process is about to be killed, so what
            // comes in is of no use.
            let _ = self.transport.poll(&mut |_, _| {});
            if !announced && matches!(self.transport.sends_drained(), Ok(true)) {
                eprintln!("paused inside a chain's release");
                announced = true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Sends what brackets still have to send (staged releases, commits),
    /// in order, until the transport refuses one.
    pub(super) fn flush_bracket(&mut self, to: (Rank, Rank)) {
        while let Some(msg) = self.bracket_unsent.front() {
            let msg = msg.clone();
            if let Err(e) = self.send_to_server(to, &msg) {
                tracing::debug!("a chain's {} waits: {e}", msg.kind());
                return;
            }
            self.bracket_unsent.pop_front();
        }
    }

    fn send_to_server(&mut self, to: (Rank, Rank), msg: &Message) -> SatResult<()> {
        let n = wire::encode(msg, &mut self.header).expect("fits a header");
        self.transport
            .send(to.1, &self.header[..n], Payload::None)?;
        Ok(())
    }

    /// A release of `chunk` into its host slot, inside a bracket: its bytes
    /// go into the slot's next buffer and the home is sent `Staged`. Returns
    /// false, having done nothing, for a slot with one buffer (the release
    /// is then published as usual).
    pub(super) fn stage_host_release(
        &mut self,
        to: (Rank, Rank),
        chunk: ChunkId,
        (slot, place): (&crate::segment::SlotRef, usize),
    ) -> SatResult<bool> {
        let bytes = self.store.bytes(chunk, place).unwrap_or(&[]);
        // SAFETY: the client side releases only a write scope it was
        // granted, so this process holds the slot's write lock.
        let staged = unsafe { slot.slot().stage_held(bytes) };
        let version = match staged {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(false),
            Err(size) => {
                return Err(SatError::Usage(format!(
                    "chunk {chunk}: a release of {} bytes into a slot of {size}",
                    self.store.bytes(chunk, place).map_or(0, <[u8]>::len)
                )))
            }
        };
        let msg = Message::Staged {
            chunk,
            client: to.0,
            version,
        };
        // The slot's lock stays this process's until the home has this:
        // it leaves before the commit, now or at the next poll.
        self.bracket_unsent.push_back(msg);
        self.flush_bracket(to);
        self.mail.events.count_published();
        self.store.spread(chunk, place);
        self.scope_ended(chunk);
        Ok(true)
    }
}
