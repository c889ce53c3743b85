//! The synchronization benchmark in a reduced run: it must finish, print a
//! row per barrier size and per kind of notification with numbers in every
//! column, and state the message counts of `sync.rs` and of a publish. No
//! timing is checked.

#[path = "../../sat-core/tests/common/process.rs"]
mod common;

use std::process::Command;

use common::*;

/// The fields after `label` on the `provider` line of the table whose
/// client count is `clients`: clients, median, publish scope, messages, raw
/// round trip, ratio.
fn row<'a>(table: &'a str, provider: &str, label: &str, clients: u32) -> Vec<&'a str> {
    let fields = |l: &'a str| -> Option<Vec<&'a str>> {
        let rest = l.strip_prefix(provider)?.trim_start().strip_prefix(label)?;
        // "publish -> handler" must not match "publish+data -> handler".
        if !rest.starts_with(' ') {
            return None;
        }
        let f: Vec<&str> = rest.split_whitespace().collect();
        (f.first() == Some(&clients.to_string().as_str())).then_some(f)
    };
    let f = table
        .lines()
        .find_map(fields)
        .unwrap_or_else(|| panic!("no row {label:?} of {clients} for {provider} in:\n{table}"));
    assert_eq!(f.len(), 6, "malformed row {label:?}: {f:?}");
    f
}

fn number(field: &str) -> f64 {
    let v: f64 = field
        .parse()
        .unwrap_or_else(|_| panic!("{field:?} is not a number"));
    assert!(v.is_finite(), "{field:?} is not a finite number");
    v
}

#[test]
fn the_sync_bench_prints_every_row_with_the_message_counts() {
    let out = run(Command::new(env!("CARGO_BIN_EXE_sat-sync-bench")).args([
        "--providers",
        "shm",
        "--iters",
        "20",
        "--sizes",
        "2,3",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for n in [2, 3] {
        let f = row(&table, "shm", "barrier", n);
        assert_eq!(f[2], "-", "a barrier has no publish scope");
        for v in [f[1], f[4], f[5]] {
            number(v);
        }
        // One arrival and one release per client, no forwarding hop.
        assert_eq!(number(f[3]), 2.0 * n as f64, "barrier of {n}: messages");
    }
    assert!(
        !table
            .lines()
            .any(|l| l.starts_with("shm") && l.contains("barrier") && {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(2) == Some(&"4")
            }),
        "--sizes 2,3 ran a barrier of 4:\n{table}"
    );
    for label in ["publish -> handler", "publish+data -> handler"] {
        let f = row(&table, "shm", label, 2);
        for v in &f[1..] {
            number(v);
        }
        // WRITE request and grant, the release, the notification.
        assert_eq!(number(f[3]), 4.0, "{label}: messages");
    }
}
