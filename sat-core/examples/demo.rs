//! `make demo`: the S-DSM at work. Two client processes share chunks through
//! their server (Figure 11's topology: server 0, clients 1 and 2) and one of
//! them reacts to the other's writes through publish-subscribe.
//!
//! ```text
//! satrun -n 3 --topology sat-core/topologies/figure11.xml -- target/release/examples/demo [--rounds 5]
//! ```
//! Role 1, the writer, allocates a board (chunk 100) and writes a line on it
//! in each round. Role 2, the reader, subscribes to the board: each release
//! notifies it, and its handler reads the line in a READ scope, counts it
//! in a tally (chunk 101) that both share, and wakes the writer, which reads
//! the tally back before the next round. No message is sent by hand: only
//! chunks, scopes, a subscription and a rendezvous.

use std::time::Duration;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Client, Event};
use sat_core::protocol::Access;

const BOARD: u64 = 100;
const TALLY: u64 = 101;
const BOARD_BYTES: usize = 64;
/// The reader is subscribed; then, each round: the reader has counted.
const READY: u32 = 2;
const COUNTED: u32 = 4;
const DONE: u32 = 6;

fn line(d: &[u8]) -> String {
    let end = d.iter().position(|&b| b == 0).unwrap_or(d.len());
    String::from_utf8_lossy(&d[..end]).into_owned()
}

fn count(d: &[u8]) -> u64 {
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

fn writer(c: &Client, rounds: u64) -> RoleResult {
    c.malloc(BOARD, BOARD_BYTES)?;
    c.malloc(TALLY, 8)?;
    println!("writer: allocated the board (chunk {BOARD}, {BOARD_BYTES} bytes) and the tally (chunk {TALLY})");
    c.rendezvous(READY)?;
    for round in 1..=rounds {
        let text = format!("round {round}: hello from rank {}", c.rank());
        c.acquire(BOARD, Access::Write)?;
        c.with_data_mut(BOARD, |d| {
            d.fill(0);
            d[..text.len()].copy_from_slice(text.as_bytes());
        })?;
        c.release(BOARD)?;
        println!("writer: wrote \"{text}\"");
        // The reader's handler counts the line, then wakes us.
        c.rendezvous(COUNTED)?;
        c.acquire(TALLY, Access::Read)?;
        let seen = c.with_data(TALLY, count)?;
        c.release(TALLY)?;
        println!("writer: the tally says the reader has seen {seen} line(s)");
        if seen != round {
            return Err(format!("the tally is {seen} after round {round}").into());
        }
    }
    c.barrier(DONE, 2)?;
    Ok(())
}

fn reader(c: &Client, rounds: u64) -> RoleResult {
    let size = c.lookup(BOARD, Duration::from_secs(30))?;
    c.lookup(TALLY, Duration::from_secs(30))?;
    c.subscribe(BOARD, false, move |c, event| {
        let Event::Chunk { chunk, version, .. } = event else {
            return Ok(());
        };
        c.acquire(*chunk, Access::Read)?;
        let text = c.with_data(*chunk, line)?;
        c.release(*chunk)?;
        c.acquire(TALLY, Access::ReadWrite)?;
        let seen = c.with_data_mut(TALLY, |d| {
            let n = count(d) + 1;
            d[..8].copy_from_slice(&n.to_le_bytes());
            n
        })?;
        c.release(TALLY)?;
        println!(
            "reader: notified of version {version} of chunk {chunk}: \"{text}\" ({seen} seen)"
        );
        if seen == rounds {
            c.unsubscribe(*chunk)?;
        }
        c.wakeup(COUNTED)?;
        Ok(())
    })?;
    println!("reader: found the board ({size} bytes) and subscribed to it");
    c.wakeup(READY)?;
    // The handler runs while the role waits here.
    c.barrier(DONE, 2)?;
    println!("reader: done");
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(5u64);
    let roles = Roles::new()
        .role(1, move |c| writer(c, rounds))
        .role(2, move |c| reader(c, rounds));
    if let Err(e) = run(roles, args) {
        eprintln!("demo: {e}");
        std::process::exit(1);
    }
}
