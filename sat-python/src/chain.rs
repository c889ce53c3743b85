//! Chains, their scopes, and the buffer that shows a chain's bytes to
//! Python with no copy.
//!
//! As in the C ABI (`sat-capi/src/chunks.rs`), every chain lives in memory
//! this module allocates, handed to the core as the chain's local memory
//! (MAP). So the address Python sees never moves, and stays valid as long
//! as anything holds the memory: the [`Region`] is shared by the core and
//! the Python [`PyChain`], whose [`PyBuffer`] exports keep it alive. Such
//! chains are never evicted (the topology's memory capacity applies to the
//! core's own chains only).

use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyImportError, PyMemoryError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyMemoryView, PyTuple};

use sat_core::chunk::{check_chain_size, ChainLayout, ChunkError};
use sat_core::client::{Chain as CoreChain, LocalMemory};
use sat_core::protocol::{Access, ProtocolId};
use sat_core::SatError as CoreError;

use crate::errors::{to_py, usage};
use crate::handle::Handle;

/// Chain memory is aligned for any numpy dtype and for cache lines, as the
/// C ABI's is.
const ALIGN: usize = 64;

/// The local bytes of a chain: zeroed, 64-byte aligned, freed when the core
/// and every Python object using them are done.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
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
        Some(Arc::new(Region { ptr, len }))
    }

    fn out_of_memory(len: usize) -> PyErr {
        PyMemoryError::new_err(format!(
            "cannot allocate {len} bytes of local memory for the chain: free memory, or use a \
             smaller chain"
        ))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, ALIGN).expect("allocated");
        // SAFETY: allocated by `allocate` with this layout; the last owner.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
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
}

fn ids_and_sizes(layout: &ChainLayout) -> (Vec<u64>, Vec<usize>) {
    layout.chunks().iter().copied().unzip()
}

/// MALLOC into memory of this module; the same chain again gives the same
/// Chain.
pub(crate) fn malloc(
    py: Python<'_>,
    h: &Arc<Handle>,
    base: u64,
    size: usize,
) -> PyResult<Py<PyChain>> {
    let layout = h.with(|c| {
        check_chain_size(size as u64)?;
        Ok(ChainLayout::malloc(base, size, c.chunk_size())?)
    })?;
    let (ids, sizes) = ids_and_sizes(&layout);
    if let Some(existing) = h.chain(py, &ids) {
        let had = ids_and_sizes(existing.get().chain.layout()).1;
        if had == sizes {
            return Ok(existing);
        }
        return Err(usage(format!(
            "MALLOC of chunk {base} with {size} bytes: this process already has that chain \
             with {} bytes; allocate it with the same size, or LOOKUP it",
            had.iter().sum::<usize>()
        )));
    }
    let region = Region::allocate(size).ok_or_else(|| Region::out_of_memory(size))?;
    let memory = Box::new(Mapped(region.clone()));
    let chain = h.blocking(py, |c| {
        c.map_lst(ProtocolId::default(), &ids, &sizes, memory)
    })?;
    let chain = Py::new(
        py,
        PyChain {
            h: h.clone(),
            chain,
            region,
        },
    )?;
    Ok(h.add_chain(py, ids, chain))
}

/// LOOKUP into memory of this module, once the homes have told the size.
pub(crate) fn lookup(
    py: Python<'_>,
    h: &Arc<Handle>,
    base: u64,
    nbchunks: u64,
    timeout: Duration,
) -> PyResult<Py<PyChain>> {
    h.check_process()?;
    let chunk_error = |e: ChunkError| to_py(CoreError::from(e));
    if nbchunks == 0 {
        return Err(chunk_error(ChunkError::NoIds));
    }
    let last = base.checked_add(nbchunks - 1).ok_or_else(|| {
        chunk_error(ChunkError::IdOverflow {
            baseid: base,
            count: nbchunks,
        })
    })?;
    let ids: Vec<u64> = (base..=last).collect();
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
    let chain = Py::new(
        py,
        PyChain {
            h: h.clone(),
            chain,
            region,
        },
    )?;
    Ok(h.add_chain(py, ids, chain))
}

/// A chain of chunks this process allocated or looked up, with its local
/// memory.
#[pyclass(name = "Chain", module = "sat", frozen)]
pub(crate) struct PyChain {
    pub(crate) h: Arc<Handle>,
    pub(crate) chain: CoreChain,
    region: Arc<Region>,
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
        Ok(self.chain.size())
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

    fn __len__(&self) -> PyResult<usize> {
        self.size()
    }

    /// A READ scope: `with chain.read() as view:` gives a read-only
    /// memoryview of the chain's own bytes (no copy).
    fn read(slf: &Bound<'_, Self>) -> PyResult<PyScope> {
        scope(slf, Access::Read)
    }

    /// A WRITE scope: a writable memoryview of the chain's own bytes
    /// (possibly stale); what is written in it is published at exit.
    fn write(slf: &Bound<'_, Self>) -> PyResult<PyScope> {
        scope(slf, Access::Write)
    }

    /// A READWRITE scope: as `write`, on up-to-date bytes.
    fn readwrite(slf: &Bound<'_, Self>) -> PyResult<PyScope> {
        scope(slf, Access::ReadWrite)
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
        let size = me.chain.size();
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
                let dims: Vec<usize> = match s.extract::<usize>() {
                    Ok(n) => vec![n],
                    Err(_) => s.extract().map_err(|_| {
                        PyValueError::new_err(format!(
                            "shape {s}: give an int or a sequence of ints >= 0"
                        ))
                    })?,
                };
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
                region: me.region.clone(),
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
            "<sat.Chain base {} of {} chunks, {} bytes>",
            self.chain.first(),
            self.chain.len(),
            self.chain.size()
        )
    }
}

fn scope(chain: &Bound<'_, PyChain>, access: Access) -> PyResult<PyScope> {
    chain.get().h.check_process()?;
    Ok(PyScope {
        chain: chain.clone().unbind(),
        access,
        state: Mutex::new(ScopeState::New),
    })
}

enum ScopeState {
    New,
    Open,
    Closed,
}

/// A scope on a chain, as a context manager (from `Chain.read()`,
/// `Chain.write()`, `Chain.readwrite()`). Entered once.
#[pyclass(name = "Scope", module = "sat", frozen)]
pub(crate) struct PyScope {
    chain: Py<PyChain>,
    access: Access,
    state: Mutex<ScopeState>,
}

impl PyScope {
    fn state(&self) -> std::sync::MutexGuard<'_, ScopeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        if let Err(e) = chain
            .h
            .blocking(py, |c| c.acquire_chain(&chain.chain, access))
        {
            *self.state() = ScopeState::Closed;
            return Err(e);
        }
        let buffer = Bound::new(
            py,
            PyBuffer {
                chain: self.chain.clone_ref(py),
                region: chain.region.clone(),
                readonly: access == Access::Read,
            },
        )?;
        PyMemoryView::from(&buffer.into_any())
    }

    /// Releases the chain (also when the block raised): after WRITE or
    /// READWRITE, what the block wrote is published.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let chain = self.chain.get();
        chain.h.check_process()?;
        {
            let mut st = self.state();
            if !matches!(*st, ScopeState::Open) {
                return Err(usage("this scope is not open"));
            }
            *st = ScopeState::Closed;
        }
        chain.h.blocking(py, |c| c.release_chain(&chain.chain))?;
        Ok(false)
    }
}

/// The bytes of a chain as the buffer protocol exports them (what a
/// scope's memoryview and `Chain.array` look through): read-only when a
/// READ scope made it. It keeps the chain, and so its memory, alive.
#[pyclass(name = "Buffer", module = "sat", frozen)]
pub(crate) struct PyBuffer {
    chain: Py<PyChain>,
    region: Arc<Region>,
    readonly: bool,
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
        // SAFETY: `view` is the caller's Py_buffer; the region holds `len`
        // bytes while `slf` lives, and FillInfo takes a reference to `slf`.
        // It refuses a writable request on a read-only buffer.
        let status = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                me.region.ptr.as_ptr().cast(),
                me.region.len as ffi::Py_ssize_t,
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
        self.region.len
    }

    fn __repr__(&self) -> String {
        let access = if self.readonly {
            "read-only"
        } else {
            "writable"
        };
        format!(
            "<sat.Buffer {access}, {} bytes of the chain at chunk {}>",
            self.region.len,
            self.chain.get().chain.first()
        )
    }
}
