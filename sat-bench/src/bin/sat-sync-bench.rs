//! The synchronization benchmark: what a barrier round and a notification
//! cost over real processes, next to the raw transport round trip of a small
//! message measured in the same run.
//!
//! ```text
//! sat-sync-bench [--providers shm,tcp] [--iters 500] [--sizes 2,3,4,5,6,7,8]
//! ```
//! Without `SAT_RANK` in its environment the program orchestrates: for each
//! provider it starts `satrun -n 2` on itself (`--worker raw`: a 64-byte
//! ping-pong over the bare transport, as sat-protocol-bench does), then for
//! each client count N of `--sizes` `satrun -n N+1` with no topology (rank 0
//! is the only server, the coordinator of every barrier, and ranks 1..N are
//! clients of role 1; `--worker barrier`), then `satrun -n 3`
//! (`--worker pubsub`: two clients play notification ping-pong, without and
//! with the data in the notification). It prints one table.
//!
//! - **Barrier**: every client calls `barrier(id, N)` in a loop; the first
//!   client times each round as the interval between two consecutive returns
//!   from the barrier, which in steady state is one full round (the last
//!   arrival, the releases, every client's next arrival). `--iters` rounds
//!   are measured after a tenth as many unmeasured ones.
//! - **Publish to handler**: clients A and B each allocate chunks X and Y;
//!   B subscribes to X, A to Y. A releases a write of X; B's handler releases
//!   a write of Y; A's handler a write of X; and so on for `--iters` rounds
//!   (after a tenth as many unmeasured ones). The handlers run on the roles'
//!   threads while the roles wait in a rendezvous that A's last handler
//!   wakes. A stamps the start of each of its handlers: the interval between
//!   two stamps is two publish-to-handler trips (each handler publishes as
//!   soon as it starts), so half of it is one trip, from the start of the
//!   publishing write scope on one side to the start of the handler on the
//!   other. A also times its own write scopes (WRITE + RELEASE): the part of
//!   a trip spent before the notification leaves the home.
//!
//! Every figure is a median; nothing waits on a sleep.

mod bench_common;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bench_common::{median, micros, raw_ping_pong, warmup, SatRun};
use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Client, Event};
use sat_core::protocol::Access;
use sat_core::SatError;

/// The size of the raw round trip and of the published chunks: one cache
/// line, so that the time is the messages' and not the copies'.
const SMALL: usize = 64;

struct Options {
    providers: Vec<String>,
    iters: usize,
    /// Client counts of the barrier rows.
    sizes: Vec<u32>,
    /// `raw`, `barrier` or `pubsub` in a worker process.
    worker: Option<String>,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        providers: vec!["shm".into(), "tcp".into()],
        iters: 500,
        sizes: (2..=8).collect(),
        worker: None,
    };
    bench_common::parse_options(args, |a, val| {
        match a {
            "--providers" => o.providers = bench_common::providers(&val()?),
            "--iters" => o.iters = bench_common::positive(a, &val()?)?,
            "--sizes" => {
                o.sizes = val()?
                    .split(',')
                    .map(|s| {
                        s.parse()
                            .ok()
                            .filter(|&n: &u32| n > 0)
                            .ok_or_else(|| format!("--sizes: {s:?} is not a client count"))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--worker" => o.worker = Some(val()?),
            // satrun finds the topology in the program's arguments too.
            "--topology" => {
                val()?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(o)
}

/// A raw round trip costs a few microseconds, so it gets more iterations
/// than the SAT operations for the same (negligible) time.
fn raw_iterations(iters: usize) -> usize {
    iters.max(2000)
}

fn bad(what: &str) -> SatError {
    SatError::Usage(format!("sync bench: {what}"))
}

// -------------------------------------------------------- barrier worker

const BAR_ID: u32 = 1;

/// Messages per barrier round, from `sync.rs`: the coordinator takes one
/// arrival per client and sends one release per client. Here every client's
/// server is the coordinator; a client attached to another server would add
/// two forwarding hops (its arrival to the coordinator, its release back).
fn barrier_messages(clients: u32) -> u32 {
    2 * clients
}

/// The role of every client: `rounds` timed barrier rounds after the
/// warm-up. The first client prints `BARRIER clients median`.
fn barrier_client(c: &Client, rounds: usize) -> RoleResult {
    let clients = c.topology().clients();
    let n = clients.len() as u32;
    let leader = c.rank() == clients[0];
    let mut times = Vec::with_capacity(rounds);
    let mut last = Instant::now();
    for i in 0..warmup(rounds) + rounds {
        c.barrier(BAR_ID, n)?;
        // One clock read per round: the interval between two returns is
        // the round, whoever arrived last.
        let now = Instant::now();
        if i >= warmup(rounds) {
            times.push(micros(now - last));
        }
        last = now;
    }
    if leader {
        println!("BARRIER {n} {:.3}", median(&mut times));
    }
    Ok(())
}

// --------------------------------------------------------- pubsub worker

/// Messages per publish-to-handler trip with home-based MESI, the home on
/// the clients' own server and no other copy of the chunk (the subscriber
/// never reads it): WRITE request and grant (2), the release (1), the
/// notification (1).
const PUBSUB_MESSAGES: u32 = 4;

/// What A's handlers record.
#[derive(Default)]
struct Stamps {
    /// The start of A's first publish, then the start of each of its
    /// handlers.
    starts: Vec<Instant>,
    /// The duration of each of A's write scopes (WRITE + RELEASE), us.
    publish: Vec<f64>,
}

/// Releases a write of `chunk` holding `value` in its first 8 bytes (so a
/// notification with data can be checked against its version); returns how
/// long the scope took.
fn publish(c: &Client, chunk: u64, value: u64) -> Result<f64, SatError> {
    let t0 = Instant::now();
    c.acquire(chunk, Access::Write)?;
    c.with_data_mut(chunk, |d| d[..8].copy_from_slice(&value.to_le_bytes()))?;
    c.release(chunk)?;
    Ok(micros(t0.elapsed()))
}

/// The checks of one notification: the versions of a chunk come one per
/// release, and the two sides alternate, so each notification announces the
/// next version (none merged into another), carrying its value when asked.
fn check(event: &Event, want: u64, with_data: bool) -> Result<(), String> {
    let Event::Chunk { version, data, .. } = event else {
        return Err("a signal for a chunk subscription".into());
    };
    if *version != want {
        return Err(format!("notified of version {version}, expected {want}"));
    }
    match (with_data, data) {
        (false, None) => Ok(()),
        (true, Some(d)) => {
            let v = u64::from_le_bytes(d[..8].try_into().map_err(|_| "short data")?);
            if v == want {
                Ok(())
            } else {
                Err(format!("version {want} carried the value {v}"))
            }
        }
        (w, d) => Err(format!(
            "subscribed with data: {w}, the event has data: {}",
            d.is_some()
        )),
    }
}

/// One ping-pong of `rounds` measured round trips (after the warm-up), with
/// or without data in the notifications. `variant` keeps the chunks and
/// synchronization ids of the two runs apart.
fn ping_pong(c: &Client, variant: u32, with_data: bool, rounds: usize) -> RoleResult {
    let clients = c.topology().clients();
    if clients.len() != 2 {
        return Err(format!(
            "the pubsub worker needs 2 clients (satrun -n 3), the run has {}",
            clients.len()
        )
        .into());
    }
    let (x, y) = (100 + 2 * variant as u64, 101 + 2 * variant as u64);
    let ready = 10 + variant;
    let done = 20 + variant;
    // Round k (from 1) is A's k-th write of X and B's k-th write of Y: the
    // last ones carry version `total`.
    let total = (warmup(rounds) + rounds) as u64;
    c.malloc(x, SMALL)?;
    c.malloc(y, SMALL)?;
    // The version each side's handler expects next. A handler that fails a
    // check fails its role, and satrun stops the run.
    let next = Arc::new(Mutex::new(1u64));
    if c.rank() == clients[1] {
        // B: each write of X is answered with a write of Y.
        c.subscribe(x, with_data, move |c, event| {
            let mut k = next.lock().unwrap();
            check(event, *k, with_data)?;
            publish(c, y, *k)?;
            if *k == total {
                c.unsubscribe(x)?;
            }
            *k += 1;
            Ok(())
        })?;
        c.barrier(ready, 2)?;
        // The handler runs here until A's last one wakes both sides.
        c.rendezvous(done)?;
        return Ok(());
    }
    // A: each write of Y is answered with the next write of X; the last
    // one ends the ping-pong.
    let stamps = Arc::new(Mutex::new(Stamps::default()));
    let s = stamps.clone();
    c.subscribe(y, with_data, move |c, event| {
        let start = Instant::now();
        let mut k = next.lock().unwrap();
        s.lock().unwrap().starts.push(start);
        check(event, *k, with_data)?;
        if *k == total {
            c.unsubscribe(y)?;
            c.wakeup(done)?;
            return Ok(());
        }
        *k += 1;
        let us = publish(c, x, *k)?;
        s.lock().unwrap().publish.push(us);
        Ok(())
    })?;
    c.barrier(ready, 2)?;
    stamps.lock().unwrap().starts.push(Instant::now());
    let us = publish(c, x, 1)?;
    stamps.lock().unwrap().publish.push(us);
    // A's handlers run here; the last one wakes this rendezvous.
    c.rendezvous(done)?;
    let st = stamps.lock().unwrap();
    let w = warmup(rounds);
    let mut half: Vec<f64> = st
        .starts
        .windows(2)
        .skip(w)
        .map(|p| micros(p[1] - p[0]) / 2.0)
        .collect();
    if half.len() != rounds {
        return Err(bad(&format!(
            "measured {} round trips, expected {rounds}",
            half.len()
        ))
        .into());
    }
    let mut scopes: Vec<f64> = st.publish.iter().skip(w).copied().collect();
    println!(
        "PUBSUB {} {:.3} {:.3}",
        if with_data { "data" } else { "nodata" },
        median(&mut half),
        median(&mut scopes)
    );
    Ok(())
}

fn pubsub_client(c: &Client, rounds: usize) -> RoleResult {
    ping_pong(c, 0, false, rounds)?;
    ping_pong(c, 1, true, rounds)
}

fn sat_worker(args: &[String], o: &Options, kind: &str) -> Result<(), String> {
    let iters = o.iters;
    let roles = if kind == "barrier" {
        Roles::new().role(1, move |c| barrier_client(c, iters))
    } else {
        Roles::new().role(1, move |c| pubsub_client(c, iters))
    };
    run(roles, args.iter().cloned()).map_err(|e| e.to_string())
}

// ------------------------------------------------------------ raw worker

/// The bare transport between two ranks, busy polling (`bench_common`), for
/// `SMALL` bytes. Rank 0 prints `RAW size median`.
fn raw_worker(args: &[String], o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let runs = [(SMALL, raw_iterations(o.iters))];
    raw_ping_pong(args, &runs, |_, size, us| println!("RAW {size} {us:.3}"))
}

// ---------------------------------------------------------- orchestrator

/// The `i`-th word of the one result line whose first word is `key`.
fn field(results: &[Vec<String>], key: &str, i: usize, what: &str) -> Result<f64, String> {
    results
        .iter()
        .find(|f| f.first().map(String::as_str) == Some(key))
        .and_then(|f| f.get(i)?.parse().ok())
        .ok_or_else(|| format!("the worker printed no {what} result"))
}

fn row(provider: &str, op: &str, clients: u32, us: f64, publish: Option<f64>, msgs: u32, rtt: f64) {
    let publish = publish.map_or("-".to_string(), |p| format!("{p:.2}"));
    println!(
        "{:<9} {:<24} {:>7} {:>10.2} {:>10} {:>5} {:>10.2} {:>8.2}",
        provider,
        op,
        clients,
        us,
        publish,
        msgs,
        rtt,
        us / rtt
    );
}

fn orchestrate(o: &Options) -> Result<(), String> {
    let satrun = SatRun::find()?;
    let iters = o.iters.to_string();
    println!(
        "Barrier rounds and publish-to-handler trips, median microseconds \
         ({} rounds each; raw: {} round trips of {SMALL} B)",
        o.iters,
        raw_iterations(o.iters)
    );
    println!(
        "{:<9} {:<24} {:>7} {:>10} {:>10} {:>5} {:>10} {:>8}",
        "provider",
        "operation",
        "clients",
        "median us",
        "publish us",
        "msgs",
        "raw RTT us",
        "SAT/raw"
    );
    for provider in &o.providers {
        let raw = satrun.results(
            2,
            None,
            provider,
            &["--worker", "raw", "--iters", &iters],
            "RAW",
        )?;
        let rtt = field(&raw, &SMALL.to_string(), 1, "raw")?;
        for &n in &o.sizes {
            let r = satrun.results(
                n + 1,
                None,
                provider,
                &["--worker", "barrier", "--iters", &iters],
                "BARRIER",
            )?;
            let us = field(&r, &n.to_string(), 1, "barrier")?;
            row(provider, "barrier", n, us, None, barrier_messages(n), rtt);
        }
        let r = satrun.results(
            3,
            None,
            provider,
            &["--worker", "pubsub", "--iters", &iters],
            "PUBSUB",
        )?;
        for (key, label) in [
            ("nodata", "publish -> handler"),
            ("data", "publish+data -> handler"),
        ] {
            let us = field(&r, key, 1, label)?;
            let scope = field(&r, key, 2, label)?;
            row(provider, label, 2, us, Some(scope), PUBSUB_MESSAGES, rtt);
        }
    }
    println!(
        "barrier: N clients of one server, which coordinates the barrier; median interval between \
         two returns from\n  barrier(id, N) on the first client. msgs: by messages, one arrival \
         and one release per client (sync.rs), no forwarding hop;\n  on one host (host segments, \
         the default unless SAT_HOST_SEGMENTS=off) the barrier is a word in a host slot and \
         sends none."
    );
    println!(
        "publish -> handler: two clients, each subscribed to the chunk the other writes, each \
         handler writing back;\n  half the median interval between two handler starts on one \
         side = from the start of a write scope to the\n  start of the other side's handler. \
         publish us: that write scope alone (WRITE + RELEASE of 64 B). msgs: WRITE\n  request \
         and grant, release, notification; +data: the notification carries the 64 B."
    );
    println!(
        "raw RTT: SAT's bare transport between two processes, same provider, {SMALL} B, busy \
         polling, in a run just before;\n  SAT/raw = median / raw RTT. The clients and the server \
         use the default progress (SAT_PROGRESS=sleep: spin\n  50 us, then micro-sleep)."
    );
    Ok(())
}

fn main() {
    bench_common::main(
        "sat-sync-bench",
        parse_options,
        |args, o| match o.worker.as_deref() {
            Some("raw") => raw_worker(args, &o).map_err(|e| e.to_string()),
            Some(kind @ ("barrier" | "pubsub")) => sat_worker(args, &o, kind),
            other => Err(format!(
                "a worker needs --worker raw, barrier or pubsub, not {other:?}"
            )),
        },
        orchestrate,
    );
}
