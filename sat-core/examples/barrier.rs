//! Every client, round after round, increments a shared counter and enters
//! a barrier of all clients; after it, the counter must hold at least every
//! increment of the round. A process let through early would read less.
//!
//! ```text
//! satrun -n 10 --topology sat-core/topologies/eight-clients.xml -- target/release/examples/barrier --rounds 1000
//! ```

use std::time::Instant;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::Access;

const COUNTER: u64 = 3;
const BAR_ID: u32 = 1;

fn counter(c: &Client) -> Result<u64, sat_core::SatError> {
    c.with_data(COUNTER, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))
}

fn role(c: &Client, rounds: u64) -> RoleResult {
    let n = c.client_count();
    c.malloc(COUNTER, 8)?;
    let start = Instant::now();
    for round in 0..rounds {
        c.acquire(COUNTER, Access::ReadWrite)?;
        let v = counter(c)? + 1;
        c.with_data_mut(COUNTER, |d| d[..8].copy_from_slice(&v.to_le_bytes()))?;
        c.release(COUNTER)?;
        c.barrier(BAR_ID, n)?;
        c.acquire(COUNTER, Access::Read)?;
        let seen = counter(c)?;
        c.release(COUNTER)?;
        let due = n as u64 * (round + 1);
        if seen < due {
            return Err(format!(
                "round {round}: through the barrier with the counter at {seen}, before all {n} increments ({due})"
            )
            .into());
        }
    }
    println!(
        "rank {}: {rounds} rounds of {n}, never through early ({:.0} us per round)",
        c.rank(),
        start.elapsed().as_secs_f64() * 1e6 / rounds.max(1) as f64
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    if let Err(e) = run(Roles::new().role(1, move |c| role(c, rounds)), args) {
        eprintln!("barrier: {e}");
        std::process::exit(1);
    }
}
