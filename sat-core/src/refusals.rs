//! Warnings about refused connections, rate-limited: what anyone who reaches
//! a port (the service desk's, a run's seed's) can cause must fill no disk
//! and not slow the process that refuses them.
//!
//! Every refusal is logged at the default level (`SAT_LOG=warn`), but at
//! most [`LOG_LINES`] lines per [`LOG_WINDOW`], then one line that counts
//! the others, at the end of the window.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

const LOG_WINDOW: Duration = Duration::from_secs(10);
const LOG_LINES: u32 = 5;

/// One place's refusals ("desk", "seed"), logged under its name.
pub(crate) struct RefusalLog {
    who: &'static str,
    state: Mutex<LogState>,
    wake: Condvar,
}

#[derive(Default)]
struct LogState {
    /// When the current window began (its first refusal).
    since: Option<Instant>,
    lines: u32,
    /// Refusals of the window not logged one by one.
    more: u64,
}

impl RefusalLog {
    /// A log for `who`, with the thread that counts the refusals of a
    /// window that ends with no other (without it they would be told only
    /// at the next refusal). Made once per place, for the process's life.
    pub(crate) fn start(who: &'static str) -> &'static RefusalLog {
        let log: &'static RefusalLog = Box::leak(Box::new(RefusalLog {
            who,
            state: Mutex::new(LogState::default()),
            wake: Condvar::new(),
        }));
        let _ = std::thread::Builder::new()
            .name(format!("sat-{who}-log"))
            .spawn(move || log.summarize());
        log
    }

    pub(crate) fn log(&self, why: std::fmt::Arguments<'_>) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if s.since.is_none_or(|t| now.duration_since(t) >= LOG_WINDOW) {
            self.flush(&mut s);
            s.since = Some(now);
            s.lines = 0;
        }
        if s.lines < LOG_LINES {
            s.lines += 1;
            drop(s);
            tracing::warn!("{}: {why}", self.who);
        } else {
            s.more += 1;
            if s.more == 1 {
                self.wake.notify_one();
            }
        }
    }

    fn flush(&self, s: &mut LogState) {
        if s.more > 0 {
            tracing::warn!(
                "{}: ... and {} more refused connections in the last {} s",
                self.who,
                s.more,
                LOG_WINDOW.as_secs()
            );
            s.more = 0;
        }
    }

    /// The logging thread: at the end of a window with refusals not logged,
    /// counts them.
    fn summarize(&self) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            while s.more == 0 {
                s = self.wake.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
            let end = s.since.map_or_else(Instant::now, |t| t + LOG_WINDOW);
            let now = Instant::now();
            if now >= end {
                self.flush(&mut s);
                s.since = None;
                continue;
            }
            s = self
                .wake
                .wait_timeout(s, end - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
