//! Two hosts on one machine: network namespaces joined by a veth pair, over
//! the tcp provider. A run with its seed on one host and its clients on the
//! other, and a service started with `--listen` on one with clients
//! attaching from the other, both work; the service's address file names an
//! address the other host reaches even when it listens on 0.0.0.0.
//!
//! Making namespaces takes root (`ip netns`, `common/hosts.rs`). As root
//! the test must work; elsewhere it says it was skipped.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::hosts::Hosts;
use common::{example, finish, run, satrun, text};

/// Host a and host b.
const A: usize = 0;
const B: usize = 1;

fn a_run_spans_the_two_hosts(hosts: &Hosts) {
    // Under an external launcher: the seed (rank 0, the server) on host a,
    // both clients on host b, one secret for the three.
    let seed = format!("{}:7411", hosts.ip(A));
    let secret = "two-hosts-test-secret-0123456789";
    let start = |host: usize, rank: u32| {
        hosts
            .command(host, &example("exchange"))
            .args(["--rounds", "20", "--bytes", "40000"])
            .env("SAT_RANK", rank.to_string())
            .env("SAT_SIZE", "3")
            .env("SAT_SEED", &seed)
            .env("SAT_SECRET", secret)
            .env("SAT_PROVIDER", "tcp")
            .env("SAT_BOOTSTRAP_TIMEOUT", "60")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let ranks = [start(A, 0), start(B, 1), start(B, 2)];
    for (rank, child) in ranks.into_iter().enumerate() {
        let out = finish(child, Duration::from_secs(120));
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "rank {rank}: {stdout}{}",
            text(&out.stderr)
        );
        if rank > 0 {
            assert!(
                stdout.contains(&format!("rank {rank} exchanged 20 messages with 1 clients")),
                "rank {rank}: {stdout}"
            );
        }
    }
}

fn a_service_serves_the_other_host(hosts: &Hosts, listen: &str) {
    let dir = std::env::temp_dir().join(format!("sat-two-hosts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("address");
    let _ = std::fs::remove_file(&file);
    let mut service = hosts
        .command(A, &satrun())
        .args([
            "--serve",
            "--servers",
            "2",
            "--provider",
            "tcp",
            "--listen",
            listen,
        ])
        .arg("--address-file")
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let address = loop {
        if let Ok(a) = std::fs::read_to_string(&file) {
            break a.trim().to_owned();
        }
        assert!(
            service.try_wait().unwrap().is_none() && Instant::now() < deadline,
            "the service did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        address.ends_with(&format!("@{}:7412", hosts.ip(A))),
        "{listen}: the address file names no address host b reaches"
    );
    // 3 MiB: chunks homed on both servers, payloads over the eager size.
    let common = ["--chunk", "40", "--bytes", "3145728", "--seed", "9"];
    let attach = |verb: &str| {
        let child = hosts
            .command(B, &example("attach"))
            .arg(verb)
            .arg(&address)
            .args(common)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        finish(child, Duration::from_secs(120))
    };
    let wrote = attach("write");
    let checked = attach("check");
    // SAFETY: kill(2) with a pid and a signal number touches no memory.
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    let stopped = finish(service, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        wrote.status.success(),
        "{listen}: write from host b: {}\nservice: {}",
        text(&wrote.stderr),
        text(&stopped.stderr)
    );
    assert!(
        checked.status.success() && text(&checked.stdout).contains("checked 3145728 bytes"),
        "{listen}: check from host b: {}",
        text(&checked.stderr)
    );
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
}

#[test]
fn runs_and_services_span_two_hosts() {
    let Some(hosts) = Hosts::make(2) else {
        eprintln!("two_hosts: skipped: making network namespaces takes root");
        return;
    };
    // Without the switch, nothing below could pass: host b reaches host
    // a's address only through it.
    let out = run(hosts
        .command(B, "ip".as_ref())
        .args(["route", "get", hosts.ip(A)]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    a_run_spans_the_two_hosts(&hosts);
    a_service_serves_the_other_host(&hosts, &format!("{}:7412", hosts.ip(A)));
    a_service_serves_the_other_host(&hosts, "0.0.0.0:7412");
}
