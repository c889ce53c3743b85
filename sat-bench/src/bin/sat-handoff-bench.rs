//! The hand-off benchmark: how fast one client's data reaches another
//! through SAT, for a 64-byte chunk (latency) and a 64 MiB chain (bandwidth),
//! with the messages each operation costs.
//!
//! ```text
//! sat-handoff-bench [--providers shm,tcp] [--small-iters 2000] [--large-iters 7]
//!                   [--large BYTES] [--chunk-size BYTES] [--scope-iters N] [--results]
//! ```
//! Without `SAT_RANK` in its environment the program orchestrates: for each
//! provider it starts `satrun -n 3` on itself (rank 0 the only server, home
//! of every chunk; ranks 1 and 2 the clients A and B) and prints a table, or
//! with `--results` one `RESULT` line per figure and one `MESSAGES` line per
//! operation's measured message counts, for scripts (`bench/micro.py`).
//! `--scope-iters N` also times N READ and N READWRITE scopes on the small
//! chunk in A alone, B waiting (`SCOPE read|readwrite ns` lines with
//! `--results`): the bookkeeping a hand-off's two scopes cost.
//!
//! What is measured (every figure a median, after unmeasured warm-up):
//!
//! - **hand-off, 64 B**: A and B take turns to READWRITE-increment-RELEASE a
//!   64-byte chunk and to read it until the other's value shows (as
//!   sat-protocol-bench's hand-off rows); A times a round, half a round is
//!   one hand-off: the writer's scope, its release to the home, the reader's
//!   miss that fetches the new version.
//! - **PUT, 64 MiB**: A opens a WRITE scope on the whole chain (B holds a
//!   valid copy of every chunk from its last read, so each chunk's grant
//!   waits for B's invalidation), stamps the version into every chunk and
//!   RELEASEs the chain. `put-release` stops the clock when the release
//!   returns: by then every chunk is in the transport's send queue, not
//!   necessarily at the home. `put` stops it once the home holds the whole
//!   version: A then sends a relayed message to itself, which its server
//!   forwards only after it has taken in (and, being the home, applied)
//!   every earlier message of A, the release included. That adds one small
//!   round trip through the server, tens of microseconds against tens of
//!   milliseconds.
//! - **GET, 64 MiB**: told by A (a relayed message sent after its release,
//!   so it reaches B after the home has the version), B opens a READ scope on
//!   the chain, checks every chunk's stamp and RELEASEs: the reader's half.
//! - **hand-off, 64 MiB**: a round of its own after PUT and GET: A opens its
//!   WRITE scope on the chain, then tells B, which opens its READ scope at
//!   once and so waits for A's data, as an MPI receiver posts its receive
//!   before the sender sends; A stamps the next version and RELEASEs. Timed
//!   from A's acquire to the end of B's release (one clock: the host's wall
//!   clock, read in both processes). Each chunk reaches B as soon as A's
//!   release of it does: over a host segment B copies chunk k out while A
//!   copies chunk k+1 in. Its message counts are PUT's and GET's together.
//!
//! Message counts, measured: what the clients send per operation and what
//! the server sends them, counted where it arrives (`Client::traffic`; the
//! run's one server sends only to the two clients, and they hear only from
//! it), the relayed coordination left out. Each client counts over windows
//! with nothing under way at either end, closed by a fence (a message to
//! itself through the server) where an answer could still be on its way.
//! Next to them, what home-based MESI needs: per chunk, a write with one
//! sharer 2 + 2 messages (the clients send the request and the
//! acknowledgement), its release 1 (sent by the writer), a read miss 2 (the
//! reader sends 1). MESI keeps a version per chunk, so a chain costs that
//! many times its chunks; `--chunk-size` sets the chunk size of the large
//! chain (default: the clients' own, `SAT_CHUNK_SIZE` or 64 KiB).
//! `sat-bench/tests/handoff_bench.rs` checks the measured figures against
//! that rule.

mod bench_common;

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bench_common::{
    human, median, micros, push_f64s, take_f64s, take_u64, warmup, Coord, Msgs, SatRun,
};
use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Chain, Client};
use sat_core::protocol::{Access, ProtocolId};
use sat_core::{Rank, SatError, SatResult};

const SMALL: usize = 64;
/// A reader waiting for a new value reads this many times before it yields
/// its core (MPI's receiver polls flat out; a yield is a system call).
const READS_BEFORE_YIELD: u32 = 16;
/// The chunk of the small hand-off, and the first chunk of the large chain.
const SMALL_CHUNK: u64 = 10;
const LARGE_BASE: u64 = 1 << 20;

struct Options {
    providers: Vec<String>,
    small_iters: usize,
    large_iters: usize,
    large: usize,
    chunk_size: Option<usize>,
    /// Scopes of each kind timed alone (0: none).
    scope_iters: usize,
    results: bool,
    worker: bool,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        providers: vec!["shm".into(), "tcp".into()],
        small_iters: 2000,
        large_iters: 7,
        large: 64 << 20,
        chunk_size: None,
        scope_iters: 0,
        results: false,
        worker: false,
    };
    bench_common::parse_options(args, |a, val| {
        match a {
            "--providers" => o.providers = bench_common::providers(&val()?),
            "--small-iters" => o.small_iters = bench_common::positive(a, &val()?)?,
            "--large-iters" => o.large_iters = bench_common::positive(a, &val()?)?,
            "--large" => o.large = bench_common::positive(a, &val()?)?.max(16),
            "--chunk-size" => o.chunk_size = Some(bench_common::positive(a, &val()?)?),
            "--scope-iters" => o.scope_iters = bench_common::positive(a, &val()?)?,
            "--results" => o.results = true,
            "--worker" => o.worker = true,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(o)
}

// ----------------------------------------------------------------- worker

const WROTE: u32 = 1;
const READ: u32 = 2;
const FLUSH: u32 = 3;
const FIGURES: u32 = 4;
const WRITING: u32 = 5;
const READ_AGAIN: u32 = 6;
/// Added to the stamps of the hand-off rounds, so that they differ from
/// the PUT rounds' stamps.
const HANDOFF_STAMP: u64 = 1 << 40;

fn bad(what: &str) -> SatError {
    SatError::Usage(format!("hand-off bench: {what}"))
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn word(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().unwrap())
}

/// The small chunk's counter: its first 8 bytes, repeated in its last 8.
fn counter(d: &[u8]) -> SatResult<u64> {
    let (lo, hi) = (word(d, 0), word(d, d.len() - 8));
    if lo != hi {
        return Err(bad(&format!(
            "torn chunk: {lo} at its start, {hi} at its end"
        )));
    }
    Ok(lo)
}

/// READWRITE, counter + 1; the scope is left open. Returns the new value.
fn acquire_increment(c: &Client, chunk: u64) -> SatResult<u64> {
    c.acquire(chunk, Access::ReadWrite)?;
    c.with_data_mut(chunk, |d| {
        let v = counter(d)? + 1;
        let n = d.len();
        d[..8].copy_from_slice(&v.to_le_bytes());
        d[n - 8..].copy_from_slice(&v.to_le_bytes());
        Ok::<_, SatError>(v)
    })?
}

fn increment(c: &Client, chunk: u64) -> SatResult<u64> {
    let v = acquire_increment(c, chunk)?;
    c.release(chunk)?;
    Ok(v)
}

/// Reads until the counter reaches `want`; each turn first drives the
/// endpoint, so that the invalidation ending the spin is taken in at once.
fn wait_for_value(co: &mut Coord, chunk: u64, want: u64) -> SatResult<()> {
    let mut misses = 0u32;
    loop {
        co.progress()?;
        co.c.acquire(chunk, Access::Read)?;
        let v = co.c.with_data(chunk, counter);
        co.c.release(chunk)?;
        let v = v??;
        if v == want {
            return Ok(());
        }
        if v > want {
            return Err(bad(&format!("saw {v} while waiting for {want}")));
        }
        // Poll as a waiting loop does: flat out for a while (the writer is
        // on the other core), then let a co-scheduled writer run.
        misses += 1;
        if misses % READS_BEFORE_YIELD == 0 {
            std::thread::yield_now();
        }
    }
}

/// The small hand-off on both clients (`b` the second): A returns the
/// hand-off times; each returns its messages over the measured rounds.
///
/// Both count the same number of each of their messages, over spans with
/// nothing under way at either end. A counts whole rounds, then a fence:
/// when it starts a round, B has released and spins on hits. B counts from
/// just before the release of the last warm-up round to just before its
/// last release: while it holds the chunk nothing can reach it, whereas
/// right after a release A may already be invalidating its copy.
fn small_handoff(co: &mut Coord, b: Rank, n: usize) -> SatResult<(Vec<f64>, Msgs)> {
    let c = co.c;
    c.malloc_lst(ProtocolId::HomeMesi, &[SMALL_CHUNK], &[SMALL])?;
    let warm = warmup(n) as u64;
    let last = warm + n as u64 - 1;
    let mut times = Vec::with_capacity(n);
    let mut m0 = Msgs::default();
    for k in 0..=last {
        if c.rank() == b {
            wait_for_value(co, SMALL_CHUNK, 2 * k + 1)?;
            acquire_increment(c, SMALL_CHUNK)?;
            if k == warm - 1 {
                m0 = co.msgs();
            }
            if k == last {
                let msgs = co.msgs().since(m0);
                c.release(SMALL_CHUNK)?;
                return Ok((times, msgs));
            }
            c.release(SMALL_CHUNK)?;
            continue;
        }
        if k == warm {
            m0 = co.msgs();
        }
        let t0 = Instant::now();
        let v = increment(c, SMALL_CHUNK)?;
        if v != 2 * k + 1 {
            return Err(bad(&format!("hand-off wrote {v}, expected {}", 2 * k + 1)));
        }
        wait_for_value(co, SMALL_CHUNK, 2 * k + 2)?;
        if k >= warm {
            times.push(micros(t0.elapsed()) / 2.0);
        }
    }
    co.fence()?;
    Ok((times, co.msgs().since(m0)))
}

/// What a scope on the small chunk costs with nobody else using it: A
/// times `n` of each kind (acquire, a look at the bytes through
/// `with_data`, release) in 10 batches while B waits, and prints `SCOPE
/// kind ns`, the median batch's time per scope. The hand-off is two such
/// scopes and half a poll: this says how much of it is bookkeeping.
fn scopes_alone(c: &Client, n: usize) -> SatResult<()> {
    const BATCHES: usize = 10;
    let per_batch = n.div_ceil(BATCHES);
    for (access, kind) in [(Access::Read, "read"), (Access::ReadWrite, "readwrite")] {
        let mut ns = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let t0 = Instant::now();
            for _ in 0..per_batch {
                c.acquire(SMALL_CHUNK, access)?;
                std::hint::black_box(c.with_data(SMALL_CHUNK, counter)??);
                c.release(SMALL_CHUNK)?;
            }
            ns.push(t0.elapsed().as_nanos() as f64 / per_batch as f64);
        }
        println!("SCOPE {kind} {:.1}", median(&mut ns));
    }
    Ok(())
}

/// Where each chunk of `chain` starts in its contiguous data.
fn offsets(chain: &Chain) -> Vec<usize> {
    let mut at = 0;
    chain
        .layout()
        .chunks()
        .iter()
        .map(|&(_, size)| {
            let o = at;
            at += size;
            o
        })
        .collect()
}

/// Version `v` in the first 8 bytes of every chunk (chunks of 8 bytes or
/// more) and in the chain's last 8 bytes.
fn stamp(d: &mut [u8], offsets: &[usize], v: u64) {
    let n = d.len();
    for &o in offsets {
        if o + 8 <= n {
            d[o..o + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
    d[n - 8..].copy_from_slice(&v.to_le_bytes());
}

fn check_stamp(d: &[u8], offsets: &[usize], v: u64) -> SatResult<()> {
    let n = d.len();
    for &o in offsets.iter().filter(|&&o| o + 8 <= n) {
        if word(d, o) != v {
            return Err(bad(&format!(
                "the chunk at byte {o} holds version {}, the writer wrote {v}",
                word(d, o)
            )));
        }
    }
    if word(d, n - 8) != v {
        return Err(bad("the chain's last bytes are not the version written"));
    }
    Ok(())
}

/// The large phase's figures, in microseconds per iteration, and the
/// messages summed over the measured iterations.
#[derive(Default)]
struct Large {
    put_release: Vec<f64>,
    put_home: Vec<f64>,
    get: Vec<f64>,
    whole: Vec<f64>,
    put: Msgs,
    get_msgs: Msgs,
    chunks: usize,
}

fn large_handoff(
    co: &mut Coord,
    a: Rank,
    b: Rank,
    size: usize,
    n: usize,
    chunk_size: Option<usize>,
) -> SatResult<Large> {
    let c = co.c;
    if let Some(s) = chunk_size {
        c.set_chunk_size(s)?;
    }
    let chain = c.malloc(LARGE_BASE, size)?;
    let offs = offsets(&chain);
    let warm = 1;
    let mut out = Large {
        chunks: chain.len(),
        ..Large::default()
    };
    // B's count of A's PUT starts before B says it has read (after that,
    // A's next PUT may invalidate B's copies at any time).
    let mut acks0 = co.msgs();
    for k in 0..warm + n {
        let v = k as u64 + 1;
        let measured = k >= warm;
        if c.rank() == a {
            // B has read and said so: nothing is under way. The relayed
            // FLUSH is a fence: A's release has reached the home.
            let m0 = co.msgs();
            let t0 = Instant::now();
            c.acquire_chain(&chain, Access::Write)?;
            c.with_chain_mut(&chain, |d| stamp(d, &offs, v))?;
            c.release_chain(&chain)?;
            let released = micros(t0.elapsed());
            co.send(b, WROTE, &[])?;
            co.send(a, FLUSH, &[])?;
            co.expect(a, FLUSH)?;
            let home = micros(t0.elapsed());
            let put = co.msgs().since(m0);
            co.expect(b, READ)?;
            if measured {
                out.put_release.push(released);
                out.put_home.push(home);
                out.put += put;
            }
        } else {
            // Waiting for A's word, B answers the invalidations of its copy;
            // A's word follows them.
            co.expect(a, WROTE)?;
            let acks = co.msgs().since(acks0);
            let m1 = co.msgs();
            let t0 = Instant::now();
            c.acquire_chain(&chain, Access::Read)?;
            let seen = c.with_chain(&chain, |d| check_stamp(d, &offs, v))?;
            c.release_chain(&chain)?;
            let get = micros(t0.elapsed());
            co.fence()?;
            let get_msgs = co.msgs().since(m1);
            seen?;
            acks0 = co.msgs();
            co.send(a, READ, &[])?;
            if measured {
                out.get.push(get);
                out.put += acks;
                out.get_msgs += get_msgs;
            }
        }
        // The hand-off round: B waits in its READ while A writes.
        let v = v + HANDOFF_STAMP;
        if c.rank() == a {
            let wall0 = wall_ns();
            c.acquire_chain(&chain, Access::Write)?;
            co.send(b, WRITING, &wall0.to_le_bytes())?;
            c.with_chain_mut(&chain, |d| stamp(d, &offs, v))?;
            c.release_chain(&chain)?;
            co.expect(b, READ_AGAIN)?;
        } else {
            let d = co.expect(a, WRITING)?;
            let wall0 = u64::from_le_bytes(d[..8].try_into().map_err(|_| bad("short stamp"))?);
            c.acquire_chain(&chain, Access::Read)?;
            let seen = c.with_chain(&chain, |d| check_stamp(d, &offs, v))?;
            c.release_chain(&chain)?;
            let whole = wall_ns().saturating_sub(wall0) as f64 / 1e3;
            seen?;
            // A's next PUT is counted from here, as after the GET.
            co.fence()?;
            acks0 = co.msgs();
            co.send(a, READ_AGAIN, &[])?;
            if measured {
                out.whole.push(whole);
            }
        }
    }
    Ok(out)
}

/// `RESULT key size median_us min_us max_us client_sends_per_op
/// min_client_sends_per_op protocol_msgs_per_op`: the last two are what
/// home-based MESI needs by its rule (the figures the measured counts of
/// [`messages`] are to match), as `bench/micro.py` reads them.
fn result(key: &str, size: usize, v: &mut [f64], sends: f64, min_sends: usize, protocol: usize) {
    let m = median(v);
    let lo = v.first().copied().unwrap_or(f64::NAN);
    let hi = v.last().copied().unwrap_or(f64::NAN);
    println!("RESULT {key} {size} {m:.3} {lo:.3} {hi:.3} {sends:.2} {min_sends} {protocol}");
}

/// `MESSAGES key size client_sends_per_op server_sends_per_op client_sends
/// server_sends operations`: measured, per operation and in all (so that a
/// single message more shows however many operations there were).
fn messages(key: &str, size: usize, m: Msgs, ops: usize) {
    let per_op = |x: u64| x as f64 / ops as f64;
    println!(
        "MESSAGES {key} {size} {:.2} {:.2} {} {} {ops}",
        per_op(m.client),
        per_op(m.server),
        m.client,
        m.server
    );
}

fn push_msgs(buf: &mut Vec<u8>, m: Msgs) {
    buf.extend_from_slice(&m.client.to_le_bytes());
    buf.extend_from_slice(&m.server.to_le_bytes());
}

fn take_msgs(d: &[u8], at: &mut usize) -> SatResult<Msgs> {
    Ok(Msgs {
        client: take_u64(d, at)?,
        server: take_u64(d, at)?,
    })
}

fn bench_client(c: &Client, o: &Options) -> RoleResult {
    let clients = c.topology().clients();
    if clients.len() != 2 {
        return Err(format!(
            "the hand-off bench needs 2 clients (satrun -n 3), the run has {}",
            clients.len()
        )
        .into());
    }
    let (a, b) = (clients[0], clients[1]);
    let mut co = Coord::new(c);
    let (mut small, mut small_msgs) = small_handoff(&mut co, b, o.small_iters)?;
    if o.scope_iters > 0 && c.rank() == a {
        scopes_alone(c, o.scope_iters)?;
    }
    let mut large = large_handoff(&mut co, a, b, o.large, o.large_iters, o.chunk_size)?;
    if c.rank() == b {
        let mut buf = Vec::new();
        push_msgs(&mut buf, small_msgs);
        push_msgs(&mut buf, large.put);
        push_msgs(&mut buf, large.get_msgs);
        push_f64s(&mut buf, &large.get);
        push_f64s(&mut buf, &large.whole);
        co.send(a, FIGURES, &buf)?;
        return Ok(());
    }
    let d = co.expect(b, FIGURES)?;
    let mut at = 0;
    small_msgs += take_msgs(&d, &mut at)?;
    large.put += take_msgs(&d, &mut at)?;
    large.get_msgs += take_msgs(&d, &mut at)?;
    large.get = take_f64s(&d, &mut at)?;
    large.whole = take_f64s(&d, &mut at)?;
    let (n, s, ch) = (o.large_iters as f64, o.large, large.chunks);
    let handoffs = (2 * o.small_iters) as f64;
    let sends = |m: Msgs, ops: f64| m.client as f64 / ops;
    result(
        "handoff",
        SMALL,
        &mut small,
        sends(small_msgs, handoffs),
        4,
        7,
    );
    messages("handoff", SMALL, small_msgs, 2 * o.small_iters);
    let put_sends = sends(large.put, n);
    result(
        "put-release",
        s,
        &mut large.put_release,
        put_sends,
        3 * ch,
        5 * ch,
    );
    messages("put-release", s, large.put, o.large_iters);
    result("put", s, &mut large.put_home, put_sends, 3 * ch, 5 * ch);
    messages("put", s, large.put, o.large_iters);
    result(
        "get",
        s,
        &mut large.get,
        sends(large.get_msgs, n),
        ch,
        2 * ch,
    );
    messages("get", s, large.get_msgs, o.large_iters);
    let mut whole = large.put;
    whole += large.get_msgs;
    result(
        "handoff",
        s,
        &mut large.whole,
        sends(whole, n),
        4 * ch,
        7 * ch,
    );
    messages("handoff", s, whole, o.large_iters);
    println!("CHUNKS {ch}");
    Ok(())
}

fn worker(args: &[String], o: Options) -> Result<(), String> {
    let roles = Roles::new().role(1, move |c| bench_client(c, &o));
    run(roles, args.iter().cloned()).map_err(|e| e.to_string())
}

// ----------------------------------------------------------- orchestrator

fn orchestrate(o: &Options) -> Result<(), String> {
    let satrun = SatRun::find()?;
    let mut worker = vec![
        "--worker".to_string(),
        "--small-iters".into(),
        o.small_iters.to_string(),
        "--large-iters".into(),
        o.large_iters.to_string(),
        "--large".into(),
        o.large.to_string(),
    ];
    if let Some(s) = o.chunk_size {
        worker.extend(["--chunk-size".into(), s.to_string()]);
    }
    if o.scope_iters > 0 {
        worker.extend(["--scope-iters".into(), o.scope_iters.to_string()]);
    }
    let worker: Vec<&str> = worker.iter().map(String::as_str).collect();
    if !o.results {
        println!(
            "Hand-offs between two clients of one server, medians ({} small hand-offs; {} large \
             operations after 1 warm-up)",
            o.small_iters, o.large_iters
        );
        println!(
            "{:<9} {:<12} {:>7} {:>12} {:>8} {:>22} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "provider",
            "operation",
            "size",
            "median us",
            "GB/s",
            "min-max us",
            "sends",
            "server",
            "all msgs",
            "min sends",
            "protocol"
        );
    }
    for provider in &o.providers {
        let lines = satrun.marked(3, None, provider, &worker, &["RESULT", "MESSAGES", "SCOPE"])?;
        for (marker, f) in &lines {
            if o.results {
                println!("{marker} {provider} {}", f.join(" "));
                continue;
            }
            if marker == "SCOPE" {
                println!(
                    "{provider:<9} a {} scope alone (acquire, with_data, release): {} ns",
                    f.first().map_or("?", String::as_str),
                    f.get(1).map_or("?", String::as_str)
                );
                continue;
            }
            if marker != "RESULT" {
                continue;
            }
            let num =
                |i: usize| -> f64 { f.get(i).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN) };
            // The measured counts of the same operation: sends, server sends.
            let counted = lines
                .iter()
                .find(|(m, g)| m == "MESSAGES" && g.get(..2) == f.get(..2))
                .map(|(_, g)| {
                    let n = |i: usize| g.get(i).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                    (n(2), n(3))
                })
                .unwrap_or((f64::NAN, f64::NAN));
            let size = num(1) as usize;
            let gbps = if size >= 1 << 20 {
                format!("{:.2}", size as f64 / (num(2) * 1e3))
            } else {
                "-".into()
            };
            println!(
                "{:<9} {:<12} {:>7} {:>12.2} {:>8} {:>22} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>9}",
                provider,
                f.first().map_or("?", String::as_str),
                human(size),
                num(2),
                gbps,
                format!("{:.1}-{:.1}", num(3), num(4)),
                counted.0,
                counted.1,
                counted.0 + counted.1,
                num(6),
                num(7)
            );
        }
    }
    if !o.results {
        println!(
            "put-release: A's WRITE scope on the chain until its RELEASE returns; put: until the \
             home holds the version;\n  get: B's READ scope of the fresh version; handoff (large): \
             A's acquire to the end of B's release;\n  handoff (64 B): half a round of \
             write-release / read-until-seen between A and B.\n  sends: the clients' messages per \
             operation; server: the server's, counted where they arrive; all msgs: both (measured).\n  \
             min sends, protocol: what home-based MESI needs (clients only, all messages)."
        );
    }
    Ok(())
}

fn main() {
    bench_common::main(
        "sat-handoff-bench",
        parse_options,
        |args, o| {
            if o.worker {
                worker(args, o)
            } else {
                Err("a worker needs --worker".into())
            }
        },
        orchestrate,
    );
}
