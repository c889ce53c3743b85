//! Chains, their scopes, and the buffer that shows a chain's bytes to
//! Python with no copy.
//!
//! As in the C ABI (`sat-capi/src/chunks.rs`), every chain lives in memory
//! this module allocates, handed to the core as the chain's local memory
//! (MAP), or, for `Client.map`, in the caller's own buffer. So the address
//! Python sees never moves, and stays valid as long as anything holds the
//! memory: the [`Region`] is shared by the core and the Python [`PyChain`],
//! whose [`PyBuffer`] exports keep it alive; a caller's buffer stays
//! exported (so neither freed nor resized) for as long as the region lives.
//! Such chains are never evicted (the topology's memory capacity applies to
//! the core's own chains only).

use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyImportError, PyMemoryError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyMemoryView, PyTuple};
use sat_core::client::SlotView;

use sat_core::chunk::{check_chain_size, ChainLayout, ChunkError, MAX_CHUNK_SIZE};
use sat_core::client::{Chain as CoreChain, LocalMemory};
use sat_core::protocol::{Access, ProtocolId};
use sat_core::SatError as CoreError;

use crate::abe;
use crate::errors::{to_py, usage};
use crate::handle::Handle;

/// Chain memory is aligned for any numpy dtype and for cache lines, as the
/// C ABI's is.
const ALIGN: usize = 64;

/// The protocol a `protocol=` argument names (`ProtocolId::short_name`).
pub(crate) fn parse_protocol(name: &str) -> PyResult<ProtocolId> {
    ProtocolId::from_short_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "protocol {name:?}: give 'mesi' (home-based MESI, the default), 'home-only' (every \
             scope served by the home, no cached copies), 'mesi-e' (MESI with its E state: the \
             only holder writes again with no message), 'update' (MESI whose releases update \
             the copies they invalidated), 'hlrc' (multiple writers, each publishing the bytes \
             it changed), 'learned' (MESI whose readers are sent, as a barrier ends, what they \
             read after it last time) or 'adaptive' (starts as MESI; its home moves it to the \
             protocol its pattern calls for)"
        ))
    })
}

fn protocol_name(protocol: ProtocolId) -> &'static str {
    protocol.short_name()
}

/// Who owns a region's bytes.
enum Owner {
    /// This module: allocated by [`Region::allocate`].
    Module,
    /// A Python object whose buffer `Client.map` was given: held exported
    /// for the region's lifetime, so that the exporter keeps the memory
    /// where it is (a bytearray cannot be resized, a numpy array stays
    /// alive). Dropping it releases the export, taking the GIL if needed.
    Exporter(#[allow(dead_code)] Export),
    /// The encryption layer: the plaintext of a protected chain, which the
    /// layer keeps for the chain's life (held here).
    Secure(#[allow(dead_code)] abe::Secure),
}

/// A buffer exported by a Python object (`PyObject_GetBuffer`), released
/// when dropped. pyo3's `PyUntypedBuffer` refuses an export without a
/// shape, which is what a 0-d array gives (the buffer protocol wants
/// `shape` NULL when `ndim` is 0): MAP needs only the address, the length
/// and the flags, whatever the dimensions.
struct Export(Box<ffi::Py_buffer>);

impl Export {
    /// The export of `obj`'s buffer, contiguous or not, read-only or not
    /// (the caller checks what it needs, to say what to give instead).
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Export> {
        // Boxed: an exporter may point the view's fields into the view
        // itself (PyBuffer_FillInfo's `shape` is `&view.len`).
        let mut view = Box::new(ffi::Py_buffer::new());
        // SAFETY: `view` is a zeroed Py_buffer that the call fills in; on
        // success it holds the export until `PyBuffer_Release` in `drop`.
        let status =
            unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_FULL_RO) };
        if status == -1 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Export(view))
    }

    fn ptr(&self) -> *mut u8 {
        self.0.buf.cast()
    }

    fn len(&self) -> usize {
        // A length is never negative (the protocol's `len` is a product of sizes).
        usize::try_from(self.0.len).unwrap_or(0)
    }

    fn readonly(&self) -> bool {
        self.0.readonly != 0
    }

    fn is_c_contiguous(&self) -> bool {
        // SAFETY: a view filled by a successful PyObject_GetBuffer.
        unsafe { ffi::PyBuffer_IsContiguous(&*self.0, b'C' as std::ffi::c_char) != 0 }
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        // SAFETY: a view filled by a successful PyObject_GetBuffer, released
        // once, with the GIL held (taken here when the drop happens without).
        Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut *self.0) });
    }
}

/// The local bytes of a chain: this module's (zeroed, 64-byte aligned) or
/// a caller's buffer (MAP), given back when the core and every Python
/// object using them are done.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
    owner: Owner,
}

// SAFETY: plain bytes. The core writes them under its client's lock, and
// Python touches them through buffers inside the scopes the core grants;
// what user code does outside a scope is its own race, as in C.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    fn allocate(len: usize) -> Option<Arc<Region>> {
        let layout = std::alloc::Layout::from_size_align(len, ALIGN).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some(Arc::new(Region {
            ptr,
            len,
            owner: Owner::Module,
        }))
    }

    /// Whether the `len` bytes at address `start` overlap these.
    fn out_of_memory(len: usize) -> PyErr {
        PyMemoryError::new_err(format!(
            "cannot allocate {len} bytes of local memory for the chain: free memory, or use a \
             smaller chain"
        ))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // A caller's buffer is given back by dropping its export (the field).
        if let Owner::Module = self.owner {
            let layout = std::alloc::Layout::from_size_align(self.len, ALIGN).expect("allocated");
            // SAFETY: allocated by `allocate` with this layout; the last owner.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// The core's view of a region.
struct Mapped(Arc<Region>);

impl LocalMemory for Mapped {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the region holds `len` bytes while this Arc lives.
        unsafe { std::slice::from_raw_parts(self.0.ptr.as_ptr(), self.0.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; Python writes only inside write scopes, which
        // the core does not overlap with its own writes to the chunk.
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr.as_ptr(), self.0.len) }
    }
    /// C (or Python) can write these bytes at any time: writes outside a
    /// write scope must be detected and lost, not published.
    fn exposed(&self) -> bool {
        true
    }
}

fn ids_and_sizes(layout: &ChainLayout) -> (Vec<u64>, Vec<usize>) {
    layout.chunks().iter().copied().unzip()
}

fn chunk_error(e: ChunkError) -> PyErr {
    to_py(CoreError::from(e))
}

/// A chain as a refusal describes it: "8 bytes (protocol 'mesi')", with
/// its chunk sizes when it has a few.
fn describe(sizes: &[usize], protocol: Option<ProtocolId>) -> String {
    let total: usize = sizes.iter().sum();
    let mut text = format!("{total} bytes");
    match sizes.len() {
        1 => {}
        2..=8 => text += &format!(" in chunks of {sizes:?}"),
        n => text += &format!(" in {n} chunks"),
    }
    if let Some(p) = protocol {
        text += &format!(" (protocol '{}')", protocol_name(p));
    }
    text
}

/// MALLOC into memory of this module.
pub(crate) fn malloc(
    py: Python<'_>,
    h: &Arc<Handle>,
    base: u64,
    size: usize,
    protocol: ProtocolId,
) -> PyResult<Py<PyChain>> {
    let layout = h.with(|c| Ok(ChainLayout::malloc(base, size, c.chunk_size())?))?;
    allocate(py, h, "MALLOC", layout, protocol)
}

/// MALLOC_LST into memory of this module: chunk `ids[i]` gets
/// `sizes[i % sizes.len()]` bytes, at consecutive offsets in `ids` order.
pub(crate) fn malloc_lst(
    py: Python<'_>,
    h: &Arc<Handle>,
    ids: &[u64],
    sizes: &[usize],
    protocol: ProtocolId,
) -> PyResult<Py<PyChain>> {
    h.check_process()?;
    // The core refuses such a chunk too, but only after the layout has
    // summed the sizes; refused first, chunks of at most 1 GiB cannot make
    // the sum overflow.
    if let Some(&size) = sizes.iter().take(ids.len()).find(|&&s| s > MAX_CHUNK_SIZE) {
        return Err(chunk_error(ChunkError::TooLarge { size }));
    }
    let layout = ChainLayout::malloc_lst(ids, sizes).map_err(chunk_error)?;
    allocate(py, h, "MALLOC_LST", layout, protocol)
}

/// Allocates the chain of `layout` with `protocol` in memory of this module
/// (MAP of it into the core); the same chain again gives the same Chain.
fn allocate(
    py: Python<'_>,
    h: &Arc<Handle>,
    call: &str,
    layout: ChainLayout,
    protocol: ProtocolId,
) -> PyResult<Py<PyChain>> {
    h.check_process()?;
    let (ids, sizes) = ids_and_sizes(&layout);
    if let Some(existing) = h.chain(py, &ids) {
        let had = existing.get();
        if had.secure.is_some() {
            return Err(usage(format!(
                "{call} of chunk {}: this process has that chain protected (allocated with \
                 policies); allocate it with the same policies, or LOOKUP it",
                ids[0]
            )));
        }
        let had_sizes = ids_and_sizes(had.chain.layout()).1;
        if had_sizes == sizes {
            match had.protocol {
                Some(p) if p == protocol => return Ok(existing),
                // A chain this process looked up: the core knows the
                // protocol the homes allocated its chunks with.
                None => {
                    let layout = had.chain.layout().clone();
                    h.blocking(py, |c| c.check_allocated_with(&layout, protocol))?;
                    return Ok(existing);
                }
                Some(_) => {}
            }
        }
        return Err(usage(format!(
            "{call} of chunk {} with {}: this process already has that chain with {}; \
             allocate it with the same sizes and protocol, or LOOKUP it",
            ids[0],
            describe(&sizes, Some(protocol)),
            describe(&had_sizes, had.protocol),
        )));
    }
    let size = layout.total_size();
    check_chain_size(size as u64).map_err(chunk_error)?;
    let region = Region::allocate(size).ok_or_else(|| Region::out_of_memory(size))?;
    let memory = Box::new(Mapped(region.clone()));
    let chain = h.blocking(py, |c| c.map_lst(protocol, &ids, &sizes, memory))?;
    record(py, h, ids, chain, region, Some(protocol), None)
}

/// MAP: the chain of `buffer`'s size from chunk `base` on (split by the
/// chunk size, as MALLOC), whose local bytes are `buffer`'s own memory.
pub(crate) fn map(
    py: Python<'_>,
    h: &Arc<Handle>,
    base: u64,
    buffer: &Bound<'_, PyAny>,
    protocol: ProtocolId,
) -> PyResult<Py<PyChain>> {
    h.check_process()?;
    let what = buffer.get_type().name()?;
    let export = Export::get(buffer).map_err(|e| {
        PyTypeError::new_err(format!(
            "MAP of chunk {base}: a '{what}' object has no buffer to map ({e}): give a writable, \
             C-contiguous buffer, such as a numpy array, a bytearray or a memoryview of one"
        ))
    })?;
    // The core writes the chunks' data into this memory (a READ scope
    // fills it), so it must be writable, and a chain's bytes are one block.
    if export.readonly() {
        return Err(PyTypeError::new_err(format!(
            "MAP of chunk {base}: the buffer of this '{what}' object is read-only, and SAT \
             writes the chunks' data into the memory it maps: give a writable buffer (a numpy \
             array whose flags.writeable is True, such as a.copy(); a bytearray rather than \
             bytes)"
        )));
    }
    if !export.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "MAP of chunk {base}: the buffer of this '{what}' object is not C-contiguous, and a \
             chain's bytes are one contiguous block: give a C-contiguous buffer \
             (numpy.ascontiguousarray(a) is one, a copy to map in its place)"
        )));
    }
    let len = export.len();
    let start = export.ptr() as usize;
    let layout = h.with(|c| Ok(ChainLayout::malloc(base, len, c.chunk_size())?))?;
    let (ids, sizes) = ids_and_sizes(&layout);
    if let Some(existing) = h.chain(py, &ids) {
        let had = existing.get();
        let same_memory = had.mapped() && had.start == start;
        if same_memory && had.len == len && had.protocol == Some(protocol) {
            return Ok(existing);
        }
        return Err(usage(format!(
            "MAP of chunk {base} with {}: this process already has that chain with {}, in {}; \
             a chain lives in one memory per process: use that Chain, or MAP other chunks",
            describe(&sizes, Some(protocol)),
            describe(&ids_and_sizes(had.chain.layout()).1, had.protocol),
            if had.mapped() {
                "another mapped buffer"
            } else {
                "memory of SAT"
            },
        )));
    }
    // Two chains in one memory would overwrite each other's data (a scope's
    // memoryview of another chain, or an array mapped twice).
    if let Some(other) = h.find_chain(py, |c| c.overlaps(start, len)) {
        return Err(usage(format!(
            "MAP of chunk {base}: this memory is already the local memory of the chain at chunk \
             {}; two chains in one memory would overwrite each other's data: give each chain \
             its own buffer",
            other.get().chain.first()
        )));
    }
    let ptr = NonNull::new(export.ptr())
        .ok_or_else(|| PyValueError::new_err(format!("MAP of chunk {base}: the buffer is NULL")))?;
    let region = Arc::new(Region {
        ptr,
        len,
        owner: Owner::Exporter(export),
    });
    let memory = Box::new(Mapped(region.clone()));
    let chain = h.blocking(py, |c| c.map_lst(protocol, &ids, &sizes, memory))?;
    record(py, h, ids, chain, region, Some(protocol), None)
}

/// LOOKUP of chunks `base` to `base + nbchunks - 1`.
pub(crate) fn lookup(
    py: Python<'_>,
    h: &Arc<Handle>,
    base: u64,
    nbchunks: u64,
    timeout: Duration,
) -> PyResult<Py<PyChain>> {
    h.check_process()?;
    if nbchunks == 0 {
        return Err(chunk_error(ChunkError::NoChunks { baseid: base }));
    }
    let last = base.checked_add(nbchunks - 1).ok_or_else(|| {
        chunk_error(ChunkError::IdOverflow {
            baseid: base,
            count: nbchunks,
        })
    })?;
    lookup_lst(py, h, (base..=last).collect(), timeout)
}

/// LOOKUP_LST into memory of this module, once the homes have told the
/// sizes: the chunks at consecutive offsets in `ids` order.
pub(crate) fn lookup_lst(
    py: Python<'_>,
    h: &Arc<Handle>,
    ids: Vec<u64>,
    timeout: Duration,
) -> PyResult<Py<PyChain>> {
    h.check_process()?;
    if let Some(existing) = h.chain(py, &ids) {
        return Ok(existing);
    }
    let mut region = None;
    let mut wanted = 0;
    let chain = h.blocking(py, |c| {
        c.lookup_lst_into(&ids, timeout, |size| {
            wanted = size;
            let r = Region::allocate(size)?;
            region = Some(r.clone());
            Some(Box::new(Mapped(r)) as Box<dyn LocalMemory>)
        })
    })?;
    let region = region.ok_or_else(|| Region::out_of_memory(wanted))?;
    // A chain whose chunks carry a label is protected: the layer opens it.
    match h.blocking(py, |c| abe::adopt(c, &chain))? {
        None => record(py, h, ids, chain, region, None, None),
        Some(secure) => record_secure(py, h, ids, secure, None),
    }
}

/// MALLOC or MALLOC_LST of a protected chain (the encryption layer):
/// `allocate` makes it in the layer, which owns its plaintext.
pub(crate) fn allocate_protected(
    py: Python<'_>,
    h: &Arc<Handle>,
    call: &str,
    ids: Vec<u64>,
    protocol: ProtocolId,
    allocate: impl FnOnce(&sat_core::client::Client) -> Result<abe::Secure, CoreError> + Send,
) -> PyResult<Py<PyChain>> {
    h.check_process()?;
    if let Some(existing) = h.chain(py, &ids) {
        if existing.get().secure.is_none() {
            return Err(usage(format!(
                "{call} of chunk {} with policies: this process has that chain unprotected; a \
                 chain is protected from its first MALLOC on",
                ids[0]
            )));
        }
    }
    let secure = h.blocking(py, allocate)?;
    record_secure(py, h, ids, secure, Some(protocol))
}

/// The Chain of a protected chain: its bytes are the layer's plaintext.
fn record_secure(
    py: Python<'_>,
    h: &Arc<Handle>,
    ids: Vec<u64>,
    secure: abe::Secure,
    protocol: Option<ProtocolId>,
) -> PyResult<Py<PyChain>> {
    let ptr = NonNull::new(abe::ptr(&secure)).expect("the layer's plaintext is allocated");
    let region = Arc::new(Region {
        ptr,
        len: abe::size(&secure),
        owner: Owner::Secure(secure.clone()),
    });
    record(
        py,
        h,
        ids,
        abe::sealed(&secure),
        region,
        protocol,
        Some(secure),
    )
}

/// The Chain of a chain the core has just added; when another thread
/// recorded the same chain meanwhile, that one.
fn record(
    py: Python<'_>,
    h: &Arc<Handle>,
    ids: Vec<u64>,
    chain: CoreChain,
    region: Arc<Region>,
    protocol: Option<ProtocolId>,
    secure: Option<abe::Secure>,
) -> PyResult<Py<PyChain>> {
    let chain = Py::new(
        py,
        PyChain {
            h: h.clone(),
            chain,
            start: region.ptr.as_ptr() as usize,
            len: region.len,
            mapped: matches!(region.owner, Owner::Exporter(_)),
            region: std::sync::Mutex::new(Some(region)),
            protocol,
            secure,
            freed: std::sync::atomic::AtomicBool::new(false),
        },
    )?;
    Ok(h.add_chain(py, ids, chain))
}

/// A chain of chunks this process allocated, mapped or looked up, with its
/// local memory.
#[pyclass(name = "Chain", module = "sat", frozen)]
pub(crate) struct PyChain {
    pub(crate) h: Arc<Handle>,
    pub(crate) chain: CoreChain,
    /// Its local bytes: None once `free` gave them back (the arrays and
    /// views made from them hold the region for as long as they live).
    region: std::sync::Mutex<Option<Arc<Region>>>,
    /// Where those bytes start and how many there are, and whether they
    /// are a caller's buffer (`Client.map`): kept past `free`.
    start: usize,
    len: usize,
    mapped: bool,
    /// The protocol it was allocated or mapped with here; None for a chain
    /// looked up, whose protocol the core does not tell.
    protocol: Option<ProtocolId>,
    /// For a protected chain (the encryption layer): the layer's chain,
    /// whose plaintext `region` shows; `chain` is then its sealed chunks.
    ///
    /// One class for both kinds rather than a ProtectedChain class: a
    /// reader's LOOKUP does not know in advance which kind it gets, and
    /// code written for plain chains (scopes, arrays, put and get) works
    /// unchanged on protected ones.
    pub(crate) secure: Option<abe::Secure>,
    /// Given back by `free`: the chain's bytes are no longer the chain's.
    freed: std::sync::atomic::AtomicBool,
}

impl PyChain {
    /// Opens a scope on the chain, through the layer when it is protected.
    pub(crate) fn acquire_in(
        &self,
        c: &sat_core::client::Client,
        access: Access,
    ) -> Result<(), CoreError> {
        match &self.secure {
            Some(s) => abe::acquire(c, s, access),
            None => c.acquire_chain(&self.chain, access),
        }
    }

    /// Closes the scope on the chain.
    pub(crate) fn release_in(&self, c: &sat_core::client::Client) -> Result<(), CoreError> {
        match &self.secure {
            Some(s) => abe::release(c, s),
            None => c.release_chain(&self.chain),
        }
    }

    /// PUT of `data` (the chain's data size): a write scope publishing it.
    /// A plain chain's PUT goes straight into host slots where its homes
    /// keep them (`Client::put_chain_from`); a protected one is sealed
    /// from the chain's plaintext, which takes `data` first.
    pub(crate) fn put_in(
        &self,
        c: &sat_core::client::Client,
        data: &[u8],
    ) -> Result<(), CoreError> {
        match &self.secure {
            Some(s) => {
                abe::acquire(c, s, Access::Write)?;
                let copied = self.with_bytes_mut(c, |d| d.copy_from_slice(data));
                let released = abe::release(c, s);
                copied.and(released)
            }
            None => c.put_chain_from(&self.chain, data),
        }
    }

    /// Ends the scope on the chain without publishing (the block raised),
    /// protected or not.
    pub(crate) fn abort_in(&self, c: &sat_core::client::Client) -> Result<(), CoreError> {
        match &self.secure {
            Some(s) => abe::abort(c, s),
            None => c.abort_chain(&self.chain),
        }
    }

    /// `f` on the chain's bytes (the plaintext when protected), in a scope.
    pub(crate) fn with_bytes<R>(
        &self,
        c: &sat_core::client::Client,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, CoreError> {
        match &self.secure {
            Some(s) => abe::with_data(s, f),
            None => c.with_chain(&self.chain, f),
        }
    }

    /// `f` on the chain's bytes, in a write scope.
    pub(crate) fn with_bytes_mut<R>(
        &self,
        c: &sat_core::client::Client,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, CoreError> {
        match &self.secure {
            Some(s) => abe::with_data_mut(s, f),
            None => c.with_chain_mut(&self.chain, f),
        }
    }

    /// The size of the chain's data (the plaintext's when protected).
    pub(crate) fn data_len(&self) -> usize {
        self.len
    }

    /// Whether its local bytes overlap `len` bytes at `start`.
    fn overlaps(&self, start: usize, len: usize) -> bool {
        start < self.start + self.len && self.start < start + len
    }

    /// Its local bytes, for a buffer; an error once `free` gave them back.
    fn memory(&self) -> PyResult<Arc<Region>> {
        let held = self
            .region
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held.clone().ok_or_else(|| {
            usage(format!(
                "the chain at chunk {} was given back (Chain.free): malloc or lookup it again",
                self.chain.first()
            ))
        })
    }

    /// The size of each chunk's data (the plaintext's when protected).
    fn data_sizes(&self) -> Vec<usize> {
        match &self.secure {
            Some(s) => abe::sizes(s),
            None => ids_and_sizes(self.chain.layout()).1,
        }
    }

    /// Whether its local bytes are a caller's buffer (`Client.map`).
    fn mapped(&self) -> bool {
        self.mapped
    }
}

#[pymethods]
impl PyChain {
    /// The first chunk id (the report's `baseid`).
    #[getter]
    fn base(&self) -> PyResult<u64> {
        self.h.check_process()?;
        Ok(self.chain.first())
    }

    /// The size of the chain's data in bytes.
    #[getter]
    fn size(&self) -> PyResult<usize> {
        self.h.check_process()?;
        Ok(self.len)
    }

    /// The number of chunks.
    #[getter]
    fn nbchunks(&self) -> PyResult<usize> {
        self.h.check_process()?;
        Ok(self.chain.len())
    }

    /// The chunk ids, in chain order.
    #[getter]
    fn ids(&self) -> PyResult<Vec<u64>> {
        self.h.check_process()?;
        Ok(self.chain.ids().collect())
    }

    /// The size of each chunk, in chain order.
    #[getter]
    fn sizes(&self) -> PyResult<Vec<usize>> {
        self.h.check_process()?;
        Ok(self.data_sizes())
    }

    /// Where each chunk starts in the chain's bytes, in chain order.
    #[getter]
    fn offsets(&self) -> PyResult<Vec<usize>> {
        self.h.check_process()?;
        let mut at = 0;
        Ok(self
            .data_sizes()
            .into_iter()
            .map(|s| {
                at += s;
                at - s
            })
            .collect())
    }

    /// Whether the chain is protected by the encryption layer (allocated
    /// with read and write policies): its bytes here are the plaintext,
    /// the S-DSM keeps them sealed.
    #[getter]
    fn protected(&self) -> PyResult<bool> {
        self.h.check_process()?;
        Ok(self.secure.is_some())
    }

    /// The protocol: 'mesi', 'home-only', 'mesi-e', 'update', 'hlrc',
    /// 'learned' or 'adaptive', as this process allocated or mapped it (an
    /// adaptive chain stays 'adaptive' whatever its chunks switched to);
    /// None when it looked the chain up (the chunks keep the protocol they
    /// were allocated with).
    #[getter]
    fn protocol(&self) -> PyResult<Option<&'static str>> {
        self.h.check_process()?;
        Ok(self.protocol.map(protocol_name))
    }

    fn __len__(&self) -> PyResult<usize> {
        self.size()
    }

    /// FREE: gives the chain back in this process (the report's "free:
    /// locally removing the data"): a subscription to it ends, its memory
    /// goes back to the system once no array or view made from it is left
    /// (those stay readable, but are no longer the chain's), and this Chain
    /// is no longer valid: its scopes, `array`, `put`, `get` and
    /// subscriptions raise UsageError. The chunks stay in the S-DSM with
    /// their versions: `malloc` or `lookup` the chain again for a new Chain.
    /// Raises UsageError while a scope of this process is open on it
    /// (nothing changes then), and for a protected chain (its plaintext
    /// belongs to the encryption layer until the client ends).
    fn free(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let me = slf.get();
        if me.secure.is_some() {
            return Err(usage(format!(
                "FREE of the chain at chunk {}: a protected chain cannot be given back before \
                 the client ends (its plaintext belongs to the encryption layer); keep it",
                me.chain.first()
            )));
        }
        // The subscription ends with the chain, in one critical section; a
        // refusal leaves both as they were.
        let memory =
            me.h.blocking(py, |c| c.free_mapped_for("FREE", &me.chain))?;
        me.freed.store(true, std::sync::atomic::Ordering::Release);
        me.h.forget_chain(py, &me.chain.ids().collect::<Vec<_>>(), slf);
        // The region itself goes with the last array or view using it: this
        // Chain's hold on it ends now, not when the Chain is collected.
        drop(memory);
        drop(
            me.region
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
        Ok(())
    }

    /// A READ scope: `with chain.read() as view:` gives a read-only
    /// memoryview of the chain's own bytes (no copy). Bytes changed outside
    /// a write scope (through a numpy array kept from an earlier one) are
    /// not the chain's data: the next scope sees the home's version.
    ///
    /// `copy=False` reads the version where it is: when the chain is one
    /// chunk whose home keeps its version in shared memory on this host (a
    /// service or a run on one host), the view is that version itself, and
    /// nothing is copied into the chain's own bytes (`Chain.array` does not
    /// see it). The view is released when the scope ends: keep no numpy
    /// array made from it past the scope (it would show later versions).
    /// Where the chain cannot be read so (several chunks, a version kept
    /// elsewhere, a protected chain, a scope of this process already open
    /// on it), the scope is the usual one; `view.obj.in_place` tells which
    /// (`typing.cast(sat.Buffer, view.obj).in_place` for a type checker,
    /// whose `memoryview.obj` is any buffer).
    #[pyo3(signature = (copy = true))]
    fn read(slf: &Bound<'_, Self>, copy: bool) -> PyResult<PyScope> {
        scope(slf, Access::Read, copy)
    }

    /// A WRITE scope: a writable memoryview of the chain's own bytes
    /// (possibly stale); what is written in it is published at exit, unless
    /// the block raises: then nothing is published.
    fn write(slf: &Bound<'_, Self>) -> PyResult<PyScope> {
        scope(slf, Access::Write, true)
    }

    /// A READWRITE scope: as `write`, on up-to-date bytes.
    fn readwrite(slf: &Bound<'_, Self>) -> PyResult<PyScope> {
        scope(slf, Access::ReadWrite, true)
    }

    /// A numpy array over the chain's own bytes (no copy), valid for the
    /// chain's lifetime, like C's `chunk->data`: read it inside a scope,
    /// write it inside a write scope. `shape` None takes the whole chain.
    #[pyo3(signature = (dtype = None, shape = None))]
    fn array<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        shape: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        me.h.check_process()?;
        if me.freed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(usage(format!(
                "Chain.array of the chain at chunk {}: it was given back (free): malloc or \
                 lookup it again for a new Chain",
                me.chain.first()
            )));
        }
        let np = py.import("numpy").map_err(|e| {
            PyImportError::new_err(format!(
                "Chain.array needs numpy, which cannot be imported ({e}): install numpy; \
                 without it, use the memoryview a scope gives"
            ))
        })?;
        let dtype = match dtype {
            Some(d) => np.call_method1("dtype", (d,))?,
            None => np.call_method1("dtype", ("u1",))?,
        };
        let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
        let size = me.len;
        if itemsize == 0 {
            return Err(PyValueError::new_err(format!(
                "dtype {dtype} has items of 0 bytes: give a dtype with a size"
            )));
        }
        let count = match shape {
            None if size % itemsize == 0 => size / itemsize,
            None => {
                return Err(PyValueError::new_err(format!(
                    "the chain's {size} bytes are not a whole number of {dtype} items \
                     ({itemsize} bytes each): give a shape that fits, or another dtype"
                )))
            }
            Some(s) => {
                let dims = shape_dims(s)?;
                let count = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
                match count.filter(|n| n.checked_mul(itemsize).is_some_and(|b| b <= size)) {
                    Some(n) => n,
                    None => {
                        return Err(PyValueError::new_err(format!(
                            "an array of shape {s} of {dtype} needs more than the chain's \
                             {size} bytes: give a smaller shape"
                        )))
                    }
                }
            }
        };
        let buffer = Bound::new(
            py,
            PyBuffer {
                chain: slf.clone().unbind(),
                bytes: Bytes::Chain(me.memory()?),
                readonly: false,
            },
        )?;
        let kwargs = [
            ("dtype", dtype.clone()),
            ("count", count.into_pyobject(py)?.into_any()),
        ];
        let kwargs = kwargs.into_py_dict(py)?;
        let array = np.getattr("frombuffer")?.call((buffer,), Some(&kwargs))?;
        match shape {
            Some(s) => array.call_method1("reshape", (s,)),
            None => Ok(array),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<sat.Chain base {} of {} chunks, {} bytes, {}{}{}>",
            self.chain.first(),
            self.chain.len(),
            self.len,
            self.protocol.map_or("looked up", protocol_name),
            if self.mapped() { ", mapped" } else { "" },
            if self.secure.is_some() {
                ", protected"
            } else {
                ""
            }
        )
    }
}

/// The dimensions `shape` gives, an int or a sequence of ints >= 0: a
/// negative or too large one is a ValueError, anything else a TypeError.
fn shape_dims(shape: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let py = shape.py();
    let e = match shape.extract::<usize>() {
        Ok(n) => return Ok(vec![n]),
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => e,
        Err(_) => match shape.extract::<Vec<usize>>() {
            Ok(dims) => return Ok(dims),
            Err(e) => e,
        },
    };
    let msg = format!("shape {shape}: give an int or a sequence of ints >= 0");
    Err(if e.is_instance_of::<PyOverflowError>(py) {
        PyValueError::new_err(msg)
    } else {
        PyTypeError::new_err(msg)
    })
}

fn scope(chain: &Bound<'_, PyChain>, access: Access, copy: bool) -> PyResult<PyScope> {
    chain.get().h.check_process()?;
    Ok(PyScope {
        chain: chain.clone().unbind(),
        access,
        copy,
        state: Mutex::new(ScopeState::New),
    })
}

enum ScopeState {
    New,
    Open,
    /// A READ in place of the chunk: its view, released at exit.
    InPlace(u64, Py<PyMemoryView>),
    Closed,
}

/// A scope on a chain, as a context manager (from `Chain.read()`,
/// `Chain.write()`, `Chain.readwrite()`). Entered once.
#[pyclass(name = "Scope", module = "sat", frozen)]
pub(crate) struct PyScope {
    chain: Py<PyChain>,
    access: Access,
    /// False: a READ reads the version in place when it can.
    copy: bool,
    state: Mutex<ScopeState>,
}

impl PyScope {
    fn state(&self) -> std::sync::MutexGuard<'_, ScopeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The chunk a `read(copy=False)` scope reads in place, when it may
    /// try: a plain chain of one chunk.
    fn in_place_chunk(&self) -> Option<u64> {
        let chain = self.chain.get();
        let one = chain.chain.len() == 1 && chain.secure.is_none();
        (!self.copy && self.access == Access::Read && one).then(|| chain.chain.first())
    }
}

#[pymethods]
impl PyScope {
    /// Acquires the chain; gives a memoryview of its own bytes (read-only
    /// in a READ scope).
    fn __enter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyMemoryView>> {
        let chain = self.chain.get();
        chain.h.check_process()?;
        {
            // Claimed before the acquire, so that two threads cannot both enter it.
            let mut st = self.state();
            if !matches!(*st, ScopeState::New) {
                return Err(usage("this scope was already entered: open a new one"));
            }
            *st = ScopeState::Open;
        }
        let access = self.access;
        if let Some(chunk) = self.in_place_chunk() {
            match chain.h.blocking(py, |c| c.read_in_place(chunk)) {
                Ok(Some(view)) => {
                    let buffer = Bound::new(
                        py,
                        PyBuffer {
                            chain: self.chain.clone_ref(py),
                            bytes: Bytes::Version(view),
                            readonly: true,
                        },
                    );
                    let memory = buffer.and_then(|b| PyMemoryView::from(&b.into_any()));
                    return match memory {
                        Ok(m) => {
                            *self.state() = ScopeState::InPlace(chunk, m.clone().unbind());
                            Ok(m)
                        }
                        Err(e) => {
                            *self.state() = ScopeState::Closed;
                            let _ = chain.h.blocking(py, |c| c.end_read_in_place(chunk));
                            Err(e)
                        }
                    };
                }
                Ok(None) => {}
                Err(e) => {
                    *self.state() = ScopeState::Closed;
                    return Err(e);
                }
            }
        }
        if let Err(e) = chain.h.blocking(py, |c| chain.acquire_in(c, access)) {
            *self.state() = ScopeState::Closed;
            return Err(e);
        }
        let buffer = Bound::new(
            py,
            PyBuffer {
                chain: self.chain.clone_ref(py),
                bytes: Bytes::Chain(chain.memory()?),
                readonly: access == Access::Read,
            },
        )?;
        PyMemoryView::from(&buffer.into_any())
    }

    /// Releases the chain: after WRITE or READWRITE, what the block wrote
    /// is published. When the block raised, the scope ends without
    /// publishing anything (the homes keep their versions).
    #[pyo3(signature = (*exc))]
    fn __exit__(&self, py: Python<'_>, exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let raised = exc.get_item(0).is_ok_and(|t| !t.is_none());
        let chain = self.chain.get();
        chain.h.check_process()?;
        let state = std::mem::replace(&mut *self.state(), ScopeState::Closed);
        match state {
            ScopeState::Open => {}
            ScopeState::InPlace(chunk, view) => {
                // The view goes with the scope: using it after raises. A
                // numpy array made from it keeps it exported (release then
                // fails, harmlessly): the memory stays mapped, and shows
                // whatever the slot holds next.
                let _ = view.bind(py).call_method0("release");
                chain.h.blocking(py, |c| c.end_read_in_place(chunk))?;
                return Ok(false);
            }
            other => {
                *self.state() = other;
                return Err(usage("this scope is not open"));
            }
        }
        if raised {
            chain.h.ending_scope(py, |c| chain.abort_in(c))?;
        } else {
            chain.h.ending_scope(py, |c| chain.release_in(c))?;
        }
        Ok(false)
    }
}

/// The bytes of a chain as the buffer protocol exports them (what a
/// scope's memoryview and `Chain.array` look through): read-only when a
/// READ scope made it. It keeps the chain, and so its memory, alive.
#[pyclass(name = "Buffer", module = "sat", frozen)]
pub(crate) struct PyBuffer {
    chain: Py<PyChain>,
    bytes: Bytes,
    readonly: bool,
}

/// What a [`PyBuffer`] exports.
enum Bytes {
    /// The chain's own bytes.
    Chain(Arc<Region>),
    /// A version read in place, in its host slot (`Chain.read(copy=False)`);
    /// the view keeps the slot's memory mapped.
    Version(SlotView),
}

impl Bytes {
    fn ptr(&self) -> *const u8 {
        match self {
            Bytes::Chain(r) => r.ptr.as_ptr(),
            Bytes::Version(v) => v.bytes().as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Bytes::Chain(r) => r.len,
            Bytes::Version(v) => v.bytes().len(),
        }
    }
}

#[pymethods]
impl PyBuffer {
    // No __releasebuffer__: there is nothing to free per export
    // (PyBuffer_FillInfo points `shape` at the view's own `len`), and the
    // memory lives as long as this object, which the view holds.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let me = slf.get();
        // SAFETY: `view` is the caller's Py_buffer; the bytes (the region,
        // or the slot's mapping) stay while `slf` lives, and FillInfo takes
        // a reference to `slf`. It refuses a writable request on a
        // read-only buffer (a version in place is always read-only).
        let status = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                me.bytes.ptr().cast_mut().cast(),
                me.bytes.len() as ffi::Py_ssize_t,
                c_int::from(me.readonly),
                flags,
            )
        };
        if status == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// The chain whose bytes these are.
    #[getter]
    fn chain(&self, py: Python<'_>) -> Py<PyChain> {
        self.chain.clone_ref(py)
    }

    /// True when a READ scope made it: writing through it is refused.
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    /// True when these bytes are the home's version itself, read in place
    /// (`Chain.read(copy=False)`), not the chain's own.
    #[getter]
    fn in_place(&self) -> bool {
        matches!(self.bytes, Bytes::Version(_))
    }

    fn __repr__(&self) -> String {
        let access = if self.readonly {
            "read-only"
        } else {
            "writable"
        };
        let whose = if self.in_place() {
            "the version in place"
        } else {
            "the chain"
        };
        format!(
            "<sat.Buffer {access}, {} bytes of {whose} at chunk {}>",
            self.bytes.len(),
            self.chain.get().chain.first()
        )
    }
}
