//! Every consistency protocol on the same workloads (`make bench-protocols`,
//! docs/PROTOCOLS.md): time and messages per operation, in one table.
//!
//! ```text
//! sat-protocols-bench [--providers shm] [--iters 400] [--workloads a,b] [--protocols a,b] [--json]
//!                     [--stats DIR] [--videostream PATH] [--advice DIR]
//! ```
//! The `adaptive` protocol's row is named `mesi+adaptive`: the workload's
//! MESI program run with `SAT_ADAPTIVE=1`, the opt-in that allocates its
//! MESI chunks adaptive (each starts on MESI and its home moves it, while
//! the run goes on, to the protocol its requests call for).
//! `--advice DIR` adds a row per workload, `mesi+advice`: its MESI program
//! run with `SAT_ADVICE=DIR/<provider>-<workload>.json`, the adviser's
//! protocol per chunk (`tools/sat-stats --advise --json` on that workload's
//! `--stats` files; `make bench-advised` does the three steps).
//! `--stats DIR`: the MESI run of each workload writes its statistics files
//! to `DIR/<provider>-<workload>` (`SAT_STATS`), which `tools/sat-stats
//! --advise` reads to recommend a protocol (docs/PROTOCOLS.md, "The
//! adviser").
//! Without `SAT_RANK` in its environment the program orchestrates: for each
//! provider, workload and protocol it starts `satrun -n 5 --topology
//! sat-core/topologies/bench-4-clients.xml` on itself (one server, home of
//! every chunk, and four clients) with `SAT_HOST_SEGMENTS=off`: the
//! protocols' own messages, which runs over several hosts take (on one host
//! every protocol reaches a host slot the same way).
//!
//! The workloads (each client is one process):
//! - `producer-consumer`: client 1 writes a 1 KiB chunk (WRITE), then tells
//!   the three others in turn, who each READ it (timed: the consumer's read
//!   latency) and answer. Per operation: one round.
//! - `migratory-counter`: the counter goes round the four clients, each
//!   adding one in a READWRITE scope when its turn comes (relayed). Per
//!   operation: one increment (timed). The final count is checked.
//! - `false-sharing`: the four clients write their own 256-byte row of one
//!   shared 1 KiB chunk (READWRITE, the other rows kept), all at once, with
//!   a few microseconds of computing between two writes. Per operation: one
//!   row write (timed). Every row's last value is checked.
//! - `stencil`: each client owns a 1 KiB block; an iteration writes it from
//!   its neighbours' edges, then a barrier, then reads both neighbours'
//!   blocks, then a barrier. Per operation: one iteration of one client.
//! - `video-pipeline` (with `--videostream PATH`, the program
//!   examples-c/videostream, which `make bench-protocols` builds): the
//!   report's video pipeline (section 3.2) as bench/pipeline.py runs it (one
//!   server, an input, two processing tasks and an output;
//!   bench/pipeline/sat-1server.xml), `--iters` frames of 640x480, every
//!   channel object under the protocol (`--protocol`). Per operation: one
//!   frame, the time the pipeline's rate gives (1 / frames per second),
//!   and the messages every process sent (its statistics files, SAT_STATS)
//!   over the frames.
//!
//! The messages are the S-DSM's, the clients' sends and their server's
//! (counted where they arrive, as in sat-protocol-bench: with one server,
//! every message it sends goes to a client); relayed coordination is left
//! out, barriers are in. Times are medians over every client's samples.

mod bench_common;

use std::path::Path;
use std::time::Instant;

use bench_common::{median, micros, phase_barrier, tag, Coord, Counted, SatRun};
use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::{Access, ProtocolId};
use sat_core::{Rank, SatResult};

/// The workloads, by the names `--workloads` takes.
const WORKLOADS: [&str; 5] = [
    "producer-consumer",
    "migratory-counter",
    "false-sharing",
    "stencil",
    "video-pipeline",
];

/// The workload that runs examples-c/videostream (`--videostream`).
const PIPELINE: &str = "video-pipeline";

const PRODUCED: usize = 1024;
const ROW: usize = 256;
const BLOCK: usize = 1024;

/// Steps of the workloads' own relays (`bench_common::tag`).
const ROUND: u32 = 1;
const READ_DONE: u32 = 2;
const TIMES: u32 = 3;

struct Options {
    providers: Vec<String>,
    iters: usize,
    workloads: Vec<String>,
    protocols: Vec<ProtocolId>,
    json: bool,
    /// Where the MESI runs write their statistics files.
    stats: Option<std::path::PathBuf>,
    /// examples-c/videostream, for the video pipeline.
    videostream: Option<std::path::PathBuf>,
    /// Where the adviser's files are, for the `mesi+advice` rows.
    advice: Option<std::path::PathBuf>,
    /// In a worker: its workload and protocol.
    worker: Option<(String, ProtocolId)>,
}

fn protocol_named(name: &str) -> Result<ProtocolId, String> {
    ProtocolId::from_short_name(name).ok_or_else(|| {
        let names: Vec<&str> = ProtocolId::ALL.iter().map(|p| p.short_name()).collect();
        format!(
            "no protocol is called {name:?}: give one of {}",
            names.join(", ")
        )
    })
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        providers: vec!["shm".into()],
        iters: 400,
        workloads: Vec::new(),
        protocols: ProtocolId::ALL.to_vec(),
        json: false,
        stats: None,
        videostream: None,
        advice: None,
        worker: None,
    };
    let mut worker = None;
    let mut protocol = None;
    bench_common::parse_options(args, |a, val| {
        match a {
            "--providers" => o.providers = bench_common::providers(&val()?),
            "--iters" => o.iters = bench_common::positive(a, &val()?)?,
            "--json" => o.json = true,
            "--stats" => o.stats = Some(val()?.into()),
            "--videostream" => o.videostream = Some(val()?.into()),
            "--advice" => o.advice = Some(val()?.into()),
            "--workloads" => {
                o.workloads = val()?.split(',').map(str::to_string).collect();
                if let Some(w) = o
                    .workloads
                    .iter()
                    .find(|w| !WORKLOADS.contains(&w.as_str()))
                {
                    return Err(format!(
                        "no workload is called {w:?}: give some of {}",
                        WORKLOADS.join(", ")
                    ));
                }
            }
            "--protocols" => {
                o.protocols = val()?
                    .split(',')
                    .map(protocol_named)
                    .collect::<Result<_, _>>()?
            }
            "--worker" => worker = Some(val()?),
            "--protocol" => protocol = Some(protocol_named(&val()?)?),
            "--topology" => {
                val()?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if let Some(w) = worker {
        o.worker = Some((w, protocol.ok_or("a worker needs --protocol")?));
    }
    // Every workload by default; the video pipeline when its program is given.
    if o.workloads.is_empty() {
        o.workloads = WORKLOADS
            .iter()
            .filter(|&&w| w != PIPELINE || o.videostream.is_some())
            .map(|w| w.to_string())
            .collect();
    }
    if o.workloads.iter().any(|w| w == PIPELINE) && o.videostream.is_none() {
        return Err(format!(
            "the {PIPELINE} workload runs examples-c/videostream: give its path with \
             --videostream PATH (make bench-protocols builds it)"
        ));
    }
    Ok(o)
}

fn word(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().expect("8 bytes"))
}

/// What a client measured: its samples (microseconds) and the operations
/// its message counts are divided by (the leader sums them).
struct Measured {
    times: Vec<f64>,
    ops: u64,
    /// A check that failed (wrong data), reported in the table.
    wrong: Option<String>,
}

// ---------------------------------------------------------------- worker

fn bench_client(c: &Client, workload: &str, protocol: ProtocolId, iters: usize) -> RoleResult {
    let clients = c.topology().clients();
    if clients.len() != 4 {
        return Err(format!(
            "the protocols bench runs 4 clients, this run has {}",
            clients.len()
        )
        .into());
    }
    let mut co = Coord::new(c);
    // The chunks first, so that the counts leave their allocation out.
    for (id, size) in chunks_of(workload, clients.len()) {
        c.malloc_lst(protocol, &[id], &[size])?;
    }
    let mut mark = co.msgs();
    let measured = match workload {
        "producer-consumer" => producer_consumer(&mut co, &clients, iters)?,
        "migratory-counter" => migratory_counter(&mut co, &clients, iters)?,
        "false-sharing" => false_sharing(&mut co, &clients, iters)?,
        "stencil" => stencil(&mut co, &clients, iters)?,
        other => return Err(format!("no workload {other}").into()),
    };
    // Everything each client's operations caused has arrived once all have
    // met (phase_barrier); the counts cover the whole workload.
    let total = phase_barrier(&mut co, &clients, 1, Counted::Idle, &mut mark)?;
    // The samples go to the leader.
    let leader = clients[0];
    let mut times = measured.times;
    if c.rank() != leader {
        let mut d = Vec::new();
        bench_common::push_f64s(&mut d, &times);
        d.extend_from_slice(measured.wrong.as_deref().unwrap_or("").as_bytes());
        co.send(leader, tag(2, TIMES), &d)?;
        return Ok(());
    }
    let mut wrong = measured.wrong;
    for &r in &clients[1..] {
        let d = co.expect(r, tag(2, TIMES))?;
        let mut at = 0;
        times.extend(bench_common::take_f64s(&d, &mut at)?);
        let text = String::from_utf8_lossy(&d[at..]).to_string();
        if !text.is_empty() && wrong.is_none() {
            wrong = Some(text);
        }
    }
    let ops = measured.ops as f64;
    println!(
        "RESULT {workload} {} {:.3} {:.3} {}",
        protocol.short_name(),
        median(&mut times),
        (total.client + total.server) as f64 / ops,
        wrong.unwrap_or_else(|| "ok".into()).replace(' ', "_")
    );
    Ok(())
}

/// The chunks of a workload: (id, size).
fn chunks_of(workload: &str, clients: usize) -> Vec<(u64, usize)> {
    match workload {
        "producer-consumer" => vec![(10, PRODUCED)],
        "migratory-counter" => vec![(11, 64)],
        "false-sharing" => vec![(12, ROW * clients)],
        _ => (0..clients as u64).map(|k| (20 + k, BLOCK)).collect(),
    }
}

/// Client 1 writes a round's value into every word, tells the others; each
/// times its READ, checks every word, and answers.
fn producer_consumer(co: &mut Coord, clients: &[Rank], iters: usize) -> SatResult<Measured> {
    let c = co.c;
    let chunk = 10;
    let producer = clients[0];
    let mut times = Vec::new();
    let mut wrong = None;
    for round in 1..=iters as u64 {
        if c.rank() == producer {
            c.acquire(chunk, Access::Write)?;
            c.with_data_mut(chunk, |d| {
                for w in d.chunks_exact_mut(8) {
                    w.copy_from_slice(&round.to_le_bytes());
                }
            })?;
            c.release(chunk)?;
            // One consumer at a time: its read alone is timed, not the
            // scheduling of four processes on a few cores.
            for &r in &clients[1..] {
                co.send(r, tag(3, ROUND), &[])?;
                co.expect(r, tag(3, READ_DONE))?;
            }
            continue;
        }
        co.expect(producer, tag(3, ROUND))?;
        let t0 = Instant::now();
        c.acquire(chunk, Access::Read)?;
        let ok = c.with_data(chunk, |d| {
            (0..PRODUCED).step_by(8).all(|at| word(d, at) == round)
        })?;
        c.release(chunk)?;
        times.push(micros(t0.elapsed()));
        if !ok && wrong.is_none() {
            wrong = Some(format!("round {round} read stale words"));
        }
        co.send(producer, tag(3, READ_DONE), &[])?;
    }
    Ok(Measured {
        times,
        ops: iters as u64,
        wrong,
    })
}

/// The counter goes round: each client in turn adds one (the turn passes
/// in relayed messages), `iters` times each.
fn migratory_counter(co: &mut Coord, clients: &[Rank], iters: usize) -> SatResult<Measured> {
    let c = co.c;
    let chunk = 11;
    let me = clients
        .iter()
        .position(|&r| r == c.rank())
        .expect("a client");
    let (before, after) = (
        clients[(me + clients.len() - 1) % clients.len()],
        clients[(me + 1) % clients.len()],
    );
    let mut times = Vec::with_capacity(iters);
    for i in 0..iters {
        if me != 0 || i > 0 {
            co.expect(before, tag(5, ROUND))?;
        }
        let t0 = Instant::now();
        c.acquire(chunk, Access::ReadWrite)?;
        c.with_data_mut(chunk, |d| {
            let v = word(d, 0) + 1;
            d[..8].copy_from_slice(&v.to_le_bytes());
        })?;
        c.release(chunk)?;
        times.push(micros(t0.elapsed()));
        // The last client's last turn ends the round: nobody comes after.
        if me + 1 < clients.len() || i + 1 < iters {
            co.send(after, tag(5, ROUND), &[])?;
        }
    }
    start_together(co, clients)?;
    c.acquire(chunk, Access::Read)?;
    let got = c.with_data(chunk, |d| word(d, 0))?;
    c.release(chunk)?;
    let want = (iters * clients.len()) as u64;
    Ok(Measured {
        times,
        ops: want,
        wrong: (got != want).then(|| format!("the counter holds {got} of {want} additions")),
    })
}

/// Some computing between two writes of a row (the same for every
/// protocol): a row's worth of arithmetic, a few microseconds.
fn compute(row: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for _ in 0..8 {
        for w in row.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            w.copy_from_slice(&v.wrapping_add(x).to_le_bytes());
        }
    }
}

/// Everyone writes its own row of one chunk, `iters` times, at once, with
/// some computing between two writes.
fn false_sharing(co: &mut Coord, clients: &[Rank], iters: usize) -> SatResult<Measured> {
    let c = co.c;
    let chunk = 12;
    let me = clients
        .iter()
        .position(|&r| r == c.rank())
        .expect("a client");
    start_together(co, clients)?;
    let mut times = Vec::with_capacity(iters);
    let mut scratch = vec![0u8; ROW];
    for i in 1..=iters as u64 {
        compute(&mut scratch, i);
        let t0 = Instant::now();
        c.acquire(chunk, Access::ReadWrite)?;
        c.with_data_mut(chunk, |d| {
            for w in d[me * ROW..(me + 1) * ROW].chunks_exact_mut(8) {
                w.copy_from_slice(&i.to_le_bytes());
            }
        })?;
        c.release(chunk)?;
        times.push(micros(t0.elapsed()));
    }
    start_together(co, clients)?;
    c.acquire(chunk, Access::Read)?;
    let rows_ok = c.with_data(chunk, |d| {
        (0..clients.len()).all(|k| {
            (k * ROW..(k + 1) * ROW)
                .step_by(8)
                .all(|at| word(d, at) == iters as u64)
        })
    })?;
    c.release(chunk)?;
    Ok(Measured {
        times,
        ops: (iters * clients.len()) as u64,
        wrong: (!rows_ok).then(|| "a row lost its writer's last value".to_string()),
    })
}

/// Each client owns a block; an iteration: write it (from the neighbours'
/// edges read last time), barrier, read both neighbours, barrier.
fn stencil(co: &mut Coord, clients: &[Rank], iters: usize) -> SatResult<Measured> {
    let c = co.c;
    let n = clients.len();
    let me = clients
        .iter()
        .position(|&r| r == c.rank())
        .expect("a client");
    let blocks: Vec<u64> = (0..n as u64).map(|k| 20 + k).collect();
    let (left, right) = (blocks[(me + n - 1) % n], blocks[(me + 1) % n]);
    let mut edges = (0u64, 0u64);
    let mut times = Vec::with_capacity(iters);
    let mut wrong = None;
    c.barrier(90, n as u32)?;
    for i in 1..=iters as u64 {
        let t0 = Instant::now();
        c.acquire(blocks[me], Access::ReadWrite)?;
        // Below 1000: the neighbours' edges, so that the data depends on
        // what was read.
        let value = i * 1000 + (edges.0 + edges.1) % 1000;
        c.with_data_mut(blocks[me], |d| {
            for w in d.chunks_exact_mut(8) {
                w.copy_from_slice(&value.to_le_bytes());
            }
        })?;
        c.release(blocks[me])?;
        c.barrier(91, n as u32)?;
        for (k, &b) in [left, right].iter().enumerate() {
            c.acquire(b, Access::Read)?;
            let (first, last) = c.with_data(b, |d| (word(d, 0), word(d, BLOCK - 8)))?;
            c.release(b)?;
            if (first / 1000 != i || first != last) && wrong.is_none() {
                wrong = Some(format!("iteration {i} read a neighbour's block at {first}"));
            }
            if k == 0 {
                edges.0 = last;
            } else {
                edges.1 = first;
            }
        }
        c.barrier(92, n as u32)?;
        times.push(micros(t0.elapsed()));
    }
    Ok(Measured {
        times,
        ops: (iters * n) as u64,
        wrong,
    })
}

/// The clients start a concurrent phase together (relayed messages: the
/// leader hears from all, then tells all).
fn start_together(co: &mut Coord, clients: &[Rank]) -> SatResult<()> {
    let leader = clients[0];
    if co.c.rank() != leader {
        co.send(leader, tag(4, ROUND), &[])?;
        co.expect(leader, tag(4, READ_DONE)).map(|_| ())
    } else {
        for &r in &clients[1..] {
            co.expect(r, tag(4, ROUND))?;
        }
        for &r in &clients[1..] {
            co.send(r, tag(4, READ_DONE), &[])?;
        }
        Ok(())
    }
}

fn worker(args: &[String], o: Options) -> Result<(), String> {
    let (workload, protocol) = o.worker.clone().expect("a worker");
    let iters = o.iters;
    let roles = Roles::new().role(1, move |c| bench_client(c, &workload, protocol, iters));
    run(roles, args.iter().cloned()).map_err(|e| e.to_string())
}

// ---------------------------------------------------------- orchestrator

/// One cell of the table.
struct Cell {
    provider: String,
    workload: String,
    protocol: ProtocolId,
    /// A MESI program run with the adviser's protocols (`SAT_ADVICE`).
    advised: bool,
    us: f64,
    msgs: f64,
    check: String,
}

impl Cell {
    /// The protocol column: `mesi+advice` for a run with the adviser's,
    /// `mesi+adaptive` for one with `SAT_ADAPTIVE=1`.
    fn name(&self) -> String {
        if self.advised {
            "mesi+advice".into()
        } else if self.protocol == ProtocolId::Adaptive {
            "mesi+adaptive".into()
        } else {
            self.protocol.short_name().into()
        }
    }
}

fn orchestrate(o: &Options) -> Result<(), String> {
    let mut satrun = SatRun::find()?;
    // The protocols' own messages: what runs over several hosts take.
    satrun.set_env("SAT_HOST_SEGMENTS", "off");
    let topology =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sat-core/topologies/bench-4-clients.xml");
    let iters = o.iters.to_string();
    let mut cells = Vec::new();
    for provider in &o.providers {
        for workload in &o.workloads {
            // Each protocol, then MESI with the adviser's protocols.
            let advice = o
                .advice
                .as_ref()
                .map(|d| d.join(format!("{provider}-{workload}.json")));
            let runs = o
                .protocols
                .iter()
                .map(|&p| (p, None))
                .chain(advice.map(|a| (ProtocolId::HomeMesi, Some(a))));
            for (protocol, advice) in runs {
                let advised = advice.is_some();
                let advice = advice.map(|a| a.to_string_lossy().into_owned());
                satrun.set_env("SAT_ADVICE", advice.as_deref().unwrap_or(""));
                // Adaptive: the MESI program, with the opt-in.
                let adaptive = protocol == ProtocolId::Adaptive;
                satrun.set_env("SAT_ADAPTIVE", if adaptive { "1" } else { "" });
                let program_protocol = protocol.starting();
                let stats = o
                    .stats
                    .as_ref()
                    .filter(|_| protocol == ProtocolId::HomeMesi && !advised)
                    .map(|d| d.join(format!("{provider}-{workload}")));
                if let Some(dir) = &stats {
                    // A folder of one run: files of an earlier one would mix in.
                    let _ = std::fs::remove_dir_all(dir);
                }
                if workload == PIPELINE {
                    let program = o.videostream.as_deref().expect("checked with the options");
                    let cell = pipeline(
                        &mut satrun,
                        program,
                        (provider, program_protocol),
                        o.iters,
                        stats.as_deref(),
                    )?;
                    cells.push(Cell {
                        advised,
                        protocol,
                        ..cell
                    });
                    continue;
                }
                let dir = stats.as_ref().map(|d| d.to_string_lossy().into_owned());
                satrun.set_env("SAT_STATS", dir.as_deref().unwrap_or(""));
                let results = satrun.results(
                    5,
                    Some(&topology),
                    provider,
                    &[
                        "--worker",
                        workload,
                        "--protocol",
                        program_protocol.short_name(),
                        "--iters",
                        &iters,
                    ],
                    "RESULT",
                )?;
                let r = results.first().ok_or_else(|| {
                    format!("{provider} {workload} {}: no result", protocol.short_name())
                })?;
                let num =
                    |i: usize| -> f64 { r.get(i).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN) };
                cells.push(Cell {
                    provider: provider.clone(),
                    workload: workload.clone(),
                    protocol,
                    advised,
                    us: num(2),
                    msgs: num(3),
                    check: r.get(4).cloned().unwrap_or_default().replace('_', " "),
                });
            }
        }
    }
    if o.json {
        print_json(&cells);
    } else {
        print_table(&cells, o.iters);
    }
    Ok(())
}

/// The video pipeline under `protocol`: one frame per operation, the time
/// of its rate, and the messages every process sent per frame (counted in
/// the run's statistics files, kept in `keep` when given, else in a
/// temporary folder removed after).
fn pipeline(
    satrun: &mut SatRun,
    program: &Path,
    (provider, protocol): (&str, ProtocolId),
    frames: usize,
    keep: Option<&Path>,
) -> Result<Cell, String> {
    let topology = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/pipeline/sat-1server.xml");
    let stats = keep.map(Path::to_path_buf).unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "sat-protocols-bench-{}-{}",
            std::process::id(),
            protocol.short_name()
        ))
    });
    let _ = std::fs::remove_dir_all(&stats);
    satrun.set_env("SAT_STATS", &stats.to_string_lossy());
    let frames_arg = frames.to_string();
    let lines = satrun.marked_program(
        program,
        5,
        Some(&topology),
        provider,
        &[
            "--frames",
            &frames_arg,
            "--width",
            "640",
            "--height",
            "480",
            "--no-check",
            "--protocol",
            protocol.short_name(),
        ],
        &["output:"],
    );
    satrun.set_env("SAT_STATS", "");
    let messages = sent_messages(&stats);
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&stats);
    }
    let lines = lines?;
    // "output: N frames in S s: F frames/s"; "output: N frames, each exactly once".
    let rate = lines.iter().find_map(|(_, w)| {
        (w.get(1).map(String::as_str) == Some("frames")
            && w.get(2).map(String::as_str) == Some("in"))
        .then(|| w.get(5)?.parse::<f64>().ok())
        .flatten()
    });
    let once = lines.iter().any(|(_, w)| {
        w.join(" ")
            .starts_with(&format!("{frames} frames, each exactly once"))
    });
    let rate = rate.ok_or_else(|| format!("{PIPELINE} {}: no rate line", protocol.short_name()))?;
    Ok(Cell {
        provider: provider.to_string(),
        workload: PIPELINE.to_string(),
        protocol,
        advised: false,
        us: 1e6 / rate,
        msgs: messages? as f64 / frames as f64,
        check: if once {
            "ok".into()
        } else {
            "frames lost or repeated".into()
        },
    })
}

/// The messages the processes of a run sent: the `"messages"` counts of the
/// `sent` lists of its statistics files (docs/STATISTICS.md).
fn sent_messages(dir: &Path) -> Result<u64, String> {
    let mut total = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for part in text.split("\"messages\":").skip(1) {
            let digits: String = part
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            total += digits
                .parse::<u64>()
                .map_err(|_| format!("{}: a malformed count", path.display()))?;
        }
    }
    Ok(total)
}

fn print_table(cells: &[Cell], iters: usize) {
    println!(
        "Every protocol on the same workloads: one server and four clients, SAT_HOST_SEGMENTS=off \
         (the protocols' messages), {iters} operations per client"
    );
    println!(
        "{:<9} {:<18} {:<13} {:>12} {:>12} {:>8}  check",
        "provider", "workload", "protocol", "median us", "msgs per op", "vs mesi"
    );
    for c in cells {
        let mesi = cells
            .iter()
            .find(|m| {
                m.provider == c.provider
                    && m.workload == c.workload
                    && m.protocol == ProtocolId::HomeMesi
                    && !m.advised
            })
            .map_or(f64::NAN, |m| m.us);
        println!(
            "{:<9} {:<18} {:<13} {:>12.2} {:>12.2} {:>8.2}  {}",
            c.provider,
            c.workload,
            c.name(),
            c.us,
            c.msgs,
            c.us / mesi,
            c.check
        );
    }
    println!(
        "median us: producer-consumer, a consumer's READ after the producer's release; \
         migratory-counter and false-sharing, one\n  READWRITE-RELEASE; stencil, one iteration \
         (write, barrier, two reads, barrier); video-pipeline, one frame (1 / frames per \
         second).\n  msgs per op: the S-DSM's messages, clients' and server's, barriers in, per \
         round, increment, row write, client-iteration or frame.\n  vs mesi: median / MESI's."
    );
}

fn print_json(cells: &[Cell]) {
    let rows: Vec<String> = cells
        .iter()
        .map(|c| {
            format!(
                "{{\"provider\": \"{}\", \"workload\": \"{}\", \"protocol\": \"{}\", \
                 \"median_us\": {:.3}, \"messages_per_op\": {:.3}, \"check\": \"{}\"}}",
                c.provider,
                c.workload,
                c.name(),
                c.us,
                c.msgs,
                c.check
            )
        })
        .collect();
    println!("[\n  {}\n]", rows.join(",\n  "));
}

fn main() {
    bench_common::main("sat-protocols-bench", parse_options, worker, orchestrate);
}
