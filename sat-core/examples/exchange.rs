//! Every client sends a message to every other client each round, through
//! the servers, and checks what it receives: the sender, the per-sender order
//! and every byte. The test programs and the README's demo use it.
//!
//! ```text
//! satrun -n 3 --topology sat-core/topologies/figure11.xml -- target/release/examples/exchange --rounds 100
//! ```
//! Options: `--rounds N` (default 10), `--bytes B` per message (default 256),
//! `--forever` (until killed; for the failure tests).

use std::collections::HashMap;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;

struct Options {
    rounds: u64,
    bytes: usize,
    forever: bool,
    /// `--late RANK:MS`: after the exchange, RANK works for MS milliseconds
    /// and then sends a message to itself through its server, which proves
    /// the server outlives the clients that returned earlier.
    late: Option<(u32, u64)>,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        rounds: 10,
        bytes: 256,
        forever: false,
        late: None,
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("{name} takes a number"))
        };
        match a.as_str() {
            "--rounds" => o.rounds = value("--rounds")?,
            "--bytes" => o.bytes = value("--bytes")? as usize,
            "--forever" => o.forever = true,
            "--late" => {
                let v = it.next().ok_or("--late takes RANK:MS")?;
                let (r, ms) = v.split_once(':').ok_or("--late takes RANK:MS")?;
                o.late = Some((
                    r.parse().map_err(|_| "--late: bad rank")?,
                    ms.parse().map_err(|_| "--late: bad milliseconds")?,
                ));
            }
            "--topology" => {
                it.next();
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

/// The bytes `from` sends `to` in `round`: different for every triple (the
/// triple itself leads, then bytes that depend on it and on the position).
fn pattern(from: u32, to: u32, round: u64, len: usize) -> Vec<u8> {
    let mut id = [0u8; 16];
    id[..4].copy_from_slice(&from.to_le_bytes());
    id[4..8].copy_from_slice(&to.to_le_bytes());
    id[8..].copy_from_slice(&round.to_le_bytes());
    let mut x = (from as u64) << 48 ^ (to as u64) << 32 ^ round ^ 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|i| {
            if i < id.len() {
                return id[i];
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn exchange(c: &Client, o: &Options) -> RoleResult {
    let me = c.rank();
    let peers: Vec<u32> = c
        .topology()
        .clients()
        .into_iter()
        .filter(|&r| r != me)
        .collect();
    println!(
        "rank {me} pid {} ready, role {}, server {}, peers {peers:?}",
        std::process::id(),
        c.role(),
        c.server()
    );
    let mut next_round: HashMap<u32, u64> = peers.iter().map(|&p| (p, 0)).collect();
    let mut received = 0u64;
    let mut round = 0u64;
    let start = std::time::Instant::now();
    while o.forever || round < o.rounds {
        for &p in &peers {
            c.send(p, round as u32, &pattern(me, p, round, o.bytes))?;
        }
        for _ in 0..peers.len() {
            let m = c.recv()?;
            let expected = next_round
                .get_mut(&m.from)
                .ok_or_else(|| format!("message from unexpected rank {}", m.from))?;
            if m.tag as u64 != *expected {
                return Err(format!(
                    "from {}: round {} arrived when {} was due",
                    m.from, m.tag, expected
                )
                .into());
            }
            if m.data != pattern(m.from, me, *expected, o.bytes) {
                return Err(format!("from {}: round {} carries wrong bytes", m.from, m.tag).into());
            }
            *expected += 1;
            received += 1;
        }
        round += 1;
    }
    let elapsed = start.elapsed();
    println!(
        "rank {me} exchanged {received} messages with {} clients",
        peers.len()
    );
    if round > 0 {
        println!(
            "rank {me}: {round} rounds of {} bytes in {:.1} ms ({:.1} us per round, servers relaying every message)",
            o.bytes,
            elapsed.as_secs_f64() * 1e3,
            elapsed.as_secs_f64() * 1e6 / round as f64
        );
    }
    if let Some((rank, ms)) = o.late {
        if rank == me {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            c.send(me, 7, b"still served")?;
            let m = c.recv()?;
            if m.from != me || m.data != b"still served" {
                return Err(format!("late message came back wrong: {m:?}").into());
            }
            println!("rank {me} was still served after {ms} ms");
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let o = match options(&args) {
        Ok(o) => std::sync::Arc::new(o),
        Err(e) => {
            eprintln!("exchange: {e}");
            std::process::exit(2);
        }
    };
    let mut roles = Roles::new();
    for role in 1..=16 {
        let o = o.clone();
        roles = roles.role(role, move |c| exchange(c, &o));
    }
    if let Err(e) = run(roles, args) {
        eprintln!("exchange: {e}");
        std::process::exit(1);
    }
}
