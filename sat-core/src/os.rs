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
    // A signal interrupts the wait: it goes on for what is left of the
    // timeout, not for the whole of it again, or a program's timer that
    // fires more often than the timeout would make it wait for ever (a
    // seed that waits 4 ms at a time under a 2 ms profiling timer).
    let deadline = std::time::Instant::now() + timeout;
    let mut left = timeout;
    loop {
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for an open descriptor.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc >= 0 {
            return Ok(rc > 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
        left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(false);
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

/// `flock(2)` on `file` with `how` (`LOCK_SH`, `LOCK_EX`, with `LOCK_NB` not
/// to wait: `WouldBlock` when another open file holds a lock in the way). A
/// lock lasts until its open file is closed, or its process dies however it
/// dies: it marks a file or folder as in use by a live process.
pub fn flock(file: &std::fs::File, how: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: flock takes a descriptor `file` owns and plain flags.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
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

/// Whether process `pid` holds the other end of `stream`, a TCP connection
/// whose peer is on this host (in this network namespace): a pid a process
/// claims of itself is believed only then. The service and a run's seed
/// kill a lost process of their host (a fence, before its locks on host
/// slots are freed); a pid taken on trust would let any process that holds
/// the secret have them kill another, or their own group (pid 0).
///
/// Linux only: the peer's socket is found in `/proc/net/tcp{,6}` by its
/// two addresses, then among `pid`'s open descriptors. False when anything
/// does not match or cannot be read (another user's process, for a service
/// that is not root's: one it could not kill anyway).
pub fn pid_holds_peer(stream: &std::net::TcpStream, pid: u32) -> bool {
    if pid <= 1 || pid == std::process::id() || libc::pid_t::try_from(pid).is_err() {
        return false;
    }
    let (Ok(ours), Ok(theirs)) = (stream.local_addr(), stream.peer_addr()) else {
        return false;
    };
    let Some(inode) = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .find_map(|table| socket_inode(&table, theirs, ours))
    else {
        return false;
    };
    let wanted = std::ffi::OsString::from(format!("socket:[{inode}]"));
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted))
}

/// The inode of the socket in a `/proc/net/tcp{,6}` table whose local
/// address is `local` and remote address `remote`.
fn socket_inode(
    table: &str,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
) -> Option<u64> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (l, r, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        (same_endpoint(proc_net_address(l)?, local) && same_endpoint(proc_net_address(r)?, remote))
            .then(|| inode.parse().ok())
            .flatten()
    })
}

/// An address as `/proc/net/tcp{,6}` writes it: the IP as 32-bit words in
/// the host's byte order, each in hex, then `:` and the port in hex.
fn proc_net_address(field: &str) -> Option<std::net::SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = u32::from_str_radix(ip.get(8 * i..8 * i + 8)?, 16).ok()?;
        Some(w.to_ne_bytes())
    };
    let ip: std::net::IpAddr = match ip.len() {
        8 => std::net::Ipv4Addr::from(word(0)?).into(),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[4 * i..4 * i + 4].copy_from_slice(&word(i)?);
            }
            std::net::Ipv6Addr::from(b).into()
        }
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, port))
}

/// The same endpoint, an IPv4 address and its IPv4-mapped IPv6 form alike.
fn same_endpoint(a: std::net::SocketAddr, b: std::net::SocketAddr) -> bool {
    let canonical = |a: std::net::SocketAddr| match a.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| std::net::SocketAddr::new(v4.into(), a.port())),
        std::net::IpAddr::V4(_) => a,
    };
    canonical(a) == canonical(b)
}

#[cfg(test)]
mod peer_tests {
    use super::*;

    /// This process holds the other end of a loopback connection it made;
    /// its parent, pid 0 and pid 1 do not.
    #[test]
    fn the_process_at_the_other_end_is_found_and_no_other() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        // The test's own pid is refused as "ours" (a service never fences
        // itself): check the parsing through the table directly, then the
        // refusals.
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let inode = socket_inode(
            &table,
            accepted.peer_addr().unwrap(),
            accepted.local_addr().unwrap(),
        )
        .expect("the client's socket is in the table");
        let wanted = std::ffi::OsString::from(format!("socket:[{inode}]"));
        let mine = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted));
        assert!(mine, "this process holds the client's socket");
        let parent = std::os::unix::process::parent_id();
        for pid in [0, 1, parent, std::process::id(), u32::MAX] {
            assert!(!pid_holds_peer(&accepted, pid), "pid {pid}");
        }
        drop(client);
    }

    #[test]
    fn proc_net_addresses_are_read() {
        let a = proc_net_address("0100007F:1F90").unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(a, "127.0.0.1:8080".parse().unwrap());
        }
        assert!(proc_net_address("zz:1").is_none());
        assert!(same_endpoint(
            "[::ffff:127.0.0.1]:5".parse().unwrap(),
            "127.0.0.1:5".parse().unwrap()
        ));
    }
}
