//! The seed's admission desk: the TCP side of attaching and detaching.
//!
//! A process attaches over one TCP connection to the service's address,
//! which it keeps open for as long as it is attached:
//! 1. `Hello` (wire version, pid, host, its handshake token) -> `Challenge`
//!    (the desk's token, and its proof of holding the service's secret);
//! 2. `Proof` (the process's proof, [`crate::auth`]) -> `Offer` (the
//!    provider to open), or `Refused`: nothing about the service (a slot,
//!    a rank, an address) goes to a process that has not proved it holds
//!    the secret;
//! 3. `Join` (its endpoint address) -> `Welcome` (its slot rank, the
//!    topology, the servers' addresses) once its server has entered the
//!    address, or `Refused` (why, and what to do).
//!
//! A connection per session is also how the service learns that a process
//! died: its kernel closes the socket. The desk then has the client's server
//! forget it, as if it had detached.
//!
//! The desk threads only talk TCP; every decision about slots is taken on
//! the server loop's thread ([`Desk::next_action`] and the answers it gets),
//! so the slot table needs no lock.

use std::collections::VecDeque;
use std::io::Read;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use bincode::{Decode, Encode};

use crate::auth::{self, Handshake, Nonce, Proof, Secret};
use crate::bootstrap::seed::{decode, hello_version, send, RunId};
use crate::bootstrap::watch::{self, watch_session, SessionEnd};
use crate::error::SatResult;
use crate::refusals::RefusalLog;
use crate::topology::Topology;
use crate::transport::{Provider, Rank};
use crate::wire::WIRE_VERSION;

/// How long an attaching process has to complete each step, and how long
/// the desk waits for the servers to admit it.
pub(crate) const ADMISSION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection has to say hello, counted from its accept whatever
/// bytes come: an attaching process does so as soon as it connects, and a
/// socket that never speaks, or drips a byte at a time, must not hold its
/// thread for long. It then has as long again to prove the secret.
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(10);

/// Connections that have not proved they hold the secret, at most: past
/// this, the oldest of them is closed to make room for a new one, so that
/// a flood of sockets costs a bounded number of threads and still cannot
/// keep a process that holds the secret out (unless it connects faster
/// than that process says hello and proves itself).
pub(crate) const MAX_UNPROVEN: usize = 256;

/// Connections that proved the secret and are not admitted yet (before
/// their `Welcome`), at most: past this, a new one is refused, and told
/// why. Admitted ones are bounded by the slots.
const MAX_ADMITTING: usize = 256;

/// The largest frame of a connection that has not proved the secret (a
/// hello, a proof: a few hundred bytes), and of anything else (topology and
/// address table, as the seed's).
const MAX_UNPROVEN_FRAME: usize = 64 << 10;
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// Attaching process -> desk.
#[derive(Debug, Encode, Decode)]
pub(crate) enum ToDesk {
    Hello {
        wire_version: u32,
        pid: u32,
        host: String,
        /// The process's handshake token ([`crate::auth::Handshake`]).
        nonce: Nonce,
    },
    /// The endpoint the attaching process opened with the offered provider.
    Join { address: Vec<u8> },
    /// The attaching process's proof of holding the secret (none if it has
    /// no secret: the desk then refuses it, saying so).
    Proof(Option<Proof>),
}

/// Desk -> attaching process.
#[derive(Debug, Encode, Decode)]
pub(crate) enum FromDesk {
    Offer {
        provider: Provider,
    },
    Welcome {
        rank: Rank,
        topology: Topology,
        /// The servers' endpoint addresses, by rank.
        servers: Vec<Vec<u8>>,
        /// The lease in seconds: the connection then carries the watch's
        /// beats both ways (`bootstrap/watch.rs`), and a process silent for
        /// that long is dropped.
        lease_s: u64,
        /// The service's run id: the process's statistics files name it.
        run_id: RunId,
    },
    Refused(String),
    /// The desk's handshake token and its own proof of holding the secret. (New
    /// messages go last: a process of another version still decodes
    /// `Refused`, which tells it why.)
    Challenge {
        nonce: Nonce,
        proof: Option<Proof>,
    },
}

/// What the desk asks the server loop to do.
#[derive(Debug)]
pub(crate) enum DeskAction {
    /// Enter `address` as the endpoint of slot `client` at its server.
    Admit { client: Rank, address: Vec<u8> },
    /// Slot `client`'s process went away without detaching: forget it.
    Lost { client: Rank },
}

/// Why the service dropped an attached process that is still connected
/// (its server forgot it: a message to it could not be delivered): set by
/// the desk, read by the session's thread, which tells the process and
/// closes. Without it the process waited for ever for answers.
type Dropped = Arc<OnceLock<String>>;

/// The reason [`Desk::tell_stopped`] gives every attached session.
const SERVICE_STOPPED: &str = "the service stopped";

/// Where a session waits for its slot (or the reason it has none), and
/// where the desk says why it dropped the session once attached.
struct Reply {
    tx: Sender<Result<Rank, String>>,
    dropped: Dropped,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reply")
    }
}

impl Reply {
    fn send(&self, answer: Result<Rank, String>) -> Result<(), ()> {
        self.tx.send(answer).map_err(|_| ())
    }
}

/// From the connection threads to the loop.
enum Event {
    Join { address: Vec<u8>, reply: Reply },
    Closed { client: Rank },
}

#[derive(Debug)]
enum Slot {
    Free,
    /// Its server is entering the address; the session waits for `reply`.
    Admitting {
        reply: Reply,
        closed: bool,
    },
    Attached(Dropped),
    /// Leaving: free once the connection is closed and every server has
    /// forgotten the client.
    Leaving {
        closed: bool,
        forgotten: bool,
    },
}

/// The seed's admission desk.
pub(crate) struct Desk {
    events: Receiver<Event>,
    /// The client slots in rank order, and their state.
    ranks: Vec<Rank>,
    slots: Vec<Slot>,
    actions: VecDeque<DeskAction>,
    /// Processes waiting for a slot that is being given back: a service
    /// whose slots are all attached refuses at once, but a slot in the
    /// middle of a detach is worth waiting for.
    waiting: VecDeque<(Vec<u8>, Reply)>,
}

/// What every session hands an attaching process.
struct Offer {
    /// The service's secret: an attaching process proves it holds it.
    secret: Secret,
    provider: Provider,
    topology: Topology,
    servers: Vec<Vec<u8>>,
    /// How long an attached process may stay silent (`SAT_LEASE_S`).
    lease: Duration,
    /// The homes keep versions in host slots, which this host's clients
    /// write in place: one of them that goes silent is killed before its
    /// locks are freed (`bootstrap/watch.rs`, "fencing").
    fence_local: bool,
    run_id: RunId,
}

impl Desk {
    /// Opens the desk on `listener` (the service's address): a thread
    /// accepts connections, one thread per session talks to its process.
    pub(crate) fn open(
        listener: TcpListener,
        (provider, topology, servers, run_id): (Provider, Topology, Vec<Vec<u8>>, RunId),
        secret: Secret,
        fence_local: bool,
    ) -> SatResult<Desk> {
        let (tx, rx) = mpsc::channel();
        let ranks = topology.clients();
        let offer = Arc::new(Offer {
            secret,
            provider,
            topology,
            servers,
            lease: Duration::from_secs(crate::settings::get().lease_s),
            fence_local,
            run_id,
        });
        std::thread::Builder::new()
            .name("sat-desk".into())
            .spawn(move || accept_loop(listener, tx, offer))
            .map_err(|e| {
                crate::SatError::Bootstrap(format!("cannot start the admission thread: {e}"))
            })?;
        Ok(Desk {
            events: rx,
            slots: ranks.iter().map(|_| Slot::Free).collect(),
            ranks,
            actions: VecDeque::new(),
            waiting: VecDeque::new(),
        })
    }

    fn index(&self, client: Rank) -> Option<usize> {
        self.ranks.binary_search(&client).ok()
    }

    /// The next thing the server loop must do, after taking in what the
    /// sessions said.
    pub(crate) fn next_action(&mut self) -> Option<DeskAction> {
        loop {
            match self.events.try_recv() {
                Ok(Event::Join { address, reply }) => self.join(address, reply),
                Ok(Event::Closed { client }) => self.closed(client),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        self.actions.pop_front()
    }

    /// The service stops (its operator stopped `satrun --serve`): every
    /// attached process is told so on its connection, rather than finding
    /// it closed (which reads as a service that died), and its session
    /// closes. Returns once every session has closed, or at `deadline`.
    pub(crate) fn tell_stopped(&mut self, deadline: Instant) {
        for slot in &self.slots {
            if let Slot::Attached(dropped) = slot {
                let _ = dropped.set(SERVICE_STOPPED.into());
            }
        }
        while self.slots.iter().any(|s| matches!(s, Slot::Attached(_))) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Closed { client }) => self.closed(client),
                Ok(Event::Join { reply, .. }) => {
                    let _ = reply.send(Err("the service is stopping".into()));
                }
                Err(_) => return,
            }
        }
    }

    fn join(&mut self, address: Vec<u8>, reply: Reply) {
        let Some(i) = self.slots.iter().position(|s| matches!(s, Slot::Free)) else {
            if self.slots.iter().any(|s| matches!(s, Slot::Leaving { .. })) {
                self.waiting.push_back((address, reply));
                return;
            }
            let _ = reply.send(Err(format!(
                "all {} client slots of the service are taken: detach a client, or restart \
                 the service with more (satrun --serve --slots N)",
                self.slots.len()
            )));
            return;
        };
        let client = self.ranks[i];
        self.slots[i] = Slot::Admitting {
            reply,
            closed: false,
        };
        tracing::debug!("desk: a process attaches in slot {client}");
        self.actions
            .push_back(DeskAction::Admit { client, address });
    }

    fn closed(&mut self, client: Rank) {
        let Some(i) = self.index(client) else { return };
        match &mut self.slots[i] {
            Slot::Admitting { closed, .. } => *closed = true,
            Slot::Attached(_) => {
                self.slots[i] = Slot::Leaving {
                    closed: true,
                    forgotten: false,
                };
                self.actions.push_back(DeskAction::Lost { client });
            }
            Slot::Leaving {
                forgotten: true, ..
            } => self.free(i),
            Slot::Leaving { closed, .. } => *closed = true,
            Slot::Free => {}
        }
    }

    /// The server of `client` answered its admission.
    pub(crate) fn admitted(&mut self, client: Rank, outcome: Result<(), String>) {
        let Some(i) = self.index(client) else { return };
        let Slot::Admitting { reply, closed } = std::mem::replace(&mut self.slots[i], Slot::Free)
        else {
            tracing::warn!("desk: unexpected admission answer for slot {client}");
            return;
        };
        match outcome {
            Err(reason) => {
                let _ = reply.send(Err(format!("the service refused the endpoint: {reason}")));
            }
            Ok(()) if closed || reply.send(Ok(client)).is_err() => {
                // The process gave up meanwhile: it is admitted at its
                // server, so it must be forgotten there too.
                self.slots[i] = Slot::Leaving {
                    closed: true,
                    forgotten: false,
                };
                self.actions.push_back(DeskAction::Lost { client });
            }
            Ok(()) => self.slots[i] = Slot::Attached(reply.dropped),
        }
    }

    /// Every server has forgotten `client` (it detached, or was lost).
    pub(crate) fn slot_forgotten(&mut self, client: Rank, lost: bool) {
        let Some(i) = self.index(client) else { return };
        match &mut self.slots[i] {
            Slot::Attached(dropped) => {
                // Lost while its connection is open (its server could not
                // reach it): its process may be alive and waiting, so it is
                // told, and its session closes, which frees the slot. (One
                // that detached closes its connection itself.)
                if lost {
                    let _ = dropped
                        .set("its server could not deliver a message to it, and forgot it".into());
                }
                self.slots[i] = Slot::Leaving {
                    closed: false,
                    forgotten: true,
                }
            }
            Slot::Leaving { closed: true, .. } => self.free(i),
            Slot::Leaving { forgotten, .. } => *forgotten = true,
            other => tracing::warn!("desk: slot {client} forgotten while {other:?}"),
        }
    }

    fn free(&mut self, i: usize) {
        tracing::debug!("desk: slot {} is free", self.ranks[i]);
        self.slots[i] = Slot::Free;
        // The first waiting process takes it (one that gave up meanwhile
        // is admitted, found gone, and forgotten: see `admitted`).
        if let Some((address, reply)) = self.waiting.pop_front() {
            self.join(address, reply);
        }
        // Nobody can wait for a slot that no detach will give back.
        if !self.slots.iter().any(|s| matches!(s, Slot::Leaving { .. })) {
            for (address, reply) in std::mem::take(&mut self.waiting) {
                self.join(address, reply);
            }
        }
    }
}

fn accept_loop(listener: TcpListener, events: Sender<Event>, offer: Arc<Offer>) {
    let unproven = Arc::new(Unproven::default());
    let admitting = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, most likely: not one line per try.
                refusal(format_args!("accept failed: {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let pending = match unproven.enter(&stream) {
            Ok(p) => p,
            Err(e) => {
                refusal(format_args!("a new connection closed at once: {e}"));
                continue;
            }
        };
        let (events, offer, admitting) = (events.clone(), offer.clone(), admitting.clone());
        let spawned = std::thread::Builder::new()
            .name("sat-session".into())
            .spawn(move || session(stream, events, &offer, pending, admitting));
        if let Err(e) = spawned {
            refusal(format_args!("cannot start a session thread: {e}"));
        }
    }
}

/// The connections that have not proved the secret yet, oldest first.
#[derive(Default)]
struct Unproven {
    queue: Mutex<UnprovenQueue>,
}

#[derive(Default)]
struct UnprovenQueue {
    entries: VecDeque<UnprovenEntry>,
    next_id: u64,
}

struct UnprovenEntry {
    id: u64,
    /// The connection's socket (a second descriptor of it), to wake its
    /// session's read when it is closed to make room.
    stream: TcpStream,
    evicted: Arc<AtomicBool>,
}

impl Unproven {
    /// Counts a new connection in, closing the oldest unproven one if there
    /// are [`MAX_UNPROVEN`] already.
    fn enter(self: &Arc<Self>, stream: &TcpStream) -> std::io::Result<Pending> {
        let handle = stream.try_clone()?;
        let evicted = Arc::new(AtomicBool::new(false));
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        while q.entries.len() >= MAX_UNPROVEN {
            let Some(oldest) = q.entries.pop_front() else {
                break;
            };
            oldest.evicted.store(true, Ordering::SeqCst);
            // Its session's read returns at once; the session tells the
            // process why and closes.
            let _ = oldest.stream.shutdown(Shutdown::Read);
        }
        let id = q.next_id;
        q.next_id += 1;
        q.entries.push_back(UnprovenEntry {
            id,
            stream: handle,
            evicted: Arc::clone(&evicted),
        });
        Ok(Pending {
            id,
            unproven: Arc::clone(self),
            evicted,
            accepted: Instant::now(),
            proven: false,
        })
    }

    /// Takes connection `id` out; false if it was closed to make room.
    fn leave(&self, id: u64) -> bool {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        match q.entries.iter().position(|e| e.id == id) {
            Some(i) => {
                q.entries.remove(i);
                true
            }
            None => false,
        }
    }
}

/// A connection counted in [`Unproven`] until it proves the secret or ends.
struct Pending {
    id: u64,
    unproven: Arc<Unproven>,
    evicted: Arc<AtomicBool>,
    accepted: Instant,
    proven: bool,
}

impl Pending {
    /// The connection proved the secret: it no longer counts as unproven.
    /// False if it was closed to make room just before.
    fn proved(&mut self) -> bool {
        self.proven = self.unproven.leave(self.id);
        self.proven
    }

    fn evicted(&self) -> bool {
        self.evicted.load(Ordering::SeqCst)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.proven {
            self.unproven.leave(self.id);
        }
    }
}

/// Counts a connection in the desk's [`MAX_ADMITTING`] until it is admitted
/// or gone.
struct Admitting(Arc<AtomicUsize>);

impl Admitting {
    fn enter(count: &Arc<AtomicUsize>) -> Option<Admitting> {
        let before = count.fetch_add(1, Ordering::SeqCst);
        let entered = Admitting(Arc::clone(count));
        (before < MAX_ADMITTING).then_some(entered)
    }
}

impl Drop for Admitting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ToDesk {
    /// The message's name, for logs (never its contents: they come from
    /// whoever reached the port).
    fn kind(&self) -> &'static str {
        match self {
            ToDesk::Hello { .. } => "Hello",
            ToDesk::Proof(_) => "Proof",
            ToDesk::Join { .. } => "Join",
        }
    }
}

/// Why a message did not come (the desk's and an attaching process's
/// reads, [`recv_by`]). Says what came only by its size and a short,
/// escaped prefix.
#[derive(Debug)]
pub(crate) enum Unread {
    /// No whole message by the deadline; `got` bytes of one came.
    Late {
        got: usize,
    },
    /// The connection closed (or was shut) after `got` bytes of a message.
    Closed {
        got: usize,
    },
    Io {
        error: std::io::Error,
    },
    /// A frame length past what this step takes.
    TooLong {
        len: usize,
        max: usize,
        prefix: Vec<u8>,
    },
    /// A whole frame that is no message of this step; `version`, the wire
    /// version it claims if it is a hello.
    Undecodable {
        len: usize,
        prefix: Vec<u8>,
        version: Option<u32>,
    },
}

/// How many bytes of what a peer sent a log line may show.
const PREFIX: usize = 16;

/// `bytes` as printable ASCII (`\r`, `\xff`...), for a log line.
fn escaped(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take(PREFIX)
        .flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect()
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unread::Late { got: 0 } => f.write_str("nothing came in time"),
            Unread::Late { got } => write!(f, "{got} bytes came in time, not a whole message"),
            Unread::Closed { got: 0 } => f.write_str("the connection closed"),
            Unread::Closed { got } => {
                write!(f, "the connection closed after {got} bytes of a message")
            }
            Unread::Io { error } => write!(f, "{error}"),
            Unread::TooLong { len, max, prefix } => write!(
                f,
                "a frame of {len} bytes, more than the {max} taken here (it starts with \"{}\")",
                escaped(prefix)
            ),
            Unread::Undecodable {
                len,
                prefix,
                version,
            } => {
                write!(
                    f,
                    "a frame of {len} bytes that is no SAT message here (it starts with \"{}\")",
                    escaped(prefix)
                )?;
                match version {
                    Some(v) if *v != WIRE_VERSION => write!(
                        f,
                        ", a hello of wire version {v} (this SAT speaks {WIRE_VERSION})"
                    ),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Fills `buf` from `stream` by `deadline`, whatever comes in between: the
/// deadline holds against a peer that drips bytes, which a read timeout
/// alone (renewed by every byte) does not.
fn read_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
    got: &mut usize,
) -> Result<(), Unread> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Unread::Late { got: *got });
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(Unread::Closed { got: *got }),
            Ok(n) => {
                filled += n;
                *got += n;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted
                        | std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                ) => {}
            Err(error) => return Err(Unread::Io { error }),
        }
    }
    Ok(())
}

/// Reads one message of a frame of at most `max` bytes, by `deadline`.
pub(crate) fn recv_by<T: Decode<()>>(
    stream: &mut TcpStream,
    deadline: Instant,
    max: usize,
) -> Result<T, Unread> {
    let mut got = 0;
    let mut head = [0u8; 4];
    read_by(stream, &mut head, deadline, &mut got)?;
    let len = u32::from_le_bytes(head) as usize;
    if len > max {
        // What is already there, for the log: the connection is refused.
        let mut prefix = head.to_vec();
        let mut more = [0u8; PREFIX - 4];
        if stream.set_nonblocking(true).is_ok() {
            if let Ok(n) = stream.read(&mut more) {
                prefix.extend_from_slice(&more[..n]);
            }
            let _ = stream.set_nonblocking(false);
        }
        return Err(Unread::TooLong { len, max, prefix });
    }
    // Grown as bytes come, not allocated at the length a peer claims.
    let mut body = Vec::new();
    while body.len() < len {
        let start = body.len();
        body.resize(start + (len - start).min(64 << 10), 0);
        read_by(stream, &mut body[start..], deadline, &mut got)?;
    }
    decode::<T>(&body, "").map_err(|_| Unread::Undecodable {
        len,
        prefix: [&head[..], &body[..body.len().min(PREFIX - 4)]].concat(),
        version: hello_version(&body),
    })
}

/// Logs a refused connection (or another event of the desk that anyone who
/// reaches the port can cause), rate-limited ([`crate::refusals`]).
fn refusal(why: std::fmt::Arguments<'_>) {
    static LOG: OnceLock<&'static RefusalLog> = OnceLock::new();
    LOG.get_or_init(|| RefusalLog::start("desk")).log(why);
}

/// What the desk tells a connection it closed to make room, and logs.
fn evicted_reason() -> String {
    format!(
        "the service had {MAX_UNPROVEN} connections that had not proved its secret, and closed \
         the oldest, this one, to make room: try again; if it keeps happening, something floods \
         the service's port"
    )
}

/// One attaching process, from `Hello` until its connection closes.
fn session(
    mut stream: TcpStream,
    events: Sender<Event>,
    offer: &Offer,
    mut pending: Pending,
    admitting: Arc<AtomicUsize>,
) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = stream.set_nodelay(true);
    // A peer that does not read cannot hold the thread in a write.
    let _ = stream.set_write_timeout(Some(HELLO_WAIT));
    let deadline = pending.accepted + ADMISSION_TIMEOUT;
    let who = format!("the connection from {peer}");
    let refuse = |stream: &mut TcpStream, why: String| {
        refusal(format_args!("{who} refused: {why}"));
        let _ = send(stream, &FromDesk::Refused(why));
    };
    // Before the proof, whatever fails is refused: a connection closed to
    // make room, or one too slow, is told why; the rest is logged only.
    let unproven =
        |stream: &mut TcpStream, pending: &Pending, (step, within): (&str, Duration), e: Unread| {
            if pending.evicted() {
                return refuse(stream, evicted_reason());
            }
            match e {
                Unread::Late { .. } => refuse(
                    stream,
                    format!(
                        "no {step} within {} s of connecting ({e})",
                        within.as_secs()
                    ),
                ),
                Unread::Undecodable {
                    version: Some(v), ..
                } if v != WIRE_VERSION => refuse(
                    stream,
                    format!(
                        "it speaks wire version {v}, the service {WIRE_VERSION}: use the same SAT \
                     version on both sides"
                    ),
                ),
                // A process whose secret is not the service's closes after the
                // challenge, having checked the desk's proof.
                Unread::Closed { got: 0 } if within > HELLO_WAIT => refusal(format_args!(
                    "{who} refused: no {step}: {e} after the challenge (a process whose secret is \
                 not the service's?)"
                )),
                e => refusal(format_args!("{who} refused: no {step}: {e}")),
            }
        };
    let hello = ("hello", HELLO_WAIT);
    let hello_by = pending.accepted + HELLO_WAIT;
    let (pid, host, theirs) = match recv_by::<ToDesk>(&mut stream, hello_by, MAX_UNPROVEN_FRAME) {
        Ok(ToDesk::Hello {
            wire_version,
            pid,
            host,
            nonce,
        }) => {
            if wire_version != WIRE_VERSION {
                refuse(
                    &mut stream,
                    format!(
                        "it speaks wire version {wire_version}, the service {WIRE_VERSION}: \
                         use the same SAT version on both sides"
                    ),
                );
                return;
            }
            (pid, host, nonce)
        }
        Ok(other) => return refuse(&mut stream, format!("expected Hello, got {}", other.kind())),
        Err(e) => return unproven(&mut stream, &pending, hello, e),
    };
    // The secret, before anything about the service leaves the desk.
    let secret = Some(&offer.secret);
    let Ok((ours, proofs)) = Handshake::answer(secret, &theirs) else {
        return refuse(&mut stream, "the service has no random numbers".into());
    };
    let challenge = FromDesk::Challenge {
        nonce: ours,
        proof: proofs.mine(),
    };
    if let Err(e) = send(&mut stream, &challenge) {
        return unproven(&mut stream, &pending, hello, Unread::Io { error: e });
    }
    let proving = ("proof of the secret", 2 * HELLO_WAIT);
    let proof_by = pending.accepted + proving.1;
    match recv_by::<ToDesk>(&mut stream, proof_by, MAX_UNPROVEN_FRAME) {
        Ok(ToDesk::Proof(proof)) => {
            if let Err(refusal) = proofs.check_theirs(proof.as_ref()) {
                return refuse(&mut stream, auth::refusal_reason(refusal, "the service"));
            }
        }
        Ok(other) => return refuse(&mut stream, format!("expected Proof, got {}", other.kind())),
        Err(e) => return unproven(&mut stream, &pending, proving, e),
    }
    if !pending.proved() {
        return refuse(&mut stream, evicted_reason());
    }
    drop(pending);
    // The pid a process claims is believed, to fence it or to remove its
    // files once it died, only if that process holds this connection: a
    // claimed pid would let any holder of the secret have the desk kill
    // another process, or the service's own group (pid 0).
    let ours = host == crate::os::hostname();
    let fence_pid = (ours && crate::os::pid_holds_peer(&stream, pid)).then_some(pid);
    if ours && fence_pid.is_none() {
        tracing::warn!(
            "desk: {who} says it is pid {pid} of this host, which does not hold the connection \
             (or cannot be seen from here): if it is dropped, no process is killed for it"
        );
    }
    let _ = stream.set_write_timeout(None);
    let Some(counted) = Admitting::enter(&admitting) else {
        return refuse(
            &mut stream,
            format!(
                "{MAX_ADMITTING} processes are being admitted at once already: try again in a \
                 moment"
            ),
        );
    };
    if send(
        &mut stream,
        &FromDesk::Offer {
            provider: offer.provider,
        },
    )
    .is_err()
    {
        return;
    }
    let address = match recv_by::<ToDesk>(&mut stream, deadline, MAX_FRAME) {
        Ok(ToDesk::Join { address }) => address,
        Ok(other) => return refuse(&mut stream, format!("expected Join, got {}", other.kind())),
        Err(e) => return refuse(&mut stream, format!("no Join: {e}")),
    };
    let (tx, rx) = mpsc::channel();
    let dropped = Dropped::default();
    let reply = Reply {
        tx,
        dropped: Arc::clone(&dropped),
    };
    if events.send(Event::Join { address, reply }).is_err() {
        return refuse(&mut stream, "the service is shutting down".into());
    }
    let client = match rx.recv_timeout(ADMISSION_TIMEOUT) {
        Ok(Ok(client)) => client,
        Ok(Err(why)) => return refuse(&mut stream, why),
        Err(_) => {
            return refuse(
                &mut stream,
                "the service's servers did not admit the endpoint in time".into(),
            )
        }
    };
    drop(counted);
    tracing::debug!("desk: pid {pid} on {host:?} attached in slot {client}");
    let welcome = FromDesk::Welcome {
        rank: client,
        topology: offer.topology.clone(),
        servers: offer.servers.clone(),
        lease_s: offer.lease.as_secs(),
        run_id: offer.run_id,
    };
    if send(&mut stream, &welcome).is_ok() {
        let told = |why: &str| {
            if why == SERVICE_STOPPED {
                return "the service was stopped by its operator (satrun --serve ended): this \
                        session is over; attach again once a service runs"
                    .to_owned();
            }
            format!(
                "this process (slot {client}) was dropped by the service: {why}; the service \
                 revoked its scopes and went on without it: attach again"
            )
        };
        match watch_session(&mut stream, offer.lease, told, &dropped) {
            SessionEnd::Closed => {}
            SessionEnd::Dropped(why) => {
                tracing::warn!("desk: slot {client} (pid {pid} on {host:?}) dropped: {why}");
            }
            SessionEnd::Silent(why) => {
                tracing::warn!("desk: slot {client} (pid {pid} on {host:?}) dropped: {why}");
                if let (true, Some(pid)) = (offer.fence_local, fence_pid) {
                    watch::kill(pid);
                    watch::fence(&format!("slot {client}"), pid);
                }
            }
        }
    }
    tracing::debug!("desk: the connection of slot {client} (pid {pid}) closed");
    let _ = events.send(Event::Closed { client });
    if let (Provider::Shm, Some(pid)) = (offer.provider, fence_pid) {
        remove_files_of_dead(pid);
    }
}

/// A process killed while attached over shm cannot remove its shared-memory
/// files; once it is gone, the service removes them for it.
fn remove_files_of_dead(pid: u32) {
    // Its socket closes as it dies, a moment before it is gone.
    for _ in 0..20 {
        if crate::os::process_gone(pid) {
            match crate::transport::fabric::remove_shm_leftovers(pid) {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    "desk: removed {n} shared-memory files left by pid {pid}, which died attached"
                ),
                Err(e) => tracing::warn!("desk: cannot remove the files of pid {pid}: {e}"),
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desk(ranks: &[Rank]) -> (Desk, Sender<Event>) {
        let (tx, rx) = mpsc::channel();
        let desk = Desk {
            events: rx,
            ranks: ranks.to_vec(),
            slots: ranks.iter().map(|_| Slot::Free).collect(),
            actions: VecDeque::new(),
            waiting: VecDeque::new(),
        };
        (desk, tx)
    }

    /// A process asks to join; returns where its answer arrives.
    fn join(tx: &Sender<Event>) -> Receiver<Result<Rank, String>> {
        let (reply, answer) = mpsc::channel();
        tx.send(Event::Join {
            address: vec![1, 2, 3],
            reply: Reply {
                tx: reply,
                dropped: Dropped::default(),
            },
        })
        .unwrap();
        answer
    }

    fn admit(desk: &mut Desk, tx: &Sender<Event>) -> Rank {
        let answer = join(tx);
        let Some(DeskAction::Admit { client, address }) = desk.next_action() else {
            panic!("expected an admission");
        };
        assert_eq!(address, [1, 2, 3]);
        desk.admitted(client, Ok(()));
        assert_eq!(answer.try_recv().unwrap(), Ok(client));
        client
    }

    fn is_free(desk: &Desk, client: Rank) -> bool {
        matches!(desk.slots[desk.index(client).unwrap()], Slot::Free)
    }

    #[test]
    fn a_detached_slot_frees_once_closed_and_forgotten_in_either_order() {
        let (mut d, tx) = desk(&[3]);
        // Forgotten first, then the connection closes.
        let c = admit(&mut d, &tx);
        d.slot_forgotten(c, false);
        assert!(!is_free(&d, c), "the process still holds its connection");
        tx.send(Event::Closed { client: c }).unwrap();
        assert!(d.next_action().is_none(), "a detached client is not lost");
        assert!(is_free(&d, c));
        // The connection closes first (the process exited right after its
        // detach), then the servers confirm: the server is told, but the
        // client has detached already and it ignores that.
        let c = admit(&mut d, &tx);
        tx.send(Event::Closed { client: c }).unwrap();
        assert!(matches!(d.next_action(), Some(DeskAction::Lost { client }) if client == c));
        assert!(!is_free(&d, c), "not before every server forgot it");
        d.slot_forgotten(c, false);
        assert!(is_free(&d, c));
    }

    /// A client its server forgot without a detach (it could not be
    /// reached) while its connection is open: its session is told why, and
    /// closes; a detached one's is not.
    #[test]
    fn a_session_whose_client_was_forgotten_unreached_is_told() {
        let (mut d, tx) = desk(&[3]);
        for lost in [false, true] {
            let c = admit(&mut d, &tx);
            let Slot::Attached(dropped) = &d.slots[d.index(c).unwrap()] else {
                panic!("attached");
            };
            let dropped = Arc::clone(dropped);
            d.slot_forgotten(c, lost);
            assert_eq!(dropped.get().is_some(), lost, "lost: {lost}");
            if lost {
                assert!(dropped.get().unwrap().contains("could not deliver"));
            }
            tx.send(Event::Closed { client: c }).unwrap();
            assert!(d.next_action().is_none());
            assert!(is_free(&d, c));
        }
    }

    #[test]
    fn a_process_that_goes_away_while_being_admitted_is_forgotten() {
        let (mut d, tx) = desk(&[3]);
        let answer = join(&tx);
        let Some(DeskAction::Admit { client, .. }) = d.next_action() else {
            panic!("expected an admission");
        };
        drop(answer);
        d.admitted(client, Ok(()));
        assert!(matches!(d.next_action(), Some(DeskAction::Lost { client: c }) if c == client));
        d.slot_forgotten(client, false);
        assert!(is_free(&d, client));
    }

    #[test]
    fn a_full_service_refuses_and_says_what_to_do() {
        let (mut d, tx) = desk(&[3, 4]);
        admit(&mut d, &tx);
        admit(&mut d, &tx);
        let answer = join(&tx);
        assert!(d.next_action().is_none());
        let refused = answer.try_recv().unwrap().unwrap_err();
        assert!(refused.contains("all 2 client slots") && refused.contains("--slots"));
    }

    #[test]
    fn a_process_waits_for_a_slot_being_given_back() {
        let (mut d, tx) = desk(&[3]);
        let c = admit(&mut d, &tx);
        d.slot_forgotten(c, false);
        // The slot is not free yet (its process still holds the
        // connection): the next process waits instead of being refused.
        let answer = join(&tx);
        assert!(d.next_action().is_none());
        assert!(answer.try_recv().is_err(), "no answer yet");
        tx.send(Event::Closed { client: c }).unwrap();
        let Some(DeskAction::Admit { client, .. }) = d.next_action() else {
            panic!("the waiting process gets the slot");
        };
        assert_eq!(client, c);
        d.admitted(client, Ok(()));
        assert_eq!(answer.try_recv().unwrap(), Ok(c));
    }

    /// What a refused connection sent is logged by its size and a short,
    /// escaped prefix, never more.
    #[test]
    fn a_refusal_shows_an_escaped_prefix_only() {
        let http = b"GET /0123456789abcdef HTTP/1.1\r\n";
        let e = Unread::TooLong {
            len: 542393671,
            max: MAX_UNPROVEN_FRAME,
            prefix: http.to_vec(),
        };
        let shown = e.to_string();
        assert!(
            shown.contains(r#"starts with "GET /0123456789a""#),
            "{shown}"
        );
        assert!(!shown.contains("HTTP"), "{shown}");
        assert_eq!(escaped(&[0, b'\r', 0xff]), r"\x00\r\xff");
    }

    #[test]
    fn a_refused_endpoint_leaves_the_slot_free() {
        let (mut d, tx) = desk(&[3]);
        let answer = join(&tx);
        let Some(DeskAction::Admit { client, .. }) = d.next_action() else {
            panic!("expected an admission");
        };
        d.admitted(client, Err("malformed address".into()));
        assert!(answer
            .try_recv()
            .unwrap()
            .unwrap_err()
            .contains("malformed address"));
        assert!(is_free(&d, client));
        assert!(d.next_action().is_none());
    }
}

/// The desk's decoders under `sat-fuzz` (feature `fuzz`): what anyone who
/// reaches a service's port, or poses as a service, can make them do.
#[cfg(feature = "fuzz")]
pub(crate) mod fuzzing {
    use super::*;
    use crate::bootstrap::seed::{decode, encode_frame};

    /// Valid frame bodies of every message, for the mutations to start from.
    pub(crate) fn corpus() -> Vec<Vec<u8>> {
        let body = |frame: Vec<u8>| frame[4..].to_vec();
        vec![
            body(encode_frame(&ToDesk::Hello {
                wire_version: WIRE_VERSION,
                pid: 77,
                host: "laptop".into(),
                nonce: [3; 32],
            })),
            body(encode_frame(&ToDesk::Join {
                address: b"fi_shm://77:0:1\0".to_vec(),
            })),
            body(encode_frame(&ToDesk::Proof(Some([4; 32])))),
            body(encode_frame(&FromDesk::Offer {
                provider: Provider::Tcp,
            })),
            body(encode_frame(&FromDesk::Welcome {
                rank: 3,
                topology: Topology::service(1, 4).expect("a valid service topology"),
                servers: vec![vec![2, 0, 31, 144, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]],
                lease_s: 10,
                run_id: [5; 16],
            })),
            body(encode_frame(&FromDesk::Refused("full".into()))),
            body(encode_frame(&FromDesk::Challenge {
                nonce: [6; 32],
                proof: Some([7; 32]),
            })),
        ]
    }

    /// Decodes `body` as each side would; never panics, whatever it holds.
    pub(crate) fn input(body: &[u8]) {
        let _ = decode::<ToDesk>(body, "fuzz");
        if let Ok(FromDesk::Welcome { topology, .. }) = decode::<FromDesk>(body, "fuzz") {
            // A client validates the topology it is given before using it.
            let _ = topology.validate();
        }
    }
}
