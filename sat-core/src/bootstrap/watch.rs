//! The watch: how a run with recovery (`SAT_RECOVERY=on`, `satrun
//! --enable-recovery`) learns that one of its processes died or stopped
//! answering, and how its processes learn that the run cannot go on.
//!
//! Every process keeps its bootstrap connection to the seed open after the
//! global barrier, and both ends send a small beat on it every quarter of
//! the lease (`SAT_LEASE_S`, the seed's value). A process is lost when its
//! connection closes (its kernel closes it as it dies, whatever killed it)
//! or when the seed has heard nothing from it for a lease (stopped, hung,
//! or cut off). The seed's server acts on the loss (`SeedWatch::lost`):
//! a lost client is forgotten as a service forgets a client that dies, so
//! its write scope is revoked and the others go on; a lost server takes the
//! chunks it homed with it, so the seed stops the run, telling everyone why.
//!
//! The other direction ends waits that could never end: a process whose
//! seed is gone, that the seed told to stop, or that the seed declared lost
//! (it learns when it runs again: the seed's last frame says so) gets the
//! reason from [`Fatal`], and every call it makes from then on fails with
//! it instead of waiting.
//!
//! Why a TCP connection and not the fabric: it exists already, the kernel
//! reports a dead peer on it at once (no timeout to wait), and it works the
//! same under satrun and under any other launcher.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::seed::{decode, encode_frame, FromSeed, ToSeed};
use crate::transport::Rank;

/// The largest frame the watch accepts after the bootstrap (beats and
/// reasons are small; anything larger is not a SAT process's).
const MAX_WATCH_FRAME: usize = 64 << 10;

/// How often each side beats: four beats a lease, so that one late beat is
/// not a loss.
pub(crate) fn beat_of(lease: Duration) -> Duration {
    lease / 4
}

/// How a watch judges the process at the other end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judge {
    /// A run with recovery, and a service's sessions: both ends beat every
    /// quarter of the lease, and a peer silent for a lease is lost
    /// (stopped, hung or cut off).
    Lease(Duration),
    /// Any other run: nothing is sent, and the kernel probes the idle
    /// connection (TCP keepalive), so a dead host or a cut cable is found
    /// within about this long, while a process merely stopped (a debugger
    /// at a breakpoint; its kernel still answers) is not lost. A run that
    /// cannot outlive a process only needs to end, not to guess.
    Keepalive(Duration),
}

impl Judge {
    fn lease(self) -> Option<Duration> {
        match self {
            Judge::Lease(d) => Some(d),
            Judge::Keepalive(_) => None,
        }
    }

    /// How long the watch's thread may sleep between passes.
    fn pass(self) -> Duration {
        match self {
            Judge::Lease(d) => beat_of(d).min(Duration::from_millis(200)),
            Judge::Keepalive(_) => Duration::from_millis(500),
        }
    }

    /// Sets up `stream` for this judge: keepalive probes, in about `d` in
    /// all (idle a quarter of it, then four probes an eighth apart, each at
    /// least a second).
    fn prepare(self, stream: &TcpStream) -> std::io::Result<()> {
        stream.set_nonblocking(true)?;
        let Judge::Keepalive(d) = self else {
            return Ok(());
        };
        let secs = |part: u64| (d.as_secs() / part).max(1) as libc::c_int;
        let fd = stream.as_raw_fd();
        for (level, name, value) in [
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(4)),
            (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(8)),
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 4),
        ] {
            // SAFETY: setsockopt(2) on an open socket with an int option.
            let ret = unsafe {
                libc::setsockopt(
                    fd,
                    level,
                    name,
                    std::ptr::addr_of!(value).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if ret != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Why this process cannot go on, once it is known: set once, by the
/// watch's thread; read by every call before and while it waits.
///
/// A process that was stopped (a debugger, `SIGSTOP`) for longer than its
/// lease may have been dropped while it slept, and its calls must not
/// race the watch's thread to that news when it runs again: each call
/// looks at when the watch last heard its peer, and when that is older
/// than half a lease (beats come every quarter), waits for the thread's
/// next pass over the connection, which reads what came meanwhile.
#[derive(Clone, Default)]
pub struct Fatal(Arc<FatalState>);

#[derive(Default)]
struct FatalState {
    reason: OnceLock<String>,
    /// When the watch last heard its peer, in ms of [`coarse_ms`].
    heard_ms: AtomicU64,
    /// The watch's passes over its connection.
    passes: AtomicU64,
    /// Half the lease in ms (0: not watched yet).
    stale_ms: AtomicU64,
}

/// Milliseconds of the coarse monotonic clock, which moves with the
/// kernel's tick (a few ms): fine enough against half a lease, and read
/// without the time stamp counter, in a fraction of a fine clock's read
/// (every scope checks it twice).
fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock always exists
    // on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

impl Fatal {
    /// The reason, if the run cannot go on for this process.
    pub fn reason(&self) -> Option<&str> {
        self.0.reason.get().map(String::as_str)
    }

    /// The reason, once the watch has caught up with what its peer said
    /// while this process may have been stopped.
    pub fn check(&self) -> Option<&str> {
        let stale = self.0.stale_ms.load(Ordering::Relaxed);
        if self.reason().is_none() && stale > 0 && self.now_ms() > self.heard() + stale {
            let pass = self.0.passes.load(Ordering::Acquire);
            let end = Instant::now() + Duration::from_secs(2);
            while self.reason().is_none()
                && self.0.passes.load(Ordering::Acquire) < pass + 2
                && Instant::now() < end
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.reason()
    }

    fn now_ms(&self) -> u64 {
        coarse_ms()
    }

    fn heard(&self) -> u64 {
        // Acquire: pairs with the store below, made after any reason the
        // same bytes carried was set.
        self.0.heard_ms.load(Ordering::Acquire)
    }

    /// The watch's thread starts, with `lease`.
    fn watching(&self, lease: Duration) {
        self.heard_now();
        let half = (lease.as_millis() as u64 / 2).max(1);
        self.0.stale_ms.store(half, Ordering::Relaxed);
    }

    /// The watch's thread has stopped with nothing wrong (the run ended
    /// well): calls no longer wait for its passes.
    fn unwatched(&self) {
        self.0.stale_ms.store(0, Ordering::Relaxed);
    }

    /// The watch heard its peer.
    fn heard_now(&self) {
        let now = self.now_ms();
        self.0.heard_ms.store(now, Ordering::Release);
    }

    /// The watch's thread finished a pass over its connection.
    fn passed(&self) {
        self.0.passes.fetch_add(1, Ordering::Release);
    }

    /// Records the first reason and wakes this process's waits. (Logged at
    /// debug level only: a process that has finished its run sees the seed
    /// go as the run ends, which is no news; a call it fails says why.)
    pub(crate) fn set(&self, reason: String) {
        if self.0.reason.set(reason).is_ok() {
            tracing::debug!("{}", self.0.reason.get().expect("just set"));
            if let Some(bell) = crate::transport::doorbell::own() {
                bell.ring();
            }
        }
    }
}

/// Reads whole frames out of a non-blocking stream's bytes.
#[derive(Default)]
struct Frames {
    bytes: Vec<u8>,
}

impl Frames {
    /// The complete frames' bodies received so far; an error for a frame
    /// no SAT process sends.
    fn take(&mut self) -> Result<Vec<Vec<u8>>, String> {
        let mut out = Vec::new();
        loop {
            let Some(head) = self.bytes.get(..4) else {
                return Ok(out);
            };
            let len = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
            if len > MAX_WATCH_FRAME {
                return Err(format!("a frame of {len} bytes"));
            }
            if self.bytes.len() < 4 + len {
                return Ok(out);
            }
            out.push(self.bytes[4..4 + len].to_vec());
            self.bytes.drain(..4 + len);
        }
    }
}

/// What one read of a watched stream found.
enum Heard {
    Nothing,
    Bytes,
    Closed(String),
}

/// An error that only says nothing is there yet (non-blocking, or a read
/// timeout), not that the connection failed.
fn nothing_yet(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn read_available(stream: &mut TcpStream, frames: &mut Frames) -> Heard {
    let mut buf = [0u8; 512];
    let mut heard = Heard::Nothing;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Heard::Closed("its connection closed".into()),
            Ok(n) => {
                frames.bytes.extend_from_slice(&buf[..n]);
                heard = Heard::Bytes;
                if frames.bytes.len() > 4 * MAX_WATCH_FRAME {
                    return Heard::Closed("it sent more than the watch takes".into());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if nothing_yet(&e) => return heard,
            Err(e) => return Heard::Closed(format!("its connection failed ({e})")),
        }
    }
}

/// A process's part in its run's watch.
pub enum Watch {
    /// The seed watches every other process.
    Seed(SeedWatch),
    /// Any other process watches the seed.
    Peer(PeerWatch),
}

impl Watch {
    /// Why this process cannot go on (never set on the seed, whose server
    /// decides that itself).
    pub fn fatal(&self) -> Fatal {
        match self {
            Watch::Seed(_) => Fatal::default(),
            Watch::Peer(p) => p.fatal().clone(),
        }
    }
}

/// The seed's side: one thread watches every other process's connection.
pub struct SeedWatch {
    lost: Receiver<(Rank, String)>,
    /// Processes that said goodbye ([`ToSeed::Bye`]).
    byes: Receiver<Rank>,
    /// The last frame to send every process (why the run stops, or that it
    /// ended), each with where to say they were told.
    orders: Sender<(FromSeed, Sender<()>)>,
    stop: Arc<AtomicBool>,
}

impl SeedWatch {
    /// Starts watching `conns` (by rank; the seed's own entry is None).
    /// `fence` gives the pid of each rank to make sure of before it is
    /// reported lost ([`fence`]).
    pub(crate) fn start(
        conns: Vec<Option<TcpStream>>,
        judge: Judge,
        fence: Vec<Option<u32>>,
    ) -> std::io::Result<Self> {
        let (lost_tx, lost) = mpsc::channel();
        let (byes_tx, byes) = mpsc::channel();
        let (orders, orders_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut watched = Vec::new();
        for (rank, conn) in conns.into_iter().enumerate() {
            if let Some(stream) = conn {
                judge.prepare(&stream)?;
                watched.push(Watched {
                    rank: rank as Rank,
                    pid: fence.get(rank).copied().flatten(),
                    stream,
                    frames: Frames::default(),
                    heard: Instant::now(),
                    finished: false,
                });
            }
        }
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("sat-watch".into())
            .spawn(move || {
                let to = Reports {
                    lost: lost_tx,
                    byes: byes_tx,
                };
                seed_loop(watched, judge, &to, &orders_rx, &flag)
            })?;
        Ok(SeedWatch {
            lost,
            byes,
            orders,
            stop,
        })
    }

    /// The processes lost since the last call, with why.
    pub(crate) fn lost(&self) -> Vec<(Rank, String)> {
        self.lost.try_iter().collect()
    }

    /// The processes that said goodbye since the last call: they finished
    /// the run.
    pub(crate) fn finished(&self) -> Vec<Rank> {
        self.byes.try_iter().collect()
    }

    /// Tells every watched process why the run stops, and stops watching.
    /// Returns once they are told (or a few seconds have passed): the seed
    /// is about to end, and its going would otherwise be all they hear.
    pub(crate) fn abort(&self, reason: &str) {
        self.last_word(FromSeed::Abort(reason.to_owned()));
    }

    /// Tells every watched process that the run ended well, and stops
    /// watching: the seed's going is then no news to them. (A process may
    /// still be taking in its server's last acknowledgement when the seed's
    /// process ends.)
    pub(crate) fn ended(&self) {
        self.last_word(FromSeed::Ended);
    }

    fn last_word(&self, frame: FromSeed) {
        let (told, done) = mpsc::channel();
        if self.orders.send((frame, told)).is_ok() {
            let _ = done.recv_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for SeedWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

struct Watched {
    rank: Rank,
    /// Its pid, when it must be gone before it is reported lost.
    pid: Option<u32>,
    stream: TcpStream,
    frames: Frames,
    heard: Instant,
    /// It said it is done with the run ([`ToSeed::Bye`]): its connection
    /// closing is no news.
    finished: bool,
}

/// What the seed's watch reports to the seed's server.
struct Reports {
    /// Processes lost, with why.
    lost: Sender<(Rank, String)>,
    /// Processes that said goodbye.
    byes: Sender<Rank>,
}

fn seed_loop(
    mut watched: Vec<Watched>,
    judge: Judge,
    to: &Reports,
    orders: &Receiver<(FromSeed, Sender<()>)>,
    stop: &AtomicBool,
) {
    let lost = &to.lost;
    let beat = judge.lease().map(beat_of);
    let frame = encode_frame(&FromSeed::Beat);
    let mut last_beat = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if let Ok((last, told)) = orders.try_recv() {
            let last = encode_frame(&last);
            for w in &mut watched {
                let _ = w.stream.set_nonblocking(false);
                let _ = w.stream.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = w.stream.write_all(&last);
                let _ = w.stream.shutdown(Shutdown::Write);
            }
            let _ = told.send(());
            return;
        }
        let now = Instant::now();
        let beating = beat.is_some_and(|b| now.duration_since(last_beat) >= b);
        if beating {
            last_beat = now;
        }
        let mut gone = Vec::new();
        let mut done = Vec::new();
        for (i, w) in watched.iter_mut().enumerate() {
            let closed = match read_available(&mut w.stream, &mut w.frames) {
                Heard::Nothing => None,
                Heard::Bytes => {
                    w.heard = now;
                    None
                }
                Heard::Closed(why) => Some(why),
            };
            // What it sent before its connection closed comes first.
            match w.frames.take() {
                Ok(bodies) => {
                    if !w.finished && bodies.iter().any(|b| said_bye(b)) {
                        w.finished = true;
                        let _ = to.byes.send(w.rank);
                    }
                    if let Some(why) = bodies.iter().find_map(|b| failed(b)) {
                        gone.push((i, why));
                        continue;
                    }
                }
                Err(what) => {
                    gone.push((i, format!("it sent {what}, which no SAT process sends")));
                    continue;
                }
            }
            if let Some(why) = closed {
                if w.finished {
                    done.push(i);
                } else {
                    gone.push((i, format!("{why}: the process died or was cut off")));
                }
                continue;
            }
            if w.finished {
                continue;
            }
            let Some(lease) = judge.lease() else {
                continue;
            };
            if now.duration_since(w.heard) > lease {
                let why = format!(
                    "it sent nothing for {} s (SAT_LEASE_S): stopped, hung or cut off",
                    lease.as_secs()
                );
                // It learns why if it ever runs again.
                let told = format!(
                    "this process (rank {}) was declared lost by the run: {why}; the run went \
                     on without it and revoked its scopes",
                    w.rank
                );
                let _ = w.stream.write_all(&encode_frame(&FromSeed::Abort(told)));
                gone.push((i, why));
                if let Some(pid) = w.pid {
                    kill(pid);
                }
                continue;
            }
            if beating {
                match w.stream.write(&frame) {
                    Ok(_) => {}
                    // A full buffer: the process is not reading (stopped?);
                    // its silence will tell.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => gone.push((i, format!("its connection failed ({e})"))),
                }
            }
        }
        // Both lists are in ascending order; removing from the back keeps
        // the indices of the rest.
        let mut leaving: Vec<(usize, Option<String>)> = gone
            .into_iter()
            .map(|(i, why)| (i, Some(why)))
            .chain(done.into_iter().map(|i| (i, None)))
            .collect();
        leaving.sort_unstable_by_key(|&(i, _)| i);
        for (i, why) in leaving.into_iter().rev() {
            let w = watched.swap_remove(i);
            let Some(why) = why else {
                continue;
            };
            let _ = w.stream.shutdown(Shutdown::Both);
            if let Some(pid) = w.pid {
                fence(&format!("rank {}", w.rank), pid);
            }
            if lost.send((w.rank, why)).is_err() {
                return;
            }
            if let Some(bell) = crate::transport::doorbell::own() {
                bell.ring();
            }
        }
        let fds = watched.iter().map(|w| w.stream.as_raw_fd());
        wait_readable(fds, judge.pass());
    }
}

/// A lost process of the seed's host that may have had a host slot locked
/// is gone before anyone frees its locks: one whose connection closed is
/// given a moment to finish dying, then killed; one that went silent was
/// killed already. (A stopped process that woke later would go on writing
/// into a slot another process has taken since.)
pub(crate) fn fence(who: &str, pid: u32) {
    let gone_within = |d: Duration| {
        let end = Instant::now() + d;
        loop {
            if crate::os::process_gone(pid) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    if gone_within(Duration::from_secs(2)) {
        return;
    }
    tracing::warn!("{who} (pid {pid}) is lost but lives: killed");
    kill(pid);
    if !gone_within(Duration::from_secs(5)) {
        tracing::error!("{who} (pid {pid}) is still there after SIGKILL");
    }
}

pub(crate) fn kill(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) with a pid and a signal number has no memory effects.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// How a watched session ended ([`watch_session`]).
pub(crate) enum SessionEnd {
    /// Its process closed the connection (it detached, or died).
    Closed,
    /// It sent nothing for a lease: it was told why it is dropped.
    Silent(String),
    /// The service dropped it for this reason (`dropped`), and told it.
    Dropped(String),
}

/// The desk's side of one service session: beats to the attached process
/// and waits until its connection closes or it stays silent for a lease.
/// Any bytes it sends count as a beat (the desk decodes nothing after
/// admission). `told` words what a silent process reads if it runs again,
/// or one the service dropped (`dropped`, set by the desk) reads at once.
pub(crate) fn watch_session(
    stream: &mut TcpStream,
    lease: Duration,
    told: impl FnOnce(&str) -> String,
    dropped: &OnceLock<String>,
) -> SessionEnd {
    let beat = beat_of(lease);
    let frame = encode_frame(&FromSeed::Beat);
    let _ = stream.set_read_timeout(Some(beat.min(Duration::from_millis(500))));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut heard = Instant::now();
    let mut last_beat = Instant::now() - beat;
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return SessionEnd::Closed,
            Ok(_) => heard = Instant::now(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if nothing_yet(&e) => {}
            Err(_) => return SessionEnd::Closed,
        }
        if let Some(why) = dropped.get() {
            let _ = stream.write_all(&encode_frame(&FromSeed::Abort(told(why))));
            let _ = stream.shutdown(Shutdown::Both);
            return SessionEnd::Dropped(why.clone());
        }
        if heard.elapsed() > lease {
            let why = format!(
                "it sent nothing for {} s (SAT_LEASE_S): stopped, hung or cut off",
                lease.as_secs()
            );
            let _ = stream.write_all(&encode_frame(&FromSeed::Abort(told(&why))));
            let _ = stream.shutdown(Shutdown::Both);
            return SessionEnd::Silent(why);
        }
        if last_beat.elapsed() >= beat {
            last_beat = Instant::now();
            match stream.write_all(&frame) {
                Ok(()) => {}
                // A stopped process reads nothing: its silence will tell.
                Err(e) if nothing_yet(&e) => {}
                Err(_) => return SessionEnd::Closed,
            }
        }
    }
}

/// Whether a frame is a process's goodbye ([`ToSeed::Bye`]).
fn said_bye(body: &[u8]) -> bool {
    matches!(decode::<ToSeed>(body, "a watched process"), Ok(ToSeed::Bye))
}

/// A `Failed` frame's reason (a process that reports its own failure).
fn failed(body: &[u8]) -> Option<String> {
    match decode::<ToSeed>(body, "a watched process") {
        Ok(ToSeed::Failed(why)) => Some(format!("it failed: {why}")),
        _ => None,
    }
}

/// Sleeps until one of the streams has bytes (or closes), `timeout` at most.
fn wait_readable(fds: impl Iterator<Item = std::os::fd::RawFd>, timeout: Duration) {
    let mut fds: Vec<libc::pollfd> = fds
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    if fds.is_empty() {
        std::thread::sleep(timeout);
        return;
    }
    // SAFETY: `fds` is a valid array of pollfd for the length given.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
    }
}

/// Any other process's side: a thread beats to the seed and listens.
pub struct PeerWatch {
    fatal: Fatal,
    /// Keeps the connection's read side to this thread: dropping it closes
    /// the connection.
    stop: Arc<AtomicBool>,
    stream: TcpStream,
}

impl PeerWatch {
    /// Watches `peer` (its name for messages: "the seed (rank 0)", "the
    /// service at HOST:PORT") over `stream`.
    pub(crate) fn start(
        stream: TcpStream,
        judge: Judge,
        fatal: Fatal,
        peer: String,
    ) -> std::io::Result<Self> {
        judge.prepare(&stream)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mine = stream.try_clone()?;
        let (flag, told) = (stop.clone(), fatal.clone());
        std::thread::Builder::new()
            .name("sat-watch".into())
            .spawn(move || peer_loop(mine, judge, &told, &flag, &peer))?;
        Ok(PeerWatch {
            fatal,
            stop,
            stream,
        })
    }

    pub fn fatal(&self) -> &Fatal {
        &self.fatal
    }

    /// This process is done with its run (the termination protocol let it
    /// go): says so to the seed, whose watch then takes the connection's
    /// close as no news, and stops watching.
    pub fn bye(self) {
        let _ = self.stream.set_nonblocking(false);
        let _ = self.stream.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = (&self.stream).write_all(&encode_frame(&ToSeed::Bye));
    }
}

impl Drop for PeerWatch {
    /// This process is done with the run: the seed sees the connection close
    /// after the termination protocol let this process go, and ignores it.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

fn peer_loop(mut stream: TcpStream, judge: Judge, fatal: &Fatal, stop: &AtomicBool, peer: &str) {
    let frame = encode_frame(&ToSeed::Beat);
    let mut frames = Frames::default();
    let mut heard = Instant::now();
    let mut last_beat = Instant::now();
    // Non-blocking (`Judge::prepare`), waiting in poll(2): a blocking read
    // with a timeout would go on reading as long as the peer's beats come
    // faster than the timeout, and never get round to this side's beat.
    if let Some(lease) = judge.lease() {
        fatal.watching(lease);
    }
    loop {
        fatal.passed();
        if stop.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        if (judge.lease().map(beat_of)).is_some_and(|b| now.duration_since(last_beat) >= b) {
            last_beat = now;
            let sent = match stream.write(&frame) {
                // A full buffer: the peer is not reading; its silence tells.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
                other => other.map(|_| ()),
            };
            if let Err(e) = sent {
                if !stop.load(Ordering::Acquire) {
                    fatal.set(format!(
                        "lost the connection to {peer}: {e}; this process cannot go on with it"
                    ));
                }
                return;
            }
        }
        let (closed, got) = match read_available(&mut stream, &mut frames) {
            Heard::Nothing => (None, false),
            Heard::Bytes => {
                heard = Instant::now();
                (None, true)
            }
            Heard::Closed(why) => (Some(why), false),
        };
        match frames.take() {
            Ok(bodies) => {
                for body in bodies {
                    match decode::<FromSeed>(&body, "the seed") {
                        Ok(FromSeed::Abort(reason)) => {
                            fatal.set(reason);
                            return;
                        }
                        // Nothing this process waits for now depends on
                        // the seed's process.
                        Ok(FromSeed::Ended) => {
                            fatal.unwatched();
                            return;
                        }
                        _ => {}
                    }
                }
            }
            Err(what) => {
                fatal.set(format!(
                    "{peer} sent {what} on its watch connection; this process cannot go on with it"
                ));
                return;
            }
        }
        // Heard only once what came is taken in: a call that finds the
        // watch fresh ([`Fatal::check`]) then finds an abort that came in the
        // same bytes. Marked before, a process stopped past its lease could
        // wake, see the watch fresh and release, while the service's word
        // that it was dropped waited in the next lines (its release was
        // reported done, and dropped).
        if got {
            fatal.heard_now();
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        if let Some(why) = closed {
            fatal.set(format!(
                "{peer} is gone ({why}): its process died or was stopped; this process cannot \
                 go on with it"
            ));
            return;
        }
        if let Some(lease) = judge.lease().filter(|&l| heard.elapsed() > l) {
            fatal.set(format!(
                "{peer} sent nothing for {} s (SAT_LEASE_S): it is stopped, hung or cut off; \
                 this process cannot go on with it",
                lease.as_secs()
            ));
            return;
        }
        let fd = std::iter::once(stream.as_raw_fd());
        wait_readable(fd, judge.pass());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const SEED: &str = "the seed (rank 0)";

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(Instant::now() < end, "nothing happened in 30 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_closed_connection_is_a_lost_process_and_a_beating_one_is_not() {
        let (seed_a, peer_a) = pair();
        let (seed_b, peer_b) = pair();
        let lease = Duration::from_secs(2);
        let watch = SeedWatch::start(
            vec![None, Some(seed_a), Some(seed_b)],
            Judge::Lease(lease),
            Vec::new(),
        )
        .unwrap();
        let alive =
            PeerWatch::start(peer_a, Judge::Lease(lease), Fatal::default(), SEED.into()).unwrap();
        drop(peer_b);
        let lost = wait_for(|| {
            let l = watch.lost();
            (!l.is_empty()).then_some(l)
        });
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].0, 2);
        assert!(lost[0].1.contains("connection closed"), "{}", lost[0].1);
        // Two leases of beats: rank 1 stays.
        std::thread::sleep(lease * 2);
        assert!(watch.lost().is_empty());
        assert!(alive.fatal().reason().is_none());
    }

    #[test]
    fn a_silent_process_is_lost_after_the_lease_and_told_why() {
        let (seed_a, mut silent) = pair();
        let lease = Duration::from_secs(2);
        let watch =
            SeedWatch::start(vec![None, Some(seed_a)], Judge::Lease(lease), Vec::new()).unwrap();
        let start = Instant::now();
        let lost = wait_for(|| watch.lost().pop());
        assert!(start.elapsed() >= lease, "lost before its lease ran out");
        assert!(lost.1.contains("sent nothing for 2 s"), "{}", lost.1);
        // What it reads when it runs again: beats, then why it was dropped.
        let mut got = Vec::new();
        silent.read_to_end(&mut got).unwrap();
        let mut frames = Frames { bytes: got };
        let last = frames.take().unwrap().pop().unwrap();
        match decode::<FromSeed>(&last, "seed").unwrap() {
            FromSeed::Abort(why) => assert!(why.contains("declared lost"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_peer_learns_that_the_seed_is_gone_or_aborts() {
        let (seed_a, peer_a) = pair();
        let fatal = Fatal::default();
        let _w = PeerWatch::start(
            peer_a,
            Judge::Lease(Duration::from_secs(2)),
            fatal.clone(),
            SEED.into(),
        )
        .unwrap();
        drop(seed_a);
        let why = wait_for(|| fatal.reason().map(str::to_owned));
        assert!(why.contains("the seed (rank 0) is gone"), "{why}");

        let (seed_b, peer_b) = pair();
        let fatal = Fatal::default();
        let _w = PeerWatch::start(
            peer_b,
            Judge::Lease(Duration::from_secs(2)),
            fatal.clone(),
            SEED.into(),
        )
        .unwrap();
        let watch = SeedWatch::start(
            vec![None, Some(seed_b)],
            Judge::Lease(Duration::from_secs(2)),
            Vec::new(),
        )
        .unwrap();
        watch.abort("server 1 was lost");
        let why = wait_for(|| fatal.reason().map(str::to_owned));
        assert!(why.contains("server 1 was lost"), "{why}");
    }

    #[test]
    fn hostile_frames_are_a_loss_not_a_crash() {
        let (seed_a, mut peer_a) = pair();
        let watch = SeedWatch::start(
            vec![None, Some(seed_a)],
            Judge::Lease(Duration::from_secs(2)),
            Vec::new(),
        )
        .unwrap();
        peer_a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        let lost = wait_for(|| watch.lost().pop());
        assert!(lost.1.contains("no SAT process sends"), "{}", lost.1);
    }

    /// Without recovery: a process that said goodbye may close its
    /// connection; one that closes without is lost; one that stays silent
    /// but connected (stopped in a debugger) is not.
    #[test]
    fn under_keepalive_only_a_close_without_goodbye_is_a_loss() {
        let (seed_a, peer_a) = pair();
        let (seed_b, peer_b) = pair();
        let (seed_c, _silent) = pair();
        let judge = Judge::Keepalive(Duration::from_secs(2));
        let conns = vec![None, Some(seed_a), Some(seed_b), Some(seed_c)];
        let watch = SeedWatch::start(conns, judge, Vec::new()).unwrap();
        let a = PeerWatch::start(peer_a, judge, Fatal::default(), SEED.into()).unwrap();
        a.bye();
        drop(peer_b);
        let lost = wait_for(|| watch.lost().pop());
        assert_eq!(lost.0, 2, "{lost:?}");
        // Longer than the judge's time, in silence: nothing more is lost.
        std::thread::sleep(Duration::from_secs(3));
        assert!(watch.lost().is_empty());
    }

    /// The desk drops a session whose client its server forgot while the
    /// connection was open: the process is told why at once.
    #[test]
    fn a_session_the_service_dropped_is_told_why() {
        let (mut desk_side, peer) = pair();
        let fatal = Fatal::default();
        let lease = Duration::from_secs(4);
        let _watch = PeerWatch::start(
            peer,
            Judge::Lease(lease),
            fatal.clone(),
            "the service".into(),
        )
        .unwrap();
        let dropped = OnceLock::new();
        dropped
            .set("its server could not deliver".to_owned())
            .unwrap();
        let told = |why: &str| format!("dropped by the service: {why}");
        let end = watch_session(&mut desk_side, lease, told, &dropped);
        assert!(matches!(end, SessionEnd::Dropped(_)));
        let why = wait_for(|| fatal.reason().map(str::to_owned));
        assert!(
            why.contains("dropped by the service: its server could not deliver"),
            "{why}"
        );
    }
}
