//! Clients with room for 4 chunks of data (the topology's `<memory
//! capacity="4">`) increment counters in many more chunks: their local data
//! is evicted, least recently used first, and every value read back at the
//! end is still exact (eviction never loses the last released version).
//!
//! ```text
//! satrun -n 6 --topology sat-core/topologies/small-memory.xml -- target/release/examples/capacity --chunks 40 --rounds 5
//! ```

use std::time::Duration;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::Access;

const BASE: u64 = 1000;

fn counter(c: &Client, chunk: u64) -> Result<u64, sat_core::SatError> {
    c.with_data(chunk, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))
}

fn role(c: &Client, chunks: u64, rounds: u64) -> RoleResult {
    let me = c.rank();
    let clients = c.topology().clients();
    let ids: Vec<u64> = (BASE..BASE + chunks).collect();
    for &id in &ids {
        c.malloc(id, 64)?;
    }
    // Each client walks the chunks from its own starting point, so the
    // clients contend on different chunks at different times.
    let offset = (me as u64 * 7) % chunks;
    for _ in 0..rounds {
        for i in 0..chunks {
            let id = BASE + (i + offset) % chunks;
            c.acquire(id, Access::ReadWrite)?;
            let v = counter(c, id)? + 1;
            c.with_data_mut(id, |d| d[..8].copy_from_slice(&v.to_le_bytes()))?;
            c.release(id)?;
        }
    }
    for &other in clients.iter().filter(|&&r| r != me) {
        c.send(other, 0, b"done")?;
    }
    for _ in 1..clients.len() {
        c.recv_timeout(Duration::from_secs(120))?
            .ok_or("a client never finished")?;
    }
    let want = clients.len() as u64 * rounds;
    for &id in &ids {
        c.acquire(id, Access::Read)?;
        let v = counter(c, id)?;
        c.release(id)?;
        if v != want {
            return Err(format!("chunk {id} holds {v}, expected {want}").into());
        }
    }
    let f = c.footprint();
    println!(
        "rank {me}: all {chunks} chunks = {want} = {} clients x {rounds} rounds",
        clients.len()
    );
    println!(
        "rank {me}: footprint {} chunks ({} bytes), {} evictions",
        f.chunks, f.bytes, f.evictions
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
    let (chunks, rounds) = (number("--chunks", 40), number("--rounds", 5));
    let mut roles = Roles::new();
    for r in 1..=8 {
        roles = roles.role(r, move |c| role(c, chunks, rounds));
    }
    if let Err(e) = run(roles, args) {
        eprintln!("capacity: {e}");
        std::process::exit(1);
    }
}
