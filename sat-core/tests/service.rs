//! The service mode: `satrun --serve` keeps the servers running while
//! processes attach and detach (`sat_core::service::connect`), over shm and
//! tcp. Every client is a real process (`examples/attach`).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::service::{attach, Service};
use common::{example, satrun, shm_files_of, text};

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A memory figure of process `pid` from /proc/PID/status, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect(field)
}

/// Starts `attach ARGS` for a command that stays attached until its
/// standard input closes; returns it once it printed its first line.
fn start_holder(args: &[&str]) -> (Child, String) {
    start_holder_with_env(args, &[])
}

fn start_holder_with_env(args: &[&str], env: &[(&str, String)]) -> (Child, String) {
    spawn_holder(args, env, Stdio::inherit())
}

/// [`start_holder_with_env`], its standard error going to `stderr`.
fn spawn_holder(args: &[&str], env: &[(&str, String)], stderr: Stdio) -> (Child, String) {
    use std::io::BufRead;
    let mut holder = Command::new(example("attach"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (holder, line)
}

/// Stops (SIGSTOP) the holder whose first line, "... (pid N)", is `line`;
/// returns its pid.
fn stop_holder(line: &str) -> i32 {
    let pid: i32 = line
        .split("pid ")
        .nth(1)
        .and_then(|r| r.trim().trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"));
    // SAFETY: kill(2) with a pid and a signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    pid
}

fn data_written_is_found_by_a_process_that_attaches_later(provider: &str) {
    let service = Service::start(provider, &["--servers", "2", "--slots", "4"]);
    let a = service.address.as_str();
    // 3 MiB: 48 chunks of 64 KiB, homes on both servers.
    let common = ["--chunk", "40", "--bytes", "3145728"];
    let (ok, _, err) = attach(&[&["write", a][..], &common, &["--seed", "7"]].concat());
    assert!(ok, "write failed: {err}\n{}", service.log());
    // The writer has exited; a new process finds every byte.
    let (ok, out, err) = attach(&[&["check", a][..], &common, &["--seed", "7"]].concat());
    assert!(
        ok && out.contains("checked 3145728 bytes"),
        "check failed: {err}"
    );
    // The check is able to fail: another pattern does not match.
    let (ok, _, err) = attach(&[&["check", a][..], &common, &["--seed", "8"]].concat());
    assert!(
        !ok && err.contains("differs"),
        "a wrong pattern passed: {err}"
    );
}

#[test]
fn data_written_is_found_by_a_process_that_attaches_later_shm() {
    data_written_is_found_by_a_process_that_attaches_later("shm");
}

#[test]
fn data_written_is_found_by_a_process_that_attaches_later_tcp() {
    data_written_is_found_by_a_process_that_attaches_later("tcp");
}

/// A process attached when the service is stopped (SIGTERM to `satrun
/// --serve`) is told that the service was stopped, not that its process
/// died or was stopped (which it was told before).
#[test]
fn an_attached_process_hears_that_the_service_was_stopped() {
    let mut service = Service::start("shm", &["--servers", "1", "--slots", "2"]);
    let args = [
        "hold",
        service.address.as_str(),
        "--chunk",
        "9",
        "--bytes",
        "8",
    ];
    let (mut holder, line) = spawn_holder(&args, &[], Stdio::piped());
    assert!(line.contains("attached in slot"), "{line}");
    assert_eq!(service.stop(), 0);
    // Its next call (the detach) fails with the reason.
    drop(holder.stdin.take());
    let out = holder.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(
        !out.status.success() && err.contains("the service was stopped by its operator"),
        "{err}"
    );
}

/// Over tcp the system gives a closed endpoint's port again. A process
/// whose endpoint gets the port of a client that detached from another slot
/// is admitted: that client's endpoint, entered until its slot is taken
/// again, is forgotten. Before, the joiner was refused as that client
/// ("it is the endpoint of rank 2, not one of its own"). The two attaching
/// processes are held to one port (libfabric's FI_TCP_PORT_*_RANGE).
#[test]
fn a_joiner_at_the_port_of_a_client_that_left_is_admitted() {
    let service = Service::start("tcp", &["--servers", "1", "--slots", "4"]);
    let a = service.address.as_str();
    // Slot 1 held while the first process takes slot 2.
    let (mut holder, line) = start_holder(&["hold", a, "--chunk", "9", "--bytes", "8"]);
    assert!(line.contains("slot 1"), "{line}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let cycle = || {
        common::run(
            Command::new(example("attach"))
                .args(["cycle", a, "--chunk", "5", "--times", "1"])
                .env("FI_TCP_PORT_LOW_RANGE", &port)
                .env("FI_TCP_PORT_HIGH_RANGE", &port),
        )
    };
    let first = cycle();
    assert!(first.status.success(), "{}", text(&first.stderr));
    // Slot 1 free again: the next process takes it, at the same port.
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let second = cycle();
    assert!(
        second.status.success() && text(&second.stdout).contains("counter 2"),
        "{}\n{}",
        text(&second.stderr),
        service.log()
    );
}

/// A server keeps the versions of its chunks in its host slots, once: not
/// a second, zero-filled buffer per chunk in its own memory (each home's
/// version 0 shares one buffer of zeros per size). 64 MiB written in 1 MiB
/// chunks grows the server's anonymous memory by far less than 64 MiB
/// (it grew by the whole 64 MiB before).
#[test]
fn a_server_holds_host_slot_versions_once() {
    let service = Service::start("shm", &["--servers", "1", "--slots", "2"]);
    let a = service.address.as_str();
    // satrun writes the address file before it starts the servers: a first
    // small write proves the server runs, and settles what it allocates at
    // start outside the figure.
    let (ok, _, err) = attach(&["write", a, "--chunk", "6", "--bytes", "64"]);
    assert!(ok, "{err}\n{}", service.log());
    let servers = service.servers();
    assert_eq!(servers.len(), 1, "{}", service.log());
    let before = status_kib(servers[0], "RssAnon:");
    let out = common::run(
        Command::new(example("attach"))
            .args([
                "write", a, "--chunk", "7", "--bytes", "67108864", "--seed", "3",
            ])
            .env("SAT_CHUNK_SIZE", "1048576"),
    );
    assert!(out.status.success(), "write failed: {}", text(&out.stderr));
    let after = status_kib(servers[0], "RssAnon:");
    assert!(
        after < before + 32 * 1024,
        "the server's anonymous memory went from {before} to {after} KiB for 64 MiB of versions \
         in host slots"
    );
    let out = common::run(
        Command::new(example("attach"))
            .args([
                "check", a, "--chunk", "7", "--bytes", "67108864", "--seed", "3",
            ])
            .env("SAT_CHUNK_SIZE", "1048576"),
    );
    assert!(
        out.status.success() && text(&out.stdout).contains("checked 67108864 bytes"),
        "check failed: {}",
        text(&out.stderr)
    );
}

/// A client whose server entered it late in its address vector (the second
/// client of a two-server service, on server 1) writes payloads over the
/// eager size: they must reach their homes, which receive them from that
/// client's address, not from whatever entry has its rank's number.
fn large_writes_of_a_late_client_arrive(provider: &str) {
    let service = Service::start(provider, &["--servers", "2", "--slots", "4"]);
    let a = service.address.as_str();
    let (mut holder, line) = start_holder(&["hold", a, "--chunk", "60", "--bytes", "8"]);
    assert!(line.contains("attached in slot 2"), "{line}");
    let common = ["--chunk", "70", "--bytes", "1048576", "--seed", "5"];
    let (ok, _, err) = attach(&[&["write", a][..], &common].concat());
    let (checked, out, check_err) = attach(&[&["check", a][..], &common].concat());
    drop(holder.stdin.take());
    let _ = holder.wait();
    assert!(ok, "{provider}: write failed: {err}\n{}", service.log());
    assert!(
        checked && out.contains("checked 1048576 bytes"),
        "{provider}: check failed: {check_err}\n{}",
        service.log()
    );
}

#[test]
fn large_writes_of_a_late_client_arrive_shm() {
    large_writes_of_a_late_client_arrive("shm");
}

#[test]
fn large_writes_of_a_late_client_arrive_tcp() {
    large_writes_of_a_late_client_arrive("tcp");
}

/// The wake-ups of process `pid` so far: the voluntary context switches of
/// all its threads (each sleep that ends is one).
fn wakeups(pid: u32) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue; // a thread that ended meanwhile
        };
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("voluntary_ctxt_switches");
    }
    total
}

/// A service over tcp has no doorbells: while its server and a client wait
/// with nothing to do, they sleep on their endpoints' wait descriptors until
/// a message comes, where they used to micro-sleep (up to a millisecond at
/// a time: about a thousand wake-ups a second). Counted over 10 s of
/// waiting; then the client detaches, which takes messages both ways, so a
/// long sleep still wakes for them.
#[test]
fn an_idle_tcp_service_and_its_client_sleep_until_a_message_comes() {
    let service = Service::start("tcp", &[]);
    let a = service.address.as_str();
    let (mut holder, line) = start_holder(&["hold", a, "--chunk", "11", "--bytes", "64"]);
    assert!(line.contains("attached in slot 1"), "{line}");
    let servers = service.servers();
    assert_eq!(servers.len(), 1, "one server process");
    let count = |holder: &Child| (wakeups(servers[0]), wakeups(holder.id()));
    let (before, started) = (count(&holder), Instant::now());
    // The interval measured, not a wait for an event.
    std::thread::sleep(Duration::from_secs(10));
    let (after, waited) = (count(&holder), started.elapsed());
    drop(holder.stdin.take());
    let status = holder.wait().unwrap();
    for (who, woke) in [
        ("server", after.0 - before.0),
        ("client", after.1 - before.1),
    ] {
        let per_second = woke as f64 / waited.as_secs_f64();
        assert!(
            per_second < 100.0,
            "the idle {who} woke {woke} times in {waited:?}: {}",
            service.log()
        );
    }
    assert!(
        status.success(),
        "the client did not detach: {}",
        service.log()
    );
}

/// 160 attach/detach cycles in slots dealt over two servers: the counter
/// chunk sees every increment, the servers' memory stays bounded, and no
/// /dev/shm file outlives its process.
fn attach_and_detach_many_times(provider: &str) {
    let mut service = Service::start(provider, &["--servers", "2", "--slots", "3"]);
    let a = service.address.clone();
    // Warm-up: the allocator's and libfabric's pools (over tcp they grow
    // for about 50 connections, then stay).
    let (ok, out, err) = attach(&["cycle", &a, "--chunk", "5", "--times", "60"]);
    assert!(ok && out.contains("counter 60"), "{out} {err}");
    // Only now: satrun writes the address file before it starts the
    // servers; attaches to slots of both servers prove both are running.
    let servers = service.servers();
    assert_eq!(servers.len(), 2, "two server processes");
    let before: u64 = servers.iter().map(|&p| rss_kib(p)).sum();
    let (ok, out, err) = attach(&["cycle", &a, "--chunk", "5", "--times", "100"]);
    assert!(
        ok && out.contains("counter 160"),
        "{out} {err}\n{}",
        service.log()
    );
    let after: u64 = servers.iter().map(|&p| rss_kib(p)).sum();
    // Bounded: a leak of even 40 KiB per attach would show as 4 MiB.
    assert!(
        after < before + 4096,
        "the servers grew from {before} KiB to {after} KiB over 100 attaches"
    );
    let code = service.stop();
    assert_eq!(code, 0, "a service stopped by SIGTERM exits with 0");
    for pid in servers {
        assert!(
            shm_files_of(pid).is_empty(),
            "server {pid} left /dev/shm files"
        );
    }
}

#[test]
fn attach_and_detach_many_times_shm() {
    attach_and_detach_many_times("shm");
}

#[test]
fn attach_and_detach_many_times_tcp() {
    attach_and_detach_many_times("tcp");
}

/// A client killed while attached is forgotten: its slot takes the next
/// process (there is only one slot), and its shm files are removed.
#[test]
fn a_client_that_dies_attached_is_forgotten() {
    let service = Service::start("shm", &["--slots", "1"]);
    let a = service.address.as_str();
    let (mut holder, line) = start_holder(&["hold", a, "--chunk", "9", "--bytes", "64"]);
    assert!(line.contains("attached in slot 1"), "{line}");
    // The only slot is taken: another process is refused, and told why.
    let (ok, _, err) = attach(&["cycle", a, "--chunk", "2"]);
    assert!(
        !ok && err.contains("client slots of the service are taken"),
        "{err}"
    );

    let pid = holder.id();
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The slot frees once the servers have forgotten the dead client; a
    // refused attach is retried until then (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out, err) = attach(&["cycle", a, "--chunk", "2"]);
        if ok {
            assert!(out.contains("counter 1"), "{out}");
            break;
        }
        assert!(
            err.contains("taken") && Instant::now() < deadline,
            "the dead client's slot never came back: {err}\n{}",
            service.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // What it released before dying is still there.
    let (ok, _, err) = attach(&["check", a, "--chunk", "9", "--bytes", "64", "--seed", "1"]);
    assert!(ok, "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !shm_files_of(pid).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the dead client's /dev/shm files stayed: {:?}",
            shm_files_of(pid)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_service_that_is_not_there_gives_a_clear_error() {
    let port = common::free_port();
    let (ok, _, err) = attach(&["cycle", &format!("127.0.0.1:{port}")]);
    assert!(!ok && err.contains("satrun --serve"), "{err}");
}

#[test]
fn service_command_lines_are_checked_before_anything_starts() {
    let out = common::run(Command::new(satrun()).args(["--serve", "--slots", "0"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--slots takes a positive number"));
    let out = common::run(Command::new(satrun()).args(["--serve", "--bogus"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown option '--bogus'"));
    // A topology whose client comes before a server cannot be a service's.
    let file = std::env::temp_dir().join(format!("sat-client-first-{}.xml", std::process::id()));
    std::fs::write(
        &file,
        r#"<?xml version="1.0"?>
<SAT><topologies>
<topology id="0" role="0"><clients><intlist>1</intlist></clients></topology>
<topology id="1" role="1"><servers><intlist>0</intlist></servers></topology>
<topology id="2" role="0"></topology>
</topologies></SAT>"#,
    )
    .unwrap();
    let out = common::run(
        Command::new(satrun())
            .args(["--serve", "--topology"])
            .arg(&file),
    );
    let _ = std::fs::remove_file(&file);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not a service topology"));
}

/// A client killed inside a write scope, or inside a read scope, does not
/// block the chunk: its server forgets it, the home takes the ownership back
/// (or, where the service keeps versions in host slots, frees the locks the
/// client held there), and the next writer gets the last released version.
/// With host slots (the default on one host) and without.
#[test]
fn a_client_killed_inside_a_scope_does_not_block_the_chunk() {
    for (provider, slots) in [("shm", "on"), ("tcp", "on"), ("shm", "off")] {
        let service = Service::start_with_env(
            provider,
            &["--servers", "2", "--slots", "3"],
            &[
                ("SAT_HOST_SEGMENTS", slots),
                ("SAT_LOG", "sat_core::service=debug"),
            ],
        );
        let a = service.address.as_str();
        let (ok, out, err) = attach(&["cycle", a, "--chunk", "4", "--times", "3"]);
        assert!(ok && out.contains("counter 3"), "{out} {err}");
        let expected = if slots == "on" {
            "versions in host segments"
        } else {
            "versions moved by messages"
        };
        assert!(service.log().contains(expected), "{}", service.log());
        let mut counter = 3;
        for hold in ["hold-scope", "hold-read-scope"] {
            let (mut holder, line) = start_holder(&[hold, a, "--chunk", "4"]);
            assert!(line.contains("scope in slot"), "{line}");
            holder.kill().unwrap();
            holder.wait().unwrap();
            // A write it had begun never happened: the next writer sees the
            // last released version, and is not kept out by a dead reader.
            counter += 1;
            let (ok, out, err) = attach(&["cycle", a, "--chunk", "4", "--times", "1"]);
            assert!(
                ok && out.contains(&format!("counter {counter}")),
                "{provider}, host segments {slots}, after {hold}: {out} {err}\n{}",
                service.log()
            );
        }
    }
}

/// Whatever reaches the service's port, it keeps running and serving: frames
/// whose fields claim 2^40 bytes (at every field position a `Hello` could
/// have one), random bytes, an HTTP request, a frame cut short, and 64
/// connections that never speak while a legitimate client attaches.
#[test]
fn hostile_bytes_on_the_service_port_leave_it_serving() {
    let mut service = Service::start("shm", &["--slots", "4"]);
    let a = service.address.clone();
    let port = service.host_port();
    let hostile = common::hostile_bytes();
    let mut before: &[u8] = &[];
    for bytes in &hostile {
        let poked = common::poke(&port, bytes);
        let running = service.running();
        assert!(
            running && poked.is_ok(),
            "the service is gone ({poked:?}) after {before:02x?}: {}",
            service.log()
        );
        before = bytes;
    }
    let silent: Vec<std::net::TcpStream> = (0..64)
        .map(|_| std::net::TcpStream::connect(&port).expect("connect"))
        .collect();
    let (ok, _, err) = attach(&[
        "write", &a, "--chunk", "5", "--bytes", "4096", "--seed", "3",
    ]);
    assert!(
        ok,
        "a client could not attach past hostile bytes: {err}\n{}",
        service.log()
    );
    let (ok, out, err) = attach(&[
        "check", &a, "--chunk", "5", "--bytes", "4096", "--seed", "3",
    ]);
    assert!(
        ok && out.contains("checked 4096 bytes"),
        "check failed: {err}"
    );
    drop(silent);
    // A flood of sockets costs a bounded number of threads: past 256 that
    // have not proved the secret, the desk closes the oldest to make room
    // (and tells it why), so the flood's first socket is closed.
    let mut flood: Vec<std::net::TcpStream> = (0..400)
        .filter_map(|_| std::net::TcpStream::connect(&port).ok())
        .collect();
    assert_eq!(flood.len(), 400, "connections refused by the kernel");
    let told = {
        use std::io::Read;
        let first = &mut flood[0];
        first
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut told = Vec::new();
        match first.read_to_end(&mut told) {
            Ok(_) => {}
            Err(e) => assert_ne!(
                e.kind(),
                std::io::ErrorKind::WouldBlock,
                "the flood's first socket is still open: {}",
                service.log()
            ),
        }
        text(&told)
    };
    assert!(
        told.contains("to make room") || told.contains("no hello within 10 s"),
        "the flood's first socket was not told why it was closed: {told:?}"
    );
    // The flood's sessions end as their sockets close, a moment later.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (ok, out, err) = attach(&[
            "check", &a, "--chunk", "5", "--bytes", "4096", "--seed", "3",
        ]);
        if ok && out.contains("checked 4096 bytes") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "check after the flood failed: {err}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(service.stop(), 0, "{}", service.log());
}

/// A service admits only processes that prove they hold its secret: the
/// address file (mode 0600) holds `sat://SECRET@host:port`, the secret is
/// in no log, and a process with no secret or a wrong one is refused with
/// a clear error before it gets a slot; `host:port` with `SAT_SECRET` works.
#[test]
fn only_processes_that_hold_the_secret_attach() {
    use std::os::unix::fs::PermissionsExt;
    // One slot: a refused process that took it would keep the next out.
    let mut service = Service::start("tcp", &["--slots", "1"]);
    let file = service.address_file();
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the address file is readable by others");
    let a = service.address.clone();
    let port = service.host_port();
    let secret = a
        .strip_prefix("sat://")
        .and_then(|rest| rest.split_once('@'))
        .map(|(secret, _)| secret.to_owned())
        .unwrap_or_else(|| panic!("the address file holds {a:?}, not sat://SECRET@host:port"));
    assert!(secret.len() >= 32, "a short secret");

    let (ok, _, err) = attach(&["cycle", &port, "--chunk", "5", "--times", "1"]);
    assert!(
        !ok && err.contains("requires a secret") && err.contains("sat://SECRET@host:port"),
        "no secret: {err}"
    );
    let wrong = format!("sat://{}@{port}", "0".repeat(64));
    let (ok, _, err) = attach(&["cycle", &wrong, "--chunk", "5", "--times", "1"]);
    assert!(
        !ok && err.contains("is not the service of this connection string")
            && err.contains("check the secret"),
        "a wrong secret: {err}"
    );
    assert!(
        !err.contains(&"0".repeat(64)),
        "the secret in an error: {err}"
    );
    // Raw bytes: a hello, then no proof, a made-up proof, or a join without
    // a proof: each is refused, and no offer ever comes.
    for after_challenge in [
        vec![2u8, 0],                              // Proof(None)
        [&[2u8, 1][..], &[0x5A; 32][..]].concat(), // Proof(Some(made up))
        vec![1u8, 0],                              // Join { address: [] }
    ] {
        let answer = desk_exchange(&port, &after_challenge);
        assert_eq!(
            answer.first(),
            Some(&2),
            "expected Refused, got {answer:02x?}"
        );
    }

    let (ok, out, err) = attach(&["cycle", &a, "--chunk", "5", "--times", "3"]);
    assert!(
        ok && out.contains("counter 3"),
        "with the string: {out} {err}"
    );
    let out = common::run(
        Command::new(example("attach"))
            .args(["cycle", &port, "--chunk", "5", "--times", "2"])
            .env("SAT_SECRET", &secret),
    );
    assert!(
        out.status.success() && text(&out.stdout).contains("counter 5"),
        "host:port with SAT_SECRET: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let log = service.log();
    assert!(
        log.contains("requires a secret"),
        "refusals are logged: {log}"
    );
    assert!(
        !log.contains(&secret),
        "the secret reached the service's output"
    );
    assert_eq!(service.stop(), 0, "{}", service.log());
    assert!(!file.exists(), "the address file outlived the service");
}

/// Says hello to the desk at `port` as a process of this SAT version, reads
/// its challenge, sends `after` (a message body) and returns the desk's
/// answer (a message body).
fn desk_exchange(port: &str, after: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(port).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let read_frame = |s: &mut std::net::TcpStream| {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        s.read_exact(&mut body).unwrap();
        body
    };
    let version = sat_core::wire::WIRE_VERSION;
    assert!(version < 251, "one-byte varint");
    // Hello { wire_version, pid: 1, host: "x", nonce }
    let hello = [&[0u8, version as u8, 1, 1, b'x'][..], &[7u8; 32][..]].concat();
    s.write_all(&common::frame(&hello)).unwrap();
    let challenge = read_frame(&mut s);
    assert_eq!(
        challenge.first(),
        Some(&3),
        "expected Challenge: {challenge:02x?}"
    );
    s.write_all(&common::frame(after)).unwrap();
    let answer = read_frame(&mut s);
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "the desk said more after refusing: {rest:02x?}"
    );
    answer
}

/// A server whose topology gives it 64 MiB of versions keeps no more in
/// memory (`server/spill.rs`): a process writes 1 GiB of chunks, another
/// reads every byte back, the server's peak memory stays far under 1 GiB,
/// its spill files are its own (mode 0700 folder), and they go with it. The
/// highest chunks a program may allocate (below the symbol table's ids),
/// written first, are spilled and read back too.
#[test]
fn a_service_of_64_mib_per_server_holds_and_returns_1_gib() {
    struct Removed(PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = std::env::temp_dir().join(format!("sat-spill-test-{}", std::process::id()));
    let _removed = Removed(dir.clone());
    let spill = dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let topology = dir.join("topology.xml");
    std::fs::write(
        &topology,
        r#"<?xml version="1.0"?>
<SAT><topologies>
  <topology id="0" role="0"><memory capacity="64MiB"/><clients><intlist>1 2</intlist></clients></topology>
  <topology id="1" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="2" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
</topologies></SAT>"#,
    )
    .unwrap();
    let mut service = Service::start_with_env(
        "shm",
        &["--topology", topology.to_str().unwrap()],
        &[("SAT_SPILL_DIR", spill.to_str().unwrap())],
    );
    let a = service.address.clone();
    let gib = (1u64 << 30).to_string();
    // The highest chunks a program may allocate: the symbol table has the
    // ids from 0xffffff0000000000 up.
    let top = (0xffff_ff00_0000_0000u64 - 4).to_string();
    let attach = |command: &str, chunk: &str, bytes: &str| {
        let out = common::run(
            Command::new(example("attach"))
                .args([
                    command, &a, "--chunk", chunk, "--bytes", bytes, "--seed", "11",
                ])
                .env("SAT_CHUNK_SIZE", "1048576"),
        );
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let (ok, _, err) = attach("write", &top, "4194304");
    assert!(ok, "write at the top failed: {err}\n{}", service.log());
    let (ok, _, err) = attach("write", "100", &gib);
    assert!(ok, "write failed: {err}\n{}", service.log());
    let folders: Vec<PathBuf> = std::fs::read_dir(&spill)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(folders.len(), 1, "one spill folder: {folders:?}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&folders[0]).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    let files = std::fs::read_dir(&folders[0]).unwrap().count();
    assert!(files > 900, "{files} versions spilled of 1028");
    for (chunk, bytes) in [("100", gib.as_str()), (top.as_str(), "4194304")] {
        let (ok, out, err) = attach("check", chunk, bytes);
        assert!(
            ok && out.contains(&format!("checked {bytes} bytes")),
            "check of chunk {chunk} failed: {err}\n{}",
            service.log()
        );
    }
    let servers = service.servers();
    assert_eq!(servers.len(), 1);
    let peak = status_kib(servers[0], "VmHWM:");
    assert!(
        peak < 256 * 1024,
        "the server's peak memory is {peak} KiB for 64 MiB of versions"
    );
    assert_eq!(service.stop(), 0);
    assert_eq!(
        std::fs::read_dir(&spill).unwrap().count(),
        0,
        "the spill folder outlived its server"
    );
}

/// A client stopped inside its write scope answers nothing: after the
/// service's lease (`SAT_LEASE_S`) the service drops it and the next writer
/// goes on from the last released version. With host slots (shm, on this
/// host) the stopped process is killed first, since it could wake inside a
/// slot; on the message path it is left alone, and when it runs again its
/// release is refused with the reason.
#[test]
fn a_stopped_client_is_dropped_after_the_lease() {
    for (provider, slots) in [("shm", "on"), ("tcp", "off")] {
        let service = Service::start_with_env(
            provider,
            &["--slots", "4"],
            &[("SAT_LEASE_S", "3"), ("SAT_HOST_SEGMENTS", slots)],
        );
        let a = service.address.as_str();
        let (ok, out, err) = attach(&["cycle", a, "--chunk", "4", "--times", "2"]);
        assert!(ok && out.contains("counter 2"), "{out} {err}");
        let (mut holder, line) = start_holder(&["hold-scope", a, "--chunk", "4"]);
        let pid = stop_holder(&line);
        // Waits for the write scope until the lease has run out.
        let (ok, out, err) = attach(&["cycle", a, "--chunk", "4", "--times", "1"]);
        assert!(
            ok && out.contains("counter 3"),
            "{provider}: {out} {err}\n{}",
            service.log()
        );
        assert!(
            service.log().contains("dropped: it sent nothing for 3 s"),
            "{}",
            service.log()
        );
        if slots == "on" {
            let status = holder.wait().unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(libc::SIGKILL),
                "the stopped holder of a host slot is killed"
            );
        } else {
            // SAFETY: as above.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
            use std::io::{BufRead, Write};
            writeln!(holder.stdin.as_mut().unwrap()).unwrap();
            let mut told = String::new();
            std::io::BufReader::new(holder.stdout.as_mut().unwrap())
                .read_line(&mut told)
                .unwrap();
            assert!(
                told.contains("release refused") && told.contains("was dropped by the service"),
                "{told}"
            );
            holder.wait().unwrap();
            // Its write never happened.
            let (ok, out, err) = attach(&["cycle", a, "--chunk", "4", "--times", "1"]);
            assert!(ok && out.contains("counter 4"), "{out} {err}");
        }
    }
}

/// A process killed while it releases a chain of 64 chunks leaves every one
/// of them at the old version or every one at the new: a service outlives
/// its clients, so a chain's release is bracketed (`server/bracket.rs`).
/// With host slots: the bytes are staged in the slots' next buffers, and
/// the client's server holds the chain's messages until its commit. Each
/// kill follows the writer's word that a release is under way, so it lands
/// inside the release or in the next round's scope, as timing has it; the
/// last writer is killed where a debug build pauses on request, every
/// chunk's release sent and the commit not, which the service's log shows.
/// (Not through messages: there a large payload still on its way from a
/// killed process can be taken for the next process in its slot; see
/// docs/DESIGN.md, "Chain-atomic releases".) The control messages go over
/// tcp: libfabric 1.17's shm provider can leave its own lock held by a
/// process killed as it sends, and the service then spins in
/// `fi_cq_readfrom` for ever (docs/DESIGN.md, "Killed processes and the shm
/// provider").
#[test]
fn a_process_killed_releasing_a_64_chunk_chain_leaves_it_whole() {
    use std::io::BufRead;
    let bytes = (64usize << 18).to_string(); // 64 chunks of 256 KiB
    let chunk_size = ("SAT_CHUNK_SIZE", (1usize << 18).to_string());
    let service = Service::start_with_env("tcp", &["--slots", "4"], &[("SAT_HOST_SEGMENTS", "on")]);
    let a = service.address.as_str();
    let attach = |mode: &str| {
        let mut c = Command::new(example("attach"));
        c.args([mode, a, "--chunk", "300", "--bytes", &bytes])
            .env(chunk_size.0, &chunk_size.1)
            .stdin(Stdio::null());
        c
    };
    let assert_uniform = |after: &str| {
        let out = common::run(&mut attach("uniform"));
        assert!(
            out.status.success() && text(&out.stdout).contains("uniform at round"),
            "{after}: {}\n{}",
            text(&out.stderr),
            service.log()
        );
    };
    for kill in 0..4u32 {
        let mut writer = attach("rounds").stdout(Stdio::piped()).spawn().unwrap();
        let mut lines = std::io::BufReader::new(writer.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        assert_eq!(first, "64 chunks");
        let due = format!("releasing round {}", 2 + kill % 3);
        for line in lines.by_ref() {
            if line.unwrap() == due {
                break;
            }
        }
        writer.kill().unwrap();
        writer.wait().unwrap();
        assert_uniform(&format!("kill {kill}"));
    }
    let mut writer = attach("rounds")
        .env("SAT_TEST_PAUSE_IN_CHAIN_RELEASE", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let paused = std::io::BufReader::new(writer.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "paused inside a chain's release");
    writer.kill().unwrap();
    writer.wait().unwrap();
    assert!(paused, "the writer ended before its pause");
    assert_uniform("the kill inside a release");
    assert!(
        service
            .log()
            .contains("left in the middle of a chain's release"),
        "no kill landed inside a release: {}",
        service.log()
    );
}

/// A client that holds the secret but claims another process's pid in its
/// hello, then goes silent inside a write scope on a host slot: the service
/// drops it after the lease, as any silent client, but kills no process for
/// it (the claimed pid does not hold its connection), and serves on. Before,
/// the desk killed whatever pid was claimed (pid 0: the service itself).
#[test]
fn a_client_that_claims_another_pid_gets_no_process_killed() {
    let service = Service::start_with_env(
        "shm",
        &["--slots", "4"],
        &[("SAT_LEASE_S", "3"), ("SAT_HOST_SEGMENTS", "on")],
    );
    let a = service.address.as_str();
    let mut bystander = Command::new("sleep").arg("600").spawn().unwrap();
    let (mut holder, line) = start_holder_with_env(
        &["hold-scope", a, "--chunk", "4"],
        &[("SAT_TEST_CLAIM_PID", bystander.id().to_string())],
    );
    stop_holder(&line);
    // Waits for the write scope until the lease has run out and the silent
    // client is dropped.
    let (ok, out, err) = attach(&["cycle", a, "--chunk", "4", "--times", "1"]);
    assert!(
        ok && out.contains("counter 1"),
        "{out} {err}\n{}",
        service.log()
    );
    let log = service.log();
    assert!(log.contains("dropped: it sent nothing for 3 s"), "{log}");
    assert!(
        log.contains(&format!(
            "says it is pid {} of this host, which does not hold the connection",
            bystander.id()
        )),
        "{log}"
    );
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "the process whose pid was claimed lives: {log}"
    );
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the stopped client was not fenced either (its pid was not the one it claimed)"
    );
    for child in [&mut holder, &mut bystander] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // The service removes a dead client's shm files only for a pid it could
    // check: the holder's are the test's to remove.
    sat_core::transport::fabric::remove_shm_leftovers(holder.id()).unwrap();
}

/// A service's servers, stopped by SIGTERM as satrun stops them, end as a
/// run's servers do and write their statistics (docs/STATISTICS.md): one
/// file per server, of that server's process. A process that attached
/// writes its own, and every file names the service's run.
#[test]
fn a_stopped_service_s_servers_write_their_statistics() {
    let stats = std::env::temp_dir().join(format!("sat-service-stats-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&stats);
    let stats_dir = stats.to_str().unwrap().to_owned();
    let mut service = Service::start_with_env(
        "shm",
        &["--servers", "2", "--slots", "4"],
        &[("SAT_STATS", &stats_dir)],
    );
    let a = service.address.clone();
    let out = common::run(
        Command::new(example("attach"))
            .args(["write", a.as_str()])
            .args(["--chunk", "40", "--bytes", "1048576", "--seed", "3"])
            .env("SAT_STATS", &stats_dir),
    );
    assert!(
        out.status.success(),
        "write failed: {}\n{}",
        text(&out.stderr),
        service.log()
    );
    let servers = service.servers();
    assert_eq!(service.stop(), 0, "{}", service.log());
    let mut seen = Vec::new();
    let mut clients = 0;
    let mut runs = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&stats).unwrap() {
        let path = entry.unwrap().path();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        runs.insert(v["run_id"].as_str().map(str::to_owned));
        if v["kind"] == "server" {
            let pid = v["pid"].as_u64().unwrap() as u32;
            assert!(servers.contains(&pid), "{path:?}: pid {pid} of {servers:?}");
            seen.push(v["rank"].as_u64().unwrap());
        } else {
            clients += 1;
        }
    }
    seen.sort();
    let _ = std::fs::remove_dir_all(&stats);
    assert_eq!(
        seen,
        [0, 1],
        "one file per server: {seen:?}\n{}",
        service.log()
    );
    assert_eq!(clients, 1, "the attached process's file");
    assert!(
        runs.len() == 1 && runs.first().unwrap().is_some(),
        "every file names the same run: {runs:?}"
    );
}
