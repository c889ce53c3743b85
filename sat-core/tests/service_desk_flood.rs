//! A service's desk under a flood of connections that never prove the
//! secret (docs/SECURITY.md, "Hostile input"): idle sockets past the cap,
//! sockets that drip a byte at a time, and the warnings they cause at the
//! default log level. Every client is a real process (`examples/attach`),
//! every flood a real socket.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::service::{attach, Service};
use common::text;

/// The desk's cap of connections that have not proved the secret
/// (`service/desk.rs`, `MAX_UNPROVEN`).
const CAP: usize = 256;

/// A legitimate client writes, another reads it back.
fn write_and_read_back(service: &Service, chunk: &str, seed: &str) {
    let a = service.address.as_str();
    let common = ["--chunk", chunk, "--bytes", "4096", "--seed", seed];
    let (ok, _, err) = attach(&[&["write", a][..], &common].concat());
    assert!(
        ok,
        "a client could not attach and write: {err}\n{}",
        service.log()
    );
    let (ok, out, err) = attach(&[&["check", a][..], &common].concat());
    assert!(
        ok && out.contains("checked 4096 bytes"),
        "a client could not attach and read: {err}\n{}",
        service.log()
    );
}

/// Waits (bounded) until the service closes `s`, and returns what it said
/// before. Panics if `s` is still open after a minute.
fn closed_by_service(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut said = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => said.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                assert!(
                    !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    "a connection is still open a minute on"
                );
                // Reset: a byte sent after the service closed.
                break;
            }
        }
    }
    text(&said)
}

/// More idle connections than the desk keeps: the oldest are closed to
/// make room (and told why), so a client that holds the secret attaches,
/// writes and reads while they are all open.
#[test]
fn idle_connections_past_the_cap_leave_room_for_a_client() {
    let mut service = Service::start_at_default_log_level("shm", &["--slots", "4"]);
    let port = service.host_port();
    let mut idle: Vec<TcpStream> = (0..CAP + 44)
        .map(|_| TcpStream::connect(&port).expect("connect"))
        .collect();
    write_and_read_back(&service, "5", "3");
    // The first idle socket was closed, to make room (or, on a very slow
    // machine, at the hello deadline), and told why.
    let told = closed_by_service(&mut idle[0]);
    assert!(
        told.contains("to make room") || told.contains("no hello within 10 s"),
        "the first idle connection was not told why it was closed: {told:?}"
    );
    drop(idle);
    assert_eq!(service.stop(), 0, "{}", service.log());
}

/// Connections that send a frame's length, then a byte a second, are
/// closed at the hello deadline all the same (counted from the accept,
/// whatever bytes come), and a client attaches meanwhile.
#[test]
fn connections_that_drip_bytes_are_closed_at_the_hello_deadline() {
    let mut service = Service::start_at_default_log_level("shm", &["--slots", "4"]);
    let port = service.host_port();
    let mut drips: Vec<TcpStream> = (0..CAP + 4)
        .map(|_| {
            let mut s = TcpStream::connect(&port).expect("connect");
            s.write_all(&100u32.to_le_bytes()).unwrap();
            s
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let dripper = {
        let mut writers: Vec<TcpStream> = drips.iter().map(|s| s.try_clone().unwrap()).collect();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // Once a socket is closed, its writes fail: drop it.
                writers.retain_mut(|w| w.write_all(&[1]).is_ok());
                // The drip's pace, not a synchronization.
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    write_and_read_back(&service, "6", "4");
    let mut at_deadline = 0;
    for (i, s) in drips.iter_mut().enumerate() {
        let told = closed_by_service(s);
        if told.contains("no hello within 10 s of connecting") {
            at_deadline += 1;
        }
        // (The oldest are closed to make room, "to make room"; a socket
        // whose drip crossed the close is reset before it reads the why.)
        assert!(
            told.is_empty() || told.contains("no hello within") || told.contains("to make room"),
            "drip {i} was told {told:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    dripper.join().unwrap();
    assert!(
        at_deadline > 0,
        "no dripping connection was closed at the hello deadline: {}",
        service.log()
    );
    drop(drips);
    write_and_read_back(&service, "7", "5");
    assert_eq!(service.stop(), 0, "{}", service.log());
}

/// What the log says about refused connections: the total of the lines that
/// name one and of the counts of the summary lines, and the summary lines.
fn refusals_logged(log: &str) -> (u64, usize) {
    let mut total = 0;
    let mut summaries = 0;
    for line in log.lines().filter(|l| l.contains("WARN: desk: ")) {
        if let Some(rest) = line.split(" ... and ").nth(1) {
            let n: u64 = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a summary without a count: {line}"));
            assert!(
                rest.contains("more refused connections in the last 10 s"),
                "{line}"
            );
            total += n;
            summaries += 1;
        } else if line.contains(" refused: ") {
            total += 1;
        }
    }
    (total, summaries)
}

/// At the default level, every refused connection is logged with its
/// reason, a few one by one and the rest counted: a client with a wrong
/// secret, an HTTP request (shown by its size and an escaped prefix, never
/// more) and a burst of frames too long for a hello.
#[test]
fn refused_connections_are_logged_at_the_default_level_with_a_count() {
    let mut service = Service::start_at_default_log_level("shm", &["--slots", "4"]);
    let port = service.host_port();
    let secret = service.secret();
    let wrong = format!("sat://{}@{port}", "0".repeat(64));
    let (ok, _, err) = attach(&["cycle", &wrong, "--chunk", "5", "--times", "1"]);
    assert!(
        !ok && err.contains("is not the service"),
        "a wrong secret: {err}"
    );
    common::poke(
        &port,
        b"GET /secret-path HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .unwrap();
    const BURST: u64 = 40;
    for _ in 0..BURST {
        common::poke(&port, &u32::MAX.to_le_bytes()).unwrap();
    }
    let expected = BURST + 2;
    // Every refusal is counted, one by one or in a summary at the end of
    // its window: wait (bounded) for all of them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let log = loop {
        let log = service.log();
        let (total, _) = refusals_logged(&log);
        assert!(total <= expected, "more refusals than connections: {log}");
        if total == expected {
            break log;
        }
        assert!(
            Instant::now() < deadline,
            "{total} of {expected} refusals logged: {log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let (_, summaries) = refusals_logged(&log);
    assert!(summaries > 0, "a burst logged line by line: {log}");
    let lines = log.lines().filter(|l| l.contains(" refused: ")).count();
    assert!(
        (lines as u64) < expected,
        "{lines} lines for {expected} refusals: {log}"
    );
    assert!(
        log.contains("no proof of the secret") && log.contains("secret is not the service's"),
        "the wrong secret's refusal: {log}"
    );
    assert!(
        log.contains(r#"(it starts with "GET /secret-path")"#),
        "the HTTP request's refusal, by an escaped prefix: {log}"
    );
    assert!(
        !log.contains("HTTP/1.1") && !log.contains(&secret),
        "more of what came than a prefix, or the secret: {log}"
    );
    write_and_read_back(&service, "8", "6");
    assert_eq!(service.stop(), 0, "{}", service.log());
}
