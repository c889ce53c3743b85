//! libsat: the C ABI of SAT. Every `extern "C"` function of SAT lives here;
//! sat-core has no FFI types.
//!
//! Conventions (include/sat.h says the same to C programmers):
//! - Calls return a status (`SAT_OK` = 0, a negative `sat_status` on error)
//!   or a pointer (NULL on error); on error, `sat_last_error()` gives this
//!   thread's message. Out-parameters are written only on success.
//! - No panic crosses the boundary: each call runs inside `status::boundary`.
//! - NULL arguments are errors, never crashes.
//! - Calls are safe from several threads of one process, once the role
//!   function runs (the API serializes what must be).
//!
//! Modules: [`status`] (codes, last error, the boundary), [`library`]
//! (version, ABI, built-in features, log lines), [`run`] (the
//! bootstrap and the process's client), [`chunks`] (`sat_chunk_t`,
//! allocation and scopes), [`protocols`] (consistency protocols defined in
//! C and registered at run time), [`sync`] (rendezvous, barriers, symbols,
//! publish-subscribe, topology queries); with feature `abe`, `abe` (the
//! encryption layer: protected chains and symbols, the tenant key).

#![allow(non_camel_case_types)]

pub mod chunks;
pub mod library;
pub mod protocols;
pub mod run;
mod settings;
pub mod status;
pub mod sync;
// Last, so that include/sat.h declares its calls after the plain ones.
#[cfg(feature = "abe")]
pub mod abe;

pub use status::sat_status;

/// The major version of libsat (Cargo.toml's; checked at compile time).
pub const SAT_VERSION_MAJOR: u32 = 0;
/// The minor version of libsat.
pub const SAT_VERSION_MINOR: u32 = 1;
/// The patch version of libsat.
pub const SAT_VERSION_PATCH: u32 = 0;

// The header's version macros must be literals (cbindgen copies constants,
// it does not evaluate `env!`), so a version bump in Cargo.toml that
// forgets them fails the build here; tests/header.rs then fails until
// `make header` regenerates include/sat.h.
const _: () = {
    const fn number(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut n = 0u32;
        let mut i = 0;
        while i < b.len() {
            n = n * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        n
    }
    assert!(
        SAT_VERSION_MAJOR == number(env!("CARGO_PKG_VERSION_MAJOR"))
            && SAT_VERSION_MINOR == number(env!("CARGO_PKG_VERSION_MINOR"))
            && SAT_VERSION_PATCH == number(env!("CARGO_PKG_VERSION_PATCH")),
        "sat-capi/src/lib.rs: SAT_VERSION_MAJOR/MINOR/PATCH differ from Cargo.toml's version"
    );
};
