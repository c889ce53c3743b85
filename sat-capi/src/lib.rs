//! libsat: the C ABI of SAT. Every `extern "C"` function of SAT lives here;
//! sat-core has no FFI types.
//!
//! Conventions (include/sat.h says the same to C programmers):
//! - Calls return a status (`SAT_OK` = 0, a negative `sat_status` on error)
//!   or a pointer (NULL on error); on error, `sat_last_error()` gives this
//!   thread's message. Out-parameters are written only on success.
//! - No panic crosses the boundary: each call runs inside [`boundary`].
//! - NULL arguments are errors, never crashes.
//! - Calls are safe from several threads of one process, once the role
//!   function runs (the API serializes what must be).
//!
//! Modules: [`status`] (codes, last error, the boundary), [`run`] (the
//! bootstrap and the process's client), [`chunks`] (`sat_chunk_t`,
//! allocation and scopes), [`sync`] (rendezvous, barriers, symbols,
//! publish-subscribe, topology queries).

#![allow(non_camel_case_types)]

pub mod chunks;
pub mod run;
pub mod status;
pub mod sync;

pub use status::sat_status;
