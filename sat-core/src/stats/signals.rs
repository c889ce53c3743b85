//! The stop signals (SIGTERM, SIGINT, SIGHUP) held off while a statistics
//! file is written.
//!
//! `satrun` stops the processes left with SIGTERM when a rank fails; a
//! server whose run had just ended was then often writing its file, and died
//! between writing and renaming it. Held off, a stop signal is noted and
//! sent again once the file is renamed, to whatever handled it before (the
//! shm provider's clean-up then death, a service server's stop flag, the
//! application's own handler, or the default: death). Only for that window:
//! a process is never made to ignore a stop, and SIGKILL (which `satrun`
//! sends 3 s after SIGTERM) cannot be held off at all.

use std::sync::atomic::{AtomicI32, Ordering};

use crate::transport::Rank;

const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// The first stop signal that came while held off; 0 for none.
static HELD: AtomicI32 = AtomicI32::new(0);

extern "C" fn hold(sig: libc::c_int) {
    // An atomic is async-signal-safe; the first signal is the one to send
    // again.
    let _ = HELD.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
}

/// The stop signals held off until dropped; see the module's documentation.
pub(super) struct HeldOff {
    /// The handlers replaced, to put back.
    replaced: Vec<(libc::c_int, libc::sigaction)>,
}

impl HeldOff {
    pub(super) fn new() -> HeldOff {
        HELD.store(0, Ordering::SeqCst);
        let mut replaced = Vec::with_capacity(STOP_SIGNALS.len());
        for sig in STOP_SIGNALS {
            // SAFETY: sigaction(2) with valid, zero-initialised structs; the
            // handler only stores to an atomic.
            unsafe {
                let mut before: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut before) != 0
                    || before.sa_sigaction == libc::SIG_IGN
                {
                    // Ignored (nohup): it stays so.
                    continue;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = hold as extern "C" fn(libc::c_int) as usize;
                // The file's system calls go on rather than fail with EINTR.
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(sig, &action, &mut before) == 0 {
                    replaced.push((sig, before));
                }
            }
        }
        HeldOff { replaced }
    }
}

impl Drop for HeldOff {
    fn drop(&mut self) {
        for (sig, before) in &self.replaced {
            // SAFETY: puts back the action sigaction(2) returned for `sig`.
            unsafe {
                libc::sigaction(*sig, before, std::ptr::null_mut());
            }
        }
        // A signal that comes from here on goes to the handler put back; one
        // that came before is sent again, to the same.
        let sig = HELD.swap(0, Ordering::SeqCst);
        if sig != 0 {
            tracing::debug!("signal {sig} came while the statistics were written: taken now");
            // SAFETY: raise(3) takes a signal number and touches no memory.
            unsafe {
                libc::raise(sig);
            }
        }
    }
}

/// Debug builds only: `SAT_STATS_TEST_SIGTERM_BEFORE_RENAME=<rank>` makes
/// that rank send itself SIGTERM between writing its file and renaming it,
/// the moment satrun's SIGTERM can meet a server ending after a role
/// failure (`tests/stats.rs`). A release build has no such hook.
#[cfg(debug_assertions)]
pub(super) fn test_signal_before_rename(rank: Rank) {
    let asked = std::env::var("SAT_STATS_TEST_SIGTERM_BEFORE_RENAME")
        .ok()
        .and_then(|v| v.trim().parse::<Rank>().ok());
    if asked == Some(rank) {
        // SAFETY: raise(3) takes a signal number and touches no memory.
        unsafe {
            libc::raise(libc::SIGTERM);
        }
    }
}

#[cfg(not(debug_assertions))]
pub(super) fn test_signal_before_rename(_: Rank) {}
