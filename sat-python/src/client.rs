//! `sat.Client`: what a role function (and a subscription callback) uses.

use std::sync::Arc;
use std::time::Duration;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use sat_core::chunk::{ChainLayout, ChunkError};
use sat_core::protocol::Access;

use crate::abe;
use crate::args::Int;
use crate::chain::{self, PyChain};
use crate::errors::usage;
use crate::events::{self, Target};
use crate::handle::Handle;
use crate::symbols::PySymbols;

pub(crate) fn duration(seconds: f64) -> PyResult<Duration> {
    if seconds.is_infinite() && seconds > 0.0 {
        return Err(PyValueError::new_err(format!(
            "timeout {seconds} s: a timeout must be finite; give a number of seconds >= 0 \
             (a large one to wait long)"
        )));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        PyValueError::new_err(format!(
            "timeout {seconds} s: give a number of seconds >= 0"
        ))
    })
}

/// The bytes of a bytes-like object (bytes, bytearray, memoryview, or
/// anything `bytes()` accepts that is not an int or a str), copied.
fn bytes_of(data: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = data.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    // Only what exports a buffer: `bytes()` would also take a list, a tuple
    // or a dict of small ints (and say "bytes must be in range(0, 256)" of
    // the others), which are not bytes a program means to publish.
    // SAFETY: a type check on a live object, with the GIL held.
    if unsafe { pyo3::ffi::PyObject_CheckBuffer(data.as_ptr()) } == 0 {
        return Err(PyTypeError::new_err(format!(
            "give a bytes-like object (bytes, bytearray, memoryview, a numpy array: anything \
             with the buffer protocol), not {}",
            data.get_type().name()?
        )));
    }
    let b = data.py().get_type::<PyBytes>().call1((data,))?;
    Ok(b.cast::<PyBytes>()?.as_bytes().to_vec())
}

/// The bytes of a bytes-like object, read where they are when it exports a
/// C-contiguous buffer (bytes, bytearray, a numpy array, a memoryview of
/// one), else copied ([`bytes_of`]): a large value then costs no copy before
/// SAT's own. The export keeps the object's memory where it is until this
/// is dropped. SAT reads the bytes with the GIL released, so another Python
/// thread that changes the object meanwhile races with that read, as with
/// numpy's own copies.
enum Source {
    Export(PyUntypedBuffer),
    Copied(Vec<u8>),
}

impl Source {
    fn of(data: &Bound<'_, PyAny>) -> PyResult<Source> {
        match PyUntypedBuffer::get(data) {
            Ok(b) if b.is_c_contiguous() => Ok(Source::Export(b)),
            _ => bytes_of(data).map(Source::Copied),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Source::Export(b) if b.len_bytes() == 0 => &[],
            // SAFETY: a C-contiguous export of `len_bytes` bytes at
            // `buf_ptr`, alive as long as `self` (which holds the export).
            Source::Export(b) => unsafe {
                std::slice::from_raw_parts(b.buf_ptr().cast::<u8>(), b.len_bytes())
            },
            Source::Copied(v) => v,
        }
    }
}

/// A list argument of ints (chunk ids, sizes), or an error that names it:
/// pyo3's own says neither which argument nor what to give.
fn int_list<T>(
    py: Python<'_>,
    what: &str,
    example: &str,
    extracted: PyResult<Vec<T>>,
) -> PyResult<Vec<T>> {
    extracted.map_err(|e| {
        let msg = format!("{what}: give a sequence of ints >= 0, such as {example} ({e})");
        // A negative or too large int is a wrong value, anything else a wrong type.
        if e.is_instance_of::<PyOverflowError>(py) {
            PyValueError::new_err(msg)
        } else {
            PyTypeError::new_err(msg)
        }
    })
}

/// Both policies or neither: a protected chain or symbol needs both.
fn policies<'a>(
    read: Option<&'a str>,
    write: Option<&'a str>,
) -> PyResult<Option<(&'a str, &'a str)>> {
    match (read, write) {
        (None, None) => Ok(None),
        (Some(r), Some(w)) => Ok(Some((r, w))),
        _ => Err(usage(
            "give both read_policy and write_policy to protect data, or neither for plain data",
        )),
    }
}

fn parse_access(mode: &str) -> PyResult<Access> {
    match mode {
        "read" => Ok(Access::Read),
        "write" => Ok(Access::Write),
        "readwrite" => Ok(Access::ReadWrite),
        _ => Err(PyValueError::new_err(format!(
            "access {mode:?}: give 'read', 'write' or 'readwrite'"
        ))),
    }
}

fn callable(callback: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if !callback.is_callable() {
        return Err(PyTypeError::new_err(format!(
            "the callback {} is not callable: give a function",
            callback.repr()?
        )));
    }
    Ok(callback.clone().unbind())
}

/// The client runtime of this process, handed to every role function.
#[pyclass(name = "Client", module = "sat", frozen)]
pub(crate) struct PyClient {
    h: Arc<Handle>,
    symbols: Py<PySymbols>,
    /// A client of a service: its `atexit` hook, unregistered by `detach`.
    atexit_hook: std::sync::Mutex<Option<Py<PyAny>>>,
}

impl PyClient {
    pub(crate) fn new(py: Python<'_>, h: Arc<Handle>) -> PyResult<PyClient> {
        let symbols = Py::new(py, PySymbols::new(h.clone()))?;
        Ok(PyClient {
            h,
            symbols,
            atexit_hook: std::sync::Mutex::new(None),
        })
    }

    pub(crate) fn set_atexit_hook(&self, hook: Py<PyAny>) {
        *self.atexit_hook.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    pub(crate) fn take_atexit_hook(&self) -> Option<Py<PyAny>> {
        self.atexit_hook
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// A chain of this run (not of an earlier one in this process).
    fn own<'a>(&self, chain: &'a PyChain) -> PyResult<&'a PyChain> {
        self.h.check_process()?;
        if !Arc::ptr_eq(&chain.h, &self.h) {
            return Err(usage(format!(
                "the chain at chunk {} belongs to another run of this process: MALLOC or \
                 LOOKUP it again in this one",
                chain.chain.first()
            )));
        }
        Ok(chain)
    }
}

#[pymethods]
impl PyClient {
    /// Detaches a client of a service (`sat.connect`): scopes left open are
    /// released, the servers take in every release, the endpoint closes and
    /// the slot goes back to the service. Chains and views kept afterwards
    /// stay readable but are no longer kept coherent. A second call does
    /// nothing. A run's client ends when its role function returns instead.
    pub(crate) fn detach(slf: &Bound<'_, Self>) -> PyResult<()> {
        let h = &slf.get().h;
        if !h.is_attached() {
            return Err(usage(
                "detach is for a client of a service (sat.connect); a run's client ends \
                 when its role function returns",
            ));
        }
        crate::service::detach(slf, h)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with sat.connect(...) as client:` block detaches.
    fn __exit__(
        slf: &Bound<'_, Self>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        Self::detach(slf)?;
        Ok(false)
    }

    /// This process's rank in the run.
    #[getter]
    fn rank(&self) -> PyResult<u32> {
        self.h.with(|c| Ok(c.rank()))
    }

    /// The role this process plays (1 and above).
    #[getter]
    fn role(&self) -> PyResult<u32> {
        self.h.with(|c| Ok(c.role()))
    }

    /// The number of processes in the run, servers included.
    #[getter]
    fn size(&self) -> PyResult<u32> {
        self.h.with(|c| Ok(c.size()))
    }

    /// The number of clients in the run.
    #[getter]
    fn client_count(&self) -> PyResult<u32> {
        self.h.with(|c| Ok(c.client_count()))
    }

    /// The number of servers in the run.
    #[getter]
    fn server_count(&self) -> PyResult<u32> {
        self.h.with(|c| Ok(c.server_count()))
    }

    /// The rank of the server this client is attached to.
    #[getter]
    fn server(&self) -> PyResult<u32> {
        self.h.with(|c| Ok(c.server()))
    }

    /// The server ranks, ascending.
    #[getter]
    fn servers(&self) -> PyResult<Vec<u32>> {
        self.h.with(|c| Ok(c.topology().servers()))
    }

    /// The client ranks, ascending.
    #[getter]
    fn clients(&self) -> PyResult<Vec<u32>> {
        self.h.with(|c| Ok(c.topology().clients()))
    }

    /// The role of every rank, by rank (0 for a server).
    #[getter]
    fn roles(&self) -> PyResult<Vec<u32>> {
        self.h
            .with(|c| Ok(c.topology().entries().iter().map(|e| e.role).collect()))
    }

    /// The chunk size MALLOC splits chains by (`SAT_CHUNK_SIZE`, or the
    /// default). Every process allocating a chain must use the same one.
    #[getter]
    fn chunk_size(&self) -> PyResult<usize> {
        self.h.with(|c| Ok(c.chunk_size()))
    }

    #[setter]
    fn set_chunk_size(&self, size: Int) -> PyResult<()> {
        let size = size.usize("chunk_size")?;
        self.h.with(|c| match size {
            // The core's own error for 0 speaks of a limit.
            0 => Err(ChunkError::ZeroChunkSize.into()),
            _ => c.set_chunk_size(size),
        })
    }

    /// The table of symbols, read and written by name (`symbols[name]`,
    /// `symbols[name] = value`, `name in symbols`, `symbols.get(name)`),
    /// whose values are bytes or numpy arrays. Not a Mapping: the symbols
    /// cannot be listed.
    #[getter]
    fn symbols(&self, py: Python<'_>) -> PyResult<Py<PySymbols>> {
        self.h.check_process()?;
        Ok(self.symbols.clone_ref(py))
    }

    /// MALLOC: `size` bytes from chunk `base` on, as a chain of chunks of
    /// `chunk_size` bytes, with `protocol`: 'mesi' (home-based MESI, the
    /// default), 'home-only', 'mesi-e', 'update', 'hlrc', 'learned' or
    /// 'adaptive' (the README says what each does); the same chain again
    /// gives the same Chain. A chain one of whose chunks exists with
    /// another size, protocol or protection raises UsageError having
    /// allocated none of its chunks.
    ///
    /// With `read_policy` and `write_policy` (the encryption layer, when
    /// the module has it: `sat.HAS_ABE`), the chain is protected: its bytes
    /// here are plaintext, the S-DSM keeps them sealed; keys whose
    /// attributes satisfy `read_policy` may read it, certificates that
    /// satisfy `write_policy` may write it.
    #[pyo3(signature = (base, size, protocol = "mesi", *, read_policy = None, write_policy = None))]
    fn malloc(
        &self,
        py: Python<'_>,
        base: Int,
        size: Int,
        protocol: &str,
        read_policy: Option<&str>,
        write_policy: Option<&str>,
    ) -> PyResult<Py<PyChain>> {
        let base = base.u64("base")?;
        let size = size.usize("size")?;
        let protocol = chain::parse_protocol(protocol)?;
        match policies(read_policy, write_policy)? {
            None => chain::malloc(py, &self.h, base, size, protocol),
            Some((read, write)) => {
                let ids = self.h.with(|c| {
                    Ok(ChainLayout::malloc(base, size, c.chunk_size())?
                        .chunks()
                        .iter()
                        .map(|&(id, _)| id)
                        .collect::<Vec<u64>>())
                })?;
                chain::allocate_protected(py, &self.h, "MALLOC", ids, protocol, |c| {
                    abe::malloc(c, protocol, base, size, read, write)
                })
            }
        }
    }

    /// MALLOC_LST: chunk `ids[i]` gets `sizes[i % len(sizes)]` bytes, all in
    /// one chain whose bytes hold the chunks one after the other in the
    /// order of `ids`.
    /// `read_policy` and `write_policy` make it protected, as in `malloc`.
    #[pyo3(signature = (ids, sizes, protocol = "mesi", *, read_policy = None, write_policy = None))]
    fn malloc_lst(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        sizes: &Bound<'_, PyAny>,
        protocol: &str,
        read_policy: Option<&str>,
        write_policy: Option<&str>,
    ) -> PyResult<Py<PyChain>> {
        let ids = int_list(py, "ids", "[30, 10, 20]", ids.extract())?;
        let sizes = int_list(py, "sizes", "[4096]", sizes.extract())?;
        let protocol = chain::parse_protocol(protocol)?;
        match policies(read_policy, write_policy)? {
            None => chain::malloc_lst(py, &self.h, &ids, &sizes, protocol),
            Some((read, write)) => {
                let list = ids.clone();
                chain::allocate_protected(py, &self.h, "MALLOC_LST", list, protocol, |c| {
                    abe::malloc_lst(c, protocol, &ids, &sizes, read, write)
                })
            }
        }
    }

    /// Loads the tenant key file `path` (made by `sat-abe keygen`) for this
    /// client's protected data; without it, `SAT_ABE_KEY` is read at the
    /// client's first protected call. The key belongs to this client: two
    /// clients of one process (two `sat.connect`) may be two tenants, and a
    /// later session starts with no key and no cached chain. Loading a key
    /// again replaces the first (and takes `SAT_ABE_CRL` again: the way a
    /// running client takes a newer revocation list); what the client
    /// decrypted before is checked again under the new key and list, never
    /// served from its cache.
    fn load_key(&self, path: &str) -> PyResult<()> {
        self.h.check_process()?;
        self.h.with(|c| abe::load_key(c, path))
    }

    /// Starts a new key epoch of a protected chain: a new key wrapped under
    /// `read_policy` (the current one when None), every chunk sealed again.
    /// Keys that do not satisfy it cannot read any version written from
    /// now on.
    #[pyo3(signature = (chain, read_policy = None))]
    fn new_epoch(
        &self,
        py: Python<'_>,
        chain: &PyChain,
        read_policy: Option<&str>,
    ) -> PyResult<()> {
        let chain = self.own(chain)?;
        let Some(secure) = &chain.secure else {
            return Err(usage(format!(
                "new_epoch of the chain at chunk {}: it is not protected",
                chain.chain.first()
            )));
        };
        self.h
            .blocking(py, |c| abe::new_epoch(c, secure, read_policy))
    }

    /// MAP: the chain of `len(buffer)` bytes from chunk `base` on (split as
    /// MALLOC splits) whose local bytes are `buffer`'s own memory, with no
    /// copy. The buffer must be writable and C-contiguous; it stays
    /// exported (alive, not resizable) while the chain exists. It is also
    /// the chunks' instance in this process, which SAT may bring up to date
    /// between scopes (a get or a release of another chain over the same
    /// chunks may rewrite it): fill it inside a write scope of this chain,
    /// or right before its put.
    #[pyo3(signature = (base, buffer, protocol = "mesi"))]
    fn map(
        &self,
        py: Python<'_>,
        base: Int,
        buffer: &Bound<'_, PyAny>,
        protocol: &str,
    ) -> PyResult<Py<PyChain>> {
        let base = base.u64("base")?;
        let protocol = chain::parse_protocol(protocol)?;
        chain::map(py, &self.h, base, buffer, protocol)
    }

    /// LOOKUP: the chain of chunks `base` to `base + nbchunks - 1`, waiting
    /// at most `timeout` seconds for each to be allocated.
    // The default of `nbchunks` is an `Int`, which pyo3 would show as `...`.
    #[pyo3(
        signature = (base, nbchunks = Int::of(1), timeout = 10.0),
        text_signature = "($self, base, nbchunks=1, timeout=10.0)"
    )]
    fn lookup(
        &self,
        py: Python<'_>,
        base: Int,
        nbchunks: Int,
        timeout: f64,
    ) -> PyResult<Py<PyChain>> {
        let base = base.u64("base")?;
        let nbchunks = nbchunks.u64("nbchunks")?;
        chain::lookup(py, &self.h, base, nbchunks, duration(timeout)?)
    }

    /// LOOKUP_LST: the chain of chunks `ids`, in that order, waiting at
    /// most `timeout` seconds for each to be allocated.
    #[pyo3(signature = (ids, timeout = 10.0))]
    fn lookup_lst(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        timeout: f64,
    ) -> PyResult<Py<PyChain>> {
        let ids = int_list(py, "ids", "[30, 10, 20]", ids.extract())?;
        chain::lookup_lst(py, &self.h, ids, duration(timeout)?)
    }

    /// Opens a scope on `chain` ('read', 'write' or 'readwrite'); close it
    /// with `release`. The scopes of `Chain.read()` etc. do both.
    fn acquire(&self, py: Python<'_>, chain: &PyChain, access: &str) -> PyResult<()> {
        let chain = self.own(chain)?;
        let access = parse_access(access)?;
        self.h.blocking(py, |c| chain.acquire_in(c, access))
    }

    /// Closes the scope on `chain`.
    fn release(&self, py: Python<'_>, chain: &PyChain) -> PyResult<()> {
        let chain = self.own(chain)?;
        self.h.blocking(py, |c| chain.release_in(c))
    }

    /// PUT: a write scope on `chain` that publishes `data` (exactly the
    /// chain's size). `data` is read where it is when it is a C-contiguous
    /// buffer (a numpy array, bytes, bytearray, memoryview): do not change
    /// it from another thread during the call. Where the chain's homes keep
    /// its versions in shared memory on this host (a service or run on one
    /// host), `data` is copied there once, and the chain's own bytes are
    /// left as they were (the next scope that reads copies the version in);
    /// elsewhere `data` is copied into the chain's bytes and released.
    /// Without `data`, what the chain's memory holds is published as it is
    /// (C's PUT, after writing a mapped buffer).
    #[pyo3(signature = (chain, data = None))]
    fn put(
        &self,
        py: Python<'_>,
        chain: &PyChain,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let chain = self.own(chain)?;
        let Some(data) = data else {
            // A WRITE acquire fetches no data, so the bytes stay as they are.
            return self.h.blocking(py, |c| {
                chain.acquire_in(c, Access::Write)?;
                chain.release_in(c)
            });
        };
        let source = Source::of(data)?;
        let data = source.bytes();
        let size = chain.data_len();
        if data.len() != size {
            return Err(usage(format!(
                "PUT of the chain at chunk {} with {} bytes: the chain has {size}",
                chain.chain.first(),
                data.len()
            )));
        }
        self.h.blocking(py, |c| chain.put_in(c, data))
    }

    /// GET: a copy of the chain's current data, read in a read scope.
    fn get<'py>(&self, py: Python<'py>, chain: &PyChain) -> PyResult<Bound<'py, PyBytes>> {
        let chain = self.own(chain)?;
        let size = chain.data_len();
        // The bytes object is made first and filled in the scope, with the
        // GIL released: one copy of the chain's bytes, straight into it.
        // SAFETY: a NULL source asks for `size` uninitialized bytes, which
        // are all written below before the object is shared with anyone.
        let out = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyBytes_FromStringAndSize(
                    std::ptr::null(),
                    size as pyo3::ffi::Py_ssize_t,
                ),
            )?
            .cast_into::<PyBytes>()?
        };
        // SAFETY: the object's own buffer of `size` bytes (plus its NUL),
        // which nothing else refers to yet; written only by the copy below.
        let to = unsafe { pyo3::ffi::PyBytes_AsString(out.as_ptr()) } as usize;
        self.h
            .blocking(py, |c| {
                chain.acquire_in(c, Access::Read)?;
                let copied = chain.with_bytes(c, |d| {
                    // SAFETY: `to` holds `size` bytes.
                    let to = unsafe { std::slice::from_raw_parts_mut(to as *mut u8, size) };
                    let whole = d.len() == size;
                    if whole {
                        to.copy_from_slice(d);
                    }
                    whole
                });
                let released = chain.release_in(c);
                copied.and_then(|whole| released.map(|()| whole))
            })
            .and_then(|whole| {
                // A chain's size never changes: this would be a bug in SAT.
                whole.then_some(out).ok_or_else(|| {
                    usage(format!(
                        "GET of the chain at chunk {}: its data is not its {size} bytes",
                        chain.chain.first()
                    ))
                })
            })
    }

    /// Waits until `count` calls of barrier `id` have arrived, from any
    /// processes (each thread's call counts), then all of them return.
    /// Callbacks of subscriptions run meanwhile. A call that a callback's
    /// exception ends has still arrived: this thread's next call of barrier
    /// `id` waits for that round to end, then arrives in the next one. In a
    /// run with recovery (`satrun --enable-recovery`), each thread's first
    /// call after the run lost a process raises `ProcessLostError` and does
    /// not count: call it again with the count of the calls left.
    fn barrier(&self, py: Python<'_>, id: Int, count: Int) -> PyResult<()> {
        let (id, count) = (id.u32("id")?, count.u32("count")?);
        self.h.blocking(py, |c| c.barrier(id, count))
    }

    /// Waits for a `wakeup(id)` not consumed yet, sent before or after this
    /// call. Callbacks of subscriptions run meanwhile. A call that a
    /// callback's exception ends consumes no wakeup. In a run with recovery,
    /// a call waiting when the run loses a process, or the first after the
    /// loss, raises `ProcessLostError` once: call it again if another
    /// process will wake it.
    fn rendezvous(&self, py: Python<'_>, id: Int) -> PyResult<()> {
        let id = id.u32("id")?;
        self.h.blocking(py, |c| c.rendezvous(id))
    }

    /// Wakes the clients waiting in `rendezvous(id)`, or the next to come.
    /// Several wakeups that no rendezvous consumed in between count as one.
    /// Returns once the rendezvous' coordinator has applied it, so that a
    /// `rendezvous(id)` called after it returned, in any process, sees it.
    fn wakeup(&self, py: Python<'_>, id: Int) -> PyResult<()> {
        let id = id.u32("id")?;
        self.h.blocking(py, |c| c.wakeup(id))
    }

    /// Publishes `data` under the symbol `name`, as it is; with
    /// `read_policy` and `write_policy`, sealed by the encryption layer.
    #[pyo3(signature = (name, data, *, read_policy = None, write_policy = None))]
    fn write_symbol(
        &self,
        py: Python<'_>,
        name: &str,
        data: &Bound<'_, PyAny>,
        read_policy: Option<&str>,
        write_policy: Option<&str>,
    ) -> PyResult<()> {
        let source = Source::of(data)?;
        let data = source.bytes();
        match policies(read_policy, write_policy)? {
            None => self.h.blocking(py, |c| c.write_symbol(name, data)),
            Some((read, write)) => self
                .h
                .blocking(py, |c| abe::write_symbol(c, name, data, read, write)),
        }
    }

    /// The bytes of symbol `name`, as written, waiting at most `timeout`
    /// seconds for a writer. Callbacks of subscriptions run meanwhile. A
    /// value the encryption layer sealed is opened (or refused with
    /// `AccessDenied` or `IntegrityError`, which an older sealed value put
    /// back over a newer one raises too): a value is taken as sealed when
    /// it starts with a sealed version's header. A value that is not sealed
    /// under a name that has ever been written protected raises
    /// `IntegrityError`: it was written over through the plain API.
    #[pyo3(signature = (name, timeout = 10.0))]
    fn read_symbol<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let timeout = duration(timeout)?;
        let data = self.h.blocking(py, |c| {
            let raw = c.read_symbol(name, timeout)?;
            abe::open_symbol(c, name, raw)
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// SUBSCRIBE: after every write release of the chunk, or of any chunk
    /// of the chain, from any process, `callback(event)` runs in this
    /// process with a `ChunkEvent` naming the chunk released and its
    /// version; `with_data` puts that chunk's bytes in it. Returns once the
    /// homes have recorded the subscription. Releases that arrive while the
    /// callback waits to run merge into one event (per chain: the latest
    /// release, whichever chunk). Each chain is a subscription of its own,
    /// even when it starts at the same chunk as another; a chunk id and a
    /// chain that holds it are separate subscriptions too. A protected chain,
    /// or a chunk of one, cannot be subscribed `with_data` (UsageError): its
    /// bytes are sealed; READ the chain in the callback instead.
    #[pyo3(signature = (target, callback, with_data = false))]
    fn subscribe(
        &self,
        py: Python<'_>,
        target: Target<'_>,
        callback: &Bound<'_, PyAny>,
        with_data: bool,
    ) -> PyResult<()> {
        let subject = target.subject()?;
        events::subscribe(py, &self.h, subject, callable(callback)?, with_data)
    }

    /// UNSUBSCRIBE: the callback of that chain (or chunk id) will not run
    /// again, not even for notifications already received. Called from
    /// another thread while that callback runs, it returns once the run
    /// ended.
    fn unsubscribe(&self, py: Python<'_>, target: Target<'_>) -> PyResult<()> {
        let subject = target.subject()?;
        events::unsubscribe(py, &self.h, subject)
    }

    /// Runs `callback(id)` after signal `id` is raised by any process: at
    /// least once after each raise. Raises that come while an earlier one
    /// still waits for its callback merge into it, as a chunk's
    /// notifications do, so the number of calls counts nothing: keep a
    /// count in a chunk where the number matters.
    fn subscribe_signal(
        &self,
        py: Python<'_>,
        id: Int,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let id = id.u32("id")?;
        events::subscribe_signal(py, &self.h, id, callable(callback)?)
    }

    /// Stops the callback of signal `id`: it will not run again, not even
    /// for raises already heard of. Called from another thread while that
    /// callback runs, returns once that run has ended.
    fn unsubscribe_signal(&self, py: Python<'_>, id: Int) -> PyResult<()> {
        let id = id.u32("id")?;
        self.h.blocking(py, |c| c.unsubscribe_signal(id))
    }

    /// Runs, now, the callbacks of the notifications and signals that have
    /// arrived, and returns how many ran (0: none was waiting). Callbacks
    /// otherwise run only while this client waits (`barrier`, `rendezvous`)
    /// and after a role returns: a role that computes for long between its
    /// waits calls this to serve its subscriptions meanwhile. It never
    /// waits. Only on the client's own thread (the role's, or the one that
    /// called `connect`), and not from a callback: elsewhere UsageError. A
    /// callback's exception is raised here; the events after it run at the
    /// next call. Callbacks run on the calling thread: one that reads a
    /// chain the caller holds in a scope is refused; call it outside scopes.
    fn run_handlers(&self, py: Python<'_>) -> PyResult<usize> {
        self.h.blocking(py, |c| c.run_handlers())
    }

    /// Raises signal `id`: every process subscribed to it runs its callback.
    fn raise_signal(&self, py: Python<'_>, id: Int) -> PyResult<()> {
        let id = id.u32("id")?;
        self.h.blocking(py, |c| c.raise(id))
    }

    fn __repr__(&self) -> String {
        match self.h.with(|c| Ok((c.rank(), c.role()))) {
            Ok((rank, role)) => format!("<sat.Client rank {rank} role {role}>"),
            Err(_) => "<sat.Client (closed)>".to_string(),
        }
    }
}
