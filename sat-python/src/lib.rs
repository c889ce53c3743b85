//! `sat._sat`: SAT's client API for Python (the run mode).
//!
//! A Python script started under `satrun` calls `sat.run({1: role_a, ...})`;
//! every client process calls its role function with a `sat.Client`. Every
//! call that can block releases the GIL (`py.detach`), so other Python
//! threads run meanwhile. Chains live in memory this module owns, so scopes
//! show their bytes with no copy (`chain`). Errors are `sat.SatError`
//! subclasses, one per group of the core's errors (`errors`).

mod abe;
mod args;
mod chain;
mod client;
mod errors;
mod events;
mod handle;
mod service;
mod symbols;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use sat_core::bootstrap::{RoleResult, Roles};
use sat_core::client::Client;

use crate::client::PyClient;
use crate::errors::{to_py, usage};
use crate::handle::Handle;

/// Calls a Python role function with the client, the GIL held; a Python
/// exception becomes the role's failure, its traceback printed first.
fn call_role(f: &Py<PyAny>, h: &Arc<Handle>, client: &Client) -> RoleResult {
    h.open(client);
    // One client per process in a run: the check is set once.
    let _ = client.set_interrupt_check(Handle::interrupt_check(h));
    let outcome = Python::attach(|py| -> Result<(), String> {
        Handle::restore_interpreter_signal_handlers(py).map_err(|e| e.to_string())?;
        let pyclient = PyClient::new(py, h.clone())
            .and_then(|c| Py::new(py, c))
            .map_err(|e| e.to_string())?;
        match f.call1(py, (pyclient,)) {
            Ok(_) => Ok(()),
            Err(e) => {
                e.display(py);
                let msg = e.to_string();
                h.keep_role_error(e);
                Err(msg)
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
/// A failing role function or subscription callback makes it raise
/// `RoleError`, whose `__cause__` is the Python exception. A process joins
/// one run: a second call, or one from inside a role, raises `UsageError`.
#[pyfunction]
#[pyo3(signature = (roles, args = None))]
fn run(py: Python<'_>, roles: &Bound<'_, PyAny>, args: Option<Vec<String>>) -> PyResult<()> {
    let args = match args {
        Some(a) => a,
        None => py.import("sys")?.getattr("argv")?.extract()?,
    };
    let h = Arc::new(Handle::new());
    let mut table = Roles::new();
    let items = roles.call_method0("items").map_err(|_| {
        PyTypeError::new_err("roles: give a dict of role ids to functions, {1: role_a, 2: role_b}")
    })?;
    for item in items.try_iter()? {
        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
        let id = k.extract::<args::Int>()?.u32("role id")?;
        if id == 0 {
            return Err(usage("role 0 is the S-DSM server: client roles start at 1"));
        }
        if !v.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "the function of role {id} is not callable"
            )));
        }
        let f: Py<PyAny> = v.unbind();
        let h = h.clone();
        table = table.role(id, move |client: &Client| call_role(&f, &h, client));
    }
    // A process takes part in one run: the launcher's environment (the
    // seed's socket among it) is spent by the first, so a second `run`, or
    // one from inside a role, would fail on it with an error about the
    // launcher or rank 0. Said as what it is, at once.
    static RUNNING: AtomicBool = AtomicBool::new(false);
    static CALLED: AtomicBool = AtomicBool::new(false);
    if RUNNING.load(Ordering::Acquire) {
        return Err(usage(
            "sat.run: this process is already in a run (sat.run was called from inside a role?); \
             call sat.run once, from the main program: each role function gets its client",
        ));
    }
    if CALLED.swap(true, Ordering::AcqRel) {
        return Err(usage(
            "sat.run: this process called sat.run before (its run is over, or it could not join \
             one); a process joins one run: start the program again (under satrun) to join \
             another",
        ));
    }
    RUNNING.store(true, Ordering::Release);
    let outcome = py.detach(|| sat_core::bootstrap::run(table, args));
    RUNNING.store(false, Ordering::Release);
    // The chains point back at the handle: let them go (those Python still
    // holds keep their memory, readable after the run).
    drop(h.forget_chains());
    outcome.map_err(|e| {
        let err = to_py(e);
        if let Some(cause) = h.take_failure() {
            err.set_cause(py, Some(cause));
        }
        err
    })
}

#[pymodule]
fn _sat(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::add(m)?;
    m.add_class::<PyClient>()?;
    m.add_class::<chain::PyChain>()?;
    m.add_class::<chain::PyScope>()?;
    m.add_class::<chain::PyBuffer>()?;
    m.add_class::<symbols::PySymbols>()?;
    events::add(m)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(service::connect, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("HAS_ABE", abe::HAS_ABE)?;
    Ok(())
}
