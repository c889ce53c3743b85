//! Progress: how a process waits for messages.
//!
//! libfabric's providers progress data only when the application reads its
//! completion queue, so a waiting process must keep polling. Polling flat out
//! burns a core (on a micro-server, energy; on the shared 2-core nodes SAT is
//! tested on, the very core the peer needs). Section 3.1 of the SAT report
//! answers with *micro-sleep*: a loop of `clock_nanosleep` whose sleep grows
//! while nothing arrives and shrinks again on traffic. [`Idle`] implements it
//! with a short spin phase first, because a reply often arrives within a few
//! microseconds and the shortest real sleep costs tens of them.
//!
//! When every process of the run is on one host, a process sleeps on its
//! doorbell instead (`crate::transport::doorbell`): a futex that its peers
//! ring when they send to it, so it wakes when a message comes and an idle
//! process costs nothing; the micro-sleep remains for processes without one
//! (a service's).
//!
//! Configuration (environment, read once per process):
//! - `SAT_PROGRESS=sleep` (default) or `busy` (never sleep: lowest latency,
//!   one core per process);
//! - `SAT_SPIN_US` (default 50): how long to poll flat out after the last
//!   message before sleeping;
//! - `SAT_SLEEP_MIN_NS` (default 1000) and `SAT_SLEEP_MAX_NS` (default
//!   1000000): the bounds of the adaptive micro-sleep (not of a doorbell's).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stats::{self, Activity};
use crate::transport::wakeup::Wakeup;

/// How idle waiting behaves; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdlePolicy {
    pub busy: bool,
    pub spin: Duration,
    pub sleep_min: Duration,
    pub sleep_max: Duration,
}

impl Default for IdlePolicy {
    fn default() -> Self {
        IdlePolicy {
            busy: false,
            spin: Duration::from_micros(50),
            sleep_min: Duration::from_micros(1),
            sleep_max: Duration::from_millis(1),
        }
    }
}

impl IdlePolicy {
    /// The policy from the environment ([`crate::settings`]: parsed once;
    /// a malformed value stops the process at its bootstrap).
    pub fn from_env() -> IdlePolicy {
        let s = crate::settings::get();
        IdlePolicy {
            busy: s.busy,
            spin: Duration::from_micros(s.spin_us),
            sleep_min: Duration::from_nanos(s.sleep_min_ns),
            sleep_max: Duration::from_nanos(s.sleep_max_ns),
        }
    }
}

/// Where a process's time comes from: the machine's clock, or a simulated
/// one that only moves when a scheduler says so.
///
/// Clients and servers read deadlines from their clock and pass idle time
/// through it, never through `Instant::now` or a sleep of their own: that is
/// the seam through which the whole-stack simulator (`crate::simulator`, feature `simulator`)
/// runs the real code deterministically, choosing which thread or server
/// runs next at every point where one would wait.
#[derive(Clone, Default)]
pub enum Clock {
    /// The machine's monotonic clock; idle time is spent as [`IdlePolicy`]
    /// says (spin, yield, micro-sleep).
    #[default]
    Real,
    /// Simulated time: [`SimulatedTime::pass`] hands control back to the
    /// scheduler instead of spinning or sleeping.
    Simulated(Arc<dyn SimulatedTime>),
}

/// Time under a simulator's control.
pub trait SimulatedTime: Send + Sync {
    /// The simulated present.
    fn now(&self) -> Instant;
    /// The calling thread would wait here: let the scheduler run something
    /// else (it returns when the scheduler picks this thread again).
    fn pass(&self);
}

impl Clock {
    pub fn now(&self) -> Instant {
        match self {
            Clock::Real => Instant::now(),
            Clock::Simulated(t) => t.now(),
        }
    }

    pub fn is_simulated(&self) -> bool {
        matches!(self, Clock::Simulated(_))
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Clock::Real => "Clock::Real",
            Clock::Simulated(_) => "Clock::Simulated",
        })
    }
}

/// The adaptive wait of one polling loop: call [`Idle::traffic`] when a poll
/// delivered something and [`Idle::idle`] when it did not.
#[derive(Debug)]
pub struct Idle {
    policy: IdlePolicy,
    clock: Clock,
    last_traffic: Instant,
    sleep: Duration,
    /// Time spent asleep, for the statistics stream's time decomposition.
    pub slept: Duration,
    /// This process's doorbell as last looked at (see [`Idle::idle`]).
    bell_seen: u32,
    /// How long the next sleep on the doorbell may last at most.
    bell_timeout: Duration,
    /// The last sleep on the transport's wait descriptor ended at once, or
    /// the provider was busy ([`Idle::idle_until`]).
    woke_for_nothing: bool,
    /// Such rounds in a row, each followed by a poll that found nothing.
    empty_wakeups: u32,
    /// Idle rounds since the descriptor stopped being trusted.
    rounds_distrusted: u32,
}

/// A sleep on the doorbell ends when it rings; its timeout is a safety net
/// for a message that lands later than its ring (a provider that moves data
/// after the post), so it starts short and grows while nothing comes, and an
/// idle process wakes a few times a second.
const BELL_TIMEOUT_MIN: Duration = Duration::from_millis(1);
const BELL_TIMEOUT_MAX: Duration = Duration::from_millis(250);

/// A sleep on a wait descriptor this short ended at once.
const AT_ONCE: Duration = Duration::from_micros(20);
/// Rounds in a row whose sleep on the wait descriptor ended at once (or that
/// found the provider busy) with nothing to take in, past which the wait
/// stops trusting the descriptor ([`Idle::idle_until`]).
const EMPTY_WAKEUPS: u32 = 8;
/// While the descriptor is not trusted, one round in this many tries it.
const EMPTY_WAKEUPS_PROBE: u32 = 64;

impl Idle {
    pub fn new(policy: IdlePolicy) -> Idle {
        Idle::with_clock(policy, Clock::Real)
    }

    /// An idle loop whose time comes from `clock`.
    pub fn with_clock(policy: IdlePolicy, clock: Clock) -> Idle {
        if !clock.is_simulated() {
            crate::os::set_fine_timer_slack();
        }
        Idle {
            policy,
            last_traffic: clock.now(),
            clock,
            sleep: policy.sleep_min,
            slept: Duration::ZERO,
            bell_seen: crate::transport::doorbell::own().map_or(0, |b| b.rung()),
            bell_timeout: BELL_TIMEOUT_MIN,
            woke_for_nothing: false,
            empty_wakeups: 0,
            rounds_distrusted: 0,
        }
    }

    /// Something arrived: poll flat out again, and start short sleeps over.
    /// Under a simulated clock every round of a wait is a point where the
    /// scheduler may run something else, traffic or not.
    pub fn traffic(&mut self) {
        if let Clock::Simulated(t) = &self.clock {
            t.pass();
        }
        self.last_traffic = self.clock.now();
        self.sleep = self.policy.sleep_min;
        self.bell_timeout = BELL_TIMEOUT_MIN;
        self.woke_for_nothing = false;
    }

    /// Nothing arrived: spin, yield or sleep, as the policy says.
    pub fn idle(&mut self) {
        if let Clock::Simulated(t) = &self.clock {
            t.pass();
            return;
        }
        if self.policy.busy {
            std::hint::spin_loop();
            return;
        }
        if self.last_traffic.elapsed() < self.policy.spin {
            // Let a co-scheduled peer run: on an oversubscribed node it is
            // usually the process we are waiting for. The statistics count
            // the core given away as sleep.
            let _asleep = stats::doing(Activity::Sleep);
            std::thread::yield_now();
            return;
        }
        if let Some(bell) = crate::transport::doorbell::own() {
            // Rung since the last look (which came before the caller's
            // last poll): poll again rather than sleep past the message.
            let now = bell.rung();
            if now != self.bell_seen {
                // A message is on its way (over tcp it may land a little
                // after its ring): look for it through a spin phase again.
                self.bell_seen = now;
                self.last_traffic = self.clock.now();
                self.bell_timeout = BELL_TIMEOUT_MIN;
                return;
            }
            let _asleep = stats::doing(Activity::Sleep);
            let started = Instant::now();
            crate::balance::before_sleep(now);
            bell.wait(now, self.bell_timeout);
            crate::balance::after_sleep();
            self.slept += started.elapsed();
            self.bell_timeout = (self.bell_timeout * 2).min(BELL_TIMEOUT_MAX);
            return;
        }
        let _asleep = stats::doing(Activity::Sleep);
        crate::os::nanosleep(self.sleep);
        self.slept += self.sleep;
        self.sleep = (self.sleep * 2).min(self.policy.sleep_max);
    }

    /// Whether the next idle round sleeps on the transport's wait
    /// descriptor, if it has one (real time, not busy, past the spin, the
    /// descriptor trusted): then the caller asks its transport what to
    /// sleep on ([`crate::transport::Transport::wakeup`]) before it lets
    /// the endpoint go, and passes the answer to [`Idle::idle_until`].
    pub fn sleep_due(&self) -> bool {
        !self.clock.is_simulated()
            && !self.policy.busy
            && self.last_traffic.elapsed() >= self.policy.spin
            && (!self.distrusted()
                || (self.rounds_distrusted + 1).is_multiple_of(EMPTY_WAKEUPS_PROBE))
    }

    fn distrusted(&self) -> bool {
        self.empty_wakeups >= EMPTY_WAKEUPS
    }

    /// As [`Idle::idle`], with what the transport said a sleep may wait
    /// on: its wait descriptor, until a message comes (the timeout, which
    /// grows as the doorbell's does, is a safety net), or nothing yet
    /// (the provider has work pending: poll again).
    ///
    /// A descriptor that wakes the sleeper at once, round after round, with
    /// nothing to take in, would make the wait a busy loop: libfabric
    /// 1.17's tcp provider keeps a connection that closed before sending
    /// its connection request in its epoll set, readable for ever (SAT's own
    /// knock no longer leaves one, `transport::fabric::knock`, but any peer
    /// that dies while it connects does). After `EMPTY_WAKEUPS` such rounds in a row the
    /// wait sleeps the usual way ([`Idle::sleep_due`] says no), and tries
    /// the descriptor again every `EMPTY_WAKEUPS_PROBE` rounds.
    pub fn idle_until(&mut self, wakeup: Wakeup) {
        if self.woke_for_nothing {
            // The last sleep ended at once and the poll after it found
            // nothing (traffic would have cleared the flag).
            self.empty_wakeups += 1;
            self.woke_for_nothing = false;
        }
        if self.distrusted() {
            self.rounds_distrusted = self.rounds_distrusted.wrapping_add(1);
        }
        match wakeup {
            Wakeup::Usual => self.idle(),
            Wakeup::Pending => {
                self.woke_for_nothing = true;
                let _asleep = stats::doing(Activity::Sleep);
                std::thread::yield_now();
            }
            Wakeup::Sleep(sleeper) => {
                let _asleep = stats::doing(Activity::Sleep);
                let started = Instant::now();
                sleeper.sleep(self.bell_timeout);
                let slept = started.elapsed();
                self.slept += slept;
                if slept < AT_ONCE {
                    self.woke_for_nothing = true;
                } else {
                    self.empty_wakeups = 0;
                    self.rounds_distrusted = 0;
                }
                self.bell_timeout = (self.bell_timeout * 2).min(BELL_TIMEOUT_MAX);
            }
        }
    }

    /// As [`Idle::idle`], but a round past the spin sleeps through `sleep`
    /// (given at most a millisecond), on what the caller waits for.
    pub fn idle_on(&mut self, sleep: impl FnOnce(Duration)) {
        if self.clock.is_simulated()
            || self.policy.busy
            || self.last_traffic.elapsed() < self.policy.spin
        {
            return self.idle();
        }
        let _asleep = stats::doing(Activity::Sleep);
        let started = Instant::now();
        sleep(BELL_TIMEOUT_MIN);
        self.slept += started.elapsed();
    }

    /// The sleep the next idle round would take (for tests and statistics).
    pub fn next_sleep(&self) -> Duration {
        self.sleep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_grows_while_idle_and_resets_on_traffic() {
        let policy = IdlePolicy {
            busy: false,
            spin: Duration::ZERO,
            sleep_min: Duration::from_nanos(1_000),
            sleep_max: Duration::from_nanos(16_000),
        };
        let mut idle = Idle::new(policy);
        let mut seen = vec![idle.next_sleep()];
        for _ in 0..6 {
            idle.idle();
            seen.push(idle.next_sleep());
        }
        let us: Vec<u128> = seen.iter().map(|d| d.as_micros()).collect();
        assert_eq!(us, vec![1, 2, 4, 8, 16, 16, 16]);
        assert!(idle.slept >= Duration::from_micros(1 + 2 + 4 + 8 + 16 + 16));
        idle.traffic();
        assert_eq!(idle.next_sleep(), Duration::from_nanos(1_000));
    }

    /// A wait descriptor that stays readable, as libfabric 1.17's tcp
    /// provider leaves one with a closed connection in it: the wait stops
    /// sleeping on it (no busy loop), tries it again now and then, and
    /// trusts it again once a sleep on it lasts.
    #[test]
    fn a_descriptor_that_wakes_for_nothing_is_set_aside_and_tried_again() {
        use crate::transport::wakeup::{tests::pipe, WaitSet};
        use std::os::fd::AsRawFd;
        let (read, write) = pipe();
        // SAFETY: one byte from a live buffer into the pipe: readable now.
        unsafe { libc::write(write.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        let set = Arc::new(WaitSet::new(read.as_raw_fd()).unwrap());
        let mut idle = Idle::new(IdlePolicy {
            busy: false,
            spin: Duration::ZERO,
            sleep_min: Duration::from_nanos(1_000),
            sleep_max: Duration::from_nanos(1_000),
        });
        // Each sleep on the readable pipe ends at once and the poll after
        // it (here: none) finds nothing. A round preempted past the "at
        // once" bound counts as a real sleep and starts the count over, so
        // the test allows many rounds.
        let mut rounds = 0;
        while idle.sleep_due() {
            idle.idle_until(Wakeup::Sleep(set.sleeper()));
            rounds += 1;
            assert!(rounds < 10_000, "the descriptor was never set aside");
        }
        // Set aside: the usual sleep, then a try of the descriptor after
        // at most EMPTY_WAKEUPS_PROBE rounds.
        let mut aside = 0;
        while !idle.sleep_due() {
            idle.idle_until(Wakeup::Usual);
            aside += 1;
            assert!(
                aside <= EMPTY_WAKEUPS_PROBE,
                "the descriptor was never tried again"
            );
        }
        // The byte is taken: the try sleeps its whole timeout (1 ms at
        // least), and the descriptor is trusted again.
        let mut byte = 0u8;
        // SAFETY: reads one byte into a u8.
        assert_eq!(
            unsafe { libc::read(read.as_raw_fd(), (&raw mut byte).cast(), 1) },
            1
        );
        idle.idle_until(Wakeup::Sleep(set.sleeper()));
        assert!(idle.sleep_due(), "a sleep that lasted restores the trust");
        idle.idle_until(Wakeup::Usual);
        assert!(idle.sleep_due());
    }

    #[test]
    fn busy_policy_never_sleeps() {
        let mut idle = Idle::new(IdlePolicy {
            busy: true,
            ..IdlePolicy::default()
        });
        for _ in 0..1000 {
            idle.idle();
        }
        assert_eq!(idle.slept, Duration::ZERO);
    }
}
