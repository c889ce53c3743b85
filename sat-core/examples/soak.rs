//! `make soak`: a long run under a steady mixed load, every byte read
//! checked, for memory that must stay bounded (`bench/soak.py` watches the
//! processes' resident sizes).
//!
//! ```text
//! satrun -n 16 --topology sat-core/topologies/soak.xml -- target/release/examples/soak --seconds 3600
//! ```
//! Every client, epoch after epoch:
//! - writes its own 16 KiB chunk whole (every word names it and the epoch);
//!   its neighbour is subscribed to it with the data, and checks each
//!   notification's bytes;
//! - reads its neighbour's chunk and checks it is one whole version of it,
//!   never older than the last one it saw;
//! - adds 1 to a shared counter in a READWRITE scope;
//! - writes a shared chain of 8 chunks whole, then reads it back and checks
//!   that one writer's epoch fills all of it;
//! - every 10 epochs passes a barrier of every client, after which all read
//!   what the first client wrote before it: the epoch (each must read
//!   exactly its own) and whether time is up (`--seconds`), then a second
//!   barrier, so that the next round's write waits for every read.
//!
//! At the end the counter must hold exactly clients x epochs. Each client
//! prints its figures; any check that fails ends the run with an error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Client, Event};
use sat_core::protocol::Access;

const OWN: u64 = 1000;
const OWN_BYTES: usize = 16 << 10;
const COUNTER: u64 = 10;
const STOP: u64 = 12;
const STOP_BYTES: usize = 16;
const CHAIN: u64 = 1 << 20;
const CHAIN_BYTES: usize = 32 << 10;
/// Barriers (ids): every 10 epochs (two: the round's write, then its
/// reads), and the last two.
const EPOCHS: u32 = 1;
const LAST: u32 = 3;
const READ_ALL: u32 = 5;
const STOP_READ: u32 = 7;

/// A version's stamp: its writer and epoch in every 8-byte word.
fn stamp(d: &mut [u8], rank: u32, epoch: u64) {
    let word = (u64::from(rank) << 48) | epoch;
    for w in d.chunks_exact_mut(8) {
        w.copy_from_slice(&word.to_le_bytes());
    }
}

/// The (writer, epoch) every word of `d` holds; (0, 0) for the zeros of a
/// chunk never written; an error for a torn version.
fn stamp_of(d: &[u8]) -> Result<(u32, u64), String> {
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().expect("8 bytes"));
    let first = word(&d[..8]);
    if let Some(i) = d.chunks_exact(8).position(|w| word(w) != first) {
        return Err(format!(
            "a torn version: word 0 holds {first:#x}, word {i} {:#x}",
            word(&d[i * 8..i * 8 + 8])
        ));
    }
    Ok(((first >> 48) as u32, first & 0xffff_ffff_ffff))
}

fn role(c: &Client, seconds: u64) -> RoleResult {
    let start = Instant::now();
    let clients = c.client_count();
    let first = c.topology().clients()[0];
    let rank = c.rank();
    let me = OWN + u64::from(rank);
    let neighbour_rank = {
        let all = c.topology().clients();
        let i = all.iter().position(|&r| r == rank).expect("a client");
        all[(i + 1) % all.len()]
    };
    let neighbour = OWN + u64::from(neighbour_rank);
    c.malloc(me, OWN_BYTES)?;
    c.malloc(COUNTER, 8)?;
    c.malloc(STOP, STOP_BYTES)?;
    let chain = c.malloc(CHAIN, CHAIN_BYTES)?;
    c.lookup(neighbour, Duration::from_secs(60))?;
    // The neighbour's releases, told with their bytes: each must be whole,
    // the neighbour's, and newer than the last told.
    let told = Arc::new(AtomicU64::new(0));
    let newest = Arc::new(AtomicU64::new(0));
    let (t, n) = (told.clone(), newest.clone());
    c.subscribe(neighbour, true, move |_, event| {
        let Event::Chunk { data, .. } = event else {
            return Err("a signal for a chunk subscription".into());
        };
        let data = data.as_ref().ok_or("a notification without its data")?;
        let (writer, epoch) = stamp_of(data)?;
        if writer != neighbour_rank || epoch <= n.load(Ordering::Relaxed) {
            return Err(format!(
                "a notification of rank {writer}'s epoch {epoch} after epoch {}",
                n.load(Ordering::Relaxed)
            )
            .into());
        }
        n.store(epoch, Ordering::Relaxed);
        t.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })?;
    c.barrier(EPOCHS, clients)?;
    let mut seen = 0u64;
    let mut checked = 0u64;
    let mut epoch = 0u64;
    loop {
        epoch += 1;
        c.acquire(me, Access::Write)?;
        c.with_data_mut(me, |d| stamp(d, rank, epoch))?;
        c.release(me)?;

        c.acquire(neighbour, Access::Read)?;
        let (writer, e) = c.with_data(neighbour, stamp_of)??;
        c.release(neighbour)?;
        if (writer != neighbour_rank && e != 0) || e < seen {
            return Err(format!("read rank {writer}'s epoch {e} after epoch {seen}").into());
        }
        seen = e;

        c.acquire(COUNTER, Access::ReadWrite)?;
        c.with_data_mut(COUNTER, |d| {
            let v = u64::from_le_bytes(d[..8].try_into().unwrap());
            d[..8].copy_from_slice(&(v + 1).to_le_bytes());
        })?;
        c.release(COUNTER)?;

        let scope = c.write(&chain)?;
        scope.data_mut(|d| stamp(d, rank, epoch))?;
        scope.release()?;
        let scope = c.read(&chain)?;
        scope.data(stamp_of)??;
        scope.release()?;
        checked += (OWN_BYTES + CHAIN_BYTES) as u64;

        if epoch.is_multiple_of(10) {
            // The first client writes the round and whether time is up;
            // after the barrier every client must read exactly that.
            if rank == first {
                let up = start.elapsed() >= Duration::from_secs(seconds);
                c.acquire(STOP, Access::Write)?;
                c.with_data_mut(STOP, |d| {
                    d[..8].copy_from_slice(&epoch.to_le_bytes());
                    d[8] = u8::from(up);
                })?;
                c.release(STOP)?;
            }
            c.barrier(EPOCHS, clients)?;
            c.acquire(STOP, Access::Read)?;
            let (round, stop) = c.with_data(STOP, |d| {
                (u64::from_le_bytes(d[..8].try_into().unwrap()), d[8] == 1)
            })?;
            c.release(STOP)?;
            // Nobody writes the next round before everyone has read this one.
            c.barrier(STOP_READ, clients)?;
            if round != epoch {
                return Err(format!(
                    "after the barrier of epoch {epoch}, chunk {STOP} holds the write of epoch                      {round}: a release before a barrier is not seen after it"
                )
                .into());
            }
            if stop {
                break;
            }
        }
    }
    c.barrier(LAST, clients)?;
    c.acquire(COUNTER, Access::Read)?;
    let total = c.with_data(COUNTER, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))?;
    c.release(COUNTER)?;
    let want = u64::from(clients) * epoch;
    if total != want {
        return Err(format!("the counter holds {total}, not {clients} x {epoch} = {want}").into());
    }
    // Nobody unsubscribes before everyone has written its last epoch.
    c.barrier(READ_ALL, clients)?;
    c.unsubscribe(neighbour)?;
    println!(
        "rank {rank}: {epoch} epochs in {:.0} s, {} MiB checked, {} notifications checked, \
         counter {total}",
        start.elapsed().as_secs_f64(),
        checked >> 20,
        told.load(Ordering::Relaxed)
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let roles = Roles::new().role(1, move |c| role(c, seconds));
    if let Err(e) = run(roles, args) {
        eprintln!("soak: {e}");
        std::process::exit(1);
    }
}
