//! Every client does K READWRITE-increment-RELEASE on shared counters; at the
//! end every client reads them and checks they hold exactly clients x K.
//!
//! ```text
//! satrun -n 6 --topology sat-core/topologies/two-servers.xml -- target/release/examples/increment --k 200
//!     [--threads T] [--on chunks|chain|map] [--protocol mesi|home-only]
//! ```
//! `--on chunks` (the default): chunk 7 lives on server 1 and chunk 8 on
//! server 0 (home = id mod 2); then PUT/GET, misuse, and clients leaving.
//! `--on chain`: one chain of three 16-byte chunks (100 to 102, homes on
//! both servers), acquired as a whole; its counters sit at the start of each
//! chunk and one straddles the boundary of the first two chunks.
//! `--on map`: the same chain in memory the client MAPs, used in place.

use std::time::Duration;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Chain, Client};
use sat_core::protocol::{Access, ProtocolId};

const COUNTERS: [u64; 2] = [7, 8];

/// The chain of `--on chain` and `--on map`: three chunks of this size.
const CHAIN_BASE: u64 = 100;
const CHAIN_CHUNK: usize = 16;
/// Counter offsets in the chain: one per chunk, and one across the boundary
/// of chunks 100 and 101 (pointer arithmetic across chunks, section 2.2).
const CHAIN_COUNTERS: [usize; 4] = [0, 12, 24, 40];

fn read_u64(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().unwrap())
}

/// Increments every counter of the chain under one READWRITE scope; on a
/// MAP'd chain, also checks the data is the caller's memory (`mapped_at`).
fn increment_chain(c: &Client, chain: &Chain, mapped_at: Option<usize>) -> Result<(), String> {
    let scope = c.readwrite(chain).map_err(|e| e.to_string())?;
    scope
        .data_mut(|d| {
            if let Some(addr) = mapped_at {
                if d.as_ptr() as usize != addr {
                    return Err("MAP'd data was copied: the chain does not use the memory given");
                }
            }
            for at in CHAIN_COUNTERS {
                let v = read_u64(d, at) + 1;
                d[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            Ok(())
        })
        .map_err(|e| e.to_string())??;
    scope.release().map_err(|e| e.to_string())
}

fn counter(c: &Client, chunk: u64) -> Result<u64, sat_core::SatError> {
    c.with_data(chunk, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))
}

/// Where the counters are (`--on`).
#[derive(Clone, Copy, PartialEq)]
enum On {
    Chunks,
    Chain,
    Map,
}

/// `threads` threads of this client each do `k` increments of each counter.
fn increment(c: &Client, k: u64, threads: u64, on: On, protocol: ProtocolId) -> RoleResult {
    let me = c.rank();
    let clients = c.topology().clients();
    if on != On::Chunks {
        return increment_on_chain(c, k, threads, on, protocol);
    }
    for chunk in COUNTERS {
        c.malloc_with(protocol, chunk, 8)?;
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
    meet(c, &clients)?;
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
        c.malloc(0xFFFF_FF00_0000_0001, 8)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        c.malloc_lst(Default::default(), &[78], &[1 << 31])
            .map(|_| ())
            .map_err(|e| e.to_string()),
        c.abort(BLOB).map_err(|e| e.to_string()),
        c.map(
            Default::default(),
            0xFFFF_FF00_0000_0002,
            Box::new(vec![0u8; 8]),
        )
        .map(|_| ())
        .map_err(|e| e.to_string()),
        c.set_chunk_size(2 << 30).map_err(|e| e.to_string()),
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

/// Tells every other client this one is done, and waits for all of them.
fn meet(c: &Client, clients: &[u32]) -> RoleResult {
    for &other in clients.iter().filter(|&&r| r != c.rank()) {
        c.send(other, 0, b"done")?;
    }
    for _ in 1..clients.len() {
        c.recv_timeout(Duration::from_secs(120))?
            .ok_or("a client never finished")?;
    }
    Ok(())
}

fn increment_on_chain(
    c: &Client,
    k: u64,
    threads: u64,
    on: On,
    protocol: ProtocolId,
) -> RoleResult {
    let me = c.rank();
    let clients = c.topology().clients();
    c.set_chunk_size(CHAIN_CHUNK)?;
    let size = 3 * CHAIN_CHUNK;
    let (chain, mapped_at) = if on == On::Map {
        let memory = vec![0u8; size].into_boxed_slice();
        let addr = memory.as_ptr() as usize;
        (c.map(protocol, CHAIN_BASE, Box::new(memory))?, Some(addr))
    } else {
        (c.malloc_with(protocol, CHAIN_BASE, size)?, None)
    };
    if chain.len() != 3 {
        return Err(format!("a chain of {size} bytes has {} chunks, not 3", chain.len()).into());
    }
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| (0..k).try_for_each(|_| increment_chain(c, &chain, mapped_at))))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("no panic"))
    })?;
    let per = start.elapsed() / (k as u32).max(1);
    meet(c, &clients)?;
    let scope = c.read(&chain)?;
    let values = scope.data(|d| CHAIN_COUNTERS.map(|at| read_u64(d, at)))?;
    scope.release()?;
    let want = clients.len() as u64 * threads * k;
    for (at, v) in CHAIN_COUNTERS.iter().zip(values) {
        if v != want {
            return Err(format!(
                "the counter at byte {at} of the chain holds {v}, expected {want}"
            )
            .into());
        }
    }
    if let Some(addr) = mapped_at {
        // The memory comes back with the counters in it: it was used in place.
        let memory = c.unmap(&chain)?;
        let bytes = memory.bytes();
        if bytes.as_ptr() as usize != addr
            || CHAIN_COUNTERS.iter().any(|&at| read_u64(bytes, at) != want)
        {
            return Err("the memory given back by UNMAP is not the chain's".into());
        }
        println!("rank {me}: UNMAP gave back the same memory, holding every counter");
    } else {
        // FREE gives SAT's memory of the chain back; the chunks stay in the
        // S-DSM, and the handle is refused from then on.
        c.free(&chain)?;
        match c.read(&chain) {
            Err(e) if e.to_string().contains("was given back in this process") => {}
            Err(e) => return Err(format!("a READ of a freed chain said: {e}").into()),
            Ok(_) => return Err("a READ of a freed chain was granted".into()),
        }
        let again = c.lookup_chain(CHAIN_BASE, 3, Duration::from_secs(5))?;
        let scope = c.read(&again)?;
        let values = scope.data(|d| CHAIN_COUNTERS.map(|at| read_u64(d, at)))?;
        scope.release()?;
        if values != [want; CHAIN_COUNTERS.len()] {
            return Err(format!("the chain looked up after FREE holds {values:?}").into());
        }
        println!("rank {me}: FREE gave the chain back; a LOOKUP finds every counter again");
    }
    let what = if on == On::Map {
        "MAP'd chain"
    } else {
        "chain"
    };
    println!(
        "rank {me}: {what} of 3 chunks: every counter = {want} = {} clients x {threads} threads x {k}",
        clients.len()
    );
    println!(
        "rank {me}: {:.1} us per chain increment",
        per.as_secs_f64() * 1e6
    );
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
    let word = |name: &str, default: &'static str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default.to_string(), |v| v.clone())
    };
    let (k, threads) = (number("--k", 100), number("--threads", 1));
    let on = match word("--on", "chunks").as_str() {
        "chunks" => On::Chunks,
        "chain" => On::Chain,
        "map" => On::Map,
        other => {
            eprintln!("increment: --on takes chunks, chain or map, not {other}");
            std::process::exit(2);
        }
    };
    let protocol = match word("--protocol", "mesi").as_str() {
        "mesi" => ProtocolId::HomeMesi,
        "home-only" => ProtocolId::HomeOnly,
        other => {
            eprintln!("increment: --protocol takes mesi or home-only, not {other}");
            std::process::exit(2);
        }
    };
    let mut roles = Roles::new();
    for role in 1..=8 {
        roles = roles.role(role, move |c| increment(c, k, threads, on, protocol));
    }
    if let Err(e) = run(roles, args) {
        eprintln!("increment: {e}");
        std::process::exit(1);
    }
}
