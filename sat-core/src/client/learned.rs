//! Learned communication sets (FDSM), for the chunks whose protocol learns
//! ([`ProtocolId::learns`](crate::protocol::ProtocolId::learns)).
//!
//! Iterative programs read, after a given barrier, the same chunks every
//! iteration: their neighbours' blocks, the previous step's results. Under
//! MESI each of those reads is a miss that waits for its own round trip.
//! The client runtime learns, per barrier id, which chunks this process
//! READ between passing that barrier and arriving at the next one. When it
//! arrives at the same barrier again, its arrival lists those it holds no
//! valid copy of (in the message's payload). As the round ends, the
//! barrier's coordinator asks their homes to push the process a copy of
//! each ([`crate::protocol::mesi::ToHome::Want`]), before the answers that
//! end the round; the program's READs after the barrier are then hits, with
//! no round trip waited for. A pushed copy serves that one read and is
//! dropped at its release (`protocol/mesi.rs`), so the next writer of the
//! chunk has no copy to invalidate.
//!
//! Why it stays correct whatever the timing:
//! - The round ends once every process has arrived, so every write scope
//!   released before an arrival has been granted by then: a home asked to
//!   push a chunk whose writer's release is still on its way knows the
//!   writer as owner, and pushes nothing.
//! - A home pushes only when nothing holds the chunk, and makes the process
//!   a sharer first: the next writer invalidates that copy as any other,
//!   and its invalidation follows the push on the same path.
//! - The process takes a push only while its copy is invalid, held a
//!   version, and is not asked for: a READ already on its way gets its own
//!   answer. Nothing waits for a push, so a thread that reads the chunk
//!   before the round ends (or a handler run during the barrier) asks the
//!   home as under MESI, and no wait depends on the barrier.
//! - What is learned is only a hint: a chunk that was not read last time is
//!   read by a normal miss, and a chunk pushed for nothing costs one
//!   message.

use std::collections::{BTreeSet, HashMap};

use super::Client;
use crate::chunk::ChunkId;

/// The chunks learned for one barrier, at most: the set of a program that
/// reads more after one barrier is cut (its later reads are plain misses).
/// It also bounds the payload of an arrival (8 bytes per chunk).
pub const MAX_SET: usize = 4096;

/// What the runtime has learned of this process's reads.
#[derive(Debug, Default)]
pub(super) struct Learned {
    /// The barrier this process passed last: reads since then are learned
    /// for it. None before the first barrier and after a failed one.
    since: Option<u32>,
    /// The chunks READ since that barrier.
    reads: BTreeSet<ChunkId>,
    /// Per barrier: the chunks read after it the last time it was passed.
    sets: HashMap<u32, Vec<ChunkId>>,
    /// Barriers passed so far (any id): whether a READ is a chunk's first
    /// since the last one (`client/switch.rs`).
    passes: u64,
}

impl Learned {
    /// A READ scope of `chunk` (of a protocol that learns) has opened.
    pub(super) fn read(&mut self, chunk: ChunkId) {
        if self.since.is_some() && self.reads.len() < MAX_SET {
            self.reads.insert(chunk);
        }
    }

    /// This process arrives at barrier `barrier`: what it read since the
    /// barrier it passed last becomes that barrier's set (replacing what
    /// was learned of it before: a program whose reads change is followed
    /// one iteration late). Returns `barrier`'s set.
    pub(super) fn arriving(&mut self, barrier: u32) -> Vec<ChunkId> {
        let reads = std::mem::take(&mut self.reads);
        if let Some(passed) = self.since.take() {
            self.sets.insert(passed, reads.into_iter().collect());
        }
        self.sets.get(&barrier).cloned().unwrap_or_default()
    }

    /// Barrier `barrier` has ended for this process: the reads that follow
    /// are learned for it.
    pub(super) fn passed(&mut self, barrier: u32) {
        self.since = Some(barrier);
        self.reads.clear();
        self.passes += 1;
    }

    /// Barriers passed so far.
    pub(super) fn passes(&self) -> u64 {
        self.passes
    }
}

impl Client {
    /// The payload of this process's arrival at barrier `id`: the chunks it
    /// read after that barrier last time (those known here, of a protocol
    /// that learns, not in a host slot), as little-endian ids; empty when
    /// there are none. A chunk whose copy is valid now is listed too: a
    /// writer may invalidate it before the round ends, and the home, which
    /// knows, pushes only to a process that is no sharer.
    pub(super) fn learned_arrival(&self, id: u32) -> Vec<u8> {
        let mut st = self.lock();
        let st = &mut *st;
        let set = st.learned.arriving(id);
        let mut payload = Vec::new();
        for chunk in set {
            let Some(c) = st.store.get(chunk) else {
                continue;
            };
            if c.protocol.learns() && c.host.is_none() {
                payload.extend_from_slice(&chunk.to_le_bytes());
            }
        }
        payload
    }
}

/// The chunks a barrier arrival's payload lists, as its coordinator reads
/// them; an error for a payload no client sends.
pub(crate) fn learned_set(payload: &[u8]) -> Result<Vec<ChunkId>, String> {
    if !payload.len().is_multiple_of(8) || payload.len() / 8 > MAX_SET {
        return Err(format!(
            "a list of pushes of {} bytes (8 per chunk, at most {MAX_SET} chunks)",
            payload.len()
        ));
    }
    Ok(payload
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_barrier_learns_what_was_read_after_it_last_time() {
        let mut l = Learned::default();
        // Before any barrier, reads are not learned.
        l.read(5);
        assert!(l.arriving(1).is_empty());
        l.passed(1);
        l.read(7);
        l.read(3);
        // Barrier 2 reached for the first time: nothing learned of it yet.
        assert!(l.arriving(2).is_empty());
        l.passed(2);
        l.read(9);
        assert_eq!(l.arriving(1), vec![3, 7]);
        l.passed(1);
        l.read(4);
        assert_eq!(l.arriving(2), vec![9]);
        l.passed(2);
        // The set follows the program: 1's reads were 4 last time.
        assert_eq!(l.arriving(1), vec![4]);
        l.passed(1);
        // One barrier in a loop: what was read after it since it passed.
        l.read(8);
        assert_eq!(l.arriving(1), vec![8]);
    }

    #[test]
    fn a_payload_no_client_sends_is_an_error() {
        let ids: Vec<u8> = [3u64, u64::MAX]
            .iter()
            .flat_map(|c| c.to_le_bytes())
            .collect();
        assert_eq!(learned_set(&ids), Ok(vec![3, u64::MAX]));
        assert_eq!(learned_set(&[]), Ok(vec![]));
        assert!(learned_set(&ids[..9]).is_err());
        assert!(learned_set(&vec![0; 8 * (MAX_SET + 1)]).is_err());
    }
}
