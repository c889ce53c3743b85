//! What the library is and how it speaks: its version and ABI, whether the
//! encryption layer is built in, and where its log lines go.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::Arc;

use crate::status::{boundary, sat_status};

/// The ABI of this header: the number in libsat's soname (`libsat.so.0`).
/// It changes only when a program built against an older header could
/// break against the library; compare it with sat_abi_version() to know
/// that the libsat loaded at run time is one this program can use.
pub const SAT_ABI_VERSION: u32 = 0;

const _: () = {
    // The soname (sat-capi/build.rs) is libsat.so.MAJOR.
    assert!(
        SAT_ABI_VERSION == crate::SAT_VERSION_MAJOR,
        "SAT_ABI_VERSION must follow the major version, the soname's number"
    );
};

/// The library's version, "MAJOR.MINOR.PATCH" (Cargo.toml's).
#[no_mangle]
pub extern "C" fn sat_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The ABI of the libsat loaded at run time, to compare with the header's
/// `SAT_ABI_VERSION`: a program that finds them different was built for
/// another libsat and should stop.
#[no_mangle]
pub extern "C" fn sat_abi_version() -> u32 {
    SAT_ABI_VERSION
}

/// 1 when this libsat has the encryption layer (cargo feature `abe`: the
/// sat_*_protected calls and sat_abe_load_key exist), 0 when it has not.
/// A program compiled with `-DSAT_ABE` should check it first.
#[no_mangle]
pub extern "C" fn sat_has_encryption() -> c_int {
    c_int::from(cfg!(feature = "abe"))
}

/// The level of a log line, most severe first. Without `SAT_LOG` only
/// errors and warnings are logged; `SAT_LOG=debug` (or any filter of the
/// debug stream: README, "Environment") adds the rest. A filter that names
/// parts of SAT only (`SAT_LOG=sat_capi=debug`) keeps the errors and
/// warnings of the other parts.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum sat_log_level {
    SAT_LOG_ERROR = 1,
    SAT_LOG_WARN = 2,
    SAT_LOG_INFO = 3,
    SAT_LOG_DEBUG = 4,
    SAT_LOG_TRACE = 5,
}

/// A function that takes the library's log lines: the line's level, its
/// text (no newline; valid only during the call) and the `user` pointer
/// given to sat_set_log_handler. It is called from whichever thread logs,
/// several at once, so it must be thread-safe; it may call
/// sat_set_log_handler but no other SAT call.
pub type sat_log_handler =
    Option<unsafe extern "C" fn(level: sat_log_level, line: *const c_char, user: *mut c_void)>;

/// The application's handler and pointer. The pointer is the application's
/// to make usable from any thread (the handler's contract says so).
struct Handler {
    call: unsafe extern "C" fn(sat_log_level, *const c_char, *mut c_void),
    user: *mut c_void,
}
impl Handler {
    fn emit(&self, level: sat_log_level, line: &str) {
        let text = CString::new(line.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the application gave this function for exactly this call,
        // with this pointer; `text` outlives the call.
        unsafe { (self.call)(level, text.as_ptr(), self.user) }
    }
}

// SAFETY: SAT never dereferences `user`; it only hands it back to the
// handler, which the application declared callable from any thread.
unsafe impl Send for Handler {}
// SAFETY: as for Send: SAT shares the pointer value, never the pointee.
unsafe impl Sync for Handler {}

/// Sends the library's log lines (the debug stream and its warnings and
/// errors) to `handler` instead of standard error; NULL sends them to
/// standard error again. SAT never writes log lines to standard output.
///
/// Call it before sat_bootstrap or sat_connect to see their lines too. It
/// may be called at any time, from any thread, even outside a run.
///
/// Returns: SAT_OK.
#[no_mangle]
pub extern "C" fn sat_set_log_handler(handler: sat_log_handler, user: *mut c_void) -> sat_status {
    boundary("sat_set_log_handler", || {
        let sink = handler.map(|call| {
            let h = Handler { call, user };
            Arc::new(move |level: tracing::Level, line: &str| {
                let level = match level {
                    tracing::Level::ERROR => sat_log_level::SAT_LOG_ERROR,
                    tracing::Level::WARN => sat_log_level::SAT_LOG_WARN,
                    tracing::Level::INFO => sat_log_level::SAT_LOG_INFO,
                    tracing::Level::DEBUG => sat_log_level::SAT_LOG_DEBUG,
                    tracing::Level::TRACE => sat_log_level::SAT_LOG_TRACE,
                };
                h.emit(level, line);
            }) as sat_core::observe::LogSink
        });
        sat_core::observe::set_log_sink(sink);
        sat_status::SAT_OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<(sat_log_level, String, usize)>> = Mutex::new(Vec::new());

    unsafe extern "C" fn keep(level: sat_log_level, line: *const c_char, user: *mut c_void) {
        // SAFETY: the line is a C string for the length of the call.
        let text = unsafe { CStr::from_ptr(line) }
            .to_string_lossy()
            .into_owned();
        SEEN.lock().unwrap().push((level, text, user.addr()));
    }

    #[test]
    fn versions_are_c_strings_and_numbers_that_agree() {
        // SAFETY: a static C string.
        let v = unsafe { CStr::from_ptr(sat_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        assert_eq!(sat_abi_version(), crate::SAT_VERSION_MAJOR);
        assert_eq!(sat_has_encryption(), i32::from(cfg!(feature = "abe")));
    }

    #[test]
    fn a_log_handler_gets_each_line_with_its_level_and_pointer() {
        let user = std::ptr::without_provenance_mut::<c_void>(0x5a7);
        assert_eq!(sat_set_log_handler(Some(keep), user), sat_status::SAT_OK);
        tracing::warn!("a line for the handler {}", 7);
        assert_eq!(
            sat_set_log_handler(None, std::ptr::null_mut()),
            sat_status::SAT_OK
        );
        tracing::warn!("a line for standard error");
        let seen = SEEN.lock().unwrap();
        let mine: Vec<_> = seen
            .iter()
            .filter(|(_, l, _)| l.contains("handler 7"))
            .collect();
        assert_eq!(mine.len(), 1, "{seen:?}");
        let (level, line, ptr) = mine[0];
        assert_eq!(*level, sat_log_level::SAT_LOG_WARN);
        assert!(!line.ends_with('\n'), "{line:?}");
        assert_eq!(*ptr, 0x5a7);
        assert!(!seen.iter().any(|(_, l, _)| l.contains("standard error")));
    }
}
