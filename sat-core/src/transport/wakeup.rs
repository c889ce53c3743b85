//! Sleeping until a message comes, on providers whose completion queue has a
//! wait descriptor (`FI_WAIT_FD`: tcp through `ofi_rxm`; verbs has one too,
//! but is not asked for it until it is tested, `fabric.rs`).
//!
//! On one host a waiting process sleeps on its doorbell (`doorbell.rs`),
//! which its peers ring when they send to it. Across hosts, and in a service,
//! there is nothing shared to ring: past its spin a process used to
//! micro-sleep (section 3.1 of the SAT report), a sleep doubling up to
//! `SAT_SLEEP_MAX_NS` (1 ms), so a request that reached an idle server
//! waited for the end of its sleep, up to a millisecond. A provider with a
//! wait descriptor lets the process sleep in `poll(2)` until the provider has
//! something for it; `fi_trywait` says when that is safe (no completion, and
//! no progress of the provider's own, pending).
//!
//! One endpoint, several threads: a client's role thread and its background
//! progress thread both wait on it. `fi_trywait` runs under the endpoint's
//! lock (the domain is `FI_THREAD_DOMAIN`), the sleep after the lock is let
//! go; in between another thread may take in the very message the sleeper
//! waits for, and the descriptor would then not wake it. So a thread
//! registers as a sleeper under the lock ([`WaitSet::sleeper`]), and a poll
//! that delivers something while there are sleepers nudges them: an eventfd
//! they poll beside the endpoint's descriptor. Registrations, nudges and the
//! clearing of old nudges all happen under the endpoint's lock, so no nudge
//! is lost; the sleep's timeout is a safety net only.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a waiting thread that found nothing may sleep on.
pub enum Wakeup {
    /// Nothing of the endpoint's: sleep the usual way (the doorbell, or the
    /// micro-sleep).
    Usual,
    /// The provider has work under way that moves only while this process
    /// polls: poll again.
    Pending,
    /// Sleep until a message comes ([`Sleeper::sleep`]).
    Sleep(Sleeper),
}

/// An endpoint's wait descriptor, with the nudge that wakes the threads
/// sleeping on it.
pub struct WaitSet {
    /// The completion queue's descriptor (owned by the provider).
    endpoint: RawFd,
    /// An eventfd: readable once nudged, until the next first sleeper
    /// clears it.
    nudge: OwnedFd,
    /// Threads registered to sleep, or asleep.
    sleepers: AtomicU32,
}

impl WaitSet {
    /// A wait set on the completion queue's descriptor `endpoint`.
    pub fn new(endpoint: RawFd) -> std::io::Result<WaitSet> {
        // SAFETY: eventfd takes no pointer; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(WaitSet {
            endpoint,
            // SAFETY: a descriptor just created, owned by nobody else.
            nudge: unsafe { OwnedFd::from_raw_fd(fd) },
            sleepers: AtomicU32::new(0),
        })
    }

    /// Registers the calling thread to sleep (under the endpoint's lock,
    /// after `fi_trywait` said it may). The first sleeper clears the
    /// nudges of earlier rounds, which were all for threads awake since.
    pub fn sleeper(self: &Arc<WaitSet>) -> Sleeper {
        if self.sleepers.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into a u64; the eventfd does not block.
            unsafe { libc::read(self.nudge.as_raw_fd(), (&raw mut count).cast(), 8) };
        }
        Sleeper(Arc::clone(self))
    }

    /// A poll delivered something (under the endpoint's lock): wakes the
    /// threads registered to sleep, whose message it may have been.
    pub fn nudge(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a u64; the eventfd does not block
            // (a counter at its maximum is readable already).
            unsafe { libc::write(self.nudge.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

/// A thread registered to sleep on a [`WaitSet`]; dropping it, slept or
/// not, ends the registration.
pub struct Sleeper(Arc<WaitSet>);

impl Sleeper {
    /// Sleeps (without the endpoint's lock) until the provider has
    /// something, another thread took something in, or `timeout` passes.
    pub fn sleep(self, timeout: Duration) {
        let mut fds = [
            libc::pollfd {
                fd: self.0.endpoint,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.0.nudge.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: two pollfd structs, as the count says. An interrupted or
        // failed poll is a short sleep: the caller polls again either way.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        self.0.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A pipe's read end stands in for the provider's descriptor.
    pub(crate) fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: two ints for the two ends; the result is checked.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: descriptors just created, owned here alone.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    #[test]
    fn a_nudge_for_a_registered_sleeper_is_not_lost_whenever_it_lands() {
        let (read, _write) = pipe();
        let set = Arc::new(WaitSet::new(read.as_raw_fd()).unwrap());
        // Nudged between registration and sleep: the sleep returns at once.
        let sleeper = set.sleeper();
        set.nudge();
        assert!(nudged(&set));
        sleeper.sleep(Duration::from_secs(600));
        // Nudged while asleep, from another thread.
        let sleeper = set.sleeper();
        let nudger = {
            let set = Arc::clone(&set);
            // The sleeper is registered already: the nudge is seen whether
            // it lands before the poll or during it.
            std::thread::spawn(move || set.nudge())
        };
        sleeper.sleep(Duration::from_secs(600));
        nudger.join().unwrap();
        assert!(
            nudged(&set),
            "woken by the nudge, which stays until the next first sleeper"
        );
    }

    /// Whether the nudge is readable now (a sleep would end at once).
    fn nudged(set: &WaitSet) -> bool {
        let mut fd = libc::pollfd {
            fd: set.nudge.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd; a zero timeout only looks.
        unsafe { libc::poll(&mut fd, 1, 0) == 1 }
    }

    #[test]
    fn nudges_wake_only_registered_sleepers_and_old_ones_are_cleared() {
        let (read, _write) = pipe();
        let set = Arc::new(WaitSet::new(read.as_raw_fd()).unwrap());
        // No sleeper: a nudge writes nothing.
        set.nudge();
        assert!(!nudged(&set));
        // A sleeper that never slept was nudged: its nudge stays until the
        // next first sleeper registers, which clears it (it was for a
        // thread awake since), so that sleeper does sleep.
        let first = set.sleeper();
        set.nudge();
        drop(first);
        assert!(nudged(&set));
        let next = set.sleeper();
        assert!(!nudged(&set), "the new first sleeper cleared the old nudge");
        // A second sleeper beside it clears nothing: a nudge for the first
        // wakes both.
        set.nudge();
        let beside = set.sleeper();
        assert!(nudged(&set), "a nudge for a sleeper still registered stays");
        beside.sleep(Duration::from_secs(60));
        next.sleep(Duration::from_secs(60));
        assert_eq!(set.sleepers.load(Ordering::SeqCst), 0, "every sleeper left");
    }

    #[test]
    fn the_descriptor_wakes_a_sleeper() {
        let (read, write) = pipe();
        let set = Arc::new(WaitSet::new(read.as_raw_fd()).unwrap());
        let sleeper = set.sleeper();
        let writer = std::thread::spawn(move || {
            // SAFETY: one byte from a live buffer into the pipe.
            unsafe { libc::write(write.as_raw_fd(), b"x".as_ptr().cast(), 1) };
            write
        });
        // Returns once the byte is in (or at the timeout, which the test's
        // own time limit would catch as a hang).
        sleeper.sleep(Duration::from_secs(600));
        let _write = writer.join().unwrap();
        let mut fd = libc::pollfd {
            fd: read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd; a zero timeout only looks.
        assert_eq!(unsafe { libc::poll(&mut fd, 1, 0) }, 1, "woken by the byte");
    }
}
