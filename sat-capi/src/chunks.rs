//! Chunks as C sees them: `sat_chunk_t` (the report's `Chunk_t`), whose
//! `data` C reads and writes directly inside a scope (Figure 5).
//!
//! Every chain C allocates lives in memory this library owns (or, for MAP,
//! the caller's), handed to sat-core as the chain's local memory. So
//! `chunk->data` never moves while the handle is valid. The library's own
//! chains count against the topology's memory capacity and are evicted in
//! place ([`LocalMemory::discard`]): the pages go, the address stays; MAP'd
//! memory is never evicted. A handle is valid until `sat_chunk_free` gives it back
//! or the run (or session) ends; every call finds it in the registry of
//! live handles before it reads a field, so a stale one is refused.
//!
//! With feature `abe`, a handle may also be a protected chain (the
//! encryption layer, `crate::abe`): its `data` is then the vault's
//! plaintext buffer, which the vault owns and never moves, and its scopes go
//! through the vault. Plain handles keep the plain path.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_ulong, c_void};
use std::sync::{Arc, Mutex};

use sat_core::chunk::{check_chain_size, ChainLayout};
use sat_core::client::{Chain, Client, LocalMemory};
use sat_core::protocol::{Access, ProtocolId};

use crate::run::client;
use crate::status::{bad_argument, boundary, fail, out_of_memory, sat_status, usage};

/// A consistency protocol (the report's `Consistency_t`).
pub struct sat_consistency_t {
    protocol: ProtocolId,
}

impl sat_consistency_t {
    /// The consistency of a registered protocol (`protocols.rs`).
    pub(crate) fn of(protocol: ProtocolId) -> sat_consistency_t {
        sat_consistency_t { protocol }
    }

    pub(crate) fn protocol(&self) -> ProtocolId {
        self.protocol
    }
}

static HOME_BASED_MESI: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::HomeMesi,
};
static HOME_ONLY: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::HomeOnly,
};
static MESI_EXCLUSIVE: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::MesiExclusive,
};
static MESI_UPDATE: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::UpdateMesi,
};
static MULTIPLE_WRITERS: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::MultipleWriters,
};
static MESI_LEARNED: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::LearnedMesi,
};
static ADAPTIVE: sat_consistency_t = sat_consistency_t {
    protocol: ProtocolId::Adaptive,
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

/// Home-based MESI with its E state: a process holding the only copy of a
/// chunk (after its own write, or a read nobody else shares) opens its next
/// write scope with no message; its release still sends the new version
/// home. A request of another process first asks that holder (2 messages
/// more than in MESI). For data written again and again by one process.
/// The pointer is static: never free it.
#[no_mangle]
pub extern "C" fn sat_home_based_mesi_exclusive() -> *const sat_consistency_t {
    &MESI_EXCLUSIVE
}

/// Update-based MESI: a write invalidates the other copies as in MESI, and
/// its release then pushes the new version to them, so their next READ
/// needs no message. For data one process produces and others read after
/// each write. The pointer is static: never free it.
#[no_mangle]
pub extern "C" fn sat_home_based_mesi_update() -> *const sat_consistency_t {
    &MESI_UPDATE
}

/// Home-based lazy release consistency with multiple writers: several
/// processes may be inside write scopes of one chunk at once, each
/// publishing only the bytes it changed (a diff against the bytes its scope
/// opened on), merged at the home in the order the releases arrive; where
/// two writers change the same byte, the later release's value stays. For
/// chunks whose parts different processes write (rows of a matrix). Every
/// scope asks the home (2 messages), and a release waits for the home to
/// apply its diff (2). Not for protected chains.
/// The pointer is static: never free it.
#[no_mangle]
pub extern "C" fn sat_multiple_writers() -> *const sat_consistency_t {
    &MULTIPLE_WRITERS
}

/// Home-based MESI with learned communication sets: as a barrier's round
/// (`sat_barrier`) ends, the homes push each process, one message per
/// chunk, the chunks of this protocol that it READ after the same barrier
/// the last time and holds no valid copy of; its READs that follow are then
/// hits. Coherence is MESI's (a pushed copy is invalidated by the next
/// writer like any other), and nothing waits for a push. For iterative
/// programs that read the same chunks after each barrier (a stencil's
/// neighbours).
/// The pointer is static: never free it.
#[no_mangle]
pub extern "C" fn sat_home_based_mesi_learned() -> *const sat_consistency_t {
    &MESI_LEARNED
}

/// An adaptive chunk: it starts on home-based MESI, and its home watches the
/// requests it serves (read misses, whether they follow a barrier, write
/// requests and whether they find another's under way). After 8 write
/// requests, or 32 requests of any kind, it moves the chunk, once and
/// while the run goes on, to the protocol that pattern calls for: learned
/// sets, update-based MESI, MESI with E, home-only, or MESI kept
/// (docs/PROTOCOLS.md, "Adaptive chunks"). Coherence is that of each
/// protocol in turn; a process's scopes open during the switch end first,
/// and its next request after it goes under the new protocol. Environment
/// variable `SAT_ADAPTIVE=1` allocates every chunk asked for with MESI this
/// way. The pointer is static: never free it.
#[no_mangle]
pub extern "C" fn sat_adaptive() -> *const sat_consistency_t {
    &ADAPTIVE
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
    pub(crate) fn first(&self) -> u64 {
        self.chain.first()
    }

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
/// fields themselves. The handle stays valid until `sat_chunk_free` gives
/// it back, `sat_bootstrap` returns or `sat_detach` ends the session.
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
    /// address never changes while the handle is valid, and is 64-byte
    /// aligned unless the chain was MAP'd.
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
    /// The chains SAT allocates for C count against the process's
    /// `<memory capacity>`; over it, one out of every scope may be evicted
    /// in place: `chunk->data` keeps its address, its pages go back to the
    /// system, and the next scope fetches the data again. The caller's MAP
    /// memory is never evicted.
    fn discardable(&self) -> bool {
        self.owned
    }
    fn discard(&mut self) {
        let bytes = self.bytes_mut();
        let (start, end) = (
            bytes.as_ptr() as usize,
            bytes.as_ptr() as usize + bytes.len(),
        );
        let page = page_size();
        let (first, last) = (start.div_ceil(page) * page, end / page * page);
        // The whole pages inside the chain: MADV_DONTNEED gives them back
        // (they read as zeros next time); the partial pages at either end
        // are zeroed by hand.
        if cfg!(miri) || last <= first {
            bytes.fill(0);
            return;
        }
        bytes[..first - start].fill(0);
        bytes[last - start..].fill(0);
        // SAFETY: [first, last) lies inside this allocation, which SAT owns
        // and nothing reads while its chunks are outside scopes; anonymous
        // private memory reads as zeros after MADV_DONTNEED.
        let r = unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_DONTNEED,
            )
        };
        if r != 0 {
            bytes[first - start..last - start].fill(0);
        }
    }
}

/// The system's page size (4 KiB when it cannot be read).
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf reads a constant of the system.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
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

/// Chunk handles of this process. A call finds a handle here before it
/// reads any of its fields, so a handle of an earlier run, of a detached
/// session or given back with `sat_chunk_free` is refused, not followed.
#[derive(Default)]
struct Handles {
    /// Every live handle, by address, with what C does not see of it. A call
    /// holds its own reference, so a handle given back while another thread
    /// is inside a call on it stays whole until that call returns.
    live: HashMap<usize, Arc<sat_chunk_internal>>,
    /// The live handles by chain ids, so that allocating the same chain
    /// again returns it.
    by_ids: HashMap<Vec<u64>, usize>,
    /// Handles no longer valid, kept allocated (their fields still readable
    /// by C) for a while, so that a new handle does not take the address of
    /// one given back just before: a stale handle is then refused rather
    /// than taken for another chain. The oldest are freed past
    /// [`RETIRED_KEPT`].
    retired: VecDeque<usize>,
}

/// How many invalid handles stay allocated (40 bytes each).
const RETIRED_KEPT: usize = 4096;

static HANDLES: Mutex<Option<Handles>> = Mutex::new(None);

fn handles() -> std::sync::MutexGuard<'static, Option<Handles>> {
    HANDLES.lock().unwrap_or_else(|p| p.into_inner())
}

impl Handles {
    /// Makes `handle` invalid: out of the registry, into the retired ones.
    fn retire(&mut self, handle: usize) -> Option<Arc<sat_chunk_internal>> {
        let inner = self.live.remove(&handle)?;
        self.by_ids.retain(|_, &mut h| h != handle);
        // SAFETY: a handle of this registry, made by Box::into_raw in `insert`.
        unsafe { (*(handle as *mut sat_chunk_t)).internal = std::ptr::null_mut() };
        self.retired.push_back(handle);
        while self.retired.len() > RETIRED_KEPT {
            let old = self.retired.pop_front().expect("non-empty");
            // SAFETY: retired above, freed once here.
            drop(unsafe { Box::from_raw(old as *mut sat_chunk_t) });
        }
        Some(inner)
    }
}

/// Makes every handle invalid (the run is over, or the session detached),
/// and with feature `abe` forgets the process's vault.
pub(crate) fn forget_all() {
    if let Some(h) = handles().as_mut() {
        let all: Vec<usize> = h.live.keys().copied().collect();
        for p in all {
            h.retire(p);
        }
    }
    #[cfg(feature = "abe")]
    crate::abe::forget();
}

/// What an invalid handle is told.
fn stale(name: &str) -> sat_status {
    usage(&format!(
        "{name}: this chunk handle is not valid: its run has ended, its process detached from \
         the service, or sat_chunk_free gave it back (or it never came from SAT); use a handle \
         that MALLOC, LOOKUP or MAP gave in this run or session"
    ))
}

/// The internals of a live handle, or the error (NULL, or not a live handle).
pub(crate) fn live(
    name: &str,
    chunk: *const sat_chunk_t,
) -> Result<Arc<sat_chunk_internal>, sat_status> {
    // A fork() child is refused before it takes a lock another thread of
    // its parent may have held.
    crate::run::check_process()?;
    if chunk.is_null() {
        return Err(bad_argument(&format!(
            "{name}: chunk is NULL; give a chunk from MALLOC, LOOKUP or MAP"
        )));
    }
    let found = handles()
        .as_ref()
        .and_then(|h| h.live.get(&(chunk as usize)).cloned());
    found.ok_or_else(|| stale(name))
}

/// A live handle's internals and the client, for a call on the handle.
fn live_in_run(
    name: &str,
    chunk: *const sat_chunk_t,
) -> Result<(Arc<sat_chunk_internal>, crate::run::ClientRef), sat_status> {
    let inner = live(name, chunk)?;
    let c = client()?;
    Ok((inner, c))
}

/// The live handle this process has for the chain of exactly `ids`.
pub(crate) fn existing(ids: &[u64]) -> Option<(*mut sat_chunk_t, Arc<sat_chunk_internal>)> {
    let g = handles();
    let h = g.as_ref()?;
    let &p = h.by_ids.get(ids)?;
    Some((p as *mut sat_chunk_t, h.live.get(&p)?.clone()))
}

/// The handle of a plain chain just made. When another thread of this
/// process made a handle for the same ids meanwhile, that one is returned
/// (through `reuse`) and this chain is given back.
fn register(
    c: &Client,
    chain: Chain,
    data: *mut u8,
    dedup: bool,
    protocol: Option<ProtocolId>,
    reuse: impl FnOnce(*mut sat_chunk_t, &sat_chunk_internal) -> *mut sat_chunk_t,
) -> *mut sat_chunk_t {
    let sizes: Vec<usize> = chain.layout().chunks().iter().map(|&(_, s)| s).collect();
    let chunk = sat_chunk_t {
        id: chain.first(),
        size: chain.size(),
        data: data.cast(),
        nchunks: chain.len(),
        internal: std::ptr::null_mut(),
    };
    let inner = sat_chunk_internal {
        chain,
        sizes,
        protocol,
        #[cfg(feature = "abe")]
        protected: None,
    };
    match insert(chunk, inner, dedup) {
        Ok(handle) => handle,
        Err((first, ours)) => {
            if let Err(e) = c.unmap(&ours.chain) {
                tracing::debug!("a chain allocated twice at once stays in the store: {e}");
            }
            drop(ours);
            let inner = handles()
                .as_ref()
                .and_then(|h| h.live.get(&(first as usize)).cloned());
            match inner {
                Some(inner) => reuse(first, &inner),
                // Given back meanwhile by the thread that made it.
                None => {
                    stale("MALLOC");
                    std::ptr::null_mut()
                }
            }
        }
    }
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
    let inner = sat_chunk_internal {
        chain,
        sizes,
        protocol,
        protected: Some(protected),
    };
    match insert(chunk, inner, true) {
        Ok(h) => h,
        // The same protected chain reached twice at once: one vault chain,
        // so the same data; the first handle is kept.
        Err((first, _)) => first,
    }
}

/// Adds a handle to the registry (by its chain's ids when `dedup`). When a
/// live handle for the same ids exists already (another thread made it
/// meanwhile), nothing is added: the error holds that handle and the new
/// internals, for the caller to give back.
#[allow(clippy::type_complexity)]
fn insert(
    mut chunk: sat_chunk_t,
    internal: sat_chunk_internal,
    dedup: bool,
) -> Result<*mut sat_chunk_t, (*mut sat_chunk_t, sat_chunk_internal)> {
    let ids: Vec<u64> = internal.chain.ids().collect();
    let mut g = handles();
    let h = g.get_or_insert_with(Handles::default);
    if dedup {
        if let Some(&p) = h.by_ids.get(&ids) {
            return Err((p as *mut sat_chunk_t, internal));
        }
    }
    let internal = Arc::new(internal);
    chunk.internal = Arc::as_ptr(&internal).cast_mut();
    let handle = Box::into_raw(Box::new(chunk));
    h.live.insert(handle as usize, internal);
    if dedup {
        h.by_ids.insert(ids, handle as usize);
    }
    Ok(handle)
}

/// The protocol of a consistency argument: NULL is the default; anything
/// else must be one of the statics this library hands out.
pub(crate) fn protocol_of(
    name: &str,
    consistency: *const sat_consistency_t,
) -> Result<ProtocolId, sat_status> {
    if consistency.is_null() {
        return Ok(ProtocolId::default());
    }
    [
        &HOME_BASED_MESI,
        &HOME_ONLY,
        &MESI_EXCLUSIVE,
        &MESI_UPDATE,
        &MULTIPLE_WRITERS,
        &MESI_LEARNED,
        &ADAPTIVE,
    ]
    .into_iter()
    .find(|&known| std::ptr::eq(known, consistency))
    .map(|known| known.protocol)
    .or_else(|| crate::protocols::registered_protocol(consistency))
    .ok_or_else(|| {
        bad_argument(&format!(
            "{name}: the consistency argument is not one this library hands out; give \
                 sat_home_based_mesi() (newHomeBaseMESI()), sat_home_only(), \
                 sat_home_based_mesi_exclusive(), sat_home_based_mesi_update(), \
                 sat_multiple_writers(), sat_home_based_mesi_learned(), sat_adaptive(), one that \
                 sat_protocol_register() gave, or NULL"
        ))
    })
}

/// What a second allocation of a chain this process has (handle `h`) gets:
/// `h` when it asks for the same sizes and protocol, else NULL and the
/// error.
fn same_chain(
    name: &str,
    c: &Client,
    h: *mut sat_chunk_t,
    inner: &sat_chunk_internal,
    layout: &ChainLayout,
    protocol: ProtocolId,
) -> *mut sat_chunk_t {
    let first = layout.chunks()[0].0;
    #[cfg(feature = "abe")]
    if inner.protected.is_some() {
        fail(&sat_core::SatError::Usage(format!(
            "{name} of chunk {first}: this process holds that chain protected (from \
             sat_malloc_protected, or a LOOKUP of protected chunks); use that handle, or \
             sat_malloc_protected with the chain's write policy"
        )));
        return std::ptr::null_mut();
    }
    let sizes: Vec<usize> = layout.chunks().iter().map(|&(_, s)| s).collect();
    if inner.sizes == sizes {
        match inner.protocol {
            Some(p) if p == protocol => return h,
            // A handle of a LOOKUP: the core knows the protocol the homes
            // allocated the chunks with.
            None => {
                return match c.check_allocated_with(layout, protocol) {
                    Ok(()) => h,
                    Err(e) => {
                        fail(&e);
                        std::ptr::null_mut()
                    }
                }
            }
            Some(_) => {}
        }
    }
    fail(&sat_core::SatError::Usage(format!(
        "{name} of chunk {first} with {} bytes [{}]: this process already allocated that chain \
         with {} bytes{}; allocate it with the same size and protocol, or LOOKUP it",
        layout.total_size(),
        protocol.name(),
        inner.sizes.iter().sum::<usize>(),
        inner
            .protocol
            .map_or(String::new(), |p| format!(" [{}]", p.name())),
    )));
    std::ptr::null_mut()
}

/// Allocates a chain of `ids`/`sizes` in memory owned here.
fn allocate(name: &str, c: &Client, protocol: ProtocolId, layout: ChainLayout) -> *mut sat_chunk_t {
    let ids: Vec<u64> = layout.chunks().iter().map(|&(id, _)| id).collect();
    if let Some((h, inner)) = existing(&ids) {
        return same_chain(name, c, h, &inner, &layout, protocol);
    }
    if let Err(e) = check_chain_size(layout.total_size() as u64) {
        fail(&e.into());
        return std::ptr::null_mut();
    }
    let Some(memory) = CMemory::allocate(layout.total_size()) else {
        out_of_memory(&format!(
            "{name}: cannot allocate {} bytes of local memory for the chain",
            layout.total_size()
        ));
        return std::ptr::null_mut();
    };
    let data = memory.ptr;
    let sizes: Vec<usize> = layout.chunks().iter().map(|&(_, s)| s).collect();
    match c.map_lst(protocol, &ids, &sizes, Box::new(memory)) {
        Ok(chain) => register(c, chain, data, true, Some(protocol), |h, inner| {
            same_chain(name, c, h, inner, &layout, protocol)
        }),
        Err(e) => {
            fail(&e);
            std::ptr::null_mut()
        }
    }
}

/// MALLOC: `size` bytes from chunk `baseid` on, as a chain of chunks of the
/// default chunk size (`SAT_CHUNK_SIZE`), the last one as small as needed.
/// NULL `consistency` means home-based MESI. Allocating the same chain
/// again returns the same handle. NULL on error (see `sat_last_error`). A
/// chain one of whose chunks exists with another size, protocol or
/// protection fails having allocated none of its chunks (their homes are
/// asked first; only another process's MALLOC of the same chunks at the
/// same moment can leave part of it allocated).
///
/// Returns: NULL on error, with sat_last_status(): SAT_ERR_ARGUMENT (a
/// consistency SAT did not hand out), SAT_ERR_CHUNK (size 0 or over the
/// limit, a chain past the end of the space), SAT_ERR_USAGE (no run, a
/// fork() child, a chain over these chunks that exists with another layout
/// or protocol, an id from 0xFFFFFF0000000000 up: those are the symbol
/// table's, as in Rust and Python), SAT_ERR_NO_MEMORY, SAT_ERR_TRANSPORT,
/// SAT_ERR_ABORTED.
#[no_mangle]
pub extern "C" fn sat_malloc(
    consistency: *const sat_consistency_t,
    baseid: u64,
    size: usize,
) -> *mut sat_chunk_t {
    boundary("sat_malloc", || {
        let Ok(protocol) = protocol_of("MALLOC", consistency) else {
            return std::ptr::null_mut();
        };
        let Ok(c) = client() else {
            return std::ptr::null_mut();
        };
        if let Err(e) = check_chain_size(size as u64) {
            fail(&e.into());
            return std::ptr::null_mut();
        }
        match ChainLayout::malloc(baseid, size, c.chunk_size()) {
            Ok(layout) => allocate("MALLOC", &c, protocol, layout),
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
        Some(l) if l.len as u64 > MAX_CHAIN_CHUNKS => {
            bad_argument(&format!(
                "{name}: {what} has {} items; a chain has at most {MAX_CHAIN_CHUNKS} chunks",
                l.len
            ));
            None
        }
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
///
/// Returns: NULL on error, with sat_last_status(): SAT_ERR_ARGUMENT (NULL or
/// empty list, a consistency SAT did not hand out, more ids than a chain may
/// have), SAT_ERR_CHUNK, SAT_ERR_USAGE, SAT_ERR_NO_MEMORY, SAT_ERR_TRANSPORT,
/// SAT_ERR_ABORTED (as sat_malloc).
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
        let Ok(protocol) = protocol_of("MALLOC_LST", consistency) else {
            return std::ptr::null_mut();
        };
        let Ok(c) = client() else {
            return std::ptr::null_mut();
        };
        let sizes: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
        match ChainLayout::malloc_lst(&ids, &sizes) {
            Ok(layout) => allocate("MALLOC_LST", &c, protocol, layout),
            Err(e) => {
                fail(&e.into());
                std::ptr::null_mut()
            }
        }
    })
}

fn lookup_ids(name: &str, ids: Vec<u64>) -> *mut sat_chunk_t {
    let timeout = match crate::settings::lookup_timeout() {
        Ok(t) => t,
        Err(_) => return std::ptr::null_mut(),
    };
    let Ok(c) = client() else {
        return std::ptr::null_mut();
    };
    if let Some((h, _)) = existing(&ids) {
        return h;
    }
    let mut data = std::ptr::null_mut();
    let mut refused = false;
    let outcome = c.lookup_lst_into(&ids, timeout, |size| match CMemory::allocate(size) {
        Some(m) => {
            data = m.ptr;
            Some(Box::new(m) as Box<dyn LocalMemory>)
        }
        None => {
            refused = true;
            None
        }
    });
    match outcome {
        Ok(_) if refused => {
            out_of_memory(&format!(
                "{name}: cannot allocate local memory for the chain"
            ));
            std::ptr::null_mut()
        }
        Ok(chain) => {
            // Chunks with a label are protected: the handle is the vault's
            // plaintext, so that a reader written for plain chains works
            // unchanged.
            #[cfg(feature = "abe")]
            if c.any_labelled(&chain) {
                return crate::abe::adopt(name, &c, chain);
            }
            register(&c, chain, data, true, None, |h, _| h)
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
/// nobody has allocated yet. The consistency argument is checked as
/// sat_malloc checks it (NULL or one SAT handed out), then not used: a chunk
/// keeps the protocol it was allocated with.
///
/// Returns: NULL on error, with sat_last_status(): SAT_ERR_ARGUMENT (nbchunks
/// 0 or over the limit, a chain past the end of the space, a consistency SAT
/// did not hand out, a `SAT_LOOKUP_TIMEOUT` that is not a number of
/// seconds), SAT_ERR_TIMEOUT (nobody allocated it within
/// SAT_LOOKUP_TIMEOUT), SAT_ERR_CHUNK, SAT_ERR_USAGE (a chunk of the range
/// reserved for the symbol table, from 0xFFFFFF0000000000 up, which only
/// the symbol calls reach), SAT_ERR_NO_MEMORY, SAT_ERR_TRANSPORT,
/// SAT_ERR_ABORTED; with the encryption layer SAT_ERR_ACCESS_DENIED and
/// SAT_ERR_INTEGRITY.
#[no_mangle]
pub extern "C" fn sat_lookup(
    consistency: *const sat_consistency_t,
    baseid: u64,
    nbchunks: u32,
) -> *mut sat_chunk_t {
    boundary("sat_lookup", || {
        if protocol_of("LOOKUP", consistency).is_err() {
            return std::ptr::null_mut();
        }
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
/// does). The consistency argument is checked, then not used, as in LOOKUP.
///
/// Returns: NULL on error, with sat_last_status(): as sat_lookup, and
/// SAT_ERR_ARGUMENT for a NULL or empty list.
#[no_mangle]
pub extern "C" fn sat_lookup_lst(
    consistency: *const sat_consistency_t,
    ids: *const sat_ulong_list_t,
) -> *mut sat_chunk_t {
    boundary("sat_lookup_lst", || {
        if protocol_of("LOOKUP_LST", consistency).is_err() {
            return std::ptr::null_mut();
        }
        let Some(ids) = list("LOOKUP_LST", "idlst", ids) else {
            return std::ptr::null_mut();
        };
        lookup_ids("LOOKUP_LST", ids)
    })
}

/// MAP: MALLOC of `size` bytes from `baseid` whose local data is `data`
/// itself, used in place (Figure 6): `chunk->data == data`. The caller keeps
/// ownership of `data` and must keep it alive until `sat_bootstrap` returns.
/// `data` is also the chunks' instance in this process, which SAT may bring
/// up to date between scopes: a GET or a RELEASE of another chain over the
/// same chunks may rewrite it. Fill it inside a WRITE or READWRITE scope of
/// this chain, or right before its PUT with no other chain's scope on those
/// chunks in between.
///
/// Returns: NULL on error, with sat_last_status(): SAT_ERR_ARGUMENT (NULL
/// data, size 0, a consistency SAT did not hand out), SAT_ERR_CHUNK,
/// SAT_ERR_USAGE, SAT_ERR_TRANSPORT, SAT_ERR_ABORTED.
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
        let Ok(protocol) = protocol_of("MAP", consistency) else {
            return std::ptr::null_mut();
        };
        let Ok(c) = client() else {
            return std::ptr::null_mut();
        };
        let memory = CMemory {
            ptr: data.cast(),
            len: size,
            owned: false,
        };
        match c.map(protocol, baseid, Box::new(memory)) {
            Ok(chain) => register(&c, chain, data.cast(), false, Some(protocol), |h, _| h),
            Err(e) => {
                fail(&e);
                std::ptr::null_mut()
            }
        }
    })
}

/// The chain behind a live handle, or the error.
pub(crate) fn chain_of(name: &str, chunk: *const sat_chunk_t) -> Result<Chain, sat_status> {
    live(name, chunk).map(|i| i.chain.clone())
}

/// A scope call on a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScopeOp {
    Read,
    Write,
    ReadWrite,
    Release,
    Abort,
    Put,
    Get,
}

fn scope(name: &str, chunk: *mut sat_chunk_t, op: ScopeOp) -> sat_status {
    boundary(name, || {
        // A RELEASE also goes through while the role's end waits for the
        // calls in progress, which may be waiting for this very scope.
        let lent = match op {
            ScopeOp::Release | ScopeOp::Abort => crate::run::client_to_end_scopes(),
            _ => client(),
        };
        let (inner, c) = match live(name, chunk).and_then(|inner| Ok((inner, lent?))) {
            Ok(x) => x,
            Err(s) => return s,
        };
        #[cfg(feature = "abe")]
        if let Some(p) = &inner.protected {
            return match p.scope(&c, op) {
                Ok(()) => sat_status::SAT_OK,
                Err(e) => fail(&e),
            };
        }
        let ch = &inner.chain;
        let outcome = match op {
            ScopeOp::Read => c.acquire_chain(ch, Access::Read),
            ScopeOp::Write => c.acquire_chain(ch, Access::Write),
            ScopeOp::ReadWrite => c.acquire_chain(ch, Access::ReadWrite),
            ScopeOp::Release => c.release_chain(ch),
            ScopeOp::Abort => c.abort_chain(ch),
            ScopeOp::Put => c.put_chain(ch),
            ScopeOp::Get => c.get_chain(ch),
        };
        match outcome {
            Ok(()) => sat_status::SAT_OK,
            Err(e) => fail(&e),
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
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL), SAT_ERR_USAGE (a handle that
/// is not valid, no run, the chain already in a scope of this thread),
/// SAT_ERR_TRANSPORT, SAT_ERR_ABORTED; on a protected chain
/// SAT_ERR_ACCESS_DENIED, SAT_ERR_INTEGRITY.
#[no_mangle]
pub extern "C" fn sat_read(chunk: *mut sat_chunk_t) -> sat_status {
    scope("READ", chunk, ScopeOp::Read)
}

/// WRITE: opens an exclusive scope; the data may be stale (Figure 5). A
/// failure leaves no scope open and publishes nothing (see `sat_read`).
///
/// Returns: SAT_OK, or as sat_read.
#[no_mangle]
pub extern "C" fn sat_write(chunk: *mut sat_chunk_t) -> sat_status {
    scope("WRITE", chunk, ScopeOp::Write)
}

/// READWRITE: opens an exclusive scope on up-to-date data. A failure
/// leaves no scope open and publishes nothing (see `sat_read`).
///
/// Returns: SAT_OK, or as sat_read.
#[no_mangle]
pub extern "C" fn sat_readwrite(chunk: *mut sat_chunk_t) -> sat_status {
    scope("READWRITE", chunk, ScopeOp::ReadWrite)
}

/// RELEASE: closes the scope; after WRITE or READWRITE the new data goes
/// to the chunks' homes (of a protected chain: sealed as its next version).
/// When the message cannot be sent, the scope stays open as it was and
/// the error is returned. The new data is on its way when RELEASE returns,
/// not yet at every home (through messages; through shared memory on one
/// host it is in place): in a run that outlives it, a process killed before
/// it all arrived loses that release whole, its chunks keeping the version
/// before (a chain up to 256 MiB is never left part old, part new). A
/// process that ends (`exit`, a crash) inside a write scope publishes
/// nothing: its homes keep their versions. A RELEASE
/// of a chain that was not acquired (a chunk of it is in no scope, or in a
/// scope another chain over it opened: a LOOKUP of part of a chain in a
/// scope) returns `SAT_ERR_USAGE` and ends nothing, not even a scope that
/// another chain over one of its chunks opened: a chain's scope ends as a
/// whole, through the chain that opened it.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL), SAT_ERR_USAGE (not acquired,
/// a handle that is not valid, no run), SAT_ERR_TRANSPORT, SAT_ERR_ABORTED;
/// on a protected chain SAT_ERR_ACCESS_DENIED (this tenant may not write it).
#[no_mangle]
pub extern "C" fn sat_release(chunk: *mut sat_chunk_t) -> sat_status {
    scope("RELEASE", chunk, ScopeOp::Release)
}

/// ABORT: ends the scope without publishing anything: after WRITE or
/// READWRITE the chunks' homes keep their versions, and the next scope of
/// this process reads them again (what `chunk->data` holds meanwhile is not
/// the chain's data). For a thread that cannot finish what it writes. As
/// RELEASE, any thread of the process may end the scope, also while the end
/// of the role waits for the calls in progress (a protected chain's, only
/// the thread that opened it, as its RELEASE). On a protected chain nothing
/// is sealed, and the next scope decrypts the chain's version again. An
/// ABORT of a chain that was not acquired is refused and ends nothing, as
/// RELEASE's is.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL), SAT_ERR_USAGE (not acquired,
/// a handle that is not valid, no run), SAT_ERR_TRANSPORT, SAT_ERR_ABORTED.
#[no_mangle]
pub extern "C" fn sat_abort(chunk: *mut sat_chunk_t) -> sat_status {
    scope("ABORT", chunk, ScopeOp::Abort)
}

/// PUT: WRITE then RELEASE: publishes what the chain's memory holds.
///
/// Returns: SAT_OK, or as sat_write and sat_release.
#[no_mangle]
pub extern "C" fn sat_put(chunk: *mut sat_chunk_t) -> sat_status {
    scope("PUT", chunk, ScopeOp::Put)
}

/// GET: READ then RELEASE: the chain's memory then holds its current data.
///
/// Returns: SAT_OK, or as sat_read and sat_release.
#[no_mangle]
pub extern "C" fn sat_get(chunk: *mut sat_chunk_t) -> sat_status {
    scope("GET", chunk, ScopeOp::Get)
}

/// FREE: gives the chain back in this process (the report's "free: locally
/// removing the data"): its subscription through this handle ends (called
/// from another thread while its handler runs on the role's thread, FREE
/// waits for that run to end: no handler is given a chain given back), the
/// memory SAT allocated for it is returned to the system (a MAP'd chain's
/// memory stays the caller's), and the handle is invalid from then on
/// (every call with it returns `SAT_ERR_USAGE`; its fields stay readable a
/// while, `data` must not be used). The chunks stay in the S-DSM with their
/// versions, for this process to LOOKUP again and for the others.
///
/// Returns `SAT_ERR_USAGE` while a chunk of the chain is in a scope of this
/// process (RELEASE it first: nothing is given back), for a handle that is
/// not valid, and for a protected chain (its plaintext belongs to the
/// process's vault until the run ends); `SAT_ERR_ARGUMENT` for NULL.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT, SAT_ERR_USAGE (see above).
#[no_mangle]
pub extern "C" fn sat_chunk_free(chunk: *mut sat_chunk_t) -> sat_status {
    const NAME: &str = "FREE";
    boundary("sat_chunk_free", || {
        let (inner, c) = match live_in_run(NAME, chunk) {
            Ok(x) => x,
            Err(s) => return s,
        };
        #[cfg(feature = "abe")]
        if inner.protected.is_some() {
            return usage(&format!(
                "{NAME} of chunk {}: a protected chain cannot be given back before the run ends \
                 (its plaintext belongs to the process's vault); keep the handle",
                inner.chain.first()
            ));
        }
        // Refused (a chunk in a scope): nothing changes, the subscription
        // through this handle included. Otherwise the subscription ends with
        // the chain, in one critical section: the handler must not run with
        // a handle that is gone (the memory outlives it until here).
        let memory = match c.free_mapped_for(NAME, &inner.chain) {
            Ok(memory) => memory,
            Err(e) => return fail(&e),
        };
        if let Some(h) = handles().as_mut() {
            h.retire(chunk as usize);
        }
        drop(memory);
        sat_status::SAT_OK
    })
}

/// The handle checks and the chains' local memory, without a run: plain
/// unit tests, and the ones `make miri` runs under Miri, which checks that
/// no call reads through a pointer it was not given by SAT.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_memory_is_zeroed_aligned_and_given_back() {
        for len in [1usize, 63, 64, 4097] {
            let mut m = CMemory::allocate(len).expect("a small allocation");
            assert_eq!(m.ptr as usize % ALIGN, 0);
            assert!(m.bytes().iter().all(|&b| b == 0));
            m.bytes_mut()[len - 1] = 0xab;
            assert_eq!(m.bytes()[len - 1], 0xab);
            assert!(m.exposed());
            // Dropped here: Miri reports a layout that differs from the
            // allocation's, or a leak.
        }
    }

    #[test]
    fn handles_sat_did_not_give_are_refused_before_any_read() {
        // Pointers no call may follow: a made-up address, one past a live
        // allocation, and one into freed memory.
        let freed = Box::into_raw(Box::new(0u64));
        // SAFETY: from Box::into_raw, freed once here.
        drop(unsafe { Box::from_raw(freed) });
        let local = [0u8; 8];
        let candidates: [*mut sat_chunk_t; 3] = [
            std::ptr::without_provenance_mut(0x1000),
            local.as_ptr().wrapping_add(8).cast_mut().cast(),
            freed.cast(),
        ];
        for chunk in candidates {
            let e = live("READ", chunk).map(|_| ()).unwrap_err();
            assert_eq!(e, sat_status::SAT_ERR_USAGE);
            assert_eq!(sat_read(chunk), sat_status::SAT_ERR_USAGE);
            assert_eq!(sat_release(chunk), sat_status::SAT_ERR_USAGE);
            assert_eq!(sat_chunk_free(chunk), sat_status::SAT_ERR_USAGE);
        }
        assert_eq!(
            live("READ", std::ptr::null()).map(|_| ()).unwrap_err(),
            sat_status::SAT_ERR_ARGUMENT
        );
        assert_eq!(
            sat_write(std::ptr::null_mut()),
            sat_status::SAT_ERR_ARGUMENT
        );
    }

    #[test]
    fn allocation_outside_a_run_is_refused_without_allocating() {
        let not_a_protocol = 1u64;
        let bad = std::ptr::from_ref(&not_a_protocol).cast::<sat_consistency_t>();
        assert!(sat_malloc(bad, 7, 8).is_null());
        assert_eq!(
            crate::status::sat_last_status(),
            sat_status::SAT_ERR_ARGUMENT
        );
        // No run: refused before the size is looked at.
        assert!(sat_lookup(std::ptr::null(), 7, u32::MAX).is_null());
        assert!(sat_malloc(sat_home_based_mesi(), 7, usize::MAX).is_null());
        assert_ne!(crate::status::sat_last_status(), sat_status::SAT_OK);
    }
}
