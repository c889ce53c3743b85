//! Status codes, the per-thread last error, and the panic boundary.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

use sat_core::SatError;

/// What a call returns: 0 on success, a negative code grouped by what broke.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum sat_status {
    SAT_OK = 0,
    /// A NULL or out-of-range argument.
    SAT_ERR_ARGUMENT = -1,
    /// The API was called in a way it does not allow (RELEASE without an
    /// acquire, a size mismatch, a call outside a role, ...).
    SAT_ERR_USAGE = -2,
    /// A chunk or chain request is malformed (size, ids).
    SAT_ERR_CHUNK = -3,
    /// A bounded wait ran out (LOOKUP or readSymbol of what nobody wrote).
    SAT_ERR_TIMEOUT = -4,
    /// The message layer failed (provider, lost peer).
    SAT_ERR_TRANSPORT = -5,
    /// The processes of the run could not find each other.
    SAT_ERR_BOOTSTRAP = -6,
    /// The topology file is missing, malformed or does not fit the run.
    SAT_ERR_TOPOLOGY = -7,
    /// Another process aborted the run.
    SAT_ERR_ABORTED = -8,
    /// A role function or a handler failed.
    SAT_ERR_ROLE = -9,
    /// A bug in SAT: an internal panic, caught at the boundary.
    SAT_ERR_INTERNAL = -10,
    /// Protected data (the encryption layer) that this tenant's attributes
    /// do not allow it to read, or no tenant key loaded (`SAT_ABE_KEY`).
    SAT_ERR_ACCESS_DENIED = -11,
    /// Protected data failed its integrity checks (changed bytes, a writer
    /// the write policy does not allow, an older version replayed).
    SAT_ERR_INTEGRITY = -12,
    /// Memory for the call could not be allocated (a chain's local memory,
    /// a symbol's value).
    SAT_ERR_NO_MEMORY = -13,
    /// A run with recovery lost a process this call may have counted on
    /// (a barrier, each thread's first call after it: call it again with the
    /// number of calls left; a rendezvous, whose wakeup it may have been to
    /// send: call it again if another process will wake it). Also a call a
    /// lost server took with it, in a run with replicated homes:
    /// call it again (a RELEASE so failed may or may not have published:
    /// read the chunk to know; a chain's RELEASE so failed publishes all
    /// its chunks or none, whatever servers their homes are on; a write
    /// scope on the lost server's chunk published nothing).
    SAT_ERR_PROCESS_LOST = -14,
}

use sat_status::*;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static LAST_STATUS: std::cell::Cell<sat_status> = const { std::cell::Cell::new(SAT_OK) };
}

/// Records `message` as this thread's last error, of status `status`.
pub(crate) fn set_error_status(status: sat_status, message: &str) -> sat_status {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
    LAST_STATUS.with(|s| s.set(status));
    status
}

/// Records `message` as this thread's last error (a usage error unless the
/// caller records another status).
pub(crate) fn set_error(message: &str) {
    set_error_status(SAT_ERR_USAGE, message);
}

/// A usage error, recording `message`.
pub(crate) fn usage(message: &str) -> sat_status {
    set_error_status(SAT_ERR_USAGE, message);
    SAT_ERR_USAGE
}

/// The status of a sat-core error, recording its message.
pub(crate) fn fail(e: &SatError) -> sat_status {
    let status = match e {
        SatError::Topology(_) => SAT_ERR_TOPOLOGY,
        SatError::Chunk(_) => SAT_ERR_CHUNK,
        SatError::Transport(_) => SAT_ERR_TRANSPORT,
        SatError::Bootstrap(_) => SAT_ERR_BOOTSTRAP,
        SatError::Aborted(_) => SAT_ERR_ABORTED,
        SatError::Usage(_) => SAT_ERR_USAGE,
        SatError::Role(_) => SAT_ERR_ROLE,
        SatError::Timeout(_) => SAT_ERR_TIMEOUT,
        SatError::AccessDenied(_) => SAT_ERR_ACCESS_DENIED,
        SatError::Integrity(_) => SAT_ERR_INTEGRITY,
        SatError::ProcessLost(_) => SAT_ERR_PROCESS_LOST,
    };
    set_error_status(status, &e.to_string());
    status
}

/// Out of memory, recording `message`.
pub(crate) fn out_of_memory(message: &str) -> sat_status {
    set_error_status(SAT_ERR_NO_MEMORY, message);
    SAT_ERR_NO_MEMORY
}

/// An argument error, recording `message`.
pub(crate) fn bad_argument(message: &str) -> sat_status {
    set_error_status(SAT_ERR_ARGUMENT, message);
    SAT_ERR_ARGUMENT
}

/// What a call returns when it fails: a status, or NULL.
pub(crate) trait Failure {
    fn failure(status: sat_status) -> Self;
}

impl Failure for sat_status {
    fn failure(status: sat_status) -> Self {
        status
    }
}

impl Failure for i32 {
    fn failure(status: sat_status) -> Self {
        status as i32
    }
}

impl<T> Failure for *mut T {
    fn failure(_: sat_status) -> Self {
        std::ptr::null_mut()
    }
}

impl<T> Failure for *const T {
    fn failure(_: sat_status) -> Self {
        std::ptr::null()
    }
}

/// Runs the body of an exported call: a panic becomes `SAT_ERR_INTERNAL`
/// (or NULL) with a message, never an unwind into C.
pub(crate) fn boundary<R: Failure>(call: &str, body: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_error_status(
                SAT_ERR_INTERNAL,
                &format!("{call}: internal error in SAT: {what}; please report it"),
            );
            R::failure(SAT_ERR_INTERNAL)
        }
    }
}

/// This thread's last error message (empty if none); valid until the next
/// failing call on this thread, or until the thread exits (copy it to keep
/// it longer).
#[no_mangle]
pub extern "C" fn sat_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The status of this thread's last failed call (`SAT_OK` if none): what a
/// call that returned NULL failed with.
#[no_mangle]
pub extern "C" fn sat_last_status() -> sat_status {
    LAST_STATUS.with(|s| s.get())
}

/// A static description of a status code.
#[no_mangle]
pub extern "C" fn sat_status_string(status: i32) -> *const c_char {
    let s: &'static [u8] = match status {
        0 => b"success\0",
        -1 => b"invalid argument (NULL or out of range)\0",
        -2 => b"invalid use of the SAT API\0",
        -3 => b"invalid chunk or chain request\0",
        -4 => b"timed out\0",
        -5 => b"transport error\0",
        -6 => b"bootstrap failed\0",
        -7 => b"topology error\0",
        -8 => b"the run was aborted\0",
        -9 => b"a role or handler failed\0",
        -10 => b"internal error in SAT\0",
        -11 => b"access denied to protected data\0",
        -12 => b"protected data failed its integrity check\0",
        -13 => b"out of memory\0",
        -14 => b"a process of the run was lost (call again with the count left)\0",
        _ => b"unknown status\0",
    };
    s.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn every_status_has_a_static_description_and_errors_a_message() {
        for code in -14..=1 {
            // SAFETY: sat_status_string returns a static C string.
            let s = unsafe { CStr::from_ptr(sat_status_string(code)) };
            assert!(!s.to_bytes().is_empty(), "{code}");
        }
        set_error_status(SAT_ERR_TIMEOUT, "a message\0with a NUL");
        assert_eq!(sat_last_status(), SAT_ERR_TIMEOUT);
        // SAFETY: sat_last_error returns this thread's C string.
        let e = unsafe { CStr::from_ptr(sat_last_error()) };
        assert_eq!(e.to_str().unwrap(), "a message with a NUL");
    }

    #[test]
    fn a_panic_becomes_an_internal_error_at_the_boundary() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let s = boundary("sat_test", || -> sat_status { panic!("on purpose") });
        let p = boundary("sat_test", || -> *mut u8 { panic!("on purpose") });
        std::panic::set_hook(hook);
        assert_eq!(s, SAT_ERR_INTERNAL);
        assert!(p.is_null());
        // SAFETY: as above.
        let e = unsafe { std::ffi::CStr::from_ptr(sat_last_error()) };
        assert!(e.to_str().unwrap().contains("on purpose"));
    }
}
