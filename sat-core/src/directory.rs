//! The allocation directory a home server keeps: which chunks exist, with
//! which size, and the LOOKUPs waiting for a chunk nobody has allocated yet.
//!
//! LOOKUP semantics (the report leaves them open): a LOOKUP returns as soon
//! as any process has MALLOC'd the chunk, whether or not it was written since
//! (unwritten data reads as zeros, version 0). Before that it waits at the
//! home, up to the time the caller allows, so a program is correct whichever
//! of MALLOC and LOOKUP runs first; past that time it fails with an error.
//! A MALLOC of an existing chunk with the same size joins it (every process
//! of a role typically MALLOCs the same chunks); another size is an error.
//!
//! A parked LOOKUP is kept with the client's request number, which its
//! answer carries back (see [`crate::wire::Message::AllocReply`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::chunk::Label;
use crate::protocol::ProtocolId;
use crate::transport::Rank;
use crate::wire::AllocOutcome;

#[derive(Debug, Default)]
pub struct AllocDirectory {
    /// Size, protocol and label of every chunk allocated here.
    chunks: HashMap<u64, (u64, ProtocolId, Label)>,
    /// Parked LOOKUPs by chunk: (client, request, deadline); ordered, so
    /// that they expire in a reproducible order.
    parked: BTreeMap<u64, Vec<(Rank, u64, Instant)>>,
}

impl AllocDirectory {
    /// Records a MALLOC; returns the answer for its client and the parked
    /// LOOKUPs it satisfies, as (client, request, answer).
    pub fn malloc(
        &mut self,
        chunk: u64,
        size: u64,
        protocol: ProtocolId,
        label: Label,
    ) -> (AllocOutcome, Vec<(Rank, u64, AllocOutcome)>) {
        if let Some(&(existing, has, labelled)) = self.chunks.get(&chunk) {
            let outcome = if (existing, has, labelled) == (size, protocol, label) {
                AllocOutcome::Allocated {
                    size,
                    protocol,
                    label,
                }
            } else {
                AllocOutcome::Mismatch {
                    size: existing,
                    protocol: has,
                    label: labelled,
                }
            };
            return (outcome, Vec::new());
        }
        self.chunks.insert(chunk, (size, protocol, label));
        let done = AllocOutcome::Allocated {
            size,
            protocol,
            label,
        };
        let woken = self
            .parked
            .remove(&chunk)
            .unwrap_or_default()
            .into_iter()
            .map(|(client, request, _)| (client, request, done))
            .collect();
        (done, woken)
    }

    /// A LOOKUP: the answer now, or None when it is parked until `deadline`.
    pub fn lookup(
        &mut self,
        chunk: u64,
        client: Rank,
        request: u64,
        deadline: Instant,
    ) -> Option<AllocOutcome> {
        if let Some(&(size, protocol, label)) = self.chunks.get(&chunk) {
            return Some(AllocOutcome::Allocated {
                size,
                protocol,
                label,
            });
        }
        self.parked
            .entry(chunk)
            .or_default()
            .push((client, request, deadline));
        None
    }

    /// Forgets the LOOKUPs `client` has waiting: it left the run.
    pub fn client_left(&mut self, client: Rank) {
        self.parked.retain(|_, waiting| {
            waiting.retain(|&(c, ..)| c != client);
            !waiting.is_empty()
        });
    }

    /// Whether any LOOKUP is waiting (the server then checks deadlines).
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// The LOOKUPs whose time ran out at `now`: (chunk, client, request),
    /// removed.
    pub fn expire(&mut self, now: Instant) -> Vec<(u64, Rank, u64)> {
        let mut expired = Vec::new();
        self.parked.retain(|&chunk, waiting| {
            waiting.retain(|&(client, request, deadline)| {
                let late = deadline <= now;
                if late {
                    expired.push((chunk, client, request));
                }
                !late
            });
            !waiting.is_empty()
        });
        expired
    }

    pub fn size_of(&self, chunk: u64) -> Option<u64> {
        self.chunks.get(&chunk).map(|&(size, ..)| size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MESI: ProtocolId = ProtocolId::HomeMesi;

    const NONE: Label = crate::chunk::NO_LABEL;

    fn allocated(size: u64) -> AllocOutcome {
        AllocOutcome::Allocated {
            size,
            protocol: MESI,
            label: NONE,
        }
    }

    #[test]
    fn lookup_before_and_after_malloc() {
        let mut d = AllocDirectory::default();
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(d.lookup(42, 3, 10, later), None, "parked");
        assert_eq!(d.lookup(42, 4, 20, later), None, "parked");
        let (mine, woken) = d.malloc(42, 256, MESI, NONE);
        assert_eq!(mine, allocated(256));
        assert_eq!(
            woken,
            vec![(3, 10, allocated(256)), (4, 20, allocated(256))],
            "each parked LOOKUP is answered with its own request number"
        );
        assert!(!d.has_parked());
        assert_eq!(d.lookup(42, 5, 30, later), Some(allocated(256)));
    }

    #[test]
    fn malloc_joins_the_same_size_and_refuses_another() {
        let mut d = AllocDirectory::default();
        assert_eq!(d.malloc(7, 100, MESI, NONE).0, allocated(100));
        assert_eq!(d.malloc(7, 100, MESI, NONE).0, allocated(100));
        let has = AllocOutcome::Mismatch {
            size: 100,
            protocol: MESI,
            label: NONE,
        };
        assert_eq!(d.malloc(7, 50, MESI, NONE).0, has);
        assert_eq!(
            d.malloc(7, 100, ProtocolId::HomeOnly, NONE).0,
            has,
            "a chunk keeps the protocol it was created with"
        );
        assert_eq!(
            d.malloc(7, 100, MESI, [1; 32]).0,
            has,
            "a chunk keeps the label it was created with"
        );
        assert_eq!(d.size_of(7), Some(100));
    }

    #[test]
    fn a_label_is_kept_and_returned_to_lookups() {
        let mut d = AllocDirectory::default();
        let later = Instant::now() + Duration::from_secs(60);
        let labelled = AllocOutcome::Allocated {
            size: 64,
            protocol: MESI,
            label: [9; 32],
        };
        assert_eq!(d.lookup(3, 4, 0, later), None);
        assert_eq!(
            d.malloc(3, 64, MESI, [9; 32]),
            (labelled, vec![(4, 0, labelled)])
        );
        assert_eq!(d.malloc(3, 64, MESI, [9; 32]).0, labelled);
        assert_eq!(d.lookup(3, 5, 1, later), Some(labelled));
    }

    #[test]
    fn lookups_expire_at_their_own_deadline() {
        let mut d = AllocDirectory::default();
        let now = Instant::now();
        d.lookup(1, 3, 7, now + Duration::from_millis(10));
        d.lookup(1, 4, 8, now + Duration::from_secs(60));
        assert_eq!(d.expire(now), Vec::<(u64, Rank, u64)>::new());
        assert_eq!(d.expire(now + Duration::from_millis(20)), vec![(1, 3, 7)]);
        assert!(d.has_parked());
        assert_eq!(d.malloc(1, 8, MESI, NONE).1, vec![(4, 8, allocated(8))]);
    }
}
