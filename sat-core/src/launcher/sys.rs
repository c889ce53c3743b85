//! The Linux process calls the launcher needs and std does not offer:
//! signal masks and `sigwaitinfo`, `waitid` without reaping, `kill`,
//! `prctl`, and the setup a child runs between `fork` and `exec`.

use std::io;
use std::os::fd::RawFd;

/// The signals satrun handles and forwards to the ranks.
pub(super) const FORWARDED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// A set of blocked signals, waited for synchronously by one thread.
#[derive(Clone, Copy)]
pub(super) struct SignalSet(libc::sigset_t);

// SAFETY: a sigset_t is plain data (a bit mask); copying it between threads is sound.
unsafe impl Send for SignalSet {}

/// Blocks [`FORWARDED`] in the calling thread; threads started afterwards
/// inherit the mask, so the signals reach only [`wait_signal`].
pub(super) fn block_forwarded_signals() -> io::Result<SignalSet> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given; sigaddset and
    // pthread_sigmask only read/modify that initialised set.
    unsafe {
        if libc::sigemptyset(set.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        for sig in FORWARDED {
            if libc::sigaddset(set.as_mut_ptr(), sig) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let set = set.assume_init();
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(SignalSet(set))
    }
}

/// Unblocks [`FORWARDED`] in the calling thread (a pending one is then
/// delivered).
pub(super) fn unblock_forwarded_signals() -> io::Result<()> {
    let set = block_forwarded_signals()?;
    // SAFETY: `set.0` is an initialised signal set.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set.0, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for one signal of `set`; returns it and whether the kernel sent it
/// on behalf of the terminal (Ctrl-C, hangup), in which case every process of
/// the foreground process group, the ranks included, received it too.
pub(super) fn wait_signal(set: &SignalSet) -> (i32, bool) {
    loop {
        let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: `set` is an initialised signal set and `info` a writable siginfo_t.
        let sig = unsafe { libc::sigwaitinfo(&set.0, info.as_mut_ptr()) };
        if sig > 0 {
            // SAFETY: sigwaitinfo succeeded, so it filled `info`.
            let code = unsafe { info.assume_init() }.si_code;
            return (sig, code == libc::SI_KERNEL);
        }
        // EINTR (a signal outside the set, for example SIGSTOP/SIGCONT): wait again.
    }
}

/// Takes one signal of `set` already pending, without waiting: a signal
/// that came while it was blocked, before anything waited for it.
pub(super) fn take_pending(set: &SignalSet) -> Option<(i32, bool)> {
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: `set` is an initialised signal set, `info` a writable
        // siginfo_t and `zero` a valid timespec.
        let sig = unsafe { libc::sigtimedwait(&set.0, info.as_mut_ptr(), &zero) };
        if sig > 0 {
            // SAFETY: sigtimedwait succeeded, so it filled `info`.
            let code = unsafe { info.assume_init() }.si_code;
            return Some((sig, code == libc::SI_KERNEL));
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None; // EAGAIN: none pending
        }
    }
}

/// Makes satrun the reaper of orphaned descendants, so that a rank's own
/// children stay in satrun's process tree and can be found when stopping.
pub(super) fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument; no memory is involved.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// The process id of satrun, for the child's parent check.
pub(super) fn my_pid() -> libc::pid_t {
    std::process::id() as libc::pid_t
}

/// Runs in the child between fork and exec; only async-signal-safe calls.
///
/// - the child dies with SIGKILL when satrun dies (PR_SET_PDEATHSIG), and
///   kills itself if satrun already died before the request took effect;
/// - the signal mask inherited from satrun (which blocks the forwarded
///   signals) is cleared;
/// - `inherited` (the seed and service listeners, the pipe of join
///   notices) lose FD_CLOEXEC so that they survive exec (in this child
///   only: the flag is cleared after the fork).
pub(super) fn child_setup(parent: libc::pid_t, inherited: [Option<RawFd>; 3]) -> io::Result<()> {
    // SAFETY: prctl, getppid, raise, sigemptyset, sigprocmask and fcntl are
    // async-signal-safe; every pointer passed points to a local.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            libc::raise(libc::SIGKILL);
        }
        let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(empty.as_mut_ptr());
        if libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        for fd in inherited.into_iter().flatten() {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Blocks until process `pid` (a child of satrun) has exited, leaving it
/// unreaped: the caller reaps it, so its pid cannot be reused while satrun
/// may still signal it.
pub(super) fn wait_exited_no_reap(pid: u32) -> io::Result<()> {
    loop {
        let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: `info` is a writable siginfo_t; waitid does not keep the pointer.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                info.as_mut_ptr(),
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Sends `sig` to process `pid`; a process already gone is not an error.
pub(super) fn send_signal(pid: u32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes plain integers. `pid` is a child not yet reaped, or
    // a descendant found in /proc just now.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

/// The processes descending from `roots` (not the roots themselves), found
/// through the parent links of /proc.
pub(super) fn descendants(roots: &[u32]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut links: Vec<(u32, u32)> = Vec::new(); // (pid, ppid)
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let (_state, ppid) = (fields.next(), fields.next());
        if let Some(ppid) = ppid.and_then(|p| p.parse::<u32>().ok()) {
            links.push((pid, ppid));
        }
    }
    let mut found: Vec<u32> = Vec::new();
    let mut frontier: Vec<u32> = roots.to_vec();
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &links {
            if ppid == parent && !found.contains(&pid) && !roots.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

/// `SIGKILL`, `SIGSEGV`, ... for a signal number.
pub(super) fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// Reaps every exited process satrun is the parent of without waiting:
/// descendants of the ranks that were orphaned and reparented to satrun.
/// Called once the ranks themselves are reaped.
pub(super) fn reap_orphans() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`, a local.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

/// The address of this host's first interface that is up, not loopback and
/// of the family asked for (`getifaddrs`).
pub(super) fn first_interface(ipv4: bool) -> Option<std::net::IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() && found.is_none() {
        // SAFETY: `at` is an element of the list getifaddrs returned, alive
        // until freeifaddrs; ifa_addr, when set, points to a sockaddr of
        // the family it names.
        unsafe {
            let ifa = &*at;
            let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
            let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
            if up && !loopback && !ifa.ifa_addr.is_null() {
                let family = i32::from((*ifa.ifa_addr).sa_family);
                if ipv4 && family == libc::AF_INET {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    found =
                        Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into());
                } else if !ipv4 && family == libc::AF_INET6 {
                    let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                    // Link-local addresses need a scope: not for other hosts.
                    if ip.segments()[0] & 0xffc0 != 0xfe80 {
                        found = Some(ip.into());
                    }
                }
            }
            at = ifa.ifa_next;
        }
    }
    // SAFETY: list came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// This process's effective user id.
pub(super) fn my_uid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Takes an exclusive advisory lock (`flock`) on `file` without waiting;
/// `WouldBlock` when another open file holds one. The lock lasts until the
/// file is closed (every descriptor of its open file description).
pub(super) fn try_lock(file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock takes a descriptor `file` owns and plain flags.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
