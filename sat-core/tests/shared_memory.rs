//! Scope consistency over real processes: 4 clients on 2 servers increment
//! shared counters under READWRITE; no update may be lost, over shm and tcp.

mod common;

use std::process::Command;

use common::*;

#[test]
fn four_clients_of_two_threads_on_two_servers_lose_no_increment() {
    for provider in ["shm", "tcp"] {
        let k = 60;
        let out = run(Command::new(satrun())
            .args(["-n", "6", "--topology"])
            .arg(topology("two-servers.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("increment"))
            .args(["--k", &k.to_string(), "--threads", "2"]));
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        // The program's lines and SAT's warnings (stderr).
        let stdout = text(&out.stdout) + &text(&out.stderr);
        for rank in 2..=5 {
            for chunk in [7, 8] {
                // Two threads per client take turns on the chunk's scope.
                let line = format!(
                    "[{rank}] rank {rank}: chunk {chunk} = {} = 4 clients x 2 threads x {k}",
                    8 * k
                );
                assert!(stdout.contains(&line), "{provider}: missing {line:?}");
            }
            // Misuse is an error with a message, never a hang or a crash.
            for msg in [
                "RELEASE without a matching READ, WRITE or READWRITE",
                "PUT of chunk 9 with a buffer of 10 bytes: the chunk has 10000",
                "chunk 12345 is unknown to this process: MALLOC or LOOKUP it first",
                "chunk 9: this thread already holds the chunk in a write scope: release it first",
                "chunk 9: ABORT without a matching READ, WRITE or READWRITE",
                "MAP of chunk 0xffffff0000000002: chunks from 0xffffff0000000000 up are reserved",
                "a chunk size of 2147483648 bytes is over the 1073741824-byte limit of a chunk",
                "a chunk of 2147483648 bytes is over the 1073741824-byte limit",
                "a chain of 1125899906842624 bytes cannot be held in this machine's",
                "MALLOC of chunk 0xffffff0000000001: chunks from 0xffffff0000000000 up are reserved for the symbol table",
            ] {
                assert!(
                    stdout.contains(&format!("[{rank}] rank {rank}: misuse: "))
                        && stdout.contains(msg),
                    "{msg}"
                );
            }
        }
        // One client PUT a chunk; the three others GET the same bytes.
        let gets = stdout
            .lines()
            .filter(|l| l.contains("GET of chunk 9 returned the 10000 bytes of the PUT"))
            .count();
        assert_eq!(gets, 3, "{provider}");
        assert!(
            stdout.contains("[2] rank 2: wrote after the other clients left"),
            "{provider}"
        );
        assert!(stdout.contains(
            "[5] WARN: a scope was still acquired when the role returned (chunk 8): released"
        ));
    }
}

/// Runs the increment example on the two-server topology with `args`.
fn increment(provider: &str, args: &[&str]) -> String {
    let out = run(Command::new(satrun())
        .args(["-n", "6", "--topology"])
        .arg(topology("two-servers.xml"))
        .args(["--provider", provider, "--"])
        .arg(example("increment"))
        .args(args));
    assert!(
        out.status.success(),
        "{provider} {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The same holds for a chain of three chunks acquired as a whole (homes on
/// both servers, one counter straddling a chunk boundary), in SAT's memory
/// and in memory the clients MAP (and whose address the scopes check). A
/// chain given back (FREE, UNMAP) leaves its chunks in the S-DSM.
#[test]
fn chains_and_mapped_memory_lose_no_increment() {
    for provider in ["shm", "tcp"] {
        for (on, what) in [("chain", "chain"), ("map", "MAP'd chain")] {
            let stdout = increment(provider, &["--k", "40", "--threads", "2", "--on", on]);
            for rank in 2..=5 {
                let line = format!(
                    "[{rank}] rank {rank}: {what} of 3 chunks: every counter = 320 = 4 clients x 2 threads x 40"
                );
                assert!(
                    stdout.contains(&line),
                    "{provider}: missing {line:?} in {stdout}"
                );
                let line = if on == "map" {
                    format!(
                        "[{rank}] rank {rank}: UNMAP gave back the same memory, holding every counter"
                    )
                } else {
                    format!(
                        "[{rank}] rank {rank}: FREE gave the chain back; a LOOKUP finds every counter again"
                    )
                };
                assert!(stdout.contains(&line), "{provider}: missing {line:?}");
            }
        }
    }
}

/// Protocols are chosen per chunk: the counters under home-only, the PUT/GET
/// chunk under home-based MESI, in one run; both stay exact.
#[test]
fn home_only_and_mesi_chunks_in_one_run() {
    for provider in ["shm", "tcp"] {
        let stdout = increment(provider, &["--k", "30", "--protocol", "home-only"]);
        for rank in 2..=5 {
            for chunk in [7, 8] {
                let line = format!(
                    "[{rank}] rank {rank}: chunk {chunk} = 120 = 4 clients x 1 threads x 30"
                );
                assert!(stdout.contains(&line), "{provider}: missing {line:?}");
            }
        }
        let gets = stdout
            .lines()
            .filter(|l| l.contains("GET of chunk 9 returned the 10000 bytes of the PUT"))
            .count();
        assert_eq!(gets, 3, "{provider}");
    }
}

/// A client computing between SAT calls still answers invalidations, so a
/// writer is not held up until the reader's next call.
#[test]
fn a_computing_reader_does_not_hold_up_a_writer() {
    for provider in ["shm", "tcp"] {
        let marker =
            std::env::temp_dir().join(format!("sat-compute-{}-{provider}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        let out = run(Command::new(satrun())
            .args(["-n", "3", "--topology"])
            .arg(topology("figure11.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("compute"))
            .arg("--marker")
            .arg(&marker)
            // Invalidations are the message path's (on one host, a writer
            // waits for no reader's answer: it takes the slot's lock).
            .env("SAT_HOST_SEGMENTS", "off"));
        let _ = std::fs::remove_file(&marker);
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("[2] writer: wrote while the reader computed"));
        assert!(stdout.contains("[1] reader: the writer finished while I computed"));
        // Counted by the transport: a read miss costs the reader one request
        // (the grant is the home's), a read hit nothing at all.
        assert!(
            stdout.contains("[1] reader: a read miss sent 1 message(s)"),
            "{provider}"
        );
        assert!(
            stdout.contains("[1] reader: 1000 read hits sent 0 message(s)"),
            "{provider}"
        );
    }
}

/// A 64 MiB MALLOC is one chain of 1,024 chunks whose data is contiguous:
/// written in one pass by one process, checked word by word and chunk
/// address by chunk address by another that LOOKUPs it; a chunk in two
/// local chains stays the same in both.
#[test]
fn a_64_mib_chain_is_contiguous_and_its_instances_consistent() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "3", "--topology"])
            .arg(topology("figure11.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("chains")));
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        for line in [
            "[1] writer: MALLOC of 67108864 bytes made a chain of 1024 chunks of 65536 bytes",
            "[1] writer: 1024 chunks, each at its offset of one contiguous buffer",
            "[2] reader: LOOKUP found 67108864 bytes in 1024 contiguous chunks, every word right",
            "[2] reader: a write through one local chain shows in the other, with no message",
            "[1] writer: sees the reader's write of chunks 1 and 2",
        ] {
            assert!(
                stdout.contains(line),
                "{provider}: missing {line:?} in {stdout}"
            );
        }
    }
}

/// Clients with room for 4 chunks write 40: their data is evicted (LRU),
/// and every value read back at the end is right.
#[test]
fn eviction_under_a_small_capacity_loses_nothing() {
    for provider in ["shm", "tcp"] {
        let out = run(Command::new(satrun())
            .args(["-n", "6", "--topology"])
            .arg(topology("small-memory.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("capacity"))
            .args(["--chunks", "40", "--rounds", "4"]));
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        for rank in 2..=5 {
            let line = format!("[{rank}] rank {rank}: all 40 chunks = 16 = 4 clients x 4 rounds");
            assert!(stdout.contains(&line), "{provider}: missing {line:?}");
            let footprint = stdout
                .lines()
                .find(|l| l.starts_with(&format!("[{rank}] rank {rank}: footprint ")))
                .unwrap_or_else(|| panic!("{provider}: no footprint line for {rank}"));
            let words: Vec<&str> = footprint.split_whitespace().collect();
            let chunks: u64 = words[4].parse().unwrap();
            let evictions: u64 = words[8].parse().unwrap();
            assert!(chunks <= 4, "{provider}: {footprint}");
            assert!(evictions >= 36, "{provider}: {footprint}");
        }
    }
}

/// The debug stream follows a request as Figure 14 does: the client's miss,
/// its server switching it to the home on the other server, the home's
/// decision, and the release coming back the same way.
#[test]
fn the_debug_stream_shows_requests_hop_to_their_home() {
    let out = run(Command::new(satrun())
        .args(["-n", "6", "--topology"])
        .arg(topology("two-servers.xml"))
        .args(["--provider", "shm", "--"])
        .arg(example("increment"))
        .args(["--k", "1"])
        // Requests hop through servers on the message path (on one host,
        // scopes open on host segments and send no request).
        .env("SAT_HOST_SEGMENTS", "off")
        .env("SAT_LOG", "sat_core=debug"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout) + &text(&out.stderr);
    assert!(!log.contains('\0'), "the debug stream is text");
    // Chunk 7's home is server 1; clients 2 and 3 are attached to server 0.
    for line in [
        "[2] [Home-Based MESI] READWRITE chunk 7: miss, local state Invalid, asking the home",
        "[0] Server switch request (client_req_readwrite) from 2: chunk 7 to home 1",
        "[1] [Home-Based MESI] Server switch request (server_req_readwrite) from 0: chunk 7 client 2",
        "[0] Server switch request (client_req_release) from 2: chunk 7 to home 1",
        "[1] [Home-Based MESI] Server switch request (server_req_release) from 0: chunk 7 client 2",
        "[2] [Home-Based MESI] release chunk 7 version Some(",
    ] {
        assert!(log.contains(line), "missing {line:?}");
    }
}
