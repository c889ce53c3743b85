//! The table of symbols (section 2.2, Figure 7): shared data named by text
//! instead of by chunk id.
//!
//! `write_symbol(name, data)` stores a copy of `data` in the S-DSM under
//! `name`; `read_symbol(name)` returns a copy of it to any process, as a
//! buffer the caller owns (the report's `readSymbol` allocates the buffer and
//! the caller frees it). As the report asks, the table itself is ordinary
//! shared data: chunks under scope consistency, served by any server.
//!
//! # Layout
//!
//! Chunk ids from [`SYMBOL_TABLE_BASE`] (`0xFFFF_FF00_0000_0000`) to
//! `u64::MAX` are reserved for the table:
//! - **buckets**: chunks `SYMBOL_TABLE_BASE + b` for `b` in `0..4096`, of
//!   4 KiB each, home-based MESI. A name lives in bucket `b`, its FNV-1a
//!   hash xor-folded to 12 bits ([`symbol_bucket`]). A bucket holds the
//!   list of its entries (name, where the value is, its size), encoded with
//!   bincode after a marker and a length.
//! - **values**: from `SYMBOL_TABLE_BASE + 2^39` on, each bucket owns a
//!   range of 2^27 ids and hands them out in order, with a counter kept in
//!   the bucket itself. A value is a chain of chunks of at most
//!   [`MAX_CHUNK_SIZE`] (1 GiB) each, so a value of any size fits; an empty
//!   value takes no chunk.
//! - **anchors**: from `SYMBOL_TABLE_BASE + 2^38` to `+ 2^39`, one 8-byte
//!   chunk per protected symbol name, at an id its digest picks
//!   ([`ANCHORS_BASE`]): the encryption layer's count of the name's
//!   protected writes, which nobody can turn back (`abe/vault.rs`).
//!
//! MALLOC and MAP refuse these ids, so user code cannot share them with the
//! table. A clash that comes anyway (from another version of SAT, say) is
//! caught as far as it can be: a bucket
//! allocated with another size or protocol makes symbol calls fail with a
//! message naming the range, and a bucket whose bytes are not a table is
//! reported as corrupt, never decoded into nonsense.
//!
//! Why fixed buckets at fixed ids: a name's bucket is computed locally, so
//! no directory is asked and nobody has to create the table first. Every
//! process that touches a bucket MALLOCs it, and MALLOC of an existing chunk
//! joins it. Why many small buckets rather than one table chunk: writers of
//! different names rarely contend (a writer holds only its bucket), a read
//! miss moves 4 KiB rather than the whole table, and a reader that waits for
//! a name is woken only by writes to that name's bucket. A bucket holds
//! about 100 entries named by UUIDs (36 characters), 15 with names of the
//! longest kind; a table of a quarter of a million UUID-named symbols is
//! unlikely to fill any bucket. A full bucket is an error that says so.
//!
//! The hash is FNV-1a because its value is fixed by its definition: every
//! process, on any machine, with any build, finds the same bucket (std's
//! `DefaultHasher` promises no such thing).
//!
//! # Concurrency and overwriting
//!
//! - A writer holds its bucket's READWRITE scope while it reads the entries,
//!   writes the value and stores the updated entries: writers of one bucket
//!   take turns, so concurrent writers of different names never lose each
//!   other's entries.
//! - Writing an existing name replaces its whole value: **the last writer
//!   wins** (last in the order the bucket's home grants the write scopes),
//!   and a reader sees the old value or the new one, never a mix, because it
//!   holds the bucket's READ scope while it copies the value out. A value of
//!   the same size is rewritten in its chunks; a value of another size gets
//!   new chunks (a chunk's size is fixed when it is allocated). The old
//!   chunks stay allocated at their homes, as the S-DSM has no FREE: a
//!   program that rewrites a symbol with ever new sizes costs its homes
//!   memory each time.
//! - Chunks are always acquired in ascending id order (a bucket, then its
//!   value's chunks, which sit above every bucket), as chains are, so symbol
//!   calls cannot deadlock with each other or with scopes on user chunks.
//!
//! # Reading a name not written yet
//!
//! `read_symbol` waits, at most the time given, for some process to write
//! the name, like LOOKUP: a program is correct whichever of the write and
//! the read runs first. The wait is the coherence protocol's own: the reader
//! READs the bucket, and when the name is missing it waits until its copy of
//! the bucket is invalidated, which the bucket's home does before it lets
//! any writer in (or, for a writer in another thread of the same process,
//! until the local copy's version moves on). While nobody writes the bucket the wait sends nothing; the
//! reader only drives its endpoint, as every blocking call does. A write of
//! another name in the same bucket wakes the reader too: it reads the
//! bucket again (one miss) and goes back to waiting.
//!
//! # Initialization
//!
//! The table needs none: [`Client::init_symbol_table`] exists so that a
//! program written as Figure 7 (which calls `initSymbolicTable` first) ports
//! line by line. It checks nothing and allocates nothing; symbol calls made
//! without it work the same.
//!
//! # Names
//!
//! A name is any string of 1 to [`MAX_SYMBOL_NAME`] (255) bytes without a
//! NUL byte (a C program could not name it); names are compared byte for
//! byte. The report uses UUIDs.

use std::time::{Duration, Instant};

use bincode::{Decode, Encode};

use super::Client;
use crate::chunk::{ChunkId, MAX_CHUNK_SIZE};
use crate::error::{SatError, SatResult};
use crate::protocol::{Access, ProtocolId, State, Version};

/// The first chunk id reserved for the table of symbols; every id from it to
/// `u64::MAX` belongs to the table. Keep user chunks below it.
pub const SYMBOL_TABLE_BASE: ChunkId = 0xFFFF_FF00_0000_0000;

/// The longest symbol name, in bytes.
pub const MAX_SYMBOL_NAME: usize = 255;

/// The number of buckets (a power of two: a bucket is a hash's low bits).
const BUCKETS: u64 = 4096;

/// The size of a bucket chunk. Every process must allocate buckets with the
/// same size, so it is fixed here, not taken from `SAT_CHUNK_SIZE`.
const BUCKET_SIZE: usize = 4096;

/// Where value chunks start: the upper half of the reserved range.
const VALUES_BASE: ChunkId = SYMBOL_TABLE_BASE + (1 << 39);

/// The value chunk ids each bucket owns: the upper half of the reserved range
/// split evenly, so the last bucket's range ends at `u64::MAX`.
const IDS_PER_BUCKET: u64 = (1 << 39) / BUCKETS;

/// Where the encryption layer's anchors start (`abe/vault.rs`): 2^38 ids
/// between the buckets and the values. An anchor's id is picked by a
/// digest of its name. Two names that share one (a chance of one in 2^38
/// per pair) make each other's values look rolled back after each other's
/// writes, until written again: lost availability, never a replay taken.
pub(crate) const ANCHORS_BASE: ChunkId = SYMBOL_TABLE_BASE + (1 << 38);

/// How many anchor ids there are.
pub(crate) const ANCHORS: u64 = 1 << 38;

const _: () = assert!(SYMBOL_TABLE_BASE + BUCKETS <= ANCHORS_BASE);
const _: () = assert!(ANCHORS_BASE + ANCHORS <= VALUES_BASE);

// Buckets sit below every value chunk, so a writer or reader, which takes a
// bucket and then its value's chunks, acquires in ascending id order.
const _: () = assert!(SYMBOL_TABLE_BASE + BUCKETS <= VALUES_BASE);

/// The largest chunk of a value; larger values are chains of such chunks.
const PIECE: usize = MAX_CHUNK_SIZE;

/// The first bytes of a bucket that holds entries (`SYM` and a format
/// version). A bucket never written is all zeros.
const MAGIC: [u8; 4] = *b"SYM1";

/// Magic, then the length of the encoded entries (u32, little endian).
const HEADER: usize = 8;

/// FNV-1a, 64 bits: a hash fixed by its definition, the same in every
/// process, build and machine.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The bucket of a name: its FNV-1a hash xor-folded (the way FNV's authors
/// advise for tables smaller than the hash, so the high bits count too).
fn bucket_index(name: &str) -> u64 {
    let h = fnv1a64(name.as_bytes());
    (h ^ (h >> 32)) & (BUCKETS - 1)
}

/// The chunk id of the bucket that holds `name` (for diagnostics: which
/// names share a bucket, and so take turns when written).
pub fn symbol_bucket(name: &str) -> ChunkId {
    SYMBOL_TABLE_BASE + bucket_index(name)
}

/// The chunk sizes of a value of `size` bytes: pieces of `piece` bytes, the
/// last one only as large as needed; none for an empty value.
fn pieces(size: usize, piece: usize) -> Vec<usize> {
    let mut sizes = vec![piece; size / piece];
    let rest = size % piece;
    if rest > 0 {
        sizes.push(rest);
    }
    sizes
}

/// How many chunks a value of `size` bytes takes (computed, not listed: a
/// corrupt size must not make a huge list).
fn piece_count(size: u64) -> u64 {
    size.div_ceil(PIECE as u64)
}

/// The ids of a value's chunks: `count` ids from `offset` in bucket `b`'s
/// range (the last bucket's range ends at `u64::MAX` itself).
fn value_ids(b: u64, offset: u64, count: usize) -> Vec<ChunkId> {
    let first = VALUES_BASE + b * IDS_PER_BUCKET + offset;
    (0..count as u64).map(|i| first + i).collect()
}

/// One symbol: its name and where its value is.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
struct Entry {
    name: String,
    /// The value's first chunk, as an offset in its bucket's id range (a
    /// small number encodes in fewer bytes than the id).
    offset: u64,
    /// The value's size in bytes; its chunks follow from it ([`pieces`]).
    size: u64,
}

/// What a bucket chunk holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
struct Bucket {
    /// The next free offset in this bucket's range of value ids.
    next: u64,
    entries: Vec<Entry>,
}

/// Encoding is bounded by the bucket's bytes (a slice of that size).
fn config() -> impl bincode::config::Config {
    bincode::config::standard()
}

/// Decoding may claim memory beyond the bytes it reads (a list announces
/// its length before its items): the limit keeps a corrupt length from
/// claiming gigabytes. A bucket's 4 KiB claim at most about 60 KiB.
fn decode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<{ 1 << 20 }>()
}

impl Bucket {
    /// Reads a bucket chunk. All zeros is the empty bucket (a chunk nobody
    /// has written); anything else must be a valid, consistent bucket.
    fn decode(b: u64, bytes: &[u8]) -> Result<Bucket, String> {
        if bytes.len() != BUCKET_SIZE {
            return Err(format!(
                "the chunk has {} bytes, a bucket {BUCKET_SIZE}",
                bytes.len()
            ));
        }
        if bytes[..HEADER].iter().all(|&x| x == 0) {
            return Ok(Bucket::default());
        }
        if bytes[..4] != MAGIC {
            return Err("it does not start with the table's marker".to_string());
        }
        let len = u32::from_le_bytes(bytes[4..HEADER].try_into().expect("4 bytes")) as usize;
        if len > BUCKET_SIZE - HEADER {
            return Err(format!(
                "its length field says {len} bytes, more than a bucket holds"
            ));
        }
        let (bucket, used): (Bucket, usize) =
            bincode::decode_from_slice(&bytes[HEADER..HEADER + len], decode_config())
                .map_err(|e| format!("its entries do not decode: {e}"))?;
        if used != len {
            return Err(format!(
                "its entries take {used} bytes, its length field says {len}"
            ));
        }
        bucket.check(b)?;
        Ok(bucket)
    }

    /// The consistency a writer keeps: every name valid, in this bucket and
    /// unique, every value inside the ids handed out so far.
    fn check(&self, b: u64) -> Result<(), String> {
        if self.next > IDS_PER_BUCKET {
            return Err(format!(
                "its id counter {} is past the bucket's {IDS_PER_BUCKET} ids",
                self.next
            ));
        }
        let mut names = std::collections::HashSet::new();
        for e in &self.entries {
            if check_name(&e.name).is_err() || bucket_index(&e.name) != b {
                return Err(format!(
                    "it holds a name that does not belong here ({:?})",
                    e.name
                ));
            }
            if !names.insert(e.name.as_str()) {
                return Err(format!("it holds {:?} twice", e.name));
            }
            if e.offset
                .checked_add(piece_count(e.size))
                .is_none_or(|end| end > self.next)
            {
                return Err(format!(
                    "the value of {:?} lies outside the ids handed out",
                    e.name
                ));
            }
        }
        Ok(())
    }

    /// The bytes of the bucket chunk, or None when the entries do not fit.
    fn encode(&self) -> Option<Vec<u8>> {
        let mut out = vec![0u8; BUCKET_SIZE];
        let len = bincode::encode_into_slice(self, &mut out[HEADER..], config()).ok()?;
        out[..4].copy_from_slice(&MAGIC);
        out[4..HEADER].copy_from_slice(&(len as u32).to_le_bytes());
        Some(out)
    }

    fn find(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }
}

/// Refuses names the table cannot hold or a C program could not pass.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty: give a symbol a name of at least one byte".into());
    }
    if name.len() > MAX_SYMBOL_NAME {
        return Err(format!(
            "the name has {} bytes, more than the {MAX_SYMBOL_NAME} a symbol name may have: \
             use a shorter name (a UUID has 36)",
            name.len()
        ));
    }
    if name.contains('\0') {
        return Err(
            "the name contains a NUL byte, which a C program could not pass: \
                    remove it"
                .into(),
        );
    }
    Ok(())
}

/// A name as errors quote it: whole when short, else its start (a message
/// quoting a 10,000-byte mistake would bury what it says).
fn quoted(name: &str) -> String {
    const SHOWN: usize = 60;
    if name.len() <= SHOWN {
        return format!("{name:?}");
    }
    let mut end = SHOWN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}...", &name[..end])
}

fn usage(call: &str, name: &str, what: impl std::fmt::Display) -> SatError {
    SatError::Usage(format!("{call}({}): {what}", quoted(name)))
}

/// The error of a bucket's MALLOC. The home refusing it (the chunk exists
/// with another size, protocol or label, or cannot be allocated) is a
/// chunk in the table's reserved range: the message names the range. Any
/// other failure (the run aborted, the service gone, a lost process, a
/// transport error, a timeout) has nothing to do with the range and is
/// returned as it is, so that it raises what every other call raises then.
fn bucket_allocation_error(call: &str, name: &str, b: u64, e: SatError) -> SatError {
    let SatError::Usage(why) = e else {
        return e;
    };
    usage(
        call,
        name,
        format_args!(
            "the symbol table's bucket {b} (chunk {:#x}) cannot be allocated: {why}; chunk \
             ids from {SYMBOL_TABLE_BASE:#x} up are reserved for the table: keep user chunks \
             below",
            SYMBOL_TABLE_BASE + b
        ),
    )
}

/// The error for a bucket whose bytes are not a table bucket.
fn corrupt_bucket(call: &str, name: &str, b: u64, what: String) -> SatError {
    usage(
        call,
        name,
        format_args!(
            "the symbol table's bucket {b} (chunk {:#x}) is corrupt: {what}; a process wrote \
             into the chunk ids reserved for the table ({SYMBOL_TABLE_BASE:#x} and up): keep \
             user chunks below {SYMBOL_TABLE_BASE:#x}",
            SYMBOL_TABLE_BASE + b
        ),
    )
}

impl Client {
    /// `initSymbolicTable` (Figure 7). The table needs no initialization
    /// (see the module docs): this returns Ok and symbol calls work with or
    /// without it, so a program written as Figure 7 ports as it is.
    pub fn init_symbol_table(&self) -> SatResult<()> {
        Ok(())
    }

    /// `writeSymbol(name, data, size)`: stores a copy of `data` under `name`
    /// for every process to read. Writing a name again replaces its whole
    /// value, with any size; the last writer wins, and readers see either
    /// the old value or the new one (module docs).
    pub fn write_symbol(&self, name: &str, data: &[u8]) -> SatResult<()> {
        const CALL: &str = "write_symbol";
        check_name(name).map_err(|e| usage(CALL, name, e))?;
        let b = bucket_index(name);
        let bucket_id = self.open_bucket(CALL, name, b)?;
        self.acquire_reserved(bucket_id, Access::ReadWrite)?;
        let written = self.write_in_bucket(name, data, b, bucket_id);
        // The scope closes whatever happened: on error the entries are as
        // they were.
        let released = self.release(bucket_id);
        written?;
        released
    }

    /// Inside the bucket's READWRITE scope: the value, then the entries.
    fn write_in_bucket(
        &self,
        name: &str,
        data: &[u8],
        b: u64,
        bucket_id: ChunkId,
    ) -> SatResult<()> {
        const CALL: &str = "write_symbol";
        let mut bucket = self
            .with_data(bucket_id, |bytes| Bucket::decode(b, bytes))?
            .map_err(|e| corrupt_bucket(CALL, name, b, e))?;
        let before = bucket.clone();
        let sizes = pieces(data.len(), PIECE);
        let same_size = bucket
            .find(name)
            .filter(|e| e.size == data.len() as u64)
            .map(|e| e.offset);
        // The same size keeps the value's chunks; another size needs new
        // ones, as a chunk's size is fixed once allocated.
        let offset = match same_size {
            Some(offset) => offset,
            None => {
                let offset = bucket.next;
                let end = offset + sizes.len() as u64;
                if end > IDS_PER_BUCKET {
                    return Err(usage(
                        CALL,
                        name,
                        format_args!(
                            "the symbol table's bucket {b} has used all {IDS_PER_BUCKET} of its \
                             value chunk ids: rewrite symbols with values of the same size \
                             (which reuses their chunks) rather than new sizes"
                        ),
                    ));
                }
                bucket.next = end;
                offset
            }
        };
        let entry = Entry {
            name: name.to_owned(),
            offset,
            size: data.len() as u64,
        };
        match bucket.entries.iter_mut().find(|e| e.name == name) {
            Some(e) => *e = entry,
            None => bucket.entries.push(entry),
        }
        // Encoded before the value is written: a full bucket changes nothing.
        let bytes = bucket.encode().ok_or_else(|| {
            usage(
                CALL,
                name,
                format_args!(
                    "the symbol table's bucket {b} (chunk {bucket_id:#x}) is full: its {} \
                     entries do not fit in its {BUCKET_SIZE} bytes; names that hash to one \
                     bucket share its room, so use shorter names or fewer symbols",
                    bucket.entries.len()
                ),
            )
        })?;
        if !data.is_empty() {
            if let Err(e) = self.write_value(b, offset, &sizes, data) {
                // The entry stays as it was, but fresh ids may now exist at
                // their homes with this size: the counter moves past them,
                // or the next writer would MALLOC them with another size,
                // which is refused.
                if bucket.next != before.next {
                    let skipped = Bucket {
                        next: bucket.next,
                        ..before
                    };
                    if let Some(bytes) = skipped.encode() {
                        let _ = self.with_data_mut(bucket_id, |d| d.copy_from_slice(&bytes));
                    }
                }
                return Err(e);
            }
        }
        self.with_data_mut(bucket_id, |d| d.copy_from_slice(&bytes))?;
        Ok(())
    }

    /// Writes a value into its chunks (allocated here, or joined).
    fn write_value(&self, b: u64, offset: u64, sizes: &[usize], data: &[u8]) -> SatResult<()> {
        let chain = self.malloc_lst_reserved(
            ProtocolId::HomeMesi,
            &value_ids(b, offset, sizes.len()),
            sizes,
        )?;
        // WRITE, not READWRITE: every byte is replaced, the old ones need
        // not travel.
        let scope = self.write(&chain)?;
        scope.data_mut(|d| d.copy_from_slice(data))?;
        scope.release()
    }

    /// `readSymbol(name, &data, &size)`: a copy of the value written under
    /// `name`, in a buffer the caller owns. When no process has written the
    /// name yet, waits at most `timeout` for one to (module docs), then
    /// fails with [`SatError::Timeout`].
    pub fn read_symbol(&self, name: &str, timeout: Duration) -> SatResult<Vec<u8>> {
        const CALL: &str = "read_symbol";
        check_name(name).map_err(|e| usage(CALL, name, e))?;
        let deadline = self.deadline_in(timeout);
        let b = bucket_index(name);
        let bucket_id = self.open_bucket(CALL, name, b)?;
        loop {
            self.acquire_reserved(bucket_id, Access::Read)?;
            let seen = self.local_version(bucket_id);
            let found = self.read_in_bucket(name, b, bucket_id);
            let released = self.release(bucket_id);
            if let Some(value) = found? {
                released?;
                return Ok(value);
            }
            released?;
            if deadline.is_some_and(|d| self.clock.now() >= d) {
                return Err(SatError::Timeout(format!(
                    "{CALL}({}): no process wrote this symbol within {timeout:?}; \
                     write it with write_symbol somewhere, or read with a longer timeout",
                    quoted(name)
                )));
            }
            tracing::debug!(
                "{CALL}({}): not in bucket {b} yet, waiting for a writer",
                quoted(name)
            );
            self.wait_for_bucket_change(bucket_id, seen, deadline)?;
        }
    }

    /// Inside the bucket's READ scope: the value, if the name is there.
    fn read_in_bucket(&self, name: &str, b: u64, bucket_id: ChunkId) -> SatResult<Option<Vec<u8>>> {
        let bucket = self
            .with_data(bucket_id, |bytes| Bucket::decode(b, bytes))?
            .map_err(|e| corrupt_bucket("read_symbol", name, b, e))?;
        let Some(entry) = bucket.find(name) else {
            return Ok(None);
        };
        if entry.size == 0 {
            return Ok(Some(Vec::new()));
        }
        // A corrupt size is refused here, before any list of chunks is made.
        crate::chunk::check_chain_size(entry.size)?;
        let size = usize::try_from(entry.size).map_err(|_| {
            corrupt_bucket(
                "read_symbol",
                name,
                b,
                "a value is larger than memory".into(),
            )
        })?;
        let sizes = pieces(size, PIECE);
        let ids = value_ids(b, entry.offset, sizes.len());
        // The writer allocated these chunks before it released the entry.
        // A MALLOC of the same sizes joins them, and costs nothing when this
        // process knows them already (a LOOKUP would ask the homes each time).
        let chain = self.malloc_lst_reserved(ProtocolId::HomeMesi, &ids, &sizes)?;
        let scope = self.read(&chain)?;
        let value = scope.data(<[u8]>::to_vec)?;
        scope.release()?;
        Ok(Some(value))
    }

    /// MALLOCs bucket `b` (joining it when another process has), naming
    /// the reserved range when the id is taken with another size or protocol.
    fn open_bucket(&self, call: &str, name: &str, b: u64) -> SatResult<ChunkId> {
        let id = SYMBOL_TABLE_BASE + b;
        self.malloc_lst_reserved(ProtocolId::HomeMesi, &[id], &[BUCKET_SIZE])
            .map_err(|e| bucket_allocation_error(call, name, b, e))?;
        Ok(id)
    }

    /// The coherence version of this process's copy of `chunk` (the number
    /// of releases its home had applied when the copy was taken; 0 for
    /// the initial zeros), None when this process holds no copy. Inside a
    /// scope it is the version the scope sees.
    pub fn local_version(&self, chunk: ChunkId) -> Option<Version> {
        self.lock().store.get(chunk).and_then(|c| c.side.version())
    }

    /// Waits until this process's copy of a bucket, read at version `seen`,
    /// may have changed, or the deadline passes. The home invalidates every
    /// other process's copy before it grants a writer, so a write elsewhere
    /// ends the valid shared copy; a write by another thread of this process
    /// (whose copy the home leaves alone) shows as a newer version. An
    /// eviction wakes it too, harmlessly. No message is sent meanwhile.
    /// Handlers of events may run meanwhile (on the role's thread), as in
    /// other waits on other processes: no scope is open here, and one of
    /// them may be the writer this read waits for.
    ///
    /// A bucket whose home keeps its version in a host slot (a service or
    /// run on one host) is another case: its scopes leave no valid copy
    /// here (the slot is the copy) and get no invalidation, so the state
    /// says nothing. The wait watches the slot's version instead, sleeping
    /// on the slot between looks. (Taken as a change, the state would end
    /// the wait at once: the read would spin on the bucket, never running
    /// a handler, until its deadline.)
    pub(crate) fn wait_for_bucket_change(
        &self,
        bucket_id: ChunkId,
        seen: Option<Version>,
        deadline: Option<Instant>,
    ) -> SatResult<()> {
        let slot = self
            .lock()
            .store
            .get(bucket_id)
            .and_then(|c| c.host.clone());
        if let Some(slot) = slot {
            let watched = slot.clone();
            self.wait_inner(
                deadline,
                super::WaitFor::PeersRunningHandlers,
                Some(&slot),
                |st| {
                    // A bucket no longer here, or no longer in the slot,
                    // is read again the usual way.
                    let moved = st.store.get(bucket_id).is_none_or(|c| c.host.is_none());
                    (moved || Some(watched.slot().peek_version()) != seen).then_some(())
                },
            )?;
            return Ok(());
        }
        self.wait_running_handlers(deadline, |st| {
            let c = st.store.get(bucket_id)?;
            (c.side.state() != State::Shared || c.side.version() != seen).then_some(())
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
