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

use rustc_hash::FxHashMap as HashMap;
use std::thread::ThreadId;

use crate::chunk::ChunkId;

/// The loans out on one chunk.
#[derive(Debug, Default)]
struct Loan {
    /// Threads reading the bytes (a thread may appear more than once, for
    /// nested reads).
    readers: Vec<ThreadId>,
    /// The thread writing them.
    writer: Option<ThreadId>,
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

/// The loans out, per chunk.
#[derive(Debug, Default)]
pub(crate) struct Loans {
    out: HashMap<ChunkId, Loan>,
    /// Reader lists of loans that ended, kept with their memory: a
    /// `with_data` per scope would otherwise allocate and free one each
    /// time, a visible share of a small hand-off.
    spare: Vec<Vec<ThreadId>>,
}

impl Loans {
    /// What stands in the way of lending `chunks` to thread `me`, for
    /// writing when `exclusive`.
    pub fn conflict(&self, chunks: &[ChunkId], exclusive: bool, me: ThreadId) -> Conflict {
        let mut seen = Conflict::None;
        for chunk in chunks {
            let Some(loan) = self.out.get(chunk) else {
                continue;
            };
            let blocking = |t: &ThreadId| {
                if *t == me {
                    Conflict::Mine
                } else {
                    Conflict::Others
                }
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
    pub fn in_the_way_of_ending(&self, chunk: ChunkId, me: ThreadId) -> Conflict {
        match self.out.get(&chunk) {
            None => Conflict::None,
            Some(l) if l.writer == Some(me) || l.readers.contains(&me) => Conflict::Mine,
            Some(_) => Conflict::Others,
        }
    }

    pub fn lend(&mut self, chunks: &[ChunkId], exclusive: bool, me: ThreadId) {
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
    }

    pub fn give_back(&mut self, chunks: &[ChunkId], exclusive: bool, me: ThreadId) {
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

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn other_thread() -> ThreadId {
        std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap()
    }

    #[test]
    fn readers_share_writers_do_not() {
        let (me, other) = (std::thread::current().id(), other_thread());
        let mut loans = Loans::default();
        loans.lend(&[1], false, other);
        assert_eq!(loans.conflict(&[1], false, me), Conflict::None);
        assert_eq!(loans.conflict(&[1], true, me), Conflict::Others);
        loans.lend(&[1], false, me);
        // A writer that reads already: its own read is in the way.
        assert_eq!(loans.conflict(&[1], true, me), Conflict::Mine);
        assert_eq!(loans.in_the_way_of_ending(1, me), Conflict::Mine);
        loans.give_back(&[1], false, me);
        assert_eq!(loans.in_the_way_of_ending(1, me), Conflict::Others);
        loans.give_back(&[1], false, other);
        assert!(loans.is_empty());
        loans.lend(&[1, 2], true, other);
        assert_eq!(loans.conflict(&[2, 3], false, me), Conflict::Others);
        assert_eq!(loans.conflict(&[3], true, me), Conflict::None);
        loans.give_back(&[1, 2], true, other);
        assert!(loans.is_empty());
    }
}
