//! Lending a scope's bytes to a closure that runs **without the client
//! lock** ([`with_data`](super::Client::with_data),
//! [`with_data_mut`](super::Client::with_data_mut),
//! [`with_chain`](super::Client::with_chain),
//! [`with_chain_mut`](super::Client::with_chain_mut), `Scope::data`).
//!
//! A closure given a chunk's bytes may take as long as it likes and may call
//! the whole API (acquire other chunks, GET, send, even read the same chunk
//! again): the client lock is not held meanwhile, so other threads' calls
//! and the background progress that answers the homes go on. What keeps the
//! bytes sound is the **loan** recorded for each chunk while its closure
//! runs:
//! - a loan is given only inside an open scope of the chunk, and the scope
//!   cannot end while the loan is out: a RELEASE or abort from another
//!   thread waits for the closure to return; from the thread whose closure
//!   holds the loan (a RELEASE inside the closure) it is refused with a
//!   usage error, since waiting would wait forever;
//! - bytes lent for writing are lent to one closure at a time; bytes lent
//!   for reading to any number. A closure that asks again for bytes its own
//!   thread has lent for writing (or for writing, bytes its thread has lent
//!   at all) gets a usage error; one on another thread waits.
//!
//! While a chunk is in a scope the store neither writes its bytes nor moves
//! or frees its memory: grants install data only before a scope opens,
//! eviction skips regions with a chunk in a scope, and an UNMAP is refused.
//! That is the same promise the C and Python faces make for the pointers and
//! arrays they hand out for a scope's lifetime.
//!
//! **The quick loan.** Most loans are one thread's single `with_data` inside
//! its own scope. The first such loan out is kept apart, in atomics outside
//! the client lock ([`QuickLoan`]): it is still given under the lock, where
//! every check sees it, but its closure gives it back with one store,
//! without taking the lock again (a lock and an unlock, and a map's insert
//! and removal, less per scope; a sixth of a small hand-off's bookkeeping).

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::chunk::ChunkId;

/// A thread as loans tell threads apart: a number of its own (never 0),
/// which an atomic can hold, unlike a `ThreadId`.
pub(crate) type Holder = u64;

/// The calling thread's [`Holder`].
pub(crate) fn me() -> Holder {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static ME: Holder = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ME.with(|me| *me)
}

/// The one loan of a single chunk whose return needs no lock.
///
/// It is taken only under the client lock, when it is free; the thread it
/// was lent to frees it with one release store once its closure is done
/// with the bytes. Every check of loans also runs under the lock, so it
/// sees the chunk and kind written by whoever took the loan; a check that
/// finds it free (an acquire load) sees everything the closure did before
/// it gave the loan back.
#[derive(Debug, Default)]
pub(crate) struct QuickLoan {
    /// The thread holding it; 0 when it is free.
    holder: AtomicU64,
    chunk: AtomicU64,
    exclusive: AtomicBool,
}

impl QuickLoan {
    /// The loan out, as (holder, chunk, exclusive); None when free.
    /// Called under the client lock.
    fn out(&self) -> Option<(Holder, ChunkId, bool)> {
        let holder = self.holder.load(Ordering::Acquire);
        (holder != 0).then(|| {
            (
                holder,
                self.chunk.load(Ordering::Relaxed),
                self.exclusive.load(Ordering::Relaxed),
            )
        })
    }

    /// Gives the loan back, from the thread holding it, with or without
    /// the client lock.
    pub fn give_back(&self) {
        self.holder.store(0, Ordering::Release);
    }
}

/// Where a loan was recorded, and so how it is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// [`QuickLoan`]: [`QuickLoan::give_back`], no lock needed.
    Quick,
    /// The map of [`Loans`]: [`Loans::give_back`], under the lock.
    Listed,
}

/// The loans out on one chunk.
#[derive(Debug, Default)]
struct Loan {
    /// Threads reading the bytes (a thread may appear more than once, for
    /// nested reads).
    readers: Vec<Holder>,
    /// The thread writing them.
    writer: Option<Holder>,
}

/// What stands in the way of a new loan, or of ending a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Conflict {
    None,
    /// This thread holds a loan in the way: waiting would never end.
    Mine,
    /// Another thread holds one: wait for its closure to return.
    Others,
}

impl Conflict {
    /// A loan held by `holder`, in the way of thread `me`.
    fn of(holder: Holder, me: Holder) -> Conflict {
        if holder == me {
            Conflict::Mine
        } else {
            Conflict::Others
        }
    }
}

/// The loans out, per chunk, besides the quick one.
#[derive(Debug, Default)]
pub(crate) struct Loans {
    out: HashMap<ChunkId, Loan>,
    /// Reader lists of loans that ended, kept with their memory: a
    /// `with_data` per scope would otherwise allocate and free one each
    /// time, a visible share of a small hand-off.
    spare: Vec<Vec<Holder>>,
}

impl Loans {
    /// What stands in the way of lending `chunks` to thread `me`, for
    /// writing when `exclusive`.
    pub fn conflict(
        &self,
        quick: &QuickLoan,
        chunks: &[ChunkId],
        exclusive: bool,
        me: Holder,
    ) -> Conflict {
        let blocking = |t: &Holder| Conflict::of(*t, me);
        let mut seen = Conflict::None;
        if let Some((holder, chunk, writes)) = quick.out() {
            if (writes || exclusive) && chunks.contains(&chunk) {
                seen = blocking(&holder);
                if seen == Conflict::Mine {
                    return seen;
                }
            }
        }
        for chunk in chunks {
            let Some(loan) = self.out.get(chunk) else {
                continue;
            };
            let mut found = loan.writer.as_ref().map(blocking);
            if exclusive {
                for r in &loan.readers {
                    found = match (found, blocking(r)) {
                        (Some(Conflict::Mine), _) | (_, Conflict::Mine) => Some(Conflict::Mine),
                        _ => Some(Conflict::Others),
                    };
                }
            }
            match found {
                Some(Conflict::Mine) => return Conflict::Mine,
                Some(c) => seen = c,
                None => {}
            }
        }
        seen
    }

    /// What stands in the way of ending a scope of `chunk` from thread `me`:
    /// any loan at all.
    pub fn in_the_way_of_ending(&self, quick: &QuickLoan, chunk: ChunkId, me: Holder) -> Conflict {
        let listed = match self.out.get(&chunk) {
            None => Conflict::None,
            Some(l) if l.writer == Some(me) || l.readers.contains(&me) => Conflict::Mine,
            Some(_) => Conflict::Others,
        };
        match quick.out() {
            Some((holder, c, _)) if c == chunk && listed != Conflict::Mine => {
                Conflict::of(holder, me)
            }
            _ => listed,
        }
    }

    /// Records the loan of `chunks` to `me`: as the quick loan when it is
    /// one chunk and the quick loan is free, else in the map.
    pub fn lend(
        &mut self,
        quick: &QuickLoan,
        chunks: &[ChunkId],
        exclusive: bool,
        me: Holder,
    ) -> Taken {
        if let ([chunk], None) = (chunks, quick.out()) {
            quick.chunk.store(*chunk, Ordering::Relaxed);
            quick.exclusive.store(exclusive, Ordering::Relaxed);
            quick.holder.store(me, Ordering::Relaxed);
            return Taken::Quick;
        }
        for &chunk in chunks {
            let spare = &mut self.spare;
            let loan = self.out.entry(chunk).or_insert_with(|| Loan {
                readers: spare.pop().unwrap_or_default(),
                writer: None,
            });
            if exclusive {
                loan.writer = Some(me);
            } else {
                loan.readers.push(me);
            }
        }
        Taken::Listed
    }

    /// Gives back a loan that [`Loans::lend`] recorded in the map.
    pub fn give_back(&mut self, chunks: &[ChunkId], exclusive: bool, me: Holder) {
        for chunk in chunks {
            let Some(loan) = self.out.get_mut(chunk) else {
                continue;
            };
            if exclusive {
                loan.writer = None;
            } else if let Some(i) = loan.readers.iter().position(|t| *t == me) {
                loan.readers.swap_remove(i);
            }
            if loan.writer.is_none() && loan.readers.is_empty() {
                if let Some(ended) = self.out.remove(chunk) {
                    self.spare.push(ended.readers);
                }
            }
        }
    }

    pub fn is_empty(&self, quick: &QuickLoan) -> bool {
        self.out.is_empty() && quick.out().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn other_thread() -> Holder {
        std::thread::spawn(me).join().unwrap()
    }

    #[test]
    fn threads_are_told_apart() {
        let other = other_thread();
        assert_ne!(me(), other);
        assert_eq!(me(), me());
        assert_ne!(me(), 0);
    }

    #[test]
    fn readers_share_writers_do_not() {
        let (me, other) = (me(), other_thread());
        // The quick loan taken, so that these go to the map.
        let quick = QuickLoan::default();
        let mut loans = Loans::default();
        assert_eq!(loans.lend(&quick, &[9], false, other), Taken::Quick);
        assert_eq!(loans.lend(&quick, &[1], false, other), Taken::Listed);
        assert_eq!(loans.conflict(&quick, &[1], false, me), Conflict::None);
        assert_eq!(loans.conflict(&quick, &[1], true, me), Conflict::Others);
        loans.lend(&quick, &[1], false, me);
        // A writer that reads already: its own read is in the way.
        assert_eq!(loans.conflict(&quick, &[1], true, me), Conflict::Mine);
        assert_eq!(loans.in_the_way_of_ending(&quick, 1, me), Conflict::Mine);
        loans.give_back(&[1], false, me);
        assert_eq!(loans.in_the_way_of_ending(&quick, 1, me), Conflict::Others);
        loans.give_back(&[1], false, other);
        quick.give_back();
        assert!(loans.is_empty(&quick));
        loans.lend(&quick, &[1, 2], true, other);
        assert_eq!(loans.conflict(&quick, &[2, 3], false, me), Conflict::Others);
        assert_eq!(loans.conflict(&quick, &[3], true, me), Conflict::None);
        loans.give_back(&[1, 2], true, other);
        assert!(loans.is_empty(&quick));
    }

    #[test]
    fn the_quick_loan_is_checked_as_the_others() {
        let (me, other) = (me(), other_thread());
        let quick = QuickLoan::default();
        let mut loans = Loans::default();
        // Another thread writes chunk 4 through the quick loan.
        assert_eq!(loans.lend(&quick, &[4], true, other), Taken::Quick);
        assert!(!loans.is_empty(&quick));
        assert_eq!(loans.conflict(&quick, &[4], false, me), Conflict::Others);
        assert_eq!(loans.conflict(&quick, &[3, 4], true, me), Conflict::Others);
        assert_eq!(loans.conflict(&quick, &[3], true, me), Conflict::None);
        assert_eq!(loans.in_the_way_of_ending(&quick, 4, me), Conflict::Others);
        assert_eq!(loans.in_the_way_of_ending(&quick, 3, me), Conflict::None);
        quick.give_back();
        assert!(loans.is_empty(&quick));
        assert_eq!(loans.in_the_way_of_ending(&quick, 4, me), Conflict::None);
        // This thread reads chunk 4 quickly, another reads it too (listed).
        assert_eq!(loans.lend(&quick, &[4], false, me), Taken::Quick);
        assert_eq!(loans.conflict(&quick, &[4], false, other), Conflict::None);
        assert_eq!(loans.lend(&quick, &[4], false, other), Taken::Listed);
        // Writing it is in this thread's way through the quick loan, even
        // with another's listed loan beside it.
        assert_eq!(loans.conflict(&quick, &[4], true, me), Conflict::Mine);
        assert_eq!(loans.in_the_way_of_ending(&quick, 4, me), Conflict::Mine);
        assert_eq!(loans.in_the_way_of_ending(&quick, 4, other), Conflict::Mine);
        loans.give_back(&[4], false, other);
        assert_eq!(
            loans.in_the_way_of_ending(&quick, 4, other),
            Conflict::Others
        );
        quick.give_back();
        assert!(loans.is_empty(&quick));
    }
}
