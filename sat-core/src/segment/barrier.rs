//! A barrier in a host slot: one 64-bit word that every process of the
//! host updates with compare-and-swap.
//!
//! The word packs the round's generation (24 bits), the count the round's
//! first arrival gave (20 bits) and the arrivals so far (20 bits), so an
//! arrival reads and changes all three at once: the last arrival of a round
//! starts the next generation with no arrival, and an arrival can never be
//! counted in a round other than the one whose generation it saw. A process
//! waits until the generation differs from the one it arrived in (the wait
//! is the caller's: a client keeps answering its messages and running its
//! handlers meanwhile).

use std::sync::atomic::Ordering::SeqCst;

use super::SlotRef;

const FIELD: u32 = 20;
const FIELD_MASK: u64 = (1 << FIELD) - 1;
/// The largest count a host barrier takes.
pub const MAX_COUNT: u32 = (1 << FIELD) - 1;
const GENERATION_MASK: u64 = (1 << (64 - 2 * FIELD)) - 1;

/// A barrier's word, in its slot.
#[derive(Debug, Clone)]
pub struct HostBarrier {
    slot: SlotRef,
}

/// What an arrival did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Counted in the round of generation `generation`; `last` when it
    /// completed the round.
    Counted { generation: u32, last: bool },
    /// Refused: the round in progress waits for `in_force` processes.
    Refused { in_force: u32 },
}

fn split(word: u64) -> (u32, u32, u32) {
    (
        (word >> (2 * FIELD)) as u32,
        ((word >> FIELD) & FIELD_MASK) as u32,
        (word & FIELD_MASK) as u32,
    )
}

fn join(generation: u32, count: u32, arrived: u32) -> u64 {
    ((u64::from(generation) & GENERATION_MASK) << (2 * FIELD))
        | (u64::from(count) << FIELD)
        | u64::from(arrived)
}

impl HostBarrier {
    /// The barrier in `slot` (at least 8 bytes, zero when new).
    pub fn new(slot: SlotRef) -> HostBarrier {
        HostBarrier { slot }
    }

    /// Arrives with `count` (1 to [`MAX_COUNT`]).
    pub fn arrive(&self, count: u32) -> Arrival {
        let s = self.slot.slot();
        let word = s.word();
        let mut now = word.load(SeqCst);
        loop {
            let (generation, in_force, arrived) = split(now);
            if arrived > 0 && in_force != count {
                return Arrival::Refused { in_force };
            }
            let last = arrived + 1 == count;
            let next = if last {
                join(generation.wrapping_add(1), 0, 0)
            } else {
                join(generation, count, arrived + 1)
            };
            match word.compare_exchange(now, next, SeqCst, SeqCst) {
                Ok(_) => {
                    if last {
                        s.announce();
                    }
                    return Arrival::Counted { generation, last };
                }
                Err(seen) => now = seen,
            }
        }
    }

    /// Its slot (what a waiter sleeps on).
    pub fn slot(&self) -> &SlotRef {
        &self.slot
    }

    /// Whether the round of `generation` is over.
    pub fn passed(&self, generation: u32) -> bool {
        split(self.slot.slot().word().load(SeqCst)).0 != generation
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::segment::Segment;

    fn barrier() -> HostBarrier {
        let seg = Arc::new(Segment::in_process(4096));
        HostBarrier::new(SlotRef::new(seg, 0, 64).unwrap())
    }

    #[test]
    fn the_last_arrival_ends_the_round_and_a_wrong_count_is_refused() {
        let b = barrier();
        assert_eq!(
            b.arrive(3),
            Arrival::Counted {
                generation: 0,
                last: false
            }
        );
        assert_eq!(b.arrive(2), Arrival::Refused { in_force: 3 });
        assert_eq!(
            b.arrive(3),
            Arrival::Counted {
                generation: 0,
                last: false
            }
        );
        assert!(!b.passed(0));
        assert_eq!(
            b.arrive(3),
            Arrival::Counted {
                generation: 0,
                last: true
            }
        );
        assert!(b.passed(0));
        // The next round may take another count.
        assert_eq!(
            b.arrive(1),
            Arrival::Counted {
                generation: 1,
                last: true
            }
        );
        assert!(b.passed(1));
    }

    #[test]
    fn threads_arriving_together_complete_every_round_once() {
        let b = barrier();
        let rounds = 300;
        let lasts: u32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let b = b.clone();
                    s.spawn(move || {
                        let mut lasts = 0;
                        for _ in 0..rounds {
                            match b.arrive(4) {
                                Arrival::Counted { generation, last } => {
                                    lasts += u32::from(last);
                                    while !b.passed(generation) {
                                        std::hint::spin_loop();
                                    }
                                }
                                Arrival::Refused { .. } => panic!("one count only"),
                            }
                        }
                        lasts
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(lasts, rounds);
    }
}
