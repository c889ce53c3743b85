//! Helpers shared by the multi-process tests: where the programs are, free
//! ports, and checks that nothing is left behind.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

// Running a program to its end, bounded; also the benchmark crate's tests'.
mod process;
pub use process::{run, text};

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
