//! The S-DSM server loop: carries client messages, keeps the homes of its
//! chunks, coordinates synchronization objects, and either runs the
//! termination protocol of section 3 (client -> its server -> seed ->
//! shutdown of all servers) or, in service mode, admits and forgets clients
//! as they attach and detach ([`crate::service`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::directory::AllocDirectory;
use crate::error::{SatError, SatResult};
use crate::progress::{Clock, Idle, IdlePolicy};
use crate::protocol::{mesi, HomeSide, Out, ProtocolId, ToClient};
use crate::quiescence::{Accounts, Waves};
use crate::segment::{SlotPlace, SlotRef};
use crate::stats;
use crate::sync::Coordinator;
use crate::topology::Topology;
use crate::transport::{Payload, Rank, Received, Sender, Transport, TransportError, MAX_HEADER};
use crate::wire::{self, AllocOutcome, CoherenceOp, Message};

/// The seed: rank 0, which decides when the run is over.
const SEED: Rank = 0;
/// The most of a `ClientLost`'s reason a server logs.
const MAX_REASON: usize = 512;

/// What one server knows while the run goes on.
struct ServerState<'t> {
    rank: Rank,
    topology: &'t Topology,
    /// Deadlines (parked LOOKUPs, quiescence waves) are read from it.
    clock: Clock,
    /// Which of this server's clients have finished, by client rank.
    client_done: Vec<bool>,
    clients_left: usize,
    told_seed: bool,
    /// Seed only: servers that reported all their clients done.
    server_done: Vec<bool>,
    servers_left: usize,
    shutdown_sent: bool,
    /// Seed only: servers that acknowledged the shutdown.
    acks_left: usize,
    /// Non-seed: the seed said shut down.
    shutdown: bool,
    /// Messages this server sent to other servers and took in from them
    /// (the termination protocol's own aside), for the drain ([`drain`]).
    peer_sent: u64,
    peer_received: u64,
    /// Seed only: the drain before the shutdown.
    drain: drain::Drain,
    /// The servers in rank order: the home of chunk c is `servers[c % len]`.
    servers: Vec<Rank>,
    /// The same, with the servers a run with replicated homes has lost:
    /// where chunks live and clients are served now (`topology/ring.rs`).
    ring: crate::topology::ring::Ring,
    /// Allocations of the chunks this server is the home of.
    alloc: AllocDirectory,
    /// The coherence state and data of the chunks this server is home of
    /// (ordered: a departure visits them in a reproducible order).
    homes: BTreeMap<u64, HomeEntry>,
    /// Reused for the home's outgoing messages.
    home_out: Vec<Out<ToClient>>,
    header: [u8; MAX_HEADER],
    /// The synchronization objects this server coordinates.
    coordinator: Coordinator,
    /// This server's part of the quiescence detection.
    accounts: Accounts,
    /// Seed only: the waves of the quiescence detection.
    waves: Option<Waves>,
    told_quiet: bool,
    /// Notifications held back for clients of ours that have not taken in
    /// what was sent to them before ([`Sender::backlog`]): the newest per
    /// (client, chunk), sent once the backlog clears (`server/notices.rs`).
    held: notices::Held,
    /// Service mode: clients attach and detach; there is no end of run.
    service: Option<ServiceSide>,
    /// Where this server keeps its chunks' versions when its clients share
    /// its host (None: in its own memory, moved by messages).
    host: Option<host::HostVersions>,
    /// The host slots of the barriers this server coordinates.
    barrier_slots: std::collections::HashMap<u32, (SlotRef, SlotPlace)>,
    /// Messages the transport refused, by destination: handled after the
    /// poll as that peer's loss ([`ServerState::survive`]).
    send_failures: Vec<(Rank, TransportError)>,
    /// How adaptive chunks homed here choose their next protocol.
    switch_policy: SwitchPolicy,
    /// Adaptive chunks this server was the first home of, moved to another
    /// server (`server/switch.rs`): what comes here for them goes there.
    moved: BTreeMap<u64, Rank>,
    /// The versions kept in memory, and those spilled to files, under the
    /// server's memory capacity (`server/spill.rs`).
    spill: spill::Spill,
    /// A run with recovery: it outlives lost clients (`server/recovery.rs`).
    recovery: Option<recovery::RunRecovery>,
    /// A run without recovery: it ends when a process is lost
    /// (`server/guard.rs`).
    guard: Option<guard::RunGuard>,
    /// Chain releases of our clients under way (`server/bracket.rs`).
    brackets: bracket::Brackets,
    /// Replicated homes: the copies kept here for other homes, and the
    /// answers of ours that wait for their backup (`server/replicas.rs`).
    replicas: replicas::Replicas,
    /// A lost server's part taken over (`server/failover.rs`).
    failover: failover::Failover,
}

mod bracket;
mod drain;
pub(crate) mod epochs;
mod events;
mod failover;
pub(crate) mod guard;
pub(crate) mod host;
mod membership;
#[cfg(test)]
mod message_counts;
mod notices;
pub(crate) mod recovery;
mod replicas;
mod republish;
pub(crate) mod spill;
mod switch;

pub(crate) use membership::ServiceSide;
pub(crate) use replicas::can_replicate;
pub(crate) use switch::SwitchPolicy;

/// A chunk this server is the home of: its protocol, that protocol's
/// directory entry and data, and its subscribers (with or without data).
struct HomeEntry {
    protocol: ProtocolId,
    side: Box<dyn HomeSide>,
    subscribers: std::collections::BTreeMap<Rank, bool>,
    /// The slot holding the version, when this home keeps it in a host
    /// segment (`server/host.rs`): then the slot, not `side`, is the
    /// chunk's version and its scope discipline.
    slot: Option<(SlotRef, SlotPlace)>,
    /// The newest version its subscribers were told of from a host slot.
    /// Releases of several clients reach the home in any order; one older
    /// than this is counted but not told (the subscribers already heard of
    /// a newer one, and a handler's last event must be the newest).
    published: crate::protocol::Version,
    /// A protected chunk's (labelled: the encryption layer's) key epochs in
    /// order (`server/epochs.rs`); None for a plain chunk.
    epochs: Option<epochs::EpochLine>,
    /// An adaptive chunk's epoch and switch (`server/switch.rs`); None for
    /// every other chunk, and for one in a host slot (whose scopes the
    /// slot serves, whatever the protocol).
    adapt: Option<switch::Adapt>,
}

impl HomeEntry {
    /// A chunk of `protocol` whose home side is `side`, kept in the home's
    /// own memory: no subscriber yet, no slot, no key epochs, not adaptive.
    fn new(protocol: ProtocolId, side: Box<dyn HomeSide>) -> HomeEntry {
        HomeEntry {
            protocol,
            side,
            subscribers: Default::default(),
            slot: None,
            published: 0,
            epochs: None,
            adapt: None,
        }
    }

    /// The protocol the chunk runs now: its allocation's, or the one an
    /// adaptive chunk switched to.
    fn running(&self) -> ProtocolId {
        self.adapt.as_ref().map_or(self.protocol, |a| a.running)
    }

    /// The epoch the home's messages about the chunk are sent in.
    fn epoch(&self) -> u32 {
        self.adapt.as_ref().map_or(0, |a| a.epoch)
    }

    /// Tells releasers through the slot whether anyone subscribes, and
    /// whether some subscriber wants data.
    fn subscribers_changed(&self) {
        if let Some((slot, _)) = &self.slot {
            let with_data = self.subscribers.values().filter(|&&d| d).count();
            let ranks: Vec<u32> = self.subscribers.keys().copied().collect();
            slot.slot().set_subscribers(&ranks, with_data as u32);
        }
    }

    /// The last released version and its bytes (copied out of a slot).
    fn current(&self) -> (crate::protocol::Version, std::sync::Arc<[u8]>) {
        match &self.slot {
            None => (self.side.version(), self.side.data().clone()),
            Some((slot, _)) => {
                // SAFETY: a home reads its slots outside any lock only where
                // no client can be inside a release: after the run, and in
                // the simulator between steps.
                let (version, bytes) = unsafe { slot.slot().snapshot() };
                (version, bytes.into())
            }
        }
    }
}

/// The name of a coherence message in the debug stream, as Figure 14 has
/// it: `client_req_*` from a client, `server_req_*` forwarded by a server.
fn request_name(op: CoherenceOp, forwarded: bool) -> String {
    let what = op.name();
    let who = if forwarded { "server" } else { "client" };
    format!("{who}_req_{what}")
}

/// Whether `msg` is a notification (counted by the quiescence detection).
fn is_notification(msg: &Message) -> bool {
    matches!(
        msg,
        Message::Notify { .. }
            | Message::Sync {
                op: crate::wire::SyncOp::Signal { .. },
                ..
            }
    )
}

/// Runs the server role until the termination protocol completes.
pub fn run(
    topology: &Topology,
    transport: &mut dyn Transport,
    policy: IdlePolicy,
) -> SatResult<()> {
    serve(topology, transport, policy, (None, None), None)
}

/// [`run`], keeping the versions this server homes in host segments when
/// `host` says so (every process of the run on this host).
pub(crate) fn run_on_host(
    topology: &Topology,
    transport: &mut dyn Transport,
    policy: IdlePolicy,
    host: Option<host::Backing>,
) -> SatResult<()> {
    serve(topology, transport, policy, (None, None), host)
}

/// [`run_on_host`] in a run whose processes are watched
/// (`server/guard.rs`): a lost process ends the run instead of hanging it.
pub(crate) fn run_guarded(
    topology: &Topology,
    transport: &mut dyn Transport,
    policy: IdlePolicy,
    host: Option<host::Backing>,
    guard: guard::RunGuard,
) -> SatResult<()> {
    let rank = transport.rank();
    let mut server = Server::new(topology, rank, None, Clock::Real, host);
    server.st.guard = Some(guard);
    serve_with(server, topology, transport, policy)
}

/// Runs a server of a run with recovery: lost clients are forgotten and
/// the run goes on without them (`server/recovery.rs`).
pub(crate) fn run_recovering(
    topology: &Topology,
    transport: &mut dyn Transport,
    policy: IdlePolicy,
    host: Option<host::Backing>,
    recovery: recovery::RunRecovery,
) -> SatResult<()> {
    serve(topology, transport, policy, (None, Some(recovery)), host)
}

/// Runs a server of a service: clients attach to its slots and detach at
/// any time; it serves until the process is stopped. The seed's `service`
/// holds the admission desk.
pub(crate) fn run_service(
    topology: &Topology,
    transport: &mut dyn Transport,
    policy: IdlePolicy,
    service: ServiceSide,
    host: Option<host::Backing>,
) -> SatResult<()> {
    stop_on_signals();
    serve(topology, transport, policy, (Some(service), None), host)
}

/// Set by SIGINT, SIGTERM or SIGHUP in a service's server: its loop ends at
/// its next round (within the longest idle sleep, a quarter of a second),
/// and the server ends as a run's does: its last messages leave, its
/// statistics are written (docs/STATISTICS.md), its endpoint closes.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn request_stop(_: libc::c_int) {
    // An atomic store is async-signal-safe.
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes SIGINT, SIGTERM and SIGHUP end this service server's loop
/// instead of the process (`satrun --serve` stops its servers with
/// SIGTERM). Installed after the endpoint opened, so that it replaces the
/// handler that unlinks the shm regions and dies (`transport::fabric`):
/// the endpoint is closed as usual on the way out instead.
fn stop_on_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction with a valid, zero-initialised struct; the
        // handler only stores to an atomic.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = request_stop as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                tracing::warn!("could not install the stop handler for signal {sig}");
            }
        }
    }
}

fn serve(
    topology: &Topology,
    transport: &mut dyn Transport,
    policy: IdlePolicy,
    (service, recovery): (Option<ServiceSide>, Option<recovery::RunRecovery>),
    host: Option<host::Backing>,
) -> SatResult<()> {
    let rank = transport.rank();
    let mut server = Server::new(topology, rank, service, Clock::Real, host);
    if let Some(r) = recovery {
        server.recover(r);
    }
    serve_with(server, topology, transport, policy)
}

/// The server's loop, then its end.
fn serve_with(
    mut server: Server<'_>,
    topology: &Topology,
    transport: &mut dyn Transport,
    policy: IdlePolicy,
) -> SatResult<()> {
    let rank = transport.rank();
    // A server's time is SAT's, but for message passing and sleep.
    stats::start(stats::Identity::of(topology, rank));
    let serving = stats::doing(stats::Activity::Sdsm);
    tracing::debug!(
        "server {rank} serves clients {:?}",
        topology.clients_of(rank)
    );
    let mut idle = Idle::new(policy);
    loop {
        if server.st.service.is_some() && STOP.load(std::sync::atomic::Ordering::SeqCst) {
            tracing::debug!("server {rank}: stopped by a signal");
            // Attached processes hear that the service stopped, not that
            // its process died.
            if let Some(service) = server.st.service.as_mut() {
                service.tell_stopped(Instant::now() + Duration::from_secs(1));
            }
            break;
        }
        match server.step(transport)? {
            Step::Finished => break,
            Step::Busy => idle.traffic(),
            Step::Idle => {
                let wakeup = if idle.sleep_due() {
                    transport.wakeup()
                } else {
                    crate::transport::wakeup::Wakeup::Usual
                };
                idle.idle_until(wakeup);
            }
        }
    }
    // Let the last acknowledgements leave before the endpoint closes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !transport.sends_drained()? {
        transport.poll(&mut |_, m| {
            tracing::debug!(
                "server {rank}: message from {} after shutdown ignored",
                m.src
            )
        })?;
        if Instant::now() > deadline {
            return Err(SatError::Timeout(
                "the last messages of the server did not leave in 10 s".into(),
            ));
        }
        idle.idle();
    }
    if let Some(r) = server.st.recovery.as_mut() {
        r.run_ended();
    }
    if let Some(g) = server.st.guard.take() {
        g.ended();
    }
    let st = &server.st;
    let returned: Vec<Rank> = topology
        .clients_of(rank)
        .iter()
        .copied()
        .filter(|&c| st.client_done[c as usize])
        .collect();
    tracing::debug!("server {rank} shut down after its clients {returned:?} returned");
    drop(serving);
    if let Some(dir) = std::env::var_os("SAT_HOME_DUMP") {
        st.dump_homes(std::path::Path::new(&dir));
    }
    stats::finish();
    Ok(())
}

/// What one round of a server's loop did.
/// Whether a home's step on a release tells its writer the release is
/// durable (a run with replicated homes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TellWriter {
    Durable,
    Nothing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Something arrived or is queued to leave: poll again at once.
    Busy,
    /// Nothing happened: the loop may wait.
    Idle,
    /// The termination protocol is over: the server may close its endpoint.
    Finished,
}

/// One server: its state, and the body of its loop as one step, so that a
/// real run ([`serve`]) and the whole-stack simulator drive the same code.
pub(crate) struct Server<'t> {
    st: ServerState<'t>,
}

impl<'t> Server<'t> {
    pub(crate) fn new(
        topology: &'t Topology,
        rank: Rank,
        service: Option<ServiceSide>,
        clock: Clock,
        host: Option<host::Backing>,
    ) -> Server<'t> {
        Server {
            st: ServerState::new(topology, rank, service, clock, host),
        }
    }

    /// One round of the loop: the termination protocol's local conditions,
    /// one poll of the transport, then membership and LOOKUP deadlines.
    pub(crate) fn step(&mut self, transport: &mut dyn Transport) -> SatResult<Step> {
        let st = &mut self.st;
        if st.service.is_none() {
            st.advance_termination(transport)?;
            if st.finished() {
                return Ok(Step::Finished);
            }
        }
        let polled = transport.poll(&mut |out: &mut dyn Sender, m: Received<'_>| st.handle(out, m));
        let n = match polled {
            Ok(n) => n,
            Err(e) => {
                st.survive(e)?;
                1
            }
        };
        st.take_send_failures()?;
        if st.service.is_some() {
            st.apply_membership(transport);
        }
        if st.recovery.is_some() {
            st.apply_losses(transport)?;
        }
        if let Some(g) = st.guard.as_ref() {
            g.check(st.topology)?;
        }
        if st.alloc.has_parked() {
            st.expire_lookups(transport);
        }
        if st.held.any() {
            st.send_held(transport);
        }
        Ok(if n > 0 || transport.sends_queued() {
            Step::Busy
        } else {
            Step::Idle
        })
    }

    /// This server belongs to a run with recovery: a lost client is
    /// forgotten and the run goes on. Its host slots (none allocated yet)
    /// take two buffers and name their readers, as a service's do, so that
    /// a client dying inside a scope leaves its chunk whole and unlocked.
    pub(crate) fn recover(&mut self, recovery: recovery::RunRecovery) {
        if let Some(host) = self.st.host.as_mut() {
            host.name_holders();
        }
        self.st.recovery = Some(recovery);
    }

    /// The chunks this server is the home of: (chunk, version, data), in
    /// chunk order (what the simulator checks after every step).
    #[cfg(feature = "simulator")]
    pub(crate) fn homes(
        &self,
    ) -> impl Iterator<Item = (u64, crate::protocol::Version, std::sync::Arc<[u8]>)> + '_ {
        self.st.homes.keys().map(|&c| {
            let (version, data) = self.st.current_of(c).expect("listed");
            (c, version, data)
        })
    }

    /// How many notifications this server held back for a subscriber that
    /// was behind (`server/notices.rs`).
    #[cfg(feature = "simulator")]
    pub(crate) fn notifications_held(&self) -> u64 {
        self.st.held.count()
    }

    /// The version of `chunk` this server keeps as its backup, and its
    /// size and protocol: (version, bytes (None: zeros), size, protocol).
    #[cfg(any(test, feature = "simulator"))]
    #[allow(clippy::type_complexity)]
    pub(crate) fn replica(
        &self,
        chunk: u64,
    ) -> Option<(
        crate::protocol::Version,
        Option<std::sync::Arc<[u8]>>,
        u64,
        ProtocolId,
    )> {
        self.st.replicas.replica(chunk)
    }

    /// Whether a version applied here waits for its backup (the moment a
    /// server's death may take a version with it).
    #[cfg(feature = "simulator")]
    pub(crate) fn replicating(&self) -> bool {
        self.st.replicas.in_flight()
    }

    /// The protocol chunk `chunk`, homed here, was allocated with.
    #[cfg(feature = "simulator")]
    pub(crate) fn protocol_of(&self, chunk: u64) -> Option<ProtocolId> {
        self.st.homes.get(&chunk).map(|e| e.protocol)
    }

    /// How many adaptive chunks this server handed over to another.
    #[cfg(feature = "simulator")]
    pub(crate) fn moved_away(&self) -> u64 {
        self.st.moved.len() as u64
    }

    /// How many versions this server wrote out to its spill files, and read
    /// back.
    #[cfg(feature = "simulator")]
    pub(crate) fn spills(&self) -> (u64, u64) {
        (self.st.spill.written, self.st.spill.read)
    }

    /// Where this server handed `chunk` over to, if it did.
    #[cfg(test)]
    pub(crate) fn moved_away_to(&self, chunk: u64) -> Option<Rank> {
        self.st.moved.get(&chunk).copied()
    }

    /// How adaptive chunks homed here choose their next protocol (the
    /// simulator switches them at random).
    #[cfg(feature = "simulator")]
    pub(crate) fn set_switch_policy(&mut self, policy: SwitchPolicy) {
        self.st.switch_policy = policy;
    }

    /// A service's slot `client` has a client attached (the simulator
    /// attaches its clients without the admission desk).
    #[cfg(feature = "simulator")]
    pub(crate) fn attach(&mut self, client: Rank) {
        self.st.client_done[client as usize] = false;
    }

    /// A client of a service, or of a run with recovery, died without
    /// The seed hears that server `server` is lost (as its watch would
    /// tell it), in a run whose backups take its part over
    /// (`server/failover.rs`).
    #[cfg(any(test, feature = "simulator"))]
    pub(crate) fn server_lost(&mut self, transport: &mut dyn Transport, server: Rank) {
        assert_eq!(self.st.rank, SEED, "only the seed hears of losses");
        assert!(self.st.cannot_fail_over(server).is_none());
        self.st
            .seed_server_lost(transport, server, "the test killed it");
    }

    /// The seed's watch says `client` died: the seed tells the server
    /// serving it, as in a run.
    #[cfg(feature = "simulator")]
    pub(crate) fn watch_lost(&mut self, transport: &mut dyn Transport, client: Rank) {
        self.st
            .watched_client_lost(transport, client, "the simulator killed it");
    }

    /// The seed hears that `client` finished the run, as its watch would
    /// when the process says goodbye.
    #[cfg(feature = "simulator")]
    pub(crate) fn said_goodbye(&mut self, transport: &mut dyn Transport, client: Rank) {
        self.st.said_goodbye(transport, client);
    }

    /// detaching: forget it everywhere, as the desk's (or the watch's)
    /// `ClientLost` makes a server do.
    #[cfg(feature = "simulator")]
    pub(crate) fn client_lost(&mut self, transport: &mut dyn Transport, client: Rank) {
        self.st
            .client_lost(transport, client, "the simulator killed it");
        if self.st.service.is_some() {
            self.st.apply_membership(transport);
        } else if let Err(e) = self.st.apply_losses(transport) {
            tracing::warn!("server {}: {e}", self.st.rank);
        }
    }
}

impl<'t> ServerState<'t> {
    fn new(
        topology: &'t Topology,
        rank: Rank,
        service: Option<ServiceSide>,
        clock: Clock,
        host: Option<host::Backing>,
    ) -> ServerState<'t> {
        let size = topology.len() as usize;
        let servers = topology.servers();
        // A server with a memory capacity keeps its versions where it can
        // spill them: on the message path, not in host slots.
        let spill = spill::Spill::new(topology.entry(rank).memory);
        let host = host.filter(|_| !spill.bounded());
        // Replicated homes see every release pass through them
        // (`server/replicas.rs`): no host slots.
        let host = host.filter(|_| topology.replication() == 1);
        // In a service no slot has a client until one attaches.
        let in_service = service.is_some();
        ServerState {
            rank,
            topology,
            clock,
            client_done: (0..size as Rank)
                .map(|r| in_service && !topology.is_server(r))
                .collect(),
            clients_left: topology.clients_of(rank).len(),
            told_seed: false,
            server_done: vec![false; size],
            servers_left: servers.len(),
            shutdown_sent: false,
            acks_left: servers.len() - 1,
            shutdown: false,
            peer_sent: 0,
            peer_received: 0,
            drain: drain::Drain::default(),
            ring: crate::topology::ring::Ring::new(servers.clone()),
            servers,
            alloc: AllocDirectory::default(),
            homes: BTreeMap::new(),
            home_out: Vec::new(),
            header: [0; MAX_HEADER],
            coordinator: Coordinator::default(),
            accounts: Accounts::new(topology.clients_of(rank)),
            waves: (rank == SEED && !in_service).then(|| Waves::new(topology.servers().len())),
            told_quiet: false,
            held: notices::Held::default(),
            // A client of a service may attach from anywhere: its homes
            // keep their versions where messages reach them.
            host: host.map(|backing| host::HostVersions::new(backing, in_service)),
            barrier_slots: Default::default(),
            service,
            send_failures: Vec::new(),
            switch_policy: SwitchPolicy::Rules,
            moved: BTreeMap::new(),
            spill,
            recovery: None,
            guard: None,
            brackets: Default::default(),
            replicas: Default::default(),
            failover: Default::default(),
        }
    }
}

impl ServerState<'_> {
    /// `SAT_HOME_DUMP=DIR`: at the end of the run, each chunk's last
    /// version as its home keeps it, in `DIR/home.<rank>.<chunk in hex>`.
    /// For looking at what a server holds: with the encryption layer,
    /// protected chunks must show ciphertext only. A folder that cannot be
    /// written is reported and the run goes on.
    ///
    /// The dumps hold the run's data: the folder, when made here, and the
    /// files are the user's alone (0700, 0600), and each file is written
    /// new beside its name, then renamed over it, so that a file or link
    /// planted under a dump's name in a shared folder is replaced, never
    /// written through.
    fn dump_homes(&self, dir: &std::path::Path) {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let written = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .and_then(|()| {
                for &chunk in self.homes.keys() {
                    let name = format!("home.{}.{chunk:016x}", self.rank);
                    let path = dir.join(&name);
                    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
                    let (_, data) = self.current_of(chunk).expect("listed");
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&tmp)
                        .and_then(|mut f| f.write_all(&data[..]))
                        .and_then(|()| std::fs::rename(&tmp, &path))
                        .inspect_err(|e| {
                            if e.kind() != std::io::ErrorKind::AlreadyExists {
                                let _ = std::fs::remove_file(&tmp);
                            }
                        })?;
                }
                Ok(())
            });
        if let Err(e) = written {
            tracing::warn!(
                "server {}: SAT_HOME_DUMP={}: {e}; the homes were not dumped",
                self.rank,
                dir.display()
            );
        }
    }

    /// A service, or a run with recovery: clients may go (die, detach)
    /// while the servers go on.
    fn outlives_clients(&self) -> bool {
        self.service.is_some() || self.recovery.is_some()
    }

    fn finished(&self) -> bool {
        if self.rank == SEED {
            self.shutdown_sent && self.acks_left == 0
        } else {
            self.shutdown
        }
    }

    fn send(&mut self, out: &mut dyn Sender, dest: Rank, msg: &Message, payload: Payload<'_>) {
        let n = wire::encode(msg, &mut self.header).expect("server messages fit a header");
        match out.send(dest, &self.header[..n], payload) {
            Ok(()) => {
                if dest != self.rank && self.topology.is_server(dest) && drain::counted(msg) {
                    self.peer_sent += 1;
                }
            }
            // A service's slot whose client left: nobody to tell.
            Err(e @ TransportError::NotAttached { .. }) if self.outlives_clients() => {
                tracing::debug!(
                    "server {}: {} to {dest} dropped: {e}",
                    self.rank,
                    msg.kind()
                );
            }
            // Not a peer (a rank from the wire the handlers did not check):
            // there is nobody to lose.
            Err(e @ TransportError::UnknownRank { .. }) => {
                tracing::warn!("server {}: {} dropped: {e}", self.rank, msg.kind());
            }
            Err(e) => {
                tracing::warn!(
                    "server {}: could not send {} to {dest}: {e}",
                    self.rank,
                    msg.kind()
                );
                // A lost message leaves its peer waiting forever: the peer
                // is treated as lost, after the poll.
                self.send_failures.push((dest, e));
            }
        }
    }

    /// Handles the sends refused during the last poll: each as the loss of
    /// its destination. A service forgets such a client; anything else
    /// ends the server with the error, naming the peer (see `survive`).
    fn take_send_failures(&mut self) -> SatResult<()> {
        for (dest, e) in std::mem::take(&mut self.send_failures) {
            self.survive(TransportError::PeerLost {
                rank: dest,
                reason: format!("a message to it could not be sent: {e}"),
            })?;
        }
        Ok(())
    }

    /// Moves the termination protocol on once local conditions hold.
    fn advance_termination(&mut self, out: &mut dyn Transport) -> SatResult<()> {
        self.advance_quiescence(out);
        if self.clients_left == 0 && !self.told_seed {
            self.told_seed = true;
            if self.rank == SEED {
                self.mark_server_done(SEED);
            } else {
                tracing::debug!("server {}: all clients done, telling the seed", self.rank);
                self.send(out, SEED, &Message::ServerDone, Payload::None);
            }
        }
        if self.rank == SEED && self.servers_left == 0 && !self.shutdown_sent && self.drained(out) {
            self.shutdown_sent = true;
            tracing::debug!("seed: every server is done, shutting the S-DSM down");
            // (A lost server is not asked: `server/failover.rs`.)
            let alive: Vec<Rank> = self.ring.alive().collect();
            for s in alive {
                if s != SEED {
                    self.send(out, s, &Message::Shutdown, Payload::None);
                }
            }
        }
        Ok(())
    }

    /// Seed: whether the servers are drained ([`drain`]): nothing one sent
    /// another is still on its way. Starts the next wave when one is due.
    fn drained(&mut self, out: &mut dyn Transport) -> bool {
        let others: Vec<Rank> = self.ring.alive().filter(|&s| s != SEED).collect();
        let lost = others.len() + 1 < self.servers.len();
        if self.drain.over() || lost || others.is_empty() {
            return true;
        }
        if self.drain.give_up_at(self.clock.now()) {
            return true;
        }
        if !self.drain.collecting() {
            let own = (self.peer_sent, self.peer_received);
            let wave = self.drain.start(others.len(), own, self.clock.now());
            for s in others {
                self.send(out, s, &Message::Drain { wave }, Payload::None);
            }
        }
        self.drain.over()
    }

    fn mark_server_done(&mut self, server: Rank) {
        let i = self.servers.iter().position(|&s| s == server);
        if let (Some(w), Some(i)) = (self.waves.as_mut(), i) {
            w.server_done(i);
        }
        if !std::mem::replace(&mut self.server_done[server as usize], true) {
            self.servers_left -= 1;
        }
    }

    /// Whether `rank` is a client of this server. Total: ranks come off the
    /// wire, and one outside the topology (from a buggy or hostile peer) is
    /// nobody's client, so its message is dropped instead of panicking in
    /// the topology's lookup.
    fn is_my_client(&self, rank: Rank) -> bool {
        self.topology
            .get(rank)
            .is_some_and(|e| !e.is_server() && self.serving(rank) == self.rank)
    }

    /// Whether a request in `client`'s name may come from `src`: from that
    /// client itself, one of ours, or forwarded by a server for a client.
    fn on_behalf_of(&self, src: Rank, src_is_server: bool, client: Rank) -> bool {
        if src_is_server {
            client < self.topology.len() && !self.topology.is_server(client)
        } else {
            self.is_my_client(src) && client == src
        }
    }

    fn handle(&mut self, out: &mut dyn Sender, m: Received<'_>) {
        let msg = match wire::decode(m.header) {
            Ok(msg) => msg,
            Err(e) => {
                tracing::warn!(
                    "server {}: dropped a malformed message from {}: {e}",
                    self.rank,
                    m.src
                );
                return;
            }
        };
        tracing::debug!("Received message {} from {}", msg.kind(), m.src);
        let src_is_server = self.topology.is_server(m.src);
        if src_is_server && m.src != self.rank && drain::counted(&msg) {
            self.peer_received += 1;
        }
        if src_is_server && self.ring.is_lost(m.src) {
            // Its loss is applied: what it sent since has no place here.
            tracing::debug!(
                "server {}: {} from lost server {}: dropped",
                self.rank,
                msg.kind(),
                m.src
            );
            return;
        }
        if !src_is_server && self.fenced_off(m.src, &msg) {
            return;
        }
        // A chunk taken over from a lost server waits until no client can
        // hold a copy its new home does not know of (`server/failover.rs`).
        if let Message::Coherence { chunk, .. } = msg {
            if self.homes.contains_key(&chunk) && self.sealed(chunk) {
                self.park(&m);
                return;
            }
        }
        if self.outlives_clients() && !src_is_server && self.client_done[m.src as usize] {
            // A message of a client that has detached or died, or a forged
            // one in the name of a free slot.
            tracing::debug!(
                "server {}: {} from {}, which is not attached: dropped",
                self.rank,
                msg.kind(),
                m.src
            );
            return;
        }
        // Inside a chain's release, what the client sends waits for its
        // commit (`server/bracket.rs`).
        if !src_is_server && self.brackets.holds(m.src) {
            match msg {
                Message::ChainCommit { client } if client == m.src => {
                    self.bracket_commit(out, client)
                }
                _ => self.bracket_hold(out, &m),
            }
            return;
        }
        match msg {
            Message::ChainBegin { client }
                if self.is_my_client(m.src) && client == m.src && self.outlives_clients() =>
            {
                self.bracket_begin(client)
            }
            Message::Staged {
                chunk,
                client,
                version,
            } => self.staged(out, m, src_is_server, (chunk, client, version)),
            Message::Relay { from, to, tag } => self.relay(out, m, src_is_server, from, to, tag),
            Message::Malloc { chunk, client, .. } | Message::Lookup { chunk, client, .. } => {
                self.allocation(out, m.src, src_is_server, chunk, client, &msg)
            }
            Message::Coherence {
                chunk,
                client,
                op,
                epoch,
                after_barrier,
            } => {
                let said = switch::Said {
                    client,
                    op,
                    epoch,
                    after_barrier,
                };
                self.coherence(out, m, src_is_server, chunk, said)
            }
            Message::Fetch { client, chunks } if src_is_server => {
                self.fetch(out, m.src, client, chunks)
            }
            Message::Handover {
                chunk,
                epoch,
                running,
                version,
                size,
                published,
            } if src_is_server => self.take_over(
                m.src,
                (chunk, epoch, running, version),
                (size, published),
                m.payload,
            ),
            Message::Published {
                chunk,
                client,
                version,
                releases,
            } => self.published(out, m, src_is_server, (chunk, client, version), releases),
            Message::PublishedAck { client } | Message::Durable { client, .. }
                if src_is_server && self.is_my_client(client) =>
            {
                self.send_to_client(out, client, &msg)
            }
            Message::Replica {
                chunk,
                version,
                size,
                protocol,
            } if src_is_server => {
                self.on_replica(out, m.src, (chunk, version, size), protocol, m.payload)
            }
            Message::ReplicaAck { chunk, .. } if src_is_server => {
                self.on_replica_ack(out, m.src, chunk)
            }
            Message::ServerLost { server }
                if m.src == SEED
                    && self.recovery.is_some()
                    && self.topology.get(server).is_some_and(|e| e.is_server())
                    && self.cannot_fail_over(server).is_none() =>
            {
                self.apply_server_loss(out, server)
            }
            // (It may come ahead of the seed's news, by another path: it
            // counts once the loss is applied here.)
            Message::LossApplied { server } if src_is_server => {
                self.loss_applied(out, m.src, server)
            }
            Message::LossSeen { server } if !src_is_server && self.is_my_client(m.src) => {
                self.moved_client_ready(out, m.src, server)
            }
            Message::ClientsSeen { server } if src_is_server && self.ring.is_lost(server) => {
                self.clients_seen(out, m.src, server)
            }
            Message::Moved { client }
                if src_is_server
                    && client < self.topology.len()
                    && m.src == self.serving(client) =>
            {
                self.forget_client_at_homes(out, client)
            }
            Message::Republish {
                chunk,
                client,
                version,
                yielded,
            } => self.republish(out, m, src_is_server, (chunk, client, version), yielded),
            Message::ClientFinished { client } if m.src == SEED && self.is_my_client(client) => {
                self.client_finished(out, client)
            }
            Message::Adopted { server, busy }
                if self.rank == SEED && src_is_server && self.ring.is_lost(server) =>
            {
                self.adopted(m.src, server, busy)
            }
            Message::AllocReply { client, .. } if src_is_server && self.is_my_client(client) => {
                self.send_to_client(out, client, &msg)
            }
            Message::ClientDone {
                published,
                received,
            } if self.is_my_client(m.src) => {
                if !std::mem::replace(&mut self.client_done[m.src as usize], true)
                    && self.service.is_none()
                {
                    self.clients_left -= 1;
                }
                self.accounts.client_done(m.src, published, received);
                self.unfence(out, m.src);
                self.report_wave_if_complete(out);
                if self.service.is_some() {
                    // A service's client is acknowledged once every server
                    // has forgotten it: when its detach returns, its slot
                    // is on its way back to the desk.
                    self.ack_when_forgotten(m.src);
                } else {
                    self.send(out, m.src, &Message::ClientDoneAck, Payload::None);
                }
                self.announce_departure(out, m.src, false);
            }
            Message::ClientLeft { client, lost }
                if src_is_server && client < self.topology.len() =>
            {
                if lost && self.service.is_none() {
                    self.accounts.client_lost(client, false);
                }
                self.client_left(out, client, m.src, lost);
                if self.service.is_some() {
                    self.send(
                        out,
                        m.src,
                        &Message::ClientForgotten { client },
                        Payload::None,
                    );
                }
            }
            Message::Admit { client } if m.src == SEED && self.is_my_client(client) => {
                self.admit(client, m.payload)
            }
            Message::Admitted { client, refused } if self.rank == SEED && src_is_server => {
                self.admitted(client, refused)
            }
            Message::ClientLost { client } if m.src == SEED && self.is_my_client(client) => {
                // The payload says why, for the log (bounded: it is only
                // read, never kept).
                let why = &m.payload[..m.payload.len().min(MAX_REASON)];
                self.client_lost(out, client, &String::from_utf8_lossy(why))
            }
            Message::ClientForgotten { client } if src_is_server && self.is_my_client(client) => {
                self.forgotten_by(out, client)
            }
            Message::SlotFree { client } if self.rank == SEED && src_is_server => {
                self.slot_free(client, !m.payload.is_empty())
            }
            Message::ServerDone if self.rank == SEED && src_is_server => {
                self.mark_server_done(m.src)
            }
            Message::Sync { client, op } => {
                self.sync(out, (m.src, src_is_server), client, op, m.payload)
            }
            Message::Subscribe { chunk, client, .. }
            | Message::Resubscribe { chunk, client, .. }
            | Message::Unsubscribe { chunk, client } => {
                self.subscription(out, m.src, src_is_server, chunk, client, &msg)
            }
            Message::Subscribed { client, .. } | Message::Notify { client, .. }
                if src_is_server && self.is_my_client(client) =>
            {
                self.send_to_client_with(out, client, &msg, Payload::Copy(m.payload))
            }
            Message::ClientIdle if self.is_my_client(m.src) => self.accounts.client_waiting(m.src),
            Message::ProbeReply {
                wave,
                busy,
                sent,
                received,
            } => self.probe_reply(out, m.src, src_is_server, wave, busy, sent, received),
            Message::Probe { wave } if m.src == SEED && self.rank != SEED => {
                self.start_wave(out, wave)
            }
            Message::ServerQuiet if self.rank == SEED && src_is_server => self.server_quiet(m.src),
            Message::Stop if m.src == SEED && self.rank != SEED => self.stop_waiting_clients(out),
            Message::Shutdown if m.src == SEED && self.rank != SEED => {
                self.shutdown = true;
                self.send(out, SEED, &Message::ShutdownAck, Payload::None);
            }
            Message::Drain { wave } if m.src == SEED && self.rank != SEED => {
                let msg = Message::Drained {
                    wave,
                    sent: self.peer_sent,
                    received: self.peer_received,
                };
                self.send(out, SEED, &msg, Payload::None);
            }
            Message::Drained {
                wave,
                sent,
                received,
            } if self.rank == SEED && src_is_server => self.drain.on_report(wave, sent, received),
            Message::ShutdownAck if self.rank == SEED && src_is_server && self.shutdown_sent => {
                self.acks_left = self.acks_left.saturating_sub(1);
            }
            other => tracing::warn!(
                "server {}: dropped {} from {}: not expected here",
                self.rank,
                other.kind(),
                m.src
            ),
        }
    }

    /// The first home server of `chunk` (section 2.3: a modulo on the server
    /// list). It serves MALLOC and LOOKUP, and knows where an adaptive
    /// chunk's home moved ([`Self::current_home`]).
    fn home_of(&self, chunk: u64) -> Rank {
        self.ring.home(chunk)
    }

    /// The server that serves client `client`: its own, or the stand-in of
    /// its server once that is lost (`topology/ring.rs`).
    fn serving(&self, client: Rank) -> Rank {
        self.ring.stand_in(self.topology.server_of(client))
    }

    /// Where `chunk`'s coherence messages go from here: this server when it
    /// holds the chunk's entry; where it moved, when this server was its
    /// first home; else the first home, which forwards them if the chunk
    /// moved (so each process's messages take one path, in order).
    fn current_home(&self, chunk: u64) -> Rank {
        if self.homes.contains_key(&chunk) {
            self.rank
        } else if let Some(&moved) = self.moved.get(&chunk) {
            moved
        } else {
            self.home_of(chunk)
        }
    }

    /// Sends `msg` to client `client`: directly when it is ours, else through
    /// its server (Figure 14's multi-hop path, backwards).
    fn send_to_client(&mut self, out: &mut dyn Sender, client: Rank, msg: &Message) {
        self.send_to_client_with(out, client, msg, Payload::None)
    }

    /// As [`Self::send_to_client`], with a payload. A client of ours that has
    /// left gets nothing: its endpoint may be closed.
    fn send_to_client_with(
        &mut self,
        out: &mut dyn Sender,
        client: Rank,
        msg: &Message,
        payload: Payload<'_>,
    ) {
        if self.is_my_client(client) && self.client_done[client as usize] {
            tracing::debug!("{} for client {client} dropped: it has left", msg.kind());
            if is_notification(msg) {
                self.accounts.count_dropped();
            }
            return;
        }
        let hop = if self.is_my_client(client) {
            if self.hold_notification(out, (client, client), msg, &payload) {
                return;
            }
            if is_notification(msg) {
                self.accounts.count_delivered(client);
            }
            client
        } else if self.topology.get(client).is_some_and(|e| !e.is_server()) {
            let server = self.serving(client);
            if self.hold_notification(out, (client, server), msg, &payload) {
                return;
            }
            server
        } else {
            // Callers check the rank first; this keeps a miss from panicking.
            tracing::warn!(
                "server {}: {} for {client}, which is not a client: dropped",
                self.rank,
                msg.kind()
            );
            return;
        };
        self.send(out, hop, msg, payload);
    }

    /// MALLOC and LOOKUP: served at the chunk's home, forwarded there first.
    fn allocation(
        &mut self,
        out: &mut dyn Sender,
        src: Rank,
        src_is_server: bool,
        chunk: u64,
        client: Rank,
        msg: &Message,
    ) {
        if !self.on_behalf_of(src, src_is_server, client) {
            tracing::warn!(
                "server {}: dropped a {} from {src} for client {client}",
                self.rank,
                msg.kind()
            );
            return;
        }
        let home = self.home_of(chunk);
        if home != self.rank {
            if src_is_server {
                tracing::warn!(
                    "server {}: {} for chunk {chunk} forwarded here, but its home is {home}",
                    self.rank,
                    msg.kind()
                );
            } else {
                tracing::debug!("[{}] forward chunk {chunk} to home {home}", msg.kind());
                self.send(out, home, msg, Payload::None);
            }
            return;
        }
        match *msg {
            Message::Malloc {
                size,
                request,
                protocol,
                label,
                ..
            } => {
                if label != crate::chunk::NO_LABEL && protocol.diffs() {
                    tracing::warn!("server {}: malloc of protected chunk {chunk} with {} refused: its writers would publish diffs of ciphertexts", self.rank, protocol.name());
                    self.answer(out, chunk, (client, request), AllocOutcome::Refused);
                    return;
                }
                if size == 0 || size > crate::chunk::MAX_CHUNK_SIZE as u64 {
                    tracing::warn!("server {}: malloc of chunk {chunk} with {size} bytes refused: out of range", self.rank);
                    // Answered, or the client would wait for nothing.
                    self.answer(out, chunk, (client, request), AllocOutcome::Refused);
                    return;
                }
                if let Some(why) = self.not_replicable(chunk, protocol, label) {
                    tracing::warn!(
                        "server {}: malloc of chunk {chunk} refused: {why}",
                        self.rank
                    );
                    self.answer(out, chunk, (client, request), AllocOutcome::Refused);
                    return;
                }
                let created = self.alloc.size_of(chunk).is_none();
                if self.alloc.size_of(chunk).is_none() && !protocol.known() {
                    tracing::warn!(
                        "server {}: malloc of chunk {chunk} refused: its protocol {protocol:?} is \
                         not registered in this server's process (register the same protocols, in \
                         the same order, in every process; a service's servers know only the \
                         built-in ones)",
                        self.rank
                    );
                    self.answer(out, chunk, (client, request), AllocOutcome::Refused);
                    return;
                }
                if self.alloc.size_of(chunk).is_none() {
                    // A protected chunk stays on the message path even on one
                    // host: clients write a host slot themselves, so only a
                    // release that comes through the home can have its key
                    // epoch checked (`server/epochs.rs`).
                    let protected = label != crate::chunk::NO_LABEL;
                    let host = self.host.as_mut().filter(|_| !protected);
                    let slot = match host.map(|h| h.allocate(size as usize)) {
                        None => None,
                        Some(Ok(slot)) => Some(slot),
                        Some(Err(e)) => {
                            tracing::warn!(
                                "server {}: malloc of chunk {chunk} refused: no host slot for \
                                 {size} bytes: {e}",
                                self.rank
                            );
                            self.answer(out, chunk, (client, request), AllocOutcome::Refused);
                            return;
                        }
                    };
                    let side = protocol.consistency().new_home(size as usize);
                    let adaptive = protocol == ProtocolId::Adaptive && slot.is_none();
                    self.homes.insert(
                        chunk,
                        HomeEntry {
                            slot,
                            epochs: protected.then(epochs::EpochLine::default),
                            adapt: adaptive.then(switch::Adapt::new),
                            ..HomeEntry::new(protocol, side)
                        },
                    );
                    if self.homes[&chunk].slot.is_none() {
                        self.spill.used(chunk, size as usize);
                        self.make_room(chunk);
                    }
                }
                let (outcome, woken) = self.alloc.malloc(chunk, size, protocol, label);
                tracing::debug!(
                    "malloc baseid {chunk} size {size} [{}] for {client}: {outcome}",
                    protocol.name()
                );
                if created && self.homes.contains_key(&chunk) {
                    // A chunk exists once its backup knows it too.
                    self.replicate(out, chunk);
                }
                self.answer_after_backup(out, chunk, (client, request), outcome);
                for (waiter, parked, outcome) in woken {
                    self.answer_after_backup(out, chunk, (waiter, parked), outcome);
                }
            }
            Message::Lookup {
                request, wait_ms, ..
            } => {
                let deadline = self.clock.now() + Duration::from_millis(wait_ms as u64);
                match self.alloc.lookup(chunk, client, request, deadline) {
                    Some(outcome) => {
                        tracing::debug!("lookup chunk {chunk} for {client}: {outcome}");
                        self.answer_after_backup(out, chunk, (client, request), outcome);
                    }
                    None => tracing::debug!(
                        "lookup chunk {chunk} for {client} parked until it is allocated"
                    ),
                }
            }
            _ => unreachable!("only allocation messages come here"),
        }
    }

    /// Sends the home's answer about `chunk` to `client`'s request `request`.
    fn answer(
        &mut self,
        out: &mut dyn Sender,
        chunk: u64,
        (client, request): (Rank, u64),
        outcome: AllocOutcome,
    ) {
        let host = match outcome {
            AllocOutcome::Allocated { .. } => self
                .homes
                .get(&chunk)
                .and_then(|h| h.slot.as_ref())
                .map(|(_, place)| *place),
            _ => None,
        };
        self.send_to_client(
            out,
            client,
            &Message::AllocReply {
                chunk,
                client,
                request,
                outcome,
                host,
            },
        );
    }

    /// A coherence message: a client's goes to the home of its chunk (through
    /// the client's server), the home's answers go back the same way.
    fn coherence(
        &mut self,
        out: &mut dyn Sender,
        m: Received<'_>,
        src_is_server: bool,
        chunk: u64,
        said: switch::Said,
    ) {
        let switch::Said {
            client,
            op,
            epoch,
            after_barrier,
        } = said;
        let msg = Message::Coherence {
            chunk,
            client,
            op,
            epoch,
            after_barrier,
        };
        let for_home = op.from_client();
        if !src_is_server && self.is_my_client(m.src) && self.client_done[m.src as usize] {
            // An acknowledgement sent while the client was leaving: the homes
            // have already stopped waiting for it (ClientLeft).
            tracing::debug!(
                "{op:?} for chunk {chunk} from {} after it left: dropped",
                m.src
            );
            return;
        }
        let legit = if src_is_server {
            client < self.topology.len() && !self.topology.is_server(client)
        } else {
            self.is_my_client(m.src) && client == m.src && for_home
        };
        if !legit {
            tracing::warn!(
                "server {}: dropped a coherence message from {} for client {client}",
                self.rank,
                m.src
            );
            return;
        }
        if !for_home {
            // The home's answer, on its way to one of our clients.
            if self.is_my_client(client) {
                self.send_to_client_with(out, client, &msg, Payload::Copy(m.payload));
            } else {
                tracing::warn!(
                    "server {}: coherence answer for client {client}, not ours",
                    self.rank
                );
            }
            return;
        }
        let home = self.current_home(chunk);
        if home != self.rank {
            if src_is_server && !self.moved.contains_key(&chunk) {
                tracing::warn!(
                    "server {}: chunk {chunk} request forwarded here, but its home is {home}",
                    self.rank
                );
            } else {
                tracing::debug!(
                    "Server switch request ({}) from {client}: chunk {chunk} to home {home}",
                    request_name(op, false)
                );
                self.send(out, home, &msg, Payload::Copy(m.payload));
            }
            return;
        }
        let src = (m.src, src_is_server);
        match self.homes.get(&chunk) {
            Some(entry) if entry.adapt.is_some() => {
                self.at_adaptive_home(out, src, chunk, said, m.payload)
            }
            Some(_) if epoch != 0 || op == CoherenceOp::SwitchAck => tracing::warn!(
                "server {}: chunk {chunk} is not adaptive: {} of epoch {epoch} from {client} \
                 dropped",
                self.rank,
                op.name()
            ),
            _ => self.at_home(out, src, chunk, client, op, m.payload),
        }
    }

    /// A coherence request for `chunk`, homed here, from `client` (sent by
    /// `src`, a server when the bool says so): the home's protocol handles
    /// it and its answers go out.
    fn at_home(
        &mut self,
        out: &mut dyn Sender,
        src: (Rank, bool),
        chunk: u64,
        client: Rank,
        op: CoherenceOp,
        payload: &[u8],
    ) {
        self.home_step(out, src, (chunk, client), op, payload, TellWriter::Durable)
    }

    /// [`ServerState::at_home`], where `tell` says whether the writer of a
    /// release in a run with replicated homes is sent its `Durable` (a
    /// release sent again after a server's loss is not: the writer was told
    /// that it may or may not be published, `server/republish.rs`).
    fn home_step(
        &mut self,
        out: &mut dyn Sender,
        (src, src_is_server): (Rank, bool),
        (chunk, client): (u64, Rank),
        op: CoherenceOp,
        payload: &[u8],
        tell: TellWriter,
    ) {
        if !self.bring_in(chunk) {
            return;
        }
        let replicated = self.replicated();
        let Some(entry) = self.homes.get_mut(&chunk) else {
            tracing::warn!(
                "server {}: coherence request for chunk {chunk}, which nobody allocated",
                self.rank
            );
            return;
        };
        let Some(to_home) = mesi::to_home(op) else {
            tracing::warn!(
                "server {}: chunk {chunk}: {op:?} is not a request; dropped",
                self.rank
            );
            return;
        };
        let mut data = (!payload.is_empty() || to_home.publishes()).then_some(payload);
        // A protected chunk's release outside its line of key epochs
        // publishes the current bytes again (`server/epochs.rs`).
        let kept;
        if let (true, Some(line)) = (to_home.publishes(), entry.epochs.as_mut()) {
            if let Err(why) = line.admit(payload) {
                tracing::warn!(
                    "server {}: release of protected chunk {chunk} by client {client} refused: \
                     {why}; its current version is published again",
                    self.rank
                );
                kept = entry.side.data().clone();
                data = Some(&kept[..]);
            }
        }
        let mut outs = std::mem::take(&mut self.home_out);
        let before = entry.side.version();
        match entry.side.on_message(client, to_home, data, &mut outs) {
            Ok(()) => tracing::debug!(
                "[{}] Server switch request ({}) from {}: chunk {chunk} client {client} \
                 version {} owner {:?}",
                entry.protocol.name(),
                request_name(op, src_is_server),
                src,
                entry.side.version(),
                entry.side.owner()
            ),
            Err(e) => tracing::warn!("server {}: chunk {chunk}: {e}; message dropped", self.rank),
        }
        let released = entry.side.version() > before;
        if replicated {
            // Nothing of this step leaves before the backup holds what it
            // applied (`server/replicas.rs`).
            let version = entry.side.version();
            let data = entry.side.data().clone();
            let subscribed = !entry.subscribers.is_empty();
            if released {
                self.replicate(out, chunk);
            }
            self.answers_after_backup(out, chunk, &mut outs);
            self.home_out = outs;
            if to_home.publishes() && tell == TellWriter::Durable {
                let durable = replicas::Held::Durable { client, version };
                self.send_or_hold(out, chunk, durable);
            }
            if released {
                self.accounts.count_applied(client);
                if subscribed {
                    self.send_or_hold(out, chunk, replicas::Held::Notify { version, data });
                }
            }
            self.make_room(chunk);
            return;
        }
        self.send_home_answers(out, chunk, &mut outs);
        self.home_out = outs;
        if released {
            self.accounts.count_applied(client);
            self.notify_subscribers(out, chunk);
        }
        self.make_room(chunk);
    }

    /// Learned communication sets, as a barrier's round ends here (this
    /// server coordinates it): asks the homes of `chunks` to push `client`
    /// a copy of each ([`crate::protocol::mesi::ToHome::Want`]). Those homed
    /// here are handled now, before the round's answers leave, so the data
    /// reaches the client ahead of its barrier's return; the others go to
    /// their homes in one [`Message::Fetch`] per home.
    pub(crate) fn push_learned(&mut self, out: &mut dyn Sender, client: Rank, chunks: Vec<u64>) {
        let mut elsewhere: BTreeMap<Rank, Vec<u64>> = BTreeMap::new();
        let mut refused = Vec::new();
        for chunk in chunks {
            let home = self.current_home(chunk);
            if home != self.rank {
                elsewhere.entry(home).or_default().push(chunk);
            } else if !self.want(out, client, chunk) {
                refused.push(chunk);
            }
        }
        self.refused_pushes(client, &refused);
        for (home, chunks) in elsewhere {
            for part in chunks.chunks(wire::MAX_FETCH) {
                let msg = Message::Fetch {
                    client,
                    chunks: part.to_vec(),
                };
                self.send(out, home, &msg, Payload::None);
            }
        }
    }

    /// A barrier's coordinator (server `src`) asks for pushes to `client`
    /// of chunks homed here ([`Server::push_learned`]).
    fn fetch(&mut self, out: &mut dyn Sender, src: Rank, client: Rank, chunks: Vec<u64>) {
        if !self.on_behalf_of(src, true, client) || chunks.len() > wire::MAX_FETCH {
            tracing::warn!(
                "server {}: dropped a fetch of {} chunks from {src} for client {client}",
                self.rank,
                chunks.len()
            );
            return;
        }
        // Chunks whose home moved away from here go on to it.
        let (moved, here): (Vec<u64>, Vec<u64>) = chunks
            .into_iter()
            .partition(|chunk| self.moved.contains_key(chunk));
        let mut onward: BTreeMap<Rank, Vec<u64>> = BTreeMap::new();
        for chunk in moved {
            onward.entry(self.moved[&chunk]).or_default().push(chunk);
        }
        for (home, chunks) in onward {
            self.send(out, home, &Message::Fetch { client, chunks }, Payload::None);
        }
        let refused: Vec<u64> = here
            .into_iter()
            .filter(|&chunk| !self.want(out, client, chunk))
            .collect();
        self.refused_pushes(client, &refused);
    }

    /// One line for the pushes of a list that were refused (chunks not
    /// homed here, unknown, or of a protocol that does not learn): a list
    /// comes from a client, which must not flood the log.
    fn refused_pushes(&self, client: Rank, refused: &[u64]) {
        if let Some(first) = refused.first() {
            tracing::warn!(
                "server {}: {} pushes to client {client} asked for (chunk {first} first) \
                 dropped: the chunks are not homed here, unknown, or of a protocol that does \
                 not learn",
                self.rank,
                refused.len()
            );
        }
    }

    /// One push asked for by a barrier's round: only chunks homed here whose
    /// protocol learns take it (the list came from a client). Returns
    /// whether it went to the chunk's home.
    fn want(&mut self, out: &mut dyn Sender, client: Rank, chunk: u64) -> bool {
        // An adaptive chunk pushes only to a client that has talked in its
        // epoch (`server/switch.rs`).
        let learns = self.homes.get(&chunk).is_some_and(|e| {
            e.running().learns() && e.adapt.as_ref().is_none_or(|a| a.may_push(client))
        });
        if !learns {
            return false;
        }
        self.at_home(
            out,
            (self.rank, true),
            chunk,
            client,
            CoherenceOp::Want,
            &[],
        );
        true
    }

    /// Tells every server that `client` (ours) has left, and forgets it
    /// here. On each path the message follows everything the client sent.
    fn announce_departure(&mut self, out: &mut dyn Sender, client: Rank, lost: bool) {
        let left = Message::ClientLeft { client, lost };
        for s in self.ring.alive().collect::<Vec<_>>() {
            if s != self.rank {
                self.send(out, s, &left, Payload::None);
            }
        }
        self.client_left(out, client, self.rank, lost);
        if self.service.is_some() {
            self.await_forgotten(out, client);
        }
    }

    /// A client has left: every home of this server forgets it. In a
    /// service, the locks it held on host slots are freed: it detached or
    /// died, so it cannot let them go itself (a write it had not finished
    /// publishing is not published: see `segment/slot.rs`).
    ///
    /// `src` is the server the news came from. A chunk's home applies it
    /// only when it came the way the client's messages about that chunk
    /// came, so that it follows them all ([`Self::path_of`]): a chunk whose
    /// home moved hears from its first home, which passes the news on.
    fn client_left(&mut self, out: &mut dyn Sender, client: Rank, src: Rank, lost: bool) {
        let first_hand = src == self.serving(client);
        if first_hand {
            if lost && self.recovery.is_some() {
                let mut answers = Vec::new();
                self.coordinator.client_lost(client, &mut answers);
                for (to, op) in answers {
                    self.send_to_client(out, to, &Message::Sync { client: to, op });
                }
            } else {
                self.coordinator.client_left(client);
            }
            self.alloc.client_left(client);
            if src != self.rank {
                let onward: std::collections::BTreeSet<Rank> =
                    self.moved.values().copied().filter(|&h| h != src).collect();
                for home in onward {
                    let msg = Message::ClientLeft { client, lost };
                    self.send(out, home, &msg, Payload::None);
                }
            }
        }
        let reader = self
            .outlives_clients()
            .then(|| host::service_reader(self.topology, client))
            .flatten();
        let chunks: Vec<u64> = (self.homes.keys().copied())
            .filter(|&chunk| self.path_of(chunk, client) == src)
            .collect();
        let mut outs = std::mem::take(&mut self.home_out);
        let mut untold = Vec::new();
        for chunk in chunks {
            let entry = self.homes.get_mut(&chunk).expect("listed");
            if let (Some((slot, _)), Some(reader)) = (&entry.slot, reader) {
                if slot.slot().free_holder(client, reader) {
                    tracing::warn!(
                        "server {}: client {client} left holding a lock on chunk {chunk}'s host \
                         slot: freed (the chunk keeps its last released version)",
                        self.rank
                    );
                }
                // A release it made into the slot whose `Published` died
                // with it: the version is there, its subscribers hear of it.
                let held = slot.slot().peek_version();
                if held > entry.published && !entry.subscribers.is_empty() {
                    // (A newer version than the one read is told by its
                    // own releaser.)
                    if let Some(bytes) = slot.slot().read_settled(held) {
                        untold.push((chunk, held, bytes));
                    }
                }
            }
            entry.subscribers.remove(&client);
            entry.subscribers_changed();
            entry.side.client_left(client, &mut outs);
            self.answers_after_backup(out, chunk, &mut outs);
            self.switch_client_left(out, chunk, client);
        }
        self.home_out = outs;
        for (chunk, version, bytes) in untold {
            tracing::debug!(
                "chunk {chunk}: version {version} in its host slot was not told; telling its \
                 subscribers now that client {client} left"
            );
            if let Some(entry) = self.homes.get_mut(&chunk) {
                entry.published = version;
            }
            self.notify(out, chunk, version, Some(std::sync::Arc::from(bytes)));
        }
    }

    /// The server `client`'s messages about `chunk`, homed here, arrive
    /// from (this one for its own clients): the client's server, or, for a
    /// chunk whose home moved here, its first home, which forwards them.
    fn path_of(&self, chunk: u64, client: Rank) -> Rank {
        let server = self.serving(client);
        let first = self.home_of(chunk);
        if server == self.rank || first == self.rank {
            server
        } else {
            first
        }
    }

    /// Sends what a home produced for `chunk`, each to its client's server.
    fn send_home_answers(
        &mut self,
        out: &mut dyn Sender,
        chunk: u64,
        outs: &mut Vec<Out<ToClient>>,
    ) {
        let entry = self.homes.get_mut(&chunk);
        let epoch = entry.as_ref().map_or(0, |e| e.epoch());
        if let Some(adapt) = entry.and_then(|e| e.adapt.as_mut()) {
            for o in outs.iter() {
                adapt.sent_to(o.to);
            }
        }
        for o in outs.drain(..) {
            let answer = Message::Coherence {
                chunk,
                client: o.to,
                op: o.msg.into(),
                epoch,
                after_barrier: false,
            };
            let payload = match &o.data {
                Some(d) => Payload::Shared(d),
                None => Payload::None,
            };
            self.send_to_client_with(out, o.to, &answer, payload);
        }
    }

    /// Answers the LOOKUPs whose time ran out.
    fn expire_lookups(&mut self, out: &mut dyn Sender) {
        for (chunk, client, request) in self.alloc.expire(self.clock.now()) {
            tracing::debug!("lookup chunk {chunk} for {client}: nobody allocated it in time");
            self.answer(out, chunk, (client, request), AllocOutcome::NotAllocated);
        }
    }

    fn relay(
        &mut self,
        out: &mut dyn Sender,
        m: Received<'_>,
        src_is_server: bool,
        from: Rank,
        to: Rank,
        tag: u32,
    ) {
        let size = self.topology.len();
        // A client may only speak for itself; servers only forward.
        let legit = if src_is_server {
            from < size
        } else {
            self.is_my_client(m.src) && from == m.src
        };
        if !legit || to >= size || self.topology.is_server(to) {
            tracing::warn!(
                "server {}: dropped a relay from {} ({from} -> {to}): not a valid route",
                self.rank,
                m.src
            );
            return;
        }
        let msg = Message::Relay { from, to, tag };
        if self.is_my_client(to) {
            if self.client_done[to as usize] {
                tracing::debug!("relay {from} -> {to} dropped: client {to} has finished");
                return;
            }
            self.send(out, to, &msg, Payload::Copy(m.payload));
        } else if !src_is_server {
            // Multi-hop: to the server of the destination client.
            let next = self.serving(to);
            self.send(out, next, &msg, Payload::Copy(m.payload));
        } else {
            tracing::warn!(
                "server {}: relay for {to} arrived from server {} but {to} is not mine",
                self.rank,
                m.src
            );
        }
    }
}

#[cfg(test)]
mod tests {
    //! The relay and the termination protocol over the in-process transport:
    //! one thread per rank, messages delayed and reordered under a seed.

    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::client::Client;
    use crate::transport::mem::{MemNetwork, MemTransport, Schedule};

    const TWO_SERVERS: &str = r#"<?xml version="1.0"?>
<SAT><topologies>
  <topology id="0" role="0"><memory capacity="0"/><clients><intlist>2 3</intlist></clients></topology>
  <topology id="1" role="0"><memory capacity="0"/><clients><intlist>4 5</intlist></clients></topology>
  <topology id="2" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="3" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="4" role="1"><memory capacity="0"/><servers><intlist>1</intlist></servers></topology>
  <topology id="5" role="1"><memory capacity="0"/><servers><intlist>1</intlist></servers></topology>
</topologies></SAT>"#;

    fn run_all(schedule: Schedule, rounds: u32) -> MemNetwork {
        let topology = Arc::new(Topology::parse(TWO_SERVERS, "two servers").unwrap());
        let (net, endpoints) = MemNetwork::new(topology.len(), schedule);
        let policy = IdlePolicy {
            busy: true,
            ..IdlePolicy::default()
        };
        let mut threads = Vec::new();
        for mut ep in endpoints {
            let topology = topology.clone();
            let rank = ep.rank();
            threads.push(std::thread::spawn(move || {
                if topology.is_server(rank) {
                    run(&topology, &mut ep, policy).unwrap();
                    return;
                }
                let clients = topology.clients();
                let client = Client::new(topology, Box::new(ep));
                for round in 0..rounds {
                    for &to in &clients {
                        client.send(to, round, &[rank as u8, round as u8]).unwrap();
                    }
                    let mut next = vec![0u32; clients.len() + 2];
                    for _ in 0..clients.len() {
                        let m = client
                            .recv_timeout(Duration::from_secs(30))
                            .unwrap()
                            .expect("a message");
                        // Per-sender order survives the two hops.
                        assert!(m.tag >= next[m.from as usize]);
                        next[m.from as usize] = m.tag;
                        assert_eq!(m.data, vec![m.from as u8, m.tag as u8]);
                    }
                }
                client.finish(Duration::from_secs(30)).unwrap();
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        net
    }

    #[test]
    fn relays_across_servers_and_terminates() {
        let net = run_all(Schedule::Immediate, 5);
        // Every client sends to 4 clients per round: 2 of them via the other
        // server. Relay: 4 clients x 5 rounds x (4 + 2 forwarded + 4 delivered)
        // messages, plus termination: 4 x 2 (done, ack), 4 x 1 (the client
        // left, told to the other server), 1 (server done), 4 (the drain: two
        // waves that agree, each a Drain and its Drained), 2 (shutdown, ack).
        assert_eq!(net.messages_sent(), 4 * 5 * (4 + 2 + 4) + 8 + 4 + 1 + 4 + 2);
        assert_eq!(net.in_flight(), 0);
    }

    #[test]
    fn terminates_under_random_delays() {
        for seed in 0..20 {
            let net = run_all(
                Schedule::Random {
                    seed,
                    max_delay_polls: 5,
                },
                3,
            );
            assert_eq!(net.in_flight(), 0, "seed {seed}");
        }
    }

    #[test]
    fn hostile_messages_are_dropped_and_the_run_goes_on() {
        let topology = Topology::parse(TWO_SERVERS, "two servers").unwrap();
        let (_net, mut client2, mut server0) = client2_and_server0(&topology);
        let mut hdr = [0u8; MAX_HEADER];
        // Garbage, a spoofed relay (client 2 claiming to be 3), a relay to a
        // server, and a ServerDone from a client.
        client2.send(0, &[0xff, 0xff, 0xff], Payload::None).unwrap();
        for msg in [
            Message::Relay {
                from: 3,
                to: 4,
                tag: 0,
            },
            Message::Relay {
                from: 2,
                to: 1,
                tag: 0,
            },
            Message::ServerDone,
            Message::Relay {
                from: 2,
                to: 99,
                tag: 0,
            },
            // Allocation requests in another client's name.
            Message::Malloc {
                chunk: 0,
                size: 8,
                client: 3,
                request: 0,
                protocol: ProtocolId::HomeMesi,
                label: crate::chunk::NO_LABEL,
            },
            Message::Lookup {
                chunk: 0,
                client: 4,
                request: 0,
                wait_ms: 0,
            },
            // A coherence request in another's name, one for a chunk nobody
            // allocated, and a home's answer sent by a client.
            Message::Coherence {
                chunk: 0,
                client: 3,
                op: CoherenceOp::ReadReq { have: None },
                epoch: 0,
                after_barrier: false,
            },
            Message::Coherence {
                chunk: 0,
                client: 2,
                op: CoherenceOp::WriteReq {
                    have: None,
                    need_data: true,
                },
                epoch: 0,
                after_barrier: false,
            },
            Message::Coherence {
                chunk: 0,
                client: 2,
                op: CoherenceOp::Inval,
                epoch: 0,
                after_barrier: false,
            },
            // Synchronization in another's name, a coordinator's answer and
            // a notification sent by a client, and the seed's own messages.
            Message::Sync {
                client: 3,
                op: crate::wire::SyncOp::Wakeup { id: 0, ticket: 0 },
            },
            Message::Sync {
                client: 2,
                op: crate::wire::SyncOp::BarrierDone { id: 0, ticket: 0 },
            },
            Message::Notify {
                chunk: 0,
                client: 2,
                version: 1,
                with_data: false,
            },
            Message::Subscribe {
                chunk: 0,
                client: 4,
                with_data: false,
            },
            Message::Probe { wave: 1 },
            Message::Stop,
            Message::ServerQuiet,
            Message::ProbeReply {
                wave: 1,
                busy: false,
                sent: 0,
                received: 0,
            },
            // A barrier coordinator's request for pushes, sent by a client,
            // and a push asked for a chunk nobody allocated.
            Message::Fetch {
                client: 2,
                chunks: vec![0, 2],
            },
            Message::Coherence {
                chunk: 0,
                client: 2,
                op: CoherenceOp::Want,
                epoch: 0,
                after_barrier: false,
            },
        ] {
            let n = wire::encode(&msg, &mut hdr).unwrap();
            client2.send(0, &hdr[..n], Payload::None).unwrap();
        }
        let mut st = ServerState::new(&topology, 0, None, Clock::Real, None);
        let n = server0
            .poll(&mut |out: &mut dyn Sender, m: Received<'_>| st.handle(out, m))
            .unwrap();
        assert_eq!(n, 20);
        assert_eq!(st.servers_left, 2, "a client cannot declare a server done");
        assert_eq!(
            _net.messages_sent(),
            20,
            "nothing was forwarded or answered"
        );
        assert!(st.homes.is_empty());
        assert!(!st.alloc.has_parked() && st.alloc.size_of(0).is_none());
    }

    /// A server of `topology` at `rank`, as `serve` builds it, without the
    /// loop: tests feed it messages one poll at a time.
    fn server_state(
        topology: &Topology,
        rank: Rank,
        service: Option<ServiceSide>,
    ) -> ServerState<'_> {
        ServerState::new(topology, rank, service, Clock::Real, None)
    }

    /// The two-server topology's network with client 2's and server 0's
    /// endpoints taken out (client 2 is server 0's): the pair these tests
    /// feed messages through by hand.
    fn client2_and_server0(topology: &Topology) -> (MemNetwork, MemTransport, MemTransport) {
        let (net, mut eps) = MemNetwork::new(topology.len(), Schedule::Immediate);
        let client2 = eps.remove(2);
        let server0 = eps.remove(0);
        (net, client2, server0)
    }

    /// Sends `msg` (with `payload`) from client 2 to server 0, lets `st`
    /// handle what arrives, and returns what client 2 receives.
    fn exchange(
        st: &mut ServerState<'_>,
        (client2, server0): (&mut MemTransport, &mut MemTransport),
        msg: &Message,
        payload: &[u8],
    ) -> Vec<Message> {
        let mut hdr = [0u8; MAX_HEADER];
        let n = wire::encode(msg, &mut hdr).unwrap();
        let payload = if payload.is_empty() {
            Payload::None
        } else {
            Payload::Copy(payload)
        };
        client2.send(0, &hdr[..n], payload).unwrap();
        server0
            .poll(&mut |out: &mut dyn Sender, m: Received<'_>| st.handle(out, m))
            .unwrap();
        let mut answers = Vec::new();
        client2
            .poll(&mut |_, m| answers.push(wire::decode(m.header).unwrap()))
            .unwrap();
        answers
    }

    /// Sends each message from `from` to `st`'s endpoint and lets `st`
    /// handle it, one poll per message. Returns the messages whose handling
    /// panicked.
    fn feed(
        st: &mut ServerState<'_>,
        server: &mut dyn Transport,
        from: &mut dyn Transport,
        msgs: &[Message],
    ) -> Vec<String> {
        let mut hdr = [0u8; MAX_HEADER];
        let mut panicked = Vec::new();
        for msg in msgs {
            let n = wire::encode(msg, &mut hdr).unwrap();
            from.send(st.rank, &hdr[..n], Payload::None).unwrap();
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                server.poll(&mut |out: &mut dyn Sender, m: Received<'_>| st.handle(out, m))
            }));
            match polled {
                Ok(Ok(1)) => {}
                Ok(other) => panic!("{msg:?}: poll gave {other:?}"),
                Err(_) => panicked.push(format!("{msg:?}")),
            }
        }
        panicked
    }

    /// Every message that names a client, from a server, with a client rank
    /// outside the topology.
    fn out_of_range_clients(topology: &Topology) -> Vec<Message> {
        let mut msgs = Vec::new();
        for c in [topology.len(), 99, u32::MAX] {
            msgs.extend([
                Message::Malloc {
                    chunk: 0,
                    size: 8,
                    client: c,
                    request: 0,
                    protocol: ProtocolId::HomeMesi,
                    label: crate::chunk::NO_LABEL,
                },
                Message::Lookup {
                    chunk: 0,
                    client: c,
                    request: 0,
                    wait_ms: 0,
                },
                Message::AllocReply {
                    chunk: 0,
                    client: c,
                    request: 0,
                    outcome: AllocOutcome::NotAllocated,
                    host: None,
                },
                Message::Coherence {
                    chunk: 0,
                    client: c,
                    op: CoherenceOp::ReadReq { have: None },
                    epoch: 0,
                    after_barrier: false,
                },
                Message::Coherence {
                    chunk: 0,
                    client: c,
                    op: CoherenceOp::Inval,
                    epoch: 0,
                    after_barrier: false,
                },
                Message::ClientLeft {
                    client: c,
                    lost: true,
                },
                Message::Sync {
                    client: c,
                    op: crate::wire::SyncOp::Wakeup { id: 0, ticket: 0 },
                },
                Message::Sync {
                    client: c,
                    op: crate::wire::SyncOp::BarrierDone { id: 0, ticket: 0 },
                },
                Message::Subscribe {
                    chunk: 0,
                    client: c,
                    with_data: false,
                },
                Message::Unsubscribe {
                    chunk: 0,
                    client: c,
                },
                Message::Subscribed {
                    chunk: 0,
                    client: c,
                },
                Message::Notify {
                    chunk: 0,
                    client: c,
                    version: 1,
                    with_data: false,
                },
                Message::Relay {
                    from: c,
                    to: 2,
                    tag: 0,
                },
                Message::Relay {
                    from: 4,
                    to: c,
                    tag: 0,
                },
                Message::Admit { client: c },
                Message::Admitted {
                    client: c,
                    refused: String::new(),
                },
                Message::ClientLost { client: c },
                Message::ClientForgotten { client: c },
                Message::SlotFree { client: c },
            ]);
        }
        msgs
    }

    /// Membership messages about real clients, which only a service
    /// exchanges.
    fn membership(client: Rank) -> Vec<Message> {
        vec![
            Message::Admit { client },
            Message::Admitted {
                client,
                refused: String::new(),
            },
            Message::ClientLost { client },
            Message::ClientForgotten { client },
            Message::SlotFree { client },
        ]
    }

    #[test]
    fn bad_client_ranks_from_servers_are_dropped_not_panics() {
        let topology = Topology::parse(TWO_SERVERS, "two servers").unwrap();
        for in_service in [false, true] {
            let service = || in_service.then(|| ServiceSide::new(None));
            // The seed hears from server 1, and server 1 from the seed (the
            // only sender of Admit and ClientLost).
            for (rank, from) in [(0, 1), (1, 0)] {
                let (net, mut eps) = MemNetwork::new(topology.len(), Schedule::Immediate);
                let mut st = server_state(&topology, rank, service());
                let mut msgs = out_of_range_clients(&topology);
                if !in_service {
                    // Membership messages outside a service, about a client of
                    // the receiver and about one of the sender.
                    msgs.extend(membership(topology.clients_of(rank)[0]));
                    msgs.extend(membership(topology.clients_of(from)[0]));
                }
                let (lo, hi) = eps.split_at_mut(1);
                let (server, sender) = if rank == 0 {
                    (&mut lo[0], &mut hi[0])
                } else {
                    (&mut hi[0], &mut lo[0])
                };
                let panicked = feed(&mut st, server, sender, &msgs);
                assert!(
                    panicked.is_empty(),
                    "server {rank} (service: {in_service}) panicked on {} messages from {from}:\n{}",
                    panicked.len(),
                    panicked.join("\n")
                );
                assert_eq!(
                    net.messages_sent(),
                    msgs.len() as u64,
                    "server {rank} (service: {in_service}) answered or forwarded something"
                );
                assert!(st.homes.is_empty() && !st.alloc.has_parked());
            }
        }
    }

    /// A protected (labelled) chunk gets no host slot even where plain ones
    /// do, and its home takes a release only under the chunk's newest key
    /// epoch or a new child of it; any other release publishes the current
    /// bytes again (`server/epochs.rs`).
    #[test]
    fn a_protected_chunk_keeps_its_key_epochs_in_order() {
        use crate::chunk::sealed;
        let topology = Topology::parse(TWO_SERVERS, "two servers").unwrap();
        let (_net, mut client2, mut server0) = client2_and_server0(&topology);
        let mut st = ServerState::new(
            &topology,
            0,
            None,
            Clock::Real,
            Some(host::Backing::Private),
        );
        const SIZE: usize = 200;
        let version = |epoch: u64, parent: u64| {
            let mut b = vec![0x5au8; SIZE];
            b[..4].copy_from_slice(&sealed::MAGIC);
            b[4] = sealed::FORMAT;
            b[sealed::EPOCH].copy_from_slice(&epoch.to_le_bytes());
            b[sealed::PARENT].copy_from_slice(&parent.to_le_bytes());
            b
        };
        let mut step = |st: &mut ServerState<'_>, msg: Message, payload: &[u8]| {
            exchange(st, (&mut client2, &mut server0), &msg, payload)
        };
        let malloc = |chunk: u64, label| Message::Malloc {
            chunk,
            size: SIZE as u64,
            client: 2,
            request: chunk,
            protocol: ProtocolId::HomeMesi,
            label,
        };
        let host_of = |answers: Vec<Message>| match answers.as_slice() {
            [Message::AllocReply { host, .. }] => *host,
            other => panic!("expected an allocation answer, got {other:?}"),
        };
        let plain = step(&mut st, malloc(2, crate::chunk::NO_LABEL), &[]);
        assert!(host_of(plain).is_some(), "a plain chunk gets a host slot");
        let protected = step(&mut st, malloc(0, [7; 32]), &[]);
        assert!(host_of(protected).is_none(), "a protected chunk gets none");
        let coherence = |op| Message::Coherence {
            chunk: 0,
            client: 2,
            op,
            epoch: 0,
            after_barrier: false,
        };
        let write = coherence(CoherenceOp::WriteReq {
            have: None,
            need_data: true,
        });
        // Epoch 1 (first), epoch 2 over it, epoch 2 again: taken.
        let line = [(1, 0), (2, 1), (2, 1)];
        for (v, &(epoch, parent)) in line.iter().enumerate() {
            step(&mut st, write.clone(), &[]);
            let release = coherence(CoherenceOp::Release {
                version: v as u64 + 1,
            });
            step(&mut st, release, &version(epoch, parent));
            assert_eq!(
                st.homes[&0].current(),
                (v as u64 + 1, version(epoch, parent).into())
            );
        }
        // Epoch 1 again (naming its own parent, then the newest), a new
        // epoch over the old one, bytes that are no sealed version: each
        // publishes epoch 2's bytes again, under the next version.
        let refused = [version(1, 0), version(1, 2), version(3, 1), vec![0u8; SIZE]];
        for (i, bytes) in refused.iter().enumerate() {
            let v = line.len() as u64 + i as u64 + 1;
            step(&mut st, write.clone(), &[]);
            step(
                &mut st,
                coherence(CoherenceOp::Release { version: v }),
                bytes,
            );
            assert_eq!(
                st.homes[&0].current(),
                (v, version(2, 1).into()),
                "release {v}"
            );
        }
        // A new epoch over the newest: taken.
        let v = (line.len() + refused.len()) as u64 + 1;
        step(&mut st, write.clone(), &[]);
        step(
            &mut st,
            coherence(CoherenceOp::Release { version: v }),
            &version(4, 2),
        );
        assert_eq!(st.homes[&0].current(), (v, version(4, 2).into()));
    }

    /// A MALLOC of 0 bytes or above the largest chunk, sent raw (the client
    /// API refuses both before sending), is answered with a refusal.
    #[test]
    fn a_malloc_of_a_size_out_of_range_is_refused() {
        let topology = Topology::parse(TWO_SERVERS, "two servers").unwrap();
        let (net, mut client2, mut server0) = client2_and_server0(&topology);
        let mut st = server_state(&topology, 0, None);
        let sizes = [0, 2 << 30, crate::chunk::MAX_CHUNK_SIZE as u64 + 1];
        let mut answers = Vec::new();
        for (request, &size) in sizes.iter().enumerate() {
            let msg = Message::Malloc {
                chunk: 0,
                size,
                client: 2,
                request: request as u64,
                protocol: ProtocolId::HomeMesi,
                label: crate::chunk::NO_LABEL,
            };
            answers.extend(exchange(&mut st, (&mut client2, &mut server0), &msg, &[]));
        }
        let refused = |request: u64| Message::AllocReply {
            chunk: 0,
            client: 2,
            request,
            outcome: AllocOutcome::Refused,
            host: None,
        };
        assert_eq!(answers, vec![refused(0), refused(1), refused(2)]);
        assert!(st.homes.is_empty() && st.alloc.size_of(0).is_none());
        assert_eq!(net.messages_sent(), 6);
    }

    /// Servers 0, 1 and 2, with clients 3, 4 and 5 in that order.
    const THREE_SERVERS: &str = r#"<?xml version="1.0"?>
<SAT><topologies>
  <topology id="0" role="0"><memory capacity="0"/><clients><intlist>3</intlist></clients></topology>
  <topology id="1" role="0"><memory capacity="0"/><clients><intlist>4</intlist></clients></topology>
  <topology id="2" role="0"><memory capacity="0"/><clients><intlist>5</intlist></clients></topology>
  <topology id="3" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="4" role="1"><memory capacity="0"/><servers><intlist>1</intlist></servers></topology>
  <topology id="5" role="1"><memory capacity="0"/><servers><intlist>2</intlist></servers></topology>
</topologies></SAT>"#;

    #[test]
    fn a_moved_home_hears_of_a_departure_on_the_path_of_the_clients_messages() {
        // Chunk 1's first home is server 1; it moved to server 2. Client 3
        // (server 0's) talks to it through server 1, which forwards. Its
        // server's news of its departure, sent to server 2 directly, can
        // arrive before the client's last release (still on its way through
        // server 1): the home must wait for the news server 1 passes on.
        let topology = Topology::parse(THREE_SERVERS, "three servers").unwrap();
        let (net, mut eps) = MemNetwork::new(topology.len(), Schedule::Immediate);
        let mut st = server_state(&topology, 2, None);
        let mut hdr = [0u8; MAX_HEADER];
        let mut deliver = |st: &mut ServerState<'_>, from: Rank, msg: &Message, payload: &[u8]| {
            let n = wire::encode(msg, &mut hdr).unwrap();
            let payload = if payload.is_empty() {
                Payload::None
            } else {
                Payload::Copy(payload)
            };
            eps[from as usize]
                .send(st.rank, &hdr[..n], payload)
                .unwrap();
            let to = st.rank as usize;
            eps[to]
                .poll(&mut |out: &mut dyn Sender, m: Received<'_>| st.handle(out, m))
                .unwrap();
        };
        let handover = Message::Handover {
            chunk: 1,
            epoch: 1,
            running: ProtocolId::HomeMesi,
            version: 0,
            size: 8,
            published: 0,
        };
        deliver(&mut st, 1, &handover, &[0; 8]);
        let said = |op| Message::Coherence {
            chunk: 1,
            client: 3,
            op,
            epoch: 1,
            after_barrier: false,
        };
        let write = said(CoherenceOp::WriteReq {
            have: None,
            need_data: false,
        });
        deliver(&mut st, 1, &write, &[]);
        assert_eq!(st.homes[&1].side.owner(), Some(3));
        // The news from the client's own server first: not applied to the
        // moved chunk.
        deliver(
            &mut st,
            0,
            &Message::ClientLeft {
                client: 3,
                lost: false,
            },
            &[],
        );
        assert_eq!(st.homes[&1].side.owner(), Some(3));
        // The release through the first home, then the news it passes on.
        let release = said(CoherenceOp::Release { version: 1 });
        deliver(&mut st, 1, &release, &[7; 8]);
        assert_eq!(st.homes[&1].side.version(), 1, "the release was applied");
        deliver(
            &mut st,
            1,
            &Message::ClientLeft {
                client: 3,
                lost: false,
            },
            &[],
        );
        assert_eq!(st.homes[&1].side.owner(), None);
        // The first home passes the news on to where its chunks moved.
        let mut first = server_state(&topology, 1, None);
        first.moved.insert(1, 2);
        let before = net.messages_between(1, 2);
        deliver(
            &mut first,
            0,
            &Message::ClientLeft {
                client: 3,
                lost: false,
            },
            &[],
        );
        assert_eq!(net.messages_between(1, 2), before + 1);
        // A handover from a server that is not the chunk's first home, or
        // of a chunk already here, is refused.
        let mut other = server_state(&topology, 0, None);
        deliver(&mut other, 2, &handover, &[0; 8]);
        assert!(other.homes.is_empty());
        deliver(&mut st, 1, &handover, &[9; 8]);
        assert_eq!(st.homes[&1].side.data()[..], [7; 8]);
    }

    #[test]
    fn switch_traffic_out_of_place_is_dropped_and_the_chunk_goes_on() {
        let topology = Topology::parse(TWO_SERVERS, "two servers").unwrap();
        let (_net, mut client2, mut server0) = client2_and_server0(&topology);
        let mut st = server_state(&topology, 0, None);
        // Chunk 0 adaptive, chunk 2 MESI, both homed on server 0.
        for (request, (chunk, protocol)) in [(0, ProtocolId::Adaptive), (2, ProtocolId::HomeMesi)]
            .into_iter()
            .enumerate()
        {
            let msg = Message::Malloc {
                chunk,
                size: 8,
                client: 2,
                request: request as u64,
                protocol,
                label: crate::chunk::NO_LABEL,
            };
            let answer = exchange(&mut st, (&mut client2, &mut server0), &msg, &[]);
            assert_eq!(answer.len(), 1);
        }
        let said = |chunk, op, epoch| Message::Coherence {
            chunk,
            client: 2,
            op,
            epoch,
            after_barrier: false,
        };
        let read = CoherenceOp::ReadReq { have: None };
        for hostile in [
            // An acknowledgement of a switch nobody started, a request in an
            // epoch the chunk has not reached, a home's switch sent by a
            // client, and epochs on a chunk that is not adaptive.
            said(0, CoherenceOp::SwitchAck, 1),
            said(0, read, 3),
            said(
                0,
                CoherenceOp::Switch {
                    protocol: ProtocolId::HomeOnly,
                },
                1,
            ),
            said(2, read, 1),
            said(2, CoherenceOp::SwitchAck, 0),
        ] {
            let got = exchange(&mut st, (&mut client2, &mut server0), &hostile, &[]);
            assert!(got.is_empty(), "{hostile:?} was answered: {got:?}");
        }
        let entry = &st.homes[&0];
        assert_eq!((entry.epoch(), entry.running()), (0, ProtocolId::HomeMesi));
        // The chunk still serves its epoch's requests.
        let got = exchange(
            &mut st,
            (&mut client2, &mut server0),
            &said(0, read, 0),
            &[],
        );
        assert!(
            matches!(
                got[..],
                [Message::Coherence {
                    op: CoherenceOp::ReadGrant { .. },
                    epoch: 0,
                    ..
                }]
            ),
            "{got:?}"
        );
    }

    /// A transport whose sends to one rank are refused, also the answers
    /// sent from inside a poll.
    struct Refusing<'a> {
        inner: &'a mut dyn Transport,
        to: Rank,
    }

    struct RefusingSender<'a> {
        inner: &'a mut dyn Sender,
        to: Rank,
    }

    impl Sender for RefusingSender<'_> {
        fn send(
            &mut self,
            dest: Rank,
            header: &[u8],
            payload: Payload<'_>,
        ) -> Result<(), TransportError> {
            if dest == self.to {
                return Err(TransportError::Fabric {
                    call: "fi_tsend",
                    code: 5,
                    message: "a send failure the test asked for".into(),
                });
            }
            self.inner.send(dest, header, payload)
        }
    }

    impl Sender for Refusing<'_> {
        fn send(
            &mut self,
            dest: Rank,
            header: &[u8],
            payload: Payload<'_>,
        ) -> Result<(), TransportError> {
            let to = self.to;
            RefusingSender {
                inner: &mut *self.inner,
                to,
            }
            .send(dest, header, payload)
        }
    }

    impl Transport for Refusing<'_> {
        fn rank(&self) -> Rank {
            self.inner.rank()
        }
        fn size(&self) -> u32 {
            self.inner.size()
        }
        fn poll(
            &mut self,
            on_message: &mut dyn FnMut(&mut dyn Sender, Received<'_>),
        ) -> Result<usize, TransportError> {
            let to = self.to;
            self.inner
                .poll(&mut |out, m| on_message(&mut RefusingSender { inner: out, to }, m))
        }
        fn messages_sent(&self) -> u64 {
            self.inner.messages_sent()
        }
        fn sends_drained(&mut self) -> Result<bool, TransportError> {
            self.inner.sends_drained()
        }
    }

    /// A service's homes keep versions in host slots with two buffers, and
    /// free the locks a client held when it is lost: a write it had begun
    /// to copy in is not published, and its read lock no longer keeps a
    /// writer out.
    #[test]
    fn a_service_frees_the_host_slot_locks_of_a_lost_client() {
        let topology = Topology::parse(TWO_SERVERS, "two servers").unwrap();
        let (_net, mut client2, mut server0) = client2_and_server0(&topology);
        let mut st = ServerState::new(
            &topology,
            0,
            Some(ServiceSide::new(None)),
            Clock::Real,
            Some(host::Backing::Private),
        );
        st.client_done[2] = false;
        const SIZE: usize = 100;
        let msg = Message::Malloc {
            chunk: 2,
            size: SIZE as u64,
            client: 2,
            request: 0,
            protocol: ProtocolId::HomeMesi,
            label: crate::chunk::NO_LABEL,
        };
        let answers = exchange(&mut st, (&mut client2, &mut server0), &msg, &[]);
        let place = match answers.as_slice() {
            [Message::AllocReply {
                host: Some(place), ..
            }] => *place,
            other => panic!("expected an allocation answer with a host slot, got {other:?}"),
        };
        assert!(
            place.capacity as usize >= crate::segment::double_capacity(SIZE),
            "a service's slot holds two buffers"
        );
        let slot = crate::segment::Segments::default().open(&place).unwrap();
        let s = slot.slot();
        let (reader2, reader3) = (
            host::service_reader(&topology, 2).unwrap(),
            host::service_reader(&topology, 3).unwrap(),
        );
        assert_ne!(reader2, reader3);
        // SAFETY (each block below): the locks are taken just before.
        assert!(s.try_lock_write(2));
        assert_eq!(unsafe { s.publish_held(&[1; SIZE]) }, Ok(1));
        // Client 2 still holds the write lock after its release (a scope,
        // or a release half copied in) and dies holding it.
        assert!(!s.try_lock_read(reader3));
        st.client_lost(&mut server0, 2, "a test");
        assert!(s.try_lock_read(reader3), "the lost writer's lock is freed");
        assert_eq!(s.peek_version(), 1);
        assert_eq!(unsafe { s.held_bytes() }, &[1; SIZE][..]);
        unsafe { s.unlock_read(reader3) };
        // The slot's client comes back (a new process in slot 2), reads,
        // and dies inside its read scope.
        st.client_done[2] = false;
        assert!(s.try_lock_read(reader2));
        assert!(!s.try_lock_write(3), "a reader keeps the writer out");
        st.client_lost(&mut server0, 2, "a test");
        assert!(s.try_lock_write(3), "the lost reader's lock is freed");
    }

    /// An answer the transport refuses would leave its client waiting
    /// forever. Outside a service the server ends with an error naming the
    /// client (the launcher then stops the run); a service forgets the
    /// client, as one that died.
    #[test]
    fn a_refused_answer_is_the_loss_of_its_client() {
        let topology = Topology::parse(TWO_SERVERS, "two servers").unwrap();
        for in_service in [false, true] {
            let (_net, mut client2, mut server0) = client2_and_server0(&topology);
            let service = in_service.then(|| ServiceSide::new(None));
            let mut server = Server::new(&topology, 0, service, Clock::Real, None);
            server.st.client_done[2] = false;
            // A MALLOC of 0 bytes, answered at once by a refusal.
            let msg = Message::Malloc {
                chunk: 0,
                size: 0,
                client: 2,
                request: 0,
                protocol: ProtocolId::HomeMesi,
                label: crate::chunk::NO_LABEL,
            };
            let mut hdr = [0u8; MAX_HEADER];
            let n = wire::encode(&msg, &mut hdr).unwrap();
            client2.send(0, &hdr[..n], Payload::None).unwrap();
            let stepped = server.step(&mut Refusing {
                inner: &mut server0,
                to: 2,
            });
            if in_service {
                assert!(stepped.is_ok(), "{:?}", stepped.err());
                assert!(server.st.client_done[2], "the service forgot client 2");
            } else {
                let e = stepped.expect_err("the server ends").to_string();
                assert!(
                    e.contains("rank 2") && e.contains("could not be sent"),
                    "{e}"
                );
            }
        }
    }
}
