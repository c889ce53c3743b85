//! The hand-off benchmark in a reduced run (a 1 MiB chain of four 256 KiB
//! chunks instead of 64 MiB): it must finish, print every figure, check the
//! data it hands over, and send per operation exactly the messages
//! home-based MESI needs on the clients' side. No timing is checked.

mod common;

use std::process::Command;

use common::*;

#[test]
fn the_handoff_bench_prints_every_figure_with_the_minimum_client_sends() {
    let out = run(Command::new(env!("CARGO_BIN_EXE_sat-handoff-bench")).args([
        "--providers",
        "shm",
        "--small-iters",
        "20",
        "--large-iters",
        "2",
        "--large",
        "1048576",
        "--chunk-size",
        "262144",
        "--results",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // RESULT provider key size median min max sends min_sends protocol
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.first() == Some(&"RESULT"))
        .collect();
    let row = |key: &str, size: &str| -> &Vec<&str> {
        rows.iter()
            .find(|f| f.len() == 10 && f[1] == "shm" && f[2] == key && f[3] == size)
            .unwrap_or_else(|| panic!("no {key} row of {size} bytes in:\n{stdout}"))
    };
    let number = |v: &str| -> f64 {
        v.parse()
            .unwrap_or_else(|_| panic!("{v:?} is not a number in:\n{stdout}"))
    };
    let small = row("handoff", "64");
    for v in &small[4..] {
        number(v);
    }
    assert!(number(small[7]) >= 4.0, "a hand-off needs 4 client sends");
    // 4 chunks: a write with the reader as its one sharer (request and
    // acknowledgement) and the release, 3 each; a read miss, 1 each.
    for (key, sends, protocol) in [
        ("put-release", 12.0, 20.0),
        ("put", 12.0, 20.0),
        ("get", 4.0, 8.0),
        ("handoff", 16.0, 28.0),
    ] {
        let f = row(key, "1048576");
        for v in &f[4..] {
            number(v);
        }
        assert_eq!(number(f[7]), sends, "{key}: client sends per operation");
        assert_eq!(number(f[8]), sends, "{key}: the minimum");
        assert_eq!(number(f[9]), protocol, "{key}: protocol messages");
    }
}
