//! Figure 9: a publisher, a subscriber, and a handler that unsubscribes;
//! then a publisher releasing many writes in a row.
//!
//! ```text
//! satrun -n 5 --topology sat-core/topologies/three-tasks.xml -- target/release/examples/pubsub [--writes 10000] [--with-data]
//! ```
//! Role 1 publishes, role 2 subscribes (Figure 9, then the burst), role 3
//! subscribes with a handler that never unsubscribes: the run must still end
//! once nothing can notify it any more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Client, Event};
use sat_core::protocol::Access;

const CHUNK: u64 = 40;
const BURST: u64 = 41;
/// Rendezvous of Figure 9 (even: coordinated by server 0).
const RDV_ID: u32 = 2;
/// The publisher waits in this barrier for both subscribers of the burst.
/// (Not a rendezvous woken twice: wakeups that come before a rendezvous
/// count as one, so the second rendezvous would wait forever.)
const BURST_BAR: u32 = 3;
const BAR_ID: u32 = 4;
/// Raised by the publisher after its burst.
const SIGNAL: u32 = 9;
/// The publisher's rank (role 1 in three-tasks.xml).
const PUBLISHER: u32 = 2;

fn value(d: &[u8]) -> u64 {
    u64::from_le_bytes(d[..8].try_into().unwrap())
}

fn set(c: &Client, chunk: u64, v: u64) -> Result<(), sat_core::SatError> {
    c.acquire(chunk, Access::Write)?;
    c.with_data_mut(chunk, |d| d[..8].copy_from_slice(&v.to_le_bytes()))?;
    c.release(chunk)
}

fn publisher(c: &Client, writes: u64) -> RoleResult {
    c.malloc(CHUNK, 64)?;
    // Wait for the subscriber to subscribe to the chunk.
    c.rendezvous(RDV_ID)?;
    set(c, CHUNK, 42)?;
    println!("publisher: wrote 42");
    // The subscriber's handler runs while its role waits in this barrier;
    // its message (sent from the handler) lets the publisher in.
    let m = c
        .recv_timeout(Duration::from_secs(60))?
        .ok_or("no word from the handler")?;
    println!("publisher: {}", String::from_utf8_lossy(&m.data));
    c.barrier(BAR_ID, 2)?;

    c.malloc(BURST, 64)?;
    c.barrier(BURST_BAR, 3)?;
    for v in 1..=writes {
        set(c, BURST, v)?;
    }
    println!("publisher: released {writes} writes");
    c.raise(SIGNAL)?;
    Ok(())
}

fn subscriber(c: &Client, writes: u64, with_data: bool) -> RoleResult {
    let size = c.lookup(CHUNK, Duration::from_secs(30))?;
    let runs = Arc::new(AtomicU64::new(0));
    let r = runs.clone();
    c.subscribe(CHUNK, with_data, move |c, event| {
        let Event::Chunk {
            chunk,
            version,
            data,
        } = event
        else {
            return Err("a signal for a chunk subscription".into());
        };
        let n = r.fetch_add(1, Ordering::SeqCst) + 1;
        c.acquire(*chunk, Access::ReadWrite)?;
        let seen = c.with_data(*chunk, value)?;
        println!(
            "handler: run {n}, chunk {chunk} version {version}, read {seen}, data in event: {}",
            data.as_deref()
                .map_or("none".to_string(), |d| value(d).to_string())
        );
        c.with_data_mut(*chunk, |d| {
            d[..8].copy_from_slice(&(seen + 1).to_le_bytes())
        })?;
        c.release(*chunk)?;
        // Afterwards every notification is discarded, including the one of
        // the release just above.
        c.unsubscribe(*chunk)?;
        c.send(PUBLISHER, 0, b"the handler ran")?;
        Ok(())
    })?;
    println!("subscriber: subscribed to chunk {CHUNK} ({size} bytes)");
    c.wakeup(RDV_ID)?;
    // The handler runs while the role waits here.
    c.barrier(BAR_ID, 2)?;
    println!(
        "subscriber: through the barrier after {} handler run(s)",
        runs.load(Ordering::SeqCst)
    );

    // The burst: every version the handler sees is newer than the last,
    // and it ends having seen the last one.
    c.lookup(BURST, Duration::from_secs(30))?;
    let seen = Arc::new(Mutex::new((0u64, 0u64, 0u64))); // (runs, last value, last version)
    let s = seen.clone();
    c.subscribe(BURST, with_data, move |c, event| {
        let Event::Chunk {
            chunk,
            version,
            data,
        } = event
        else {
            return Err("a signal for a chunk subscription".into());
        };
        let v = match data {
            Some(d) => value(d),
            None => {
                c.acquire(*chunk, Access::Read)?;
                let v = c.with_data(*chunk, value)?;
                c.release(*chunk)?;
                v
            }
        };
        // Value i is written by the i-th release, so it is version i: a
        // notification announces a newer version than the one before, and
        // the data read is at least that version (a READ may find a newer).
        let mut g = s.lock().unwrap();
        if *version <= g.2 || v < *version || v < g.1 {
            return Err(format!(
                "went back: version {version} after {}, value {v} after {}",
                g.2, g.1
            )
            .into());
        }
        *g = (g.0 + 1, v, *version);
        if v == writes {
            c.unsubscribe(*chunk)?;
            println!(
                "subscriber: saw the last value {v} after {} handler runs",
                g.0
            );
        }
        Ok(())
    })?;
    // Misuse is an error that says what to do.
    let errors = [
        c.subscribe(BURST, false, |_, _| Ok(())),
        c.subscribe(12345, false, |_, _| Ok(())),
        c.unsubscribe(CHUNK),
        c.barrier(50, 0),
    ];
    for e in errors {
        println!(
            "subscriber: misuse: {}",
            e.err().ok_or("misuse was accepted")?
        );
    }
    c.barrier(BURST_BAR, 3)?;
    Ok(())
}

/// Subscribes and never unsubscribes: the run ends when nothing can notify.
fn watcher(c: &Client, writes: u64) -> RoleResult {
    c.lookup(BURST, Duration::from_secs(30))?;
    c.subscribe(BURST, false, move |_, event| {
        if let Event::Chunk { version, .. } = event {
            if *version == writes {
                println!("watcher: notified of the last version {version}");
            }
        }
        Ok(())
    })?;
    // A signal: publish-subscribe without a chunk.
    c.lookup(CHUNK, Duration::from_secs(30))?;
    c.subscribe_signal(SIGNAL, |c, event| {
        println!("watcher: {event:?} raised");
        c.unsubscribe_signal(SIGNAL)?;
        // A handler may subscribe too.
        c.subscribe(CHUNK, true, |_, _| Ok(()))?;
        println!("watcher: subscribed to chunk {CHUNK} from a handler");
        Ok(())
    })?;
    c.barrier(BURST_BAR, 3)?;
    println!("watcher: subscribed for good");
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let writes = args
        .iter()
        .position(|a| a == "--writes")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000u64);
    let with_data = args.iter().any(|a| a == "--with-data");
    let roles = Roles::new()
        .role(1, move |c| publisher(c, writes))
        .role(2, move |c| subscriber(c, writes, with_data))
        .role(3, move |c| watcher(c, writes));
    if let Err(e) = run(roles, args) {
        eprintln!("pubsub: {e}");
        std::process::exit(1);
    }
}
