//! `sat._sat`: SAT's client API for Python (the run mode).
//!
//! A Python script started under `satrun` calls `sat.run({1: role_a, ...})`;
//! every client process calls its role function with a [`PyClient`]. Every
//! call that can block releases the GIL (`py.detach`), so other Python
//! threads run meanwhile. Errors are `sat.SatError` subclasses, one per
//! group of [`SatError`] variants.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict};

use sat_core::bootstrap::{RoleResult, Roles};
use sat_core::client::{Chain as CoreChain, Client};
use sat_core::protocol::Access;
use sat_core::SatError as CoreError;

create_exception!(
    sat,
    SatError,
    PyException,
    "Base class of every error raised by SAT."
);
create_exception!(
    sat,
    UsageError,
    SatError,
    "The API was called in a way it does not allow."
);
create_exception!(
    sat,
    ChunkError,
    SatError,
    "A chunk or chain request is malformed (size, ids)."
);
create_exception!(
    sat,
    TopologyError,
    SatError,
    "The topology file is missing, malformed or does not fit the run."
);
create_exception!(
    sat,
    TransportError,
    SatError,
    "The message layer failed (provider missing, peer lost)."
);
create_exception!(
    sat,
    BootstrapError,
    SatError,
    "The processes of the run could not find each other."
);
create_exception!(
    sat,
    AbortedError,
    SatError,
    "The run was aborted by another process."
);
create_exception!(sat, RoleError, SatError, "A role function failed.");
create_exception!(
    sat,
    TimeoutError,
    SatError,
    "An operation did not complete in the time it is allowed."
);

/// The Python exception of a core error: the group's class, the core's message.
fn to_py(e: CoreError) -> PyErr {
    let msg = e.to_string();
    match e {
        CoreError::Usage(_) => UsageError::new_err(msg),
        CoreError::Chunk(_) => ChunkError::new_err(msg),
        CoreError::Topology(_) => TopologyError::new_err(msg),
        CoreError::Transport(_) => TransportError::new_err(msg),
        CoreError::Bootstrap(_) => BootstrapError::new_err(msg),
        CoreError::Aborted(_) => AbortedError::new_err(msg),
        CoreError::Role(_) => RoleError::new_err(msg),
        CoreError::Timeout(_) => TimeoutError::new_err(msg),
    }
}

fn usage(msg: impl Into<String>) -> PyErr {
    to_py(CoreError::Usage(msg.into()))
}

/// The core client of a running role, shared by the Python objects that
/// use it. The role owns the client only while its function runs: `alive`
/// turns false when it returns, after every call in progress has ended, and
/// later calls raise `UsageError`.
struct Handle {
    client: *const Client,
    alive: RwLock<bool>,
}

// SAFETY: `Client` is thread-safe (its calls are serialized inside), and the
// pointer is only dereferenced under `alive`'s read lock while it is true,
// that is while the role function (which borrows the client) still runs.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

impl Handle {
    fn with<R>(&self, f: impl FnOnce(&Client) -> Result<R, CoreError>) -> PyResult<R> {
        let alive = self.alive.read().unwrap_or_else(|p| p.into_inner());
        if !*alive {
            return Err(usage(
                "this Client is closed: its role function has returned",
            ));
        }
        // SAFETY: see the Send/Sync impls above.
        let client = unsafe { &*self.client };
        f(client).map_err(to_py)
    }

    /// Runs `f` on the client with the GIL released.
    fn blocking<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Client) -> Result<R, CoreError> + Send,
    ) -> PyResult<R> {
        py.detach(|| self.with(f))
    }

    fn close(&self) {
        *self.alive.write().unwrap_or_else(|p| p.into_inner()) = false;
    }
}

fn duration(seconds: f64) -> PyResult<Duration> {
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
    if data.is_instance_of::<pyo3::types::PyString>() || data.is_instance_of::<pyo3::types::PyInt>()
    {
        return Err(PyTypeError::new_err(
            "give a bytes-like object (bytes, bytearray, memoryview)",
        ));
    }
    let b = data.py().get_type::<PyBytes>().call1((data,))?;
    Ok(b.cast::<PyBytes>()?.as_bytes().to_vec())
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

/// The client runtime of this process, handed to every role function.
#[pyclass(name = "Client", module = "sat", frozen)]
struct PyClient {
    h: Arc<Handle>,
}

#[pymethods]
impl PyClient {
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

    /// MALLOC: `size` bytes from chunk `base` on, as a chain.
    fn malloc(&self, py: Python<'_>, base: u64, size: usize) -> PyResult<PyChain> {
        let chain = self.h.blocking(py, |c| c.malloc(base, size))?;
        Ok(PyChain {
            h: self.h.clone(),
            chain,
        })
    }

    /// LOOKUP: the chain of chunks `base` to `base + nbchunks - 1`, waiting
    /// at most `timeout` seconds for each to be allocated.
    #[pyo3(signature = (base, nbchunks = 1, timeout = 10.0))]
    fn lookup(&self, py: Python<'_>, base: u64, nbchunks: u64, timeout: f64) -> PyResult<PyChain> {
        let timeout = duration(timeout)?;
        let chain = self
            .h
            .blocking(py, |c| c.lookup_chain(base, nbchunks, timeout))?;
        Ok(PyChain {
            h: self.h.clone(),
            chain,
        })
    }

    /// Opens a scope on `chain` ('read', 'write' or 'readwrite'); close it
    /// with `release`. The scopes of `Chain.read()` etc. do both.
    fn acquire(&self, py: Python<'_>, chain: &PyChain, access: &str) -> PyResult<()> {
        let access = parse_access(access)?;
        self.h
            .blocking(py, |c| c.acquire_chain(&chain.chain, access))
    }

    /// Closes the scope on `chain`.
    fn release(&self, py: Python<'_>, chain: &PyChain) -> PyResult<()> {
        self.h.blocking(py, |c| c.release_chain(&chain.chain))
    }

    /// PUT: a write scope on `chain`, `data` (exactly the chain's size)
    /// copied in, released.
    fn put(&self, py: Python<'_>, chain: &PyChain, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = bytes_of(data)?;
        let size = chain.chain.size();
        if data.len() != size {
            return Err(usage(format!(
                "PUT of the chain at chunk {} with {} bytes: the chain has {size}",
                chain.chain.first(),
                data.len()
            )));
        }
        self.h.blocking(py, |c| {
            c.acquire_chain(&chain.chain, Access::Write)?;
            let copied = c.with_chain_mut(&chain.chain, |d| d.copy_from_slice(&data));
            let released = c.release_chain(&chain.chain);
            copied.and(released)
        })
    }

    /// GET: the chain's current data, read in a read scope.
    fn get<'py>(&self, py: Python<'py>, chain: &PyChain) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.h.blocking(py, |c| {
            c.acquire_chain(&chain.chain, Access::Read)?;
            let data = c.with_chain(&chain.chain, |d| d.to_vec());
            let released = c.release_chain(&chain.chain);
            data.and_then(|d| released.map(|()| d))
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// Waits until `count` clients have entered barrier `id`.
    fn barrier(&self, py: Python<'_>, id: u32, count: u32) -> PyResult<()> {
        self.h.blocking(py, |c| c.barrier(id, count))
    }

    /// Waits for a `wakeup(id)` from another client.
    fn rendezvous(&self, py: Python<'_>, id: u32) -> PyResult<()> {
        self.h.blocking(py, |c| c.rendezvous(id))
    }

    /// Wakes the client waiting in `rendezvous(id)`.
    fn wakeup(&self, py: Python<'_>, id: u32) -> PyResult<()> {
        self.h.blocking(py, |c| c.wakeup(id))
    }

    /// Publishes `data` under the symbol `name`.
    fn write_symbol(&self, py: Python<'_>, name: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = bytes_of(data)?;
        self.h.blocking(py, |c| c.write_symbol(name, &data))
    }

    /// The data of symbol `name`, waiting at most `timeout` seconds for it.
    #[pyo3(signature = (name, timeout = 10.0))]
    fn read_symbol<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let timeout = duration(timeout)?;
        let data = self.h.blocking(py, |c| c.read_symbol(name, timeout))?;
        Ok(PyBytes::new(py, &data))
    }

    fn __repr__(&self) -> String {
        match self.h.with(|c| Ok((c.rank(), c.role()))) {
            Ok((rank, role)) => format!("<sat.Client rank {rank} role {role}>"),
            Err(_) => "<sat.Client (closed)>".to_string(),
        }
    }
}

/// A chain of chunks this process allocated or looked up.
#[pyclass(name = "Chain", module = "sat", frozen)]
struct PyChain {
    h: Arc<Handle>,
    chain: CoreChain,
}

#[pymethods]
impl PyChain {
    /// The first chunk id (the report's `baseid`).
    #[getter]
    fn base(&self) -> u64 {
        self.chain.first()
    }

    /// The size of the chain's data in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.chain.size()
    }

    /// The number of chunks.
    #[getter]
    fn nbchunks(&self) -> usize {
        self.chain.len()
    }

    fn __len__(&self) -> usize {
        self.chain.size()
    }

    /// A READ scope: `with chain.read() as data:` gives a `bytes` copy.
    fn read(&self) -> PyScope {
        self.scope(Access::Read)
    }

    /// A WRITE scope: `with chain.write() as buf:` gives a `bytearray`
    /// (the local data, possibly stale) copied back into the chain at exit.
    fn write(&self) -> PyScope {
        self.scope(Access::Write)
    }

    /// A READWRITE scope: like `write`, with up-to-date data.
    fn readwrite(&self) -> PyScope {
        self.scope(Access::ReadWrite)
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

impl PyChain {
    fn scope(&self, access: Access) -> PyScope {
        PyScope {
            h: self.h.clone(),
            chain: self.chain.clone(),
            access,
            state: Mutex::new(ScopeState::New),
        }
    }
}

enum ScopeState {
    New,
    Open(Option<Py<PyByteArray>>),
    Closed,
}

/// A scope on a chain, as a context manager (from `Chain.read()`,
/// `Chain.write()`, `Chain.readwrite()`). Entered once.
#[pyclass(name = "Scope", module = "sat", frozen)]
struct PyScope {
    h: Arc<Handle>,
    chain: CoreChain,
    access: Access,
    state: Mutex<ScopeState>,
}

#[pymethods]
impl PyScope {
    fn __enter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        {
            let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if !matches!(*st, ScopeState::New) {
                return Err(usage("this scope was already entered: open a new one"));
            }
        }
        let (chain, access) = (&self.chain, self.access);
        let data = self.h.blocking(py, |c| {
            c.acquire_chain(chain, access)?;
            c.with_chain(chain, |d| d.to_vec()).inspect_err(|_| {
                let _ = c.release_chain(chain);
            })
        })?;
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if access == Access::Read {
            *st = ScopeState::Open(None);
            Ok(PyBytes::new(py, &data).into_any())
        } else {
            let buf = PyByteArray::new(py, &data);
            *st = ScopeState::Open(Some(buf.clone().unbind()));
            Ok(buf.into_any())
        }
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        let buf = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            match std::mem::replace(&mut *st, ScopeState::Closed) {
                ScopeState::Open(buf) => buf,
                other => {
                    *st = other;
                    return Err(usage("this scope is not open"));
                }
            }
        };
        let data = buf.map(|b| b.bind(py).to_vec());
        let chain = &self.chain;
        let size = chain.size();
        if let Some(d) = &data {
            if d.len() != size {
                self.h.blocking(py, |c| c.release_chain(chain))?;
                return Err(usage(format!(
                    "the buffer of the write scope on the chain at chunk {} was resized to {} bytes: \
                     the chain has {size}; the scope was released without the new data",
                    chain.first(),
                    d.len()
                )));
            }
        }
        self.h.blocking(py, |c| {
            let copied = match &data {
                Some(d) => c.with_chain_mut(chain, |m| m.copy_from_slice(d)),
                None => Ok(()),
            };
            let released = c.release_chain(chain);
            copied.and(released)
        })?;
        Ok(false)
    }
}

/// Calls a Python role function with the client, the GIL held; a Python
/// exception becomes the role's failure, its traceback printed first.
fn call_role(f: &Py<PyAny>, client: &Client) -> RoleResult {
    let h = Arc::new(Handle {
        client: client as *const Client,
        alive: RwLock::new(true),
    });
    let outcome = Python::attach(|py| -> Result<(), String> {
        let pyclient = Py::new(py, PyClient { h: h.clone() }).map_err(|e| e.to_string())?;
        match f.call1(py, (pyclient,)) {
            Ok(_) => Ok(()),
            Err(e) => {
                e.display(py);
                Err(e.to_string())
            }
        }
    });
    // Without the GIL: a call still running in another thread may need it
    // to return.
    h.close();
    outcome.map_err(Into::into)
}

/// Bootstraps this process into the run and plays its role: `roles` maps
/// each client role id (1 and above) to a function taking a `Client`. Every
/// process of the run calls it; the server processes serve until the end.
#[pyfunction]
#[pyo3(signature = (roles, args = None))]
fn run(py: Python<'_>, roles: &Bound<'_, PyDict>, args: Option<Vec<String>>) -> PyResult<()> {
    let args = match args {
        Some(a) => a,
        None => py.import("sys")?.getattr("argv")?.extract()?,
    };
    let mut table = Roles::new();
    for (k, v) in roles.iter() {
        let id: u32 = k
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("role id {k}: give an int from 1 up")))?;
        if id == 0 {
            return Err(usage("role 0 is the S-DSM server: client roles start at 1"));
        }
        if !v.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "the function of role {id} is not callable"
            )));
        }
        let f: Py<PyAny> = v.unbind();
        table = table.role(id, move |client: &Client| call_role(&f, client));
    }
    py.detach(|| sat_core::bootstrap::run(table, args))
        .map_err(to_py)
}

#[pymodule]
fn _sat(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SatError", py.get_type::<SatError>())?;
    m.add("UsageError", py.get_type::<UsageError>())?;
    m.add("ChunkError", py.get_type::<ChunkError>())?;
    m.add("TopologyError", py.get_type::<TopologyError>())?;
    m.add("TransportError", py.get_type::<TransportError>())?;
    m.add("BootstrapError", py.get_type::<BootstrapError>())?;
    m.add("AbortedError", py.get_type::<AbortedError>())?;
    m.add("RoleError", py.get_type::<RoleError>())?;
    m.add("TimeoutError", py.get_type::<TimeoutError>())?;
    m.add_class::<PyClient>()?;
    m.add_class::<PyChain>()?;
    m.add_class::<PyScope>()?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
