//! The table of symbols over real processes (Figure 7): four clients on two
//! servers write and read symbols, over shm and tcp. The program is
//! `examples/symbols.rs`; its docs list the steps these lines come from.

mod common;

use std::process::Command;

use common::*;

const UUID: &str = "uuid-921b4274-84ad-4b04-ac75-f9738da84039";

fn lines_with(stdout: &str, needle: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

#[test]
fn symbols_are_shared_waited_for_and_overwritten_whole() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "6", "--topology"])
            .arg(topology("two-servers.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("symbols")));
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let has = |line: &str| assert!(stdout.contains(line), "{provider}: missing {line:?}");
        for rank in 2..=5 {
            // (a) and (f): Figure 7, the plain name and the UUID name, the
            // same bytes in every client (rank 2 and rank 5 wrote them).
            has(&format!(
                "[{rank}] rank {rank}: readSymbol(\"symbol_name\") gave 4000 bytes, identical \
                 to the write of rank 2"
            ));
            has(&format!(
                "[{rank}] rank {rank}: readSymbol(\"{UUID}\") gave 4000 bytes, identical to \
                 the write of rank 5"
            ));
            // (c): 200 names written at once by four clients, none lost.
            has(&format!(
                "[{rank}] rank {rank}: all 200 symbols of the 4 writers read back intact \
                 (8 buckets shared by all of them)"
            ));
            // (d): a rewrite with another size, then with the same size.
            has(&format!(
                "[{rank}] rank {rank}: \"overwritten\" holds the 3000 bytes rewritten by rank 5 \
                 (it held 100)"
            ));
            has(&format!(
                "[{rank}] rank {rank}: \"overwritten\" holds the 3000 bytes rewritten by rank 3 \
                 (same size)"
            ));
            // (e): a name nobody writes.
            has(&format!(
                "[{rank}] rank {rank}: timed out: read_symbol(\"nobody-writes-this\"): no \
                 process wrote this symbol within 300ms; write it with write_symbol somewhere, \
                 or read with a longer timeout"
            ));
            has(&format!(
                "[{rank}] rank {rank}: misuse: invalid use of the SAT API: write_symbol(\"\"): \
                 the name is empty"
            ));
            has(&format!(
                "[{rank}] rank {rank}: misuse: invalid use of the SAT API: write_symbol(\"xxx"
            ));
            has("the name has 300 bytes, more than the 255 a symbol name may have");
        }
        // (b): the read began before the write and waited for it.
        has(
            "[3] rank 3: \"late\" was missing when the read began; the read waited and got the \
             70000 bytes written after it",
        );
        // (d): four writers of one name at once leave one whole value, the
        // same for every reader.
        let contested = lines_with(&stdout, "\"contested\" holds the whole value of rank ");
        assert_eq!(contested.len(), 4, "{provider}: {contested:?}");
        let winners: std::collections::HashSet<&str> = contested
            .iter()
            .map(|l| l.rsplit(' ').next().unwrap())
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "{provider}: readers disagree: {contested:?}"
        );
    }
}
