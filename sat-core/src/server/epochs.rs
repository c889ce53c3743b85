//! The order of a protected chunk's key epochs, kept by its home.
//!
//! Readers of the encryption layer check everything about a version, but
//! only against what they can see: a version sealed under an *old* epoch
//! (one a tenant whose read access was since revoked still holds the key
//! of) verifies as well as a new one. The home sees every release, so it
//! keeps the chunk's epochs in one line: it takes a version only under the
//! chunk's newest epoch, or under a new epoch whose parent is that newest
//! one and that was never in the line before (a header may name any
//! parent: an old epoch must not come back as a "child" of the newest).
//! Readers check that a new epoch may change who reads given its
//! parent's policy (`abe::vault`), so the line, walked back, is the history
//! of who could read.
//!
//! A refused release still happens (the protocols have no refusal): the
//! home publishes its current bytes again, under the next version number.
//! Their sealed number is then the previous one, which every reader
//! reports as bytes put back over the chunk, and the next legitimate
//! writer replaces them.

use std::collections::HashSet;

use crate::chunk::sealed;

/// The most key epochs a chunk's line holds (8 bytes each at its home):
/// anyone attached can release made-up headers, so without a bound a home's
/// memory would grow with every release. As many as a reader walks back
/// (`abe::vault`'s `MAX_LINEAGE`); past it the chunk takes versions of its
/// newest epoch only.
pub(crate) const MAX_EPOCHS: usize = 1 << 16;

/// A labelled chunk's epochs, as its home has taken them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct EpochLine {
    newest: Option<u64>,
    /// Every epoch the line has held (8 bytes per epoch of the chunk).
    seen: HashSet<u64>,
}

impl EpochLine {
    /// Whether a release of `bytes` continues the line; takes it in if so,
    /// else says why not.
    pub fn admit(&mut self, bytes: &[u8]) -> Result<(), String> {
        let Some((epoch, parent)) = sealed::epoch_link(bytes) else {
            return Err(
                "its bytes are not a sealed version (written through the plain API?)".into(),
            );
        };
        match self.newest {
            // The first version sealed (the creator's, at MALLOC) starts
            // the line.
            None => {
                self.newest = Some(epoch);
                self.seen.insert(epoch);
                Ok(())
            }
            Some(newest) if epoch == newest => Ok(()),
            Some(_) if self.seen.len() >= MAX_EPOCHS => Err(format!(
                "the chunk has had {MAX_EPOCHS} key epochs, the most a home keeps in order: it takes \
                 versions of its newest epoch only"
            )),
            Some(newest) if parent == newest && !self.seen.contains(&epoch) => {
                self.newest = Some(epoch);
                self.seen.insert(epoch);
                Ok(())
            }
            Some(newest) => Err(format!(
                "it is sealed under epoch {epoch:016x} (started over {parent:016x}), \
                 but the chunk's newest epoch is {newest:016x}: an old epoch, or one \
                 started over an old one"
            )),
        }
    }
}

/// The start of a sealed version naming `epoch` and `parent` (the rest is
/// what a home does not read).
#[cfg(any(test, feature = "fuzz"))]
fn version(epoch: u64, parent: u64) -> Vec<u8> {
    let mut b = vec![0u8; sealed::HEADER + 8];
    b[..4].copy_from_slice(&sealed::MAGIC);
    b[4] = sealed::FORMAT;
    b[sealed::EPOCH].copy_from_slice(&epoch.to_le_bytes());
    b[sealed::PARENT].copy_from_slice(&parent.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_taken_under_the_newest_epoch_or_a_child_of_it() {
        let mut line = EpochLine::default();
        line.admit(&version(1, 0)).unwrap();
        line.admit(&version(1, 0)).unwrap();
        line.admit(&version(2, 1)).unwrap();
        // Back to the old epoch: refused, the line stays at 2.
        let e = line.admit(&version(1, 0)).unwrap_err();
        assert!(e.contains("newest epoch is 0000000000000002"), "{e}");
        // A new epoch started over the old one (a fork): refused.
        assert!(line.admit(&version(3, 1)).is_err());
        // A first epoch again: refused once the line has begun.
        assert!(line.admit(&version(4, 0)).is_err());
        line.admit(&version(2, 1)).unwrap();
        line.admit(&version(5, 2)).unwrap();
        assert_eq!(line.newest, Some(5));
        // An old epoch whose header names the newest as its parent.
        let e = line.admit(&version(2, 5)).unwrap_err();
        assert!(e.contains("newest epoch is 0000000000000005"), "{e}");
        assert!(line.admit(&version(1, 5)).is_err());
        assert_eq!(line.newest, Some(5));
    }

    #[test]
    fn a_line_holds_a_bounded_number_of_epochs() {
        let mut line = EpochLine::default();
        line.admit(&version(1, 0)).unwrap();
        for e in 2..=MAX_EPOCHS as u64 {
            line.admit(&version(e, e - 1)).unwrap();
        }
        let last = MAX_EPOCHS as u64;
        let e = line.admit(&version(last + 1, last)).unwrap_err();
        assert!(e.contains("the most a home keeps"), "{e}");
        line.admit(&version(last, last - 1)).unwrap();
        assert_eq!(line.seen.len(), MAX_EPOCHS);
    }

    #[test]
    fn bytes_that_are_no_sealed_version_are_refused() {
        let mut line = EpochLine::default();
        assert!(line.admit(&[0u8; 200]).is_err());
        assert!(line.admit(b"SATe").is_err());
        let mut old_format = version(1, 0);
        old_format[4] = 1;
        assert!(line.admit(&old_format).is_err());
        assert_eq!(line.newest, None);
    }
}

/// The home's epoch line under arbitrary releases (`crate::fuzz`).
#[cfg(feature = "fuzz")]
pub(crate) mod fuzzing {
    use super::*;

    pub fn corpus() -> Vec<Vec<u8>> {
        vec![version(1, 0), version(2, 1), version(u64::MAX, 7)]
    }

    /// One release after a line 1 -> 2: taken only under 2 or as a new
    /// child of 2, and the line then ends at what it took.
    pub fn input(bytes: &[u8]) {
        let mut line = EpochLine::default();
        line.admit(&version(1, 0)).expect("a first epoch");
        line.admit(&version(2, 1)).expect("a child");
        let link = sealed::epoch_link(bytes);
        match line.admit(bytes) {
            Ok(()) => {
                let (epoch, parent) = link.expect("only a sealed header is taken");
                assert!(
                    epoch == 2 || (parent == 2 && epoch != 1),
                    "took {epoch} over {parent}"
                );
                assert_eq!(line.newest, Some(epoch));
            }
            Err(_) => assert_eq!(line.newest, Some(2), "a refusal moved the line"),
        }
    }
}
