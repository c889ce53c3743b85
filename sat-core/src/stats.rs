//! The statistics stream (section 3.1 of the SAT report, Figure 15).
//!
//! `SAT_STATS=DIR` makes every process keep performance events in its own
//! memory and write them to `DIR/sat-stats.<rank>.<pid>.json` when it ends;
//! `tools/sat-stats` draws the report's four figures from those files. The
//! format and the meaning of every field are in `docs/STATISTICS.md`.
//!
//! Why in memory and written at the end: the debug stream's per-event writes
//! change the timing they observe (the report says so). Here a recording point
//! takes a lock only when the stream is on, and costs one relaxed atomic load
//! when it is off.
//!
//! The time decomposition (Figure 15b) follows each thread through four
//! activities with [`doing`] guards: the application's code, SAT's own code,
//! libfabric calls (message passing) and micro-sleep. A guard switches the
//! calling thread to an activity and back when dropped, so nesting works (a
//! send from inside a message handler, a subscription handler that calls SAT
//! again). A thread's SAT, message passing and sleep time go into the process
//! totals each time it returns to user code; the application's time is what
//! remains of the process's lifetime.
//!
//! That lifetime starts when the process did (`stats/clock.rs`), not when SAT did:
//! what a program does before its bootstrap is its own time, and the
//! bootstrap is SAT's. A file being written holds off the stop signals
//! (`stats/signals.rs`), so that a process stopped then still leaves a whole file.

use std::cell::RefCell;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use serde::Serialize;

use crate::chunk::ChunkId;
use crate::protocol::Access;
use crate::transport::Rank;

mod clock;
mod signals;

use clock::Origin;

/// The version tag every file starts with.
pub const FORMAT: &str = "sat-stats 1";

static ON: AtomicBool = AtomicBool::new(false);
static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);

/// Whether the stream records: one relaxed load, for every recording point.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The folder `SAT_STATS` names, read once per process; None when unset.
fn folder() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::var_os("SAT_STATS")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
    .as_ref()
}

fn max_events() -> usize {
    crate::settings::get().stats_max_events
}

fn recorder() -> MutexGuard<'static, Option<Recorder>> {
    // Recording never leaves the recorder half-updated.
    RECORDER.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the stream knows of this process beyond one file.
struct Process {
    /// The run's id, as the seed made it (`bootstrap::seed`), in hex; a
    /// service's admission desk hands its own to the processes that attach.
    run_id: Option<String>,
    /// When this process's bootstrap (or its latest attach to a service)
    /// began, until the next file counts it.
    bootstrap_began: Option<Instant>,
    /// Where the previous file's clock stopped: the next file (a process
    /// that attached to a service again) starts there, so that the files of
    /// one process share out its life without counting any of it twice.
    last_end: Option<Origin>,
}

static PROCESS: Mutex<Process> = Mutex::new(Process {
    run_id: None,
    bootstrap_began: None,
    last_end: None,
});

fn process() -> MutexGuard<'static, Process> {
    PROCESS.lock().unwrap_or_else(|p| p.into_inner())
}

/// This process joined run `run_id` in a bootstrap that began at `began`:
/// its files name the run (`tools/sat-stats` refuses to add up the files
/// of two runs), and its first file counts the bootstrap as SAT's time.
pub(crate) fn joined(run_id: [u8; 16], began: Instant) {
    if folder().is_none() {
        return;
    }
    let mut p = process();
    p.run_id = Some(run_id.iter().map(|b| format!("{b:02x}")).collect());
    p.bootstrap_began = Some(began);
}

/// Who this process is in its run, for the file it writes.
#[derive(Debug, Clone, Serialize)]
pub struct Identity {
    pub rank: Rank,
    pub kind: &'static str,
    pub role: u32,
    pub server: Rank,
    pub size: u32,
    pub servers: Vec<Rank>,
}

impl Identity {
    pub(crate) fn of(topology: &crate::topology::Topology, rank: Rank) -> Identity {
        let server = topology.is_server(rank);
        Identity {
            rank,
            kind: if server { "server" } else { "client" },
            role: topology.role(rank),
            server: if server {
                rank
            } else {
                topology.server_of(rank)
            },
            size: topology.len(),
            servers: topology.servers(),
        }
    }
}

/// Starts recording for a process (or, in service mode, for one attach)
/// when `SAT_STATS` is set. Whatever an earlier start recorded and did not
/// write is dropped.
pub fn start(identity: Identity) {
    let Some(dir) = folder() else {
        return;
    };
    let (origin, sat_began, bootstrapped, run_id) = {
        let mut p = process();
        let origin = p
            .last_end
            .or_else(clock::process_start)
            .unwrap_or_else(Origin::now);
        let began = p.bootstrap_began.take();
        (
            origin,
            began.unwrap_or_else(Instant::now),
            began.is_some(),
            p.run_id.clone(),
        )
    };
    let mut r = recorder();
    let mut rec = Recorder::new(dir.clone(), identity, origin, sat_began);
    rec.run_id = run_id;
    if bootstrapped {
        rec.count_bootstrap();
    }
    *r = Some(rec);
    ON.store(true, Ordering::Relaxed);
    drop(r);
    // The starting thread's clock counts from now.
    CLOCK.with(|c| *c.borrow_mut() = ThreadClock::new());
}

/// Ends recording and writes the file; returns its path. A failure to
/// write is logged, never fatal: the run itself succeeded.
pub fn finish() -> Option<PathBuf> {
    if !on() {
        return None;
    }
    flush_thread();
    let taken = recorder().take();
    ON.store(false, Ordering::Relaxed);
    let rec = taken?;
    // A stop signal from here to the rename waits for the file (satrun
    // sends SIGTERM to the processes left when a rank fails, and a server
    // ending at that moment would leave a `.partial`); it takes effect right
    // after, and SIGKILL still ends the process at any time.
    let held = signals::HeldOff::new();
    let duration_ns = rec.now_ns();
    process().last_end = Some(rec.origin.later_by(duration_ns));
    let written = match rec.write(duration_ns) {
        Ok(path) => {
            tracing::debug!("statistics written to {}", path.display());
            Some(path)
        }
        Err(e) => {
            tracing::warn!(
                "could not write the statistics of rank {} into {}: {e}; check that SAT_STATS \
                 names a writable folder",
                rec.identity.rank,
                rec.dir.display()
            );
            None
        }
    };
    drop(held);
    written
}

// ---------------------------------------------------------------------------
// Time decomposition
// ---------------------------------------------------------------------------

/// What a thread is doing, for Figure 15b.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// The application's own code.
    User = 0,
    /// SAT's code: local data management and protocol steps.
    Sdsm = 1,
    /// Inside libfabric's send and completion calls.
    MessagePassing = 2,
    /// Micro-sleeping (or yielding the core) while waiting for a message.
    Sleep = 3,
}

struct ThreadClock {
    current: Activity,
    since: Instant,
    spent: [u64; 4],
    /// False for the client's background thread, whose polling overlaps
    /// the application's own time.
    counted: bool,
}

impl ThreadClock {
    fn new() -> ThreadClock {
        ThreadClock {
            current: Activity::User,
            since: Instant::now(),
            spent: [0; 4],
            counted: true,
        }
    }

    fn switch(&mut self, to: Activity) -> Activity {
        let now = Instant::now();
        self.spent[self.current as usize] += now.duration_since(self.since).as_nanos() as u64;
        self.since = now;
        std::mem::replace(&mut self.current, to)
    }
}

thread_local! {
    static CLOCK: RefCell<ThreadClock> = RefCell::new(ThreadClock::new());
}

/// Keeps the calling thread in an activity until dropped; see [`doing`].
#[must_use = "the activity ends when this guard is dropped"]
pub struct Doing {
    previous: Option<Activity>,
}

/// Switches the calling thread to `activity` until the guard is dropped.
/// Does nothing while the stream is off.
#[inline]
pub fn doing(activity: Activity) -> Doing {
    if !on() {
        return Doing { previous: None };
    }
    let previous = CLOCK.try_with(|c| c.borrow_mut().switch(activity)).ok();
    Doing { previous }
}

impl Drop for Doing {
    fn drop(&mut self) {
        let Some(previous) = self.previous else {
            return;
        };
        let _ = CLOCK.try_with(|c| c.borrow_mut().switch(previous));
        if previous == Activity::User {
            flush_thread();
        }
    }
}

/// The calling thread's time is left out of the decomposition (the client's
/// background progress thread).
pub fn not_counted() {
    let _ = CLOCK.try_with(|c| c.borrow_mut().counted = false);
}

/// Adds the calling thread's SAT, message passing and sleep time to the
/// process totals.
fn flush_thread() {
    let spent = CLOCK.try_with(|c| {
        let mut c = c.borrow_mut();
        let current = c.current;
        c.switch(current);
        let spent = c.spent;
        c.spent = [0; 4];
        c.counted.then_some(spent)
    });
    if let Ok(Some(spent)) = spent {
        if let Some(r) = recorder().as_mut() {
            for a in [Activity::Sdsm, Activity::MessagePassing, Activity::Sleep] {
                r.spent[a as usize] += spent[a as usize];
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// A chunk event of Figure 15c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkEvent {
    Alloc,
    Lookup,
    Free,
}

impl ChunkEvent {
    fn name(self) -> &'static str {
        match self {
            ChunkEvent::Alloc => "alloc",
            ChunkEvent::Lookup => "lookup",
            ChunkEvent::Free => "free",
        }
    }
}

/// A message handed to libfabric for `to`, of `bytes` (header and payload).
#[inline]
pub fn sent(to: Rank, bytes: usize) {
    if !on() {
        return;
    }
    if let Some(r) = recorder().as_mut() {
        let i = to as usize;
        if r.sent.len() <= i {
            r.sent.resize(i + 1, [0, 0]);
        }
        r.sent[i][0] += 1;
        r.sent[i][1] += bytes as u64;
    }
}

/// A chunk allocated, looked up or freed here; `chunks` and `footprint` are
/// the store's counts after it.
pub fn chunk_event(event: ChunkEvent, chunk: ChunkId, size: usize, chunks: usize, footprint: u64) {
    if !on() {
        return;
    }
    if let Some(r) = recorder().as_mut() {
        match event {
            ChunkEvent::Alloc => r.counters.alloc += 1,
            ChunkEvent::Lookup => r.counters.lookup += 1,
            ChunkEvent::Free => r.counters.free += 1,
        }
        let t_ns = r.now_ns();
        if r.chunk_events.len() < r.max_events {
            r.chunk_events.push(ChunkRecord {
                t_ns,
                event: event.name(),
                chunk,
                size: size as u64,
                chunks: chunks as u64,
                footprint,
            });
        } else {
            r.truncated = true;
        }
    }
}

/// When a scope started, for [`access`]: the process clock in nanoseconds,
/// or 0 while the stream is off.
pub fn scope_start() -> u64 {
    if !on() {
        return 0;
    }
    recorder().as_ref().map_or(0, Recorder::now_ns)
}

/// A scope on `chunk`, from `start_ns` (see [`scope_start`]) to now.
pub fn access(chunk: ChunkId, access: Access, hit: bool, start_ns: u64) {
    if !on() {
        return;
    }
    if let Some(r) = recorder().as_mut() {
        let counter = match (access, hit) {
            (Access::Read, true) => &mut r.counters.read_hit,
            (Access::Read, false) => &mut r.counters.read_miss,
            (Access::Write, true) => &mut r.counters.write_hit,
            (Access::Write, false) => &mut r.counters.write_miss,
            (Access::ReadWrite, true) => &mut r.counters.readwrite_hit,
            (Access::ReadWrite, false) => &mut r.counters.readwrite_miss,
        };
        *counter += 1;
        let end_ns = r.now_ns();
        if r.accesses.len() < r.max_events {
            r.accesses.push(AccessRecord {
                start_ns,
                end_ns,
                chunk,
                access: match access {
                    Access::Read => "read",
                    Access::Write => "write",
                    Access::ReadWrite => "readwrite",
                },
                hit,
            });
        } else {
            r.truncated = true;
        }
    }
}

/// This process has passed barrier `id` (a call of it returned): the
/// adviser (`tools/sat-stats --advise`) tells reads that follow barriers.
pub fn barrier(id: u32) {
    if !on() {
        return;
    }
    if let Some(r) = recorder().as_mut() {
        let t_ns = r.now_ns();
        if r.barriers.len() < r.max_events {
            r.barriers.push(BarrierRecord { t_ns, id });
        } else {
            r.truncated = true;
        }
    }
}

// ---------------------------------------------------------------------------
// The recorder and its file
// ---------------------------------------------------------------------------

#[derive(Debug, Default, Clone, Serialize)]
struct Counters {
    alloc: u64,
    lookup: u64,
    free: u64,
    read_hit: u64,
    read_miss: u64,
    write_hit: u64,
    write_miss: u64,
    readwrite_hit: u64,
    readwrite_miss: u64,
}

#[derive(Debug, Serialize)]
struct ChunkRecord {
    t_ns: u64,
    event: &'static str,
    chunk: ChunkId,
    size: u64,
    chunks: u64,
    footprint: u64,
}

#[derive(Debug, Serialize)]
struct BarrierRecord {
    t_ns: u64,
    id: u32,
}

#[derive(Debug, Serialize)]
struct AccessRecord {
    start_ns: u64,
    end_ns: u64,
    chunk: ChunkId,
    access: &'static str,
    hit: bool,
}

struct Recorder {
    dir: PathBuf,
    identity: Identity,
    run_id: Option<String>,
    /// Where this file's clock starts: the process's start, or the end of
    /// its previous file.
    origin: Origin,
    /// When SAT began in this process (its bootstrap, or this recording),
    /// from `origin`: before it, the process ran its own code only.
    sat_start_ns: u64,
    /// The bootstrap's part of `spent`'s SAT time.
    bootstrap_ns: u64,
    spent: [u64; 4],
    /// Messages and bytes by destination rank.
    sent: Vec<[u64; 2]>,
    counters: Counters,
    chunk_events: Vec<ChunkRecord>,
    accesses: Vec<AccessRecord>,
    barriers: Vec<BarrierRecord>,
    max_events: usize,
    truncated: bool,
}

#[derive(Serialize)]
struct TimeSplit {
    user: u64,
    sdsm: u64,
    message_passing: u64,
    sleep: u64,
}

#[derive(Serialize)]
struct Sent {
    to: Rank,
    messages: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct File<'a> {
    format: &'static str,
    /// Absent where unknown (a service's client ran no bootstrap).
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<&'a str>,
    #[serde(flatten)]
    identity: &'a Identity,
    pid: u32,
    host: String,
    start_unix_ns: u64,
    sat_start_ns: u64,
    bootstrap_ns: u64,
    duration_ns: u64,
    time_ns: TimeSplit,
    sent: Vec<Sent>,
    counters: &'a Counters,
    truncated: bool,
    chunk_events: &'a [ChunkRecord],
    accesses: &'a [AccessRecord],
    barriers: &'a [BarrierRecord],
}

impl Recorder {
    fn new(dir: PathBuf, identity: Identity, origin: Origin, sat_began: Instant) -> Recorder {
        Recorder {
            dir,
            identity,
            run_id: None,
            origin,
            sat_start_ns: sat_began.saturating_duration_since(origin.at).as_nanos() as u64,
            bootstrap_ns: 0,
            spent: [0; 4],
            sent: Vec::new(),
            counters: Counters::default(),
            chunk_events: Vec::new(),
            accesses: Vec::new(),
            barriers: Vec::new(),
            max_events: max_events(),
            truncated: false,
        }
    }

    fn now_ns(&self) -> u64 {
        self.origin.at.elapsed().as_nanos() as u64
    }

    /// The bootstrap, from its beginning to now (the recording's start, once
    /// the process has its client or server), is SAT's time: it waits for
    /// the other processes over the seed's TCP sockets, not in libfabric.
    fn count_bootstrap(&mut self) {
        self.bootstrap_ns = self.now_ns().saturating_sub(self.sat_start_ns);
        self.spent[Activity::Sdsm as usize] += self.bootstrap_ns;
    }

    /// The time split: a server runs its program's own code only before SAT
    /// starts, and SAT's from then on; a client's user time is what its SAT
    /// calls leave (at least 0: threads calling SAT at once add up).
    fn time_split(&self, duration_ns: u64) -> TimeSplit {
        let [_, sdsm, message_passing, sleep] = self.spent;
        if self.identity.kind == "server" {
            let busy = message_passing + sleep;
            let user = self.sat_start_ns.min(duration_ns.saturating_sub(busy));
            return TimeSplit {
                user,
                sdsm: duration_ns.saturating_sub(busy + user),
                message_passing,
                sleep,
            };
        }
        TimeSplit {
            user: duration_ns.saturating_sub(sdsm + message_passing + sleep),
            sdsm,
            message_passing,
            sleep,
        }
    }

    fn write(&self, duration_ns: u64) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let pid = std::process::id();
        let sent = self
            .sent
            .iter()
            .enumerate()
            .filter(|(_, s)| s[0] > 0)
            .map(|(to, s)| Sent {
                to: to as Rank,
                messages: s[0],
                bytes: s[1],
            })
            .collect();
        let file = File {
            format: FORMAT,
            run_id: self.run_id.as_deref(),
            identity: &self.identity,
            pid,
            host: crate::os::hostname(),
            start_unix_ns: self.origin.unix_ns,
            sat_start_ns: self.sat_start_ns,
            bootstrap_ns: self.bootstrap_ns,
            duration_ns,
            time_ns: self.time_split(duration_ns),
            sent,
            counters: &self.counters,
            truncated: self.truncated,
            chunk_events: &self.chunk_events,
            accesses: &self.accesses,
            barriers: &self.barriers,
        };
        // A process that attached twice to the same slot writes two files.
        let mut path = self
            .dir
            .join(format!("sat-stats.{}.{pid}.json", self.identity.rank));
        let mut n = 2;
        while path.exists() {
            path = self
                .dir
                .join(format!("sat-stats.{}.{pid}-{n}.json", self.identity.rank));
            n += 1;
        }
        let tmp = path.with_extension("json.partial");
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        serde_json::to_writer(&mut out, &file).map_err(std::io::Error::other)?;
        out.write_all(b"\n")?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        signals::test_signal_before_rename(self.identity.rank);
        // Readers never see a half-written file.
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn nested_activities_return_to_the_outer_one() {
        let mut c = ThreadClock::new();
        assert_eq!(c.switch(Activity::Sdsm), Activity::User);
        assert_eq!(c.switch(Activity::MessagePassing), Activity::Sdsm);
        assert_eq!(c.switch(Activity::Sdsm), Activity::MessagePassing);
        assert_eq!(c.switch(Activity::User), Activity::Sdsm);
        assert_eq!(c.current, Activity::User);
    }

    fn identity(kind: &'static str) -> Identity {
        Identity {
            rank: 0,
            kind,
            role: 0,
            server: 0,
            size: 2,
            servers: vec![0],
        }
    }

    #[test]
    fn a_servers_own_time_is_its_time_before_sat() {
        let origin = Origin::now();
        let mut r = Recorder::new(
            PathBuf::from("unused"),
            identity("server"),
            origin,
            origin.at + Duration::from_nanos(10),
        );
        assert_eq!(r.sat_start_ns, 10);
        r.spent = [0, 5, 30, 50];
        let t = r.time_split(100);
        assert_eq!(
            (t.user, t.sdsm, t.message_passing, t.sleep),
            (10, 10, 30, 50)
        );
        r.identity.kind = "client";
        r.spent = [0, 10, 20, 30];
        let t = r.time_split(100);
        assert_eq!(
            (t.user, t.sdsm, t.message_passing, t.sleep),
            (40, 10, 20, 30)
        );
        r.spent = [0, 100, 20, 30];
        assert_eq!(r.time_split(100).user, 0);
    }

    #[test]
    fn the_bootstrap_is_sats_time_and_the_split_adds_up() {
        // A process 3 ms old whose bootstrap began 1 ms after its start.
        let now = Origin::now();
        let origin = Origin {
            at: now.at - Duration::from_millis(3),
            unix_ns: now.unix_ns - 3_000_000,
        };
        let began = origin.at + Duration::from_millis(1);
        let mut r = Recorder::new(PathBuf::from("unused"), identity("client"), origin, began);
        assert_eq!(r.sat_start_ns, 1_000_000);
        r.count_bootstrap();
        assert!(r.bootstrap_ns >= 2_000_000, "{}", r.bootstrap_ns);
        assert_eq!(r.spent[Activity::Sdsm as usize], r.bootstrap_ns);
        r.spent[Activity::Sleep as usize] = 7;
        for kind in ["client", "server"] {
            r.identity.kind = kind;
            let d = r.now_ns();
            let t = r.time_split(d);
            assert_eq!(t.user + t.sdsm + t.message_passing + t.sleep, d, "{kind}");
            assert!(t.sdsm >= r.bootstrap_ns, "{kind}");
            assert!(t.user >= r.sat_start_ns, "{kind}: before SAT, its own code");
        }
    }
}
