//! The errors of sat-core: one enum, grouped by what broke, each message
//! saying what went wrong and what to do about it.

use crate::chunk::ChunkError;
use crate::topology::TopologyError;
use crate::transport::TransportError;

/// What every fallible call of sat-core returns.
pub type SatResult<T> = Result<T, SatError>;

/// Why a call failed. The variant says what kind of failure (the C ABI and
/// the Python module map each to a status or an exception class); its
/// message says what went wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum SatError {
    /// The topology file is missing, malformed or does not fit the run.
    #[error(transparent)]
    Topology(#[from] TopologyError),

    /// A chunk or chain request is malformed (size, ids, address space).
    #[error(transparent)]
    Chunk(#[from] ChunkError),

    /// The message layer failed (provider missing, peer lost, libfabric error).
    #[error(transparent)]
    Transport(#[from] TransportError),

    /// The processes of the run could not find each other or agree on the run.
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),

    /// A run with recovery lost a process this call may have waited for
    /// (a barrier round counting on it), or, with replicated homes, a
    /// server that had this call's request (`client/failover.rs`); the
    /// message says what to do.
    #[error("a process of the run was lost: {0}")]
    ProcessLost(String),

    /// The run was aborted by another process; the message names the cause.
    #[error("the run was aborted: {0}")]
    Aborted(String),

    /// The API was called in a way it does not allow.
    #[error("invalid use of the SAT API: {0}")]
    Usage(String),

    /// A role function returned an error.
    #[error("{0}")]
    Role(String),

    /// An operation did not complete in the time it is allowed.
    #[error("timed out: {0}")]
    Timeout(String),

    /// The encryption layer (feature `abe`) refused: this tenant's
    /// attributes do not satisfy the data's read policy, or no tenant key
    /// is loaded for protected data.
    #[error("access denied: {0}")]
    AccessDenied(String),

    /// Protected data failed its checks: its bytes were changed, its writer
    /// may not write it, or an older version came back. Nothing of it was
    /// returned.
    #[error("integrity check failed: {0}")]
    Integrity(String),
}
