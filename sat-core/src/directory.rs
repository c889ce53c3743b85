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

use std::collections::HashMap;
use std::time::Instant;

use crate::transport::Rank;
use crate::wire::AllocOutcome;

#[derive(Debug, Default)]
pub struct AllocDirectory {
    sizes: HashMap<u64, u64>,
    parked: HashMap<u64, Vec<(Rank, Instant)>>,
}

impl AllocDirectory {
    /// Records a MALLOC; returns the answer for `client` and the parked
    /// LOOKUPs it satisfies.
    pub fn malloc(&mut self, chunk: u64, size: u64) -> (AllocOutcome, Vec<(Rank, AllocOutcome)>) {
        if let Some(&existing) = self.sizes.get(&chunk) {
            let outcome = if existing == size {
                AllocOutcome::Size(size)
            } else {
                AllocOutcome::SizeMismatch { existing }
            };
            return (outcome, Vec::new());
        }
        self.sizes.insert(chunk, size);
        let woken = self
            .parked
            .remove(&chunk)
            .unwrap_or_default()
            .into_iter()
            .map(|(client, _)| (client, AllocOutcome::Size(size)))
            .collect();
        (AllocOutcome::Size(size), woken)
    }

    /// A LOOKUP: the answer now, or None when it is parked until `deadline`.
    pub fn lookup(&mut self, chunk: u64, client: Rank, deadline: Instant) -> Option<AllocOutcome> {
        if let Some(&size) = self.sizes.get(&chunk) {
            return Some(AllocOutcome::Size(size));
        }
        self.parked
            .entry(chunk)
            .or_default()
            .push((client, deadline));
        None
    }

    /// Whether any LOOKUP is waiting (the server then checks deadlines).
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// The LOOKUPs whose time ran out at `now`: (chunk, client), removed.
    pub fn expire(&mut self, now: Instant) -> Vec<(u64, Rank)> {
        let mut expired = Vec::new();
        self.parked.retain(|&chunk, waiting| {
            waiting.retain(|&(client, deadline)| {
                let late = deadline <= now;
                if late {
                    expired.push((chunk, client));
                }
                !late
            });
            !waiting.is_empty()
        });
        expired
    }

    pub fn size_of(&self, chunk: u64) -> Option<u64> {
        self.sizes.get(&chunk).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lookup_before_and_after_malloc() {
        let mut d = AllocDirectory::default();
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(d.lookup(42, 3, later), None, "parked");
        assert_eq!(d.lookup(42, 4, later), None, "parked");
        let (mine, woken) = d.malloc(42, 256);
        assert_eq!(mine, AllocOutcome::Size(256));
        assert_eq!(
            woken,
            vec![(3, AllocOutcome::Size(256)), (4, AllocOutcome::Size(256))]
        );
        assert!(!d.has_parked());
        assert_eq!(d.lookup(42, 5, later), Some(AllocOutcome::Size(256)));
    }

    #[test]
    fn malloc_joins_the_same_size_and_refuses_another() {
        let mut d = AllocDirectory::default();
        assert_eq!(d.malloc(7, 100).0, AllocOutcome::Size(100));
        assert_eq!(d.malloc(7, 100).0, AllocOutcome::Size(100));
        assert_eq!(
            d.malloc(7, 50).0,
            AllocOutcome::SizeMismatch { existing: 100 }
        );
        assert_eq!(d.size_of(7), Some(100));
    }

    #[test]
    fn lookups_expire_at_their_own_deadline() {
        let mut d = AllocDirectory::default();
        let now = Instant::now();
        d.lookup(1, 3, now + Duration::from_millis(10));
        d.lookup(1, 4, now + Duration::from_secs(60));
        assert_eq!(d.expire(now), Vec::<(u64, Rank)>::new());
        assert_eq!(d.expire(now + Duration::from_millis(20)), vec![(1, 3)]);
        assert!(d.has_parked());
        assert_eq!(d.malloc(1, 8).1, vec![(4, AllocOutcome::Size(8))]);
    }
}
