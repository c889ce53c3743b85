//! Chunks and chunk chains (section 2.2 of the SAT report).
//!
//! The logical space is every `u64`; a chunk is identified by its address in
//! it. `MALLOC(baseid, size)` splits `size` bytes into chunks of the default
//! chunk size at consecutive addresses, the last one only as large as needed
//! so nothing is wasted; `MALLOC_LST(idlst, sizelst)` takes the addresses from
//! a list and the sizes round-robin from another. Either way the chunks form a
//! **chain** whose data is contiguous in local memory, so that pointer
//! arithmetic runs across chunk boundaries. [`ChainLayout`] is that plan: which
//! chunk sits at which offset of the chain's local buffer.

use std::collections::HashSet;

/// An address in the S-DSM logical space.
pub type ChunkId = u64;

/// An allocation's **label**: 32 opaque bytes a chunk gets at its first
/// MALLOC and keeps for its life. Every later MALLOC must give the same
/// label (or it is refused, as another size is) and every LOOKUP returns it.
/// Plain chunks have [`NO_LABEL`]; the encryption layer (feature `abe`)
/// stores there the digest of a protected chunk's write policy, which is
/// what lets a reader know, from the home alone, who may write the chunk.
pub type Label = [u8; 32];

/// The label of a chunk allocated without one.
pub const NO_LABEL: Label = [0; 32];

/// The chunk size `MALLOC` splits by when the run sets none.
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;

/// The largest single chunk: a home keeps each chunk in one buffer, and a
/// size beyond memory must be refused, not attempted.
pub const MAX_CHUNK_SIZE: usize = 1 << 30;

/// A chunk or chain request that cannot be allocated as given; each
/// message says what to give instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant is its message
pub enum ChunkError {
    #[error("a chunk of 0 bytes cannot be allocated: give a size of at least 1")]
    ZeroSize,
    #[error("the chunk size must be at least 1 byte")]
    ZeroChunkSize,
    #[error("a chunk of {size} bytes is over the {MAX_CHUNK_SIZE}-byte limit: MALLOC a chain of smaller chunks")]
    TooLarge { size: usize },
    #[error("a chunk size of {size} bytes is over the {MAX_CHUNK_SIZE}-byte limit of a chunk: set at most that (a MALLOC larger than the chunk size makes a chain of chunks)")]
    ChunkSizeTooLarge { size: usize },
    #[error("the list of chunk ids is empty: give at least one id")]
    NoIds,
    #[error("the list of sizes is empty: give at least one size (it is used round-robin)")]
    NoSizes,
    #[error("LOOKUP of 0 chunks from chunk {baseid}: give a number of chunks of at least 1")]
    NoChunks { baseid: ChunkId },
    #[error(
        "{count} chunks from id {baseid} run past the end of the logical space (u64::MAX): \
         choose a lower base id or a larger chunk size"
    )]
    IdOverflow { baseid: ChunkId, count: u64 },
    #[error("chunk {0} appears twice in one chain: a chain holds each chunk once")]
    DuplicateId(ChunkId),
    #[error(
        "a chain of {size} bytes cannot be held in this machine's {memory} bytes of memory: \
         allocate less, or several chains used one after the other"
    )]
    ChainTooLarge { size: u64, memory: u64 },
}

/// The part of a protected chunk's sealed header that its home reads.
///
/// The encryption layer (`abe::seal`, feature `abe`) writes these headers;
/// the home holds no key and verifies no signature, but it can keep a
/// chunk's key epochs in one line: a release is taken only under the
/// chunk's newest epoch or under a child of it (`server/epochs.rs`). The
/// layout lives here, outside the feature, so both sides read one
/// definition.
pub mod sealed {
    use std::ops::Range;

    /// The bytes every sealed version starts with.
    pub const MAGIC: [u8; 4] = *b"SATe";
    /// Format 2 added the parent epoch.
    pub const FORMAT: u8 = 2;
    /// Bytes before the ciphertext.
    pub const HEADER: usize = 144;
    /// The key epoch the version was sealed under (little-endian u64).
    pub const EPOCH: Range<usize> = 8..16;
    /// The epoch this version's epoch was started over (0 for a first
    /// epoch): the chunk's newest when its writer began it.
    pub const PARENT: Range<usize> = 136..144;

    /// The (epoch, parent epoch) a sealed version's header names, None
    /// when `bytes` do not start with a header of this format.
    pub fn epoch_link(bytes: &[u8]) -> Option<(u64, u64)> {
        if bytes.len() < HEADER || bytes[..4] != MAGIC || bytes[4] != FORMAT {
            return None;
        }
        let at = |r: Range<usize>| u64::from_le_bytes(bytes[r].try_into().expect("8 bytes"));
        Some((at(EPOCH), at(PARENT)))
    }
}

/// Refuses a chain whose local copy could never fit in memory (the local
/// data of a chain is one contiguous buffer, and failing to allocate it
/// would end the process).
pub fn check_chain_size(size: u64) -> Result<(), ChunkError> {
    match crate::os::physical_memory() {
        Some(memory) if size > memory => Err(ChunkError::ChainTooLarge { size, memory }),
        _ => Ok(()),
    }
}

/// Where each chunk of a chain lives in the chain's contiguous local buffer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChainLayout {
    /// (chunk id, size), in chain order.
    chunks: Vec<(ChunkId, usize)>,
    /// Offset of each chunk in the local buffer; `offsets[i+1] = offsets[i] + size[i]`.
    offsets: Vec<usize>,
    total: usize,
}

impl ChainLayout {
    /// The layout of `MALLOC(baseid, size)` with chunks of `chunk_size` bytes.
    pub fn malloc(
        baseid: ChunkId,
        size: usize,
        chunk_size: usize,
    ) -> Result<ChainLayout, ChunkError> {
        if size == 0 {
            return Err(ChunkError::ZeroSize);
        }
        if chunk_size == 0 {
            return Err(ChunkError::ZeroChunkSize);
        }
        let count = size.div_ceil(chunk_size) as u64;
        if baseid.checked_add(count - 1).is_none() {
            return Err(ChunkError::IdOverflow { baseid, count });
        }
        let chunks = (0..count)
            .map(|i| {
                let start = i as usize * chunk_size;
                (baseid + i, chunk_size.min(size - start))
            })
            .collect();
        Ok(Self::from_chunks(chunks))
    }

    /// The layout of `MALLOC_LST(ids, sizes)`: chunk `ids[i]` has size
    /// `sizes[i % sizes.len()]` (the report's round-robin).
    pub fn malloc_lst(ids: &[ChunkId], sizes: &[usize]) -> Result<ChainLayout, ChunkError> {
        if ids.is_empty() {
            return Err(ChunkError::NoIds);
        }
        if sizes.is_empty() {
            return Err(ChunkError::NoSizes);
        }
        if sizes.contains(&0) {
            return Err(ChunkError::ZeroSize);
        }
        if let Some(&size) = sizes.iter().find(|&&s| s > MAX_CHUNK_SIZE) {
            return Err(ChunkError::TooLarge { size });
        }
        let mut seen = HashSet::with_capacity(ids.len());
        for &id in ids {
            if !seen.insert(id) {
                return Err(ChunkError::DuplicateId(id));
            }
        }
        let chunks = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, sizes[i % sizes.len()]))
            .collect();
        Ok(Self::from_chunks(chunks))
    }

    fn from_chunks(chunks: Vec<(ChunkId, usize)>) -> ChainLayout {
        let mut offsets = Vec::with_capacity(chunks.len());
        let mut total = 0usize;
        for &(_, size) in &chunks {
            offsets.push(total);
            // Saturates rather than wraps: a sum past usize::MAX is then
            // refused as a chain larger than memory (check_chain_size).
            total = total.saturating_add(size);
        }
        ChainLayout {
            chunks,
            offsets,
            total,
        }
    }

    /// (chunk id, size) in chain order.
    pub fn chunks(&self) -> &[(ChunkId, usize)] {
        &self.chunks
    }

    /// The number of chunks in the chain.
    /// How many chunks the chain has.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Whether the chain has no chunk (never true of a chain allocated).
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The size of the chain's contiguous local buffer.
    pub fn total_size(&self) -> usize {
        self.total
    }

    /// The byte range of the `i`-th chunk in the local buffer.
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        let start = self.offsets[i];
        start..start + self.chunks[i].1
    }

    /// The position of chunk `id` in the chain, if it belongs to it.
    pub fn position(&self, id: ChunkId) -> Option<usize> {
        self.chunks.iter().position(|&(c, _)| c == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malloc_splits_and_the_last_chunk_wastes_nothing() {
        let l = ChainLayout::malloc(1000, 10_000, 4096).unwrap();
        assert_eq!(l.chunks(), &[(1000, 4096), (1001, 4096), (1002, 1808)]);
        assert_eq!(l.total_size(), 10_000);
        assert_eq!(l.range(2), 8192..10_000);
        // An exact multiple has no short last chunk.
        let l = ChainLayout::malloc(0, 8192, 4096).unwrap();
        assert_eq!(l.chunks(), &[(0, 4096), (1, 4096)]);
        // Smaller than a chunk: one chunk of exactly that size.
        assert_eq!(
            ChainLayout::malloc(42, 256, DEFAULT_CHUNK_SIZE)
                .unwrap()
                .chunks(),
            &[(42, 256)]
        );
    }

    #[test]
    fn chains_are_contiguous_for_every_split() {
        for size in [
            1usize,
            2,
            63,
            64,
            65,
            4095,
            4096,
            4097,
            1 << 20,
            (64 << 20) + 3,
        ] {
            for chunk in [1usize, 7, 64, 4096, 65536] {
                if size / chunk > 100_000 {
                    continue;
                }
                let l = ChainLayout::malloc(7, size, chunk).unwrap();
                assert_eq!(l.total_size(), size);
                let mut next = 0;
                for i in 0..l.len() {
                    let r = l.range(i);
                    assert_eq!(
                        r.start,
                        next,
                        "chunk {i} must follow chunk {} directly",
                        i.wrapping_sub(1)
                    );
                    assert!(r.len() <= chunk && !r.is_empty());
                    assert_eq!(l.chunks()[i].0, 7 + i as u64);
                    next = r.end;
                }
                assert_eq!(next, size);
            }
        }
    }

    #[test]
    fn a_64_mib_malloc_is_one_contiguous_chain() {
        let l = ChainLayout::malloc(1 << 40, 64 << 20, DEFAULT_CHUNK_SIZE).unwrap();
        assert_eq!(l.len(), 1024);
        assert_eq!(l.total_size(), 64 << 20);
        assert_eq!(l.range(1023).end, 64 << 20);
    }

    #[test]
    fn malloc_lst_refuses_chunks_over_the_limit() {
        assert!(matches!(
            ChainLayout::malloc_lst(&[1, 2], &[8, MAX_CHUNK_SIZE + 1]),
            Err(ChunkError::TooLarge { size }) if size == MAX_CHUNK_SIZE + 1
        ));
        let ok = ChainLayout::malloc_lst(&[1, 2], &[MAX_CHUNK_SIZE, 8]).unwrap();
        assert_eq!(ok.total_size(), MAX_CHUNK_SIZE + 8);
    }

    #[test]
    fn malloc_lst_takes_sizes_round_robin() {
        // Figure 4: ids {16, 81, 56878}, sizes {24, 91, 54}.
        let l = ChainLayout::malloc_lst(&[16, 81, 56878], &[24, 91, 54]).unwrap();
        assert_eq!(l.chunks(), &[(16, 24), (81, 91), (56878, 54)]);
        assert_eq!(l.position(81), Some(1));
        assert_eq!(l.range(1), 24..115);
        let l = ChainLayout::malloc_lst(&[1, 2, 3, 4, 5], &[10, 20]).unwrap();
        assert_eq!(l.chunks(), &[(1, 10), (2, 20), (3, 10), (4, 20), (5, 10)]);
        assert_eq!(l.position(99), None);
    }

    #[test]
    fn misuse_is_a_clear_error() {
        assert_eq!(ChainLayout::malloc(0, 0, 4096), Err(ChunkError::ZeroSize));
        assert_eq!(
            ChainLayout::malloc(0, 10, 0),
            Err(ChunkError::ZeroChunkSize)
        );
        assert_eq!(
            ChainLayout::malloc(u64::MAX, 8193, 4096),
            Err(ChunkError::IdOverflow {
                baseid: u64::MAX,
                count: 3
            })
        );
        assert!(
            ChainLayout::malloc(u64::MAX, 4096, 4096).is_ok(),
            "the last address is usable"
        );
        assert_eq!(ChainLayout::malloc_lst(&[], &[1]), Err(ChunkError::NoIds));
        assert_eq!(ChainLayout::malloc_lst(&[1], &[]), Err(ChunkError::NoSizes));
        assert_eq!(
            ChainLayout::malloc_lst(&[1, 2], &[5, 0]),
            Err(ChunkError::ZeroSize)
        );
        assert_eq!(
            ChainLayout::malloc_lst(&[3, 4, 3], &[5]),
            Err(ChunkError::DuplicateId(3))
        );
        let msg = ChunkError::IdOverflow {
            baseid: 5,
            count: 9,
        }
        .to_string();
        assert!(msg.contains("base id"), "{msg}");
    }
}
