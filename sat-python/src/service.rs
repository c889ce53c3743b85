//! `sat.connect`: attach this process to a running SAT service
//! (`satrun --serve`) instead of joining a run under satrun.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};

use crate::client::PyClient;
use crate::errors::{to_py, AbortedError};
use crate::handle::Handle;

/// Attaches this process to the SAT service at `address` and returns its
/// Client. `address` is the service's connection string,
/// "sat://SECRET@host:port", the one line of the address file that
/// `satrun --serve` writes (white space around it is ignored); a plain
/// "host:port" takes the secret from the SAT_SECRET environment variable.
/// The process proves it holds the secret without sending it, and the
/// service proves it holds it too. The Client lasts until
/// `client.detach()`, the end of a `with` block, or the interpreter's exit
/// (an `atexit` hook holds the client until it detaches, so that what it
/// released reaches the service even if the program forgets to detach;
/// in a `fork()` child the hook does nothing: the session is the parent's;
/// when the service ended first, it ends quietly: there is nothing to
/// detach from).
/// Raises BootstrapError when the service cannot be reached, refuses the
/// secret (none, or a wrong one) or has no free client slot; UsageError
/// when `address` is not a service's address (malformed, or a host name
/// that does not resolve). The GIL is released while the service admits this process.
#[pyfunction]
pub(crate) fn connect(py: Python<'_>, address: &str) -> PyResult<Py<PyClient>> {
    let session = py
        .detach(|| sat_core::service::connect(address))
        .map_err(to_py)?;
    let h = Arc::new(Handle::new());
    // A session's client is new: its check is not set yet.
    let _ = session
        .client()
        .set_interrupt_check(Handle::interrupt_check(&h));
    h.attach(session);
    Handle::restore_interpreter_signal_handlers(py)?;
    let client = Py::new(py, PyClient::new(py, h.clone())?)?;
    // The hook holds the client until it detaches. In a fork() child it does
    // nothing, silently: the session is the parent's (see `Handle`'s drop).
    let held = client.clone_ref(py);
    let hook = PyCFunction::new_closure(
        py,
        Some(c"_sat_detach_at_exit"),
        Some(c"Detaches a client of sat.connect still attached at the interpreter's exit."),
        move |args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            let client = held.bind(args.py());
            if h.is_foreign() {
                return Ok(());
            }
            match PyClient::detach(client) {
                // The service ended before this process: there is nothing
                // left to detach from, and every call that returned had
                // reached it. A traceback at exit would report no fault of
                // this program; the debug stream still says it.
                Err(e) if e.is_instance_of::<AbortedError>(args.py()) => {
                    tracing::debug!("at the interpreter's exit: {e}");
                    Ok(())
                }
                other => other,
            }
        },
    )?;
    py.import("atexit")?.call_method1("register", (&hook,))?;
    client.get().set_atexit_hook(hook.into_any().unbind());
    Ok(client)
}

/// Detaches `client`'s session (see [`Handle::detach`]); the chains let go
/// of the handle (those Python still holds keep their memory), and the
/// `atexit` hook lets go of the client.
pub(crate) fn detach(client: &Bound<'_, PyClient>, h: &Handle) -> PyResult<()> {
    let py = client.py();
    h.check_process()?;
    let outcome = py.detach(|| h.detach());
    drop(h.forget_chains());
    if let Some(hook) = client.get().take_atexit_hook() {
        py.import("atexit")?.call_method1("unregister", (hook,))?;
    }
    outcome.map_err(to_py)
}
