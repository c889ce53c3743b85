//! A simulated run: its topology, servers and clients, the scheduling loop,
//! and the invariants checked after every step.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::scheduler::{Scheduler, Teardown};
use super::workload::{self, ClientPlan, Fault, Faulty, ThreadOutcome};
use super::{content, Config, Failure, Outcome, Rng};
use crate::client::Client;
use crate::progress::Clock;
use crate::protocol::Version;
use crate::server::{Server, ServiceSide, Step};
use crate::topology::Topology;
use crate::transport::mem::{MemNetwork, MemTransport, Schedule};

/// What a simulated write scope left in a chunk, as the oracle knows it.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub chunk: u64,
    /// The simulated client that wrote it.
    pub client: usize,
    /// The version its release must become: the granted version plus one.
    pub version: Version,
    pub prev: u64,
    pub status: Status,
    /// Its RELEASE returned Ok (a run with replicated homes: both servers
    /// held it then, so no server's loss may take it away).
    pub returned: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Written inside a scope that has not ended.
    Open,
    /// Its release returned: the home must publish it, once.
    Committed,
    /// Its scope ended without publishing.
    Aborted,
    /// Its release returned, but its client died before the home took it
    /// in: the home may publish it, or never.
    Lost,
    /// Its release is under way: a release into a host slot is published
    /// before the call returns, so the home may show it already.
    Releasing,
}

/// A scope a simulated thread holds, and the version it sees: the home may
/// not go past that version until the scope ends (it may be behind it
/// while the scope reads its own process's release on its way home).
#[derive(Debug, Clone)]
pub(crate) struct OpenScope {
    pub thread: usize,
    pub client: usize,
    pub thread_index: usize,
    pub chunk: u64,
    pub version: Version,
}

/// A subscription of a simulated client, and what its handler heard.
#[derive(Debug, Clone)]
pub(crate) struct Hearing {
    pub client: usize,
    /// What it is to ("chunk 17", "the chain [17, 18]").
    pub what: String,
    /// Per chunk: the home's version when SUBSCRIBE returned, and the
    /// newest version the handler has seen.
    pub chunks: Vec<(u64, Version, Version)>,
    /// Still in place (never unsubscribed).
    pub live: bool,
}

/// The write scopes of one client on its lane of one multi-writer chunk
/// (numbered from 1, in the order they open).
#[derive(Debug, Default, Clone)]
pub(crate) struct LaneLog {
    /// The number the next write scope takes.
    pub opened: u64,
    /// The highest number whose release began (its bytes may be published).
    pub sent: u64,
    /// The highest number whose release returned: every scope opened after
    /// that must see it, or a later one.
    pub committed: u64,
    /// Released and returned: how many (the chunk's version counts them).
    pub releases: u64,
    /// Numbers whose scope ended without publishing.
    pub aborted: BTreeSet<u64>,
}

/// What the simulated threads did, as the invariants need it.
#[derive(Debug, Default)]
pub(crate) struct Oracle {
    next_token: u64,
    pub tokens: HashMap<u64, Token>,
    /// (chunk, version) -> the token committed for it.
    pub committed: BTreeMap<(u64, Version), u64>,
    pub scopes: Vec<OpenScope>,
    pub aborted: u64,
    pub read_checks: u64,
    pub notifications: u64,
    /// Rendezvous that returned on their thread's own wakeup.
    pub rendezvous_met: u64,
    /// Barrier calls a loss failed, made again.
    pub barriers_called_again: u64,
    pub hearings: Vec<Hearing>,
    /// Clients whose role failed: they run no handlers at the end.
    pub failed_roles: BTreeSet<usize>,
    /// Multi-writer chunks: (chunk, lane) -> its writer's scopes.
    pub lanes: BTreeMap<(u64, usize), LaneLog>,
    /// Multi-writer chunks: the number each home lane held at the last step.
    pub home_lanes: BTreeMap<(u64, usize), u64>,
    /// Multi-writer chunks: per (client, chunk), the READs of its threads
    /// open or under way. A READ beside them shares their grant (threads
    /// of a process share its copy), so it sees their version.
    pub lane_reads: BTreeMap<(usize, u64), u32>,
    /// Releases of whole chains: the client and the chain's tokens.
    pub chains: Vec<(usize, Vec<u64>)>,
    /// Token -> the whole chain's release it belongs to (in `chains`).
    pub chain_of: HashMap<u64, usize>,
    /// Tokens some home has shown.
    pub applied: std::collections::HashSet<u64>,
    /// Clients that died.
    pub dead: BTreeSet<usize>,
    /// The API threads of those clients.
    pub dead_threads: u32,
    /// The server that died (a run with replicated homes), its clients and
    /// the chunks it was the home of: a scope of those clients, or on those
    /// chunks, that opens before its process knows of the loss (on a grant
    /// the server sent before it died) ends without its home as well.
    pub lost_server: Option<(u32, Vec<usize>, BTreeSet<u64>)>,
    /// Per simulated thread: its client, and the rounds of the run's barrier
    /// it has arrived at (a call the loss failed and that is made again
    /// counts once).
    pub barrier_rounds: BTreeMap<usize, (usize, u32)>,
}

impl Oracle {
    /// What lane `lane` of `chunk` may hold now: an error for a number no
    /// released scope wrote.
    pub fn lane_may_hold(&self, chunk: u64, lane: usize, n: u64) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        let log = self.lanes.get(&(chunk, lane)).cloned().unwrap_or_default();
        if log.aborted.contains(&n) {
            return Err(format!(
                "chunk {chunk} lane {lane} holds write scope {n}, which ended without a release"
            ));
        }
        if n > log.sent {
            return Err(format!(
                "chunk {chunk} lane {lane} holds write scope {n}, which has not been released \
                 (released up to {})",
                log.sent
            ));
        }
        Ok(())
    }
}

impl Oracle {
    /// A new token for a write scope of `client` on `chunk` granted at
    /// `granted`.
    pub fn token(&mut self, client: usize, chunk: u64, granted: Version, prev: u64) -> u64 {
        self.next_token += 1;
        let t = self.next_token;
        self.tokens.insert(
            t,
            Token {
                chunk,
                client,
                version: granted + 1,
                prev,
                status: Status::Open,
                returned: false,
            },
        );
        t
    }

    /// The release of `token` returned: an error when its version is
    /// already taken by another release.
    pub fn commit(&mut self, token: u64) -> Result<(), String> {
        let t = self.tokens.get_mut(&token).expect("a known token");
        if t.status == Status::Committed
            && self.committed.get(&(t.chunk, t.version)) == Some(&token)
        {
            // The home showed it while its release was under way.
            return Ok(());
        }
        t.status = Status::Committed;
        t.returned = true;
        if let Some(other) = self.committed.insert((t.chunk, t.version), token) {
            return Err(format!(
                "two releases of chunk {} were granted version {}: tokens {other} and {token}",
                t.chunk,
                t.version - 1
            ));
        }
        Ok(())
    }

    /// Client `client` died: its releases the homes have not applied yet
    /// may never be.
    pub fn client_died(&mut self, client: usize, homes: &Homes) {
        self.dead.insert(client);
        let lost: Vec<u64> = self
            .tokens
            .iter()
            .filter(|(_, t)| {
                t.client == client
                    && t.status == Status::Committed
                    && homes.get(&t.chunk).map_or(0, |h| h.0) < t.version
            })
            .map(|(&id, _)| id)
            .collect();
        for id in lost {
            let t = self.tokens.get_mut(&id).expect("listed");
            t.status = Status::Lost;
            self.committed.remove(&(t.chunk, t.version));
        }
    }

    /// A release of the whole chain of these tokens begins.
    pub fn chain_release(&mut self, client: usize, tokens: Vec<u64>) {
        for &t in &tokens {
            self.chain_of.insert(t, self.chains.len());
        }
        self.chains.push((client, tokens));
    }

    /// A scope on a chain saw, per chunk, its version and the token its
    /// bytes hold: an error when it shows part of a whole chain's release
    /// and, on another chunk of that chain, a version older than that
    /// release's (a torn chain: bytes of two releases no scope wrote
    /// together). A release of the chain's chunk that ended without
    /// publishing (aborted) does not count.
    pub fn torn(&self, seen: &[(u64, Version, u64)]) -> Result<(), String> {
        for &(chunk, _, token) in seen {
            let Some(&r) = self.chain_of.get(&token) else {
                continue;
            };
            let (writer, tokens) = &self.chains[r];
            for t in tokens
                .iter()
                .filter_map(|t| self.tokens.get(t).map(|x| (t, x)))
            {
                let (other, t) = t;
                if t.chunk == chunk || t.status == Status::Aborted {
                    continue;
                }
                let Some(&(_, version, held)) = seen.iter().find(|s| s.0 == t.chunk) else {
                    continue;
                };
                if version < t.version {
                    return Err(format!(
                        "chunk {chunk} holds token {token} of client {writer}'s release of a \
                         whole chain, and chunk {} version {version} (token {held}), older than \
                         that release's version {} (token {other}, {:?})",
                        t.chunk, t.version, t.status
                    ));
                }
            }
        }
        Ok(())
    }

    /// A lost server's `chunk` was taken over by its backup at `version`
    /// (`server/failover.rs`): the versions its lost home applied after
    /// that never were, and their releases may be published again, or never.
    /// An error names a release that returned and is gone.
    pub fn rolled_back(&mut self, chunk: u64, version: Version) -> Result<(), String> {
        let gone: Vec<u64> = (self.tokens.iter())
            .filter(|(_, t)| t.chunk == chunk && t.version > version)
            .filter(|(_, t)| matches!(t.status, Status::Committed | Status::Releasing))
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            let t = self.tokens.get_mut(&id).expect("listed");
            if t.returned && t.status == Status::Committed {
                return Err(format!(
                    "chunk {chunk}: the release of token {id} (version {}) returned, and its \
                     backup took the chunk over at version {version}",
                    t.version
                ));
            }
            if self.committed.get(&(t.chunk, t.version)) == Some(&id) {
                self.committed.remove(&(t.chunk, t.version));
            }
            t.status = Status::Lost;
        }
        Ok(())
    }

    /// Server `server` was lost: the scopes of its clients, and every scope
    /// on one of its chunks, end without their homes (`client/failover.rs`).
    pub fn scopes_orphaned(&mut self, server: u32, clients: &[usize], chunks: &BTreeSet<u64>) {
        self.scopes
            .retain(|s| !clients.contains(&s.client) && !chunks.contains(&s.chunk));
        self.lost_server = Some((server, clients.to_vec(), chunks.clone()));
    }

    /// Whether a scope of client `client` on `chunk`, opening now, ends
    /// without its home: its grant came from a server that is lost, or
    /// through one, and its process has not heard of the loss yet (it will
    /// orphan the scope then). `knows` says whether it has heard of the
    /// loss of a server.
    pub fn opens_orphaned(&self, client: usize, chunk: u64, knows: impl Fn(u32) -> bool) -> bool {
        self.lost_server
            .as_ref()
            .is_some_and(|(server, clients, chunks)| {
                (clients.contains(&client) || chunks.contains(&chunk)) && !knows(*server)
            })
    }

    /// The release of `token` failed for a server's loss: it may be
    /// published, or never.
    pub fn lose(&mut self, token: u64) {
        if let Some(t) = self.tokens.get_mut(&token) {
            if matches!(t.status, Status::Open | Status::Releasing) {
                t.status = Status::Lost;
            }
        }
    }

    /// The release of `token`'s scope begins.
    pub fn releasing(&mut self, token: u64) {
        if let Some(t) = self.tokens.get_mut(&token) {
            if t.status == Status::Open {
                t.status = Status::Releasing;
            }
        }
    }

    pub fn abort(&mut self, token: u64) {
        if let Some(t) = self.tokens.get_mut(&token) {
            t.status = Status::Aborted;
            self.aborted += 1;
        }
    }
}

/// The homes as the simulated threads see them: chunk -> (version, data).
pub(crate) type Homes = BTreeMap<u64, (Version, Arc<[u8]>)>;

/// Everything the scheduler and the simulated threads share.
pub(crate) struct Shared {
    pub sched: Arc<Scheduler>,
    pub oracle: Mutex<Oracle>,
    /// The homes as of the last step: chunk -> (version, data).
    pub homes: Mutex<Homes>,
    failure: Mutex<Option<(u64, String, String)>>,
    recent: Mutex<VecDeque<String>>,
    trace: bool,
    /// Per simulated thread: the operation under way and the step it began.
    pub ops: Mutex<Vec<Option<(u64, String)>>>,
}

const RECENT: usize = 40;

impl Shared {
    pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a broken invariant (the first one wins).
    pub fn fail(&self, invariant: &str, detail: String) {
        let mut f = Shared::lock(&self.failure);
        if f.is_none() {
            *f = Some((self.sched.steps(), invariant.to_string(), detail));
        }
    }

    pub fn failed(&self) -> bool {
        Shared::lock(&self.failure).is_some()
    }

    /// A line of the run's recent history (printed on failure, and as it
    /// happens under `--trace`).
    pub fn note(&self, line: impl FnOnce() -> String) {
        let line = format!("[{}] {}", self.sched.steps(), line());
        if self.trace {
            println!("{line}");
        }
        let mut r = Shared::lock(&self.recent);
        if r.len() == RECENT {
            r.pop_front();
        }
        r.push_back(line);
    }

    /// Checks what a scope of `client` opened on `chunk` sees: the home's
    /// current version, or (`own_newer`, for a READ) a release of the same
    /// client that has not reached the home yet. Returns the version seen.
    pub fn check_sees(
        &self,
        client: usize,
        chunk: u64,
        bytes: &[u8],
        own_newer: bool,
    ) -> Result<Version, String> {
        let (version, home) = self.home(chunk).unwrap_or((0, Arc::from(vec![])));
        let mut oracle = Shared::lock(&self.oracle);
        oracle.read_checks += 1;
        if home.is_empty() || bytes == &home[..] {
            return Ok(version);
        }
        let seen = content::read(bytes, chunk);
        if let Ok((token, _)) = seen {
            if let Some(t) = oracle.tokens.get(&token) {
                if own_newer
                    && t.client == client
                    && t.status == Status::Committed
                    && t.version > version
                {
                    return Ok(t.version);
                }
                // Its own release under way: a release in a run with
                // replicated homes waits for the backup while the process's
                // copy is the new version already (a PUT's version is
                // known only once it returns: 0 until then). Nobody else
                // can have written the chunk since: the release ends the
                // write scope at the home.
                if own_newer && t.client == client && t.status == Status::Releasing {
                    return Ok(t.version.max(version + 1));
                }
            }
        }
        Err(format!(
            "client {client} sees {seen:?} in chunk {chunk}; the home has version {version} {:?}",
            content::read(&home, chunk)
        ))
    }

    /// The home's current (version, data) of `chunk`.
    pub fn home(&self, chunk: u64) -> Option<(Version, Arc<[u8]>)> {
        Shared::lock(&self.homes).get(&chunk).cloned()
    }
}

/// The shape one seed picks.
struct Shape {
    servers: u32,
    clients: u32,
    service: bool,
    capacities: Vec<u32>,
    max_delay: u32,
    /// The homes keep versions in host slots, as when every process of a
    /// run shares a host (or every client of a service must: its slots
    /// then hold two buffers, and its clients read under their own bits).
    host_slots: bool,
    /// Adaptive chunks switch protocol at random, again and again, from
    /// this seed (`server/switch.rs`); None: by the rules, once.
    switches: Option<u64>,
    /// The servers keep this many chunks' versions in memory and spill the
    /// others to files (`server/spill.rs`); 0: all in memory.
    server_capacity: u32,
    /// A run with recovery (`server/recovery.rs`): its clients may die, and
    /// it goes on without them.
    recovering: bool,
    /// Every home has a backup on the next server (`server/replicas.rs`):
    /// no host slots, no adaptive switches, replicable protocols only.
    replicated: bool,
    /// A replicated run with recovery in which a server other than the seed
    /// dies (`server/failover.rs`).
    server_dies: bool,
}

impl Shape {
    fn pick(rng: &mut Rng) -> Shape {
        let mut shape = Shape::pick_plain(rng);
        // Half the replicated runs lose a server: they run with recovery.
        if shape.replicated && !shape.service && rng.chance(50) {
            shape.recovering = true;
            shape.server_dies = true;
        }
        shape
    }

    fn pick_plain(rng: &mut Rng) -> Shape {
        let servers = 1 + rng.below(3) as u32;
        let clients = 2 + rng.below(3) as u32;
        let replicated = servers > 1 && rng.chance(30);
        let host_slots = !replicated && rng.chance(50);
        let service = rng.chance(25);
        Shape {
            servers,
            clients,
            service,
            // A chunk capacity of 2 or 3 forces eviction of SAT's chains.
            capacities: (0..clients)
                .map(|_| {
                    if rng.chance(40) {
                        2 + rng.below(2) as u32
                    } else {
                        0
                    }
                })
                .collect(),
            max_delay: rng.below(5) as u32,
            host_slots,
            switches: (rng.chance(50) && !replicated).then(|| rng.next_u64() | 1),
            // (A server with a capacity keeps no host slots.)
            server_capacity: if !host_slots && rng.chance(40) {
                1 + rng.below(3) as u32
            } else {
                0
            },
            recovering: !service && rng.chance(35),
            replicated,
            server_dies: false,
        }
    }

    fn topology(&self) -> String {
        let mut xml = String::from("<?xml version=\"1.0\"?>\n<SAT>");
        xml += if self.replicated {
            "<topologies replication=\"2\">\n"
        } else {
            "<topologies>\n"
        };
        let client_rank = |i: u32| self.servers + i;
        for s in 0..self.servers {
            let mine: Vec<String> = (0..self.clients)
                .filter(|i| i % self.servers == s)
                .map(|i| client_rank(i).to_string())
                .collect();
            xml += &format!(
                "<topology id=\"{s}\" role=\"0\"><memory capacity=\"{}\"/>\
                 <clients><intlist>{}</intlist></clients></topology>\n",
                self.server_capacity,
                mine.join(" ")
            );
        }
        for i in 0..self.clients {
            xml += &format!(
                "<topology id=\"{}\" role=\"1\"><memory capacity=\"{}\"/>\
                 <servers><intlist>{}</intlist></servers></topology>\n",
                client_rank(i),
                self.capacities[i as usize],
                i % self.servers
            );
        }
        xml + "</topologies></SAT>\n"
    }
}

/// What the scheduler may run at a step.
#[derive(Debug, Clone, Copy)]
enum Actor {
    Server(usize),
    Thread(usize),
    /// A client's background progress (it answers the homes while the
    /// application computes).
    Background(usize),
}

/// Runs seed `seed`: Ok with a summary, or the first broken invariant.
pub fn run(seed: u64, config: &Config) -> Result<Outcome, Failure> {
    let mut rng = Rng::new(seed);
    let shape = Shape::pick(&mut rng);
    let xml = shape.topology();
    let topology = Arc::new(Topology::parse(&xml, "simulated").expect("a valid topology"));
    let (net, endpoints) = MemNetwork::new(
        topology.len(),
        Schedule::Random {
            seed: rng.next_u64(),
            max_delay_polls: shape.max_delay,
        },
    );
    let sched = Scheduler::new();
    let clock = Clock::Simulated(sched.clone());
    let shared = Arc::new(Shared {
        sched: sched.clone(),
        oracle: Mutex::new(Oracle::default()),
        homes: Mutex::new(BTreeMap::new()),
        failure: Mutex::new(None),
        recent: Mutex::new(VecDeque::new()),
        trace: config.trace,
        ops: Mutex::new(Vec::new()),
    });
    shared.note(|| {
        format!(
            "{} servers, {} clients (capacities {:?}), {}, delays up to {} polls{}{}{}{}",
            shape.servers,
            shape.clients,
            shape.capacities,
            match (shape.service, shape.recovering) {
                (true, _) => "a service",
                (false, true) => "a run with recovery",
                (false, false) => "a run",
            },
            shape.max_delay,
            if shape.host_slots {
                ", versions in host slots"
            } else {
                ""
            },
            if shape.switches.is_some() {
                ", adaptive chunks switching at random"
            } else {
                ""
            },
            if shape.server_capacity > 0 {
                format!(
                    ", servers keeping {} versions in memory",
                    shape.server_capacity
                )
            } else {
                String::new()
            },
            match (shape.replicated, shape.server_dies) {
                (true, true) => ", replicated homes, a server dies",
                (true, false) => ", replicated homes",
                _ => "",
            }
        )
    });

    let mut endpoints: VecDeque<_> = endpoints.into_iter().collect();
    let mut servers = Vec::new();
    for rank in 0..shape.servers {
        let side = shape.service.then(|| ServiceSide::new(None));
        let host = shape
            .host_slots
            .then_some(crate::server::host::Backing::Private);
        let mut server = Server::new(&topology, rank, side, clock.clone(), host);
        if shape.recovering {
            server.recover(crate::server::recovery::RunRecovery::unwatched());
        }
        if let Some(seed) = shape.switches {
            server.set_switch_policy(crate::server::SwitchPolicy::Random(seed ^ u64::from(rank)));
        }
        if shape.service {
            for &c in topology.clients_of(rank) {
                server.attach(c);
            }
        }
        servers.push((server, endpoints.pop_front().expect("an endpoint"), false));
    }

    // Most runs that lose a server pass a barrier too, and then lose no
    // client: the arrivals and answers the lost server carried must be
    // counted once (`client/failover.rs`). (A stream of its own, drawn from
    // the seed: every other pick of a seed stays as it was.)
    let mut across = Rng::new(seed ^ 0x0bad_ba77_1e55_0000);
    let loss_barrier = (shape.server_dies && across.chance(70)).then(|| 1 + across.below(6) as u32);
    // Most runs with recovery pass a barrier too, whether a client dies in
    // them or not: its survivors' first call after the death fails once,
    // and they call again with the count left (`crate::sync`). Not with a
    // server's loss as well: a run loses one process while it passes them.
    let death_barrier = (shape.recovering && !shape.server_dies && across.chance(60))
        .then(|| 1 + across.below(6) as u32);
    // The clients and their threads.
    let kind = workload::RunKind {
        clients: shape.clients,
        deaths: shape.service || shape.recovering,
        switches: shape.switches.is_some(),
        replicated: shape.replicated,
        server_loss: shape.server_dies,
        loss_barrier,
        death_barrier,
    };
    let plans = workload::plan(&mut rng, &topology, kind, config);
    let mut clients: Vec<Arc<Client>> = Vec::new();
    let mut faults: Vec<Fault> = Vec::new();
    let mut threads = Vec::new();
    let mut thread_client = Vec::new();
    let mut dead: Vec<Arc<AtomicBool>> = Vec::new();
    for (ci, plan) in plans.into_iter().enumerate() {
        let ep = endpoints.pop_front().expect("an endpoint");
        let fault = Fault::default();
        let transport = Faulty::new(ep, fault.clone());
        let client = Arc::new(Client::with_clock(
            topology.clone(),
            Box::new(transport),
            clock.clone(),
        ));
        if shape.host_slots && !shape.service && !shape.recovering {
            client.use_host_sync();
        }
        client.set_advice(plan.advice());
        if shape.service || shape.recovering {
            client.release_chains_atomically();
            if let Some(reader) =
                crate::server::host::service_reader(&topology, shape.servers + ci as u32)
            {
                client.read_host_slots_as(reader);
            }
        }
        let ClientPlan { threads: programs } = plan;
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let nthreads = programs.len();
        for (ti, program) in programs.into_iter().enumerate() {
            let id = threads.len();
            Shared::lock(&shared.ops).push(None);
            let ctx = workload::Thread {
                id,
                client_index: ci,
                thread_index: ti,
                threads: nthreads,
                client: client.clone(),
                shared: shared.clone(),
                fault: fault.clone(),
                siblings_done: done.clone(),
                service: shape.service,
                program,
            };
            let sched = sched.clone();
            let handle = std::thread::Builder::new()
                .name(format!("sim-{seed}-c{ci}t{ti}"))
                .spawn(move || {
                    sched.enter(id);
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        workload::run_thread(ctx)
                    }));
                    let outcome = match outcome {
                        Ok(o) => o,
                        Err(p) if p.is::<Teardown>() => ThreadOutcome::TornDown,
                        Err(p) => ThreadOutcome::Panicked(panic_text(&p)),
                    };
                    sched.leave();
                    outcome
                })
                .expect("spawn a simulated thread");
            threads.push((handle, false));
            thread_client.push(ci);
        }
        clients.push(client);
        faults.push(fault);
        dead.push(Arc::new(AtomicBool::new(false)));
    }
    let client_rank = |ci: usize| shape.servers + ci as u32;

    // The loop: one actor per step, then the invariants.
    let mut pick = rng.fork(7);
    let mut seen: BTreeMap<u64, (Version, u64)> = BTreeMap::new();
    let mut outcomes: Vec<Option<ThreadOutcome>> = vec![None; threads.len()];
    let death_at: Option<(u64, usize)> = ((shape.service || shape.recovering) && pick.chance(50))
        .then(|| {
            (
                200 + pick.below(4_000),
                pick.below(u64::from(shape.clients)) as usize,
            )
        })
        // A barrier counts on every client (drawn all the same, so that
        // the picks after it stay as they were).
        .filter(|_| loss_barrier.is_none());
    // Half the deaths come right after the victim began releasing a whole
    // chain (its messages may still be on their way), from its `at` step on:
    // the moment that tears a chain's release if anything can.
    let on_chain_release = death_at.is_some() && pick.chance(70);
    // A server other than the seed dies at a step of its own.
    let server_death_at: Option<(u64, usize)> = shape.server_dies.then(|| {
        (
            200 + pick.below(4_000),
            1 + pick.below(u64::from(shape.servers - 1)) as usize,
        )
    });
    // Some of them come a few steps after a client began releasing a whole
    // chain: one of its chunks' releases may have reached its home and
    // another not. (Its own stream: the other picks stay as they were.)
    let mut aim = rng.fork(11);
    let server_on_chain = server_death_at.is_some() && aim.chance(40);
    let mut server_chains_seen = 0usize;
    let mut server_kill_at: Option<u64> = None;
    let mut dead_server: Option<usize> = None;
    let mut said_bye: BTreeSet<usize> = BTreeSet::new();
    // The lost server's chunks that its backup has not taken over yet.
    let mut taking_over: BTreeSet<u64> = BTreeSet::new();
    let mut chains_seen = 0usize;
    let mut kill_at: Option<u64> = None;
    let mut result = Ok(());
    let mut lost = 0u64;
    loop {
        if shared.failed() {
            break;
        }
        let steps = sched.steps();
        if steps > config.max_steps {
            shared.fail(
                "the run ends",
                format!(
                    "still going after {} steps; {}",
                    steps,
                    waiting_ops(&shared)
                ),
            );
            break;
        }
        if let Some((step, op)) = overdue(&shared, steps, config.op_steps) {
            shared.fail(
                "every request is answered",
                format!(
                    "{op}, begun at step {step}, is not done {} steps later; {}",
                    steps - step,
                    waiting_ops(&shared)
                ),
            );
            break;
        }
        // A client of a service, or of a run with recovery, dies.
        if let Some((at, victim)) = death_at {
            // A few steps after the release began: its server may have
            // taken in some of its messages and not the others.
            let due = if on_chain_release {
                let o = Shared::lock(&shared.oracle);
                let fresh = (o.chains[chains_seen..].iter())
                    .any(|(c, tokens)| *c == victim && !tokens.is_empty());
                chains_seen = o.chains.len();
                if fresh && steps >= at / 4 && kill_at.is_none() {
                    kill_at = Some(steps + 1 + pick.below(3));
                }
                kill_at.is_some_and(|k| steps >= k)
            } else {
                steps == at
            };
            if due && !dead[victim].load(Ordering::Relaxed) {
                let alive = thread_client
                    .iter()
                    .enumerate()
                    .any(|(t, &c)| c == victim && !threads[t].1);
                if alive {
                    dead[victim].store(true, Ordering::Relaxed);
                    lost += u64::from(shape.recovering);
                    faults[victim].die();
                    shared.note(|| format!("client {victim} dies"));
                    {
                        let homes = Shared::lock(&shared.homes);
                        let mut o = Shared::lock(&shared.oracle);
                        o.scopes.retain(|s| s.client != victim);
                        o.client_died(victim, &homes);
                        o.dead_threads +=
                            thread_client.iter().filter(|&&c| c == victim).count() as u32;
                        // Its subscriptions hear nothing more.
                        o.failed_roles.insert(victim);
                    }
                    for (t, &c) in thread_client.iter().enumerate() {
                        if c == victim && !threads[t].1 {
                            sched.kill(t);
                            threads[t].1 = true;
                        }
                        if c == victim {
                            // What it was doing will never end: no one waits.
                            Shared::lock(&shared.ops)[t] = None;
                        }
                    }
                    let rank = client_rank(victim);
                    let own = topology.server_of(rank) as usize;
                    if Some(own) == dead_server {
                        // Its server is lost: the seed's watch tells the
                        // stand-in, after the loss it sent it.
                        let (seed, ep, _) = &mut servers[0];
                        seed.watch_lost(ep, rank);
                    } else {
                        let (server, ep, _) = &mut servers[own];
                        server.client_lost(ep, rank);
                        // The seed's watch knows it is gone.
                        if own != 0 && shape.server_dies {
                            let (seed, ep, _) = &mut servers[0];
                            seed.said_goodbye(ep, rank);
                        }
                    }
                }
            }
        }
        if let Some((at, victim)) = server_death_at {
            // Mostly while a version it applied waits for its backup: the
            // moment that loses a release if anything does.
            let due = if server_on_chain {
                let o = Shared::lock(&shared.oracle);
                let fresh = o.chains.len() > server_chains_seen;
                server_chains_seen = o.chains.len();
                if fresh && steps >= at / 4 && server_kill_at.is_none() {
                    server_kill_at = Some(steps + 1 + aim.below(6));
                }
                server_kill_at.is_some_and(|k| steps >= k) || steps >= at + 20_000
            } else {
                steps >= at && (servers[victim].0.replicating() || steps >= at + 2_000)
            };
            if due && dead_server.is_none() && !servers[victim].2 {
                dead_server = Some(victim);
                servers[victim].2 = true;
                // Its clients' connections to it fail from now on, maybe
                // before the stand-in's word of the loss reaches them.
                for f in &faults {
                    f.server_died(victim as u32);
                }
                shared.note(|| format!("server {victim} dies"));
                taking_over = servers[victim].0.homes().map(|(c, _, _)| c).collect();
                let moved: Vec<usize> = (topology.clients_of(victim as u32).iter())
                    .map(|&r| (r - shape.servers) as usize)
                    .collect();
                Shared::lock(&shared.oracle).scopes_orphaned(victim as u32, &moved, &taking_over);
                let (seed, ep, _) = &mut servers[0];
                seed.server_lost(ep, victim as u32);
            }
        }
        // A client whose threads have all ended says goodbye to the seed,
        // as its process would (what a lost server's stand-in learns it
        // from: `server/failover.rs`).
        if shape.recovering {
            for (ci, d) in dead.iter().enumerate() {
                let ended = thread_client
                    .iter()
                    .enumerate()
                    .all(|(t, &c)| c != ci || threads[t].1);
                if ended && !d.load(Ordering::Relaxed) && said_bye.insert(ci) {
                    let (seed, ep, _) = &mut servers[0];
                    seed.said_goodbye(ep, client_rank(ci));
                }
            }
        }
        // Who may run.
        let mut actors = Vec::new();
        for (i, (_, _, finished)) in servers.iter().enumerate() {
            if !finished {
                actors.push(Actor::Server(i));
            }
        }
        for (t, (_, finished)) in threads.iter().enumerate() {
            if !finished {
                actors.push(Actor::Thread(t));
            }
        }
        for (ci, d) in dead.iter().enumerate() {
            let live = thread_client
                .iter()
                .enumerate()
                .any(|(t, &c)| c == ci && !threads[t].1);
            if live && !d.load(Ordering::Relaxed) && pick.chance(30) {
                actors.push(Actor::Background(ci));
            }
        }
        let threads_left = threads.iter().any(|(_, f)| !f);
        if !threads_left {
            let servers_left = servers.iter().any(|(_, _, f)| !f);
            let quiet = (0..shape.servers).all(|r| net.in_flight_to(r) == 0);
            if !servers_left || (shape.service && quiet) {
                break;
            }
        }
        let actor = actors[pick.below(actors.len() as u64) as usize];
        sched.tick();
        match actor {
            Actor::Server(i) => {
                crate::observe::set_thread_rank(Some(i as u32));
                let (server, ep, finished) = &mut servers[i];
                match server.step(ep) {
                    Ok(Step::Finished) => {
                        *finished = true;
                        shared.note(|| format!("server {i} finished"));
                    }
                    Ok(_) => {}
                    Err(e) => shared.fail("no server error", format!("server {i}: {e}")),
                }
                if !shape.host_slots {
                    let mut homes = Shared::lock(&shared.homes);
                    for (chunk, version, data) in server.homes() {
                        // A lost server's chunk, taken over by its backup
                        // at the last version the backup held.
                        if taking_over.remove(&chunk) {
                            let mut o = Shared::lock(&shared.oracle);
                            if let Err(e) = o.rolled_back(chunk, version) {
                                drop(o);
                                shared.fail("a release that returned survives a server's loss", e);
                            }
                            let token = content::read(&data, chunk).map_or(0, |t| t.0);
                            seen.insert(chunk, (version, token));
                        }
                        homes.insert(chunk, (version, data));
                    }
                }
            }
            Actor::Thread(t) => {
                if sched.run_thread(t) {
                    threads[t].1 = true;
                }
            }
            Actor::Background(ci) => {
                crate::observe::set_thread_rank(Some(client_rank(ci)));
                clients[ci].background_step();
            }
        }
        // A client on the host path publishes into its home's slot itself:
        // any step may have moved a home.
        if shape.host_slots {
            let mut homes = Shared::lock(&shared.homes);
            for (server, _, _) in &servers {
                for (chunk, version, data) in server.homes() {
                    homes.insert(chunk, (version, data));
                }
            }
        }
        if let Err(f) = check_homes(&shared, &mut seen) {
            result = Err(f);
            break;
        }
        check_scopes(&shared);
    }

    // Tear down what is left, and collect what the threads say.
    sched.abort_all();
    for (t, (h, _)) in threads.into_iter().enumerate() {
        let outcome = h
            .join()
            .unwrap_or_else(|p| ThreadOutcome::Panicked(panic_text(&p)));
        if let ThreadOutcome::Panicked(text) = &outcome {
            shared.fail("no panic", format!("thread {t}: {text}"));
        }
        outcomes[t] = Some(outcome);
    }
    if let Err((invariant, detail)) = result {
        shared.fail(&invariant, detail);
    }
    if !shared.failed() {
        final_checks(&shared, shape.service, shape.service || shape.recovering);
    }
    let mut backed_up = 0;
    if shape.replicated && !shared.failed() {
        match check_backups(&servers, dead_server) {
            Ok(n) => backed_up = n,
            Err(detail) => shared.fail("every home's version is held by its backup", detail),
        }
    }
    let failure = Shared::lock(&shared.failure).take();
    if let Some((step, invariant, detail)) = failure {
        return Err(Failure {
            seed,
            step,
            invariant,
            detail,
            recent: Shared::lock(&shared.recent).iter().cloned().collect(),
        });
    }
    let oracle = Shared::lock(&shared.oracle);
    let moved = servers.iter().map(|(s, _, _)| s.moved_away()).sum();
    let spilled = servers.iter().map(|(s, _, _)| s.spills().1).sum();
    let held = servers.iter().map(|(s, _, _)| s.notifications_held()).sum();
    Ok(Outcome {
        steps: sched.steps(),
        servers: shape.servers,
        clients: shape.clients,
        service: shape.service,
        host_slots: shape.host_slots,
        committed: oracle.committed.len() as u64,
        aborted: oracle.aborted,
        read_checks: oracle.read_checks,
        notifications: oracle.notifications,
        pushed: clients.iter().map(|c| c.learned_pushes()).sum(),
        asked_ahead: clients.iter().map(|c| c.reads_asked_ahead()).sum(),
        put_direct: clients.iter().map(|c| c.puts_into_slots()).sum(),
        read_in_place: clients.iter().map(|c| c.reads_in_place()).sum(),
        rendezvous_met: oracle.rendezvous_met,
        barriers_called_again: oracle.barriers_called_again,
        switches: clients.iter().map(|c| c.protocol_switches()).sum(),
        moved,
        spilled,
        lost,
        held,
        backed_up,
        servers_lost: u64::from(dead_server.is_some()),
    })
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// The operation that has waited longest, if past the bound.
fn overdue(shared: &Shared, now: u64, bound: u64) -> Option<(u64, String)> {
    Shared::lock(&shared.ops)
        .iter()
        .flatten()
        .filter(|(since, _)| now - since > bound)
        .min_by_key(|(since, _)| *since)
        .cloned()
}

fn waiting_ops(shared: &Shared) -> String {
    let ops: Vec<String> = Shared::lock(&shared.ops)
        .iter()
        .flatten()
        .map(|(since, op)| format!("{op} (since step {since})"))
        .collect();
    if ops.is_empty() {
        "no operation is under way".into()
    } else {
        format!("under way: {}", ops.join("; "))
    }
}

/// Every version a home publishes is the bytes of exactly one release, at
/// its version, in order.
fn check_homes(
    shared: &Shared,
    seen: &mut BTreeMap<u64, (Version, u64)>,
) -> Result<(), (String, String)> {
    let homes = Shared::lock(&shared.homes);
    let mut oracle = Shared::lock(&shared.oracle);
    let bad = |what: &str, detail: String| Err((what.to_string(), detail));
    for (&chunk, (version, data)) in homes.iter() {
        if workload::is_lane_chunk(chunk) {
            check_home_lanes(&mut oracle, chunk, data)?;
            continue;
        }
        let (token, prev) = match content::read(data, chunk) {
            Ok(t) => t,
            Err(e) => return bad("no invented bytes", format!("version {version}: {e}")),
        };
        let (last_version, last_token) = seen.get(&chunk).copied().unwrap_or((0, 0));
        if *version < last_version {
            return bad(
                "versions only grow",
                format!("chunk {chunk} went from version {last_version} back to {version}"),
            );
        }
        if *version == last_version {
            if token != last_token {
                return bad(
                    "a version's bytes never change",
                    format!("chunk {chunk} version {version} held token {last_token}, now {token}"),
                );
            }
            continue;
        }
        seen.insert(chunk, (*version, token));
        oracle.applied.insert(token);
        // The home applied every version up to this one, one release each,
        // also those it applied within the last step (two releases taken
        // in by one poll): a release that returned with a version it has
        // passed reached it.
        for v in last_version + 1..*version {
            if let Some(&skipped) = oracle.committed.get(&(chunk, v)) {
                oracle.applied.insert(skipped);
            }
        }
        if token == 0 {
            return bad(
                "no invented bytes",
                format!("chunk {chunk} version {version} is all zeros: no release wrote that"),
            );
        }
        let Some(mut t) = oracle.tokens.get(&token).cloned() else {
            return bad(
                "no invented bytes",
                format!(
                    "chunk {chunk} version {version} holds token {token}, which no scope wrote"
                ),
            );
        };
        match t.status {
            Status::Committed => {}
            Status::Lost | Status::Releasing => {
                // It arrived after all: it holds its version (a PUT's
                // version is known only once it is published).
                let known = oracle.tokens.get_mut(&token).expect("known");
                known.status = Status::Committed;
                if known.version == 0 {
                    known.version = *version;
                }
                t = known.clone();
                if let Some(other) = oracle.committed.insert((chunk, t.version), token) {
                    return bad(
                        "each version has one release",
                        format!(
                            "chunk {chunk} version {}: tokens {other} and {token}",
                            t.version
                        ),
                    );
                }
            }
            Status::Open => {
                return bad(
                    "only released bytes are published",
                    format!(
                        "chunk {chunk} version {version} holds token {token}, written in a scope \
                         that has not been released"
                    ),
                )
            }
            Status::Aborted => {
                return bad(
                    "only released bytes are published",
                    format!(
                        "chunk {chunk} version {version} holds token {token}, whose scope ended \
                         without a release"
                    ),
                )
            }
        }
        if t.version != *version {
            return bad(
                "each release is published once, at its version",
                format!(
                    "chunk {chunk} version {version} holds token {token}, released as version {}",
                    t.version
                ),
            );
        }
        if prev != content::BLIND {
            let before = if *version == 1 {
                Some(0)
            } else {
                oracle.committed.get(&(chunk, version - 1)).copied()
            };
            if let Some(before) = before {
                if before != prev {
                    return bad(
                        "no lost update",
                        format!(
                            "chunk {chunk} version {version} (token {token}) is a READWRITE of \
                             token {prev}, but version {} is token {before}",
                            version - 1
                        ),
                    );
                }
            }
        }
    }
    Ok(())
}

/// A multi-writer chunk's home: every lane holds a released write scope of
/// its client, and no lane goes back.
fn check_home_lanes(oracle: &mut Oracle, chunk: u64, data: &[u8]) -> Result<(), (String, String)> {
    let bad = |what: &str, detail: String| Err((what.to_string(), detail));
    let lanes = match content::read_lanes(data, chunk) {
        Ok(l) => l,
        Err(e) => return bad("no invented bytes", e),
    };
    for (lane, &n) in lanes.iter().enumerate() {
        if let Err(e) = oracle.lane_may_hold(chunk, lane, n) {
            return bad("only released bytes are published", e);
        }
        let before = oracle.home_lanes.insert((chunk, lane), n).unwrap_or(0);
        if n < before {
            return bad(
                "a writer's releases are applied in order",
                format!("chunk {chunk} lane {lane} went from write scope {before} back to {n}"),
            );
        }
    }
    Ok(())
}

/// No home version moves while a scope on it is open.
fn check_scopes(shared: &Shared) {
    let homes = Shared::lock(&shared.homes);
    let oracle = Shared::lock(&shared.oracle);
    for s in &oracle.scopes {
        let now = homes.get(&s.chunk).map_or(0, |(v, _)| *v);
        if now > s.version {
            let detail = format!(
                "c{}t{} has a scope on chunk {} that sees version {}, and the home is at \
                 version {now} (open scopes: {:?})",
                s.client, s.thread_index, s.chunk, s.version, oracle.scopes
            );
            drop(oracle);
            drop(homes);
            shared.fail("one writer or many readers", detail);
            return;
        }
    }
}

/// At the end of a run with replicated homes: each chunk's backup (the
/// server after its home) holds the home's version, byte for byte, at its
/// size and protocol. Returns how many chunks were checked.
fn check_backups(
    servers: &[(Server<'_>, MemTransport, bool)],
    dead: Option<usize>,
) -> Result<u64, String> {
    let mut checked = 0;
    let n = servers.len();
    for (i, (server, _, _)) in servers.iter().enumerate() {
        // The next server alive; none when this one is the last.
        let Some(b) = (1..n).map(|k| (i + k) % n).find(|&b| Some(b) != dead) else {
            continue;
        };
        if Some(i) == dead {
            continue;
        }
        let backup = &servers[b].0;
        for (chunk, version, data) in server.homes() {
            let want = (version, data.len() as u64, server.protocol_of(chunk));
            match backup.replica(chunk) {
                Some((v, bytes, size, protocol))
                    if (v, size, Some(protocol)) == want
                        && bytes
                            .as_deref()
                            .map_or(data.iter().all(|&b| b == 0), |b| b == &data[..]) => {}
                other => {
                    return Err(format!(
                        "chunk {chunk}: server {i} holds version {version} ({} bytes), its \
                         backup {:?}",
                        data.len(),
                        other.map(|(v, b, size, p)| (v, b.map(|b| b.len()), size, p))
                    ))
                }
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// At the end: every committed release became exactly one version.
/// `deaths`: clients may have died (a service, a run with recovery).
fn final_checks(shared: &Shared, service: bool, deaths: bool) {
    let homes = Shared::lock(&shared.homes);
    let oracle = Shared::lock(&shared.oracle);
    let mut per_chunk: BTreeMap<u64, u64> = BTreeMap::new();
    for &(chunk, _) in oracle.committed.keys() {
        *per_chunk.entry(chunk).or_default() += 1;
    }
    let mut problems = Vec::new();
    for (&chunk, (version, data)) in homes.iter() {
        if workload::is_lane_chunk(chunk) {
            // Every writer's last release is in its lane, and each release
            // made one version: the diffs merged, none lost.
            let lanes = content::read_lanes(data, chunk).unwrap_or_default();
            let mut releases = 0;
            for (lane, &n) in lanes.iter().enumerate() {
                let log = oracle
                    .lanes
                    .get(&(chunk, lane))
                    .cloned()
                    .unwrap_or_default();
                releases += log.releases;
                if n != log.committed {
                    problems.push(format!(
                        "chunk {chunk} lane {lane}: write scope {} was the last released, the \
                         home holds {n}",
                        log.committed
                    ));
                }
            }
            if releases != *version {
                problems.push(format!(
                    "multi-writer chunk {chunk}: {releases} releases returned, the home is at \
                     version {version}"
                ));
            }
            continue;
        }
        let released = per_chunk.get(&chunk).copied().unwrap_or(0);
        if released != *version {
            problems.push(format!(
                "chunk {chunk}: {released} releases returned, the home is at version {version}"
            ));
        }
    }
    // A chain released as a whole by a client that died: every chunk of it
    // or none reached its home (chunks whose end failed, and were aborted,
    // aside).
    for (client, tokens) in &oracle.chains {
        if !oracle.dead.contains(client) {
            continue;
        }
        let counted: Vec<u64> = (tokens.iter().copied())
            .filter(|t| {
                oracle
                    .tokens
                    .get(t)
                    .is_some_and(|t| t.status != Status::Aborted)
            })
            .collect();
        let applied = counted
            .iter()
            .filter(|t| oracle.applied.contains(t))
            .count();
        if applied != 0 && applied != counted.len() {
            let detail = format!(
                "client {client} died releasing a chain: {applied} of its {} chunks' releases \
                 reached their homes (tokens {counted:?})",
                counted.len()
            );
            drop(oracle);
            drop(homes);
            shared.fail("a chain's release applies all or nothing", detail);
            return;
        }
    }
    // A client that died may have had a release on its way.
    if !problems.is_empty() && !deaths {
        drop(oracle);
        drop(homes);
        shared.fail("no lost update", problems.join("; "));
        return;
    }
    // A subscription still in place heard of every release made after it
    // was confirmed: its handler ran after the last one and saw it. (In a
    // service, clients detach without waiting for their events.)
    if service {
        return;
    }
    for h in &oracle.hearings {
        if !h.live || oracle.failed_roles.contains(&h.client) {
            continue;
        }
        for &(chunk, since, seen) in &h.chunks {
            let now = homes.get(&chunk).map_or(0, |(v, _)| *v);
            if now > since && seen < now {
                let detail = format!(
                    "client {}'s subscription to {}: chunk {chunk} went from version {since} to \
                     {now} after SUBSCRIBE returned, and the handler saw version {seen} at most",
                    h.client, h.what
                );
                drop(oracle);
                drop(homes);
                shared.fail("a subscriber hears of every release", detail);
                return;
            }
        }
    }
}
