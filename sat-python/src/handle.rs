//! The core client of a run as the Python objects share it.
//!
//! A [`Handle`] is made by `sat.run` before the process joins its run. It
//! lends the core client to the Python objects while that client may be
//! used: while the role function runs, and while a subscription callback
//! runs after it (the core's client loop). Every use first checks that the
//! calling process is the one that joined the run: after `fork()` a child
//! holds copies of the parent's objects, and must never drive the parent's
//! endpoint.

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use pyo3::prelude::*;

use sat_core::client::Client;
use sat_core::SatError as CoreError;

use crate::chain::PyChain;
use crate::errors::{to_py, usage};

/// Whether the client may be used, and how many calls are using it.
struct Calls {
    open: bool,
    /// Set while `close` waits for the calls in progress: new calls are
    /// refused, but the end of a scope still goes through
    /// ([`Handle::ending_scope`]). Calls waiting for a scope another thread
    /// holds end only when that thread ends it, outside any call: refused,
    /// it would leave them, and `close`, waiting for ever.
    draining: bool,
    running: usize,
}

pub(crate) struct Handle {
    /// The process that joined the run.
    pid: u32,
    /// The core client, set when the role starts; dereferenced only while
    /// `calls.open` (see [`Handle::with`]).
    client: AtomicPtr<Client>,
    /// A counter rather than an RwLock: a subscription callback runs inside
    /// a blocking call of the role's thread and may call the API again,
    /// and a recursive read of an RwLock may deadlock.
    calls: Mutex<Calls>,
    no_calls: Condvar,
    /// The chains of this process by chunk ids, so that allocating or
    /// looking up a chain again gives the same Chain (and the same memory).
    chains: Mutex<HashMap<Vec<u64>, Py<PyChain>>>,
    /// The exception of a subscription callback, kept until the blocking
    /// call that ran the callback (or `sat.run`) raises it.
    callback_error: Mutex<Option<PyErr>>,
    /// The exception of the role function, the cause of `sat.run`'s
    /// RoleError.
    role_error: Mutex<Option<PyErr>>,
    /// The session of a client attached to a service (`sat.connect`): it
    /// owns the core client, until `detach`.
    session: Mutex<Option<sat_core::service::Session>>,
    /// Whether this handle is a service's client (it then ends by `detach`,
    /// not when a role function returns).
    attached: std::sync::atomic::AtomicBool,
    /// Set while `detach` waits for the calls of other threads: those that
    /// wait for other processes (a barrier, a symbol's writer, a LOOKUP)
    /// end then, rather than hold the detach (and the interpreter's exit)
    /// until some other process comes, if one ever does.
    detaching: std::sync::atomic::AtomicBool,
}

// SAFETY: the raw client pointer is the only field that is not Send/Sync;
// `Client` is thread-safe (its calls are serialized inside), and the pointer
// is dereferenced only between `open` and `close`, while the core's `run`
// (which owns the client) is still running the role or its handlers.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded values are plain flags and maps, valid after any panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.is_foreign() {
            // The session's own drop detaches it, as `detach` does.
            return;
        }
        // A fork() child holds a byte copy of the parent's session: the same
        // endpoint, connection and sequence numbers, but none of its threads.
        // Dropping it would detach, that is send on the parent's endpoint
        // (the service then drops the parent's next packets as repeated, or
        // takes the parent as gone) and join a progress thread the child does
        // not have (a panic). So nothing of it is touched: it is leaked on
        // purpose, and the child's exit closes its copies of the descriptors,
        // which leaves the parent's open.
        let session = self
            .session
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(session) = session {
            std::mem::forget(session);
        }
    }
}

/// Ends a call's use of the client, also when the call panics.
struct CallGuard<'a>(&'a Handle);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        let mut c = lock(&self.0.calls);
        c.running -= 1;
        if c.running == 0 {
            self.0.no_calls.notify_all();
        }
    }
}

impl Handle {
    pub(crate) fn new() -> Handle {
        Handle {
            pid: std::process::id(),
            client: AtomicPtr::new(std::ptr::null_mut()),
            calls: Mutex::new(Calls {
                open: false,
                draining: false,
                running: 0,
            }),
            no_calls: Condvar::new(),
            chains: Mutex::new(HashMap::new()),
            callback_error: Mutex::new(None),
            role_error: Mutex::new(None),
            session: Mutex::new(None),
            attached: std::sync::atomic::AtomicBool::new(false),
            detaching: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Lends the client of a service session (`sat.connect`) until `detach`.
    pub(crate) fn attach(&self, session: sat_core::service::Session) {
        self.attached.store(true, Ordering::Release);
        self.open(session.client());
        *lock(&self.session) = Some(session);
    }

    /// Whether this handle belongs to a client of a service.
    pub(crate) fn is_attached(&self) -> bool {
        self.attached.load(Ordering::Acquire)
    }

    /// Detaches the service's client: waits for the calls of other threads
    /// (those waiting for other processes end at once, with a UsageError),
    /// then releases what is open, lets the servers take in every release,
    /// closes the endpoint. Call it without the GIL. A second call does
    /// nothing.
    pub(crate) fn detach(&self) -> Result<(), CoreError> {
        let Some(session) = lock(&self.session).take() else {
            return Ok(());
        };
        self.detaching.store(true, Ordering::Release);
        self.close();
        // No call runs now, and none can start: the detach's own waits
        // below are not to be cut short.
        self.detaching.store(false, Ordering::Release);
        session.detach()
    }

    /// Whether the calling process is not the one that joined the run (a
    /// `fork()` child holding a copy of the parent's objects).
    pub(crate) fn is_foreign(&self) -> bool {
        std::process::id() != self.pid
    }

    /// Refuses use from any process but the one that joined the run.
    pub(crate) fn check_process(&self) -> PyResult<()> {
        let me = std::process::id();
        if me == self.pid {
            return Ok(());
        }
        Err(usage(format!(
            "this SAT client belongs to the parent process {}: this process ({me}) is a \
             fork() child of it and must not use the parent's endpoint; join SAT from the \
             child itself (sat.run in a process started by satrun, or connect to a SAT \
             service), or use SAT from the parent only",
            self.pid
        )))
    }

    /// Lends the client to the Python objects: the role starts.
    pub(crate) fn open(&self, client: &Client) {
        self.client
            .store(client as *const Client as *mut Client, Ordering::Release);
        lock(&self.calls).open = true;
    }

    /// Ends the loan once the calls in progress (from other threads) have
    /// returned. Call it without the GIL: such a call may need it to return.
    pub(crate) fn close(&self) {
        let mut c = lock(&self.calls);
        c.draining = c.open;
        c.open = false;
        while c.running > 0 {
            c = self.no_calls.wait(c).unwrap_or_else(|p| p.into_inner());
        }
        c.draining = false;
    }

    /// Opens the client for a subscription callback the core runs after the
    /// role function returned; true when it did (the caller closes it after
    /// the callback). During the role it is open already.
    pub(crate) fn reopen(&self) -> bool {
        let mut c = lock(&self.calls);
        if c.open {
            return false;
        }
        c.open = true;
        true
    }

    /// Runs `f` on the client; a core error becomes its Python exception.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Client) -> Result<R, CoreError>) -> PyResult<R> {
        self.with_if(false, f)
    }

    /// [`Handle::with`] for the end of a scope, which also goes through
    /// while `close` waits for the calls in progress.
    pub(crate) fn ending_scope<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Client) -> Result<R, CoreError> + Send,
    ) -> PyResult<R> {
        py.detach(|| self.with_if(true, f))
    }

    fn with_if<R>(
        &self,
        ends_a_scope: bool,
        f: impl FnOnce(&Client) -> Result<R, CoreError>,
    ) -> PyResult<R> {
        self.check_process()?;
        {
            let mut c = lock(&self.calls);
            let admitted = c.open || (ends_a_scope && c.draining);
            if !admitted {
                return Err(usage(if self.is_attached() {
                    "this Client has detached from its service: attach again with sat.connect"
                } else {
                    "this Client is closed: its role function has returned; use it inside the \
                     role function, or inside a subscription callback"
                }));
            }
            c.running += 1;
        }
        let _done = CallGuard(self);
        // SAFETY: open, so the pointer is the live client (see the Send/Sync
        // impls); `close` waits for this call to end before the client goes.
        let client = unsafe { &*self.client.load(Ordering::Acquire) };
        f(client).map_err(|e| self.error(e))
    }

    /// Runs `f` on the client with the GIL released.
    pub(crate) fn blocking<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Client) -> Result<R, CoreError> + Send,
    ) -> PyResult<R> {
        py.detach(|| self.with(f))
    }

    /// The Python exception of a core error. A handler's failure is the
    /// callback's own exception, when one is kept.
    fn error(&self, e: CoreError) -> PyErr {
        if matches!(e, CoreError::Role(_)) {
            if let Some(kept) = lock(&self.callback_error).take() {
                return kept;
            }
        }
        to_py(e)
    }

    /// The check the core's waits ask ([`Client::set_interrupt_check`]):
    /// a signal Python has a handler for (Ctrl-C's SIGINT: KeyboardInterrupt,
    /// a notebook's interrupt) ends a call waiting for other processes with
    /// that handler's exception, as it ends `time.sleep`. Python runs signal
    /// handlers in its main thread only: a wait in another thread goes on.
    pub(crate) fn interrupt_check(h: &Arc<Handle>) -> sat_core::client::InterruptCheck {
        let handle = Arc::downgrade(h);
        Arc::new(move || {
            // Before the GIL: at the interpreter's exit, the detach runs
            // while this thread could not take it.
            if handle
                .upgrade()
                .is_some_and(|h| h.detaching.load(Ordering::Acquire))
            {
                return Some(CoreError::Usage(
                    "this Client detached (another thread called detach, or the interpreter \
                     exited) while this call waited for other processes: attach again with \
                     sat.connect"
                        .into(),
                ));
            }
            let e = Python::attach(|py| py.check_signals().err())?;
            let message = e.to_string();
            if let Some(h) = handle.upgrade() {
                h.keep_callback_error(e);
            }
            Some(CoreError::Role(format!("interrupted: {message}")))
        })
    }

    /// Installs again the interpreter's own handlers (Python functions, such
    /// as SIGINT's KeyboardInterrupt) of the signals libfabric's shm provider
    /// and SAT take over when an endpoint opens (SIGINT, SIGTERM, SIGHUP):
    /// their handlers unlink the endpoint's region, then end the process,
    /// which is right where the interpreter would have died of the signal,
    /// and wrong where it raises an exception the program may catch. Only
    /// the main thread may set handlers: from another, nothing is done.
    pub(crate) fn restore_interpreter_signal_handlers(py: Python<'_>) -> PyResult<()> {
        let threading = py.import("threading")?;
        let current = threading.call_method0("current_thread")?;
        if !current.is(&threading.call_method0("main_thread")?) {
            return Ok(());
        }
        let signal = py.import("signal")?;
        for name in ["SIGINT", "SIGTERM", "SIGHUP"] {
            let sig = signal.getattr(name)?;
            let handler = signal.call_method1("getsignal", (&sig,))?;
            if handler.is_callable() {
                signal.call_method1("signal", (&sig, handler))?;
            }
        }
        Ok(())
    }

    /// Keeps a callback's exception for the call that ran the callback. The
    /// core stops at a handler's first failure, so there is one at a time.
    pub(crate) fn keep_callback_error(&self, e: PyErr) {
        lock(&self.callback_error).get_or_insert(e);
    }

    pub(crate) fn keep_role_error(&self, e: PyErr) {
        *lock(&self.role_error) = Some(e);
    }

    /// After the run: the exception that made it fail, if Python raised it
    /// (a callback after the role function returned, or the role function).
    pub(crate) fn take_failure(&self) -> Option<PyErr> {
        lock(&self.callback_error)
            .take()
            .or_else(|| lock(&self.role_error).take())
    }

    pub(crate) fn chain(&self, py: Python<'_>, ids: &[u64]) -> Option<Py<PyChain>> {
        lock(&self.chains).get(ids).map(|c| c.clone_ref(py))
    }

    /// A chain of this process for which `pred` holds.
    pub(crate) fn find_chain(
        &self,
        py: Python<'_>,
        pred: impl Fn(&PyChain) -> bool,
    ) -> Option<Py<PyChain>> {
        lock(&self.chains)
            .values()
            .find(|c| pred(c.get()))
            .map(|c| c.clone_ref(py))
    }

    /// Records a new chain; when another thread recorded the same chain
    /// meanwhile, that one is kept and returned.
    pub(crate) fn add_chain(
        &self,
        py: Python<'_>,
        ids: Vec<u64>,
        chain: Py<PyChain>,
    ) -> Py<PyChain> {
        lock(&self.chains).entry(ids).or_insert(chain).clone_ref(py)
    }

    /// Forgets `chain` (given back by FREE), so that allocating or looking
    /// up the same chunks again makes a new Chain.
    pub(crate) fn forget_chain(&self, py: Python<'_>, ids: &[u64], chain: &Bound<'_, PyChain>) {
        let mut chains = lock(&self.chains);
        if chains.get(ids).is_some_and(|c| c.bind(py).is(chain)) {
            chains.remove(ids);
        }
    }

    /// After the run: the chains go (they point back at this handle);
    /// those Python still holds keep their memory.
    pub(crate) fn forget_chains(&self) -> HashMap<Vec<u64>, Py<PyChain>> {
        std::mem::take(&mut *lock(&self.chains))
    }
}
