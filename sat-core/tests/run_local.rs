//! Whole runs of real processes under `satrun`, over the real shm and tcp
//! providers: bootstrap, client messages relayed by the servers, termination,
//! and failure handling.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

fn figure11_run(provider: &str) {
    let out = run(Command::new(satrun())
        .args(["-n", "3", "--topology"])
        .arg(topology("figure11.xml"))
        .args(["--provider", provider, "--"])
        .arg(example("exchange"))
        .args(["--rounds", "200", "--bytes", "300", "--late", "2:300"])
        .env(
            "SAT_LOG",
            "sat_core::server=debug,sat_core::bootstrap=debug",
        ));
    // The program's lines (stdout) and the debug stream (stderr).
    let stdout = text(&out.stdout) + &text(&out.stderr);
    assert!(
        out.status.success(),
        "the run failed: {}",
        text(&out.stderr)
    );
    for rank in [1, 2] {
        assert!(
            stdout.contains(&format!(
                "[{rank}] rank {rank} exchanged 200 messages with 1 clients"
            )),
            "rank {rank} did not finish its exchange"
        );
    }
    // Rank 2 worked on after rank 1 returned, and its server still served it.
    assert!(stdout.contains("[2] rank 2 was still served after 300 ms"));
    // The server stopped only once both of its clients had returned.
    assert!(
        stdout.contains("[0] server 0 shut down after its clients [1, 2] returned"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("Starting code (role 0) over {provider}")));
    for pid in bootstrap_pids(&stdout) {
        assert!(
            shm_files_of(pid).is_empty(),
            "pid {pid} left {:?}",
            shm_files_of(pid)
        );
    }
}

/// `make demo`'s program: two clients share a board and a tally through
/// their server; the reader's subscription fires once per release, reads
/// the line written, and the writer reads the reader's count back.
#[test]
fn the_demo_shares_chunks_and_fires_a_subscription_over_shm_and_tcp() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "3", "--topology"])
            .arg(topology("figure11.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("demo"))
            .args(["--rounds", "4"]));
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{provider}: {stdout}{}",
            text(&out.stderr)
        );
        for round in 1..=4 {
            for want in [
                format!("[1] writer: wrote \"round {round}: hello from rank 1\""),
                format!(
                    "[2] reader: notified of version {round} of chunk 100: \"round {round}: hello from rank 1\" ({round} seen)"
                ),
                format!("[1] writer: the tally says the reader has seen {round} line(s)"),
            ] {
                assert!(stdout.contains(&want), "{provider}: no {want:?} in\n{stdout}");
            }
        }
        assert!(stdout.contains("[2] reader: done"), "{provider}: {stdout}");
    }
}

/// A malformed tuning variable stops every process at its bootstrap with
/// a message naming the variable, the value and what it takes; the run
/// fails instead of running with a default nobody asked for.
#[test]
fn a_malformed_setting_stops_the_run_and_names_it() {
    let out = run(Command::new(satrun())
        .args(["-n", "3", "--provider", "shm", "--"])
        .arg(example("exchange"))
        .args(["--rounds", "3"])
        .env("SAT_CHUNK_SIZE", "64k")
        .env("SAT_HOST_SEGMENTS", "yes"));
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "the run succeeded: {stderr}");
    assert!(
        stderr.contains("SAT_CHUNK_SIZE=\"64k\" is not a size in bytes from 1 to 1073741824")
            && stderr.contains("SAT_HOST_SEGMENTS=\"yes\" is neither 'on' nor 'off'"),
        "{stderr}"
    );
    assert!(
        !text(&out.stdout).contains("exchanged"),
        "a rank ran its role"
    );
}

/// A rank that exits with status 0 without ever joining (a program that
/// does not use SAT in an MPMD line) stops the run at once with a message
/// naming it, instead of leaving the rank that joined waiting out the
/// bootstrap's timeout; both ways round: the rank gone before the other
/// joins, and after.
#[test]
fn a_rank_that_exits_without_joining_stops_the_run_at_once() {
    let scratch = common::launched::Scratch::new("unjoined");
    let sat_rank = example("increment");
    let (gone, log) = (scratch.path("gone"), scratch.path("rank0.log"));
    let cases = [
        (
            "gone before the other joins",
            // Rank 1 leaves its pid, then exits; rank 0 starts the SAT
            // program only once satrun has reaped rank 1.
            format!(
                "until [ -e {g} ]; do sleep 0.01; done; \
                 while kill -0 $(cat {g}) 2>/dev/null; do sleep 0.01; done; exec {p}",
                g = gone.display(),
                p = sat_rank.display()
            ),
            format!("echo $$ > {g}.tmp && mv {g}.tmp {g}", g = gone.display()),
        ),
        (
            "gone after the other joined",
            // Rank 1 exits once rank 0's bootstrap has begun.
            format!("exec {} 2>{}", sat_rank.display(), log.display()),
            format!(
                "until grep -q 'Bootstrap SAT' {} 2>/dev/null; do sleep 0.01; done",
                log.display()
            ),
        ),
    ];
    for (case, rank0, rank1) in cases {
        let _ = std::fs::remove_file(&gone);
        let _ = std::fs::remove_file(&log);
        let out = run(Command::new(satrun())
            .args(["--provider", "shm", "-n", "1", "sh", "-c", &rank0])
            .args([":", "-n", "1", "sh", "-c", &rank1])
            .env("SAT_LOG", "sat_core::bootstrap=debug")
            // Longer than the test's own bound: only satrun's notice can
            // end this run in time.
            .env("SAT_BOOTSTRAP_TIMEOUT", "600"));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{case}: {stderr}");
        assert!(
            stderr.contains(
                "satrun: rank 1 (sh) exited with status 0 before it joined the run, and rank 0 \
                 has joined"
            ),
            "{case}: {stderr}"
        );
    }
}

/// A rank whose SAT process cannot tell satrun it joins (a wrapper that
/// drops the variable, as one that closes inherited descriptors would) is
/// never taken for one that left before joining: the run succeeds, though
/// that rank ends while the seed still runs. And a seed (rank 0) that ends
/// without joining is told to the others at once, under satrun.
#[test]
fn a_rank_that_joins_silently_runs_and_a_missing_seed_is_seen_at_once() {
    let sat_rank = example("increment");
    let out = run(Command::new(satrun())
        .args(["--provider", "shm", "-n", "1"])
        .arg(&sat_rank)
        .args([":", "-n", "2", "env", "-u", "SAT_JOIN_FD"])
        .arg(&sat_rank));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("wrote after the other clients left"),
        "{}",
        text(&out.stdout)
    );

    let out = run(Command::new(satrun())
        .args(["--provider", "shm", "-n", "1", "true", ":", "-n", "1"])
        .arg(&sat_rank)
        .env("SAT_BOOTSTRAP_TIMEOUT", "600"));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the seed (rank 0) at 127.0.0.1:")
            && stderr.contains("refuses connections: satrun opened its socket"),
        "{stderr}"
    );
}

#[test]
fn figure11_clients_exchange_through_the_server_over_shm() {
    figure11_run("shm");
}

#[test]
fn figure11_clients_exchange_through_the_server_over_tcp() {
    figure11_run("tcp");
}

/// Two servers: messages between clients of different servers take two hops.
#[test]
fn clients_of_two_servers_exchange_over_both_providers() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "6", "--topology"])
            .arg(topology("two-servers.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("exchange"))
            .args(["--rounds", "50", "--bytes", "20000"]));
        assert!(out.status.success(), "{provider}: the run failed");
        let stdout = text(&out.stdout);
        let done = stdout
            .lines()
            .filter(|l| l.contains("exchanged 150 messages with 3 clients"))
            .count();
        assert_eq!(done, 4, "{provider}: every client must finish");
    }
}

/// Rank `rank` of `size` of the exchange example as another launcher starts
/// it: ranks from Open MPI's variables, the seed from SAT_SEED on `port`,
/// over tcp, no satrun involved.
fn mpirun_style(port: u16, size: u32, rank: u32, rounds: u32) -> Command {
    let mut c = Command::new(example("exchange"));
    c.args(["--rounds", &rounds.to_string()])
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .env("OMPI_COMM_WORLD_SIZE", size.to_string())
        .env("SAT_SEED", format!("127.0.0.1:{port}"))
        .env("SAT_PROVIDER", "tcp")
        .env_remove("SAT_OUTPUT_PREFIXED")
        .env_remove("SAT_RANK")
        .env_remove("SAT_SIZE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// The same program under another launcher: ranks from Open MPI's variables,
/// the seed from SAT_SEED, no satrun involved.
#[test]
fn runs_under_mpirun_style_variables() {
    let port = free_port();
    let size = 3;
    let children: Vec<_> = (0..size)
        .map(|rank| {
            mpirun_style(port, size, rank, 20)
                .env("SAT_LOG", "sat_core::bootstrap=debug")
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (rank, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "rank {rank}: {}", text(&out.stderr));
    }
    assert!(text(&outputs[1].stdout).contains("rank 1 exchanged 20 messages with 1 clients"));
    assert!(text(&outputs[2].stdout).contains("rank 2 exchanged 20 messages with 1 clients"));
    // Without satrun's prefix, the debug stream (stderr) starts each line
    // with the rank itself, as in the report's Figure 13.
    for (rank, out) in outputs.iter().enumerate() {
        let stdout = text(&out.stderr);
        let boot = format!("{rank} Bootstrap SAT exchange id {rank} np 3 on host ");
        assert!(
            stdout.lines().any(|l| l.starts_with(&boot)),
            "rank {rank}: {stdout}"
        );
        assert!(stdout
            .lines()
            .any(|l| l.starts_with(&format!("{rank} Starting code (role "))));
    }
    assert!(text(&outputs[0].stderr).contains("0 Topology: none given, one server and 2 clients"));
}

/// A client killed in the middle of a run: satrun names it, stops the rest,
/// and nothing is left behind (no process, no /dev/shm file).
#[test]
fn a_killed_client_ends_the_run_cleanly() {
    let mut child = Command::new(satrun())
        .args(["-n", "3", "--topology"])
        .arg(topology("figure11.xml"))
        .args(["--provider", "shm", "--"])
        .arg(example("exchange"))
        .args(["--forever", "--bytes", "64"])
        .env("SAT_LOG", "sat_core::bootstrap=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let tx2 = tx.clone();
    let out_reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx2.send(format!("stderr: {line}"));
        }
        all
    });

    // Wait until both clients run their exchange, then kill rank 2.
    let mut lines = Vec::new();
    let mut victim = None;
    let mut ready = 0;
    while ready < 2 {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the run never started");
        if line.contains(" ready, role ") {
            ready += 1;
            if line.starts_with("[2] ") {
                let pid = line
                    .split("pid ")
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap();
                victim = Some(pid.parse::<i32>().unwrap());
            }
        }
        lines.push(line);
    }
    let victim = victim.expect("rank 2 printed its pid");
    // SAFETY: kill(2) with a pid and a signal number touches no memory.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let killed_at = Instant::now();

    // satrun must notice, stop the others and exit: bounded at 10 s.
    let satrun_pid = child.id() as i32;
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait());
    });
    let status = match done_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(status) => status.unwrap(),
        Err(_) => {
            // SAFETY: as above.
            unsafe { libc::kill(satrun_pid, libc::SIGKILL) };
            panic!("satrun did not exit within 10 s of a client's death");
        }
    };
    assert!(killed_at.elapsed() <= Duration::from_secs(10));
    out_reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    lines.extend(rx.try_iter());
    let stdout = lines.join("\n");
    assert!(!status.success(), "satrun must fail when a rank dies");
    assert!(
        stderr.contains("rank 2"),
        "satrun must name the dead rank: {stderr}"
    );
    let pids = bootstrap_pids(&stdout);
    assert_eq!(pids.len(), 3, "every rank announced its pid: {stdout}");
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived the run");
        assert!(
            shm_files_of(pid).is_empty(),
            "pid {pid} left {:?} in /dev/shm",
            shm_files_of(pid)
        );
    }
}

#[test]
fn verbs_without_an_rdma_device_fails_at_once() {
    let has_rdma = std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some());
    if has_rdma {
        eprintln!("this machine has an RDMA device: nothing to check");
        return;
    }
    let marker = std::env::temp_dir().join(format!("sat-verbs-marker-{}", std::process::id()));
    let out = run(Command::new(satrun())
        .args(["-n", "2", "--provider", "verbs", "--", "sh", "-c"])
        .arg(format!("touch {}", marker.display())));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("RDMA"),
        "the error must say an RDMA device is missing"
    );
    assert!(!marker.exists(), "no process may start");
}

#[test]
fn a_program_run_without_a_launcher_says_how_to_start_it() {
    let out = run(Command::new(example("exchange"))
        .env_remove("SAT_RANK")
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("PMI_RANK")
        .env_remove("PMIX_RANK")
        .env_remove("SLURM_PROCID"));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("satrun"));
}

/// Waits until the seed of a run listens on `port`; returns its address.
fn seed_listening(port: u16) -> String {
    let address = format!("127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(&address).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the seed never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    address
}

/// The seed of a run started under another launcher listens on a port
/// anyone may reach before the run's processes do: hostile bytes there, and
/// 300 connections that never speak (more than the 256 whose hellos it
/// waits for at once: it closes the oldest to make room, where it used to
/// close the new ones, the real ranks' included), leave it gathering the
/// real ones, and the run completes; its warnings about them are
/// rate-limited.
#[test]
fn hostile_bytes_on_the_seed_leave_the_run_unharmed() {
    let port = free_port();
    let size = 3;
    let start = |rank: u32| mpirun_style(port, size, rank, 5).spawn().unwrap();
    let seed = start(0);
    let address = seed_listening(port);
    let mut seed = seed;
    for bytes in common::hostile_bytes() {
        if let Err(e) = common::poke(&address, &bytes) {
            let _ = seed.kill();
            let out = seed.wait_with_output().unwrap();
            panic!(
                "the seed stopped listening ({e}) before {bytes:02x?}: {}",
                text(&out.stderr)
            );
        }
    }
    let silent: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(&address).expect("connect to the seed"))
        .collect();
    let others: Vec<_> = (1..size).map(start).collect();
    let outputs: Vec<_> = std::iter::once(seed)
        .chain(others)
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    drop(silent);
    for (rank, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "rank {rank}: {}", text(&out.stderr));
    }
    assert!(text(&outputs[1].stdout).contains("rank 1 exchanged 5 messages with 1 clients"));
    assert!(text(&outputs[2].stdout).contains("rank 2 exchanged 5 messages with 1 clients"));
    let warned = text(&outputs[0].stderr)
        .lines()
        .filter(|l| l.contains("seed: "))
        .count();
    assert!(
        warned <= 6,
        "{warned} warnings about refused connections: {}",
        text(&outputs[0].stderr)
    );
}

/// With a secret (`SAT_SECRET`, as under mpirun across hosts), only the
/// processes that prove they hold it join: a process that claims rank 1
/// with no proof or a made-up one is told why and ignored, one with another
/// secret fails with a clear error, and the real ranks run to the end.
/// Without the secret a seed off loopback is refused.
#[test]
fn with_a_secret_only_its_holders_join_the_run() {
    use std::io::{Read, Write};
    let secret = "the-secret-of-this-run-0123456789";
    let port = free_port();
    let size = 3;
    let start = |rank: u32, secret: &str| {
        mpirun_style(port, size, rank, 5)
            .env("SAT_SECRET", secret)
            .spawn()
            .unwrap()
    };
    let seed = start(0, secret);
    let address = seed_listening(port);
    // Hello { wire_version, rank: 1, size: 3, pid: 1, host: "x", provider:
    // None, nonce }, then a proof of none, or a made-up one.
    let version = sat_core::wire::WIRE_VERSION as u8;
    let hello = [
        &[0u8, version, 1, size as u8, 1, 1, b'x', 0][..],
        &[9u8; 32][..],
    ]
    .concat();
    for proof in [vec![4u8, 0], [&[4u8, 1][..], &[0xA5; 32][..]].concat()] {
        let mut s = std::net::TcpStream::connect(&address).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        s.write_all(&common::frame(&hello)).unwrap();
        // The challenge (variant 4) comes at once; the refusal (Abort,
        // variant 3) only after the proof, and then the seed hangs up.
        let mut challenge = [0u8; 4 + 1 + 32 + 1 + 32];
        s.read_exact(&mut challenge).unwrap();
        assert_eq!(challenge[4], 4, "no challenge: {challenge:02x?}");
        s.write_all(&common::frame(&proof)).unwrap();
        let mut refusal = Vec::new();
        s.read_to_end(&mut refusal).ok();
        assert_eq!(refusal.get(4), Some(&3), "not refused: {refusal:02x?}");
        assert!(String::from_utf8_lossy(&refusal).contains("secret"));
    }
    let impostor = start(1, "another-secret-of-another-run")
        .wait_with_output()
        .unwrap();
    assert!(!impostor.status.success());
    assert!(
        text(&impostor.stderr).contains("is not this run's seed"),
        "{}",
        text(&impostor.stderr)
    );
    let others: Vec<_> = (1..size).map(|r| start(r, secret)).collect();
    let outputs: Vec<_> = std::iter::once(seed)
        .chain(others)
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (rank, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "rank {rank}: {}", text(&out.stderr));
    }
    assert!(text(&outputs[1].stdout).contains("rank 1 exchanged 5 messages with 1 clients"));
    let log = text(&outputs[0].stderr);
    assert!(!log.contains(secret), "the secret reached a log: {log}");

    // Off loopback, a run needs its secret (192.0.2.1 is TEST-NET-1: the
    // check comes before any connection).
    let out = common::run(
        mpirun_style(port, size, 1, 1)
            .env("SAT_SEED", "192.0.2.1:9")
            .env_remove("SAT_SECRET"),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not on loopback") && text(&out.stderr).contains("SAT_SECRET"),
        "{}",
        text(&out.stderr)
    );
}

/// Replicated homes (`<topologies replication="2">`): three servers, each
/// chunk's versions kept by its home and by the next server, over tcp. The
/// soak's mixed load (a shared counter, chains, subscriptions with data,
/// barriers) runs for 3 s and checks itself: every read whole and never
/// older than one seen before, the counter exactly clients x epochs. Every
/// server keeps replicas of another's homes.
#[test]
fn a_run_with_replicated_homes_keeps_every_version_on_two_servers() {
    let out = run(Command::new(satrun())
        .args(["-n", "6", "--topology"])
        .arg(topology("replicated.xml"))
        .args(["--provider", "tcp", "--"])
        .arg(example("soak"))
        .args(["--seconds", "3"])
        .env("SAT_LOG", "sat_core::server::replicas=debug"));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "the run failed: {stderr}");
    let stdout = text(&out.stdout);
    for rank in 3..6 {
        assert!(
            stdout.contains(&format!("[{rank}] rank {rank}: ")),
            "client {rank} did not finish: {stdout}"
        );
    }
    for (server, home) in [(0, 2), (1, 0), (2, 1)] {
        let kept = stderr
            .lines()
            .filter(|l| {
                l.starts_with(&format!("[{server}]"))
                    && l.contains(&format!("from home {home}"))
                    && l.contains("replica of chunk")
            })
            .count();
        assert!(
            kept > 0,
            "server {server} kept no replica of server {home}'s homes"
        );
    }
}
