//! MALLOC and LOOKUP over real processes and both providers: the home of a
//! chunk is a modulo on the servers, requests and answers take the multi-hop
//! path, a LOOKUP waits for a MALLOC that comes later and is answered at once
//! after one, a LOOKUP nobody answers fails after its bound, and a second
//! size is refused, also inside a chain, which then allocates none of its
//! chunks.

mod common;

use std::process::Command;

use common::*;

#[test]
fn malloc_and_lookup_in_both_orders_over_shm_and_tcp() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "6", "--topology"])
            .arg(topology("two-servers.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("alloc"))
            .env("SAT_LOG", "sat_core::server=debug"));
        // The programs' lines (stdout) and the servers' debug stream (stderr).
        let stdout = text(&out.stdout) + &text(&out.stderr);
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let has = |s: &str| stdout.contains(s);
        for rank in 2..=5 {
            assert!(has(&format!(
                "[{rank}] rank {rank}: lookup 999: LOOKUP of chunk 999: no process allocated it"
            )));
        }
        for looker in [3, 5] {
            // Chunk 100 (home: server 0): the LOOKUP came first and waited.
            assert!(
                has(&format!(
                    "[0] lookup chunk 100 for {looker} parked until it is allocated"
                )),
                "{provider}"
            );
            assert!(has(&format!(
                "[{looker}] rank {looker}: lookup 100 waited for its malloc: 4096 bytes"
            )));
            // Chunk 101 (home: server 1): the MALLOC came first.
            assert!(
                has(&format!(
                    "[1] lookup chunk 101 for {looker}: Allocated {{ size: 512, protocol: HomeMesi }}"
                )),
                "{provider}"
            );
            assert!(has(&format!(
                "[{looker}] rank {looker}: lookup 101 after its malloc: 512 bytes"
            )));
        }
        // Client 2 reaches server 1 through server 0, and back.
        assert!(has("[0] [malloc] forward chunk 101 to home 1"));
        assert!(has(
            "[1] malloc baseid 101 size 512 [Home-Based MESI] for 2: Allocated { size: 512, protocol: HomeMesi }"
        ));
        assert!(has(
            "[4] rank 4: MALLOC of chunk 101 with 1024 bytes [Home-Based MESI]: it already exists with 512 bytes [Home-Based MESI]"
        ));
        assert!(has(
            "[2] rank 2: malloc 101 again with the same size joins it"
        ));
        assert!(has(
            "[4] rank 4: chain: MALLOC of chunk 101 with 1024 bytes [Home-Based MESI]: it already exists with 512 bytes"
        ));
        assert!(has(
            "[4] rank 4: the failed chain MALLOC allocated none of its chunks; allocated again: 512 bytes"
        ));
    }
}
