//! The coherence protocol benchmark: what a read hit, a read miss, a write
//! miss and a write-to-read hand-off cost over real processes, in time and in
//! messages, next to the raw transport round trip of the same size.
//!
//! ```text
//! sat-protocol-bench [--providers shm,tcp] [--iters 2000]
//! ```
//! Without `SAT_RANK` in its environment the program orchestrates: for each
//! provider it starts `satrun -n 2` on itself (`--worker raw`: a ping-pong
//! over the bare transport, as sat-transport-bench does) and then
//! `satrun -n 5 --topology sat-core/topologies/bench-4-clients.xml` on itself
//! (`--worker protocol`: one server, home of every chunk, and four clients
//! that run the operations through `Client`). It prints one table: per
//! operation the median latency, the messages the clients sent, the messages
//! the server sent and both together, per operation, the raw round trip and
//! the ratio of the two times.
//!
//! The message counts are measured, not assumed: each client counts what it
//! sends and what it receives ([`Client::traffic`]) over windows around the
//! measured operations, chosen so that every message an operation causes
//! falls inside one and nothing else does (see each phase). A client hears
//! only from its server, and the one server of the run sends only to
//! clients, so what the clients receive is what the server sent. A client
//! that takes no part in a phase counts the whole phase: it should get
//! nothing. `sat-bench/tests/protocol_bench.rs` checks the figures against
//! the protocol's rule.
//!
//! The clients order their phases with relayed user messages
//! (`Client::send`/`recv`), never with sleeps; those messages are left out of
//! the counts. `--iters` is the number of measured operations for 64-byte
//! and 4 KiB chunks; 1 MiB chunks get a tenth of it. Every figure is a median.

mod bench_common;

use std::path::Path;
use std::time::Instant;

use bench_common::{
    human, median, micros, phase_barrier, raw_ping_pong, tag, warmup, Coord, Counted, Msgs, SatRun,
};
use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::Access;
use sat_core::{Rank, SatError, SatResult};

/// The chunk size of the read and write rows: one cache line, so that the
/// time is the protocol's and not the copy's.
const SMALL: usize = 64;
const KIB4: usize = 4096;
const MIB: usize = 1 << 20;

/// One line of the table. `key` names it between the worker and the
/// orchestrator. What home-based MESI needs per operation, with the home on
/// the clients' own server (the doc comment of `protocol/mesi.rs`: read hit
/// 0, read miss 2, write with s other sharers 2 + 2s, release of a write
/// scope 1; a home on another server would add one message per direction per
/// forwarding hop, and there is none here), is in the comment of each row;
/// the table shows what was measured.
struct Row {
    key: &'static str,
    label: &'static str,
    size: usize,
}

const ROWS: [Row; 6] = [
    // 0: the copy is valid.
    Row {
        key: "read-hit",
        label: "read hit",
        size: SMALL,
    },
    // 2: the request, the grant (client 1, server 1).
    Row {
        key: "read-miss",
        label: "read miss",
        size: SMALL,
    },
    // The writer's acquire (2 + 2s) and its release (1): 5 with 1 sharer
    // (clients: request, acknowledgement, release; server: invalidation,
    // grant), 9 with 3 (clients 5, server 4).
    Row {
        key: "write-1",
        label: "write miss, 1 sharer",
        size: SMALL,
    },
    Row {
        key: "write-3",
        label: "write miss, 3 sharers",
        size: SMALL,
    },
    // A hand-off: the writer's acquire with the reader as the one sharer
    // (2 + 2), its release (1), the reader's miss (2): 7 (clients 4, server
    // 3).
    Row {
        key: "handoff-4k",
        label: "write-release -> read",
        size: KIB4,
    },
    Row {
        key: "handoff-1m",
        label: "write-release -> read",
        size: MIB,
    },
];

struct Options {
    providers: Vec<String>,
    iters: usize,
    /// `raw` or `protocol` in a worker process.
    worker: Option<String>,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        providers: vec!["shm".into(), "tcp".into()],
        iters: 2000,
        worker: None,
    };
    bench_common::parse_options(args, |a, val| {
        match a {
            "--providers" => o.providers = bench_common::providers(&val()?),
            "--iters" => o.iters = bench_common::positive(a, &val()?)?,
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

/// Measured operations for a chunk of `size` bytes: a 1 MiB operation costs
/// about a hundred small ones, so it gets a tenth of the iterations.
fn iterations(iters: usize, size: usize) -> usize {
    if size > 64 * 1024 {
        (iters / 10).max(5)
    } else {
        iters
    }
}

// ------------------------------------------------------- protocol worker

/// The one place a chunk is allocated: a MALLOC_LST of one chunk, so that
/// the chunk has exactly `size` bytes whatever chain MALLOC would split a
/// large size into.
fn alloc_one(c: &Client, id: u64, size: usize) -> SatResult<()> {
    c.malloc_lst(sat_core::protocol::ProtocolId::HomeMesi, &[id], &[size])
        .map(|_| ())
}

/// Steps of a phase, in the low bits of a relay's tag (`bench_common::tag`;
/// the phase barrier's own steps follow these).
const READY: u32 = 1;
const DONE: u32 = 2;
const WROTE: u32 = 3;
const READ: u32 = 4;

fn bad(what: &str) -> SatError {
    SatError::Usage(format!("protocol bench: {what}"))
}

/// The counter the operations write: the first 8 bytes of a chunk, repeated
/// in its last 8 so that a reader sees that the whole chunk travelled.
fn counter(d: &[u8]) -> SatResult<u64> {
    let lo = u64::from_le_bytes(d[..8].try_into().unwrap());
    let hi = u64::from_le_bytes(d[d.len() - 8..].try_into().unwrap());
    if lo != hi {
        return Err(bad(&format!(
            "torn chunk: {lo} at its start, {hi} at its end"
        )));
    }
    Ok(lo)
}

fn set_counter(d: &mut [u8], v: u64) {
    let n = d.len();
    d[..8].copy_from_slice(&v.to_le_bytes());
    d[n - 8..].copy_from_slice(&v.to_le_bytes());
}

/// READWRITE, counter + 1; the scope is left open. Returns the new value.
fn acquire_increment(c: &Client, chunk: u64) -> SatResult<u64> {
    c.acquire(chunk, Access::ReadWrite)?;
    c.with_data_mut(chunk, |d| {
        let v = counter(d)? + 1;
        set_counter(d, v);
        Ok::<_, SatError>(v)
    })?
}

/// READWRITE, counter + 1, RELEASE; returns the new value.
fn increment(c: &Client, chunk: u64) -> SatResult<u64> {
    let v = acquire_increment(c, chunk)?;
    c.release(chunk)?;
    Ok(v)
}

/// READ, counter, RELEASE.
fn read_counter(c: &Client, chunk: u64) -> SatResult<u64> {
    c.acquire(chunk, Access::Read)?;
    let v = c.with_data(chunk, counter);
    c.release(chunk)?;
    v?
}

/// Spins on read scopes until the counter of `chunk` reaches `want`. A read
/// hit makes no progress of its own (it sends and polls nothing), so each
/// turn first drives this client's endpoint: otherwise the invalidation that
/// ends the spin would wait for the background progress thread, whose
/// micro-sleep has grown while the spin kept its lock busy.
fn wait_for_value(co: &mut Coord, chunk: u64, want: u64) -> SatResult<()> {
    loop {
        co.progress()?;
        let v = read_counter(co.c, chunk)?;
        if v == want {
            return Ok(());
        }
        if v > want {
            return Err(bad(&format!(
                "chunk {chunk}: saw {v} while waiting for {want}"
            )));
        }
        // On an oversubscribed node the writer may need this core.
        std::thread::yield_now();
    }
}

/// One phase's result, as the leader measured it.
struct Measured {
    times: Vec<f64>,
    /// Operations the counts are divided by.
    ops: usize,
}

/// The role of every client: the phases in order, each closed by a barrier
/// that brings the counts to the leader (the first client), which prints.
fn bench_client(c: &Client, iters: usize) -> RoleResult {
    let clients = c.topology().clients();
    if clients.len() < 4 {
        return Err(format!(
            "the protocol bench needs 4 clients (topology bench-4-clients.xml), the run has {}",
            clients.len()
        )
        .into());
    }
    let me = c.rank();
    let leader = clients[0];
    let mut co = Coord::new(c);
    let mut mark = co.msgs();
    for (i, row) in ROWS.iter().enumerate() {
        let phase = i as u32 + 1;
        let chunk = 100 + phase as u64;
        let n = iterations(iters, row.size);
        let (measured, counted) = match row.key {
            "read-hit" => read_hit(&mut co, &clients, chunk, n)?,
            "read-miss" => read_miss(&mut co, &clients, phase, chunk, n)?,
            "write-1" => write_miss(&mut co, &clients, phase, chunk, n, 1)?,
            "write-3" => write_miss(&mut co, &clients, phase, chunk, n, 3)?,
            _ => hand_off(&mut co, &clients, chunk, row.size, n)?,
        };
        let total = phase_barrier(&mut co, &clients, phase, counted, &mut mark)?;
        if me == leader {
            let mut m = measured.ok_or("the leader measured nothing")?;
            let per_op = |x: u64| x as f64 / m.ops as f64;
            println!(
                "RESULT {} {} {:.3} {:.3} {:.3}",
                row.key,
                row.size,
                median(&mut m.times),
                per_op(total.client),
                per_op(total.server)
            );
        }
    }
    Ok(())
}

type PhaseOut = (Option<Measured>, Counted);

/// Acquire READ + release on a valid local copy: the leader alone.
fn read_hit(co: &mut Coord, clients: &[Rank], chunk: u64, n: usize) -> SatResult<PhaseOut> {
    if co.c.rank() != clients[0] {
        return Ok((None, Counted::Idle));
    }
    let c = co.c;
    alloc_one(c, chunk, SMALL)?;
    read_counter(c, chunk)?; // the first read misses: the copy is valid after it
    let mut times = Vec::with_capacity(n);
    let mut msgs = Msgs::default();
    for i in 0..warmup(n) + n {
        let m0 = co.msgs();
        let t0 = Instant::now();
        c.acquire(chunk, Access::Read)?;
        c.release(chunk)?;
        let us = micros(t0.elapsed());
        if i >= warmup(n) {
            times.push(us);
            msgs += co.msgs().since(m0);
        }
    }
    Ok((Some(Measured { times, ops: n }), Counted::Windows(msgs)))
}

/// The second client writes (which invalidates the leader's copy) and says
/// so; the leader's next read misses and is timed. The reader counts from
/// the writer's word (by then the write's messages are all done: the
/// invalidation reached it first) to a fence after its read; the writer
/// counts from a fence after its write to the reader's answer, which spans
/// the read, in which it should get nothing (a read does not invalidate the
/// writer's copy).
fn read_miss(
    co: &mut Coord,
    clients: &[Rank],
    phase: u32,
    chunk: u64,
    n: usize,
) -> SatResult<PhaseOut> {
    let (reader, writer) = (clients[0], clients[1]);
    let c = co.c;
    let me = c.rank();
    if me != reader && me != writer {
        return Ok((None, Counted::Idle));
    }
    alloc_one(c, chunk, SMALL)?;
    let mut times = Vec::with_capacity(n);
    let mut msgs = Msgs::default();
    for i in 0..warmup(n) + n {
        if me == writer {
            let v = increment(c, chunk)?;
            // Every answer to the write has arrived: what follows is the
            // read's.
            co.fence()?;
            let m0 = co.msgs();
            co.send(reader, tag(phase, WROTE), &v.to_le_bytes())?;
            co.expect(reader, tag(phase, READ))?;
            if i >= warmup(n) {
                msgs += co.msgs().since(m0);
            }
            continue;
        }
        let d = co.expect(writer, tag(phase, WROTE))?;
        let want = u64::from_le_bytes(d[..8].try_into().map_err(|_| bad("a short value"))?);
        let m0 = co.msgs();
        let t0 = Instant::now();
        let v = read_counter(c, chunk)?;
        let us = micros(t0.elapsed());
        if v != want {
            return Err(bad(&format!("read miss saw {v}, the writer wrote {want}")));
        }
        co.fence()?;
        if i >= warmup(n) {
            times.push(us);
            msgs += co.msgs().since(m0);
        }
        co.send(writer, tag(phase, READ), &[])?;
    }
    let measured = (me == reader).then_some(Measured { times, ops: n });
    Ok((measured, Counted::Windows(msgs)))
}

/// `s` clients take a shared copy (a read miss each, untimed), then the
/// leader's READWRITE + RELEASE is timed. A sharer counts from a fence after
/// its read until it hears the write is done (its invalidation and
/// acknowledgement); the writer counts from the last sharer's word to a
/// fence after its release.
fn write_miss(
    co: &mut Coord,
    clients: &[Rank],
    phase: u32,
    chunk: u64,
    n: usize,
    s: usize,
) -> SatResult<PhaseOut> {
    let writer = clients[0];
    let sharers = &clients[1..=s];
    let c = co.c;
    let me = c.rank();
    if me != writer && !sharers.contains(&me) {
        return Ok((None, Counted::Idle));
    }
    alloc_one(c, chunk, SMALL)?;
    let mut times = Vec::with_capacity(n);
    let mut msgs = Msgs::default();
    for i in 0..warmup(n) + n {
        if me != writer {
            read_counter(c, chunk)?;
            // Every answer to the read has arrived: what follows is the
            // write's.
            co.fence()?;
            let m0 = co.msgs();
            co.send(writer, tag(phase, READY), &[])?;
            co.expect(writer, tag(phase, DONE))?;
            if i >= warmup(n) {
                msgs += co.msgs().since(m0);
            }
            continue;
        }
        for &r in sharers {
            co.expect(r, tag(phase, READY))?;
        }
        let m0 = co.msgs();
        let t0 = Instant::now();
        increment(c, chunk)?;
        let us = micros(t0.elapsed());
        co.fence()?;
        if i >= warmup(n) {
            times.push(us);
            msgs += co.msgs().since(m0);
        }
        for &r in sharers {
            co.send(r, tag(phase, DONE), &[])?;
        }
    }
    let measured = (me == writer).then_some(Measured { times, ops: n });
    Ok((measured, Counted::Windows(msgs)))
}

/// Two clients take turns: READWRITE, counter + 1, RELEASE, then read until
/// the other's next value shows. The leader times a round (its write, the
/// hand-off, the other's write, the hand-off back); half a round is one
/// hand-off.
///
/// Both count the same number of each of their messages, over spans with
/// nothing under way at either end. The leader counts whole rounds, then a
/// fence: when it starts a round, the other has released and spins on
/// hits. The other counts from just before the release of the last warm-up
/// round to just before its last release: while it holds the chunk nothing
/// can reach it, whereas right after a release the leader may already be
/// invalidating its copy.
fn hand_off(
    co: &mut Coord,
    clients: &[Rank],
    chunk: u64,
    size: usize,
    n: usize,
) -> SatResult<PhaseOut> {
    let (a, b) = (clients[0], clients[1]);
    let c = co.c;
    let me = c.rank();
    if me != a && me != b {
        return Ok((None, Counted::Idle));
    }
    alloc_one(c, chunk, size)?;
    let warm = warmup(n) as u64;
    let last = warm + n as u64 - 1;
    let mut times = Vec::with_capacity(n);
    let mut m0 = Msgs::default();
    let mut msgs = Msgs::default();
    for k in 0..=last {
        if me == b {
            wait_for_value(co, chunk, 2 * k + 1)?;
            acquire_increment(c, chunk)?;
            if k == warm - 1 {
                m0 = co.msgs();
            }
            if k == last {
                msgs = co.msgs().since(m0);
            }
            c.release(chunk)?;
            continue;
        }
        if k == warm {
            m0 = co.msgs();
        }
        let t0 = Instant::now();
        let v = increment(c, chunk)?;
        if v != 2 * k + 1 {
            return Err(bad(&format!("hand-off wrote {v}, expected {}", 2 * k + 1)));
        }
        wait_for_value(co, chunk, 2 * k + 2)?;
        let us = micros(t0.elapsed());
        if k >= warm {
            times.push(us / 2.0);
        }
    }
    if me == a {
        co.fence()?;
        msgs = co.msgs().since(m0);
    }
    let measured = (me == a).then_some(Measured { times, ops: 2 * n });
    Ok((measured, Counted::Windows(msgs)))
}

fn protocol_worker(args: &[String], o: &Options) -> Result<(), String> {
    let iters = o.iters;
    let roles = Roles::new().role(1, move |c| bench_client(c, iters));
    run(roles, args.iter().cloned()).map_err(|e| e.to_string())
}

// ------------------------------------------------------------ raw worker

/// The bare transport between two ranks, busy polling (`bench_common`), for
/// the sizes of the rows. Rank 0 prints `RAW size median`.
fn raw_worker(args: &[String], o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let runs = [SMALL, KIB4, MIB].map(|size| (size, iterations(o.iters, size)));
    raw_ping_pong(args, &runs, |_, size, us| println!("RAW {size} {us:.3}"))
}

// ---------------------------------------------------------- orchestrator

fn orchestrate(o: &Options) -> Result<(), String> {
    let satrun = SatRun::find()?;
    // The topology is sat-core's, next to this crate in the workspace.
    let topology =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sat-core/topologies/bench-4-clients.xml");
    if !topology.exists() {
        return Err(format!("{} not found", topology.display()));
    }
    let iters = o.iters.to_string();
    println!(
        "Coherence operations over one server and four clients, median microseconds \
         ({} operations, {} for 1 MiB)",
        o.iters,
        iterations(o.iters, MIB)
    );
    println!(
        "{:<9} {:<22} {:>7} {:>10} {:>13} {:>13} {:>13} {:>10} {:>8}",
        "provider",
        "operation",
        "size",
        "median us",
        "client sends",
        "server sends",
        "protocol msgs",
        "raw RTT us",
        "SAT/raw"
    );
    for provider in &o.providers {
        let raw: Vec<(usize, f64)> = satrun
            .results(
                2,
                None,
                provider,
                &["--worker", "raw", "--iters", &iters],
                "RAW",
            )?
            .iter()
            .filter_map(|f| Some((f.first()?.parse().ok()?, f.get(1)?.parse().ok()?)))
            .collect();
        let results = satrun.results(
            5,
            Some(&topology),
            provider,
            &["--worker", "protocol", "--iters", &iters],
            "RESULT",
        )?;
        for row in &ROWS {
            let r = results
                .iter()
                .find(|f| f.first().map(String::as_str) == Some(row.key))
                .ok_or_else(|| format!("{provider}: the worker printed no {} result", row.key))?;
            let num =
                |i: usize| -> f64 { r.get(i).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN) };
            let (us, client, server) = (num(2), num(3), num(4));
            let rtt = raw
                .iter()
                .find(|&&(s, _)| s == row.size)
                .map_or(f64::NAN, |&(_, us)| us);
            println!(
                "{:<9} {:<22} {:>7} {:>10.2} {:>13.2} {:>13.2} {:>13.2} {:>10.2} {:>8.2}",
                provider,
                row.label,
                human(row.size),
                us,
                client,
                server,
                client + server,
                rtt,
                us / rtt
            );
        }
    }
    println!(
        "client sends: messages the clients sent per operation; server sends: messages the server \
         sent per operation, counted\n  where they arrive (Client::traffic: a client hears only \
         from its server); relayed coordination left out of both."
    );
    println!(
        "protocol msgs: client sends + server sends, measured. Home-based MESI needs \
         (protocol/mesi.rs): read hit 0, read miss 2,\n  write with s sharers 2+2s, release \
         after a write 1; the home is the clients' own server, so no forwarding hop is added."
    );
    println!(
        "write miss: the writer's READWRITE + RELEASE while s other clients hold shared copies. \
         write-release -> read: two clients\n  take turns to READWRITE-increment-RELEASE and read \
         until the other's value shows; half a round is one hand-off."
    );
    println!(
        "raw RTT: SAT's bare transport between two processes, same provider and size, busy \
         polling, in a run just before;\n  SAT/raw = median / raw RTT. The clients use the \
         default progress (SAT_PROGRESS=sleep: spin 50 us, then micro-sleep)."
    );
    Ok(())
}

fn main() {
    bench_common::main(
        "sat-protocol-bench",
        parse_options,
        |args, o| match o.worker.as_deref() {
            Some("raw") => raw_worker(args, &o).map_err(|e| e.to_string()),
            Some("protocol") => protocol_worker(args, &o),
            other => Err(format!(
                "a worker needs --worker raw or --worker protocol, not {other:?}"
            )),
        },
        orchestrate,
    );
}
