//! The few operating-system calls the runtime makes outside libfabric, as
//! safe functions, so that `unsafe` stays in a handful of known places
//! (`libfabric-sys`, `transport::fabric`, this module, `launcher::sys` and
//! `sat-capi`).

use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::time::Duration;

/// This host's name, as `gethostname(2)` gives it ("localhost" if it fails).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length; gethostname
    // writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// One relative `clock_nanosleep` on the monotonic clock, resumed if a
/// signal interrupts it (the micro-sleep of section 3.1).
pub fn nanosleep(d: Duration) {
    let mut req = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    loop {
        let mut rem = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: both pointers are to live, properly aligned timespec values.
        let rc = unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &req, &mut rem) };
        if rc == libc::EINTR {
            req = rem;
            continue;
        }
        break;
    }
}

/// Linux rounds every sleep of a normal thread up by its timer slack (50 us
/// by default), which would turn a 1 us micro-sleep into 50 us. Ask for 1 us.
/// The slack is a thread's: each thread asks once (every wait starts an idle
/// loop, and a system call per wait showed in a 64 B hand-off's profile).
pub fn set_fine_timer_slack() {
    thread_local! {
        static SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if SET.with(|s| s.replace(true)) {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0);
    }
}

/// Takes ownership of a listening socket inherited at descriptor `fd` (the
/// seed socket `satrun` hands rank 0) and marks it close-on-exec again, so
/// that programs this process starts do not inherit it.
pub fn take_inherited_listener(fd: RawFd) -> std::io::Result<TcpListener> {
    // SAFETY: F_GETFD only reads the descriptor's flags; it fails with EBADF
    // when `fd` is not open, which we report instead of adopting it.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open and nothing else in this process owns
    // it (it was inherited for this purpose); the listener now closes it.
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    listener.local_addr()?;
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe { libc::fcntl(listener.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(listener)
}

/// Waits until `fd` is readable (for a listener: a connection is waiting),
/// at most `timeout`. Returns whether it is.
pub fn wait_readable(fd: &impl AsRawFd, timeout: Duration) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    loop {
        // SAFETY: one valid pollfd for an open descriptor.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc >= 0 {
            return Ok(rc > 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The machine's physical memory in bytes, if the system says.
pub fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page > 0).then(|| pages as u64 * page as u64)
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and
        // may itself contain spaces or parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}
