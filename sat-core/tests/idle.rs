//! Waiting uses no CPU: a process whose role waits 10 s for a message, and
//! one whose role sleeps 10 s while its client's background progress waits,
//! each use under 1% of a core meanwhile (their own `getrusage`, all
//! threads). No timing is asserted: the ratio of CPU time to the time
//! waited is.

mod common;

use std::process::Command;

use common::*;

/// (waited us, CPU us) from the example's line for `who`.
fn figures(stdout: &str, who: &str) -> (f64, f64) {
    let line = stdout
        .lines()
        .find(|l| l.contains(&format!("{who}: waited")))
        .unwrap_or_else(|| panic!("no line for {who} in:\n{stdout}"));
    let numbers: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 2, "{line}");
    (numbers[0], numbers[1])
}

#[test]
fn a_process_waiting_10_s_uses_under_1_percent_of_a_core() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "3", "--topology"])
            .arg(topology("figure11.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("idle"))
            .args(["--seconds", "10"]));
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        for who in ["waiter", "sleeper"] {
            let (waited, cpu) = figures(&stdout, who);
            assert!(waited >= 10e6, "{provider} {who}: waited {waited} us");
            assert!(
                cpu < 0.01 * waited,
                "{provider} {who}: {cpu} us of CPU over {waited} us waiting"
            );
        }
    }
}
