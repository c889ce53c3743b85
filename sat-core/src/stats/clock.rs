//! Where a statistics file's clock starts: when the process started, as the
//! kernel recorded it.
//!
//! Why the kernel's record and not a clock SAT reads itself: the earliest SAT
//! could read one is when its library is loaded (a constructor), which is
//! after the `exec`, after the dynamic loader and, in Python, after the
//! interpreter's start and whatever the script did before `import sat`. The
//! kernel notes a process's start when it is created (the `fork`; `satrun`
//! and shells `exec` the program right after), so nothing of its life is
//! left out.
//!
//! Why exact: the kernel keeps that start on the boot clock
//! (`CLOCK_BOOTTIME`) and shows it in `/proc/self/stat` (field 22) in clock
//! ticks, rounded down. The process's age is measured on that same clock,
//! the boot clock's reading now minus the start, and then taken off the
//! monotonic clock (every other time in a file) and the wall clock, both
//! read at the same moment. Not through `btime` in `/proc/stat`, the wall
//! clock at boot: it is in whole seconds, and moves whenever the wall clock
//! is set, so its sum with the start can be a second off. Rounded down to a
//! tick (10 ms at the usual 100 a second), the start is at most one tick
//! early and never late: the file covers the whole life of its process.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A moment on both clocks a file uses: the monotonic one for times inside
/// the file, the wall clock for `start_unix_ns`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    pub(crate) at: Instant,
    pub(crate) unix_ns: u64,
}

impl Origin {
    pub(crate) fn now() -> Origin {
        Origin {
            at: Instant::now(),
            unix_ns: unix_now_ns(),
        }
    }

    /// The moment `ns` nanoseconds after this one, on both clocks.
    pub(crate) fn later_by(self, ns: u64) -> Origin {
        Origin {
            at: self.at + Duration::from_nanos(ns),
            unix_ns: self.unix_ns + ns,
        }
    }
}

fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// When this process started; None where the kernel does not say (no
/// `/proc`), and the caller's clock starts when SAT's does, as before.
pub(crate) fn process_start() -> Option<Origin> {
    static START: OnceLock<Option<Origin>> = OnceLock::new();
    *START.get_or_init(|| {
        let start = read_process_start();
        if start.is_none() {
            tracing::debug!(
                "the process's start is unknown (no /proc/self/stat?): its statistics count \
                 from SAT's start"
            );
        }
        start
    })
}

fn read_process_start() -> Option<Origin> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = start_ticks(&stat)?;
    let per_second = ticks_per_second()?;
    let started_ns = u64::try_from(u128::from(ticks) * 1_000_000_000 / per_second as u128).ok()?;
    let boot_now = boot_clock_ns()?;
    let now = Origin::now();
    let age = boot_now.checked_sub(started_ns)?;
    Some(Origin {
        at: now.at.checked_sub(Duration::from_nanos(age))?,
        unix_ns: now.unix_ns.checked_sub(age)?,
    })
}

/// Field 22 of `/proc/PID/stat`, the start in clock ticks since boot. The
/// command name (field 2) is in parentheses and may hold spaces and
/// parentheses itself: the fields are counted from after the last `)`.
fn start_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (the state) is the first after the name.
    after_name.split_whitespace().nth(22 - 3)?.parse().ok()
}

fn ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf(3) reads a system constant and touches no memory.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0)
}

/// The boot clock now, in nanoseconds.
fn boot_clock_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec, which `ts` is.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    Some(u64::try_from(ts.tv_sec).ok()? * 1_000_000_000 + u64::try_from(ts.tv_nsec).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_is_read_after_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 12345678 300 18446744073709551615";
        assert_eq!(start_ticks(stat), Some(987654));
        assert_eq!(start_ticks("4242 (short) S 1"), None);
    }

    #[test]
    fn this_process_started_before_now_on_both_clocks() {
        let start = process_start().expect("Linux has /proc/self/stat");
        let now = Origin::now();
        assert!(start.at <= now.at && start.unix_ns <= now.unix_ns);
    }
}
