//! Synchronization objects and publish-subscribe over real processes
//! (sections 2.4 and 2.5, Figures 8 and 9), on shm and tcp.

mod common;

use std::process::Command;

use common::*;

fn lines_in_order(stdout: &str, wanted: &[&str]) -> Result<(), String> {
    let mut at = 0;
    for w in wanted {
        match stdout[at..].find(w) {
            Some(i) => at += i + w.len(),
            None => return Err(format!("{w:?} missing or out of order in:\n{stdout}")),
        }
    }
    Ok(())
}

/// Figure 8, with A's wakeup reaching the rendezvous' coordinator before
/// B's rendezvous and the other way round: B always reads what A wrote, C
/// always reads what B wrote, and both orders are seen at the coordinator.
#[test]
fn figure_8_tasks_see_each_others_writes_whichever_comes_first() {
    for provider in ["shm", "tcp"] {
        for (order, first, second) in [
            (
                "wakeup-first",
                "[0] [sync] Wakeup { id: 2, ticket: 0 } from 2",
                "[0] [sync] Sleep { id: 2, seen: 0, losses: 0 } from 3",
            ),
            (
                "sleep-first",
                "[0] [sync] Sleep { id: 2, seen: 0, losses: 0 } from 3",
                "[0] [sync] Wakeup { id: 2, ticket: 0 } from 2",
            ),
        ] {
            let out = run(Command::new(satrun())
                .args(["-n", "5", "--topology"])
                .arg(topology("three-tasks.xml"))
                .args(["--provider", provider, "--"])
                .arg(example("tasks"))
                .args(["--order", order])
                .env("SAT_LOG", "sat_core::server=debug"));
            assert!(
                out.status.success(),
                "{provider} {order}: {}",
                text(&out.stderr)
            );
            let stdout = text(&out.stdout);
            // Each task's own events in program order, and what each saw.
            for task in [
                &[
                    "[2] A: wrote 100",
                    "[2] A: woke rendezvous 2",
                    "[2] A: through the barrier",
                ][..],
                &[
                    "[3] B: read 100",
                    "[3] B: wrote 200",
                    "[3] B: through the barrier",
                ][..],
                &["[4] C: read 200"][..],
            ] {
                lines_in_order(&stdout, task).unwrap_or_else(|e| panic!("{provider} {order}: {e}"));
            }
            let log = stdout.clone() + &text(&out.stderr);
            lines_in_order(&log, &[first, second])
                .unwrap_or_else(|e| panic!("{provider} {order}: {e}"));
        }
    }
}

fn pubsub(provider: &str, extra: &[&str]) -> String {
    let out = run(Command::new(satrun())
        .args(["-n", "5", "--topology"])
        .arg(topology("three-tasks.xml"))
        .args(["--provider", provider, "--"])
        .arg(example("pubsub"))
        .args(extra));
    assert!(
        out.status.success(),
        "{provider} {extra:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Figure 9: the handler runs once, while the subscriber's role waits in a
/// barrier, sees the publisher's value, and after UNSUBSCRIBE is not called
/// again, not even for its own release. Then 10,000 releases in a row: the
/// handler sees versions only grow and always ends with the last one (the
/// documented coalescing rule), and a subscriber that never unsubscribes
/// does not keep the run from ending.
#[test]
fn figure_9_and_a_burst_of_10000_releases() {
    for provider in ["shm", "tcp"] {
        // 10,000 releases with notifications that carry no data; 1,000 with.
        for (extra, data, writes) in [
            (&[][..], "none", "10000"),
            (&["--with-data"][..], "42", "1000"),
        ] {
            let mut args = vec!["--writes", writes];
            args.extend_from_slice(extra);
            let stdout = pubsub(provider, &args);
            let handler =
                format!("[3] handler: run 1, chunk 40 version 1, read 42, data in event: {data}");
            lines_in_order(
                &stdout,
                &[
                    "[3] subscriber: subscribed to chunk 40",
                    &handler,
                    "[3] subscriber: through the barrier after 1 handler run(s)",
                ],
            )
            .unwrap_or_else(|e| panic!("{provider}: {e}"));
            lines_in_order(
                &stdout,
                &["[2] publisher: wrote 42", "[2] publisher: the handler ran"],
            )
            .unwrap_or_else(|e| panic!("{provider}: {e}"));
            assert_eq!(
                stdout.matches("handler: run").count(),
                1,
                "{provider}: {stdout}"
            );
            assert!(
                stdout.contains(&format!("[2] publisher: released {writes} writes")),
                "{provider}"
            );
            assert!(
                stdout.contains(&format!(
                    "[3] subscriber: saw the last value {writes} after "
                )),
                "{provider}: {stdout}"
            );
            assert!(
                stdout.contains(&format!(
                    "[4] watcher: notified of the last version {writes}"
                )),
                "{provider}: {stdout}"
            );
            lines_in_order(
                &stdout,
                &[
                    "[4] watcher: Signal { id: 9 } raised",
                    "[4] watcher: subscribed to chunk 40 from a handler",
                ],
            )
            .unwrap_or_else(|e| panic!("{provider}: {e}"));
            for misuse in [
                "SUBSCRIBE to chunk 41: this process is already subscribed; UNSUBSCRIBE first",
                "chunk 12345 is unknown to this process: MALLOC or LOOKUP it first",
                "UNSUBSCRIBE from chunk 40: this process is not subscribed to it",
                "barrier 50 with a count of 0: give the number of calls to wait for (each calling thread of each process arrives once)",
            ] {
                assert!(
                    stdout.contains(&format!(
                        "[3] subscriber: misuse: invalid use of the SAT API: {misuse}"
                    )),
                    "{provider}: {misuse}"
                );
            }
        }
    }
}

/// Eight processes, 1,000 rounds of the same barrier: nobody is ever let
/// through before every process of the round has arrived.
#[test]
fn a_barrier_of_8_repeated_1000_times_never_opens_early() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "10", "--topology"])
            .arg(topology("eight-clients.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("barrier"))
            .args(["--rounds", "1000"]));
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        for rank in 2..=9 {
            let line = format!("[{rank}] rank {rank}: 1000 rounds of 8, never through early");
            assert!(stdout.contains(&line), "{provider}: missing {line:?}");
        }
    }
}

/// Section 3.2's dataflow: channels are shared buffers, the only
/// synchronization is write scopes and notifications, and every frame
/// reaches the output exactly once, processed right.
#[test]
fn the_dataflow_delivers_every_frame_exactly_once() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "7", "--topology"])
            .arg(topology("dataflow.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("dataflow"))
            .args(["--frames", "150"]));
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains("[6] output: 150 frames, each exactly once and right: true"),
            "{provider}: {stdout}"
        );
        assert!(
            stdout.contains("[2] input: 150 frames given and consumed"),
            "{provider}"
        );
        let processed: u64 = stdout
            .lines()
            .filter_map(|l| l.split("processed ").nth(1))
            .map(|n| n.trim_end_matches(" frames").parse::<u64>().unwrap())
            .sum();
        assert_eq!(processed, 150, "{provider}: {stdout}");
    }
}

/// `run_handlers`: a role that never waits after subscribing still runs its
/// handler, inside `run_handlers`, for every write up to the last; the call
/// finds nothing to run before the writes, and is refused from another
/// thread and from a handler. On one host's segments (the releaser tells
/// the subscriber through shared memory) and through messages.
#[test]
fn a_computing_role_serves_its_subscription_with_run_handlers() {
    for (provider, segments) in [("shm", "on"), ("shm", "off"), ("tcp", "on")] {
        let out = run(Command::new(satrun())
            .args(["-n", "3", "--topology"])
            .arg(topology("figure11.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("serve_while_computing"))
            .env("SAT_HOST_SEGMENTS", segments));
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{provider} segments {segments}: {stdout}{}",
            text(&out.stderr)
        );
        assert!(
            stdout.contains("[2] computer: from another thread: run_handlers: handlers run on"),
            "{provider} segments {segments}: {stdout}"
        );
        let line = stdout
            .lines()
            .find(|l| l.starts_with("[2] computer: 0 handler runs before the writes, "))
            .unwrap_or_else(|| panic!("{provider} segments {segments}: {stdout}"));
        // Every handler run was inside run_handlers, and each was refused
        // its own run_handlers once.
        let ran: u64 = line
            .split(", ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(ran >= 1, "{line}");
        assert!(
            line.ends_with(&format!(
                "the handler saw write 3; refused in a handler {ran} times"
            )),
            "{line}"
        );
    }
}
