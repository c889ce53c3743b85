//! `sat.connect`: attach this process to a running SAT service
//! (`satrun --serve`) instead of joining a run under satrun.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::client::PyClient;
use crate::errors::to_py;
use crate::handle::Handle;

/// Attaches to the service at `address` ("host:port") and returns its
/// Client; `client.detach()` (or leaving a `with` block) detaches. The GIL
/// is released while the service admits this process.
#[pyfunction]
pub(crate) fn connect(py: Python<'_>, address: &str) -> PyResult<PyClient> {
    let session = py
        .detach(|| sat_core::service::connect(address))
        .map_err(to_py)?;
    let h = Arc::new(Handle::new());
    h.attach(session);
    PyClient::new(py, h)
}

/// Detaches `h`'s session (see [`Handle::detach`]); the chains let go of
/// the handle, and those Python still holds keep their memory.
pub(crate) fn detach(py: Python<'_>, h: &Handle) -> PyResult<()> {
    h.check_process()?;
    let outcome = py.detach(|| h.detach());
    drop(h.forget_chains());
    outcome.map_err(to_py)
}
