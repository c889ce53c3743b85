//! The hand-off benchmark in a reduced run (a 1 MiB chain of four 256 KiB
//! chunks instead of 64 MiB): it must finish, print every figure, check the
//! data it hands over, and measure per operation exactly the messages
//! home-based MESI needs, sent by the clients and by the server. The counts
//! are taken in the benchmark's processes; the expected figures below come
//! from the protocol's rule, so a message added to any path fails this
//! test. No timing is checked.

#[path = "../../sat-core/tests/common/process.rs"]
mod common;

use std::process::Command;

use common::*;

const SMALL_ITERS: u64 = 20;
const LARGE_ITERS: u64 = 2;
const CHUNKS: u64 = 4;

#[test]
fn the_handoff_bench_measures_the_messages_of_every_operation() {
    // A hand-off (64 B): the write with the reader as its one sharer
    // (clients: request, acknowledgement; server: invalidation, grant), its
    // release (client), the reader's miss (client: request; server: grant).
    // The 1 MiB chain costs that per chunk: PUT is the write and its
    // release, GET the read misses, the large hand-off both. These are the
    // message path's counts: on one host the homes keep their versions in
    // host segments unless told not to.
    check_messages(
        "off",
        &[],
        [
            ("handoff", "64", 2 * SMALL_ITERS, 2 + 1 + 1, 2 + 1),
            (
                "put-release",
                "1048576",
                LARGE_ITERS,
                (2 + 1) * CHUNKS,
                2 * CHUNKS,
            ),
            ("put", "1048576", LARGE_ITERS, (2 + 1) * CHUNKS, 2 * CHUNKS),
            ("get", "1048576", LARGE_ITERS, CHUNKS, CHUNKS),
            ("handoff", "1048576", LARGE_ITERS, 4 * CHUNKS, 3 * CHUNKS),
        ],
    );
}

/// On one host the versions are in host segments: no operation of the
/// bench sends a message (nobody subscribes, so releases tell the home
/// nothing), and the data handed over is still checked. The scopes timed
/// alone (`--scope-iters`) are printed for both kinds, and send nothing
/// either.
#[test]
fn on_one_host_the_handoff_bench_sends_no_message() {
    let stdout = check_messages(
        "on",
        &["--scope-iters", "1000"],
        [
            ("handoff", "64", 2 * SMALL_ITERS, 0, 0),
            ("put-release", "1048576", LARGE_ITERS, 0, 0),
            ("put", "1048576", LARGE_ITERS, 0, 0),
            ("get", "1048576", LARGE_ITERS, 0, 0),
            ("handoff", "1048576", LARGE_ITERS, 0, 0),
        ],
    );
    for kind in ["read", "readwrite"] {
        let ns: f64 = stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() == 4 && f[..3] == ["SCOPE", "shm", kind])
            .unwrap_or_else(|| panic!("no SCOPE line for a {kind} scope in:\n{stdout}"))[3]
            .parse()
            .unwrap_or_else(|_| panic!("the {kind} scope's time is not a number in:\n{stdout}"));
        assert!(
            ns.is_finite() && ns > 0.0,
            "a {kind} scope alone took {ns} ns"
        );
    }
}

/// Runs the bench with `SAT_HOST_SEGMENTS=segments` and checks, per
/// operation (key, size, operations, client sends, server sends), the
/// messages it measured; `extra` goes to the bench's command line. Returns
/// what it printed.
fn check_messages(
    segments: &str,
    extra: &[&str],
    expected: [(&str, &str, u64, u64, u64); 5],
) -> String {
    let out = run(Command::new(env!("CARGO_BIN_EXE_sat-handoff-bench"))
        .env("SAT_HOST_SEGMENTS", segments)
        .args([
            "--providers",
            "shm",
            "--small-iters",
            &SMALL_ITERS.to_string(),
            "--large-iters",
            &LARGE_ITERS.to_string(),
            "--large",
            "1048576",
            "--chunk-size",
            "262144",
            "--results",
        ])
        .args(extra));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .collect();
    // RESULT provider key size median min max sends min_sends protocol
    // MESSAGES provider key size client/op server/op client server ops
    let find = |marker: &str, len: usize, key: &str, size: &str| -> &Vec<&str> {
        lines
            .iter()
            .find(|f| {
                f.len() == len && f[0] == marker && f[1] == "shm" && f[2] == key && f[3] == size
            })
            .unwrap_or_else(|| panic!("no {marker} line for {key} of {size} bytes in:\n{stdout}"))
    };
    let number = |v: &str| -> f64 {
        v.parse()
            .unwrap_or_else(|_| panic!("{v:?} is not a number in:\n{stdout}"))
    };
    for (key, size, ops, client, server) in expected {
        let r = find("RESULT", 10, key, size);
        for v in &r[4..] {
            number(v);
        }
        let m = find("MESSAGES", 9, key, size);
        let totals = (number(m[6]), number(m[7]), number(m[8]));
        assert_eq!(
            totals,
            ((client * ops) as f64, (server * ops) as f64, ops as f64),
            "{key} of {size} bytes: (client sends, server sends, operations) in all\n{stdout}"
        );
        // The per-operation figures printed for people and scripts.
        assert_eq!(number(m[4]), client as f64, "{key}: client sends per op");
        assert_eq!(number(m[5]), server as f64, "{key}: server sends per op");
        assert_eq!(number(r[7]), client as f64, "{key}: RESULT's client sends");
    }
    stdout
}
