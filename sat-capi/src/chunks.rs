//! Chunks as C sees them: `sat_chunk_t` (the report's `Chunk_t`), whose
//! `data` C reads and writes directly inside a scope (Figure 5).
//!
//! Every chain C allocates lives in memory this library owns (or, for MAP,
//! the caller's), handed to sat-core as the chain's local memory. So
//! `chunk->data` never moves while the run lasts: such chains are never
//! evicted (the topology's memory capacity applies to the Rust API's own
//! chains only). Chunk handles stay valid until `sat_bootstrap` returns.
//!
//! With feature `abe`, a handle may also be a protected chain (the
//! encryption layer, [`crate::abe`]): its `data` is then the vault's
//! plaintext buffer, which the vault owns and never moves, and its scopes go
//! through the vault. Plain handles keep the plain path.

use std::collections::HashMap;
use std::ffi::{c_char, c_ulong, c_void};
use std::sync::Mutex;
use std::time::Duration;

use sat_core::chunk::{check_chain_size, ChainLayout};
use sat_core::client::{Chain, LocalMemory};
use sat_core::protocol::{Access, ProtocolId};

use crate::run::client;
use crate::status::{bad_argument, boundary, fail};

/// A consistency protocol (the report's `Consistency_t`).
pub struct sat_consistency_t {
    protocol: ProtocolId,
}

static HOME_BASED_MESI: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::HomeMesi,
};
static HOME_ONLY: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::HomeOnly,
};

/// The home-based MESI protocol (the default; the report's `newHomeBaseMESI`).
/// The pointer is static: never free it.
#[no_mangle]
pub extern "C" fn sat_home_based_mesi() -> *const sat_consistency_t {
    &HOME_BASED_MESI
}

/// The home-only protocol: every scope at the home, no client caching.
#[no_mangle]
pub extern "C" fn sat_home_only() -> *const sat_consistency_t {
    &HOME_ONLY
}

/// A list of unsigned longs (the report's `UnsignedLongList_t`).
#[repr(C)]
pub struct sat_ulong_list_t {
    pub len: usize,
    pub items: *const c_ulong,
}

/// What C does not touch in a chunk handle.
pub struct sat_chunk_internal {
    /// The chain in the S-DSM (of a protected chain: its sealed chunks).
    chain: Chain,
    /// The chunk sizes of the chain, to tell a repeated allocation of the
    /// same chain from a conflicting one (of a protected chain: plaintext
    /// sizes).
    sizes: Vec<usize>,
    protocol: Option<ProtocolId>,
    /// Set for a protected chain: scopes go through its vault, and `data`
    /// is the vault's plaintext (not memory of this module).
    #[cfg(feature = "abe")]
    protected: Option<crate::abe::Protected>,
}

#[cfg(feature = "abe")]
impl sat_chunk_internal {
    pub(crate) fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    pub(crate) fn protocol(&self) -> Option<ProtocolId> {
        self.protocol
    }

    pub(crate) fn protected(&self) -> Option<&crate::abe::Protected> {
        self.protected.as_ref()
    }
}

/// A chunk chain as C sees it (the report's `Chunk_t`). C reads every
/// field and reads and writes the bytes at `data`; it never writes the
/// fields themselves. The handle stays valid until `sat_bootstrap` returns.
#[repr(C)]
pub struct sat_chunk_t {
    /// The chain's first chunk.
    pub id: u64,
    /// The size of the chain's data in bytes.
    pub size: usize,
    /// The chain's contiguous data: valid inside a scope (READ, WRITE,
    /// READWRITE ... RELEASE); for a MAP'd chain, the caller's memory.
    /// `char *` rather than `void *`: chunks are "a multiple of a C char
    /// type" (section 2.2) and Figure 5 indexes `chunk->data[i]` as it is;
    /// cast it for other types (`int *v = (int *)chunk->data;`). The
    /// address never changes while the run lasts, and is 64-byte aligned
    /// unless the chain was MAP'd.
    pub data: *mut c_char,
    /// The number of chunks in the chain.
    pub nchunks: usize,
    /// SAT's own state: do not touch.
    pub internal: *mut sat_chunk_internal,
}

/// Memory a chain lives in: allocated here (zeroed, 64-byte aligned) or the
/// caller's (MAP).
struct CMemory {
    ptr: *mut u8,
    len: usize,
    owned: bool,
}

const ALIGN: usize = 64;

impl CMemory {
    fn allocate(len: usize) -> Option<CMemory> {
        let layout = std::alloc::Layout::from_size_align(len, ALIGN).ok()?;
        // SAFETY: len > 0 (a chain has at least one byte), layout valid.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(CMemory {
            ptr,
            len,
            owned: true,
        })
    }
}

// SAFETY: the memory is plain bytes; sat-core touches it only under its
// client's lock, and C only inside scopes that sat-core has granted.
unsafe impl Send for CMemory {}

impl LocalMemory for CMemory {
    fn bytes(&self) -> &[u8] {
        // SAFETY: ptr holds len bytes for the chain's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    /// C (or Python) can write these bytes at any time: writes outside a
    /// write scope must be detected and lost, not published.
    fn exposed(&self) -> bool {
        true
    }
}

impl Drop for CMemory {
    fn drop(&mut self) {
        if self.owned {
            let layout = std::alloc::Layout::from_size_align(self.len, ALIGN).expect("allocated");
            // SAFETY: allocated by `allocate` with this layout.
            unsafe { std::alloc::dealloc(self.ptr, layout) };
        }
    }
}

/// Chunk handles of this process: by chain ids (so allocating the same
/// chain again returns it), and every handle, freed when the run ends.
#[derive(Default)]
struct Handles {
    by_ids: HashMap<Vec<u64>, usize>,
    all: Vec<usize>,
}

static HANDLES: Mutex<Option<Handles>> = Mutex::new(None);

fn handles() -> std::sync::MutexGuard<'static, Option<Handles>> {
    HANDLES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Frees every handle (the run is over), and with feature `abe` the
/// process's vault.
pub(crate) fn forget_all() {
    if let Some(h) = handles().take() {
        for p in h.all {
            // SAFETY: made by Box::into_raw in `insert`, freed once here.
            let chunk = unsafe { Box::from_raw(p as *mut sat_chunk_t) };
            // SAFETY: as above. A handle owns no chain memory: plain chains'
            // memory belongs to the client's store, protected chains'
            // plaintext to their vault.
            drop(unsafe { Box::from_raw(chunk.internal) });
        }
    }
    #[cfg(feature = "abe")]
    crate::abe::forget();
}

/// The handle this process has for the chain of exactly `ids`.
pub(crate) fn existing(ids: &[u64]) -> Option<*mut sat_chunk_t> {
    handles()
        .as_ref()
        .and_then(|h| h.by_ids.get(ids))
        .map(|&p| p as *mut sat_chunk_t)
}

fn register(
    chain: Chain,
    data: *mut u8,
    dedup: bool,
    protocol: Option<ProtocolId>,
) -> *mut sat_chunk_t {
    let sizes: Vec<usize> = chain.layout().chunks().iter().map(|&(_, s)| s).collect();
    let chunk = sat_chunk_t {
        id: chain.first(),
        size: chain.size(),
        data: data.cast(),
        nchunks: chain.len(),
        internal: std::ptr::null_mut(),
    };
    insert(
        chunk,
        sat_chunk_internal {
            chain,
            sizes,
            protocol,
            #[cfg(feature = "abe")]
            protected: None,
        },
        dedup,
    )
}

/// The handle of a protected chain: `data` is the vault's plaintext, whose
/// address is fixed for the chain's life; the registry gives the same
/// handle for the same chain.
#[cfg(feature = "abe")]
pub(crate) fn register_protected(
    protected: crate::abe::Protected,
    protocol: Option<ProtocolId>,
) -> *mut sat_chunk_t {
    let secure = protected.chain();
    let chunk = sat_chunk_t {
        id: secure.first(),
        size: secure.size(),
        data: secure.as_ptr().cast(),
        nchunks: secure.len(),
        internal: std::ptr::null_mut(),
    };
    let chain = secure.sealed().clone();
    let sizes = secure.sizes();
    insert(
        chunk,
        sat_chunk_internal {
            chain,
            sizes,
            protocol,
            protected: Some(protected),
        },
        true,
    )
}

/// Adds a handle to the registry (by its chain's ids when `dedup`). When a
/// handle for the same ids already shows the same data (the same protected
/// chain, reached twice at once), that one is kept and returned.
fn insert(mut chunk: sat_chunk_t, internal: sat_chunk_internal, dedup: bool) -> *mut sat_chunk_t {
    let ids: Vec<u64> = internal.chain.ids().collect();
    let mut g = handles();
    let h = g.get_or_insert_with(Handles::default);
    if dedup {
        if let Some(&p) = h.by_ids.get(&ids) {
            let p = p as *mut sat_chunk_t;
            // SAFETY: a live handle of the registry, read under its lock.
            if unsafe { (*p).data } == chunk.data {
                return p;
            }
        }
    }
    chunk.internal = Box::into_raw(Box::new(internal));
    let handle = Box::into_raw(Box::new(chunk));
    h.all.push(handle as usize);
    if dedup {
        h.by_ids.insert(ids, handle as usize);
    }
    handle
}

pub(crate) fn protocol_of(consistency: *const sat_consistency_t) -> ProtocolId {
    if consistency.is_null() {
        ProtocolId::default()
    } else {
        // SAFETY: one of the statics this library hands out.
        unsafe { (*consistency).protocol }
    }
}

/// Allocates a chain of `ids`/`sizes` in memory owned here.
fn allocate(
    name: &str,
    consistency: *const sat_consistency_t,
    layout: ChainLayout,
) -> *mut sat_chunk_t {
    let c = match client() {
        Ok(c) => c,
        Err(_) => return std::ptr::null_mut(),
    };
    let ids: Vec<u64> = layout.chunks().iter().map(|&(id, _)| id).collect();
    let sizes: Vec<usize> = layout.chunks().iter().map(|&(_, s)| s).collect();
    let protocol = protocol_of(consistency);
    if let Some(h) = existing(&ids) {
        // SAFETY: a live handle of this library.
        let inner = unsafe { &*(*h).internal };
        #[cfg(feature = "abe")]
        if inner.protected.is_some() {
            fail(&sat_core::SatError::Usage(format!(
                "{name} of chunk {}: this process holds that chain protected (from \
                 sat_malloc_protected, or a LOOKUP of protected chunks); use that handle, or \
                 sat_malloc_protected with the chain's write policy",
                ids[0]
            )));
            return std::ptr::null_mut();
        }
        if inner.sizes == sizes && inner.protocol.is_none_or(|p| p == protocol) {
            return h;
        }
        fail(&sat_core::SatError::Usage(format!(
            "{name} of chunk {} with {} bytes [{}]: this process already allocated that chain \
             with {} bytes{}; allocate it with the same size and protocol, or LOOKUP it",
            ids[0],
            layout.total_size(),
            protocol.name(),
            inner.sizes.iter().sum::<usize>(),
            inner
                .protocol
                .map_or(String::new(), |p| format!(" [{}]", p.name())),
        )));
        return std::ptr::null_mut();
    }
    if let Err(e) = check_chain_size(layout.total_size() as u64) {
        fail(&e.into());
        return std::ptr::null_mut();
    }
    let Some(memory) = CMemory::allocate(layout.total_size()) else {
        bad_argument(&format!(
            "{name}: cannot allocate {} bytes of local memory for the chain",
            layout.total_size()
        ));
        return std::ptr::null_mut();
    };
    let data = memory.ptr;
    let sizes: Vec<usize> = layout.chunks().iter().map(|&(_, s)| s).collect();
    match c.map_lst(protocol, &ids, &sizes, Box::new(memory)) {
        Ok(chain) => register(chain, data, true, Some(protocol)),
        Err(e) => {
            fail(&e);
            std::ptr::null_mut()
        }
    }
}

/// MALLOC: `size` bytes from chunk `baseid` on, as a chain of chunks of the
/// default chunk size (`SAT_CHUNK_SIZE`), the last one as small as needed.
/// NULL `consistency` means home-based MESI. Allocating the same chain
/// again returns the same handle. NULL on error (see `sat_last_error`).
#[no_mangle]
pub extern "C" fn sat_malloc(
    consistency: *const sat_consistency_t,
    baseid: u64,
    size: usize,
) -> *mut sat_chunk_t {
    boundary("sat_malloc", || {
        let Ok(c) = client() else {
            return std::ptr::null_mut();
        };
        if let Err(e) = check_chain_size(size as u64) {
            fail(&e.into());
            return std::ptr::null_mut();
        }
        match ChainLayout::malloc(baseid, size, c.chunk_size()) {
            Ok(layout) => allocate("MALLOC", consistency, layout),
            Err(e) => {
                fail(&e.into());
                std::ptr::null_mut()
            }
        }
    })
}

/// An `unsigned long` as a chunk id or size: it is u64 on LP64 targets
/// (where the conversion is the identity) but u32 on LLP64 ones (Windows).
#[allow(clippy::useless_conversion)]
fn widen(x: c_ulong) -> u64 {
    u64::from(x)
}

/// Reads a C list; None (with the error recorded) when it is NULL or empty.
fn list(name: &str, what: &str, l: *const sat_ulong_list_t) -> Option<Vec<u64>> {
    // SAFETY: NULL-checked; the caller gives `len` items.
    let l = unsafe { l.as_ref() };
    match l {
        Some(l) if l.len > 0 && !l.items.is_null() => {
            // SAFETY: as above.
            let items = unsafe { std::slice::from_raw_parts(l.items, l.len) };
            Some(items.iter().map(|&x| widen(x)).collect())
        }
        _ => {
            bad_argument(&format!(
                "{name}: {what} is NULL or empty; give at least one item"
            ));
            None
        }
    }
}

/// MALLOC_LST: chunk `ids[i]` gets `sizes[i % sizes->len]` bytes, in one
/// chain contiguous in local memory.
#[no_mangle]
pub extern "C" fn sat_malloc_lst(
    consistency: *const sat_consistency_t,
    ids: *const sat_ulong_list_t,
    sizes: *const sat_ulong_list_t,
) -> *mut sat_chunk_t {
    boundary("sat_malloc_lst", || {
        let (Some(ids), Some(sizes)) = (
            list("MALLOC_LST", "idlst", ids),
            list("MALLOC_LST", "sizelst", sizes),
        ) else {
            return std::ptr::null_mut();
        };
        let sizes: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
        match ChainLayout::malloc_lst(&ids, &sizes) {
            Ok(layout) => allocate("MALLOC_LST", consistency, layout),
            Err(e) => {
                fail(&e.into());
                std::ptr::null_mut()
            }
        }
    })
}

/// How long a LOOKUP waits for a chunk nobody has allocated yet:
/// `SAT_LOOKUP_TIMEOUT` seconds, 60 by default.
fn lookup_timeout() -> Duration {
    let secs = std::env::var("SAT_LOOKUP_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s >= 0.0)
        .unwrap_or(60.0);
    Duration::from_secs_f64(secs)
}

fn lookup_ids(name: &str, ids: Vec<u64>) -> *mut sat_chunk_t {
    let Ok(c) = client() else {
        return std::ptr::null_mut();
    };
    if let Some(h) = existing(&ids) {
        return h;
    }
    let mut data = std::ptr::null_mut();
    let mut refused = false;
    let outcome = c.lookup_lst_into(&ids, lookup_timeout(), |size| {
        match CMemory::allocate(size) {
            Some(m) => {
                data = m.ptr;
                Some(Box::new(m) as Box<dyn LocalMemory>)
            }
            None => {
                refused = true;
                None
            }
        }
    });
    match outcome {
        Ok(_) if refused => {
            bad_argument(&format!(
                "{name}: cannot allocate local memory for the chain"
            ));
            std::ptr::null_mut()
        }
        Ok(chain) => {
            // Chunks with a label are protected: the handle is the vault's
            // plaintext, so that a reader written for plain chains works
            // unchanged.
            #[cfg(feature = "abe")]
            if crate::abe::is_protected(c, &chain) {
                return crate::abe::adopt(name, c, chain);
            }
            register(chain, data, true, None)
        }
        Err(e) => {
            fail(&e);
            std::ptr::null_mut()
        }
    }
}

/// The most chunks one LOOKUP chain may have: a million (64 GiB of 64 KiB
/// chunks). Past it the list of ids alone would be gigabytes.
const MAX_CHAIN_CHUNKS: u64 = 1 << 20;

/// LOOKUP: the chain of chunks `baseid` to `baseid + nbchunks - 1`, with
/// sizes from their homes; waits (up to `SAT_LOOKUP_TIMEOUT` s) for chunks
/// nobody has allocated yet. The consistency argument is ignored: a chunk
/// keeps the protocol it was allocated with.
#[no_mangle]
pub extern "C" fn sat_lookup(
    consistency: *const sat_consistency_t,
    baseid: u64,
    nbchunks: u32,
) -> *mut sat_chunk_t {
    let _ = consistency;
    boundary("sat_lookup", || {
        if nbchunks == 0 {
            bad_argument("LOOKUP: nbchunks is 0; ask for at least one chunk");
            return std::ptr::null_mut();
        }
        let Some(last) = baseid.checked_add(nbchunks as u64 - 1) else {
            bad_argument("LOOKUP: the chain runs past the end of the logical space");
            return std::ptr::null_mut();
        };
        if u64::from(nbchunks) > MAX_CHAIN_CHUNKS {
            bad_argument(&format!(
                "LOOKUP: a chain of {nbchunks} chunks; a chain has at most {MAX_CHAIN_CHUNKS}: \
                 look it up in parts"
            ));
            return std::ptr::null_mut();
        }
        // Not attached: said before the id list is made.
        if client().is_err() {
            return std::ptr::null_mut();
        }
        lookup_ids("LOOKUP", (baseid..=last).collect())
    })
}

/// LOOKUP_LST: the chain of chunks `ids`, in that order (waits as LOOKUP
/// does). The consistency argument is ignored, as in LOOKUP.
#[no_mangle]
pub extern "C" fn sat_lookup_lst(
    consistency: *const sat_consistency_t,
    ids: *const sat_ulong_list_t,
) -> *mut sat_chunk_t {
    let _ = consistency;
    boundary("sat_lookup_lst", || {
        let Some(ids) = list("LOOKUP_LST", "idlst", ids) else {
            return std::ptr::null_mut();
        };
        lookup_ids("LOOKUP_LST", ids)
    })
}

/// MAP: MALLOC of `size` bytes from `baseid` whose local data is `data`
/// itself, used in place (Figure 6): `chunk->data == data`. The caller keeps
/// ownership of `data` and must keep it alive until `sat_bootstrap` returns.
#[no_mangle]
pub extern "C" fn sat_map(
    consistency: *const sat_consistency_t,
    baseid: u64,
    size: usize,
    data: *mut c_void,
) -> *mut sat_chunk_t {
    boundary("sat_map", || {
        if data.is_null() || size == 0 {
            bad_argument("MAP: data is NULL or size is 0; give the memory to map and its size");
            return std::ptr::null_mut();
        }
        let Ok(c) = client() else {
            return std::ptr::null_mut();
        };
        let memory = CMemory {
            ptr: data.cast(),
            len: size,
            owned: false,
        };
        match c.map(protocol_of(consistency), baseid, Box::new(memory)) {
            Ok(chain) => register(chain, data.cast(), false, Some(protocol_of(consistency))),
            Err(e) => {
                fail(&e);
                std::ptr::null_mut()
            }
        }
    })
}

/// The chain behind a handle, or the argument error.
pub(crate) fn chain_of(name: &str, chunk: *const sat_chunk_t) -> Result<Chain, i32> {
    // SAFETY: NULL-checked; handles come from this library.
    match unsafe { chunk.as_ref() }.and_then(|c| unsafe { c.internal.as_ref() }) {
        Some(i) => Ok(i.chain.clone()),
        None => Err(bad_argument(&format!(
            "{name}: chunk is NULL; give a chunk from MALLOC, LOOKUP or MAP"
        )) as i32),
    }
}

/// A scope call on a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScopeOp {
    Read,
    Write,
    ReadWrite,
    Release,
    Put,
    Get,
}

fn scope(name: &str, chunk: *mut sat_chunk_t, op: ScopeOp) -> i32 {
    boundary(name, || {
        // SAFETY: NULL-checked; handles come from this library and stay
        // valid (and unchanged) until the run ends.
        let Some(inner) = unsafe { chunk.as_ref() }.and_then(|c| unsafe { c.internal.as_ref() })
        else {
            return bad_argument(&format!(
                "{name}: chunk is NULL; give a chunk from MALLOC, LOOKUP or MAP"
            )) as i32;
        };
        let c = match client() {
            Ok(c) => c,
            Err(s) => return s as i32,
        };
        #[cfg(feature = "abe")]
        if let Some(p) = &inner.protected {
            return match p.scope(c, op) {
                Ok(()) => 0,
                Err(e) => fail(&e) as i32,
            };
        }
        let ch = &inner.chain;
        let outcome = match op {
            ScopeOp::Read => c.acquire_chain(ch, Access::Read),
            ScopeOp::Write => c.acquire_chain(ch, Access::Write),
            ScopeOp::ReadWrite => c.acquire_chain(ch, Access::ReadWrite),
            ScopeOp::Release => c.release_chain(ch),
            ScopeOp::Put => c.put_chain(ch),
            ScopeOp::Get => c.get_chain(ch),
        };
        match outcome {
            Ok(()) => 0,
            Err(e) => fail(&e) as i32,
        }
    })
}

/// READ: opens a read scope on the whole chain; `chunk->data` holds the
/// current data until RELEASE. Changes made inside a READ scope are lost
/// (Figure 5): they are never sent anywhere, and the next scope on the
/// chain sees the home's version again, not them.
///
/// When a READ, WRITE or READWRITE fails part way (a chunk of the chain is
/// refused after others were granted), it returns the error with no scope
/// open: the chunks already granted are ended without publishing anything,
/// and their homes keep their versions.
///
/// On a protected chain (feature `abe`), every version is checked and
/// decrypted into `chunk->data`: `SAT_ERR_ACCESS_DENIED` when this tenant
/// may not read it, `SAT_ERR_INTEGRITY` when a check fails (the data then
/// holds zeros, never unverified bytes); either way no scope is open.
#[no_mangle]
pub extern "C" fn sat_read(chunk: *mut sat_chunk_t) -> i32 {
    scope("READ", chunk, ScopeOp::Read)
}

/// WRITE: opens an exclusive scope; the data may be stale (Figure 5). A
/// failure leaves no scope open and publishes nothing (see `sat_read`).
#[no_mangle]
pub extern "C" fn sat_write(chunk: *mut sat_chunk_t) -> i32 {
    scope("WRITE", chunk, ScopeOp::Write)
}

/// READWRITE: opens an exclusive scope on up-to-date data. A failure
/// leaves no scope open and publishes nothing (see `sat_read`).
#[no_mangle]
pub extern "C" fn sat_readwrite(chunk: *mut sat_chunk_t) -> i32 {
    scope("READWRITE", chunk, ScopeOp::ReadWrite)
}

/// RELEASE: closes the scope; after WRITE or READWRITE the new data goes
/// to the chunks' homes (of a protected chain: sealed as its next version).
/// When the message cannot be sent, the scope stays open as it was and
/// the error is returned. A process that ends (`exit`, a crash) inside a
/// write scope publishes nothing: its homes keep their versions. A RELEASE
/// of a chain that was not acquired (a chunk of it is in no scope) returns
/// `SAT_ERR_USAGE` and ends nothing, not even a scope that another chain
/// over one of its chunks opened.
#[no_mangle]
pub extern "C" fn sat_release(chunk: *mut sat_chunk_t) -> i32 {
    scope("RELEASE", chunk, ScopeOp::Release)
}

/// PUT: WRITE then RELEASE: publishes what the chain's memory holds.
#[no_mangle]
pub extern "C" fn sat_put(chunk: *mut sat_chunk_t) -> i32 {
    scope("PUT", chunk, ScopeOp::Put)
}

/// GET: READ then RELEASE: the chain's memory then holds its current data.
#[no_mangle]
pub extern "C" fn sat_get(chunk: *mut sat_chunk_t) -> i32 {
    scope("GET", chunk, ScopeOp::Get)
}
