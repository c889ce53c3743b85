//! Runs with recovery (`satrun --enable-recovery`, `SAT_RECOVERY=on` under
//! another launcher): real processes over the real shm and tcp providers.
//! A client that dies or stops inside a write scope is lost, the others go
//! on and the chunk keeps its last released version; a lost server, or a
//! lost seed, ends every process with the reason instead of a hang, but for
//! a server of a topology with replicated homes: its backups take its
//! chunks over, its clients move, and the run completes.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

/// The survivors' check in the `recovery` example's output.
fn counted(out: &str, survivors: u32, k: u64, after: u64) -> usize {
    let expected = u64::from(survivors) * k + after;
    let line = format!("counter {expected}, expected {expected}");
    out.lines().filter(|l| l.contains(&line)).count()
}

fn no_leftovers(out: &str) {
    for pid in bootstrap_pids(out) {
        assert!(!alive(pid), "process {pid} outlived the run");
        assert!(
            shm_files_of(pid).is_empty(),
            "pid {pid} left {:?} in /dev/shm",
            shm_files_of(pid)
        );
    }
}

fn satrun_recovering(n: u32, topology_file: Option<&str>, provider: &str) -> Command {
    let mut c = Command::new(satrun());
    c.args(["--enable-recovery", "-n", &n.to_string()]);
    if let Some(t) = topology_file {
        c.arg("--topology").arg(topology(t));
    }
    c.args(["--provider", provider, "--"])
        .arg(example("recovery"))
        .env("SAT_LOG", "warn,sat_core::bootstrap=debug")
        .env_remove("SAT_RECOVERY")
        .env_remove("SAT_LEASE_S")
        .env_remove("SAT_HOST_SEGMENTS");
    c
}

fn killed_victim_under_satrun(provider: &str, topology_file: Option<&str>, slots: bool) {
    let (n, victim) = match topology_file {
        Some(_) => (6, 3),
        None => (4, 2),
    };
    let servers = if topology_file.is_some() { 2 } else { 1 };
    let mut cmd = satrun_recovering(n, topology_file, provider);
    cmd.args([
        "--k",
        "150",
        "--victim",
        &victim.to_string(),
        "--after",
        "4",
    ]);
    if !slots {
        cmd.env("SAT_HOST_SEGMENTS", "off");
    }
    let out = run(&mut cmd);
    let all = text(&out.stdout) + &text(&out.stderr);
    let survivors = n - servers - 1;
    assert_eq!(
        counted(&all, survivors, 150, 4),
        survivors as usize,
        "every survivor read its increments and the victim's released ones: {all}"
    );
    assert!(
        !all.contains("shows the victim's unreleased write"),
        "{all}"
    );
    assert_eq!(
        all.matches("told at its rendezvous").count(),
        survivors as usize,
        "a rendezvous only the victim would wake fails once in every survivor: {all}"
    );
    assert!(all.contains(&format!(
        "satrun: rank {victim} (" // the program's path follows
    )));
    assert!(
        all.contains("was killed by signal SIGKILL (9); the run goes on without it"),
        "{all}"
    );
    // satrun still reports the failure in its status.
    assert_eq!(out.status.code(), Some(1), "{all}");
    if slots {
        assert!(
            all.contains(&format!("client {victim} left holding a lock on chunk 7")),
            "the home freed the victim's lock on the host slot: {all}"
        );
    }
    no_leftovers(&all);
}

#[test]
fn a_client_killed_in_its_write_scope_leaves_the_others_going_shm_host_slots() {
    killed_victim_under_satrun("shm", None, true);
}

#[test]
fn a_client_killed_in_its_write_scope_leaves_the_others_going_shm_messages() {
    killed_victim_under_satrun("shm", None, false);
}

#[test]
fn a_client_killed_in_its_write_scope_leaves_the_others_going_tcp_two_servers() {
    killed_victim_under_satrun("tcp", Some("two-servers.xml"), false);
}

/// Without `--enable-recovery` the same death stops the run, as before.
#[test]
fn without_recovery_a_killed_client_still_stops_the_run() {
    let out = run(Command::new(satrun())
        .args(["-n", "4", "--provider", "shm", "--"])
        .arg(example("recovery"))
        .args(["--k", "100000", "--victim", "2", "--after", "4"])
        .env_remove("SAT_RECOVERY"));
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(!out.status.success());
    assert!(all.contains("stopping the 3 other running ranks"), "{all}");
    assert_eq!(counted(&all, 2, 100000, 4), 0);
}

/// Rank `rank` of the `recovery` example as another launcher (mpirun, srun)
/// starts it: ranks from Open MPI's variables, the seed from SAT_SEED.
fn mpirun_style(port: u16, size: u32, rank: u32, args: &[&str]) -> Command {
    mpirun_style_of("recovery", port, (size, rank), args)
}

/// [`mpirun_style`] for example `program`.
fn mpirun_style_of(program: &str, port: u16, (size, rank): (u32, u32), args: &[&str]) -> Command {
    let mut c = Command::new(example(program));
    c.args(args)
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .env("OMPI_COMM_WORLD_SIZE", size.to_string())
        .env("SAT_SEED", format!("127.0.0.1:{port}"))
        .env("SAT_PROVIDER", "tcp")
        .env("SAT_RECOVERY", "on")
        .env_remove("SAT_LEASE_S")
        .env_remove("SAT_OUTPUT_PREFIXED")
        .env_remove("SAT_RANK")
        .env_remove("SAT_SIZE")
        .env_remove("SAT_HOST_SEGMENTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for every child, at most 120 s each (a hang fails the test and the
/// children are killed).
fn wait_all(children: Vec<Child>) -> Vec<Output> {
    let pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
    let (tx, rx) = mpsc::channel();
    for (i, c) in children.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((i, c.wait_with_output()));
        });
    }
    let mut outs: Vec<Option<Output>> = (0..pids.len()).map(|_| None).collect();
    for _ in 0..pids.len() {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok((i, out)) => outs[i] = Some(out.unwrap()),
            Err(_) => {
                for &p in &pids {
                    // SAFETY: kill(2) with a pid and a signal number.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
                panic!("a process still waits 120 s on: a hang");
            }
        }
    }
    let outs: Vec<Output> = outs.into_iter().map(Option::unwrap).collect();
    for (rank, o) in outs.iter().enumerate() {
        eprintln!(
            "--- rank {rank}: {:?}\n{}{}",
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    outs
}

#[test]
fn a_client_killed_in_its_write_scope_under_another_launcher() {
    let port = free_port();
    let args = ["--k", "150", "--victim", "2", "--after", "4"];
    let children: Vec<Child> = (0..4)
        .map(|r| mpirun_style(port, 4, r, &args).spawn().unwrap())
        .collect();
    let outs = wait_all(children);
    assert_eq!(outs[2].status.code(), None, "the victim died by its signal");
    for r in [0, 1, 3] {
        assert!(outs[r].status.success(), "rank {r} went on and ended well");
    }
    let survivors: String = [1, 3].iter().map(|&r| text(&outs[r].stdout)).collect();
    assert_eq!(counted(&survivors, 2, 150, 4), 2, "{survivors}");
    assert!(text(&outs[0].stderr).contains("client 2 was lost"));
}

/// Reads a child's stdout lines as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

fn line_with(rx: &mpsc::Receiver<String>, what: &str, seen: &mut Vec<String>) -> String {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(90))
            .unwrap_or_else(|_| panic!("no line with {what:?} in 90 s: {seen:?}"));
        seen.push(line.clone());
        if line.contains(what) {
            return line;
        }
    }
}

/// A client stopped inside its write scope answers nothing: after its
/// lease the run declares it lost and goes on. On the message path it is
/// left alone, and when it is continued it is told, and fails.
#[test]
fn a_stopped_client_is_lost_after_its_lease_and_told_when_it_continues() {
    stopped_client_on_the_message_path(None);
}

/// The same in a run with replicated homes, which keeps its versions on the
/// message path whatever `SAT_HOST_SEGMENTS` says: the stopped client is
/// left alone there too (it was killed, as if it could hold a slot's lock).
#[test]
fn a_stopped_client_of_a_run_with_replicated_homes_is_left_alone() {
    stopped_client_on_the_message_path(Some("replicated.xml"));
}

fn stopped_client_on_the_message_path(topology_file: Option<&str>) {
    let (n, victim) = match topology_file {
        Some(_) => (6, "3"),
        None => (4, "2"),
    };
    let mut command = satrun_recovering(n, topology_file, "shm");
    command
        .args([
            "--k", "100", "--victim", victim, "--after", "3", "--how", "stop",
        ])
        .env("SAT_LEASE_S", "3");
    if topology_file.is_none() {
        command.env("SAT_HOST_SEGMENTS", "off");
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut child);
    let mut seen = Vec::new();
    let stopping = line_with(&rx, "inside its write scope", &mut seen);
    let pid: i32 = stopping
        .split("pid ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .expect("the victim's pid");
    // The survivors finish while the victim is stopped.
    line_with(&rx, "expected 203", &mut seen);
    line_with(&rx, "expected 203", &mut seen);
    // SAFETY: kill(2) with a pid and a signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let told = line_with(&rx, "continued, and was told", &mut seen);
    assert!(told.contains("was declared lost by the run"), "{told}");
    assert!(told.contains("sent nothing for 3 s"), "{told}");
    let out = child.wait_with_output().unwrap();
    let all = seen.join("\n") + &text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{all}");
    no_leftovers(&all);
}

/// With host slots, a stopped client could wake inside a slot another
/// process has taken since: the run kills it before freeing its locks.
#[test]
fn a_stopped_client_holding_a_host_slot_is_fenced() {
    let out = run(satrun_recovering(4, None, "shm")
        .args([
            "--k", "100", "--victim", "2", "--after", "3", "--how", "stop",
        ])
        .env("SAT_LEASE_S", "3"));
    let all = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(counted(&all, 2, 100, 3), 2, "{all}");
    assert!(all.contains("sent nothing for 3 s"), "{all}");
    assert!(
        all.contains("rank 2 (") && all.contains("was killed by signal SIGKILL (9)"),
        "{all}"
    );
    no_leftovers(&all);
}

/// Waits that can never end become errors: a server killed mid-run (its
/// chunks' versions are gone) ends every other process with an error, and
/// so does a killed seed, under a launcher that kills nobody.
#[test]
fn a_lost_server_or_seed_ends_every_process_with_an_error() {
    for (victim, reason) in [
        (1u32, "server 1 was lost"),
        (0, "the seed (rank 0) is gone"),
    ] {
        let port = free_port();
        let topology_arg = topology("two-servers.xml");
        let args = [
            "--k",
            "100000000",
            "--victim",
            "99",
            "--topology",
            topology_arg.to_str().unwrap(),
        ];
        let mut children: Vec<Child> = (0..6)
            .map(|r| mpirun_style(port, 6, r, &args).spawn().unwrap())
            .collect();
        // The clients increment once they have started.
        let rx = lines_of(&mut children[2]);
        let mut seen = Vec::new();
        line_with(&rx, "rank 2 started", &mut seen);
        children[victim as usize].kill().unwrap();
        let outs = wait_all(children);
        let mut told = 0;
        for (rank, o) in outs.iter().enumerate() {
            if rank == victim as usize {
                continue;
            }
            let err = text(&o.stderr);
            assert!(!o.status.success(), "rank {rank} cannot have finished");
            // Told by the seed, or finding the peer gone itself first.
            assert!(
                err.contains(reason) || err.contains("unreachable"),
                "rank {rank}: {err}"
            );
            told += usize::from(err.contains(reason));
        }
        assert!(told > 0, "nobody was told {reason:?}");
    }
}

/// The `failover` example's clients' last lines: every version whose
/// RELEASE returned was read back, byte for byte, after the loss.
fn read_back(out: &str) -> usize {
    out.lines()
        .filter(|l| l.contains("200 rounds of 12 chunks, every released version read back"))
        .count()
}

/// Replicated homes (`topologies/replicated.xml`: three servers, one
/// client each, every chunk on its home and the next server), tcp, under
/// another launcher: server 1 is killed with SIGKILL once the clients have
/// written 20 rounds of their 12 chunks each. Its chunks are served by
/// their backups on server 2, its client moves to server 2, and the run
/// completes: every process but the victim ends well, and each client reads
/// back every version whose release returned (`examples/failover.rs`).
#[test]
fn a_server_killed_mid_run_loses_no_released_version_with_replicated_homes() {
    let clients = kill_server_1_of_failover(&[]);
    assert_eq!(read_back(&clients), 3, "{clients}");
}

/// The same with every round's chunks written and released as one chain
/// (and the next client's chain read in one scope): a release under way
/// when server 1 dies (its chunks' homes, and its client's way to them) is
/// applied whole, never in part: no client reads a chain whose chunks hold
/// different rounds (`server/republish.rs`).
#[test]
fn a_chain_released_as_a_server_is_killed_is_never_read_torn() {
    let clients = kill_server_1_of_failover(&["--chains", "--bytes", "65536"]);
    assert!(!clients.contains("torn chain"), "{clients}");
    let whole = "every chain read whole and the last released version read back";
    assert_eq!(clients.matches(whole).count(), 3, "{clients}");
}

/// A token passed round the clients by rendezvous and wakeup, and a barrier,
/// round after round while server 1 is killed: its client's wakeups and
/// arrivals that the server carried are sent again and taken once, so no
/// token is doubled or lost and no barrier round is counted twice
/// (`sync.rs`): every client ends its rounds.
#[test]
fn wakeups_and_barriers_under_way_when_a_server_is_killed_are_taken_once() {
    let clients = kill_server_1_of_failover(&["--sync"]);
    let done = "200 rounds of a token ring and a barrier";
    assert_eq!(clients.matches(done).count(), 3, "{clients}");
}

/// The same with server 1 serving two clients: its loss is one loss,
/// however many clients move, so each survivor's barrier and rendezvous fail
/// once for it at most, and no wakeup fails (sat.h). It was counted once per
/// moved client, and a call made again as sat.h says failed a second time.
#[test]
fn a_lost_server_of_two_clients_fails_each_barrier_and_rendezvous_once() {
    let clients = kill_server_1_of_failover_on("replicated-pairs.xml", 7, &["--sync"]);
    let done: Vec<&str> = (clients.lines())
        .filter(|l| l.contains("200 rounds of a token ring and a barrier"))
        .collect();
    assert_eq!(done.len(), 4, "{clients}");
    // "... (N calls made again after a loss: B barrier, R rendezvous, W wakeup)"
    let count = |line: &str, what: &str| -> u32 {
        let before = line.split(&format!(" {what}")).next().unwrap();
        before.rsplit(' ').next().unwrap().parse().unwrap()
    };
    for line in done {
        assert!(count(line, "barrier,") <= 1, "{line}");
        assert!(count(line, "rendezvous,") <= 1, "{line}");
        assert_eq!(count(line, "wakeup)"), 0, "{line}");
    }
}

/// Runs `examples/failover.rs` (with `extra` arguments) on replicated homes
/// and kills server 1 once rank 3 wrote 20 rounds: every other process must
/// end well. Returns what the clients printed.
fn kill_server_1_of_failover(extra: &[&str]) -> String {
    kill_server_1_of_failover_on("replicated.xml", 6, extra)
}

/// [`kill_server_1_of_failover`] on topology file `file` of `n` processes
/// (servers 0 to 2; ranks 3 and 4 clients, 4 one of server 1).
fn kill_server_1_of_failover_on(file: &str, n: usize, extra: &[&str]) -> String {
    let port = free_port();
    let topology_arg = topology(file);
    let mut args = vec![
        "--rounds",
        "200",
        "--chunks",
        "12",
        "--topology",
        topology_arg.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut children: Vec<Child> = (0..n as u32)
        .map(|r| {
            mpirun_style_of("failover", port, (n as u32, r), &args)
                .spawn()
                .unwrap()
        })
        .collect();
    let rx = lines_of(&mut children[3]);
    let mut seen = Vec::new();
    line_with(&rx, "rank 3 round 20", &mut seen);
    children[1].kill().unwrap();
    let outs = wait_all(children);
    assert_eq!(outs[1].status.code(), None, "the victim died by its signal");
    for r in (0..n).filter(|&r| r != 1) {
        assert!(
            outs[r].status.success(),
            "rank {r} went on and ended well: {}",
            text(&outs[r].stderr)
        );
    }
    let clients: String = seen.join("\n")
        + "\n"
        + &rx.iter().collect::<Vec<_>>().join("\n")
        + &(outs[4..]
            .iter()
            .map(|o| text(&o.stdout))
            .collect::<String>());
    let seed = text(&outs[0].stderr);
    assert!(
        seed.contains("server 1 was lost") && seed.contains("the run goes on without it"),
        "{seed}"
    );
    assert!(
        text(&outs[4].stderr).contains("server 1, this client's, was lost"),
        "the lost server's client moved: {}",
        text(&outs[4].stderr)
    );
    clients
}

/// The same under `satrun --enable-recovery`, losing server 2 (whose
/// stand-in is the seed): satrun reports the death and lets the run go on.
#[test]
fn satrun_lets_a_run_with_replicated_homes_outlive_a_server() {
    let mut child = Command::new(satrun())
        .args(["--enable-recovery", "-n", "6", "--topology"])
        .arg(topology("replicated.xml"))
        .args(["--provider", "tcp", "--"])
        .arg(example("failover"))
        .args(["--rounds", "200", "--chunks", "12"])
        .env_remove("SAT_RECOVERY")
        .env_remove("SAT_LEASE_S")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut child);
    let mut seen = Vec::new();
    line_with(&rx, "rank 3 round 20", &mut seen);
    let victim = child_with_rank(child.id(), 2).expect("rank 2 runs under satrun");
    // SAFETY: kill(2) with a pid and a signal number.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    let out = finish(child, Duration::from_secs(120));
    let stdout = seen.join("\n") + "\n" + &rx.iter().collect::<Vec<_>>().join("\n");
    let stderr = text(&out.stderr);
    assert_eq!(read_back(&stdout), 3, "{stdout}{stderr}");
    assert!(
        stderr.contains("rank 2 (") && stderr.contains("the run goes on without it"),
        "{stderr}"
    );
    assert!(stderr.contains("server 2 was lost"), "{stderr}");
    // satrun still reports the death in its status.
    assert!(!out.status.success());
}

/// The process that `satrun` (pid `satrun`) started as rank `rank`.
fn child_with_rank(satrun: u32, rank: u32) -> Option<u32> {
    let want = format!("SAT_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The parent's pid is the 4th field, after the command in parentheses.
        let ppid: u32 = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let has = environ.split(|&b| b == 0).any(|v| v == want.as_bytes());
        (ppid == satrun && has).then_some(pid)
    })
}
