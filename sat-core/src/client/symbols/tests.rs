//! The table of symbols: its encoding and hash on their own, then the whole
//! API over the in-process transport (two servers, four clients, one thread
//! per rank, messages delayed and reordered under a seed).

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::progress::IdlePolicy;
use crate::topology::Topology;
use crate::transport::mem::{MemNetwork, Schedule};
use crate::transport::Transport;

#[test]
fn fnv1a_matches_its_published_test_vectors() {
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
}

/// Bucket numbers are part of the table's format: processes of one run, and
/// any build of SAT, must agree on them. These values must never change.
#[test]
fn buckets_are_stable() {
    assert_eq!(bucket_index("symbol_name"), 2186);
    assert_eq!(
        bucket_index("uuid-921b4274-84ad-4b04-ac75-f9738da84039"),
        3919
    );
    assert_eq!(symbol_bucket("a"), SYMBOL_TABLE_BASE + 192);
}

#[test]
fn names_spread_over_the_buckets() {
    let mut load = vec![0u32; BUCKETS as usize];
    for i in 0..10 * BUCKETS {
        load[bucket_index(&format!("name-{i}")) as usize] += 1;
    }
    // 10 per bucket on average; a fair hash stays well below 3 times that.
    assert!(load.iter().all(|&n| n > 0));
    assert!(*load.iter().max().unwrap() < 30, "{:?}", load.iter().max());
}

#[test]
fn the_reserved_range_is_laid_out_without_overflow() {
    let last = value_ids(BUCKETS - 1, IDS_PER_BUCKET - 2, 2);
    assert_eq!(last, vec![u64::MAX - 1, u64::MAX]);
    assert_eq!(value_ids(0, 5, 1), vec![VALUES_BASE + 5]);
    assert_eq!(value_ids(1, 0, 1), vec![VALUES_BASE + IDS_PER_BUCKET]);
}

#[test]
fn values_split_into_pieces() {
    assert_eq!(pieces(0, 4), Vec::<usize>::new());
    assert_eq!(pieces(3, 4), vec![3]);
    assert_eq!(pieces(8, 4), vec![4, 4]);
    assert_eq!(pieces(10, 4), vec![4, 4, 2]);
    assert_eq!(piece_count(0), 0);
    assert_eq!(piece_count(1), 1);
    assert_eq!(piece_count(PIECE as u64), 1);
    assert_eq!(piece_count(PIECE as u64 + 1), 2);
    assert_eq!(piece_count(u64::MAX), u64::MAX.div_ceil(PIECE as u64));
}

#[test]
fn names_are_checked() {
    assert!(check_name("x").is_ok());
    assert!(check_name(&"é".repeat(MAX_SYMBOL_NAME / 2)).is_ok());
    assert!(check_name("").unwrap_err().contains("empty"));
    let long = "n".repeat(MAX_SYMBOL_NAME + 1);
    assert!(check_name(&long)
        .unwrap_err()
        .contains("256 bytes, more than the 255"));
    assert!(check_name("a\0b").unwrap_err().contains("NUL"));
}

/// Names that all fall in bucket `b`: `prefix-0`, `prefix-1`, ... filtered.
fn names_in_bucket(b: u64, prefix: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|s| bucket_index(s) == b)
        .take(n)
        .collect()
}

fn entry(name: &str, offset: u64, size: u64) -> Entry {
    Entry {
        name: name.into(),
        offset,
        size,
    }
}

#[test]
fn a_bucket_round_trips_and_zeros_are_empty() {
    assert_eq!(
        Bucket::decode(7, &[0u8; BUCKET_SIZE]).unwrap(),
        Bucket::default()
    );
    let names = names_in_bucket(7, "s", 3);
    let bucket = Bucket {
        next: 5,
        entries: vec![
            entry(&names[0], 0, 10),
            entry(&names[1], 1, 0),
            entry(&names[2], 2, 3 * PIECE as u64),
        ],
    };
    let bytes = bucket.encode().unwrap();
    assert_eq!(bytes.len(), BUCKET_SIZE);
    assert_eq!(&bytes[..4], b"SYM1");
    assert_eq!(Bucket::decode(7, &bytes).unwrap(), bucket);
    assert_eq!(bucket.find(&names[1]), Some(&bucket.entries[1]));
    assert_eq!(bucket.find("absent"), None);
}

#[test]
fn a_full_bucket_does_not_encode() {
    // Longest names: about 15 fit in 4 KiB.
    let names: Vec<String> = (0..)
        .map(|i| format!("{i:0>255}"))
        .filter(|s| bucket_index(s) == 9)
        .take(20)
        .collect();
    let mut bucket = Bucket::default();
    let mut fitted = 0;
    for (i, name) in names.iter().enumerate() {
        bucket.entries.push(entry(name, i as u64, 1));
        bucket.next = i as u64 + 1;
        match bucket.encode() {
            Some(bytes) => {
                fitted += 1;
                assert_eq!(Bucket::decode(9, &bytes).unwrap(), bucket);
            }
            None => break,
        }
    }
    assert!((14..=15).contains(&fitted), "{fitted} entries fitted");
}

#[test]
fn corrupt_buckets_are_reported_not_decoded() {
    let names = names_in_bucket(3, "c", 2);
    let good = Bucket {
        next: 2,
        entries: vec![entry(&names[0], 0, 4), entry(&names[1], 1, 4)],
    }
    .encode()
    .unwrap();
    let err = |bytes: &[u8]| Bucket::decode(3, bytes).unwrap_err();

    let mut b = good.clone();
    b[0] = b'X';
    assert!(err(&b).contains("marker"));

    let mut b = good.clone();
    b[4..8].copy_from_slice(&(BUCKET_SIZE as u32).to_le_bytes());
    assert!(err(&b).contains("length field says 4096 bytes"));

    let mut b = good.clone();
    b[4..8].copy_from_slice(&3u32.to_le_bytes());
    assert!(err(&b).contains("do not decode"), "{}", err(&b));

    let mut b = good.clone();
    let len = u32::from_le_bytes(b[4..8].try_into().unwrap());
    b[4..8].copy_from_slice(&(len + 1).to_le_bytes());
    assert!(err(&b).contains("length field says"), "{}", err(&b));

    // Garbage in the entries, at every byte of them: an error, never a panic.
    for i in HEADER..HEADER + len as usize {
        let mut b = good.clone();
        b[i] ^= 0xa5;
        let _ = Bucket::decode(3, &b);
    }
    assert!(Bucket::decode(3, &[0xffu8; BUCKET_SIZE]).is_err());
    assert!(Bucket::decode(3, &[0u8; 10]).is_err());

    // Well-formed but inconsistent.
    let bad = |bucket: Bucket| Bucket::decode(3, &bucket.encode().unwrap()).unwrap_err();
    let other = names_in_bucket(4, "o", 1);
    assert!(bad(Bucket {
        next: 1,
        entries: vec![entry(&other[0], 0, 1)]
    })
    .contains("does not belong here"));
    assert!(bad(Bucket {
        next: 2,
        entries: vec![entry(&names[0], 0, 1), entry(&names[0], 1, 1)]
    })
    .contains("twice"));
    assert!(bad(Bucket {
        next: 1,
        entries: vec![entry(&names[0], 1, 1)]
    })
    .contains("outside the ids handed out"));
    assert!(bad(Bucket {
        next: 1,
        entries: vec![entry(&names[0], 0, u64::MAX)]
    })
    .contains("outside the ids handed out"));
    assert!(bad(Bucket {
        next: IDS_PER_BUCKET + 1,
        entries: vec![]
    })
    .contains("id counter"));
    assert!(bad(Bucket {
        next: 1,
        entries: vec![entry("", 0, 1)]
    })
    .contains("does not belong here"));
}

// ---- The API over the in-process transport. ----

const TWO_SERVERS: &str = r#"<?xml version="1.0"?>
<SAT><topologies>
  <topology id="0" role="0"><memory capacity="0"/><clients><intlist>2 3</intlist></clients></topology>
  <topology id="1" role="0"><memory capacity="0"/><clients><intlist>4 5</intlist></clients></topology>
  <topology id="2" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="3" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="4" role="1"><memory capacity="0"/><servers><intlist>1</intlist></servers></topology>
  <topology id="5" role="1"><memory capacity="0"/><servers><intlist>1</intlist></servers></topology>
</topologies></SAT>"#;

const WAIT: Duration = Duration::from_secs(30);

/// Runs `f(client, index)` on each of the four clients (indexes 0 to 3,
/// ranks 2 to 5), with both servers, until the run terminates. A panic in a
/// client still lets the run terminate, then fails the test.
fn run_clients(schedule: Schedule, f: impl Fn(&Client, usize) + Sync) {
    let topology = Arc::new(Topology::parse(TWO_SERVERS, "two servers").unwrap());
    let (_net, endpoints) = MemNetwork::new(topology.len(), schedule);
    let f = &f;
    std::thread::scope(|s| {
        let threads: Vec<_> = endpoints
            .into_iter()
            .map(|mut ep| {
                let topology = topology.clone();
                s.spawn(move || {
                    let rank = ep.rank();
                    if topology.is_server(rank) {
                        crate::server::run(&topology, &mut ep, IdlePolicy::default()).unwrap();
                        return;
                    }
                    let index = topology.clients().iter().position(|&c| c == rank).unwrap();
                    let client = Client::new(topology, Box::new(ep));
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        f(&client, index)
                    }));
                    client.finish(WAIT).unwrap();
                    if let Err(panic) = outcome {
                        std::panic::resume_unwind(panic);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    });
}

/// Every client waits here until all four have arrived (`round` tells the
/// meetings apart). Messages of different senders may arrive in any order,
/// so a client that has left this meeting may announce the next one before
/// another client's announcement of this one lands: those are counted for
/// their own round (each client runs on a thread of its own).
fn meet(c: &Client, round: u32) {
    thread_local! {
        static EARLY: std::cell::RefCell<std::collections::HashMap<u32, usize>> =
            Default::default();
    }
    let clients = c.topology().clients();
    for &other in clients.iter().filter(|&&r| r != c.rank()) {
        c.send(other, round, b"").unwrap();
    }
    let early = EARLY.with(|e| e.borrow_mut().remove(&round).unwrap_or(0));
    let mut missing = clients.len() - 1 - early;
    while missing > 0 {
        let m = c.recv_timeout(WAIT).unwrap().expect("a client never came");
        assert!(
            m.tag >= round,
            "meetings out of step: {} after {round}",
            m.tag
        );
        if m.tag == round {
            missing -= 1;
        } else {
            EARLY.with(|e| *e.borrow_mut().entry(m.tag).or_insert(0) += 1);
        }
    }
}

/// The value `writer` stores under `name`: `size` bytes that depend on both.
fn value(name: &str, writer: usize, size: usize) -> Vec<u8> {
    let seed = fnv1a64(name.as_bytes()) as usize + writer * 7919;
    (0..size).map(|i| (seed + i * 31) as u8).collect()
}

fn random(seed: u64) -> Schedule {
    Schedule::Random {
        seed,
        max_delay_polls: 3,
    }
}

/// Four clients write 25 names each at the same time, all in four buckets
/// (so writers contend on every bucket); afterwards everyone reads all 100.
#[test]
fn concurrent_writers_lose_no_entry() {
    let names: Vec<Vec<String>> = (0..4)
        .map(|w| {
            (0..)
                .map(|i| format!("w{w}-{i}"))
                .filter(|s| bucket_index(s) < 4)
                .take(25)
                .collect()
        })
        .collect();
    for seed in 0..2 {
        run_clients(random(seed), |c, me| {
            c.init_symbol_table().unwrap();
            for (i, name) in names[me].iter().enumerate() {
                c.write_symbol(name, &value(name, me, 1 + i * 13)).unwrap();
            }
            meet(c, 1);
            for (w, list) in names.iter().enumerate() {
                for (i, name) in list.iter().enumerate() {
                    let got = c.read_symbol(name, Duration::ZERO).unwrap();
                    assert_eq!(got, value(name, w, 1 + i * 13), "{name}, seed {seed}");
                }
            }
        });
    }
}

/// A read issued before the write waits for it; one issued for a name
/// nobody writes times out with a message that says what to do.
#[test]
fn a_read_waits_for_the_write_and_times_out_without_one() {
    for seed in 0..3 {
        run_clients(random(seed), |c, me| {
            let peers = c.topology().clients();
            match me {
                0 => {
                    // Not written yet: the writer waits for our word.
                    let e = c.read_symbol("late", Duration::ZERO).unwrap_err();
                    assert!(matches!(e, SatError::Timeout(_)), "{e}");
                    c.send(peers[3], 7, b"reading").unwrap();
                    let got = c.read_symbol("late", WAIT).unwrap();
                    assert_eq!(got, value("late", 3, 100));
                }
                3 => {
                    let m = c.recv_timeout(WAIT).unwrap().expect("the reader's word");
                    assert_eq!(m.data, b"reading");
                    c.write_symbol("late", &value("late", 3, 100)).unwrap();
                }
                _ => {
                    let e = c
                        .read_symbol("nobody writes this", Duration::from_millis(50))
                        .unwrap_err();
                    assert!(matches!(e, SatError::Timeout(_)));
                    assert!(e.to_string().contains(
                        "read_symbol(\"nobody writes this\"): no process wrote this symbol \
                         within 50ms; write it with write_symbol somewhere, or read with a \
                         longer timeout"
                    ));
                }
            }
        });
    }
}

/// A reader and a writer in two threads of one process: the home does not
/// invalidate the writer's own process, so the waiting reader must notice
/// the write locally.
#[test]
fn a_read_waits_for_a_write_by_another_thread() {
    run_clients(random(3), |c, me| {
        if me != 0 {
            return;
        }
        for round in 0..5 {
            let name = format!("threads-{round}");
            std::thread::scope(|s| {
                let reader = s.spawn(|| {
                    let start = std::time::Instant::now();
                    let got = c.read_symbol(&name, WAIT);
                    // A reader that missed the write would find it only
                    // when its wait ran out, WAIT later.
                    assert!(
                        start.elapsed() < WAIT / 2,
                        "the write did not wake the reader"
                    );
                    got
                });
                // Either order is correct; the pause makes it likely that
                // the reader is already waiting when the write comes.
                std::thread::sleep(Duration::from_millis(20));
                c.write_symbol(&name, &value(&name, 0, 64)).unwrap();
                assert_eq!(reader.join().unwrap().unwrap(), value(&name, 0, 64));
            });
        }
    });
}

/// Overwrites: a value of another size, then of the same size, then an empty
/// one; and four writers of one name at once leave one whole value.
#[test]
fn overwrites_replace_the_whole_value() {
    run_clients(random(11), |c, me| {
        let steps: [(usize, usize); 4] = [(0, 10), (1, 5000), (2, 5000), (3, 0)];
        for (round, &(writer, size)) in steps.iter().enumerate() {
            if me == writer {
                c.write_symbol("over", &value("over", writer, size))
                    .unwrap();
            }
            meet(c, 2 * round as u32);
            let got = c.read_symbol("over", WAIT).unwrap();
            assert_eq!(got, value("over", writer, size), "step {round}");
            meet(c, 2 * round as u32 + 1);
        }
        // Everyone at once, sizes all different.
        c.write_symbol("contested", &value("contested", me, 100 * (me + 1)))
            .unwrap();
        meet(c, 100);
        let got = c.read_symbol("contested", WAIT).unwrap();
        let winner = got.len() / 100 - 1;
        assert_eq!(got, value("contested", winner, got.len()));
        // Every client sees the same winner.
        let peers = c.topology().clients();
        for &p in peers.iter().filter(|&&p| p != c.rank()) {
            c.send(p, 101, &[winner as u8]).unwrap();
        }
        for _ in 1..peers.len() {
            let m = c.recv_timeout(WAIT).unwrap().unwrap();
            assert_eq!(m.data, [winner as u8]);
        }
    });
}

/// Readers racing a writer that keeps changing the size: each read is one
/// whole value, old or new, never a mix.
#[test]
fn readers_never_see_a_mix() {
    run_clients(random(5), |c, me| {
        // Round r's value: size(r) bytes, every one r (the size changes each
        // round); a mix would show two different bytes or a length
        // that does not match them.
        let size = |round: usize| 1 + (round * 997) % 3000;
        if me == 0 {
            for round in 0..40 {
                c.write_symbol("racing", &vec![round as u8; size(round)])
                    .unwrap();
            }
        } else {
            for _ in 0..40 {
                let v = c.read_symbol("racing", WAIT).unwrap();
                assert_eq!(v.len(), size(v[0] as usize), "a length from another value");
                assert!(v.iter().all(|&x| x == v[0]), "a mixed value");
            }
        }
    });
}

/// Misuse and a full bucket: errors that say what to do, and the table
/// stays usable.
#[test]
fn bad_names_and_a_full_bucket_are_errors() {
    run_clients(Schedule::Immediate, |c, me| {
        if me != 0 {
            return;
        }
        let e = c.write_symbol("", b"x").unwrap_err().to_string();
        assert!(e.contains("write_symbol(\"\"): the name is empty"), "{e}");
        let long = "n".repeat(300);
        let e = c.read_symbol(&long, WAIT).unwrap_err().to_string();
        assert!(e.contains("300 bytes, more than the 255"), "{e}");

        let names: Vec<String> = (0..)
            .map(|i| format!("{i:0>255}"))
            .filter(|s| bucket_index(s) == 21)
            .take(20)
            .collect();
        let mut written = 0;
        let err = loop {
            match c.write_symbol(&names[written], b"v") {
                Ok(()) => written += 1,
                Err(e) => break e.to_string(),
            }
        };
        assert!((14..=15).contains(&written), "{written}");
        assert!(
            err.contains(&format!(
                "the symbol table's bucket 21 (chunk {:#x}) is full",
                SYMBOL_TABLE_BASE + 21
            )),
            "{err}"
        );
        // Nothing was lost, and the bucket takes rewrites of its names.
        for name in &names[..written] {
            assert_eq!(c.read_symbol(name, Duration::ZERO).unwrap(), b"v");
        }
        c.write_symbol(&names[0], b"w").unwrap();
        assert_eq!(c.read_symbol(&names[0], Duration::ZERO).unwrap(), b"w");
    });
}

/// Writes `bytes` over the table's chunk `chunk`, as no public call may:
/// what a process of an older library, or memory gone wrong, could leave.
fn clobber(c: &Client, chunk: u64, bytes: &[u8]) {
    c.acquire_reserved(chunk, Access::Write).unwrap();
    c.with_data_mut(chunk, |d| d.copy_from_slice(bytes))
        .unwrap();
    c.release(chunk).unwrap();
}

/// The public calls keep out of the table: LOOKUP of its chunks, and a
/// WRITE or PUT of one this process holds, are refused (a process could
/// otherwise corrupt every process's symbols); its reader may read.
#[test]
fn the_public_calls_keep_out_of_the_symbol_table() {
    run_clients(Schedule::Immediate, |c, me| {
        if me != 0 {
            return;
        }
        let b = bucket_index("kept");
        c.write_symbol("kept", b"value").unwrap();
        let bucket = SYMBOL_TABLE_BASE + b;
        let e = c.lookup_lst(&[bucket], WAIT).unwrap_err().to_string();
        assert!(e.contains("reserved for the symbol table"), "{e}");
        for e in [
            c.put(bucket, &[0x5a; BUCKET_SIZE]).unwrap_err(),
            c.acquire(bucket, Access::ReadWrite).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(e.contains("written only through the symbol calls"), "{e}");
        }
        let mut seen = vec![0; BUCKET_SIZE];
        c.get(bucket, &mut seen).unwrap();
        assert_eq!(c.read_symbol("kept", WAIT).unwrap(), b"value");
    });
}

/// A clobbered table (see [`clobber`]): a bucket overwritten is reported as
/// corrupt, with the range named; a value id taken costs one failed write;
/// a bucket taken with another size cannot be opened.
#[test]
fn a_clobbered_bucket_is_reported() {
    run_clients(Schedule::Immediate, |c, me| {
        if me != 0 {
            return;
        }
        let b = bucket_index("victim");
        c.write_symbol("victim", b"value").unwrap();
        clobber(c, SYMBOL_TABLE_BASE + b, &[0x5a; BUCKET_SIZE]);
        for e in [
            c.read_symbol("victim", WAIT).unwrap_err(),
            c.write_symbol("victim", b"again").unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(
                e.contains(&format!(
                    "bucket {b} (chunk {:#x}) is corrupt",
                    SYMBOL_TABLE_BASE + b
                )),
                "{e}"
            );
            assert!(
                e.contains("keep user chunks below 0xffffff0000000000"),
                "{e}"
            );
        }
        // The error left no scope open.
        clobber(c, SYMBOL_TABLE_BASE + b, &[0; BUCKET_SIZE]);
        c.write_symbol("victim", b"again").unwrap();

        // User code cannot MALLOC in the reserved range...
        let b = bucket_index("squatted");
        let e = c.malloc(value_ids(b, 0, 1)[0], 8).unwrap_err().to_string();
        assert!(e.contains("reserved for the symbol table"), "{e}");
        // ...but if a value chunk was taken anyway with another size (say,
        // by another version of SAT), the write fails, the bucket's id
        // counter moves past it, and the next one works.
        c.malloc_lst_reserved(ProtocolId::HomeMesi, &[value_ids(b, 0, 1)[0]], &[8])
            .unwrap();
        let e = c
            .write_symbol("squatted", b"12345")
            .unwrap_err()
            .to_string();
        assert!(e.contains("it already exists with 8 bytes"), "{e}");
        c.write_symbol("squatted", b"12345").unwrap();
        assert_eq!(c.read_symbol("squatted", WAIT).unwrap(), b"12345");

        let taken = bucket_index("taken");
        c.malloc_lst_reserved(ProtocolId::HomeMesi, &[SYMBOL_TABLE_BASE + taken], &[8])
            .unwrap();
        let e = c.read_symbol("taken", WAIT).unwrap_err().to_string();
        assert!(e.contains("cannot be allocated"), "{e}");
        assert!(e.contains("reserved for the table"), "{e}");
    });
}

/// A bucket's MALLOC that fails for a reason other than the chunk in the
/// way (the service gone, a timeout, a lost process) gives that error as it
/// is, with no hint about the reserved range; the home's refusal keeps it.
#[test]
fn only_a_refused_bucket_names_the_reserved_range() {
    let b = bucket_index("k");
    for e in [
        SatError::Aborted("the service at 127.0.0.1:1 is gone".into()),
        SatError::Timeout("no answer".into()),
        SatError::ProcessLost("server 0".into()),
        SatError::Bootstrap("closed".into()),
    ] {
        let before = e.to_string();
        let after = bucket_allocation_error("read_symbol", "k", b, e);
        assert_eq!(after.to_string(), before);
        assert!(!matches!(after, SatError::Usage(_)), "{after}");
    }
    let refused = SatError::Usage("MALLOC of chunk 1 with 4096 bytes: it already exists".into());
    let e = bucket_allocation_error("read_symbol", "k", b, refused);
    assert!(matches!(e, SatError::Usage(_)), "{e}");
    let e = e.to_string();
    assert!(e.contains("read_symbol(\"k\")"), "{e}");
    assert!(
        e.contains(&format!(
            "bucket {b} (chunk {:#x}) cannot be allocated: MALLOC of chunk 1",
            SYMBOL_TABLE_BASE + b
        )),
        "{e}"
    );
    assert!(
        e.contains("reserved for the table: keep user chunks below"),
        "{e}"
    );
    // The refusal is quoted once, not wrapped in a second "invalid use" prefix.
    assert_eq!(e.matches("invalid use of the SAT API").count(), 1, "{e}");
}
