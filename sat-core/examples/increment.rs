//! Every client does K READWRITE-increment-RELEASE on shared counters; at the
//! end every client reads them and checks they hold exactly clients x K.
//!
//! ```text
//! satrun -n 6 --topology sat-core/topologies/two-servers.xml -- target/release/examples/increment --k 200
//! ```
//! Chunk 7 lives on server 1 and chunk 8 on server 0 (home = id mod 2).

use std::time::Duration;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::Access;

const COUNTERS: [u64; 2] = [7, 8];

fn counter(c: &Client, chunk: u64) -> Result<u64, sat_core::SatError> {
    c.with_data(chunk, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))
}

/// `threads` threads of this client each do `k` increments of each counter.
fn increment(c: &Client, k: u64, threads: u64) -> RoleResult {
    let me = c.rank();
    let clients = c.topology().clients();
    for chunk in COUNTERS {
        c.malloc(chunk, 8)?;
    }
    let start = std::time::Instant::now();
    let work = || -> Result<(), sat_core::SatError> {
        for _ in 0..k {
            for chunk in COUNTERS {
                c.acquire(chunk, Access::ReadWrite)?;
                let v = counter(c, chunk)? + 1;
                c.with_data_mut(chunk, |d| d[..8].copy_from_slice(&v.to_le_bytes()))?;
                c.release(chunk)?;
            }
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("no panic"))
    })?;
    let per = start.elapsed() / (k as u32 * COUNTERS.len() as u32).max(1);
    // Everyone has released every increment before anyone checks.
    for &other in clients.iter().filter(|&&r| r != me) {
        c.send(other, 0, b"done")?;
    }
    for _ in 1..clients.len() {
        c.recv_timeout(Duration::from_secs(120))?
            .ok_or("a client never finished")?;
    }
    for chunk in COUNTERS {
        c.acquire(chunk, Access::Read)?;
        let v = counter(c, chunk)?;
        c.release(chunk)?;
        let want = clients.len() as u64 * threads * k;
        if v != want {
            return Err(format!("chunk {chunk} holds {v}, expected {want}").into());
        }
        println!(
            "rank {me}: chunk {chunk} = {v} = {} clients x {threads} threads x {k}",
            clients.len()
        );
    }
    println!("rank {me}: {:.1} us per increment", per.as_secs_f64() * 1e6);

    // PUT by the first client, GET by the others, and the misuse errors.
    const BLOB: u64 = 9;
    let blob: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    c.malloc(BLOB, blob.len())?;
    if me == clients[0] {
        c.put(BLOB, &blob)?;
        for &other in &clients[1..] {
            c.send(other, 1, b"put")?;
        }
    } else {
        c.recv_timeout(Duration::from_secs(120))?
            .ok_or("the PUT never came")?;
        let mut got = vec![0u8; blob.len()];
        c.get(BLOB, &mut got)?;
        if got != blob {
            return Err("GET returned other bytes than the PUT".into());
        }
        println!(
            "rank {me}: GET of chunk {BLOB} returned the {} bytes of the PUT",
            got.len()
        );
    }
    let errors = [
        c.release(BLOB).map_err(|e| e.to_string()),
        c.put(BLOB, &blob[..10]).map_err(|e| e.to_string()),
        c.acquire(12345, Access::Read).map_err(|e| e.to_string()),
        c.malloc(77, 1 << 50).map(|_| ()).map_err(|e| e.to_string()),
        c.malloc_lst(Default::default(), &[78], &[1 << 31])
            .map(|_| ())
            .map_err(|e| e.to_string()),
    ];
    c.acquire(BLOB, Access::ReadWrite)?;
    let twice = c.acquire(BLOB, Access::Read).map_err(|e| e.to_string());
    c.release(BLOB)?;
    for e in errors.into_iter().chain([twice]) {
        println!(
            "rank {me}: misuse: {}",
            e.err().ok_or("misuse was accepted")?
        );
    }

    // The others leave holding shared copies (the last one even inside an
    // open read scope); the first client then writes both chunks: the homes
    // must not wait for acknowledgements from clients that have left.
    if me == clients[0] {
        for _ in 1..clients.len() {
            c.recv_timeout(Duration::from_secs(120))?
                .ok_or("a client never said goodbye")?;
        }
        for chunk in [BLOB, COUNTERS[1]] {
            c.acquire(chunk, Access::ReadWrite)?;
            c.release(chunk)?;
        }
        println!("rank {me}: wrote after the other clients left");
    } else {
        if me == *clients.last().unwrap() {
            c.acquire(COUNTERS[1], Access::Read)?;
        }
        c.send(clients[0], 2, b"bye")?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (k, threads) = (number("--k", 100), number("--threads", 1));
    let mut roles = Roles::new();
    for role in 1..=8 {
        roles = roles.role(role, move |c| increment(c, k, threads));
    }
    if let Err(e) = run(roles, args) {
        eprintln!("increment: {e}");
        std::process::exit(1);
    }
}
