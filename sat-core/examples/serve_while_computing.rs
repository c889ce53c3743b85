//! A role that computes between its waits serves its subscriptions with
//! `Client::run_handlers`: handlers otherwise run only while the role waits
//! (barrier, rendezvous, recv) and after it returns.
//!
//! ```text
//! satrun -n 3 --topology sat-core/topologies/figure11.xml -- target/release/examples/serve_while_computing
//! ```
//! Role 1 writes a chunk three times; role 2 subscribes to it, then
//! "computes" (never waits) and calls `run_handlers` between steps until its
//! handler has seen the last write. Role 2 tells role 1 when to write only
//! after its own last wait, so that every handler it runs, runs inside
//! `run_handlers`. It also checks that `run_handlers` is refused from
//! another thread and from a handler.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Client, Event};
use sat_core::protocol::Access;
use sat_core::SatError;

const CHUNK: u64 = 70;
const WRITES: u64 = 3;
const SUBSCRIBED: u32 = 1;
const DONE: u32 = 2;
const WRITER: u32 = 1;
/// How long the computing role may go without seeing the last write before
/// it reports a failure (not a pace: it stops as soon as it sees it).
const GIVE_UP: Duration = Duration::from_secs(60);

fn writer(c: &Client) -> RoleResult {
    c.malloc(CHUNK, 64)?;
    c.barrier(SUBSCRIBED, 2)?;
    // The go comes once the other role has left its last wait.
    c.recv_timeout(GIVE_UP)?
        .ok_or("no go from the computing role")?;
    for v in 1..=WRITES {
        c.acquire(CHUNK, Access::Write)?;
        c.with_data_mut(CHUNK, |d| d[..8].copy_from_slice(&v.to_le_bytes()))?;
        c.release(CHUNK)?;
    }
    c.barrier(DONE, 2)?;
    Ok(())
}

fn computer(c: &Client) -> RoleResult {
    c.malloc(CHUNK, 64)?;
    let seen = Arc::new(AtomicU64::new(0));
    let in_handler = Arc::new(AtomicU64::new(0));
    {
        let (seen, in_handler) = (seen.clone(), in_handler.clone());
        c.subscribe(CHUNK, false, move |c, e| {
            // A handler may not run handlers: they run one at a time.
            match c.run_handlers() {
                Err(SatError::Usage(_)) => {
                    in_handler.fetch_add(1, Ordering::Relaxed);
                }
                other => return Err(format!("run_handlers in a handler: {other:?}").into()),
            }
            // The handler reads the chunk, as a real one would.
            c.acquire(CHUNK, Access::Read)?;
            let v = c.with_data(CHUNK, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))?;
            c.release(CHUNK)?;
            if let Event::Chunk { chunk, .. } = e {
                assert_eq!(*chunk, CHUNK);
            }
            seen.fetch_max(v, Ordering::Relaxed);
            Ok(())
        })?;
    }
    // Another thread of the process may not run them either.
    let elsewhere = std::thread::scope(|s| s.spawn(|| c.run_handlers()).join().unwrap());
    match elsewhere {
        Err(SatError::Usage(why)) => println!("computer: from another thread: {why}"),
        other => return Err(format!("run_handlers from another thread: {other:?}").into()),
    }
    c.barrier(SUBSCRIBED, 2)?;
    // Nothing was written yet: nothing to run.
    let before = c.run_handlers()?;
    c.send(WRITER, 0, b"go")?;
    // Compute, never waiting; serve the subscription between steps.
    let (mut ran, mut steps, mut work) = (0usize, 0u64, 1u64);
    let began = Instant::now();
    while seen.load(Ordering::Relaxed) < WRITES {
        for _ in 0..1000 {
            work = work.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(work);
        steps += 1;
        ran += c.run_handlers()?;
        if began.elapsed() > GIVE_UP {
            return Err(format!(
                "the handler saw version {} of {WRITES} after {steps} steps ({ran} handler runs)",
                seen.load(Ordering::Relaxed)
            )
            .into());
        }
    }
    println!(
        "computer: {before} handler runs before the writes, {ran} during {steps} steps of \
         computing; the handler saw write {WRITES}; refused in a handler {} times",
        in_handler.load(Ordering::Relaxed)
    );
    c.unsubscribe(CHUNK)?;
    c.barrier(DONE, 2)?;
    Ok(())
}

fn main() {
    let roles = Roles::new().role(1, writer).role(2, computer);
    if let Err(e) = run(roles, std::env::args().collect::<Vec<String>>()) {
        eprintln!("serve_while_computing: {e}");
        std::process::exit(1);
    }
}
