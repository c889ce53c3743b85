//! The protocol benchmark in a reduced run: it must finish, print every row,
//! and count the messages the protocol promises on the clients' side (a read
//! hit sends nothing, a read miss only its request). No timing is checked.

mod common;

use std::process::Command;

use common::*;

/// The fields after `label` on the `provider` line of the table: size (two
/// words), median, client sends, protocol messages, raw round trip, ratio.
fn row<'a>(table: &'a str, provider: &str, label: &str, size: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| {
            l.starts_with(provider)
                && l.contains(label)
                && l.split(label)
                    .nth(1)
                    .is_some_and(|r| r.trim_start().starts_with(size))
        })
        .unwrap_or_else(|| panic!("no row {label:?} of {size} for {provider} in:\n{table}"));
    let fields: Vec<&str> = line
        .split(label)
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(fields.len(), 7, "malformed row: {line}");
    fields
}

fn number(field: &str) -> f64 {
    field
        .parse()
        .unwrap_or_else(|_| panic!("{field:?} is not a number"))
}

#[test]
fn the_protocol_bench_prints_every_row_with_the_client_message_counts() {
    let out = run(
        Command::new(env!("CARGO_BIN_EXE_sat-protocol-bench")).args([
            "--providers",
            "shm",
            "--iters",
            "20",
        ]),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for (label, size) in [
        ("read hit", "64 B"),
        ("read miss", "64 B"),
        ("write miss, 1 sharer", "64 B"),
        ("write miss, 3 sharers", "64 B"),
        ("write-release -> read", "4 KiB"),
        ("write-release -> read", "1 MiB"),
    ] {
        let f = row(&table, "shm", label, size);
        for v in &f[2..] {
            number(v);
        }
    }
    // A read hit is local; a read miss sends its request and the grant is
    // the server's, which clients do not count.
    let hit = row(&table, "shm", "read hit", "64 B");
    assert_eq!(number(hit[3]), 0.0, "read hit client sends");
    assert_eq!(number(hit[4]), 0.0, "read hit protocol messages");
    let miss = row(&table, "shm", "read miss", "64 B");
    assert_eq!(number(miss[3]), 1.0, "read miss client sends");
    assert_eq!(number(miss[4]), 2.0, "read miss protocol messages");
}
