//! `sat.SatError` and its subclasses: one per group of the core's errors.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

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

create_exception!(
    sat,
    AccessDenied,
    SatError,
    "Protected data this tenant's attributes may not read (or no tenant key is loaded)."
);
create_exception!(
    sat,
    IntegrityError,
    SatError,
    "Protected data failed its checks: changed bytes, a writer not allowed to write it, or an older version."
);

create_exception!(
    sat,
    ProcessLostError,
    SatError,
    "A run with recovery lost a process this call may have counted on (a barrier: call it again with the count of the processes left; a rendezvous, whose wakeup it may have been to send: call it again if another process will wake it). Also a call a lost server took with it, in a run with replicated homes: call it again (a release so failed may or may not have published: read the chunk to know)."
);

/// The Python exception of a core error: the group's class, the core's message.
pub(crate) fn to_py(e: CoreError) -> PyErr {
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
        CoreError::AccessDenied(_) => AccessDenied::new_err(msg),
        CoreError::Integrity(_) => IntegrityError::new_err(msg),
        CoreError::ProcessLost(_) => ProcessLostError::new_err(msg),
    }
}

pub(crate) fn usage(msg: impl Into<String>) -> PyErr {
    to_py(CoreError::Usage(msg.into()))
}

pub(crate) fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
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
    m.add("AccessDenied", py.get_type::<AccessDenied>())?;
    m.add("IntegrityError", py.get_type::<IntegrityError>())?;
    m.add("ProcessLostError", py.get_type::<ProcessLostError>())?;
    Ok(())
}
