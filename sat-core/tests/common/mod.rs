//! Helpers shared by the multi-process tests: where the programs are, free
//! ports, and checks that nothing is left behind.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn satrun() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_satrun"))
}

/// An example program, built by `cargo test` next to the test binaries.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build it with cargo build --examples",
        path.display()
    );
    path
}

pub fn topology(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("topologies")
        .join(name)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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

/// The `/dev/shm` entries created by libfabric's shm provider for `pid`.
pub fn shm_files_of(pid: u32) -> Vec<String> {
    let p = pid.to_string();
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.split(|c: char| !c.is_ascii_digit()).any(|part| part == p))
                .collect()
        })
        .unwrap_or_default()
}

pub fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; look at its state too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Pids named by the debug stream's "Bootstrap SAT ... with pid P" lines.
pub fn bootstrap_pids(stdout: &str) -> Vec<u32> {
    stdout
        .lines()
        .filter(|l| l.contains("Bootstrap SAT"))
        .filter_map(|l| l.split("with pid ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|p| p.parse().ok())
        .collect()
}
