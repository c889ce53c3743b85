//! Three hosts on one machine (network namespaces on one switch, the tcp
//! provider, `common/hosts.rs`): a link cut while data flows is detected and
//! reported, nothing is corrupted, and the run completes or fails cleanly.
//!
//! The run (the `recovery` example, ranks as `two-servers.xml` lays them
//! out): host a has the seed (server 0) and client 2, host b server 1 and
//! clients 3 and 4, host c client 5 alone, a client of server 1 on host b.
//! Every client adds 1 to a shared 256 KiB counter in READWRITE scopes, each
//! version crossing the network; once client 5 has done some, host c's
//! cable is cut.
//!
//! Making namespaces takes root; elsewhere the test says it was skipped.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::hosts::Hosts;
use common::{example, text, topology};

/// Host of each rank: a, b, a, b, b, c.
const HOST_OF: [usize; 6] = [0, 1, 0, 1, 1, 2];
const VICTIM: u32 = 5;
const INCREMENTS: u64 = 400;
/// The lease: a process silent this long is lost.
const LEASE_S: u64 = 2;

fn start(hosts: &Hosts, rank: u32, recovery: bool) -> Child {
    let seed = format!("{}:7413", hosts.ip(0));
    let mut cmd = hosts.command(HOST_OF[rank as usize], &example("recovery"));
    cmd.args(["--how", "cut", "--victim", &VICTIM.to_string()])
        .args(["--k", &INCREMENTS.to_string(), "--bytes", "262144"])
        .env("SAT_RANK", rank.to_string())
        .env("SAT_SIZE", "6")
        .env("SAT_SEED", &seed)
        .env("SAT_SECRET", "three-hosts-test-secret-0123456789")
        .env("SAT_PROVIDER", "tcp")
        .env("SAT_TOPOLOGY", topology("two-servers.xml"))
        .env("SAT_LEASE_S", LEASE_S.to_string())
        .env("SAT_BOOTSTRAP_TIMEOUT", "60")
        .env("SAT_LOG", "warn")
        .env_remove("SAT_HOST_SEGMENTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if recovery {
        cmd.env("SAT_RECOVERY", "on");
    } else {
        cmd.env_remove("SAT_RECOVERY");
    }
    cmd.spawn().unwrap()
}

/// The victim's stdout lines as they come, and all of them at its end.
fn follow(child: &mut Child) -> (mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    let all = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, all)
}

/// The number in the victim's last "increments N" line.
fn increments_of(victim: &str) -> u64 {
    victim
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix(&format!("rank {VICTIM} increments ")))
        .find_map(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Starts the run, waits for the victim's 20th increment, cuts host c's
/// cable; returns every rank's output (the victim's stdout in `victim`).
fn cut_while_data_flows(hosts: &Hosts, recovery: bool) -> (Vec<std::process::Output>, String) {
    let mut children: Vec<Child> = (0..6).map(|r| start(hosts, r, recovery)).collect();
    let (lines, all) = follow(&mut children[VICTIM as usize]);
    let progress = format!("rank {VICTIM} increments 20");
    loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line == progress => break,
            Ok(_) => {}
            Err(_) => {
                for c in &mut children {
                    let _ = c.kill();
                }
                panic!("the victim made no progress before the cut");
            }
        }
    }
    hosts.cut(2);
    // A run that neither completes nor fails within this bound hangs: every
    // process is killed then, and the test fails.
    let deadline = Instant::now() + Duration::from_secs(90);
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        if Instant::now() > deadline {
            for c in &mut children {
                let _ = c.kill();
            }
            let _ = all.join();
            panic!("a process still runs 90 s after the cut: a hang");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let victim = all.join().unwrap();
    for (rank, o) in outs.iter().enumerate() {
        eprintln!(
            "--- rank {rank} (host {}): {:?}\n{}{}",
            HOST_OF[rank],
            o.status,
            if rank == VICTIM as usize { &victim } else { "" },
            text(&o.stdout) + &text(&o.stderr)
        );
    }
    (outs, victim)
}

/// With recovery: the seed loses the cut-off client after its lease, the
/// others complete, the counter holds exactly their increments plus what
/// the victim released before the cut, whole; the victim ends with an
/// error that says its seed went silent.
fn with_recovery_the_others_complete(hosts: &Hosts) {
    let (outs, victim) = cut_while_data_flows(hosts, true);
    for r in [0, 1, 2, 3, 4] {
        assert!(outs[r].status.success(), "rank {r} completed");
    }
    // Its server (rank 1) reports the loss, with the reason.
    assert!(
        text(&outs[1].stderr).contains(&format!(
            "client {VICTIM} was lost (it sent nothing for {LEASE_S} s"
        )),
        "the loss is reported"
    );
    let v = &outs[VICTIM as usize];
    assert_eq!(v.status.code(), Some(1), "the victim failed cleanly");
    assert!(
        victim.contains("cut off after") && text(&v.stderr).contains("rank 0"),
        "the victim says why: {victim}{}",
        text(&v.stderr)
    );
    // Its last release may have been lost with the cable, or have left
    // just as its call failed: the home holds its count, or one less, or
    // one more. Every survivor reads the same, whole, version.
    let done = increments_of(&victim);
    assert!(done >= 20);
    let shares: Vec<u64> = [2, 3, 4]
        .iter()
        .map(|&r| {
            let out = text(&outs[r].stdout);
            let line = out
                .lines()
                .find(|l| l.contains("the victim's share"))
                .unwrap_or_else(|| panic!("rank {r} read no counter: {out}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        })
        .collect();
    assert!(shares.windows(2).all(|w| w[0] == w[1]), "{shares:?}");
    assert!(
        (done.saturating_sub(1)..=done + 1).contains(&shares[0]),
        "the victim released {done} increments; the counter holds {} of its",
        shares[0]
    );
}

/// Without recovery the run cannot go on without a process: the cut is
/// found by the watch's keepalive probes (within about SAT_LEASE_S), the
/// seed tells every process why, and every process ends with an error that
/// names the lost one or the seed's silence; none hangs.
fn without_recovery_every_process_fails_cleanly(hosts: &Hosts) {
    let (outs, victim) = cut_while_data_flows(hosts, false);
    for (r, o) in outs.iter().enumerate() {
        assert!(!o.status.success(), "rank {r} cannot have completed");
        let said = text(&o.stderr) + if r == VICTIM as usize { &victim } else { "" };
        let told = if r == VICTIM as usize {
            "the seed (rank 0) is gone".to_owned()
        } else {
            format!("client {VICTIM} was lost")
        };
        assert!(
            said.contains(&told),
            "rank {r} says what ended the run: {said}"
        );
    }
}

#[test]
fn a_link_cut_while_data_flows_is_detected_and_nothing_is_corrupted() {
    let Some(hosts) = Hosts::make(3) else {
        eprintln!("three_hosts: skipped: making network namespaces takes root");
        return;
    };
    with_recovery_the_others_complete(&hosts);
    drop(hosts);
    let hosts = Hosts::make(3).expect("root, as a moment ago");
    without_recovery_every_process_fails_cleanly(&hosts);
}
