//! MALLOC and LOOKUP across two servers, in both orders, and their misuse.
//! Run with the two-server topology (ranks 2 and 4 play role 1, 3 and 5
//! role 2):
//!
//! ```text
//! satrun -n 6 --topology sat-core/topologies/two-servers.xml -- target/release/examples/alloc
//! ```
//! Chunk 100 lives on server 0 and chunk 101 on server 1 (home = id mod 2).

use std::time::Duration;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::ProtocolId;
use sat_core::SatError;

const LOOKUP_FIRST: u64 = 100;
const MALLOC_FIRST: u64 = 101;
const NOBODY: u64 = 999;

fn nobody_allocates(c: &Client) -> RoleResult {
    match c.lookup(NOBODY, Duration::from_millis(200)) {
        Err(SatError::Timeout(msg)) => println!("rank {}: lookup {NOBODY}: {msg}", c.rank()),
        other => return Err(format!("lookup of a chunk nobody allocates gave {other:?}").into()),
    }
    Ok(())
}

/// Role 1 (ranks 2 and 4).
fn allocator(c: &Client) -> RoleResult {
    nobody_allocates(c)?;
    if c.rank() == 2 {
        // Wait until both lookers say they are about to LOOKUP, give their
        // requests time to park at the home, then allocate.
        for _ in 0..2 {
            c.recv()?;
        }
        std::thread::sleep(Duration::from_millis(1000));
        c.malloc(LOOKUP_FIRST, 4096)?;
        println!("rank 2: malloc {LOOKUP_FIRST} after the lookups");
        c.malloc(MALLOC_FIRST, 512)?;
        println!("rank 2: malloc {MALLOC_FIRST} again with the same size joins it");
    } else {
        c.malloc(MALLOC_FIRST, 512)?;
        for looker in [3, 5] {
            c.send(looker, 1, b"allocated")?;
        }
        match c.malloc(MALLOC_FIRST, 1024) {
            Err(SatError::Usage(msg)) => println!("rank 4: {msg}"),
            other => return Err(format!("a second size gave {other:?}").into()),
        }
        chain_that_clashes(c)?;
    }
    Ok(())
}

/// A chain MALLOC of which one chunk exists with another size fails,
/// having allocated none of its chunks (on both servers): the chain can be
/// allocated again as meant.
fn chain_that_clashes(c: &Client) -> RoleResult {
    let ids = [200, 201, MALLOC_FIRST, 202, 203];
    match c.malloc_lst(ProtocolId::HomeMesi, &ids, &[64, 64, 1024, 64, 64]) {
        Err(SatError::Usage(msg)) => println!("rank {}: chain: {msg}", c.rank()),
        other => return Err(format!("a chain with a clash gave {other:?}").into()),
    }
    for chunk in [200, 201, 202, 203] {
        match c.lookup(chunk, Duration::from_millis(100)) {
            Err(SatError::Timeout(_)) => {}
            other => {
                return Err(
                    format!("chunk {chunk} after the failed chain MALLOC: {other:?}").into(),
                )
            }
        }
    }
    let chain = c.malloc_lst(ProtocolId::HomeMesi, &[200, 201, 202, 203], &[128])?;
    println!(
        "rank {}: the failed chain MALLOC allocated none of its chunks; allocated again: {} bytes",
        c.rank(),
        chain.size()
    );
    Ok(())
}

/// Role 2 (ranks 3 and 5).
fn looker(c: &Client) -> RoleResult {
    nobody_allocates(c)?;
    c.send(2, 0, b"looking up")?;
    let size = c.lookup(LOOKUP_FIRST, Duration::from_secs(30))?;
    println!(
        "rank {}: lookup {LOOKUP_FIRST} waited for its malloc: {size} bytes",
        c.rank()
    );
    let m = c.recv()?;
    assert_eq!(m.data, b"allocated");
    let size = c.lookup(MALLOC_FIRST, Duration::from_secs(30))?;
    println!(
        "rank {}: lookup {MALLOC_FIRST} after its malloc: {size} bytes",
        c.rank()
    );
    Ok(())
}

fn main() {
    let roles = Roles::new().role(1, allocator).role(2, looker);
    if let Err(e) = run(roles, std::env::args()) {
        eprintln!("alloc: {e}");
        std::process::exit(1);
    }
}
