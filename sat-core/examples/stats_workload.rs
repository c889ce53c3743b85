//! A workload whose statistics are known in advance, for the statistics
//! stream's test (`tests/stats.rs`) and as a small demonstration of it.
//!
//! The writer (role 1) allocates a chain of 3 chunks (4 KiB each) and 4
//! single chunks, computes for `--compute-ms` in its own code, writes the
//! chain 5 times and each single chunk once. The reader (role 2), once the
//! writer is done, looks everything up and reads the chain 4 times and each
//! single chunk once; its memory holds 4 chunks (topologies/stats.xml), so
//! looking up the singles evicts the chain. Each prints the messages it sent.
//!
//! ```text
//! SAT_STATS=stats satrun -n 4 --topology sat-core/topologies/stats.xml -- target/debug/examples/stats_workload
//! ```

use std::time::{Duration, Instant};

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;

const CHAIN: u64 = 100;
const CHAIN_CHUNKS: u64 = 3;
const SINGLES: [u64; 4] = [200, 201, 202, 203];
const CHUNK_SIZE: usize = 4096;
const CHAIN_WRITES: u32 = 5;
const CHAIN_READS: u32 = 4;
const START: u32 = 1;
const WRITTEN: u32 = 2;

fn writer(c: &Client, compute: Duration) -> RoleResult {
    c.set_chunk_size(CHUNK_SIZE)?;
    let chain = c.malloc(CHAIN, CHAIN_CHUNKS as usize * CHUNK_SIZE)?;
    let singles = SINGLES
        .iter()
        .map(|&id| c.malloc(id, 64))
        .collect::<Result<Vec<_>, _>>()?;
    c.barrier(START, 2)?;
    // The application's own work: the statistics must count it as user code.
    let began = Instant::now();
    let mut x = 1u64;
    while began.elapsed() < compute {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
    }
    std::hint::black_box(x);
    for round in 0..CHAIN_WRITES {
        let scope = c.write(&chain)?;
        scope.data_mut(|d| d.fill(round as u8 + 1))?;
        scope.release()?;
    }
    for (i, single) in singles.iter().enumerate() {
        let scope = c.write(single)?;
        scope.data_mut(|d| d.fill(i as u8 + 10))?;
        scope.release()?;
    }
    c.barrier(WRITTEN, 2)?;
    println!("writer: messages sent {}", c.messages_sent());
    Ok(())
}

fn reader(c: &Client) -> RoleResult {
    c.barrier(START, 2)?;
    c.barrier(WRITTEN, 2)?;
    let wait = Duration::from_secs(30);
    let chain = c.lookup_chain(CHAIN, CHAIN_CHUNKS, wait)?;
    for _ in 0..CHAIN_READS {
        let scope = c.read(&chain)?;
        let last = CHAIN_WRITES as u8;
        if !scope.data(|d| d.iter().all(|&b| b == last))? {
            return Err("the chain does not hold the writer's last version".into());
        }
        scope.release()?;
    }
    for (i, &id) in SINGLES.iter().enumerate() {
        let single = c.lookup_chain(id, 1, wait)?;
        let scope = c.read(&single)?;
        if !scope.data(|d| d.iter().all(|&b| b == i as u8 + 10))? {
            return Err(format!("chunk {id} does not hold what the writer wrote").into());
        }
        scope.release()?;
    }
    println!("reader: messages sent {}", c.messages_sent());
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let compute_ms = args
        .iter()
        .position(|a| a == "--compute-ms")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let compute = Duration::from_millis(compute_ms);
    let roles = Roles::new()
        .role(1, move |c| writer(c, compute))
        .role(2, reader);
    if let Err(e) = run(roles, args) {
        eprintln!("stats_workload: {e}");
        std::process::exit(1);
    }
}
