//! The client side of a run, as user code sees it.
//!
//! A [`Client`] is handed to every role function. Clients talk only to their
//! own server (the super-peer topology of Figure 2); servers carry everything
//! further. Waiting inside a call drives the process's progress engine, so a
//! client never needs a thread of its own to make progress.

use std::collections::{HashMap, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::chunk::{ChainLayout, ChunkError, ChunkId, Label, MAX_CHUNK_SIZE, NO_LABEL};
use crate::error::{SatError, SatResult};
use crate::progress::{Clock, Idle, IdlePolicy};
use crate::protocol::{mesi, Access, Acquire, ClientSide, Join, ProtocolId, ToHome};
use crate::stats::{self, Activity, ChunkEvent};
pub use crate::store::{Chain, LocalMemory};
use crate::store::{Exposed, Store};
pub(crate) use bracket::MAX_BRACKETED;
pub use events::{Event, HandlerResult};
pub use in_place::SlotView;
pub(crate) use learned::learned_set;
pub use symbols::{symbol_bucket, MAX_SYMBOL_NAME, SYMBOL_TABLE_BASE};
#[cfg(feature = "abe")]
pub(crate) use symbols::{ANCHORS, ANCHORS_BASE};

mod bracket;
mod events;
mod failover;
mod host;
mod in_place;
mod learned;
mod loans;
mod switch;
mod symbols;
mod sync;
use crate::topology::Topology;
use crate::transport::wakeup::Wakeup;
use crate::transport::{Payload, Rank, Received, Sender, Transport, MAX_HEADER};
use crate::wire::{self, AllocOutcome, CoherenceOp, Message};

/// How long a wait for a reply that is due spins before micro-sleeping.
const REPLY_SPIN: Duration = Duration::from_micros(500);

/// What a client's wait waits for ([`Client::wait_inner`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitFor {
    /// A reply due within a round trip or two (a grant, an allocation's
    /// answer, a slot's lock let go): spin up to [`REPLY_SPIN`].
    Reply,
    /// Other processes' applications (a notification, a message), which
    /// send when they get to it: spin as the idle policy says, then sleep.
    /// Spinning longer (yielding the core in a loop) would keep this core
    /// looking busy to the kernel's scheduler, which then leaves the process
    /// computing what this one waits for sharing the other core.
    Peers,
    /// As `Peers`, and the role's thread runs the handlers of events that
    /// arrive meanwhile (section 2.5).
    PeersRunningHandlers,
    /// As `Reply`, for an answer that may come late or never (a LOOKUP
    /// waits for another process's MALLOC): the caller may interrupt it.
    Answer,
}
/// How long a request for a host slot's lock looks again without a system
/// call before it waits ([`Client::spin_for_host_lock`]).
const HOST_LOCK_SPIN: Duration = Duration::from_micros(5);

/// Allocation requests in flight at once for one chain.
const ALLOC_WINDOW: usize = 32;

/// How far a chain's READ asks ahead of the chunk it waits for
/// ([`Client::acquire_chain`]): at most this many chunks, and this many
/// bytes, whose grants may be on their way at once. Enough to keep a
/// network busy while one round trip is waited for (16 halve a 64 MiB GET
/// over tcp), little enough that the grants of a large chain do not fill
/// its home's queues. 64 gained nothing more on the 64 MiB GET and
/// hand-off (docs/PERFORMANCE.md).
const READ_AHEAD_CHUNKS: usize = 16;
const READ_AHEAD_BYTES: usize = 8 << 20;

/// How long a MALLOC waits for each answer of its chunks' homes. A home
/// answers at once; no answer for this long means it has stopped or cannot
/// be reached, and the MALLOC fails with a Timeout naming the server.
const MALLOC_TIMEOUT: Duration = Duration::from_secs(60);

/// Chunks from [`symbols::SYMBOL_TABLE_BASE`] up are the symbol table's:
/// `call` (MALLOC, MAP, LOOKUP, a per-chunk WRITE) may not reach them, or
/// one process could overwrite every process's symbols.
fn not_reserved(call: &str, ids: impl IntoIterator<Item = ChunkId>) -> SatResult<()> {
    match ids.into_iter().find(|&id| id >= symbols::SYMBOL_TABLE_BASE) {
        Some(id) => Err(SatError::Usage(format!(
            "{call} of chunk {id:#x}: chunks from {:#x} up are reserved for the symbol table, \
             written only through the symbol calls (write_symbol); use chunks below that",
            symbols::SYMBOL_TABLE_BASE
        ))),
        None => Ok(()),
    }
}

/// A call with a chain handle this process gave back.
fn given_back(chain: &Chain) -> SatError {
    SatError::Usage(format!(
        "the chain at chunk {} was given back in this process (FREE or UNMAP): its handle is \
         no longer valid; MALLOC or LOOKUP the chain again for a new one",
        chain.first()
    ))
}

/// A MALLOC of `chunk` that exists with another size or protocol.
fn size_mismatch(
    chunk: ChunkId,
    (size, protocol): (usize, ProtocolId),
    (existing, has): (u64, ProtocolId),
) -> SatError {
    SatError::Usage(format!(
        "MALLOC of chunk {chunk} with {size} bytes [{}]: it already exists with {existing} bytes \
         [{}]; allocate it with the same size and protocol, or LOOKUP it",
        protocol.name(),
        has.name()
    ))
}

fn label_mismatch(chunk: ChunkId, asked: Label, has: Label) -> SatError {
    let what = |l: Label| {
        if l == NO_LABEL {
            "no label (a plain chunk)"
        } else {
            "a label (a protected chunk)"
        }
    };
    SatError::Usage(format!(
        "MALLOC of chunk {chunk} with {}: it already exists with {}; a chunk keeps the \
         protection it was created with: allocate it the same way, or LOOKUP it",
        if asked == NO_LABEL {
            "no label"
        } else {
            "a label"
        },
        if asked != NO_LABEL && has != NO_LABEL {
            "another label (another write policy)"
        } else {
            what(has)
        }
    ))
}

fn unknown(chunk: u64) -> SatError {
    SatError::Usage(format!(
        "chunk {chunk} is unknown to this process: MALLOC or LOOKUP it first"
    ))
}

fn access_name(access: Access) -> &'static str {
    match access {
        Access::Read => "READ",
        Access::Write => "WRITE",
        Access::ReadWrite => "READWRITE",
    }
}

/// How much chunk data a process holds in local memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Chunks whose data is in memory (SAT-allocated regions).
    pub chunks: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Regions dropped so far to stay within the memory capacity.
    pub evictions: u64,
}

/// The messages a client's endpoint has carried so far ([`Client::traffic`]):
/// what message budgets are checked against. A client talks only to its
/// server, so everything it receives is a message that server sent to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Messages sent: requests, acknowledgements, releases, user messages.
    pub sent: u64,
    /// Messages received: answers, invalidations, notifications, user
    /// messages.
    pub received: u64,
    /// Of `sent`, the user messages ([`Client::send`]).
    pub user_sent: u64,
    /// Of `received`, the user messages (another client's [`Client::send`]).
    pub user_received: u64,
}

impl Traffic {
    /// What was carried between `earlier` and `self`.
    pub fn since(self, earlier: Traffic) -> Traffic {
        Traffic {
            sent: self.sent - earlier.sent,
            received: self.received - earlier.received,
            user_sent: self.user_sent - earlier.user_sent,
            user_received: self.user_received - earlier.user_received,
        }
    }

    /// The S-DSM's own messages this client sent: all but user messages.
    pub fn sdsm_sent(&self) -> u64 {
        self.sent - self.user_sent
    }

    /// The S-DSM's own messages this client received, all from its server:
    /// all but user messages.
    pub fn sdsm_received(&self) -> u64 {
        self.received - self.user_received
    }
}

/// An open scope on a chain; released when dropped (an error at that point
/// is logged: call [`Scope::release`] to see it). Dropped while the thread
/// panics, it is aborted instead: a write scope then publishes nothing.
pub struct Scope<'c> {
    client: &'c Client,
    chain: Chain,
    open: bool,
}

impl Scope<'_> {
    /// Runs `f` on the chain's contiguous data.
    pub fn data<R>(&self, f: impl FnOnce(&[u8]) -> R) -> SatResult<R> {
        self.client.with_chain(&self.chain, f)
    }

    /// Runs `f` on the chain's contiguous data, in a write scope.
    pub fn data_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> SatResult<R> {
        self.client.with_chain_mut(&self.chain, f)
    }

    /// Releases the scope now.
    pub fn release(mut self) -> SatResult<()> {
        self.open = false;
        self.client.release_chain(&self.chain)
    }

    /// Ends the scope without publishing: see [`Client::abort_chain`].
    pub fn abort(mut self) -> SatResult<()> {
        self.open = false;
        self.client.abort_chain(&self.chain)
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        // A panic inside a write scope leaves half-written bytes: they must
        // not become a version.
        let ended = if std::thread::panicking() {
            self.client.abort_chain(&self.chain)
        } else {
            self.client.release_chain(&self.chain)
        };
        if let Err(e) = ended {
            // What could not be ended is still open (its message did not
            // leave): nobody else can end it, so abort it, retrying a
            // transient failure.
            tracing::warn!("ending a scope on drop: {e}");
            self.client.abort_open(&self.chain);
        }
    }
}

/// A point-to-point message from another client, relayed by the servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMessage {
    /// The rank of the client that sent it.
    pub from: Rank,
    /// The sender's tag ([`Client::send`]).
    pub tag: u32,
    /// The bytes sent.
    pub data: Vec<u8>,
}

/// The client runtime of one process: its place in the topology and its
/// endpoint. Safe to share between threads (calls are serialized inside).
pub struct Client {
    rank: Rank,
    role: u32,
    topology: Arc<Topology>,
    policy: IdlePolicy,
    /// Deadlines and idle waits go through it (simulated under the
    /// whole-stack simulator).
    clock: Clock,
    chunk_size: AtomicUsize,
    state: Mutex<ClientState>,
    /// The one loan of a chunk's bytes given back without the lock
    /// ([`loans`]); the other loans are in the state.
    quick_loan: loans::QuickLoan,
    /// The subscription handlers, apart from the state: a handler runs
    /// without any lock held, and may call the whole API.
    handlers: Mutex<events::Handlers>,
    /// The thread that runs the role function: the one that runs handlers.
    role_thread: std::sync::OnceLock<std::thread::ThreadId>,
    /// Set once the client has ended (its role returned, or it detached
    /// from a service): every later wait fails at once instead of waiting
    /// for servers that no longer answer it.
    finished: AtomicBool,
    /// The coordinators keep barriers in host segments (every process of
    /// the run on one host): see [`sync`].
    host_sync: AtomicBool,
    /// In a run with recovery: why this process cannot go on, once its
    /// watch knows (`bootstrap/watch.rs`); every wait ends with it.
    fatal: std::sync::OnceLock<crate::bootstrap::watch::Fatal>,
    /// What a layer above keeps for this client and no other (the
    /// encryption layer's tenant key and caches): two clients of one
    /// process may be two tenants, and a client's state ends with it.
    layer: Mutex<Option<Arc<dyn std::any::Any + Send + Sync>>>,
    /// Asked, while a call waits for other processes, whether the caller
    /// wants it to stop ([`Client::set_interrupt_check`]).
    interrupt: std::sync::OnceLock<InterruptCheck>,
}

/// A check a layer above gives the client ([`Client::set_interrupt_check`]):
/// `Some(error)` ends the waiting call with that error.
pub type InterruptCheck = Arc<dyn Fn() -> Option<SatError> + Send + Sync>;

/// How often a waiting call asks its [`InterruptCheck`]: a person who
/// pressed Ctrl-C sees the call end at once, and a check that takes a lock
/// (Python's interpreter lock) is not taken at every round of the wait.
const INTERRUPT_CHECK_EVERY: Duration = Duration::from_millis(50);

struct ClientState {
    /// The server this client talks to: its topology's, or its stand-in
    /// once a run with replicated homes lost it (`topology/ring.rs`).
    server: Rank,
    /// Where chunks live now: the servers, and those the run lost.
    ring: crate::topology::ring::Ring,
    transport: Box<dyn Transport>,
    mail: Mailbox,
    /// The chunks this process allocated or looked up, and their data.
    store: Store,
    /// The labels of the chunks allocated or looked up with one.
    labels: HashMap<ChunkId, Label>,
    /// Scopes a thread is ending through a chain (thread, chunk, the
    /// chain's instance): which holder's scope ends, when another thread
    /// holds one on the chunk through another chain (`check_chain_scopes`).
    ending_through: Vec<(std::thread::ThreadId, ChunkId, usize)>,
    header: [u8; MAX_HEADER],
    /// Messages the transport has delivered to this client.
    received: u64,
    /// User messages sent ([`Client::send`]).
    user_sent: u64,
    /// Scope bytes lent to closures that run without the lock ([`loans`]).
    loans: loans::Loans,
    /// Scopes on chunks whose version is in a host slot ([`host`]).
    host: host::HostPath,
    /// The subscribers a release tells itself (kept to reuse its memory).
    direct_ranks: Vec<Rank>,
    /// The chunks read after each barrier ([`learned`]).
    learned: learned::Learned,
    /// The adviser's protocol per chunk, for chunks allocated with MESI
    /// (`SAT_ADVICE`: [`crate::protocol::advice`]).
    advice: Option<Arc<crate::protocol::advice::Advice>>,
    /// Chunks allocated with MESI are allocated adaptive instead
    /// (`SAT_ADAPTIVE`: [`crate::protocol::advice::adaptive_by_default`]).
    adaptive: bool,
    /// Chain releases are bracketed, so that they apply all or nothing
    /// ([`bracket`]): set where the run outlives its clients.
    atomic_chains: bool,
    /// Inside a bracket: host-slot releases are staged for their homes.
    staging: bool,
    /// What brackets have still to send (staged releases, then commits),
    /// in order; sent at each poll until the transport takes it.
    bracket_unsent: std::collections::VecDeque<Message>,
    /// The run keeps a backup of every home: a release that publishes
    /// returns once the home says both hold it (`Message::Durable`).
    replicated: bool,
    /// During one RELEASE of a PUT ([`Client::put`]): the chunk and the
    /// caller's bytes (address, length), which the release publishes
    /// instead of the chunk's local bytes. Set and cleared within one hold
    /// of the client's lock, while the caller's slice is borrowed.
    /// A triple, not an `Option`: every byte is written, always. A `None`
    /// leaves its payload uninitialized, and the optimized test of it read
    /// those bytes, which valgrind's memcheck reports (a length of 0 stands
    /// for none).
    put_source: (ChunkId, usize, usize),
    /// Chunks this process reads in place ([`in_place`]): the thread that
    /// does, and when its scope started (for the statistics stream).
    in_place: HashMap<ChunkId, (std::thread::ThreadId, u64)>,
    /// Servers the transport could not reach, whose loss the run has not
    /// announced yet (`client/failover.rs`).
    suspects: Vec<failover::Suspect>,
}

/// What a release waits for before it returns: the home's acknowledgement
/// of a diff (a grant count), and the `Durable`s of a run with replicated
/// homes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckDue {
    grants: u64,
    durable: u64,
}

impl AckDue {
    /// Whether what `chunk`'s release waits for has come. (The chunk may
    /// have left the store meanwhile: the `Durable`s are counted apart.)
    /// An error when the server that was to say so was lost.
    fn met(self, st: &ClientState, chunk: ChunkId) -> Option<SatResult<()>> {
        if let Some((upto, why)) = st.mail.durable_lost.get(&chunk) {
            if self.durable > 0 && self.durable <= *upto {
                return Some(Err(SatError::ProcessLost(format!(
                    "RELEASE of chunk {chunk}: {why} before the home said its backup holds the \
                     release: it may have been published or not; read the chunk to know"
                ))));
            }
        }
        let grants = self.grants == 0 || st.store.get(chunk)?.grants >= self.grants;
        let durable = st.mail.durable.get(&chunk).map_or(0, |d| d.1) >= self.durable;
        (grants && durable).then_some(Ok(()))
    }
}

impl Client {
    pub(crate) fn new(topology: Arc<Topology>, transport: Box<dyn Transport>) -> Client {
        Client::with_clock(topology, transport, Clock::Real)
    }

    /// The state a layer above keeps for this client (see the field):
    /// `None` until the layer sets it.
    pub fn layer_state(&self) -> MutexGuard<'_, Option<Arc<dyn std::any::Any + Send + Sync>>> {
        self.layer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A client whose time comes from `clock` (the simulator's).
    pub(crate) fn with_clock(
        topology: Arc<Topology>,
        transport: Box<dyn Transport>,
        clock: Clock,
    ) -> Client {
        let rank = transport.rank();
        let capacity = topology.entry(rank).memory;
        stats::start(stats::Identity::of(&topology, rank));
        let replicated = topology.replication() > 1 && topology.servers().len() > 1;
        let (advice, adaptive) = (
            crate::protocol::advice::from_env(),
            crate::protocol::advice::adaptive_by_default(),
        );
        let (advice, adaptive) = if replicated {
            crate::protocol::advice::for_replicated_homes(advice, adaptive)
        } else {
            (advice, adaptive)
        };
        let server = topology.server_of(rank);
        let ring = crate::topology::ring::Ring::new(topology.servers());
        Client {
            rank,
            role: topology.role(rank),
            topology,
            policy: IdlePolicy::from_env(),
            clock,
            chunk_size: AtomicUsize::new(crate::settings::get().chunk_size),
            handlers: Mutex::new(events::Handlers::default()),
            role_thread: std::sync::OnceLock::new(),
            finished: AtomicBool::new(false),
            quick_loan: loans::QuickLoan::default(),
            host_sync: AtomicBool::new(false),
            fatal: std::sync::OnceLock::new(),
            interrupt: std::sync::OnceLock::new(),
            layer: Mutex::new(None),
            state: Mutex::new(ClientState {
                server,
                ring,
                transport,
                mail: Mailbox::default(),
                store: Store::new(capacity),
                labels: HashMap::new(),
                header: [0; MAX_HEADER],
                received: 0,
                user_sent: 0,
                loans: loans::Loans::default(),
                host: host::HostPath::default(),
                direct_ranks: Vec::new(),
                learned: learned::Learned::default(),
                advice,
                adaptive,
                atomic_chains: false,
                staging: false,
                bracket_unsent: std::collections::VecDeque::new(),
                replicated,
                put_source: (0, 0, 0),
                in_place: HashMap::new(),
                ending_through: Vec::new(),
                suspects: Vec::new(),
            }),
        }
    }

    /// Allocates with `advice` instead of `SAT_ADVICE`'s (the whole-stack
    /// simulator's clients, before their threads start).
    #[cfg(feature = "simulator")]
    pub(crate) fn set_advice(&self, advice: Option<Arc<crate::protocol::advice::Advice>>) {
        self.lock().advice = advice;
    }

    /// Allocates chunks asked for with MESI as adaptive ones, or not,
    /// whatever `SAT_ADAPTIVE` says (the tests').
    pub fn set_adaptive_by_default(&self, adaptive: bool) {
        self.lock().adaptive = adaptive;
    }

    /// The run's coordinators keep barriers in host segments: barriers are
    /// then kept there (set by the bootstrap, before the role starts).
    pub(crate) fn use_host_sync(&self) {
        self.host_sync.store(true, Ordering::Relaxed);
    }

    /// This client's run has recovery on: `fatal` says when the run cannot
    /// go on for this process (its seed is gone, the run was stopped, or it
    /// was declared lost), and every call then fails with the reason.
    pub(crate) fn watch(&self, fatal: crate::bootstrap::watch::Fatal) {
        let _ = self.fatal.set(fatal);
    }

    /// The error every call returns once this process cannot go on.
    fn fatal(&self) -> SatResult<()> {
        match self.fatal.get().and_then(|f| f.check()) {
            Some(why) => Err(SatError::Aborted(why.to_owned())),
            None => Ok(()),
        }
    }

    /// This client of a service takes read locks on host slots under its
    /// own bit, `reader`, so that its homes can free them if it dies
    /// (`segment/slot.rs`). Set before the client's first request.
    pub(crate) fn read_host_slots_as(&self, reader: crate::segment::Reader) {
        self.lock().host.read_as(reader);
    }

    /// This process's rank in the run.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// The number of processes in the run, servers included.
    pub fn size(&self) -> u32 {
        self.topology.len()
    }

    /// The role this process plays (1 and above; 0 is the server role).
    pub fn role(&self) -> u32 {
        self.role
    }

    /// The server this client is attached to: its topology's, or the one
    /// that took its place (a run with replicated homes that lost it).
    pub fn server(&self) -> Rank {
        self.lock().server
    }

    /// Whether this client has applied the loss of server `server`
    /// (`client/failover.rs`), for the simulator's checks.
    #[cfg(feature = "simulator")]
    pub(crate) fn knows_lost(&self, server: Rank) -> bool {
        self.lock().ring.is_lost(server)
    }

    /// The number of clients in the run (the report's `clientGetClientNr`).
    pub fn client_count(&self) -> u32 {
        self.topology.clients().len() as u32
    }

    /// The number of servers in the run.
    pub fn server_count(&self) -> u32 {
        self.topology.servers().len() as u32
    }

    /// The run's topology: its servers, clients and roles.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Progress while no call drives the endpoint: answers invalidations
    /// and takes in messages while user code computes between SAT calls.
    /// Runs until `stop` is set; a call in progress (holding the lock) is
    /// never waited for: this loop only takes the lock when it is free.
    pub(crate) fn background_progress(&self, stop: &std::sync::atomic::AtomicBool) {
        // It runs while the application computes: its polling is not time
        // taken from the application.
        stats::not_counted();
        // No spin phase: this thread and a role's thread waiting in a call
        // both wake at every message, and one of them spinning after each
        // (yielding a core a host's other processes need) is enough.
        let mut idle = Idle::new(IdlePolicy {
            busy: false,
            spin: Duration::ZERO,
            ..self.policy
        });
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            let (got, wakeup) = match self.state.try_lock() {
                Ok(mut st) => {
                    let got = st.progress(self.rank).unwrap_or_else(|e| {
                        tracing::warn!("background progress: {e}");
                        0
                    }) + usize::from(st.transport.sends_queued());
                    let wakeup = if got == 0 && idle.sleep_due() {
                        st.transport.wakeup()
                    } else {
                        Wakeup::Usual
                    };
                    (got, wakeup)
                }
                Err(_) => (0, Wakeup::Usual),
            };
            if got > 0 {
                idle.traffic();
            } else {
                idle.idle_until(wakeup);
            }
        }
    }

    /// One round of background progress, if no call holds the client.
    #[cfg(feature = "simulator")]
    pub(crate) fn background_step(&self) -> usize {
        match self.state.try_lock() {
            Ok(mut st) => st.progress(self.rank).unwrap_or(0),
            Err(_) => 0,
        }
    }

    /// The deadline `timeout` from now; None (no deadline) when that lies
    /// beyond what the clock can express, as `Duration::MAX` does.
    pub(crate) fn deadline_in(&self, timeout: Duration) -> Option<Instant> {
        self.clock.now().checked_add(timeout)
    }

    fn lock(&self) -> MutexGuard<'_, ClientState> {
        // A panic in another thread's call leaves nothing half-updated that a
        // later call could trip on: every update is a single push or flag.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `data` to client `to`, tagged `tag`, through the servers. It
    /// arrives after every earlier message from this client to `to`.
    pub fn send(&self, to: Rank, tag: u32, data: &[u8]) -> SatResult<()> {
        if to >= self.size() {
            return Err(SatError::Usage(format!(
                "send to rank {to}: the run has ranks 0 to {}",
                self.size() - 1
            )));
        }
        if self.topology.is_server(to) {
            return Err(SatError::Usage(format!(
                "send to rank {to}: it is a server; user messages go to clients"
            )));
        }
        let _sat = stats::doing(Activity::Sdsm);
        let mut st = self.lock();
        let st = &mut *st;
        let n = wire::encode(
            &Message::Relay {
                from: self.rank,
                to,
                tag,
            },
            &mut st.header,
        )
        .map_err(|e| SatError::Usage(e.to_string()))?;
        st.transport
            .send(st.server, &st.header[..n], Payload::Copy(data))?;
        st.user_sent += 1;
        tracing::trace!(
            "relay to {to} tag {tag} ({} bytes) via server {}",
            data.len(),
            st.server
        );
        Ok(())
    }

    /// Waits for the next message sent to this client.
    pub fn recv(&self) -> SatResult<UserMessage> {
        self.wait_running_handlers(None, |st| st.mail.inbox.pop_front())?
            .ok_or_else(|| SatError::Timeout("no deadline was given".into()))
    }

    /// Waits at most `timeout` for the next message.
    pub fn recv_timeout(&self, timeout: Duration) -> SatResult<Option<UserMessage>> {
        self.wait_running_handlers(self.deadline_in(timeout), |st| st.mail.inbox.pop_front())
    }

    /// The next message if one has arrived, without waiting.
    pub fn try_recv(&self) -> SatResult<Option<UserMessage>> {
        let _sat = stats::doing(Activity::Sdsm);
        let mut st = self.lock();
        st.progress(self.rank)?;
        Ok(st.mail.inbox.pop_front())
    }

    /// The chunk size MALLOC splits by: `SAT_CHUNK_SIZE` (bytes) when set,
    /// else [`crate::chunk::DEFAULT_CHUNK_SIZE`].
    pub fn chunk_size(&self) -> usize {
        self.chunk_size.load(Ordering::Relaxed)
    }

    /// Sets the chunk size of later MALLOCs in this process. Every process
    /// allocating a chain must use the same size, or their chunks differ.
    pub fn set_chunk_size(&self, size: usize) -> SatResult<()> {
        if size == 0 {
            return Err(ChunkError::ZeroChunkSize.into());
        }
        if size > MAX_CHUNK_SIZE {
            return Err(ChunkError::ChunkSizeTooLarge { size }.into());
        }
        self.chunk_size.store(size, Ordering::Relaxed);
        Ok(())
    }

    /// MALLOC: allocates `size` bytes from chunk `base` on as a chain of
    /// chunks of [`Client::chunk_size`] (the last one only as large as
    /// needed), with the default protocol (home-based MESI). A chain that
    /// exists with the same chunks and sizes is joined; allocating it again
    /// in this process returns the same chain. A chain one of whose chunks
    /// exists with another size, protocol or label fails having allocated
    /// none of its chunks: their homes are asked first (only another
    /// process's MALLOC of the same chunks at the same moment can leave part
    /// of it allocated).
    pub fn malloc(&self, base: ChunkId, size: usize) -> SatResult<Chain> {
        self.malloc_with(ProtocolId::default(), base, size)
    }

    /// MALLOC with a chosen protocol for every chunk of the chain.
    pub fn malloc_with(
        &self,
        protocol: ProtocolId,
        base: ChunkId,
        size: usize,
    ) -> SatResult<Chain> {
        crate::chunk::check_chain_size(size as u64)?;
        let layout = ChainLayout::malloc(base, size, self.chunk_size())?;
        self.allocate_chain(protocol, layout, None)
    }

    /// MALLOC_LST: chunk `ids[i]` gets `sizes[i % sizes.len()]` bytes, all in
    /// one chain, contiguous locally in the order of `ids`.
    pub fn malloc_lst(
        &self,
        protocol: ProtocolId,
        ids: &[ChunkId],
        sizes: &[usize],
    ) -> SatResult<Chain> {
        let layout = ChainLayout::malloc_lst(ids, sizes)?;
        self.allocate_chain(protocol, layout, None)
    }

    /// MAP: MALLOC of `memory.len()` bytes from chunk `base` whose local
    /// data is `memory` itself, used in place with no copy (Figure 6). The
    /// bytes already in `memory` become the chain's data only through a
    /// write scope (PUT); a read scope (GET) fills `memory` from the homes.
    /// SAT keeps the memory for the rest of the run and never evicts it.
    pub fn map(
        &self,
        protocol: ProtocolId,
        base: ChunkId,
        memory: Box<dyn LocalMemory>,
    ) -> SatResult<Chain> {
        let layout = ChainLayout::malloc(base, memory.bytes().len(), self.chunk_size())?;
        not_reserved("MAP", layout.chunks().iter().map(|&(id, _)| id))?;
        self.allocate_chain(protocol, layout, Some(memory))
    }

    /// MAP of a MALLOC_LST chain: chunk `ids[i]` gets `sizes[i % len]`
    /// bytes, and the chain's local data is `memory` (exactly the chain's
    /// size), used in place. Faces that own the memory their callers see
    /// (the C ABI's `chunk->data`) allocate every chain this way.
    pub fn map_lst(
        &self,
        protocol: ProtocolId,
        ids: &[ChunkId],
        sizes: &[usize],
        memory: Box<dyn LocalMemory>,
    ) -> SatResult<Chain> {
        let layout = ChainLayout::malloc_lst(ids, sizes)?;
        if layout.total_size() != memory.bytes().len() {
            return Err(SatError::Usage(format!(
                "MAP of a chain of {} bytes with memory of {} bytes: give memory of the chain's size",
                layout.total_size(),
                memory.bytes().len()
            )));
        }
        self.allocate_chain(protocol, layout, Some(memory))
    }

    /// Gives back the memory of a MAP'd chain, which this process then no
    /// longer holds (its chunks stay in the S-DSM). Refused while a chunk of
    /// the chain is inside a scope.
    pub fn unmap(&self, chain: &Chain) -> SatResult<Box<dyn LocalMemory>> {
        self.unmap_for("UNMAP", chain)
    }

    /// FREE: gives `chain` back in this process (the report's "free:
    /// locally removing the data"): a subscription to it ends, the memory
    /// of its bytes is returned (a MAP'd chain's memory is dropped:
    /// [`Client::unmap`] hands it back instead), and the handle is no longer
    /// valid (calls with it are usage errors), nor is any other handle of
    /// this process to the same chain (a MALLOC and a LOOKUP of the same
    /// chunks and sizes give one chain). Its chunks stay in the S-DSM
    /// with their versions, for this process to MALLOC or LOOKUP again and
    /// for the others. Refused while a chunk of the chain is inside a scope
    /// (nothing changes then), and for a protected chain (its plaintext
    /// belongs to the encryption layer until the run ends).
    pub fn free(&self, chain: &Chain) -> SatResult<()> {
        let _sat = stats::doing(Activity::Sdsm);
        let refused = |why: &str| {
            SatError::Usage(format!(
                "FREE of the chain at chunk {}: {why}",
                chain.first()
            ))
        };
        let memory = {
            let mut st = self.lock_outside_dispatch_of_chain(chain)?;
            if chain
                .ids()
                .any(|id| st.labels.get(&id).is_some_and(|&l| l != NO_LABEL))
            {
                return Err(refused(
                    "a protected chain cannot be given back before the run ends (its plaintext \
                     belongs to the encryption layer); keep the handle",
                ));
            }
            let memory = st.store.free(chain).map_err(|e| refused(&e))?;
            // Freed first, so that a refusal leaves the subscription as it
            // was; in the same critical section, so that no event of the
            // chain is queued for its handler once it is given back. A chain
            // with no subscription has nothing to end.
            self.end_chain_subscription_locked(&mut st, chain);
            memory
        };
        drop(memory);
        Ok(())
    }

    /// [`Client::unmap`] for the API call `call` (the C ABI's FREE gives a
    /// chain back this way): an error names that call.
    pub fn unmap_for(&self, call: &str, chain: &Chain) -> SatResult<Box<dyn LocalMemory>> {
        let _sat = stats::doing(Activity::Sdsm);
        self.lock().store.unmap(chain).map_err(|e| {
            SatError::Usage(format!(
                "{call} of the chain at chunk {}: {e}",
                chain.first()
            ))
        })
    }

    /// FREE of a MAP'd chain, for the API call `call` (the C ABI's and the
    /// Python module's FREE, whose chains are MAP'd on memory they own):
    /// [`Client::unmap_for`], and the end of this process's subscription to
    /// the chain in the same critical section, so that no event of the
    /// chain reaches its handler once the chain is given back. Refused (a
    /// chunk in a scope): nothing changes, the subscription included.
    pub fn free_mapped_for(&self, call: &str, chain: &Chain) -> SatResult<Box<dyn LocalMemory>> {
        let _sat = stats::doing(Activity::Sdsm);
        let mut st = self.lock_outside_dispatch_of_chain(chain)?;
        let memory = st.store.unmap(chain).map_err(|e| {
            SatError::Usage(format!(
                "{call} of the chain at chunk {}: {e}",
                chain.first()
            ))
        })?;
        self.end_chain_subscription_locked(&mut st, chain);
        Ok(memory)
    }

    /// LOOKUP of one chunk: its size, once any process has allocated it. It
    /// waits at most `timeout` for that (see [`crate::directory`] for why),
    /// then fails with [`SatError::Timeout`].
    pub fn lookup(&self, chunk: ChunkId, timeout: Duration) -> SatResult<usize> {
        let chain = self.lookup_lst(&[chunk], timeout)?;
        Ok(chain.size())
    }

    /// LOOKUP(baseid, nbchunks): the chain of chunks `base` to
    /// `base + nbchunks - 1`, with sizes and protocols from their homes,
    /// waiting at most `timeout` for each to be allocated.
    pub fn lookup_chain(
        &self,
        base: ChunkId,
        nbchunks: u64,
        timeout: Duration,
    ) -> SatResult<Chain> {
        if nbchunks == 0 {
            return Err(ChunkError::NoChunks { baseid: base }.into());
        }
        let last = base
            .checked_add(nbchunks - 1)
            .ok_or(ChunkError::IdOverflow {
                baseid: base,
                count: nbchunks,
            })?;
        let ids: Vec<ChunkId> = (base..=last).collect();
        self.lookup_lst(&ids, timeout)
    }

    /// LOOKUP_LST: the chain of chunks `ids`, in that order.
    pub fn lookup_lst(&self, ids: &[ChunkId], timeout: Duration) -> SatResult<Chain> {
        self.lookup_lst_into(ids, timeout, |_| None)
    }

    /// LOOKUP_LST whose local data is memory the caller provides once the
    /// chain's size is known: `memory(size)` returns it (exactly `size`
    /// bytes), or None for SAT's own.
    pub fn lookup_lst_into(
        &self,
        ids: &[ChunkId],
        timeout: Duration,
        memory: impl FnOnce(usize) -> Option<Box<dyn LocalMemory>>,
    ) -> SatResult<Chain> {
        let _sat = stats::doing(Activity::Sdsm);
        // Validates the ids (none, duplicates) before asking anyone.
        ChainLayout::malloc_lst(ids, &[1])?;
        not_reserved("LOOKUP", ids.iter().copied())?;
        let wait_ms = timeout.as_millis().min(u32::MAX as u128) as u32;
        let requests = ids
            .iter()
            .map(|&chunk| Message::Lookup {
                chunk,
                client: self.rank,
                request: 0, // numbered by `allocation`
                wait_ms,
            })
            .collect::<Vec<_>>();
        // The homes answer within `timeout`; allow for the way back. The
        // first chunk nobody allocated ends the LOOKUP.
        let outcomes = self.allocation_until(
            &requests,
            Some(timeout.saturating_add(Duration::from_secs(30))),
            true,
        )?;
        let mut sizes = Vec::with_capacity(ids.len());
        let mut protocols = Vec::with_capacity(ids.len());
        let mut labels = Vec::with_capacity(ids.len());
        for (&chunk, outcome) in ids.iter().zip(outcomes) {
            match outcome {
                AllocOutcome::Allocated {
                    size,
                    protocol,
                    label,
                } => {
                    if !protocol.known() {
                        return Err(protocol.unknown_error(&format!("LOOKUP of chunk {chunk}")));
                    }
                    sizes.push(size as usize);
                    protocols.push(protocol);
                    labels.push(label);
                }
                AllocOutcome::NotAllocated => {
                    return Err(SatError::Timeout(format!(
                        "LOOKUP of chunk {chunk}: no process allocated it within {timeout:?}; \
                         MALLOC it somewhere, or LOOKUP with a longer wait"
                    )))
                }
                AllocOutcome::Mismatch { .. } | AllocOutcome::Refused => {
                    return Err(SatError::Usage(format!(
                        "LOOKUP of chunk {chunk}: the home answered as to a MALLOC"
                    )))
                }
            }
        }
        let layout = ChainLayout::malloc_lst(ids, &sizes)?;
        let memory = memory(layout.total_size());
        if let Some(m) = &memory {
            if m.bytes().len() != layout.total_size() {
                return Err(SatError::Usage(format!(
                    "LOOKUP of a chain of {} bytes given memory of {} bytes",
                    layout.total_size(),
                    m.bytes().len()
                )));
            }
        }
        self.add_chain(ChunkEvent::Lookup, layout, &protocols, &labels, memory)
    }

    /// Adds a chain the homes confirmed to the store; `event` says how it
    /// came, for the statistics stream.
    fn add_chain(
        &self,
        event: ChunkEvent,
        layout: ChainLayout,
        protocols: &[ProtocolId],
        labels: &[Label],
        memory: Option<Box<dyn LocalMemory>>,
    ) -> SatResult<Chain> {
        let mut st = self.lock();
        let st = &mut *st;
        let mut hosts = Vec::with_capacity(layout.len());
        for &(id, _) in layout.chunks() {
            let slot = st.host.take_slot(id)?;
            // A chunk already here keeps the slot it has.
            hosts.push(slot.filter(|_| st.store.get(id).is_none()));
        }
        for (&(id, _), &label) in layout.chunks().iter().zip(labels) {
            if label != NO_LABEL {
                st.labels.insert(id, label);
            }
        }
        let chain = st.store.add_chain(layout, protocols, hosts, memory);
        if stats::on() {
            let (chunks, footprint) = st.store.stats_counts();
            for &(id, size) in chain.layout().chunks() {
                stats::chunk_event(event, id, size, chunks, footprint);
            }
        }
        Ok(chain)
    }

    /// MALLOC_LST inside the range reserved for the symbol table.
    pub(crate) fn malloc_lst_reserved(
        &self,
        protocol: ProtocolId,
        ids: &[ChunkId],
        sizes: &[usize],
    ) -> SatResult<Chain> {
        let layout = ChainLayout::malloc_lst(ids, sizes)?;
        self.allocate_chain_in(protocol, layout, None, true)
    }

    /// Asks the homes for every chunk of `layout` with `protocol` and adds
    /// the chain to the local store.
    fn allocate_chain(
        &self,
        protocol: ProtocolId,
        layout: ChainLayout,
        memory: Option<Box<dyn LocalMemory>>,
    ) -> SatResult<Chain> {
        self.allocate_chain_in(protocol, layout, memory, false)
    }

    fn allocate_chain_in(
        &self,
        protocol: ProtocolId,
        layout: ChainLayout,
        memory: Option<Box<dyn LocalMemory>>,
        reserved_ok: bool,
    ) -> SatResult<Chain> {
        self.allocate_labelled(protocol, layout, memory, reserved_ok, NO_LABEL)
    }

    /// MALLOC_LST of chunks that all carry `label` (see [`Label`]): a chunk
    /// that exists with another label is refused as one of another size is.
    pub fn malloc_lst_labelled(
        &self,
        protocol: ProtocolId,
        ids: &[ChunkId],
        sizes: &[usize],
        label: Label,
    ) -> SatResult<Chain> {
        let layout = ChainLayout::malloc_lst(ids, sizes)?;
        self.allocate_labelled(protocol, layout, None, false, label)
    }

    /// For a MALLOC of chunks this process already has (allocated, or
    /// found by a LOOKUP): whether each was allocated with `protocol`, as a
    /// MALLOC here maps it (`SAT_ADVICE`, adaptive chunks); a usage error
    /// naming the first that was not. Chunks unknown here pass: their homes
    /// check them.
    pub fn check_allocated_with(
        &self,
        layout: &ChainLayout,
        protocol: ProtocolId,
    ) -> SatResult<()> {
        let st = self.lock();
        for &(chunk, size) in layout.chunks() {
            let Some(c) = st.store.get(chunk) else {
                continue;
            };
            let asked = match st.labels.get(&chunk) {
                Some(&l) if l != NO_LABEL => protocol,
                _ => crate::protocol::advice::protocol_for(
                    st.advice.as_deref(),
                    st.adaptive,
                    chunk,
                    protocol,
                ),
            };
            if c.allocated != asked {
                return Err(SatError::Usage(format!(
                    "MALLOC of chunk {chunk} with {size} bytes [{}]: it already exists with {} \
                     bytes [{}]; allocate it with the same size and protocol, or LOOKUP it",
                    asked.name(),
                    c.size,
                    c.allocated.name()
                )));
            }
        }
        Ok(())
    }

    /// The label `chunk` was allocated with ([`NO_LABEL`] for a plain
    /// chunk), or None when this process has not allocated or looked it up.
    pub fn label_of(&self, chunk: ChunkId) -> Option<Label> {
        let st = self.lock();
        st.store.get(chunk)?;
        Some(st.labels.get(&chunk).copied().unwrap_or(NO_LABEL))
    }

    /// Whether any chunk of `chain` carries a label (the encryption layer's
    /// mark of a protected chunk): one such chunk makes the whole chain one
    /// the plain API must not read or write as it is.
    pub fn any_labelled(&self, chain: &Chain) -> bool {
        chain
            .ids()
            .any(|id| self.label_of(id).is_some_and(|l| l != NO_LABEL))
    }

    fn allocate_labelled(
        &self,
        protocol: ProtocolId,
        layout: ChainLayout,
        memory: Option<Box<dyn LocalMemory>>,
        reserved_ok: bool,
        label: Label,
    ) -> SatResult<Chain> {
        let _sat = stats::doing(Activity::Sdsm);
        if !protocol.known() {
            return Err(
                protocol.unknown_error(&format!("MALLOC of chunk {}", layout.chunks()[0].0))
            );
        }
        if !reserved_ok {
            not_reserved("MALLOC", layout.chunks().iter().map(|&(id, _)| id))?;
        }
        if let Some(&(_, size)) = layout.chunks().iter().find(|&&(_, s)| s > MAX_CHUNK_SIZE) {
            return Err(ChunkError::TooLarge { size }.into());
        }
        crate::chunk::check_chain_size(layout.total_size() as u64)?;
        if label != NO_LABEL && protocol.diffs() {
            return Err(SatError::Usage(format!(
                "a protected chain with the {} protocol: its writers publish diffs, and a diff \
                 of ciphertexts merges nothing; protect it with another protocol",
                protocol.name()
            )));
        }
        if memory.is_none() {
            let existing = self.lock().store.existing(&layout);
            if let Some(chain) = existing {
                self.check_labels(&chain, label)?;
                self.check_allocated_with(&layout, protocol)?;
                if stats::on() {
                    let (chunks, footprint) = self.lock().store.stats_counts();
                    for &(id, size) in chain.layout().chunks() {
                        stats::chunk_event(ChunkEvent::Alloc, id, size, chunks, footprint);
                    }
                }
                return Ok(chain);
            }
        }
        // `SAT_ADVICE`: the adviser's protocol for a MESI chunk it names
        // (a protected chunk keeps what it asked for).
        let (advice, adaptive) = {
            let st = self.lock();
            (st.advice.clone(), st.adaptive)
        };
        let protocols: Vec<ProtocolId> = layout
            .chunks()
            .iter()
            .map(|&(chunk, _)| match label {
                NO_LABEL => crate::protocol::advice::protocol_for(
                    advice.as_deref(),
                    adaptive,
                    chunk,
                    protocol,
                ),
                _ => protocol,
            })
            .collect();
        // The symbol table's chains are SAT's own, allocated the same way
        // every time: nothing to clash with.
        if layout.len() > 1 && !reserved_ok {
            self.check_no_clash(&layout, &protocols, label)?;
        }
        let requests = layout
            .chunks()
            .iter()
            .zip(&protocols)
            .map(|(&(chunk, size), &protocol)| Message::Malloc {
                chunk,
                size: size as u64,
                client: self.rank,
                request: 0, // numbered by `allocation`
                protocol,
                label,
            })
            .collect::<Vec<_>>();
        let outcomes = self.allocation(&requests, Some(MALLOC_TIMEOUT))?;
        for ((&(chunk, size), outcome), &protocol) in
            layout.chunks().iter().zip(outcomes).zip(&protocols)
        {
            // The home allocates only what was asked; an answer saying it
            // holds something else is a mismatch: taking it would give a
            // chain of the wrong size, whose grants the store then refuses.
            let outcome = match outcome {
                AllocOutcome::Allocated {
                    size: has,
                    protocol: p,
                    label: l,
                } if (has, p, l) != (size as u64, protocol, label) => AllocOutcome::Mismatch {
                    size: has,
                    protocol: p,
                    label: l,
                },
                other => other,
            };
            match outcome {
                AllocOutcome::Allocated { .. } => {}
                AllocOutcome::Mismatch {
                    label: labelled, ..
                } if labelled != label => return Err(label_mismatch(chunk, label, labelled)),
                AllocOutcome::Mismatch {
                    size: existing,
                    protocol: has,
                    ..
                } => return Err(size_mismatch(chunk, (size, protocol), (existing, has))),
                AllocOutcome::NotAllocated => {
                    return Err(SatError::Usage(format!(
                        "MALLOC of chunk {chunk}: the home answered as to a LOOKUP"
                    )))
                }
                AllocOutcome::Refused => {
                    return Err(SatError::Usage(format!(
                        "MALLOC of chunk {chunk} with {size} bytes: its home refused it (its \
                         server's log says why): a chunk holds 1 to {MAX_CHUNK_SIZE} bytes \
                         (MALLOC a chain of smaller chunks), of a protocol every process \
                         registered, and, in a run with replicated homes, of a protocol a \
                         backup can take over"
                    )))
                }
            }
        }
        let labels = vec![label; layout.len()];
        self.add_chain(ChunkEvent::Alloc, layout, &protocols, &labels, memory)
    }

    /// Before a MALLOC of several chunks allocates any of them: whether one
    /// exists at its home with another size, protocol or label (a LOOKUP
    /// that does not wait), so that such a MALLOC fails having allocated
    /// nothing, and the chain can be allocated again as meant. The homes
    /// are not locked in between: another process's MALLOC of the same
    /// chunks with other sizes, at the same moment, can still make it fail
    /// part way.
    fn check_no_clash(
        &self,
        layout: &ChainLayout,
        protocols: &[ProtocolId],
        label: Label,
    ) -> SatResult<()> {
        let probes = layout
            .chunks()
            .iter()
            .map(|&(chunk, _)| Message::Lookup {
                chunk,
                client: self.rank,
                request: 0, // numbered by `allocation`
                wait_ms: 0,
            })
            .collect::<Vec<_>>();
        // The caller called MALLOC: its errors say so.
        let as_malloc = |e: SatError| match e {
            SatError::ProcessLost(m) => SatError::ProcessLost(m.replacen("LOOKUP", "MALLOC", 1)),
            SatError::Timeout(m) => SatError::Timeout(m.replacen("LOOKUP", "MALLOC", 1)),
            other => other,
        };
        let outcomes = self
            .allocation(&probes, Some(MALLOC_TIMEOUT))
            .map_err(as_malloc)?;
        for ((&(chunk, size), outcome), &protocol) in
            layout.chunks().iter().zip(outcomes).zip(protocols)
        {
            if let AllocOutcome::Allocated {
                size: has,
                protocol: p,
                label: l,
            } = outcome
            {
                if l != label {
                    return Err(label_mismatch(chunk, label, l));
                }
                if (has, p) != (size as u64, protocol) {
                    return Err(size_mismatch(chunk, (size, protocol), (has, p)));
                }
            }
        }
        Ok(())
    }

    /// A chain found in the local store is joined only with its own label.
    fn check_labels(&self, chain: &Chain, label: Label) -> SatResult<()> {
        let st = self.lock();
        for id in chain.ids() {
            let has = st.labels.get(&id).copied().unwrap_or(NO_LABEL);
            if has != label {
                return Err(label_mismatch(id, label, has));
            }
        }
        Ok(())
    }

    /// READ, WRITE or READWRITE: opens a scope on `chunk` (allocated or
    /// looked up by this process), waiting for the home when the local copy
    /// does not allow it. Close it with [`Client::release`]. When the chunk
    /// is in several local chains, this scope uses its first instance.
    ///
    /// The chunks reserved for the symbol table (from
    /// [`SYMBOL_TABLE_BASE`] up) are written only by the symbol calls: a
    /// WRITE or READWRITE of one here is refused, as LOOKUP, MALLOC and MAP
    /// of them are (one process could otherwise corrupt every process's
    /// symbols).
    pub fn acquire(&self, chunk: ChunkId, access: Access) -> SatResult<()> {
        if access.exclusive() {
            not_reserved(access_name(access), [chunk])?;
        }
        self.acquire_at(chunk, None, access)
    }

    /// [`Client::acquire`] of a chunk of the symbol table, for the symbol
    /// calls.
    pub(crate) fn acquire_reserved(&self, chunk: ChunkId, access: Access) -> SatResult<()> {
        self.acquire_at(chunk, None, access)
    }

    /// Opens a scope on every chunk of `chain` through the chain's own
    /// contiguous data. Chunks are acquired one by one in ascending id
    /// order, so that two processes acquiring overlapping chains cannot
    /// each hold what the other waits for. On error, what was acquired is
    /// aborted: nothing is published, the homes keep their versions.
    ///
    /// A READ does not wait one round trip per chunk: while it waits for
    /// one chunk, the requests of the next ones are on their way already
    /// ([`ClientSide::read_ahead`], up to `READ_AHEAD_CHUNKS` and
    /// `READ_AHEAD_BYTES` ahead). Their grants open no scope, so the
    /// ascending order still rules out a deadlock: a chunk asked ahead is
    /// held by nothing, and a writer that comes for it meanwhile is answered
    /// at once (the READ then asks again in its turn).
    pub fn acquire_chain(&self, chain: &Chain, access: Access) -> SatResult<()> {
        let mut ids: Vec<ChunkId> = chain.ids().collect();
        ids.sort_unstable();
        let mut asked_ahead = 0;
        for (i, &id) in ids.iter().enumerate() {
            if access == Access::Read && ids.len() > 1 {
                self.read_ahead(chain, &ids, i, &mut asked_ahead);
            }
            if let Err(e) = self.acquire_at(id, Some(chain), access) {
                for &done in &ids[..i] {
                    self.abort_retrying(done);
                }
                return Err(e);
            }
        }
        // A chunk granted first may have lost its home while a later one
        // was waited for (`client/failover.rs`): the chain is not one
        // version any more.
        let orphaned = {
            let st = self.lock();
            (ids.iter()).find_map(|&id| st.store.get(id).and_then(|c| c.orphaned.clone()))
        };
        if let Some(why) = orphaned {
            for &id in &ids {
                self.abort_retrying(id);
            }
            return Err(SatError::ProcessLost(format!(
                "{} of the chain that starts at chunk {}: {why} while the chain was acquired; \
                 call again",
                access_name(access),
                chain.first()
            )));
        }
        Ok(())
    }

    /// Sends the read requests of the chunks after `ids[next]` (the one
    /// this READ of `chain` acquires now) that are not asked for yet, up to
    /// [`READ_AHEAD_CHUNKS`] and [`READ_AHEAD_BYTES`] ahead of it;
    /// `asked` is the index past the last one considered so far. Only the
    /// chunks whose versions come in messages, under a protocol that reads
    /// ahead ([`reads_ahead`]), and that nothing here holds or waits for
    /// are asked: the others are acquired as before, in their turn. A
    /// request that cannot be sent ends the asking ahead for this READ:
    /// each chunk is then asked for in its turn, which reports the error if
    /// it lasts.
    fn read_ahead(&self, chain: &Chain, ids: &[ChunkId], next: usize, asked: &mut usize) {
        *asked = (*asked).max(next + 1);
        let mut guard = self.lock();
        let st = &mut *guard;
        let size = |st: &ClientState, id: ChunkId| st.store.get(id).map_or(0, |c| c.size);
        let mut bytes: usize = ids[next + 1..*asked].iter().map(|&id| size(st, id)).sum();
        while *asked < ids.len() && *asked - next <= READ_AHEAD_CHUNKS && bytes < READ_AHEAD_BYTES {
            let chunk = ids[*asked];
            *asked += 1;
            bytes += size(st, chunk);
            if let Err(e) = st.ask_ahead(self.rank, chunk, chain) {
                tracing::debug!("chunk {chunk}: not asked ahead of the chain's READ: {e}");
                *asked = ids.len();
            }
        }
    }

    /// Aborts the scope this thread holds on `chunk`, trying again when the
    /// message cannot be sent (a scope nobody can end would block every
    /// other process); gives up, with a warning, after a few tries.
    fn abort_retrying(&self, chunk: ChunkId) {
        const TRIES: usize = 3;
        for attempt in 1..=TRIES {
            match self.abort(chunk) {
                Ok(()) => return,
                Err(SatError::Usage(_)) => return,
                Err(e) if attempt == TRIES => {
                    tracing::warn!("chunk {chunk}: its scope could not be ended: {e}")
                }
                Err(_) => {}
            }
        }
    }

    /// Aborts whatever this thread still holds open of `chain`.
    fn abort_open(&self, chain: &Chain) {
        let me = this_thread();
        for id in chain.ids() {
            let mine = self
                .lock()
                .store
                .get(id)
                .is_some_and(|c| c.side.in_scope() && c.holders.contains(&me));
            if mine {
                self.abort_retrying(id);
            }
        }
    }

    /// Ends the scopes on every chunk of `chain` without publishing: a
    /// write scope's bytes are dropped and each home keeps its version (the
    /// next scope here fetches it); a read scope ends as with a release.
    /// Reports the first error.
    pub fn abort_chain(&self, chain: &Chain) -> SatResult<()> {
        let recorded = self.check_chain_scopes(chain, "ABORT")?;
        let mut first = None;
        for id in chain.ids() {
            if let Err(e) = self.abort(id) {
                first.get_or_insert(e);
            }
        }
        if recorded {
            self.forget_ending_through(chain);
        }
        first.map_or(Ok(()), Err)
    }

    /// Releases every chunk of `chain`; reports the first error. A chain
    /// with a chunk outside any scope, or inside a scope another chain over
    /// it opened, was not acquired as a whole: the RELEASE is refused and
    /// ends nothing (else it would end a scope that another chain over the
    /// same chunk opened, or part of one, publishing part of a chain).
    pub fn release_chain(&self, chain: &Chain) -> SatResult<()> {
        let recorded = self.check_chain_scopes(chain, "RELEASE")?;
        // Where the run outlives its clients, all or nothing ([`bracket`]).
        let released = if self.bracketed(chain) {
            self.release_chain_bracketed(chain)
        } else {
            let mut first = None;
            for id in chain.ids() {
                if let Err(e) = self.release(id) {
                    first.get_or_insert(e);
                }
            }
            first.map_or(Ok(()), Err)
        };
        if recorded {
            self.forget_ending_through(chain);
        }
        released
    }

    /// Checks that this thread may end `chain`'s scopes as a whole (`what`,
    /// RELEASE or ABORT): the chain is still this process's (not freed), and
    /// each chunk of it is in a scope that was opened through this chain, by
    /// any thread of the process; records which scope each chunk's end is
    /// to remove where several threads hold one (`ending_through`; true
    /// when it recorded any). A scope opened through another chain over the
    /// same chunk, a wider one (MALLOC 100..103, then LOOKUP 101..102 and
    /// RELEASE of that), is not this chain's to end: ending its middle
    /// would publish part of the wider chain, and leave the rest in a scope
    /// its own RELEASE could no longer end.
    fn check_chain_scopes(&self, chain: &Chain, what: &str) -> SatResult<bool> {
        let me = this_thread();
        let mut guard = self.lock();
        let st = &mut *guard;
        if !st.store.holds(chain) {
            // A freed handle: ending scopes through it would end those of
            // a chain looked up again over the same chunks.
            return Err(given_back(chain));
        }
        let mut through = Vec::new();
        for id in chain.ids() {
            if let Some(c) = st.store.get(id).filter(|c| c.side.in_scope()) {
                let here = st.store.place_index(id, Some(chain));
                if c.holders.is_empty() || here.is_none() || c.holds_through(here) {
                    // Which holder's scope ends matters only where several
                    // threads hold one (a 1,024-chunk chain records nothing).
                    if c.holders.len() > 1 {
                        through.extend(here.map(|p| (me, id, p)));
                    }
                    continue;
                }
                let other = (c.holder_place(me).and_then(|p| st.store.chain_start(id, p))).map_or(
                    String::new(),
                    |(first, len)| {
                        format!(" (the chain of {len} chunk(s) that starts at chunk {first})")
                    },
                );
                return Err(SatError::Usage(format!(
                    "{what} of the chain of {} chunk(s) that starts at chunk {}: chunk {id} is in \
                     a scope that another chain over it opened{other}; {what} that chain: a \
                     chain's scope ends as a whole",
                    chain.len(),
                    chain.first()
                )));
            }
            if st.in_place.contains_key(&id) {
                // Not a scope this call can end: the thread that reads
                // in place ends it.
                return Err(SatError::Usage(format!(
                    "{what} of the chain that starts at chunk {}: chunk {id} is read in place \
                     (a READ without a copy, `read(copy=False)`), which only the thread \
                     reading ends, when its READ ends; {what} ends scopes opened by READ, \
                     WRITE or READWRITE",
                    chain.first()
                )));
            }
            // (ABORT's says it as the per-chunk ABORT does.)
            let abort = if what == "ABORT" {
                " (ABORT without a matching READ, WRITE or READWRITE)"
            } else {
                ""
            };
            return Err(SatError::Usage(format!(
                "{what} of the chain that starts at chunk {}: chunk {id} is in no scope{abort}; \
                 {} the chain that was acquired (READ, WRITE or READWRITE)",
                chain.first(),
                what.to_lowercase()
            )));
        }
        // This call's scopes to end, each through this chain's instance
        // (older entries of this thread on these chunks give way).
        if through.is_empty() {
            return Ok(false);
        }
        st.ending_through
            .retain(|&(t, id, _)| t != me || !through.iter().any(|&(_, c, _)| c == id));
        st.ending_through.extend(through);
        Ok(true)
    }

    /// Forgets what [`Client::check_chain_scopes`] recorded for `chain`
    /// that no scope's end took (a call that failed first).
    fn forget_ending_through(&self, chain: &Chain) {
        let me = this_thread();
        let ids: Vec<ChunkId> = chain.ids().collect();
        (self.lock().ending_through).retain(|&(t, id, _)| t != me || !ids.contains(&id));
    }

    fn acquire_at(&self, chunk: ChunkId, chain: Option<&Chain>, access: Access) -> SatResult<()> {
        // On one host a scope may need no message: a process the run cannot
        // go on with must hear it here, not only when it waits.
        self.fatal()?;
        let mut access = access;
        let _sat = stats::doing(Activity::Sdsm);
        let started = stats::scope_start();
        let me = this_thread();
        // Dropped after any lock of the loop's (declared before it): leaves
        // the chunk's queue on every way out.
        let mut seat = QueueSeat {
            client: self,
            chunk,
            me,
            seated: false,
        };
        let granted = loop {
            let mut guard = self.lock();
            let st = &mut *guard;
            let place = st
                .store
                .place_index(chunk, chain)
                .ok_or_else(|| match chain {
                    None => unknown(chunk),
                    Some(ch) if !st.store.holds(ch) => given_back(ch),
                    Some(ch) => SatError::Usage(format!(
                        "chunk {chunk} is not in the chain that starts at chunk {}",
                        ch.first()
                    )),
                })?;
            if st.in_place.get(&chunk).is_some_and(|&(t, _)| t == me) {
                // Its read lock is this thread's: the scope would wait for
                // the thread that is asking.
                return Err(SatError::Usage(format!(
                    "{} of chunk {chunk} while this thread reads it in place: end that scope \
                     first",
                    access_name(access)
                )));
            }
            let c = st.store.get_mut(chunk).expect("placed");
            // A chunk whose lost home took a request nobody waits for any
            // more starts afresh (`client/failover.rs`).
            if c.orphaned.is_some() && c.holders.is_empty() {
                st.store.leave_orphan(chunk, me);
            }
            let c = st.store.get_mut(chunk).expect("placed");
            if let (Some(why), true) = (&c.orphaned, c.holders.contains(&me)) {
                // Nested in a scope of this thread that its home's loss
                // ended: the home no longer knows of it.
                return Err(SatError::ProcessLost(format!(
                    "{} of chunk {chunk}: {why} while this thread held a scope on it: end \
                     that scope, then call again",
                    access_name(access)
                )));
            }
            let c = st.store.get_mut(chunk).expect("placed");
            if access == Access::Read && c.holders.contains(&me) && !c.side.writing() {
                // The API's rule (sat.h, README): a thread acquiring what it
                // holds is an error, not a deadlock, and not a second scope
                // either: a READ inside this thread's READ would otherwise
                // be counted as one, and the first RELEASE would leave the
                // chunk held. (Any access inside a write scope, and a
                // WRITE or READWRITE inside a read scope, the protocol's
                // client side refuses, below.)
                return Err(SatError::Usage(format!(
                    "{} of chunk {chunk} while this thread holds it in a scope: RELEASE it \
                     first (a thread acquires a chunk once at a time; GET and PUT acquire too)",
                    access_name(access)
                )));
            }
            // A diffing protocol's writers take a host slot's lock in turn
            // and publish whole versions there: a WRITE reads the current
            // version first, or it would publish stale copies of others'
            // bytes.
            if access == Access::Write && c.host.is_some() && c.protocol.diffs() {
                access = Access::ReadWrite;
            }
            // Another thread's scope (or request) on this chunk: wait for it
            // to end, as a lock would. This thread's own is misuse, reported.
            // A reader joins other threads' read scopes only while the
            // protocol allows it (no writer waiting for them).
            let beside = !c.holders.is_empty() && !c.holders.contains(&me);
            // A release waiting for the home's acknowledgement (a diff:
            // `protocol::hlrc`) holds the chunk as its scope did.
            let acking = |c: &crate::store::LocalChunk| c.holders.is_empty() && c.side.waiting();
            // An adaptive chunk's switch waits for the scopes open here: a
            // thread outside them waits for it, and for the request it asks
            // again (`client/switch.rs`).
            let switching = |c: &crate::store::LocalChunk| {
                (c.switch_to.is_some() && !c.holders.contains(&me)) || c.reask.is_some()
            };
            // Scopes on a chunk whose home was lost end without it: a new
            // one waits for them, then asks the new home
            // (`client/failover.rs`).
            let orphaned = |c: &crate::store::LocalChunk| c.orphaned.is_some();
            // Threads already waiting for the chunk go first when their
            // access or this one's writes: readers that read again and again
            // never starve a writer of their process (sat.h), nor writers a
            // reader.
            // (A thread inside a scope on the chunk never waits behind
            // them: they may wait for that very scope.)
            let exclusive = access.exclusive();
            let behind = |c: &crate::store::LocalChunk| {
                !c.queued.is_empty()
                    && !c.holders.contains(&me)
                    && (c.queued.iter().take_while(|&&(t, _)| t != me))
                        .any(|&(_, w)| w || exclusive)
            };
            if (beside && must_wait(c.side.as_ref(), access))
                || acking(c)
                || switching(c)
                || (beside && orphaned(c))
                || behind(c)
                || st.mail.undurable(chunk)
            {
                if !seat.seated {
                    c.queued.push((me, exclusive));
                    seat.seated = true;
                }
                drop(guard);
                self.wait(None, |st| {
                    if st.mail.undurable(chunk) {
                        return None;
                    }
                    let c = st.store.get(chunk)?;
                    if behind(c) {
                        return None;
                    }
                    let free = if switching(c) || (orphaned(c) && !c.holders.is_empty()) {
                        false
                    } else if c.holders.is_empty() {
                        // A request its lost home took (one asked ahead,
                        // `read_ahead`) is never answered: the chunk
                        // starts afresh instead.
                        !acking(c) || orphaned(c)
                    } else {
                        !must_wait(c.side.as_ref(), access)
                    };
                    free.then_some(())
                })?;
                continue;
            }
            if seat.seated {
                c.queued.retain(|&(t, _)| t != me);
                seat.seated = false;
            }
            st.store.prepare(chunk, place);
            // Take in what has arrived first: an invalidation waiting in the
            // queue turns a would-be hit into a miss that fetches the newer
            // version, and a process spinning on read hits still answers
            // the home (its background progress finds the lock taken). A
            // chunk in a host slot gets no invalidation: its scopes leave
            // the endpoint to the background progress, and cost no poll.
            if st.store.get(chunk).is_some_and(|c| c.host.is_none()) {
                st.progress(self.rank)?;
                // That poll may have taken in the loss of the chunk's home
                // while another thread waits on it: asked now, from the
                // chunk's old state, the new home's grant would come after
                // that thread's failure started the chunk afresh, unasked
                // for, and its home would count a scope nobody holds. The
                // checks above wait for that thread first.
                if st.store.get(chunk).is_some_and(|c| c.orphaned.is_some()) {
                    continue;
                }
            }
            // A scope that reads must see the version through this place: a
            // place that joined after the version arrived is filled from
            // one that holds it (or the version is forgotten and fetched).
            // A WRITE keeps the place's bytes: they are what it publishes
            // (MAP'd memory filled before a PUT). Under a diffing protocol
            // it reads them too: its twin must be the current version.
            let reads =
                access != Access::Write || st.store.get(chunk).is_some_and(|c| c.protocol.diffs());
            if reads {
                // A host slot that holds a newer version than this process
                // will replace the local bytes: checking them first would
                // hash a whole version for nothing.
                let c = st.store.get(chunk).expect("placed");
                let replaced = c
                    .host
                    .as_ref()
                    .is_some_and(|s| Some(s.slot().peek_version()) > c.side.version());
                let exposed = if replaced {
                    Exposed::Trusted
                } else {
                    Exposed::Check
                };
                st.store.make_valid_with(chunk, place, exposed);
            }
            let c = st.store.get_mut(chunk).expect("placed");
            // Put back if the request cannot be sent (a host slot needs no message).
            let before = c.host.is_none().then(|| c.side.snapshot());
            let ask = beside && access == Access::Read && c.side.join() == Join::Ask;
            // Past a burst of writes that sent nothing but their
            // write-backs, the next asks the home: its grant follows every
            // message before it (`protocol::mesi::EXCLUSIVE_BURST`).
            if access.exclusive()
                && st.store.silent_writes >= crate::protocol::mesi::EXCLUSIVE_BURST
            {
                st.store
                    .get_mut(chunk)
                    .expect("placed")
                    .side
                    .ask_next_write();
            }
            let c = st.store.get_mut(chunk).expect("placed");
            let step = if ask {
                c.side.acquire_beside()
            } else {
                c.side.acquire(access)
            }
            .map_err(|e| SatError::Usage(format!("chunk {chunk}: {e}")))?;
            let protocol = c.protocol;
            if protocol.learns() && access == Access::Read {
                st.learned.read(chunk);
            }
            // The first READ since the last barrier this process passed
            // (an adaptive chunk's home weighs it: `protocol/adaptive.rs`).
            let passes = st.learned.passes();
            let after_barrier = access == Access::Read && passes > 0 && c.read_pass != passes;
            if access == Access::Read {
                c.read_pass = passes;
            }
            // A copy asked for ahead of this READ came from the home: a miss.
            let asked_ahead = std::mem::take(&mut c.asked_ahead);
            let req = match step {
                Acquire::Hit => {
                    c.add_holder(me, place);
                    if stats::on() && c.scope_stat.is_none() {
                        c.scope_stat = Some((started, access, !asked_ahead));
                    }
                    let silent = access.exclusive() && c.host.is_none();
                    st.store.set_scope_place(chunk, place);
                    if silent {
                        st.store.silent_writes += 1;
                    }
                    take_twin(st, chunk);
                    return Ok(());
                }
                Acquire::Request(req) => req,
            };
            tracing::debug!(
                "[{}] {} chunk {chunk}: miss, local state {:?}, asking the home",
                protocol.name(),
                access_name(access),
                c.side.state()
            );
            // The grant to wait for: the host path may give it at once.
            let granted = c.grants + 1;
            if c.host.is_some() {
                st.host
                    .request(&mut st.store, &mut st.mail.events, self.rank, chunk, req);
            } else {
                c.asking = Some(access);
                let msg = Message::Coherence {
                    chunk,
                    client: self.rank,
                    op: req.into(),
                    epoch: c.epoch,
                    after_barrier,
                };
                let n = wire::encode(&msg, &mut st.header).expect("fits");
                if let Err(e) = st.transport.send(st.server, &st.header[..n], Payload::None) {
                    // The home never heard of this acquire: nothing changed.
                    if let Some(before) = before {
                        st.store.get_mut(chunk).expect("placed").side = before;
                    }
                    return Err(e.into());
                }
            }
            let c = st.store.get_mut(chunk).expect("placed");
            c.add_holder(me, place);
            if stats::on() && c.scope_stat.is_none() {
                c.scope_stat = Some((started, access, false));
            }
            st.store.set_scope_place(chunk, place);
            // A grant the host slot gave at once needs no wait.
            let c = st.store.get(chunk).expect("placed");
            if c.host.is_some() && c.grants >= granted {
                // This thread has held the lock since it checked the local
                // bytes above, or since the grant filled them.
                if reads {
                    st.store.make_valid_with(chunk, place, Exposed::Trusted);
                }
                drop(guard);
                self.host_step_taken();
                return Ok(());
            }
            break granted;
        };
        // A request for a host slot's lock sleeps on the slot, which its
        // holder announces when it lets go.
        let slot = self.lock().store.get(chunk).and_then(|c| c.host.clone());
        if slot.is_some() && self.spin_for_host_lock(chunk, granted, access)? {
            return Ok(());
        }
        let granted = self.wait_inner(None, WaitFor::Reply, slot.as_ref(), |st| {
            scope_granted(st, chunk, granted, access)
        })?;
        if let Some(Err(e)) = granted {
            // Its home was lost with the request (`client/failover.rs`).
            self.lock().store.leave_orphan(chunk, me);
            return Err(e);
        }
        Ok(())
    }

    /// Asks again for `chunk`'s host slot lock for a few microseconds,
    /// before the wait of [`Client::wait_inner`]: the holder, on another
    /// core, lets go within a scope's length (a fraction of a microsecond
    /// for a hand-off), and a round of that wait costs more (a poll of the
    /// endpoint, a yield of the core). Returns whether the grant came.
    fn spin_for_host_lock(&self, chunk: ChunkId, granted: u64, access: Access) -> SatResult<bool> {
        if self.clock.is_simulated() {
            return Ok(false);
        }
        let until = Instant::now() + HOST_LOCK_SPIN;
        loop {
            std::hint::spin_loop();
            let mut guard = self.lock();
            let st = &mut *guard;
            st.host.retry(&mut st.store, &mut st.mail.events, self.rank);
            if st.store.get(chunk).is_none() {
                return Err(unknown(chunk));
            }
            if let Some(granted) = scope_granted(st, chunk, granted, access) {
                return granted.map(|()| true);
            }
            drop(guard);
            if Instant::now() >= until {
                return Ok(false);
            }
        }
    }

    /// RELEASE: closes the scope on `chunk`; after a write, the new version
    /// goes home (one message); after a read, local changes are dropped.
    pub fn release(&self, chunk: ChunkId) -> SatResult<()> {
        let _sat = stats::doing(Activity::Sdsm);
        self.end_scope(chunk, Ending::Release, None)
    }

    /// Ends the scope on `chunk` without publishing: after a WRITE or
    /// READWRITE the home keeps its version and is told the scope ended
    /// unchanged (the local bytes are dropped; the next scope fetches the
    /// home's). After a READ, the same as [`Client::release`].
    pub fn abort(&self, chunk: ChunkId) -> SatResult<()> {
        let _sat = stats::doing(Activity::Sdsm);
        self.end_scope(chunk, Ending::Abort, None)
    }

    /// Ends a scope of `chunk` once no closure has its bytes: another
    /// thread's closure is waited for; this thread's own is misuse (the
    /// closure is still using the bytes the scope would publish or drop).
    /// With `source`, a RELEASE publishes those bytes instead of the
    /// chunk's local ones ([`Client::put`]).
    fn end_scope(&self, chunk: ChunkId, ending: Ending, source: Option<&[u8]>) -> SatResult<()> {
        // A process the run was told to go on without publishes nothing.
        self.fatal()?;
        let me = loans::me();
        let acked = {
            let mut st = self.lock();
            match st.loans.in_the_way_of_ending(&self.quick_loan, chunk, me) {
                loans::Conflict::None => {
                    let to = (self.rank, st.server);
                    st.end_scope_from(to, chunk, ending, source)?
                }
                loans::Conflict::Mine => {
                    return Err(SatError::Usage(format!(
                        "{} of chunk {chunk} inside a closure that has its bytes (with_data, \
                         with_chain or Scope::data): end the scope after the closure returns",
                        match ending {
                            Ending::Release => "RELEASE",
                            Ending::Abort => "abort",
                        }
                    )))
                }
                loans::Conflict::Others => {
                    drop(st);
                    let ended = self.wait(None, |st| {
                        (st.loans.in_the_way_of_ending(&self.quick_loan, chunk, me)
                            == loans::Conflict::None)
                            .then(|| {
                                let to = (self.rank, st.server);
                                st.end_scope_from(to, chunk, ending, source)
                            })
                    })?;
                    ended.expect("a wait without a deadline ends with its value")?
                }
            }
        };
        // A release the home acknowledges returns once it has (a diff:
        // `protocol::hlrc`).
        if let Some(due) = acked {
            self.wait_inner(None, WaitFor::Reply, None, |st| due.met(st, chunk))?
                .expect("a wait without a deadline ends with its value")?;
        }
        Ok(())
    }

    /// A scope opened on a host slot takes it without a message: under the
    /// simulator, another process may run right after, as it could on a
    /// real host. (A release needs no such point: like a release message
    /// on its way, its effect is seen from the next step on.)
    fn host_step_taken(&self) {
        if let Clock::Simulated(t) = &self.clock {
            t.pass();
        }
    }

    /// PUT: WRITE `data` into `chunk` and RELEASE it (Figure 6). Where the
    /// chunk's home keeps its version in a host slot, `data` goes straight
    /// into the slot (one copy) and the local bytes are left as they were,
    /// no longer a version: the next scope that reads copies the version
    /// in. Elsewhere `data` is copied into the local bytes, which are
    /// published as usual.
    pub fn put(&self, chunk: ChunkId, data: &[u8]) -> SatResult<()> {
        self.check_size(chunk, data.len(), "PUT")?;
        self.acquire(chunk, Access::Write)?;
        let _sat = stats::doing(Activity::Sdsm);
        self.end_scope(chunk, Ending::Release, Some(data))
    }

    /// PUT on a chain from `data` (the chain's size): [`Client::put`] chunk
    /// by chunk, under one write scope over the chain. A chain whose
    /// releases are bracketed (all or nothing, in a service) gets `data`
    /// copied into its memory and released as one.
    pub fn put_chain_from(&self, chain: &Chain, data: &[u8]) -> SatResult<()> {
        if data.len() != chain.size() {
            return Err(SatError::Usage(format!(
                "PUT of the chain that starts at chunk {} with {} bytes: the chain has {}; give \
                 exactly the chain's size",
                chain.first(),
                data.len(),
                chain.size()
            )));
        }
        self.acquire_chain(chain, Access::Write)?;
        if self.bracketed(chain) {
            let copied = self.with_chain_mut(chain, |d| d.copy_from_slice(data));
            let released = self.release_chain(chain);
            return copied.and(released);
        }
        let _sat = stats::doing(Activity::Sdsm);
        let mut first = None;
        let mut at = 0;
        for (id, size) in chain.layout().chunks().iter().copied() {
            let part = &data[at..at + size];
            at += size;
            if let Err(e) = self.end_scope(id, Ending::Release, Some(part)) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// GET: READ, copy `chunk` into `data`, RELEASE (Figure 6).
    pub fn get(&self, chunk: ChunkId, data: &mut [u8]) -> SatResult<()> {
        self.check_size(chunk, data.len(), "GET")?;
        self.acquire(chunk, Access::Read)?;
        self.with_data(chunk, |d| data.copy_from_slice(d))?;
        self.release(chunk)
    }

    /// PUT on a chain: an empty write scope over the whole chain, so a MAP'd
    /// chain's memory, written in place, becomes the new version.
    pub fn put_chain(&self, chain: &Chain) -> SatResult<()> {
        self.acquire_chain(chain, Access::Write)?;
        self.release_chain(chain)
    }

    /// GET on a chain: an empty read scope over the whole chain, so a MAP'd
    /// chain's memory holds the chain's current data afterwards.
    pub fn get_chain(&self, chain: &Chain) -> SatResult<()> {
        self.acquire_chain(chain, Access::Read)?;
        self.release_chain(chain)
    }

    /// READ on a chain, as a scope guard that releases when dropped.
    pub fn read(&self, chain: &Chain) -> SatResult<Scope<'_>> {
        self.scope(chain, Access::Read)
    }

    /// WRITE on a chain (the data may be stale), as a scope guard.
    pub fn write(&self, chain: &Chain) -> SatResult<Scope<'_>> {
        self.scope(chain, Access::Write)
    }

    /// READWRITE on a chain (the data is up to date), as a scope guard.
    pub fn readwrite(&self, chain: &Chain) -> SatResult<Scope<'_>> {
        self.scope(chain, Access::ReadWrite)
    }

    fn scope(&self, chain: &Chain, access: Access) -> SatResult<Scope<'_>> {
        self.acquire_chain(chain, access)?;
        Ok(Scope {
            client: self,
            chain: chain.clone(),
            open: true,
        })
    }

    fn check_size(&self, chunk: ChunkId, len: usize, call: &str) -> SatResult<()> {
        let st = self.lock();
        let size = st.store.get(chunk).ok_or_else(|| unknown(chunk))?.size;
        if size != len {
            return Err(SatError::Usage(format!(
                "{call} of chunk {chunk} with a buffer of {len} bytes: the chunk has {size}"
            )));
        }
        Ok(())
    }

    /// The messages this process has sent so far (its own requests and
    /// acknowledgements; the servers' answers are not counted here).
    pub fn messages_sent(&self) -> u64 {
        self.lock().transport.messages_sent()
    }

    /// The messages this process has sent and received so far, taken
    /// together (one lock), so that the difference of two readings is
    /// exactly what travelled between them.
    pub fn traffic(&self) -> Traffic {
        let st = self.lock();
        Traffic {
            sent: st.transport.messages_sent(),
            received: st.received,
            user_sent: st.user_sent,
            user_received: st.mail.user_received,
        }
    }

    /// How many chunks were pushed to this process as barriers ended, before
    /// its program asked for them (learned communication sets:
    /// [`crate::protocol::ProtocolId::learns`]).
    pub fn learned_pushes(&self) -> u64 {
        self.lock().store.pushed
    }

    /// How many read requests this process sent ahead of its chains' READs
    /// ([`Client::acquire_chain`]).
    pub fn reads_asked_ahead(&self) -> u64 {
        self.lock().store.asked_ahead
    }

    /// How many PUTs of this process went straight from the caller's bytes
    /// into a host slot ([`Client::put`]).
    pub fn puts_into_slots(&self) -> u64 {
        self.lock().store.put_direct
    }

    /// How many READs in place this process made ([`Client::read_in_place`]).
    pub fn reads_in_place(&self) -> u64 {
        self.lock().store.read_in_place
    }

    /// How many protocol switches of adaptive chunks this process applied
    /// ([`crate::protocol::ProtocolId::Adaptive`]).
    pub fn protocol_switches(&self) -> u64 {
        self.lock().store.switches
    }

    /// The protocol `chunk` runs here now: the one it was allocated with,
    /// or, for an adaptive chunk, the one its home moved it to as far as
    /// this process has been told (it learns of a switch at its next
    /// request). None for a chunk unknown here.
    pub fn running_protocol(&self, chunk: ChunkId) -> Option<ProtocolId> {
        self.lock().store.get(chunk).map(|c| c.protocol)
    }

    /// How much chunk data this process holds in memory (the regions SAT
    /// allocated; MAP'd memory is the caller's and not counted).
    pub fn footprint(&self) -> Footprint {
        let (chunks, bytes, evictions) = self.lock().store.footprint();
        Footprint {
            chunks,
            bytes,
            evictions,
        }
    }

    /// Runs `f` on the data of `chunk`, inside an open scope. `f` runs
    /// without the client's lock: it may call the whole API, and other
    /// threads and the background progress go on meanwhile. The scope
    /// cannot end while `f` runs: a RELEASE from another thread waits for
    /// it, one from inside `f` is refused (see `loans`).
    pub fn with_data<R>(&self, chunk: ChunkId, f: impl FnOnce(&[u8]) -> R) -> SatResult<R> {
        let ids = [chunk];
        let lent = self.lend(&ids, false, |st| {
            let c = st.store.get(chunk).ok_or_else(|| unknown(chunk))?;
            if !c.side.in_scope() {
                return Err(SatError::Usage(format!(
                    "chunk {chunk} is read outside a scope: call READ, WRITE or READWRITE first"
                )));
            }
            let bytes = st
                .store
                .scope_bytes(chunk)
                .expect("a chunk in scope is resident");
            Ok(NonNull::from(bytes))
        })?;
        // SAFETY: see `Lent`; the bytes are lent for reading.
        Ok(f(unsafe { lent.bytes.as_ref() }))
    }

    /// Runs `f` on the data of `chunk`, inside an open write scope; as
    /// [`Client::with_data`], `f` runs without the client's lock.
    pub fn with_data_mut<R>(&self, chunk: ChunkId, f: impl FnOnce(&mut [u8]) -> R) -> SatResult<R> {
        let ids = [chunk];
        let mut lent = self.lend(&ids, true, |st| {
            let c = st.store.get(chunk).ok_or_else(|| unknown(chunk))?;
            if !c.side.writing() {
                return Err(SatError::Usage(format!(
                    "chunk {chunk} is written outside a write scope: call WRITE or READWRITE first"
                )));
            }
            let place = st.store.scope_place(chunk).expect("known");
            let bytes = st
                .store
                .bytes_mut(chunk, place)
                .expect("a chunk in scope is resident");
            Ok(NonNull::from(bytes))
        })?;
        // SAFETY: see `Lent`; the bytes are lent for writing, to this call.
        Ok(f(unsafe { lent.bytes.as_mut() }))
    }

    /// Runs `f` on the contiguous data of `chain`, every chunk of which must
    /// be inside a scope (see [`Client::acquire_chain`]); as
    /// [`Client::with_data`], `f` runs without the client's lock.
    pub fn with_chain<R>(&self, chain: &Chain, f: impl FnOnce(&[u8]) -> R) -> SatResult<R> {
        let ids: Vec<ChunkId> = chain.ids().collect();
        let lent = self.lend(&ids, false, |st| {
            for id in chain.ids() {
                if !st.store.get(id).is_some_and(|c| c.side.in_scope()) {
                    return Err(SatError::Usage(format!(
                        "chunk {id} of the chain is read outside a scope: acquire the chain first"
                    )));
                }
            }
            let bytes = st
                .store
                .chain_bytes(chain)
                .expect("a chain in scope is resident");
            Ok(NonNull::from(bytes))
        })?;
        // SAFETY: see `Lent`; the bytes are lent for reading.
        Ok(f(unsafe { lent.bytes.as_ref() }))
    }

    /// Runs `f` on the contiguous data of `chain`, every chunk of which must
    /// be inside a write scope opened through this chain; as
    /// [`Client::with_data`], `f` runs without the client's lock.
    pub fn with_chain_mut<R>(&self, chain: &Chain, f: impl FnOnce(&mut [u8]) -> R) -> SatResult<R> {
        let ids: Vec<ChunkId> = chain.ids().collect();
        let mut lent = self.lend(&ids, true, |st| {
            for id in chain.ids() {
                let through_chain =
                    st.store.place_index(id, Some(chain)) == st.store.scope_place(id);
                if !st.store.get(id).is_some_and(|c| c.side.writing()) || !through_chain {
                    return Err(SatError::Usage(format!(
                        "chunk {id} of the chain is written outside a write scope on this chain: \
                         acquire the chain with WRITE or READWRITE first"
                    )));
                }
            }
            let bytes = st
                .store
                .chain_bytes_mut(chain)
                .expect("a chain in scope is resident");
            Ok(NonNull::from(bytes))
        })?;
        // SAFETY: see `Lent`; the bytes are lent for writing, to this call.
        Ok(f(unsafe { lent.bytes.as_mut() }))
    }

    /// Lends the bytes `locate` finds (checking the scope, under the lock)
    /// to the caller, for writing when `exclusive`: once no loan of another
    /// thread is in the way (waiting for it), and refused when one of this
    /// thread's is (a nested closure). The loan ends when the [`Lent`] is
    /// dropped, also by a panic.
    fn lend<'c>(
        &'c self,
        chunks: &'c [ChunkId],
        exclusive: bool,
        mut locate: impl FnMut(&mut ClientState) -> SatResult<NonNull<[u8]>>,
    ) -> SatResult<Lent<'c>> {
        let me = loans::me();
        loop {
            {
                let mut st = self.lock();
                let bytes = locate(&mut st)?;
                match st.loans.conflict(&self.quick_loan, chunks, exclusive, me) {
                    loans::Conflict::None => {
                        let taken = st.loans.lend(&self.quick_loan, chunks, exclusive, me);
                        return Ok(Lent {
                            client: self,
                            chunks,
                            exclusive,
                            taken,
                            bytes,
                        });
                    }
                    loans::Conflict::Mine => {
                        return Err(SatError::Usage(format!(
                            "chunk {} is already {} by a closure of this thread (with_data, \
                             with_chain or Scope::data): a closure that writes a chunk's bytes \
                             may not be nested with another access to them",
                            chunks[0],
                            if exclusive {
                                "lent"
                            } else {
                                "lent for writing"
                            }
                        )))
                    }
                    loans::Conflict::Others => {}
                }
            }
            self.wait(None, |st| {
                (st.loans.conflict(&self.quick_loan, chunks, exclusive, me)
                    == loans::Conflict::None)
                    .then_some(())
            })?;
        }
    }

    /// Sends allocation requests and waits for every answer, in request
    /// order. Up to [`ALLOC_WINDOW`] requests are in flight at once, so a
    /// long chain costs a few round trips, not one per chunk, without
    /// flooding the servers' receive queues.
    ///
    /// Each request gets this client's next request number (the `request`
    /// field given is ignored) and takes only the answer carrying it: an
    /// answer to another thread's request of the same chunk, or to a request
    /// given up, is never taken for it. `bound` limits the wait for each
    /// answer.
    fn allocation(
        &self,
        requests: &[Message],
        bound: Option<Duration>,
    ) -> SatResult<Vec<AllocOutcome>> {
        self.allocation_until(requests, bound, false)
    }

    /// [`Client::allocation`]; with `missing_ends`, the outcomes end at the
    /// first `NotAllocated` (a LOOKUP fails there): the requests after it
    /// are not waited for, nor sent when they are beyond the window. Else a
    /// LOOKUP of a long chain whose end nobody allocated would wait out
    /// its timeout once per window of requests.
    fn allocation_until(
        &self,
        requests: &[Message],
        bound: Option<Duration>,
        missing_ends: bool,
    ) -> SatResult<Vec<AllocOutcome>> {
        let _sat = stats::doing(Activity::Sdsm);
        let mut numbers = Vec::with_capacity(requests.len());
        let outcomes = self.allocation_numbered(requests, bound, missing_ends, &mut numbers);
        // Whatever happened, answers still due to this call are nobody's
        // now: they are dropped when they come.
        let mut st = self.lock();
        for number in numbers {
            st.mail.alloc.remove(&number);
        }
        outcomes
    }

    /// [`Client::allocation`]'s work; `numbers` gets the number of every
    /// request sent.
    fn allocation_numbered(
        &self,
        requests: &[Message],
        bound: Option<Duration>,
        missing_ends: bool,
        numbers: &mut Vec<u64>,
    ) -> SatResult<Vec<AllocOutcome>> {
        let mut outcomes = Vec::with_capacity(requests.len());
        let mut deadline = bound.and_then(|b| self.deadline_in(b));
        while outcomes.len() < requests.len() {
            let window = (outcomes.len() + ALLOC_WINDOW).min(requests.len());
            if numbers.len() < window {
                let mut st = self.lock();
                let st = &mut *st;
                for msg in &requests[numbers.len()..window] {
                    let number = st.mail.next_request;
                    st.mail.next_request += 1;
                    let mut msg = msg.clone();
                    match &mut msg {
                        Message::Malloc { chunk, request, .. }
                        | Message::Lookup { chunk, request, .. } => {
                            *request = number;
                            // Registered before it leaves: only polling,
                            // under this lock, takes answers in.
                            st.mail.alloc.insert(number, (*chunk, None));
                        }
                        _ => unreachable!("only allocation requests"),
                    }
                    numbers.push(number);
                    let n = wire::encode(&msg, &mut st.header)
                        .map_err(|e| SatError::Usage(e.to_string()))?;
                    st.transport
                        .send(st.server, &st.header[..n], Payload::None)?;
                }
            }
            let number = numbers[outcomes.len()];
            let got = self.wait_inner(deadline, WaitFor::Answer, None, |st| {
                if let Some(why) = st.mail.alloc_lost.remove(&number) {
                    return Some(Err(why));
                }
                let answered = st.mail.alloc.get(&number).is_some_and(|(_, a)| a.is_some());
                answered
                    .then(|| st.mail.alloc.remove(&number))
                    .flatten()
                    .and_then(|(_, a)| a)
                    .map(Ok)
            })?;
            if let Some(Err(why)) = &got {
                let (what, chunk) = match requests[outcomes.len()] {
                    Message::Malloc { chunk, .. } => ("MALLOC", chunk),
                    Message::Lookup { chunk, .. } => ("LOOKUP", chunk),
                    _ => ("allocation", 0),
                };
                return Err(SatError::ProcessLost(format!(
                    "{what} of chunk {chunk}: {why} before it answered; call again"
                )));
            }
            let Some(Ok(outcome)) = got else {
                let request = &requests[outcomes.len()];
                return Err(self.unanswered(request, bound.unwrap_or_default()));
            };
            let missing = matches!(outcome, AllocOutcome::NotAllocated);
            outcomes.push(outcome);
            if missing && missing_ends {
                break;
            }
            deadline = bound.and_then(|b| self.deadline_in(b));
        }
        Ok(outcomes)
    }

    /// The error of an allocation request whose home did not answer within
    /// `waited`.
    fn unanswered(&self, request: &Message, waited: Duration) -> SatError {
        let (what, chunk) = match *request {
            Message::Malloc { chunk, .. } => ("MALLOC", chunk),
            Message::Lookup { chunk, .. } => ("LOOKUP", chunk),
            _ => unreachable!("only allocation requests"),
        };
        let servers = self.topology.servers();
        let home = servers[(chunk % servers.len() as u64) as usize];
        SatError::Timeout(format!(
            "{what} of chunk {chunk}: its home, server {home}, did not answer within {waited:?}; \
             check that server {home} is still running and reachable (satrun's output, or the \
             service's, says why a server ended)"
        ))
    }

    /// Waits until no thread but the calling one holds a scope of this
    /// client or waits for one: the C face's end of a role (sat.h: a scope
    /// another thread holds, or left open when it exited, is waited for
    /// until some thread ends it; RELEASE and ABORT still go through). Says
    /// every 10 s which chunks it waits for. The caller's own scopes are
    /// left to [`Client::finish`].
    pub fn wait_for_other_threads_scopes(&self) -> SatResult<()> {
        let me = this_thread();
        let mut note_at = Instant::now() + Duration::from_secs(10);
        self.wait_inner(None, WaitFor::Peers, None, |st| {
            let held = st.store.held_beside(me, 8);
            if held.is_empty() {
                return Some(());
            }
            if Instant::now() >= note_at {
                note_at = Instant::now() + Duration::from_secs(10);
                let named: Vec<String> = held.iter().map(u64::to_string).collect();
                tracing::warn!(
                    "the end of the role waits for scopes other threads hold or left open \
                     (chunks {}): end them with RELEASE or ABORT from a thread of this process",
                    named.join(", ")
                );
            }
            None
        })?;
        Ok(())
    }

    /// Tells the server this client's role has returned and waits for its
    /// acknowledgement, so no message of ours is in flight when we close.
    /// A scope left open is released (with a warning).
    pub(crate) fn finish(&self, timeout: Duration) -> SatResult<()> {
        self.finish_with(timeout, Ending::Release, "the role returned")
    }

    /// As [`Client::finish`] after a role that failed: a scope left open is
    /// aborted, so a half-done write publishes nothing.
    pub(crate) fn finish_failed(&self, timeout: Duration) -> SatResult<()> {
        self.finish_with(timeout, Ending::Abort, "the role failed")
    }

    /// As [`Client::finish`] for a session that detaches from a service.
    pub(crate) fn finish_session(&self, timeout: Duration) -> SatResult<()> {
        self.finish_with(timeout, Ending::Release, "the session detached")
    }

    /// Ends the scopes left open (`when`: what ended the client, for the
    /// warning), then tells the server.
    fn finish_with(&self, timeout: Duration, open_scopes: Ending, when: &str) -> SatResult<()> {
        // A closure of another thread still using a scope's bytes (a thread
        // the role left running): its scope ends after it.
        self.wait(None, |st| st.loans.is_empty(&self.quick_loan).then_some(()))?;
        {
            let mut st = self.lock();
            let st = &mut *st;
            // A scope left open would block every other process forever.
            let mut open = Vec::new();
            for chunk in st.store.chunk_ids() {
                let in_scope =
                    |st: &ClientState| st.store.get(chunk).is_some_and(|c| c.side.in_scope());
                if in_scope(st) {
                    open.push(chunk);
                }
                while in_scope(st) {
                    let to = (self.rank, st.server);
                    st.end_scope(to, chunk, open_scopes)?;
                }
            }
            // One line for them all: a chain of a thousand chunks left
            // acquired is one mistake.
            if !open.is_empty() {
                const NAMED: usize = 8;
                let mut named: Vec<String> = open.iter().take(NAMED).map(u64::to_string).collect();
                if open.len() > NAMED {
                    named.push(format!("and {} more", open.len() - NAMED));
                }
                tracing::warn!(
                    "{} still acquired when {when} (chunk{} {}): {}",
                    if open.len() == 1 {
                        "a scope was".to_string()
                    } else {
                        format!("{} scopes were", open.len())
                    },
                    if open.len() == 1 { "" } else { "s" },
                    named.join(", "),
                    match open_scopes {
                        Ending::Release => "released",
                        Ending::Abort => "aborted (nothing published)",
                    }
                );
            }
        }
        // The home hears of every release before it hears that we are done.
        self.wait(None, |st| st.host.told_everything().then_some(()))?;
        {
            let mut st = self.lock();
            let st = &mut *st;
            let (published, received) = st.mail.events.counters();
            let done = Message::ClientDone {
                published,
                received,
            };
            let n = wire::encode(&done, &mut st.header).expect("fits");
            st.transport
                .send(st.server, &st.header[..n], Payload::None)?;
            st.mail.done_sent = Some((published, received));
        }
        let acked = self.wait(self.deadline_in(timeout), |st| {
            st.mail.done_acked.then_some(())
        })?;
        if acked.is_none() {
            return Err(SatError::Timeout(format!(
                "server {} did not acknowledge the end of this client within {timeout:?}",
                self.server()
            )));
        }
        self.wait(self.deadline_in(timeout), |st| {
            st.transport.sends_drained().ok().filter(|d| *d).map(|_| ())
        })?;
        self.finished.store(true, Ordering::Release);
        stats::finish();
        tracing::debug!("client {} terminated", self.rank);
        Ok(())
    }

    /// Drives progress until `ready` yields a value or the deadline passes.
    /// The lock is released between polls so other threads can make calls.
    /// Handlers do not run meanwhile: this waits on the S-DSM itself (a
    /// grant, an allocation, another thread's scope), and a handler touching
    /// the same chunk would find it half acquired.
    fn wait<T>(
        &self,
        deadline: Option<Instant>,
        ready: impl FnMut(&mut ClientState) -> Option<T>,
    ) -> SatResult<Option<T>> {
        self.wait_inner(deadline, WaitFor::Reply, None, ready)
    }

    /// As [`Client::wait`], for calls that wait on other processes
    /// (rendezvous, barrier, recv): on the role's thread, the handlers of
    /// events arriving meanwhile run (section 2.5).
    fn wait_running_handlers<T>(
        &self,
        deadline: Option<Instant>,
        ready: impl FnMut(&mut ClientState) -> Option<T>,
    ) -> SatResult<Option<T>> {
        self.wait_inner(deadline, WaitFor::PeersRunningHandlers, None, ready)
    }

    /// Gives this client a check that its waits for other processes (a
    /// barrier, a rendezvous, a symbol's writer, a LOOKUP's chunk, a
    /// notification) ask every 50 ms: `Some(error)`
    /// ends the call with that error, as a failing handler would (a
    /// barrier's arrival still counts; a rendezvous's entry stays; a late
    /// answer is dropped). Waits for an answer due within a round trip (a
    /// grant) are not interrupted. The Python module's check raises
    /// KeyboardInterrupt on Ctrl-C. Set once; a second check is refused.
    pub fn set_interrupt_check(&self, check: InterruptCheck) -> SatResult<()> {
        self.interrupt
            .set(check)
            .map_err(|_| SatError::Usage("this client has an interrupt check already".into()))
    }

    /// The wait under [`Client::wait`] and [`Client::wait_running_handlers`].
    /// With `sleep_on`, what ends the wait is an announcement in that host
    /// slot (a lock let go, a barrier's round complete), not a message: the
    /// idle rounds sleep on the slot, a millisecond at most each, so that
    /// messages are still taken in.
    fn wait_inner<T>(
        &self,
        deadline: Option<Instant>,
        waiting_for: WaitFor,
        sleep_on: Option<&crate::segment::SlotRef>,
        mut ready: impl FnMut(&mut ClientState) -> Option<T>,
    ) -> SatResult<Option<T>> {
        let _sat = stats::doing(Activity::Sdsm);
        let handlers = waiting_for == WaitFor::PeersRunningHandlers;
        // A wait on the S-DSM itself (a grant, an allocation answer) has a
        // reply due within a round trip or two: spinning that long before
        // sleeping saves the sleep's wake-up latency on every miss.
        let policy = match waiting_for {
            WaitFor::Reply | WaitFor::Answer => IdlePolicy {
                spin: self.policy.spin.max(REPLY_SPIN),
                ..self.policy
            },
            WaitFor::Peers | WaitFor::PeersRunningHandlers => self.policy,
        };
        if self.finished.load(Ordering::Acquire) {
            return Err(SatError::Usage(
                "this client has ended (it detached from its service, or its role returned): \
                 attach again to use the S-DSM"
                    .into(),
            ));
        }
        let mut idle = Idle::with_clock(policy, self.clock.clone());
        // Only a wait that gives up cleanly may be interrupted: one whose
        // caller copes with an error in the middle of it as with a failing
        // handler's, or with a timeout's (a late answer is dropped).
        let interrupt = match waiting_for {
            WaitFor::PeersRunningHandlers | WaitFor::Answer => self.interrupt.get(),
            WaitFor::Reply | WaitFor::Peers => None,
        };
        let mut next_check = interrupt.map(|_| Instant::now() + INTERRUPT_CHECK_EVERY);
        loop {
            self.fatal()?;
            if let (Some(check), Some(due)) = (interrupt, next_check.as_mut()) {
                let now = Instant::now();
                if now >= *due {
                    *due = now + INTERRUPT_CHECK_EVERY;
                    if let Some(e) = check() {
                        return Err(e);
                    }
                }
            }
            // Read before looking: an announcement after this ends the sleep.
            let seen = sleep_on.map(|s| s.slot().announced());
            let (events_pending, traffic, wakeup) = {
                let mut st = self.lock();
                let got = st.progress(self.rank)?;
                if let Some(v) = ready(&mut st) {
                    return Ok(Some(v));
                }
                // Queued sends leave only while this process polls.
                let traffic = got > 0 || st.transport.sends_queued();
                // What to sleep on is asked with the endpoint held.
                let wakeup = if !traffic && sleep_on.is_none() && idle.sleep_due() {
                    st.transport.wakeup()
                } else {
                    Wakeup::Usual
                };
                (st.mail.events.pending(), traffic, wakeup)
            };
            // Events that arrive while the role waits in a blocking call
            // run their handlers now (section 2.5), on the role's thread.
            if handlers && events_pending && self.may_run_handlers() {
                self.run_pending_handlers()?;
                idle.traffic();
                continue;
            }
            if deadline.is_some_and(|d| self.clock.now() >= d) {
                return Ok(None);
            }
            // Never with the lock held: another thread may run meanwhile.
            match (traffic, sleep_on.zip(seen)) {
                (true, _) => idle.traffic(),
                (false, Some((slot, seen))) => {
                    idle.idle_on(|timeout| slot.slot().wait_announcement(seen, timeout))
                }
                (false, None) => idle.idle_until(wakeup),
            }
        }
    }
}

/// Scope bytes lent to one closure ([`Client::lend`]); dropping it gives
/// them back.
///
/// `bytes` points into the store's memory for a chunk (or chain) in an open
/// scope. It stays valid, and no one else writes it, until this is dropped:
/// the scope cannot end while the loan is out ([`Client::end_scope`] waits
/// or refuses), the store writes a chunk's bytes only before a scope opens
/// and never moves or frees memory with a chunk in a scope (eviction skips
/// such regions, UNMAP is refused), and loans for writing exclude every
/// other loan of the chunk ([`loans::Loans::conflict`]). Whatever the store
/// does meanwhile concerns other chunks' bytes.
struct Lent<'c> {
    client: &'c Client,
    /// The caller's: the loan cannot outlive them.
    chunks: &'c [ChunkId],
    exclusive: bool,
    taken: loans::Taken,
    bytes: NonNull<[u8]>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        match self.taken {
            loans::Taken::Quick => self.client.quick_loan.give_back(),
            loans::Taken::Listed => {
                self.client
                    .lock()
                    .loans
                    .give_back(self.chunks, self.exclusive, loans::me())
            }
        }
    }
}

/// Whether a chain's READ asks ahead for the chunks `protocol` runs
/// ([`Client::acquire_chain`]): the MESI family, whose read grants are the
/// same whether a scope waits for them or not (an adaptive chunk while it
/// runs one of them too). Not a registered protocol.
fn reads_ahead(protocol: ProtocolId) -> bool {
    matches!(
        protocol,
        ProtocolId::HomeMesi
            | ProtocolId::MesiExclusive
            | ProtocolId::UpdateMesi
            | ProtocolId::LearnedMesi
    )
}

/// A thread's place in a chunk's queue of waiting threads
/// ([`crate::store::LocalChunk::queued`]) while [`Client::acquire_at`] waits:
/// given up when the wait ends in an error, so that the threads behind it go
/// on.
struct QueueSeat<'c> {
    client: &'c Client,
    chunk: ChunkId,
    me: std::thread::ThreadId,
    seated: bool,
}

impl Drop for QueueSeat<'_> {
    fn drop(&mut self) {
        if self.seated {
            if let Some(c) = self.client.lock().store.get_mut(self.chunk) {
                c.queued.retain(|&(t, _)| t != self.me);
            }
        }
    }
}

/// The calling thread's id, kept per thread: `std::thread::current()` clones
/// a handle at every call, and a scope on a host slot asks several times.
fn this_thread() -> std::thread::ThreadId {
    thread_local! {
        static ID: std::thread::ThreadId = std::thread::current().id();
    }
    ID.with(|id| *id)
}

/// Whether a thread that holds no scope on a chunk other threads use must
/// wait before it opens one with `access`: as a lock would, for a write
/// scope or a request under way; and a reader waits when the protocol says
/// so (a writer waits at the home for the read scopes open here, and new
/// readers joining them would starve it).
fn must_wait(side: &dyn ClientSide, access: Access) -> bool {
    side.writing()
        || side.waiting()
        || (side.in_scope() && (access.exclusive() || side.join() == Join::Wait))
}

/// What has arrived for this client and not been taken yet.
#[derive(Default)]
struct Mailbox {
    inbox: VecDeque<UserMessage>,
    /// User messages that have arrived (taken or not).
    user_received: u64,
    done_acked: bool,
    /// The MALLOCs and LOOKUPs waiting for their answer, by request
    /// number: the chunk asked about, and the answer once it has come.
    /// An answer with no entry here is nobody's and is dropped.
    alloc: HashMap<u64, (ChunkId, Option<AllocOutcome>)>,
    /// The number of the next allocation request (per client).
    next_request: u64,
    /// Host slots named by allocation answers, for [`host::HostPath`].
    named: Vec<(ChunkId, crate::segment::SlotPlace)>,
    /// Answers to `Published` taken in, for [`host::HostPath`].
    published_acks: u32,
    /// Answers of synchronization objects ([`sync`]).
    sync: sync::Answers,
    /// Subscriptions and their pending events ([`events`]).
    events: events::Queue,
    /// The run said there is nothing left to wait for.
    stop: bool,
    /// Per chunk, in a run with replicated homes: the releases that
    /// published, and the `Durable`s its home sent back for them.
    durable: HashMap<ChunkId, (u64, u64)>,
    /// Per chunk, the releases up to this count whose `Durable` a lost
    /// server took with it, and why (`client/failover.rs`).
    durable_lost: HashMap<ChunkId, (u64, String)>,
    /// Per chunk, the last release of it made in a chain's release, kept
    /// until its `Durable` comes: sent again if a server's loss takes that
    /// with it (`server/republish.rs`).
    unconfirmed: HashMap<ChunkId, failover::Unconfirmed>,
    /// Allocation requests a lost server took with it, and why.
    alloc_lost: HashMap<u64, String>,
    /// News of lost servers taken in by the last poll: (from, lost).
    losses: Vec<(Rank, Rank)>,
    /// The counters this client's `ClientDone` carried, once sent.
    done_sent: Option<(u64, u64)>,
    /// It told its server it waits for events only (`ClientIdle`).
    idle_told: bool,
}

impl Mailbox {
    /// Whether a release of `chunk` made here waits for its `Durable` (a
    /// run with replicated homes) and its home is not known lost: another
    /// scope of the chunk here waits for it, since the loss of the home
    /// would take the version back (the simulator saw a READ hit on such a
    /// release, which its RELEASE then reported lost).
    fn undurable(&self, chunk: ChunkId) -> bool {
        let Some(&(due, got)) = self.durable.get(&chunk) else {
            return false;
        };
        due > got
            && self
                .durable_lost
                .get(&chunk)
                .is_none_or(|(upto, _)| *upto < due)
    }
}

impl ClientState {
    fn progress(&mut self, me: Rank) -> SatResult<usize> {
        let server = self.server;
        // A chain's commit first: until it leaves, the server holds what
        // this client sends.
        self.flush_bracket((me, server));
        // Before the messages: a probe among them must find the events the
        // inbox holds (see `events::Queue::count_direct`).
        let hinted = self.take_hints();
        let mail = &mut self.mail;
        let store = &mut self.store;
        // Before its loss is applied here, this client's server's stand-in
        // (the next server alive) may already serve it
        // (`client/failover.rs`).
        let stand_in = self.ring.backup_after(server);
        let polled = self
            .transport
            .poll(&mut |out: &mut dyn Sender, m: Received<'_>| {
                match wire::decode(m.header) {
                    Ok(Message::Coherence {
                        chunk,
                        client,
                        op,
                        epoch,
                        ..
                    }) if m.src == server && client == me => {
                        coherence((me, server), store, out, chunk, (op, epoch), m.payload);
                        return;
                    }
                    // Applied after the poll, with the whole state.
                    Ok(Message::ServerLost { server: lost }) => {
                        mail.losses.push((m.src, lost));
                        return;
                    }
                    _ => {}
                }
                handle(me, (server, stand_in), mail, out, m)
            });
        // The news of a loss is applied even when the same poll reports an
        // error: it may be what the error is about.
        for (src, lost) in std::mem::take(&mut self.mail.losses) {
            self.server_lost(me, src, lost);
        }
        // A poll that reported an error held back says nothing of how many
        // messages it delivered: counted as traffic, so that a wait polls
        // on for the news of the loss rather than sleep.
        let (n, troubled) = match polled {
            Ok(n) => (n, 0),
            Err(e) => {
                self.peer_trouble(e)?;
                (0, 1)
            }
        };
        self.suspicion_expired()?;
        self.received += n as u64;
        switch::retry((me, server), &mut self.store, self.transport.as_mut());
        for (chunk, place) in self.mail.named.drain(..) {
            self.host.named(chunk, place);
        }
        self.host
            .acknowledged(std::mem::take(&mut self.mail.published_acks));
        // A grant made here is progress as much as a message is.
        let granted = self.host.retry(&mut self.store, &mut self.mail.events, me);
        self.host
            .tell_home_again(self.transport.as_mut(), &mut self.header, (me, server));
        Ok(n + troubled + granted + hinted)
    }

    /// Asks `chunk`'s home for a valid copy before a READ of `chain`
    /// wants it ([`Client::read_ahead`]), when it needs one and nothing
    /// here holds it, waits for it or is about to change it.
    fn ask_ahead(&mut self, me: Rank, chunk: ChunkId, chain: &Chain) -> SatResult<()> {
        let Some(place) = self.store.place_index(chunk, Some(chain)) else {
            return Ok(());
        };
        let c = self.store.get(chunk).expect("placed");
        let busy = !c.holders.is_empty()
            || c.orphaned.is_some()
            || c.switch_to.is_some()
            || c.reask.is_some();
        if !reads_ahead(c.protocol) || c.host.is_some() || busy || self.mail.undurable(chunk) {
            return Ok(());
        }
        // A valid copy (a READ repeated, the usual case) or a request on its
        // way needs nothing: no snapshot of the state, no place made ready.
        if c.side.state() != mesi::State::Invalid || c.side.waiting() {
            return Ok(());
        }
        // The grant's bytes go straight into the chain's memory.
        self.store.prepare(chunk, place);
        let c = self.store.get_mut(chunk).expect("placed");
        let before = c.side.snapshot();
        let Some(req) = c.side.read_ahead() else {
            return Ok(());
        };
        // No thread waits for this grant: an adaptive chunk's switch drops
        // the request instead of asking it again (`client/switch.rs`).
        c.asking = None;
        c.asked_ahead = true;
        tracing::debug!(
            "[{}] READ chunk {chunk}: asking the home ahead of the chain's READ",
            c.protocol.name()
        );
        let to = (me, self.server);
        let sent = send_to_home(
            self.transport.as_mut(),
            &mut self.header,
            to,
            (chunk, c.epoch),
            req,
            None,
        );
        if let Err(e) = sent {
            // The home never heard of it: nothing changed.
            let c = self.store.get_mut(chunk).expect("placed");
            c.side = before;
            c.asked_ahead = false;
            return Err(e);
        }
        self.store.asked_ahead += 1;
        Ok(())
    }

    /// Takes what releasers posted to this process's inbox: each chunk's
    /// slot version is told to its subscriptions. Returns how many chunks
    /// were looked at.
    fn take_hints(&mut self) -> usize {
        let Some(taken) = self.transport.take_hints() else {
            return 0;
        };
        let chunks = if taken.overflowed {
            self.mail.events.subscribed_chunks()
        } else {
            taken.chunks
        };
        for &chunk in &chunks {
            if let Some(slot) = self.store.get(chunk).and_then(|c| c.host.as_ref()) {
                let version = slot.slot().peek_version();
                self.mail.events.slot_moved(chunk, version);
            }
        }
        chunks.len().max(1)
    }

    /// [`ClientState::end_scope_acked`], a RELEASE publishing `source`
    /// instead of the chunk's local bytes when given (a PUT).
    fn end_scope_from(
        &mut self,
        to: (Rank, Rank),
        chunk: ChunkId,
        ending: Ending,
        source: Option<&[u8]>,
    ) -> SatResult<Option<AckDue>> {
        let Some(source) = source else {
            return self.end_scope_acked(to, chunk, ending);
        };
        if self.store.get(chunk).is_some_and(|c| c.host.is_none()) {
            // Messages carry the local bytes: the source goes there first.
            let place = self
                .store
                .scope_place(chunk)
                .ok_or_else(|| unknown(chunk))?;
            let bytes = self
                .store
                .bytes_mut(chunk, place)
                .ok_or_else(|| unknown(chunk))?;
            if bytes.len() != source.len() {
                return Err(SatError::Usage(format!(
                    "PUT of chunk {chunk} with {} bytes: the chunk has {}",
                    source.len(),
                    bytes.len()
                )));
            }
            bytes.copy_from_slice(source);
            return self.end_scope_acked(to, chunk, ending);
        }
        self.put_source = (chunk, source.as_ptr() as usize, source.len());
        let ended = self.end_scope_acked(to, chunk, ending);
        self.put_source = (0, 0, 0);
        ended
    }

    /// The bytes a PUT's release of `chunk` publishes, when it is one.
    fn put_source<'a>(&self, chunk: ChunkId) -> Option<&'a [u8]> {
        let (c, addr, len) = self.put_source;
        if len == 0 {
            return None;
        }
        // SAFETY: set by `end_scope_from` from a slice it borrows, for the
        // duration of the call that reaches here, and cleared after it.
        (c == chunk).then(|| unsafe { std::slice::from_raw_parts(addr as *const u8, len) })
    }

    /// [`ClientState::end_scope`], then the grant count the home's
    /// acknowledgement of the release makes, when the release waits for one.
    fn end_scope_acked(
        &mut self,
        to: (Rank, Rank),
        chunk: ChunkId,
        ending: Ending,
    ) -> SatResult<Option<AckDue>> {
        // Only the release of a diffing write scope is acknowledged; the
        // side may wait for other things meanwhile (another thread's
        // request).
        let acked = self.store.get(chunk).and_then(|c| {
            let diff = c.side.diffs() && c.side.writing() && c.host.is_none();
            (diff && ending == Ending::Release).then_some(c.grants + 1)
        });
        self.end_scope(to, chunk, ending)?;
        let (due, got) = self.mail.durable.get(&chunk).copied().unwrap_or((0, 0));
        Ok((acked.is_some() || due > got).then_some(AckDue {
            grants: acked.unwrap_or(0),
            durable: due,
        }))
    }

    /// Ends one scope of `chunk`. A release after a write sends its bytes
    /// home as the new version and makes them every local instance's; an
    /// abort sends nothing but the end of the scope, and the local bytes
    /// stop being a version. When the message cannot be sent the scope
    /// stays open, unchanged, and the error is returned: the home never
    /// heard of its end.
    fn end_scope(&mut self, to: (Rank, Rank), chunk: ChunkId, ending: Ending) -> SatResult<()> {
        let c = self.store.get_mut(chunk).ok_or_else(|| unknown(chunk))?;
        if let Some(why) = c.orphaned.clone() {
            // Its home was lost with the scope: it ends here, with no
            // message (`client/failover.rs`).
            let wrote = c.side.writing();
            self.store.leave_orphan(chunk, this_thread());
            if wrote && ending == Ending::Release {
                return Err(SatError::ProcessLost(format!(
                    "RELEASE of chunk {chunk}: {why} during the write scope: nothing was \
                     published (the chunk keeps its last released version); write it again"
                )));
            }
            return Ok(());
        }
        let was_writing = c.side.writing();
        // Put back if the message cannot be sent (a host slot needs none).
        let before = c.host.is_none().then(|| c.side.snapshot());
        let sent = match ending {
            Ending::Release => c.side.release(),
            Ending::Abort => c.side.abort(),
        }
        .map_err(|e| match (ending, e) {
            (Ending::Abort, crate::protocol::ScopeError::NotAcquired) => SatError::Usage(format!(
                "chunk {chunk}: ABORT without a matching READ, WRITE or READWRITE on this chunk"
            )),
            (_, e) => SatError::Usage(format!("chunk {chunk}: {e}")),
        })?;
        let protocol = c.protocol;
        tracing::debug!(
            "[{}] {} chunk {chunk} version {:?} local state {:?}",
            protocol.name(),
            match ending {
                Ending::Release => "release",
                Ending::Abort => "abort",
            },
            c.side.version(),
            c.side.state()
        );
        let place = self.store.scope_place(chunk).expect("known");
        if let Some(op) = sent.filter(|_| self.store.get(chunk).is_some_and(|c| c.host.is_some())) {
            // Moved out for the call and back (`Store::take_slot`): nothing
            // `end_host_scope` calls looks at this chunk's slot handle.
            let slot = self.store.take_slot(chunk).expect("checked");
            let ended = self.end_host_scope(to, chunk, &slot, op, place);
            self.store.put_slot(chunk, slot);
            // Not `return ended`: a result held across a call is copied out
            // whole (88 bytes, partly never written: a stall on every scope).
            ended?;
            return Ok(());
        }
        let twin = self.store.get_mut(chunk).and_then(|c| c.twin.take());
        if let Some(op) = sent {
            let publishes = was_writing && op.publishes();
            let diff;
            let data = match (publishes, op) {
                (true, ToHome::ReleaseDiff) => {
                    let now = self.store.bytes(chunk, place).unwrap_or(&[]);
                    diff = crate::protocol::hlrc::diff_or_whole(twin.as_deref(), now);
                    Some(&diff[..])
                }
                (true, _) => self.store.bytes(chunk, place),
                _ => None,
            };
            // A chain's release in a run with replicated homes: its bytes
            // are kept until both servers hold them.
            let kept = (publishes && self.replicated && self.staging)
                .then(|| data.map(<[u8]>::to_vec))
                .flatten();
            let epoch = self.store.get(chunk).map_or(0, |c| c.epoch);
            let delivered = send_to_home(
                self.transport.as_mut(),
                &mut self.header,
                to,
                (chunk, epoch),
                op,
                data,
            );
            if let Err(e) = delivered {
                let c = self.store.get_mut(chunk).expect("known");
                if let Some(before) = before {
                    c.side = before;
                }
                c.twin = twin;
                return Err(e);
            }
            if publishes {
                self.mail.events.count_published();
                self.store.spread(chunk, place);
                if self.replicated {
                    let due = self.mail.durable.entry(chunk).or_default();
                    due.0 += 1;
                    let due = due.0;
                    if let Some(bytes) = kept {
                        self.mail.keep_unconfirmed(chunk, op, due, bytes);
                    }
                }
            }
            if matches!(op, ToHome::Abort) {
                self.store.forget_version(chunk);
            }
        }
        self.scope_ended(chunk);
        // A switch that came during the scope goes ahead once none is open.
        switch::apply_pending(to, &mut self.store, self.transport.as_mut(), chunk);
        Ok(())
    }

    /// [`ClientState::end_scope`] on a chunk whose version is in a host
    /// slot: the slot takes the bytes and the lock goes; after a
    /// publication the home is told when the chunk has subscribers, with
    /// the bytes if one of them wants data. The publication cannot be
    /// undone, so a message that cannot leave now is sent again when the
    /// client next polls ([`host::HostPath::tell_home`]).
    fn end_host_scope(
        &mut self,
        to: (Rank, Rank),
        chunk: ChunkId,
        slot: &crate::segment::SlotRef,
        op: ToHome,
        place: usize,
    ) -> SatResult<()> {
        // Inside a chain's bracket a release is staged for the home.
        if self.staging
            && matches!(op, ToHome::Release { .. })
            && self.stage_host_release(to, chunk, (slot, place))?
        {
            return Ok(());
        }
        // A PUT publishes the caller's bytes: the local ones stay as they
        // were, and stop being the version.
        let source = self.put_source(chunk);
        let data = match op {
            ToHome::Release { .. } => source.or_else(|| self.store.bytes(chunk, place)),
            _ => None,
        };
        let published = host::end_scope(slot, (chunk, self.host.reader()), op, data)?;
        if slot.slot().lock_waiters() > 0 {
            // Those waiting for the lock sleep on the slot: wake them.
            slot.slot().announce();
        }
        if matches!(op, ToHome::Abort) {
            self.store.forget_version(chunk);
        }
        if let Some(version) = published {
            match source {
                Some(_) => {
                    self.store.put_direct += 1;
                    self.store.drop_bytes(chunk);
                }
                None => self.store.spread(chunk, place),
            }
            if self.tell_subscribers_directly(to.0, chunk, slot, version) {
                self.scope_ended(chunk);
                return Ok(());
            }
            // Otherwise only a release someone subscribed to concerns the
            // home: it notifies them, and the quiescence detection counts
            // the release at both ends.
            let (subscribers, with_data) = slot.slot().subscribers();
            if subscribers > 0 {
                self.mail.events.count_published();
                let bytes = if with_data > 0 {
                    source.or_else(|| self.store.bytes(chunk, place))
                } else {
                    None
                };
                let published = host::Published {
                    chunk,
                    version,
                    bytes: bytes.map(<[u8]>::to_vec),
                    releases: 1,
                };
                self.host
                    .tell_home(self.transport.as_mut(), &mut self.header, to, published);
            }
        }
        self.scope_ended(chunk);
        Ok(())
    }

    /// After a release of `version` into `chunk`'s slot: when the home's
    /// record in the slot lists every subscriber, none wants data and each
    /// one's inbox is reachable, tells them itself (`segment/inbox.rs`):
    /// no message, and the home is not involved. Returns false when the
    /// home must tell them (or there is nobody to tell).
    fn tell_subscribers_directly(
        &mut self,
        me: Rank,
        chunk: ChunkId,
        slot: &crate::segment::SlotRef,
        version: u64,
    ) -> bool {
        let mut ranks = std::mem::take(&mut self.direct_ranks);
        let direct = slot.slot().direct_subscribers(&mut ranks)
            && ranks
                .iter()
                .all(|&r| r == me || self.transport.reaches_inbox(r));
        if direct {
            self.mail.events.count_direct();
            for &r in &ranks {
                if r == me {
                    self.mail.events.slot_moved(chunk, version);
                } else {
                    self.transport.post_hint(r, chunk);
                }
            }
        }
        self.direct_ranks = ranks;
        direct
    }

    /// The calling thread's scope on `chunk` has ended: it is no longer a
    /// holder, and the statistics stream records the scope with its last.
    fn scope_ended(&mut self, chunk: ChunkId) {
        let me = this_thread();
        let through = (self.ending_through.iter())
            .position(|&(t, id, _)| t == me && id == chunk)
            .map(|i| self.ending_through.swap_remove(i).2);
        let c = self.store.get_mut(chunk).expect("known");
        // (A scope opened by another thread may be closed by this one.)
        c.remove_holder_through(me, through);
        let last = c.holders.is_empty();
        // The scope's entry in the statistics ends with its last holder.
        if let Some((start, access, hit)) = last.then(|| c.scope_stat.take()).flatten() {
            stats::access(chunk, access, hit, start);
        }
        if last {
            self.store.distrust_exposed(chunk);
        }
    }
}

/// Whether the grant a scope of `chunk` waits for (its `granted`-th) has
/// come; if so, a scope that reads sees the version through its place (a
/// grant without data: the bytes are the version held here). The client's
/// lock was let go while waiting, so exposed bytes are checked.
/// An error when the chunk's home was lost with the request
/// (`client/failover.rs`).
fn scope_granted(
    st: &mut ClientState,
    chunk: ChunkId,
    granted: u64,
    access: Access,
) -> Option<SatResult<()>> {
    if let Some(why) = &st.store.get(chunk)?.orphaned {
        return Some(Err(SatError::ProcessLost(format!(
            "{} of chunk {chunk}: {why} before it granted the scope; call again",
            access_name(access)
        ))));
    }
    if st.store.get(chunk)?.grants < granted {
        return None;
    }
    let c = st.store.get(chunk)?;
    if access != Access::Write || c.side.diffs() {
        let place = st.store.scope_place(chunk)?;
        st.store.make_valid(chunk, place);
    }
    take_twin(st, chunk);
    Some(Ok(()))
}

/// A write scope of a diffing protocol ([`crate::protocol::hlrc`]) has
/// just opened: keeps the bytes it opened on, which its release diffs
/// against. (A chunk in a host slot takes whole releases under the slot's
/// lock instead.)
fn take_twin(st: &mut ClientState, chunk: ChunkId) {
    let Some(c) = st.store.get(chunk) else {
        return;
    };
    if !(c.side.diffs() && c.side.writing() && c.host.is_none()) {
        return;
    }
    let twin = st
        .store
        .scope_place(chunk)
        .and_then(|place| st.store.bytes(chunk, place))
        .map(<[u8]>::to_vec);
    st.store.get_mut(chunk).expect("known").twin = twin;
}

/// How a scope ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// RELEASE: a write scope publishes its bytes.
    Release,
    /// The scope ended in an error: nothing is published.
    Abort,
}

/// Sends a coherence message about `chunk` from client `to.0` through its
/// server `to.1` to the chunk's home, with the chunk data after a write.
fn send_to_home(
    transport: &mut dyn Transport,
    header: &mut [u8; MAX_HEADER],
    to: (Rank, Rank),
    (chunk, epoch): (u64, u32),
    op: mesi::ToHome,
    data: Option<&[u8]>,
) -> SatResult<()> {
    let msg = Message::Coherence {
        chunk,
        client: to.0,
        op: op.into(),
        epoch,
        after_barrier: false,
    };
    let n = wire::encode(&msg, header).expect("coherence headers fit");
    let payload = data.map_or(Payload::None, Payload::Copy);
    transport.send(to.1, &header[..n], payload)?;
    Ok(())
}

/// A coherence message from the home about one of our chunks, in the
/// chunk's protocol epoch `epoch`.
fn coherence(
    (me, server): (Rank, Rank),
    store: &mut Store,
    out: &mut dyn Sender,
    chunk: u64,
    (op, epoch): (CoherenceOp, u32),
    payload: &[u8],
) {
    if let CoherenceOp::Switch { protocol } = op {
        switch::on_switch((me, server), store, out, chunk, epoch, protocol);
        return;
    }
    let (Some(c), Some(msg)) = (store.get_mut(chunk), mesi::to_client(op)) else {
        tracing::warn!("dropped a coherence message for chunk {chunk}, unknown here");
        return;
    };
    if epoch != c.epoch {
        // Of a protocol this process has left, or not yet switched to.
        tracing::debug!(
            "chunk {chunk}: {} of epoch {epoch} dropped: this process is in epoch {}",
            op.name(),
            c.epoch
        );
        return;
    }
    let data = (!payload.is_empty()).then_some(payload);
    let reaction = c.side.on_message(msg, data);
    let granted = reaction.is_ok() && msg.is_grant();
    if granted {
        c.grants += 1;
    }
    let pushed = c.protocol.learns() && matches!(msg, mesi::ToClient::Update { .. });
    if let Ok(r) = &reaction {
        tracing::debug!(
            "[{}] chunk {chunk}: {op:?} from the home, local state {:?}",
            c.protocol.name(),
            c.side.state()
        );
        if granted {
            store.silent_writes = 0;
        }
        if r.take_data {
            if msg.is_grant() {
                store.take_data(chunk, payload);
            } else {
                store.take_push(chunk, payload);
            }
            // A push that learned sets asked for (`learned`).
            if pushed {
                store.pushed += 1;
            }
        }
    }
    match reaction.map(|r| r.reply) {
        Ok(Some(reply)) => {
            let mut header = [0u8; MAX_HEADER];
            let answer = Message::Coherence {
                chunk,
                client: me,
                op: reply.into(),
                epoch,
                after_barrier: false,
            };
            let n = wire::encode(&answer, &mut header).expect("fits");
            if let Err(e) = out.send(server, &header[..n], Payload::None) {
                tracing::warn!("chunk {chunk}: could not answer the home: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("chunk {chunk}: {e}; message dropped"),
    }
}

fn handle(
    me: Rank,
    (server, stand_in): (Rank, Option<Rank>),
    mail: &mut Mailbox,
    out: &mut dyn Sender,
    m: Received<'_>,
) {
    if m.src != server && Some(m.src) != stand_in {
        tracing::warn!(
            "dropped a message from rank {}: clients only hear from their server {server}",
            m.src
        );
        return;
    }
    match wire::decode(m.header) {
        Ok(Message::Relay { from, tag, .. }) => {
            mail.user_received += 1;
            mail.inbox.push_back(UserMessage {
                from,
                tag,
                data: m.payload.to_vec(),
            })
        }
        Ok(Message::ClientDoneAck) => mail.done_acked = true,
        Ok(Message::Durable { chunk, client, .. }) if client == me => {
            match mail.durable.get_mut(&chunk) {
                Some((due, got)) if *got < *due => {
                    *got += 1;
                    let got = *got;
                    mail.confirmed(chunk, got);
                }
                _ => tracing::warn!(
                    "dropped a durable of chunk {chunk}: no release of it waits for one"
                ),
            }
        }
        Ok(Message::PublishedAck { client }) if client == me => mail.published_acks += 1,
        Ok(Message::AllocReply {
            chunk,
            client,
            request,
            outcome,
            host,
        }) if client == me => match mail.alloc.get_mut(&request) {
            Some((asked, answer)) if *asked == chunk && answer.is_none() => {
                *answer = Some(outcome);
                if let Some(place) = host {
                    mail.named.push((chunk, place));
                }
            }
            Some((asked, _)) => tracing::warn!(
                "dropped an answer about chunk {chunk} ({outcome}) to request {request}, \
                 which asked about chunk {asked} or was answered already"
            ),
            None if request < mail.next_request => tracing::debug!(
                "dropped an answer about chunk {chunk} ({outcome}) to request {request}, \
                 which no longer waits (it timed out or failed)"
            ),
            None => tracing::warn!(
                "dropped an answer about chunk {chunk} ({outcome}) to request {request}, \
                 which this client never sent"
            ),
        },
        Ok(Message::Sync { client, op }) if client == me => {
            mail.sync.on_answer(op, &mut mail.events)
        }
        Ok(Message::Subscribed { chunk, client }) if client == me => mail.events.subscribed(chunk),
        Ok(Message::Notify {
            chunk,
            client,
            version,
            with_data,
        }) if client == me => {
            let data = with_data.then(|| m.payload.into());
            mail.events.notified(chunk, version, data);
        }
        Ok(Message::Probe { wave }) => {
            let (busy, sent, received) = mail.events.probe();
            let reply = Message::ProbeReply {
                wave,
                busy,
                sent,
                received,
            };
            let mut header = [0u8; MAX_HEADER];
            let n = wire::encode(&reply, &mut header).expect("fits");
            if let Err(e) = out.send(server, &header[..n], Payload::None) {
                tracing::warn!("could not answer the probe of wave {wave}: {e}");
            }
        }
        Ok(Message::Stop) => mail.stop = true,
        Ok(other) => tracing::warn!("dropped unexpected {} from server {server}", other.kind()),
        Err(e) => tracing::warn!("dropped a malformed message from server {server}: {e}"),
    }
}

#[cfg(test)]
mod tests;
