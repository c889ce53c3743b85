//! One seeded scheduler for every thread of a simulated run.
//!
//! The API threads of the simulated clients are real OS threads running the
//! real `Client` code, but only one of them runs at a time: each waits for
//! its turn, runs until it would wait (a `Clock::Simulated` pause inside a
//! client call, or a point the workload chooses), and hands the turn back.
//! The scheduler (the thread that calls [`Scheduler::run_thread`]) decides
//! who goes next with the run's seeded generator, so a seed fixes the whole
//! interleaving. Simulated time moves by a fixed quantum per step.

use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::progress::SimulatedTime;

/// The simulated time one scheduling step takes.
pub const STEP: Duration = Duration::from_micros(50);

/// Whose turn it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Scheduler,
    Thread(usize),
}

struct State {
    turn: Turn,
    steps: u64,
    /// Set when the run is being torn down: every thread unwinds at its
    /// next pause.
    aborting: bool,
    /// Threads that die (their client's process died): they unwind at
    /// their next turn.
    killed: Vec<usize>,
    /// Threads that have ended.
    left: Vec<usize>,
}

/// The turn-taking between the scheduler and the simulated threads, and
/// the simulated clock they all read.
pub struct Scheduler {
    state: Mutex<State>,
    turn_changed: Condvar,
    base: Instant,
}

/// The unwinding payload that tears a simulated thread down.
pub struct Teardown;

thread_local! {
    /// The simulated thread this OS thread is, if any.
    static ME: Cell<Option<usize>> = const { Cell::new(None) };
}

impl Scheduler {
    pub fn new() -> Arc<Scheduler> {
        Arc::new(Scheduler {
            state: Mutex::new(State {
                turn: Turn::Scheduler,
                steps: 0,
                aborting: false,
                killed: Vec::new(),
                left: Vec::new(),
            }),
            turn_changed: Condvar::new(),
            base: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The number of steps taken so far.
    pub fn steps(&self) -> u64 {
        self.lock().steps
    }

    /// Counts one step of the run (a server's, or a thread's).
    pub fn tick(&self) {
        self.lock().steps += 1;
    }

    /// Called first by each simulated thread: waits for its first turn.
    pub fn enter(&self, me: usize) {
        ME.with(|m| m.set(Some(me)));
        self.wait_turn(me);
    }

    /// Called last by each simulated thread: hands the turn back for good.
    pub fn leave(&self) {
        let mut st = self.lock();
        if let Some(me) = ME.with(Cell::get) {
            st.left.push(me);
        }
        st.turn = Turn::Scheduler;
        self.turn_changed.notify_all();
    }

    /// Gives thread `id` one turn and waits until it hands it back (at its
    /// next pause, or when it ends). Returns whether it has ended (decided
    /// here, not by the OS thread's state, which lags behind).
    pub fn run_thread(&self, id: usize) -> bool {
        let mut st = self.lock();
        if st.left.contains(&id) {
            return true;
        }
        st.turn = Turn::Thread(id);
        self.turn_changed.notify_all();
        while st.turn != Turn::Scheduler {
            st = self
                .turn_changed
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        st.left.contains(&id)
    }

    /// The calling simulated thread pauses: the scheduler runs something
    /// else and gives the turn back later. Unwinds with [`Teardown`] when
    /// the run is torn down.
    pub fn pause(&self) {
        let Some(me) = ME.with(Cell::get) else {
            // Not a simulated thread (the scheduler itself, stepping a
            // server or a client's background progress): nothing to hand
            // over.
            return;
        };
        {
            let mut st = self.lock();
            st.turn = Turn::Scheduler;
            self.turn_changed.notify_all();
        }
        self.wait_turn(me);
    }

    fn wait_turn(&self, me: usize) {
        let mut st = self.lock();
        loop {
            if st.aborting || (st.killed.contains(&me) && st.turn == Turn::Thread(me)) {
                drop(st);
                std::panic::resume_unwind(Box::new(Teardown));
            }
            if st.turn == Turn::Thread(me) {
                return;
            }
            st = self
                .turn_changed
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Thread `id` dies: it unwinds at once (its turn is given to it for
    /// that), as the process it belongs to would stop.
    pub fn kill(&self, id: usize) {
        self.lock().killed.push(id);
        let ended = self.run_thread(id);
        debug_assert!(ended, "a killed thread ends at once");
    }

    /// Tears the run down: every thread waiting for its turn unwinds.
    pub fn abort_all(&self) {
        let mut st = self.lock();
        st.aborting = true;
        self.turn_changed.notify_all();
    }
}

impl SimulatedTime for Scheduler {
    fn now(&self) -> Instant {
        self.base + Duration::from_micros(STEP.as_micros() as u64 * self.lock().steps)
    }

    fn pass(&self) {
        self.pause();
    }
}
