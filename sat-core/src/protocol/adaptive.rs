//! Which protocol an adaptive chunk moves to ([`ProtocolId::Adaptive`]).
//!
//! An adaptive chunk starts on home-based MESI. Its home watches the
//! requests MESI brings it: each read miss (and whether it is the reader's
//! first READ of the chunk since it last passed a barrier) and each write
//! request (and whether it found the chunk busy with another's). After
//! [`DECIDE_AFTER_WRITES`] write requests, or [`DECIDE_AFTER_REQUESTS`]
//! requests of any kind, it chooses once, by the rules of the offline
//! adviser (`tools/sat-stats --advise`, docs/PROTOCOLS.md) restated for
//! what a home can see:
//!
//! | what the home saw | protocol |
//! |---|---|
//! | no write | stays on MESI |
//! | one writer; others' read misses at least half its writes, at least half of those the first READ after a barrier | learned sets |
//! | one writer; one other process reads, missing after at least half its writes | home-only |
//! | one writer; others' read misses at least half its writes | update-based MESI |
//! | one writer, nobody else reads | MESI with E |
//! | one writer, others rarely miss | stays on MESI |
//! | several writers, at least 30% of write requests find another's under way | MESI with E |
//! | several writers taking turns | home-only |
//!
//! A home cannot see read hits, so "readers mostly miss" becomes "readers
//! miss after most writes": under MESI a reader misses at most once per
//! write, so that is when pushing each version (update) or fetching it at
//! the home would pay. With a single reader, a push saves that reader one
//! round trip and costs the writer one (the copy it pushes to must first be
//! invalidated, by a process that may be busy): home-only costs the same
//! messages and never makes the writer wait for the reader (the video
//! pipeline's frames, each read by the next stage only).
//!
//! The choice is made once: a chunk whose pattern changes later keeps it
//! (a switch costs a round of messages to every process that used the
//! chunk, and a chunk moved back and forth would pay it again and again).
//! The mechanics of the switch are the server's (`server/switch.rs`) and the
//! client runtime's (`client/switch.rs`).

use std::collections::BTreeMap;

use super::ProtocolId;
use crate::transport::Rank;

/// Write requests seen before the home chooses.
pub const DECIDE_AFTER_WRITES: u32 = 8;
/// Requests of any kind seen before the home chooses (a chunk mostly read).
pub const DECIDE_AFTER_REQUESTS: u32 = 32;

/// The protocols an adaptive chunk may move to: those whose single-writer
/// coherence is MESI's or home-only's. Multiple writers is not among them:
/// overlapping writers lose each other's bytes under it, which a program
/// written for MESI does not expect.
pub const TARGETS: [ProtocolId; 5] = [
    ProtocolId::HomeMesi,
    ProtocolId::HomeOnly,
    ProtocolId::MesiExclusive,
    ProtocolId::UpdateMesi,
    ProtocolId::LearnedMesi,
];

/// One request the home served, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A read miss; `after_barrier`: the reader's first READ of the chunk
    /// since it last passed a barrier.
    Read { after_barrier: bool },
    /// A write request; `contended`: it found another client's write (or a
    /// request) under way.
    Write { contended: bool },
}

/// The home's choice, and the rule that made it (for the debug stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub protocol: ProtocolId,
    pub why: &'static str,
}

/// What a home has seen of one adaptive chunk's requests so far.
#[derive(Debug, Default, Clone)]
pub struct Observer {
    writes: BTreeMap<Rank, u32>,
    misses: BTreeMap<Rank, u32>,
    /// Read misses that were their reader's first READ after a barrier.
    after_barrier: BTreeMap<Rank, u32>,
    contended: u32,
    requests: u32,
}

impl Observer {
    /// Records a request of `from`; returns the choice once enough has been
    /// seen (then the observer's work is over).
    pub fn see(&mut self, from: Rank, seen: Seen) -> Option<Choice> {
        self.requests += 1;
        match seen {
            Seen::Read { after_barrier } => {
                *self.misses.entry(from).or_default() += 1;
                if after_barrier {
                    *self.after_barrier.entry(from).or_default() += 1;
                }
            }
            Seen::Write { contended } => {
                *self.writes.entry(from).or_default() += 1;
                self.contended += u32::from(contended);
            }
        }
        let writes: u32 = self.writes.values().sum();
        (writes >= DECIDE_AFTER_WRITES || self.requests >= DECIDE_AFTER_REQUESTS)
            .then(|| self.choose())
    }

    /// The process that made at least half of the write requests, if one
    /// did: the chunk's home moves to its server (li_hudak's migratory
    /// ownership, at the grain of a home: its requests then take no hop
    /// between servers).
    pub fn heaviest_writer(&self) -> Option<Rank> {
        let writes: u32 = self.writes.values().sum();
        self.writes
            .iter()
            .find(|&(_, &n)| 2 * n >= writes && n > 0)
            .map(|(&r, _)| r)
    }

    /// The rules of the module's table, on what has been seen.
    pub fn choose(&self) -> Choice {
        let writes: u32 = self.writes.values().sum();
        let others = |counts: &BTreeMap<Rank, u32>| -> u32 {
            counts
                .iter()
                .filter(|(r, _)| !self.writes.contains_key(r))
                .map(|(_, n)| n)
                .sum()
        };
        let choice = |protocol, why| Choice { protocol, why };
        match self.writes.len() {
            0 => choice(
                ProtocolId::HomeMesi,
                "no write: cached copies serve the reads",
            ),
            1 => {
                let misses = others(&self.misses);
                let after = others(&self.after_barrier);
                let readers = self
                    .misses
                    .keys()
                    .filter(|r| !self.writes.contains_key(r))
                    .count();
                if misses == 0 {
                    choice(
                        ProtocolId::MesiExclusive,
                        "one writer and nobody else reads: E opens its write scopes with no message",
                    )
                } else if 2 * misses >= writes && 2 * after >= misses {
                    choice(
                        ProtocolId::LearnedMesi,
                        "one writer; readers miss after its writes, right after barriers: pushed as the barrier ends",
                    )
                } else if 2 * misses >= writes && readers == 1 {
                    choice(
                        ProtocolId::HomeOnly,
                        "one writer and one reader, who misses after its writes: at the home, the writer never waits for the reader",
                    )
                } else if 2 * misses >= writes {
                    choice(
                        ProtocolId::UpdateMesi,
                        "one writer; readers miss after its writes: its releases push them the version",
                    )
                } else {
                    choice(ProtocolId::HomeMesi, "one writer; readers rarely miss")
                }
            }
            _ => {
                if 10 * self.contended >= 3 * writes {
                    choice(
                        ProtocolId::MesiExclusive,
                        "several writers contend: the holder writes again with no message",
                    )
                } else {
                    choice(
                        ProtocolId::HomeOnly,
                        "several writers take turns: every scope at the home, no invalidations",
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seen: &[(Rank, Seen)]) -> Option<Choice> {
        let mut o = Observer::default();
        seen.iter().fold(None, |got, &(r, s)| got.or(o.see(r, s)))
    }

    fn write(contended: bool) -> Seen {
        Seen::Write { contended }
    }

    fn read(after_barrier: bool) -> Seen {
        Seen::Read { after_barrier }
    }

    #[test]
    fn nothing_is_chosen_before_enough_is_seen() {
        let seen: Vec<_> = (0..DECIDE_AFTER_WRITES - 1)
            .map(|_| (1, write(false)))
            .collect();
        assert_eq!(run(&seen), None);
        let seen: Vec<_> = (0..DECIDE_AFTER_REQUESTS - 1)
            .map(|i| (i % 4, read(false)))
            .collect();
        assert_eq!(run(&seen), None);
    }

    #[test]
    fn each_rule_fires_on_its_pattern() {
        let n = DECIDE_AFTER_WRITES;
        // A producer and three consumers that read every version.
        let mut seen = Vec::new();
        for _ in 0..n {
            seen.push((1, write(false)));
            seen.extend((2..5).map(|r| (r, read(false))));
        }
        assert_eq!(run(&seen).unwrap().protocol, ProtocolId::UpdateMesi);
        // The same reads, right after barriers: a stencil's.
        let seen: Vec<_> = seen
            .iter()
            .map(|&(r, s)| match s {
                Seen::Read { .. } => (r, read(true)),
                w => (r, w),
            })
            .collect();
        assert_eq!(run(&seen).unwrap().protocol, ProtocolId::LearnedMesi);
        // A stage of a pipeline: one writer, one reader of each version.
        let seen: Vec<_> = (0..n)
            .flat_map(|_| [(1, write(false)), (2, read(false))])
            .collect();
        assert_eq!(run(&seen).unwrap().protocol, ProtocolId::HomeOnly);
        // A lone writer.
        let seen: Vec<_> = (0..n).map(|_| (3, write(false))).collect();
        assert_eq!(run(&seen).unwrap().protocol, ProtocolId::MesiExclusive);
        // A writer whose readers miss once in a while.
        let mut seen: Vec<_> = (0..n).map(|_| (3, write(false))).collect();
        seen.insert(2, (4, read(false)));
        assert_eq!(run(&seen).unwrap().protocol, ProtocolId::HomeMesi);
        // A counter passed round: several writers, one at a time (their
        // reads do not count as readers').
        let seen: Vec<_> = (0..n)
            .flat_map(|i| [(i % 4, read(false)), (i % 4, write(false))])
            .collect();
        assert_eq!(run(&seen).unwrap().protocol, ProtocolId::HomeOnly);
        // Rows of one chunk written at once: most requests find another's.
        let seen: Vec<_> = (0..n).map(|i| (i % 4, write(i % 2 == 0))).collect();
        assert_eq!(run(&seen).unwrap().protocol, ProtocolId::MesiExclusive);
        // Only reads: nobody to move the home to.
        let mut o = Observer::default();
        for i in 0..3 {
            let _ = o.see(i, read(false));
        }
        assert_eq!(o.heaviest_writer(), None);
        // A writer with half the writes, or none with so many.
        for (r, w) in [(1, 4), (2, 3), (3, 1)] {
            for _ in 0..w {
                let _ = o.see(r, write(false));
            }
        }
        assert_eq!(o.heaviest_writer(), Some(1));
        let _ = o.see(2, write(false));
        assert_eq!(o.heaviest_writer(), None, "4, 4 and 1 writes");
        // Only reads.
        let seen: Vec<_> = (0..DECIDE_AFTER_REQUESTS)
            .map(|i| (i % 4, read(false)))
            .collect();
        assert_eq!(run(&seen).unwrap().protocol, ProtocolId::HomeMesi);
    }

    #[test]
    fn every_choice_is_a_target() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut o = Observer::default();
            for _ in 0..DECIDE_AFTER_REQUESTS {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let r = (rng % 5) as Rank;
                let s = match rng % 4 {
                    0 => write(rng & 16 != 0),
                    _ => read(rng & 32 != 0),
                };
                if let Some(c) = o.see(r, s) {
                    assert!(TARGETS.contains(&c.protocol), "{c:?}");
                    break;
                }
            }
        }
    }
}
