//! Helpers shared by the multi-process tests: where the programs are, free
//! ports, and checks that nothing is left behind.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

// Running a program to its end, bounded; also the benchmark crate's tests'.
mod process;
#[allow(unused_imports)] // each test binary uses some of them
pub use process::{finish, run, text};

// Hosts as network namespaces on one switch.
pub mod hosts;

// satrun under test, watched as it runs.
pub mod launched;

// A service and the processes that attach to it.
pub mod service;

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

/// Sends `bytes` to a SAT port (a service's desk, a run's seed) and reads
/// whatever it answers until it closes or a second passes.
pub fn poke(address: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(address)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
        .unwrap();
    let _ = s.write_all(bytes);
    let mut sink = [0u8; 256];
    while let Ok(n) = s.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
    Ok(())
}

/// `body` framed as the desk and the seed read frames: a 4-byte little-endian length,
/// then the bytes.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// What a hostile or confused peer sends to a SAT port: frames whose fields
/// claim 2^40 bytes (bincode's varint: 0xFD then a u64) after every number
/// of leading small fields a hello could have, random bytes framed and not,
/// an HTTP request, and frame lengths with nothing behind them.
pub fn hostile_bytes() -> Vec<Vec<u8>> {
    let mut hostile: Vec<Vec<u8>> = Vec::new();
    let huge = [&[0xFDu8][..], &(1u64 << 40).to_le_bytes()].concat();
    for lead in 0..6 {
        hostile.push(frame(&[vec![0u8; lead], huge.clone()].concat()));
        hostile.push(frame(&[vec![1u8; lead], huge.clone()].concat()));
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for n in [1usize, 7, 64, 4096] {
        let random: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        hostile.push(random.clone());
        hostile.push(frame(&random));
    }
    hostile.push(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec());
    hostile.push((64u32 << 20).to_le_bytes().to_vec());
    hostile.push(u32::MAX.to_le_bytes().to_vec());
    hostile
}

/// A stream of a running process (its stdout or stderr), collected as it
/// comes: a test waits for a line in it instead of sleeping.
#[derive(Default)]
pub struct Stream {
    text: std::sync::Mutex<(String, bool)>,
    grew: std::sync::Condvar,
}

/// How long [`Stream::wait_for`] waits before it fails the test: a bound
/// for a stuck run, not a timing any test depends on.
const STREAM_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Stream {
    /// Collects `from` into this stream on a thread of its own.
    pub fn collect(self: std::sync::Arc<Self>, mut from: impl std::io::Read + Send + 'static) {
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let n = from.read(&mut buf).unwrap_or(0);
                let mut t = self.text.lock().unwrap();
                if n == 0 {
                    t.1 = true;
                    self.grew.notify_all();
                    return;
                }
                t.0.push_str(&String::from_utf8_lossy(&buf[..n]));
                self.grew.notify_all();
            }
        });
    }

    /// Waits until the text holds `needle` (true) or the stream closed
    /// without it (false).
    pub fn wait_for(&self, needle: &str) -> bool {
        let start = std::time::Instant::now();
        let mut t = self.text.lock().unwrap();
        loop {
            if t.0.contains(needle) {
                return true;
            }
            if t.1 {
                return false;
            }
            assert!(
                start.elapsed() < STREAM_LIMIT,
                "{needle:?} never came: {}",
                t.0
            );
            t = self
                .grew
                .wait_timeout(t, std::time::Duration::from_millis(200))
                .unwrap()
                .0;
        }
    }

    /// The whole text, once the stream is closed.
    pub fn all(&self) -> String {
        self.wait_for("\u{0}never");
        self.text.lock().unwrap().0.clone()
    }
}
