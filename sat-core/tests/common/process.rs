//! Running a test's program to its end, bounded, and reading its output
//! (shared with `sat-bench`'s tests, which include this file by path).

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs a command to its end, at most `RUN_BOUND`: a run that hangs fails
/// the test (and is killed) instead of stalling the whole suite.
pub fn run(cmd: &mut Command) -> Output {
    const RUN_BOUND: std::time::Duration = std::time::Duration::from_secs(180);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the command");
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(RUN_BOUND) {
        Ok(out) => out.expect("wait for the command"),
        Err(_) => {
            // SIGTERM first: satrun then stops its ranks, which remove their
            // shared-memory files; SIGKILL only if it does not end.
            // SAFETY: kill(2) with a pid and a signal number touches no memory.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            if rx.recv_timeout(std::time::Duration::from_secs(15)).is_err() {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!("the run did not finish within {RUN_BOUND:?}: a hang");
        }
    };
    eprintln!(
        "--- stdout\n{}--- stderr\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits for `child` to end within `bound`; kills it past that.
#[allow(dead_code)] // the benchmarks' tests, which include this file, do not use it
pub fn finish(mut child: Child, bound: Duration) -> std::process::Output {
    let deadline = Instant::now() + bound;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "a process did not end within {bound:?}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}
