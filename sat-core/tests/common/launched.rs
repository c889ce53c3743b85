//! satrun under test, watched as it runs: its output collected as it comes,
//! its ranks seen, its end waited for within a bound; and the scratch
//! folders such runs write into. Shared by the tests of satrun's command
//! line and of its environment.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Stream;

/// A run under test must end well before this: a bound for a stuck run,
/// not a timing any test depends on.
pub const RUN_LIMIT: Duration = Duration::from_secs(30);

/// The satrun under test: `SATRUN_UNDER_TEST` (an installed one, or an
/// older build to compare), else the one this crate builds.
pub fn satrun_under_test() -> PathBuf {
    std::env::var_os("SATRUN_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_satrun")))
}

/// A scratch folder, removed at the end of the test.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("satrun-test-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a run ended.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// From the start to the end seen.
    pub elapsed: Duration,
}

impl Output {
    /// The lines of stdout, in order of their text (ranks print in any
    /// order).
    pub fn lines(&self) -> BTreeSet<String> {
        self.stdout.lines().map(str::to_owned).collect()
    }
}

/// A satrun started and not yet waited for; killed if the test fails.
pub struct Live {
    child: Child,
    pub out: Arc<Stream>,
    pub err: Arc<Stream>,
    started: Instant,
}

impl Live {
    /// Starts `cmd`, whose stdout and stderr must be piped.
    pub fn start(mut cmd: Command) -> Live {
        let started = Instant::now();
        let mut child = cmd.spawn().expect("start satrun");
        let (out, err) = (Arc::new(Stream::default()), Arc::new(Stream::default()));
        out.clone().collect(child.stdout.take().unwrap());
        err.clone().collect(child.stderr.take().unwrap());
        Live {
            child,
            out,
            err,
            started,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill with the pid of our own unreaped child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// satrun's children (the ranks) now.
    pub fn children(&self) -> Vec<u32> {
        let pid = self.pid();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Waits until satrun has at least `n` children; returns them.
    pub fn wait_children(&self, n: usize) -> Vec<u32> {
        loop {
            let c = self.children();
            if c.len() >= n {
                return c;
            }
            assert!(
                self.started.elapsed() < RUN_LIMIT,
                "satrun never had {n} children: {}",
                self.err.all()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for satrun to end (at most [`RUN_LIMIT`] from its start).
    pub fn finish(mut self) -> Output {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if self.started.elapsed() > RUN_LIMIT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "satrun did not end within {RUN_LIMIT:?}: {}",
                    self.err.all()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Before the streams close: a process satrun left behind would
        // hold them open.
        let elapsed = self.started.elapsed();
        Output {
            status,
            stdout: self.out.all(),
            stderr: self.err.all(),
            elapsed,
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
