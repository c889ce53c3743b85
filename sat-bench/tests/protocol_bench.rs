//! The protocol benchmark in a reduced run: it must finish, print every row,
//! and measure per operation exactly the messages home-based MESI needs, on
//! the clients' side and on the server's. The counts are taken in the
//! benchmark's processes (each client counts what it sends and what its
//! server sends it); the expected figures below come from the protocol's
//! rule, so a message added to any path fails this test. No timing is
//! checked.

#[path = "../../sat-core/tests/common/process.rs"]
mod common;

use std::process::Command;

use common::*;

/// The fields after `label` on the `provider` line of the table: size (two
/// words), median, client sends, server sends, protocol messages, raw round
/// trip, ratio.
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
    assert_eq!(fields.len(), 8, "malformed row: {line}");
    fields
}

fn number(field: &str) -> f64 {
    field
        .parse()
        .unwrap_or_else(|_| panic!("{field:?} is not a number"))
}

#[test]
fn the_protocol_bench_measures_the_messages_of_every_path() {
    let out = run(
        // The protocols' messages: on one host the homes would keep their
        // versions in host segments, where scopes send none.
        Command::new(env!("CARGO_BIN_EXE_sat-protocol-bench"))
            .env("SAT_HOST_SEGMENTS", "off")
            .args(["--providers", "shm", "--iters", "20"]),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    // Per operation (protocol/mesi.rs, PROTOCOL-NOTES; the one server is the
    // home of every chunk, so nothing is forwarded):
    // (label, size, client sends, server sends).
    let expected = [
        // A hit: the copy is valid, nothing is sent.
        ("read hit", "64 B", 0.0, 0.0),
        // A miss: the reader's request, the server's grant.
        ("read miss", "64 B", 1.0, 1.0),
        // The writer's acquire with s other sharers, 2 + 2s: its request and
        // the s acknowledgements (clients), the s invalidations and the
        // grant (server); then its release, 1 (client).
        ("write miss, 1 sharer", "64 B", 1.0 + 1.0 + 1.0, 1.0 + 1.0),
        ("write miss, 3 sharers", "64 B", 1.0 + 3.0 + 1.0, 3.0 + 1.0),
        // A hand-off: the write with the reader as its one sharer (clients:
        // request, acknowledgement; server: invalidation, grant), the
        // release (client), the reader's miss (client: request; server:
        // grant).
        ("write-release -> read", "4 KiB", 2.0 + 1.0 + 1.0, 2.0 + 1.0),
        ("write-release -> read", "1 MiB", 2.0 + 1.0 + 1.0, 2.0 + 1.0),
    ];
    for (label, size, client, server) in expected {
        let f = row(&table, "shm", label, size);
        for v in &f[2..] {
            number(v);
        }
        assert_eq!(
            number(f[3]),
            client,
            "{label} {size}: client sends\n{table}"
        );
        assert_eq!(
            number(f[4]),
            server,
            "{label} {size}: server sends\n{table}"
        );
        assert_eq!(
            number(f[5]),
            client + server,
            "{label} {size}: protocol messages\n{table}"
        );
    }
}
