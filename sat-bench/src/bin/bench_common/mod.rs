//! What the benchmark programs (sat-transport-bench, sat-protocol-bench,
//! sat-handoff-bench, sat-sync-bench) share; each includes it with `mod bench_common;`.
//!
//! Each program is both an orchestrator, which starts `satrun` on itself and
//! prints a table of what its workers print, and the worker those runs start.
//! Here are the pieces they have in common: walking the command line, the
//! orchestrator's `satrun` runs ([`SatRun`]), and the raw round trip over the
//! bare transport ([`raw_ping_pong`]), which every table shows as the
//! yardstick of SAT's own operations.
//!
//! The raw round trip busy-polls on purpose: it is the best the transport can
//! do, as libfabric's `fi_pingpong` measures it, with no progress thread, no
//! sleep and no lock in the way, so that the ratios in the tables show what
//! SAT adds on top of the fabric.

// Not every program uses every helper.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sat_core::bootstrap::join;
use sat_core::transport::{Payload, Received, Sender, Transport};

// ------------------------------------------------------------ command line

/// Walks the options of `args` (the program's name first): `option` gets
/// each option's name and a function that takes its value, and returns
/// `Ok(false)` for a name it does not know.
pub fn parse_options(
    args: &[String],
    mut option: impl FnMut(&str, &mut dyn FnMut() -> Result<String, String>) -> Result<bool, String>,
) -> Result<(), String> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        if !option(a, &mut val)? {
            return Err(format!("unknown option {a}"));
        }
    }
    Ok(())
}

/// The value of `--providers`: a comma-separated list.
pub fn providers(value: &str) -> Vec<String> {
    value.split(',').map(str::to_string).collect()
}

/// The value of a count option such as `--iters`, which must be positive.
pub fn positive(option: &str, value: &str) -> Result<usize, String> {
    value
        .parse()
        .ok()
        .filter(|&n: &usize| n > 0)
        .ok_or_else(|| format!("{option} takes a positive number"))
}

// ---------------------------------------------------------------- figures

/// Unmeasured iterations before `n` measured ones: connections, buffers and
/// caches settle.
pub fn warmup(n: usize) -> usize {
    (n / 10).max(1)
}

/// The median of `v` (which it sorts), NaN if `v` is empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `d` in microseconds, the unit of every table.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A size for the tables: `64 B`, `4 KiB`, `1 MiB`.
pub fn human(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

// ------------------------------------------------------------ raw worker

/// The raw worker, on both ranks of a `satrun -n 2` run: for each
/// `(size, n)` of `runs`, `warmup(n)` and then `n` timed round trips of a
/// `size`-byte message, busy polling. Data messages carry no header (the
/// payload is the message, as in fi_pingpong); the closing handshake is the
/// one-byte header `[1]`. After each size rank 0 calls
/// `report(provider, size, median round trip in us)`.
pub fn raw_ping_pong(
    args: &[String],
    runs: &[(usize, usize)],
    mut report: impl FnMut(&str, usize, f64),
) -> Result<(), Box<dyn std::error::Error>> {
    let mut joined = join(args, |_| true)?;
    let provider = joined.provider.to_string();
    let t = &mut joined.transport;
    let me = t.rank();
    let peer = 1 - me;
    let max = runs.iter().map(|&(size, _)| size).max().unwrap_or(0);
    let buf: Arc<[u8]> = vec![0xA5u8; max].into();
    let mut peer_done = false;
    for &(size, n) in runs {
        let payload: Arc<[u8]> = buf[..size].into();
        let mut rtts = Vec::with_capacity(n);
        for i in 0..warmup(n) + n {
            if me == 0 {
                let start = Instant::now();
                t.send(peer, &[], Payload::Shared(&payload))?;
                wait_reply(t, size, &mut peer_done)?;
                if i >= warmup(n) {
                    rtts.push(micros(start.elapsed()));
                }
            } else {
                wait_reply(t, size, &mut peer_done)?;
                t.send(peer, &[], Payload::Shared(&payload))?;
            }
        }
        if me == 0 {
            report(&provider, size, median(&mut rtts));
        }
    }
    // Close together: neither side may leave while a message is in flight.
    // The peer's goodbye may arrive in the same poll as its last reply.
    t.send(peer, &[1], Payload::None)?;
    while !peer_done {
        t.poll(&mut |_, m| peer_done |= m.header == [1])?;
    }
    while !t.sends_drained()? {
        t.poll(&mut |_, _| {})?;
    }
    Ok(())
}

/// Busy-polls (as fi_pingpong does) until the peer's one message of this
/// iteration arrives, and checks its size.
fn wait_reply(
    t: &mut impl Transport,
    size: usize,
    peer_done: &mut bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut got = false;
    let mut wrong = None;
    while !got {
        t.poll(&mut |_: &mut dyn Sender, m: Received<'_>| {
            if m.header == [1] {
                *peer_done = true;
            } else {
                got = true;
                if m.payload.len() != size {
                    wrong = Some(m.payload.len());
                }
            }
        })?;
    }
    match wrong {
        Some(len) => Err(format!("expected {size} bytes, got {len}").into()),
        None => Ok(()),
    }
}

// ---------------------------------------------------------- orchestrator

/// This program and the `satrun` built next to it, which starts its workers.
pub struct SatRun {
    satrun: PathBuf,
    me: PathBuf,
    /// Set in the environment of every run.
    env: Vec<(String, String)>,
}

impl SatRun {
    pub fn find() -> Result<Self, String> {
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let satrun = me.with_file_name("satrun");
        if !satrun.exists() {
            return Err(format!(
                "{} not found: build it first (cargo build --release --bin satrun)",
                satrun.display()
            ));
        }
        Ok(SatRun {
            satrun,
            me,
            env: Vec::new(),
        })
    }

    /// Runs from now on with `name=value` in their environment.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.retain(|(n, _)| n != name);
        self.env.push((name.into(), value.into()));
    }

    /// Runs `satrun -n ranks [--topology topology] --provider provider --
    /// <this program> worker...` and returns the words after `marker` on
    /// each line that has it (satrun prefixes lines with the rank).
    pub fn results(
        &self,
        ranks: u32,
        topology: Option<&Path>,
        provider: &str,
        worker: &[&str],
        marker: &str,
    ) -> Result<Vec<Vec<String>>, String> {
        Ok(self
            .marked(ranks, topology, provider, worker, &[marker])?
            .into_iter()
            .map(|(_, words)| words)
            .collect())
    }

    /// As [`SatRun::results`], for lines marked by any of `markers`: each
    /// with its marker.
    pub fn marked(
        &self,
        ranks: u32,
        topology: Option<&Path>,
        provider: &str,
        worker: &[&str],
        markers: &[&str],
    ) -> Result<Vec<(String, Vec<String>)>, String> {
        self.marked_program(&self.me, ranks, topology, provider, worker, markers)
    }

    /// As [`SatRun::marked`], running `program` instead of this one.
    pub fn marked_program(
        &self,
        program: &Path,
        ranks: u32,
        topology: Option<&Path>,
        provider: &str,
        worker: &[&str],
        markers: &[&str],
    ) -> Result<Vec<(String, Vec<String>)>, String> {
        let mut cmd = Command::new(&self.satrun);
        cmd.args(["-n", &ranks.to_string()]);
        if let Some(t) = topology {
            cmd.arg("--topology").arg(t);
        }
        let out = cmd
            .envs(self.env.iter().map(|(n, v)| (n, v)))
            .args(["--provider", provider, "--"])
            .arg(program)
            .args(worker)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot start {}: {e}", self.satrun.display()))?;
        if !out.status.success() {
            return Err(format!(
                "the worker run ({provider}, {}) failed: {}{}",
                worker.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(BufReader::new(&out.stdout[..])
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| {
                let f: Vec<String> = line.split_whitespace().map(str::to_string).collect();
                let i = f.iter().position(|w| markers.contains(&w.as_str()))?;
                Some((f[i].clone(), f[i + 1..].to_vec()))
            })
            .collect())
    }
}

/// The S-DSM's messages around one client, user messages left out: those
/// it sent, and those its server sent to it. A client hears only from its
/// server, so the second figure is counted where it arrives: with one
/// server, whose every message goes to a client, the clients' figures added
/// up are what the server sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Msgs {
    pub client: u64,
    pub server: u64,
}

impl Msgs {
    /// What travelled between `earlier` and `self`.
    pub fn since(self, earlier: Msgs) -> Msgs {
        Msgs {
            client: self.client - earlier.client,
            server: self.server - earlier.server,
        }
    }
}

impl std::ops::AddAssign for Msgs {
    fn add_assign(&mut self, other: Msgs) {
        self.client += other.client;
        self.server += other.server;
    }
}

/// The tag of [`Coord::fence`]'s message, which no benchmark uses otherwise.
pub const FENCE: u32 = u32::MAX;

/// The clients of a benchmark run order their phases with relayed user
/// messages, never with sleeps; this keeps the messages that arrive early
/// for later. The client counts user messages apart
/// ([`sat_core::client::Traffic`]), so the S-DSM's own are its totals minus
/// them.
pub struct Coord<'a> {
    pub c: &'a sat_core::client::Client,
    stash: Vec<sat_core::client::UserMessage>,
}

impl<'a> Coord<'a> {
    pub fn new(c: &'a sat_core::client::Client) -> Coord<'a> {
        Coord {
            c,
            stash: Vec::new(),
        }
    }

    pub fn send(&mut self, to: sat_core::Rank, tag: u32, data: &[u8]) -> sat_core::SatResult<()> {
        self.c.send(to, tag, data)
    }

    /// Waits for the message `tag` from `from`; others are kept for later.
    pub fn expect(&mut self, from: sat_core::Rank, tag: u32) -> sat_core::SatResult<Vec<u8>> {
        if let Some(i) = self
            .stash
            .iter()
            .position(|m| m.from == from && m.tag == tag)
        {
            return Ok(self.stash.remove(i).data);
        }
        loop {
            let m = self.c.recv()?;
            if m.from == from && m.tag == tag {
                return Ok(m.data);
            }
            self.stash.push(m);
        }
    }

    /// Drives this client's progress once from the calling thread.
    pub fn progress(&mut self) -> sat_core::SatResult<()> {
        if let Some(m) = self.c.try_recv()? {
            self.stash.push(m);
        }
        Ok(())
    }

    /// A user message from this client to itself, through its server, and
    /// back. It leaves after everything this client sent before it, and the
    /// server relays it after handling those and after sending what they
    /// caused to this client, which arrives first: once it is back, every
    /// answer to this client's earlier messages has been received.
    pub fn fence(&mut self) -> sat_core::SatResult<()> {
        let me = self.c.rank();
        self.send(me, FENCE, &[])?;
        self.expect(me, FENCE).map(|_| ())
    }

    /// The S-DSM's messages this client has sent and received so far.
    pub fn msgs(&self) -> Msgs {
        let t = self.c.traffic();
        Msgs {
            client: t.sdsm_sent(),
            server: t.sdsm_received(),
        }
    }
}

// ------------------------------------------------------ phases of a run

/// The steps of [`phase_barrier`], in the low bits of a relay's tag (the
/// phase is above): a benchmark's own steps take 1 to 7.
const ARRIVE: u32 = 8;
const GO: u32 = 9;
const REPORT: u32 = 10;

/// The tag of step `step` (below 16) of phase `phase`.
pub fn tag(phase: u32, step: u32) -> u32 {
    phase << 4 | step
}

/// What a client counted in a phase: the S-DSM's messages in its windows,
/// or, for a client that took no part, since the end of the previous phase.
pub enum Counted {
    Windows(Msgs),
    Idle,
}

/// Ends a phase, in two rounds of relayed messages: every client tells the
/// leader it has arrived and waits for its go, then hands it its count; the
/// leader returns the sum. Once every client has arrived, no operation of
/// the phase is under way and the server has sent all they caused (each
/// arrival follows, on its client's path, everything that client sent
/// before), so a client's reading after its go holds all the phase sent to
/// it: an idle client counts up to there, from `mark`, its reading after
/// the previous go, and `mark` becomes this reading.
pub fn phase_barrier(
    co: &mut Coord<'_>,
    clients: &[sat_core::Rank],
    phase: u32,
    counted: Counted,
    mark: &mut Msgs,
) -> sat_core::SatResult<Msgs> {
    let leader = clients[0];
    let me = co.c.rank();
    if me != leader {
        co.send(leader, tag(phase, ARRIVE), &[])?;
        co.expect(leader, tag(phase, GO))?;
    } else {
        for &r in &clients[1..] {
            co.expect(r, tag(phase, ARRIVE))?;
        }
        for &r in &clients[1..] {
            co.send(r, tag(phase, GO), &[])?;
        }
    }
    let now = co.msgs();
    let mine = match counted {
        Counted::Windows(m) => m,
        Counted::Idle => now.since(*mark),
    };
    *mark = now;
    if me != leader {
        let mut d = mine.client.to_le_bytes().to_vec();
        d.extend_from_slice(&mine.server.to_le_bytes());
        co.send(leader, tag(phase, REPORT), &d)?;
        return Ok(Msgs::default());
    }
    let mut sum = mine;
    for &r in &clients[1..] {
        let d = co.expect(r, tag(phase, REPORT))?;
        let mut at = 0;
        sum += Msgs {
            client: take_u64(&d, &mut at)?,
            server: take_u64(&d, &mut at)?,
        };
    }
    Ok(sum)
}

// ------------------------------------------------------ figures between clients

/// Appends a list of figures to a message.
pub fn push_f64s(buf: &mut Vec<u8>, v: &[f64]) {
    buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
    for x in v {
        buf.extend_from_slice(&x.to_bits().to_le_bytes());
    }
}

/// The next word of a message of figures.
pub fn take_u64(d: &[u8], at: &mut usize) -> sat_core::SatResult<u64> {
    let w = d
        .get(*at..*at + 8)
        .ok_or_else(|| sat_core::SatError::Usage("bench: a short message of figures".into()))?
        .try_into()
        .expect("8 bytes");
    *at += 8;
    Ok(u64::from_le_bytes(w))
}

/// The next list of figures of a message.
pub fn take_f64s(d: &[u8], at: &mut usize) -> sat_core::SatResult<Vec<f64>> {
    let len = take_u64(d, at)? as usize;
    (0..len)
        .map(|_| take_u64(d, at).map(f64::from_bits))
        .collect()
}

// ------------------------------------------------------------------ main

/// A benchmark program's `main`: its options parsed (exit 2 on a bad one);
/// then, under `satrun` (`SAT_RANK` set), the worker, else the orchestrator
/// that starts the workers; a failure is printed and exits 1.
pub fn main<O>(
    name: &str,
    parse: impl FnOnce(&[String]) -> Result<O, String>,
    worker: impl FnOnce(&[String], O) -> Result<(), String>,
    orchestrate: impl FnOnce(&O) -> Result<(), String>,
) {
    let args: Vec<String> = std::env::args().collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(2);
        }
    };
    let result = if std::env::var_os("SAT_RANK").is_some() {
        worker(&args, o)
    } else {
        orchestrate(&o)
    };
    if let Err(e) = result {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}
