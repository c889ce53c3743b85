//! What the simulated threads do: programs drawn from the seed, run against
//! the real [`Client`] API, each result checked against the homes and
//! recorded for the invariants.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use super::world::{Hearing, OpenScope, Shared, Status};
use super::{content, Config, Rng};
use crate::chunk::ChunkId;
use crate::client::{Chain, Client, Event, LocalMemory};
use crate::protocol::{Access, ProtocolId};
use crate::topology::Topology;
use crate::transport::{Payload, Rank, Received, Sender, Transport, TransportError};
use crate::wire::{self, Message};

/// Chunks shared by every client start here; below are each thread's own.
const SHARED_BASE: ChunkId = 16;
/// Multi-writer chunks start here: above every other chunk, so a thread
/// holding scopes acquires them last (ascending order).
const LANE_BASE: ChunkId = 1000;

/// Whether `chunk` is a multi-writer chunk, whose bytes are lanes
/// ([`content::write_lane`]).
pub(crate) fn is_lane_chunk(chunk: ChunkId) -> bool {
    (LANE_BASE..LANE_BASE + 100).contains(&chunk)
}
/// LOOKUPs wait this long (simulated) for the chunk's MALLOC.
const LOOKUP_WAIT: Duration = Duration::from_secs(2);
/// A detach or the end of a role waits this long for its server.
const FINISH_WAIT: Duration = Duration::from_secs(60);

/// The chunks of a run: id, size and protocol, the same for everyone.
#[derive(Debug, Clone)]
pub(crate) struct Chunks {
    pub shared: Vec<(ChunkId, usize, ProtocolId)>,
    /// Multi-writer chunks ([`ProtocolId::MultipleWriters`]), each client
    /// writing its own lane.
    pub lanes: Vec<ChunkId>,
    /// The adviser's protocols (`SAT_ADVICE`) every client of the run
    /// allocates with: MESI chunks of `shared` it names take another
    /// protocol at their MALLOC.
    pub advice: Option<Arc<crate::protocol::advice::Advice>>,
}

impl Chunks {
    fn size(&self, id: ChunkId) -> usize {
        self.shared
            .iter()
            .find(|c| c.0 == id)
            .map_or(content::MIN_CHUNK, |c| c.1)
    }

    /// The protocol chunk `id` has: as allocated, or as the advice made it.
    fn protocol(&self, id: ChunkId) -> ProtocolId {
        let asked = self
            .shared
            .iter()
            .find(|c| c.0 == id)
            .map_or(ProtocolId::HomeMesi, |c| c.2);
        crate::protocol::advice::protocol_for(self.advice.as_deref(), false, id, asked)
    }
}

/// One thread's program.
pub(crate) struct Program {
    rng: Rng,
    ops: u32,
    chunks: Arc<Chunks>,
    /// Thread 0 only: the role ends in failure, with scopes still open.
    role_fails: bool,
    /// Sends of this client may fail (one at a time, chosen by the program).
    send_faults: bool,
    /// The run's barrier, which every API thread passes the same number of
    /// times, if the run has one.
    barrier: Option<Barrier>,
    /// A server of the run dies (`server/failover.rs`): a call the loss
    /// catches fails with `ProcessLost`, and is not a broken invariant.
    server_loss: bool,
    /// Clients of the run may die: in a run with recovery, a rendezvous
    /// the loss catches fails once with `ProcessLost` (`crate::sync`).
    client_loss: bool,
}

/// A barrier every API thread of a run passes `rounds` times, spread over
/// its operations, holding no scope: the chunks of protocols that learn,
/// read after it, are pushed as it ends (`client/learned.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Barrier {
    id: u32,
    /// Every API thread of the run.
    count: u32,
    rounds: u32,
}

impl Barrier {
    /// Whether a thread running `ops` operations arrives before its
    /// `op`-th.
    fn due(&self, op: u32, ops: u32) -> bool {
        (1..=self.rounds).any(|k| op == k * ops / (self.rounds + 1))
    }
}

pub(crate) struct ClientPlan {
    pub threads: Vec<Program>,
}

impl ClientPlan {
    /// The advice the client allocates with (the run's, for every client).
    pub(crate) fn advice(&self) -> Option<Arc<crate::protocol::advice::Advice>> {
        self.threads.first().and_then(|t| t.chunks.advice.clone())
    }
}

/// What the programs of a run depend on.
pub(crate) struct RunKind {
    pub clients: u32,
    /// Clients may die (a service, a run with recovery).
    pub deaths: bool,
    /// The homes switch adaptive chunks at random: half the chunks are
    /// adaptive, so that switches meet every other path.
    pub switches: bool,
    /// Every home has a backup: only protocols a backup can take over
    /// ([`crate::server::can_replicate`]), no lanes, no advice.
    pub replicated: bool,
    /// A server dies during the run.
    pub server_loss: bool,
    /// A run that loses a server (and no client) passes a barrier this
    /// many times.
    pub loss_barrier: Option<u32>,
    /// A run with recovery, whose client may die, passes a barrier this
    /// many times.
    pub death_barrier: Option<u32>,
}

/// The programs of every client of a run.
pub(crate) fn plan(
    rng: &mut Rng,
    _topology: &Topology,
    kind: RunKind,
    config: &Config,
) -> Vec<ClientPlan> {
    let RunKind {
        clients, deaths, ..
    } = kind;
    let n = 3 + rng.below(5);
    let mut protocols = super::protocols();
    if kind.replicated {
        protocols.retain(|&p| crate::server::can_replicate(p));
    }
    let shared: Vec<(ChunkId, usize, ProtocolId)> = (0..n)
        .map(|i| {
            let size = content::MIN_CHUNK + rng.below(33) as usize;
            let protocol = if kind.switches && rng.chance(50) {
                ProtocolId::Adaptive
            } else {
                protocols[rng.below(protocols.len() as u64) as usize]
            };
            (SHARED_BASE + i, size, protocol)
        })
        .collect();
    let lanes = (0..rng.below(3))
        .filter(|_| !kind.replicated)
        .map(|i| LANE_BASE + i)
        .collect();
    // Some runs allocate under advice: half their MESI chunks take another
    // protocol, the same in every client (as `SAT_ADVICE` does).
    let advice = (rng.chance(30) && !kind.replicated).then(|| {
        let mut advised = crate::protocol::advice::Advice::new();
        for c in shared.iter().filter(|c| c.2 == ProtocolId::HomeMesi) {
            if rng.chance(50) {
                advised.insert(c.0, super::PROTOCOLS[1 + rng.below(4) as usize]);
            }
        }
        Arc::new(advised)
    });
    let chunks = Arc::new(Chunks {
        shared,
        lanes,
        advice,
    });
    let threads: Vec<usize> = (0..clients).map(|_| 1 + rng.below(3) as usize).collect();
    // Where a client may die, each surviving thread's first barrier call
    // after the death fails and it calls again with the count of the calls
    // left (sat.h). (A service's barriers wait for the clients that come:
    // no deaths and barriers together there.)
    let count = threads.iter().sum::<usize>() as u32;
    let barrier = if deaths {
        kind.loss_barrier
            .or(kind.death_barrier)
            .map(|rounds| Barrier {
                id: 7,
                count,
                rounds,
            })
    } else {
        rng.chance(60).then(|| Barrier {
            id: 7,
            count,
            rounds: 1 + rng.below(6) as u32,
        })
    };
    (0..clients)
        .map(|ci| {
            let threads = threads[ci as usize];
            let role_fails = rng.chance(15);
            let send_faults = rng.chance(30);
            ClientPlan {
                threads: (0..threads)
                    .map(|ti| Program {
                        rng: rng.fork(u64::from(ci) * 8 + ti as u64),
                        ops: config.ops / 2 + rng.below(u64::from(config.ops / 2) + 1) as u32,
                        chunks: chunks.clone(),
                        role_fails: ti == 0 && role_fails,
                        send_faults,
                        barrier,
                        server_loss: kind.server_loss,
                        // (A run that passes a barrier across a server's
                        // loss loses no client.)
                        client_loss: kind.deaths && kind.loss_barrier.is_none(),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// How a simulated thread ended.
#[derive(Debug, Clone)]
pub(crate) enum ThreadOutcome {
    Done,
    TornDown,
    Panicked(String),
}

/// A simulated thread and what it may touch.
pub(crate) struct Thread {
    pub id: usize,
    pub client_index: usize,
    pub thread_index: usize,
    pub threads: usize,
    pub client: Arc<Client>,
    pub shared: Arc<Shared>,
    pub fault: Fault,
    pub siblings_done: Arc<AtomicUsize>,
    pub service: bool,
    pub program: Program,
}

/// Memory as the C and Python faces hand it to the core: exposed to
/// writes outside SAT, so the store checks it against the version's digest.
/// The C ABI's own chains are also discardable (evicted in place, their
/// address kept, when the process is over its memory capacity); the
/// caller's MAP memory is not.
struct FaceMemory {
    bytes: Vec<u8>,
    discardable: bool,
}

impl LocalMemory for FaceMemory {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
    fn exposed(&self) -> bool {
        true
    }
    fn discardable(&self) -> bool {
        self.discardable
    }
    /// What a discarded page reads as: zeros, and a place that was valid
    /// shows them (the invariants then catch a version lost this way).
    fn discard(&mut self) {
        self.bytes.fill(0);
    }
}

/// A chain this thread knows.
struct Known {
    chain: Chain,
    ids: Vec<ChunkId>,
    /// The chain's memory, when the thread lent it as the C and Python
    /// faces do: what it may write outside any scope, as their code can.
    face: Option<FaceBytes>,
}

/// Where a [`FaceMemory`] keeps its bytes. The store owns the memory and
/// never resizes or frees it while the chain is known (no chain is
/// unmapped here; a discarded region keeps its bytes' address), so the
/// thread can write them as C code writes `chunk->data`.
#[derive(Clone, Copy)]
struct FaceBytes {
    ptr: *mut u8,
    len: usize,
}

impl FaceMemory {
    fn new(size: usize, discardable: bool, at: &std::cell::Cell<Option<FaceBytes>>) -> Box<Self> {
        let mut m = Box::new(FaceMemory {
            bytes: vec![0u8; size],
            discardable,
        });
        at.set(Some(FaceBytes {
            ptr: m.bytes.as_mut_ptr(),
            len: size,
        }));
        m
    }
}

/// A scope this thread holds: its chain, access and the tokens it wrote.
struct Held {
    chain: usize,
    access: Access,
    tokens: Vec<(ChunkId, u64)>,
    /// What a read scope saw when it opened.
    seen: Vec<u8>,
}

/// The payload of a panic the workload raises on purpose (inside a scope,
/// to check that the scope publishes nothing).
struct Deliberate;

fn quiet_deliberate_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Deliberate>() {
                default(info);
            }
        }));
    });
}

pub(crate) fn run_thread(mut t: Thread) -> ThreadOutcome {
    quiet_deliberate_panics();
    crate::observe::set_thread_rank(Some(t.client.rank()));
    if t.thread_index == 0 {
        t.client.enter_role();
    }
    let mut state = State {
        chains: Vec::new(),
        held: Vec::new(),
        private: 1 + t.client_index as ChunkId * 3 + t.thread_index as ChunkId,
        barrier_failed_for_loss: false,
        rendezvous_failed_for_loss: 0,
    };
    t.run(&mut state);
    set_op(&t, None);
    ThreadOutcome::Done
}

struct State {
    chains: Vec<Known>,
    held: Vec<Held>,
    private: ChunkId,
    /// A barrier call of this thread failed for a loss (once: a run loses
    /// one process at most while it passes barriers).
    barrier_failed_for_loss: bool,
    /// Rendezvous of this thread that failed for a loss (once per loss).
    rendezvous_failed_for_loss: u32,
}

fn set_op(t: &Thread, op: Option<String>) {
    let step = t.shared.sched.steps();
    Shared::lock(&t.shared.ops)[t.id] = op.map(|o| {
        (
            step,
            format!("client {} thread {}: {o}", t.client_index, t.thread_index),
        )
    });
}

impl Thread {
    fn note(&self, what: impl FnOnce() -> String) {
        self.shared
            .note(|| format!("c{}t{}: {}", self.client_index, self.thread_index, what()));
    }

    /// Whether `e` is a call a server's loss caught (in a run that loses
    /// one): noted, not a broken invariant.
    fn lost(&self, e: &crate::error::SatError, what: &str) -> bool {
        let lost = self.program.server_loss && matches!(e, crate::error::SatError::ProcessLost(_));
        if lost {
            self.note(|| format!("{what}: {e}"));
        }
        lost
    }

    fn run(&mut self, st: &mut State) {
        // Every thread MALLOCs the shared chunks (the same size and
        // protocol everywhere: joining) and its own.
        let chunks = self.program.chunks.clone();
        for &(id, size, protocol) in &chunks.shared {
            set_op(self, Some(format!("MALLOC {id}")));
            // Made again when a server's loss fails it.
            let malloc = loop {
                match self.client.malloc_with(protocol, id, size) {
                    Err(e) if self.lost(&e, "MALLOC") => continue,
                    other => break other,
                }
            };
            match malloc {
                Ok(chain) => st.chains.push(Known {
                    chain,
                    ids: vec![id],
                    face: None,
                }),
                Err(e) => self.shared.fail("MALLOC works", format!("chunk {id}: {e}")),
            }
        }
        for &id in &chunks.lanes {
            set_op(self, Some(format!("MALLOC {id}")));
            let protocol = ProtocolId::MultipleWriters;
            if let Err(e) = self.client.malloc_with(protocol, id, content::LANE_CHUNK) {
                self.shared.fail("MALLOC works", format!("chunk {id}: {e}"));
            }
        }
        set_op(self, Some(format!("MALLOC {}", st.private)));
        let malloc = loop {
            let private = ProtocolId::HomeMesi;
            match self
                .client
                .malloc_with(private, st.private, content::MIN_CHUNK)
            {
                Err(e) if self.lost(&e, "MALLOC") => continue,
                other => break other,
            }
        };
        if let Err(e) = malloc {
            self.shared
                .fail("MALLOC works", format!("chunk {}: {e}", st.private));
        }
        for op in 0..self.program.ops {
            set_op(self, None);
            self.shared.sched.pause();
            if self.shared.failed() {
                return;
            }
            if let Some(b) = self.program.barrier.filter(|b| b.due(op, self.program.ops)) {
                self.barrier(st, b);
            }
            self.one_op(st);
        }
        // The end of the thread, or of the role. (A thread that waits for
        // others while holding scopes they need would deadlock itself.)
        let fails = self.program.role_fails && !self.service;
        while !st.held.is_empty() {
            self.end_scope(st, st.held.len() - 1, End::Release);
        }
        if self.thread_index != 0 {
            self.siblings_done.fetch_add(1, Ordering::SeqCst);
            return;
        }
        // A role function waits for the threads it started.
        set_op(self, Some("waiting for the other threads".into()));
        while self.siblings_done.load(Ordering::SeqCst) + 1 < self.threads {
            self.shared.sched.pause();
        }
        if self.service {
            set_op(self, Some("detach".into()));
            self.note(|| "detach".into());
            if let Err(e) = self.client.finish(FINISH_WAIT) {
                self.shared.fail("a client detaches", e.to_string());
            }
            return;
        }
        if fails {
            // The role fails inside write scopes: they end without
            // publishing.
            for _ in 0..2 {
                let before = st.held.len();
                self.open_scope(st);
                if st.held.len() == before {
                    break;
                }
            }
            {
                let mut o = Shared::lock(&self.shared.oracle);
                o.failed_roles.insert(self.client_index);
                o.scopes.retain(|s| s.thread != self.id);
                for h in &st.held {
                    for &(_, token) in &h.tokens {
                        o.abort(token);
                    }
                }
            }
            self.note(|| format!("the role fails with {} scopes open", st.held.len()));
            st.held.clear();
            set_op(self, Some("finish after a failed role".into()));
            if let Err(e) = self.client.finish_failed(FINISH_WAIT) {
                self.shared.fail("a failed role ends", e.to_string());
            }
            return;
        }
        set_op(self, Some("client loop (handlers)".into()));
        if let Err(e) = self.client.serve_subscriptions() {
            self.shared.fail("handlers succeed", e.to_string());
        }
        set_op(self, Some("finish".into()));
        if let Err(e) = self.client.finish(FINISH_WAIT) {
            self.shared.fail("a role ends", e.to_string());
        }
    }

    fn one_op(&mut self, st: &mut State) {
        let r = self.program.rng.below(100);
        match r {
            0..=11 => self.new_chain(st),
            12..=56 if !self.program.chunks.lanes.is_empty() && self.program.rng.chance(25) => {
                self.lane_scope()
            }
            12..=56 => self.open_scope(st),
            57..=79 => {
                if !st.held.is_empty() {
                    let i = self.program.rng.below(st.held.len() as u64) as usize;
                    let end = match self.program.rng.below(10) {
                        0 | 1 => End::Abort,
                        _ => End::Release,
                    };
                    if self.program.send_faults && self.program.rng.chance(20) {
                        self.fault.fail_next_coherence();
                    }
                    self.end_scope(st, i, end);
                }
            }
            80..=84 => self.panic_in_scope(st),
            85..=88 => self.put_get(st),
            89..=91 => self.failing_write(st),
            92..=95 if self.program.rng.chance(25) => self.serve_now(st),
            92..=95 => self.subscription(st),
            96 => self.stray_write(st),
            _ if self.program.rng.chance(25) => self.wakeup_then_rendezvous(st),
            _ => self.signal(),
        }
    }

    /// A scope on a multi-writer chunk, opened and ended here: a READ or
    /// READWRITE sees in every lane a released write scope of its client,
    /// no older than the last one whose release returned before it asked;
    /// a write scope writes its own lane, lets others run, and releases or
    /// aborts.
    fn lane_scope(&mut self) {
        let lanes = &self.program.chunks.lanes;
        let id = lanes[self.program.rng.below(lanes.len() as u64) as usize];
        let access = match self.program.rng.below(10) {
            0..=3 => Access::Read,
            4..=6 => Access::Write,
            _ => Access::ReadWrite,
        };
        let me = self.client_index;
        let reading = access == Access::Read;
        let floors: Vec<u64> = {
            let mut o = Shared::lock(&self.shared.oracle);
            // A READ beside another thread's of this process shares its
            // grant and sees its version, which a release elsewhere may
            // have passed since (writers do not wait for readers here):
            // only a READ of its own must see every release made before.
            let beside = reading && o.lane_reads.get(&(me, id)).is_some_and(|&n| n > 0);
            if reading {
                *o.lane_reads.entry((me, id)).or_default() += 1;
            }
            (0..content::LANES)
                .map(|k| {
                    let committed = o.lanes.get(&(id, k)).map_or(0, |l| l.committed);
                    if beside {
                        0
                    } else {
                        committed
                    }
                })
                .collect()
        };
        let done_reading = |shared: &Shared| {
            if reading {
                let mut o = Shared::lock(&shared.oracle);
                if let Some(n) = o.lane_reads.get_mut(&(me, id)) {
                    *n -= 1;
                }
            }
        };
        set_op(self, Some(format!("{access:?} multi-writer {id}")));
        if let Err(e) = self.client.acquire(id, access) {
            // A send the run made fail, or a client that died, may end it;
            // misuse may not (this program uses the API rightly).
            if matches!(e, crate::error::SatError::Usage(_)) {
                self.shared
                    .fail("legal calls succeed", format!("{access:?} of {id}: {e}"));
            }
            self.note(|| format!("{access:?} multi-writer {id} failed: {e}"));
            done_reading(&self.shared);
            return;
        }
        if access != Access::Write {
            let seen = self
                .client
                .with_data(id, |b| b.to_vec())
                .expect("a chunk in scope is readable");
            let mut o = Shared::lock(&self.shared.oracle);
            o.read_checks += 1;
            let checked = content::read_lanes(&seen, id).and_then(|lanes| {
                for (k, &n) in lanes.iter().enumerate() {
                    o.lane_may_hold(id, k, n)?;
                    if n < floors[k] {
                        return Err(format!(
                            "chunk {id} lane {k} holds write scope {n}; {} was released \
                             before this scope asked",
                            floors[k]
                        ));
                    }
                }
                Ok(lanes)
            });
            drop(o);
            match checked {
                Ok(lanes) => self.note(|| format!("{access:?} multi-writer {id} sees {lanes:?}")),
                Err(e) => {
                    self.shared.fail(
                        "a scope sees every release made before it",
                        format!("c{me}t{} {access:?}: {e}", self.thread_index),
                    );
                    return;
                }
            }
        }
        let n = access.exclusive().then(|| {
            let mut o = Shared::lock(&self.shared.oracle);
            let log = o.lanes.entry((id, me)).or_default();
            log.opened += 1;
            log.opened
        });
        if let Some(n) = n {
            let wrote = self
                .client
                .with_data_mut(id, |b| content::write_lane(b, id, me, n));
            if let Err(e) = wrote {
                self.shared
                    .fail("a write scope is writable", format!("{id}: {e}"));
                return;
            }
        }
        // Others run while this scope is open: writers of other lanes too.
        set_op(self, None);
        self.shared.sched.pause();
        set_op(self, Some(format!("end {access:?} multi-writer {id}")));
        let abort = n.is_some() && self.program.rng.chance(10);
        if let Some(n) = n {
            let mut o = Shared::lock(&self.shared.oracle);
            let log = o.lanes.entry((id, me)).or_default();
            if abort {
                log.aborted.insert(n);
            } else {
                log.sent = log.sent.max(n);
            }
        }
        let ended = if abort {
            self.client.abort(id)
        } else {
            self.client.release(id)
        };
        done_reading(&self.shared);
        match (ended, n) {
            (Ok(()), Some(n)) if !abort => {
                let mut o = Shared::lock(&self.shared.oracle);
                let log = o.lanes.entry((id, me)).or_default();
                log.committed = log.committed.max(n);
                log.releases += 1;
                drop(o);
                self.note(|| format!("release multi-writer {id} lane {me}: {n}"));
            }
            (Ok(()), _) => self.note(|| format!("end {access:?} multi-writer {id}")),
            (Err(e), _) => {
                if matches!(e, crate::error::SatError::Usage(_)) {
                    self.shared.fail(
                        "legal calls succeed",
                        format!("end of a scope on {id}: {e}"),
                    );
                }
                self.note(|| format!("end of multi-writer {id} failed: {e}"))
            }
        }
    }

    fn pick_shared(&mut self) -> ChunkId {
        let n = self.program.chunks.shared.len() as u64;
        self.program.chunks.shared[self.program.rng.below(n) as usize].0
    }

    /// A chain over 1 to 3 shared chunks, in any order, with SAT's memory
    /// or the thread's own (as the C and Python faces allocate).
    fn new_chain(&mut self, st: &mut State) {
        if st.chains.len() >= 10 {
            return;
        }
        let mut ids = Vec::new();
        for _ in 0..1 + self.program.rng.below(3) {
            let id = self.pick_shared();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let kind = self.program.rng.below(3);
        set_op(self, Some(format!("LOOKUP_LST {ids:?} (kind {kind})")));
        let face = std::cell::Cell::new(None);
        let chain = match kind {
            0 => self.client.lookup_lst(&ids, LOOKUP_WAIT),
            1 => self.client.lookup_lst_into(&ids, LOOKUP_WAIT, |size| {
                Some(FaceMemory::new(size, true, &face) as Box<dyn LocalMemory>)
            }),
            _ => {
                // MAP of the chain over the thread's own memory, when its
                // chunks share a protocol.
                let chunks = self.program.chunks.clone();
                let protocol = chunks.protocol(ids[0]);
                if ids.iter().any(|&i| chunks.protocol(i) != protocol) {
                    return;
                }
                let sizes: Vec<usize> = ids.iter().map(|&i| chunks.size(i)).collect();
                let total = sizes.iter().sum();
                self.client
                    .map_lst(protocol, &ids, &sizes, FaceMemory::new(total, false, &face))
            }
        };
        match chain {
            Ok(chain) => {
                self.note(|| format!("new chain {ids:?} (kind {kind})"));
                st.chains.push(Known {
                    chain,
                    ids,
                    face: face.get(),
                });
            }
            Err(e) if self.lost(&e, "LOOKUP_LST") => {}
            Err(e) => self
                .shared
                .fail("LOOKUP_LST works", format!("chain {ids:?}: {e}")),
        }
    }

    /// The chunks this thread holds scopes on.
    fn held_ids(&self, st: &State) -> Vec<ChunkId> {
        st.held
            .iter()
            .flat_map(|h| st.chains[h.chain].ids.iter().copied())
            .collect()
    }

    /// Opens a scope on one of the known chains; nested scopes are taken in
    /// ascending order (chunks above every held one), as a program that
    /// does not deadlock itself does.
    fn open_scope(&mut self, st: &mut State) {
        if st.chains.is_empty() || st.held.len() >= 3 {
            return;
        }
        let i = self.program.rng.below(st.chains.len() as u64) as usize;
        let held = self.held_ids(st);
        let top = held.iter().copied().max();
        let ids = st.chains[i].ids.clone();
        if let Some(top) = top {
            if ids.iter().any(|&id| id <= top) {
                return;
            }
        }
        let access = match self.program.rng.below(10) {
            0..=4 => Access::Read,
            5..=6 => Access::Write,
            _ => Access::ReadWrite,
        };
        self.open_scope_on(st, i, access);
    }

    /// Opens a scope of `access` on known chain `i`, above every chunk held.
    fn open_scope_on(&mut self, st: &mut State, i: usize, access: Access) {
        let held = self.held_ids(st);
        let ids = st.chains[i].ids.clone();
        if self.program.send_faults && self.program.rng.chance(15) {
            self.fault.fail_next_coherence();
        }
        set_op(self, Some(format!("{access:?} chain {ids:?}")));
        let chain = st.chains[i].chain.clone();
        if let Err(e) = self.client.acquire_chain(&chain, access) {
            self.note(|| format!("{access:?} {ids:?} failed: {e}"));
            self.fault.clear();
            return;
        }
        self.fault.clear();
        // Sometimes the closure that writes the scope's bytes takes its
        // time (other threads run meanwhile) and calls the client: a GET of
        // a later chunk (ascending, as scopes nest here) and a RELEASE of
        // its own chunk, which must be refused.
        let busy = self.program.rng.chance(30).then(|| {
            let top = ids.iter().chain(held.iter()).copied().max().unwrap_or(0);
            let later: Vec<ChunkId> = self
                .program
                .chunks
                .shared
                .iter()
                .map(|c| c.0)
                .filter(|&c| c > top)
                .collect();
            (!later.is_empty()).then(|| later[self.program.rng.below(later.len() as u64) as usize])
        });
        let tokens = self.opened(&chain, &ids, access, busy);
        let saw: Vec<String> = ids
            .iter()
            .map(|&id| {
                let v = self.client.local_version(id);
                let (t, _) = self
                    .client
                    .with_chain(&chain, |b| {
                        let k = chain.layout().position(id).expect("in the chain");
                        content::read(&b[chain.layout().range(k)], id)
                    })
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or((0, 0));
                format!("{id}: v{v:?} t{t}")
            })
            .collect();
        self.note(|| {
            format!(
                "{access:?} {ids:?} open ({}), wrote {tokens:?}",
                saw.join(", ")
            )
        });
        let seen = if access == Access::Read {
            self.client
                .with_chain(&chain, |b| b.to_vec())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        st.held.push(Held {
            chain: i,
            access,
            tokens,
            seen,
        });
    }

    /// Records this thread's scope on `chunk`, which sees `version`, for
    /// the checks that no home moves past it; unless it opened on a grant
    /// of a lost server's, which its client will end without its home.
    fn record_scope(&self, chunk: ChunkId, version: crate::protocol::Version) {
        let mut oracle = Shared::lock(&self.shared.oracle);
        if !oracle.opens_orphaned(self.client_index, chunk, |s| self.client.knows_lost(s)) {
            oracle.scopes.push(OpenScope {
                thread: self.id,
                client: self.client_index,
                thread_index: self.thread_index,
                chunk,
                version,
            });
        }
    }

    /// A scope just opened on `chain`: check what it sees, record it, and
    /// write new tokens in a write scope.
    fn opened(
        &self,
        chain: &Chain,
        ids: &[ChunkId],
        access: Access,
        busy: Option<Option<ChunkId>>,
    ) -> Vec<(ChunkId, u64)> {
        let layout = chain.layout().clone();
        let mut tokens = Vec::new();
        let seen = self
            .client
            .with_chain(chain, |bytes| bytes.to_vec())
            .expect("a chain in scope is readable");
        // Per chunk: the version seen and the token its bytes hold.
        let mut versions = Vec::with_capacity(ids.len());
        for (k, &id) in ids.iter().enumerate() {
            let mine = &seen[layout.range(k)];
            // A write scope opened in E (no grant) builds on the holder's
            // own last release, which may still be on its way home.
            // (An adaptive chunk may run MESI with E now.)
            let exclusive_hit = access.exclusive()
                && self.client.running_protocol(id) == Some(ProtocolId::MesiExclusive);
            let sees = if access == Access::Write {
                let home = self.shared.home(id).map_or(0, |h| h.0);
                match self.client.local_version(id) {
                    Some(own) if exclusive_hit && own > home => own,
                    _ => home,
                }
            } else {
                match self.shared.check_sees(
                    self.client_index,
                    id,
                    mine,
                    access == Access::Read || exclusive_hit,
                ) {
                    Ok(v) => v,
                    Err(e) => {
                        self.shared.fail(
                            "a scope sees the home's current version",
                            format!("thread {} {access:?}: {e}", self.thread_index),
                        );
                        return tokens;
                    }
                }
            };
            self.record_scope(id, sees);
            if access != Access::Write {
                let token = content::read(mine, id).map_or(0, |(t, _)| t);
                versions.push((id, sees, token));
            }
            if access.exclusive() {
                let prev = if access == Access::ReadWrite {
                    content::read(mine, id).map_or(0, |(t, _)| t)
                } else {
                    content::BLIND
                };
                let granted = self.client.local_version(id).unwrap_or(0);
                let mut oracle = Shared::lock(&self.shared.oracle);
                tokens.push((id, oracle.token(self.client_index, id, granted, prev)));
            }
        }
        if versions.len() > 1 {
            let torn = Shared::lock(&self.shared.oracle).torn(&versions);
            if let Err(e) = torn {
                self.shared.fail(
                    "a chain's release applies all or nothing",
                    format!(
                        "thread {} {access:?} of chain {ids:?}: {e}",
                        self.thread_index
                    ),
                );
                return tokens;
            }
        }
        if access.exclusive() {
            let written = self.client.with_chain_mut(chain, |bytes| {
                if let Some(get) = busy {
                    self.busy_closure(ids[0], get);
                }
                for (k, &(id, token)) in tokens.iter().enumerate() {
                    let prev = {
                        let o = Shared::lock(&self.shared.oracle);
                        o.tokens[&token].prev
                    };
                    content::write(&mut bytes[layout.range(k)], id, token, prev);
                }
            });
            if let Err(e) = written {
                self.shared
                    .fail("a write scope is writable", format!("{ids:?}: {e}"));
            }
        }
        tokens
    }

    /// Inside a closure that has `own`'s bytes: let other threads run, GET
    /// chunk `get`, and try to release `own` (refused while lent).
    fn busy_closure(&self, own: ChunkId, get: Option<ChunkId>) {
        self.note(|| format!("a closure with chunk {own}'s bytes calls the client"));
        self.shared.sched.pause();
        if let Some(id) = get {
            let mut buf = vec![0u8; self.program.chunks.size(id)];
            match self.client.get(id, &mut buf) {
                Ok(()) => {
                    if let Err(e) = self.shared.check_sees(self.client_index, id, &buf, true) {
                        self.shared.fail(
                            "a scope sees the home's current version",
                            format!("a GET inside a closure: {e}"),
                        );
                    }
                }
                Err(e) if self.lost(&e, "GET inside a closure") => {}
                Err(e) => self
                    .shared
                    .fail("a closure may call the client", format!("GET {id}: {e}")),
            }
        }
        match self.client.release(own) {
            Err(crate::error::SatError::Usage(_)) => {}
            other => self.shared.fail(
                "a scope cannot end while a closure has its bytes",
                format!("RELEASE of chunk {own} inside its closure: {other:?}"),
            ),
        }
        self.shared.sched.pause();
    }

    /// Ends held scope `i` by a release or an abort.
    fn end_scope(&mut self, st: &mut State, i: usize, end: End) {
        let h = st.held.remove(i);
        let known = &st.chains[h.chain];
        let ids = known.ids.clone();
        // Re-reading a read scope: it still sees the version it opened on.
        if h.access == Access::Read {
            match self.client.with_chain(&known.chain, |b| b.to_vec()) {
                Ok(now) if now != h.seen => self.shared.fail(
                    "a read scope sees one version",
                    format!("the bytes of chain {ids:?} changed under a read scope"),
                ),
                Ok(_) => {}
                Err(e) => self
                    .shared
                    .fail("a read scope sees one version", format!("{ids:?}: {e}")),
            }
        }
        {
            // Before the message leaves: the home may move once it arrives.
            let mut o = Shared::lock(&self.shared.oracle);
            for &id in &ids {
                if let Some(k) = o
                    .scopes
                    .iter()
                    .position(|s| s.thread == self.id && s.chunk == id)
                {
                    o.scopes.remove(k);
                }
            }
        }
        set_op(self, Some(format!("{end:?} {:?} {ids:?}", h.access)));
        // A chain of several chunks is mostly released as a whole, which a
        // run that outlives its clients applies all or nothing. (Not where
        // sends fail: which chunks a failed whole release ended is this
        // thread's to know, and a scope's state is the process's.)
        let whole = end == End::Release
            && ids.len() > 1
            && !self.program.send_faults
            && self.program.rng.chance(70);
        if end == End::Release {
            let mut o = Shared::lock(&self.shared.oracle);
            for t in &h.tokens {
                o.releasing(t.1);
            }
            if whole {
                let tokens: Vec<u64> = h.tokens.iter().map(|t| t.1).collect();
                o.chain_release(self.client_index, tokens);
            }
        }
        let mut ended = vec![false; ids.len()];
        // Ended by a server's loss: published or not.
        let mut lost = vec![false; ids.len()];
        if whole {
            let r = self.client.release_chain(&known.chain);
            self.fault.clear();
            match r {
                Ok(()) => ended.iter_mut().for_each(|e| *e = true),
                // Every scope of the chain ended; what was published is
                // for the homes to show.
                Err(e) if self.lost(&e, "release of a chain") => {
                    ended.iter_mut().for_each(|e| *e = true);
                    lost.iter_mut().for_each(|l| *l = true);
                }
                Err(e) => self.shared.fail(
                    "a chain's release succeeds",
                    format!("release of chain {ids:?}: {e}"),
                ),
            }
        }
        for (k, &id) in ids.iter().enumerate() {
            if whole {
                break;
            }
            let r = match end {
                End::Release => self.client.release(id),
                End::Abort => self.client.abort(id),
            };
            self.fault.clear();
            match r {
                Ok(()) => ended[k] = true,
                Err(e) if self.lost(&e, "the end of a scope") => {
                    ended[k] = true;
                    lost[k] = true;
                }
                Err(e) => self.note(|| format!("{end:?} of chunk {id} failed: {e}")),
            }
        }
        for (k, &id) in ids.iter().enumerate() {
            let token = h.tokens.iter().find(|t| t.0 == id).map(|t| t.1);
            if !ended[k] {
                // Its end could not be sent: the scope is still open, as
                // it was. End it without publishing.
                if !(0..4).any(|_| self.client.abort(id).is_ok()) {
                    self.shared
                        .fail("a scope can end", format!("chunk {id} stays in scope"));
                }
                if let Some(token) = token {
                    Shared::lock(&self.shared.oracle).abort(token);
                }
                continue;
            }
            let Some(token) = token else { continue };
            let mut o = Shared::lock(&self.shared.oracle);
            if lost[k] {
                o.lose(token);
                continue;
            }
            match end {
                End::Release => {
                    if let Err(e) = o.commit(token) {
                        drop(o);
                        self.shared.fail("each version has one release", e);
                    }
                }
                End::Abort => o.abort(token),
            }
        }
        self.note(|| format!("{end:?} {:?} {ids:?}", h.access));
    }

    /// A write scope whose thread panics: the guard, dropped while the
    /// thread unwinds, aborts it.
    fn panic_in_scope(&mut self, st: &mut State) {
        if st.chains.is_empty() || !st.held.is_empty() {
            return;
        }
        let i = self.program.rng.below(st.chains.len() as u64) as usize;
        let chain = st.chains[i].chain.clone();
        let ids = st.chains[i].ids.clone();
        set_op(self, Some(format!("WRITE {ids:?} then a panic")));
        let scope = match self.client.write(&chain) {
            Ok(s) => s,
            Err(_) => return,
        };
        let tokens = self.opened(&chain, &ids, Access::Write, None);
        {
            let mut o = Shared::lock(&self.shared.oracle);
            o.scopes.retain(|s| s.thread != self.id);
            for &(_, token) in &tokens {
                o.abort(token);
            }
        }
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _scope = scope;
            std::panic::panic_any(Deliberate);
        }));
        debug_assert!(unwound.is_err());
        self.note(|| format!("panicked inside WRITE {ids:?} (tokens {tokens:?})"));
    }

    /// Bytes written into a chain's memory outside any scope, as C code
    /// writes `chunk->data` or Python a kept numpy array (Figure 5): they
    /// are not the chain's data, and no scope of any process may see them
    /// (the invariants check every byte a scope sees and a home publishes).
    /// Only in a client of one thread, outside its scopes on the chain: a
    /// scope another thread has open would see them, as in C.
    fn stray_write(&mut self, st: &mut State) {
        if self.threads != 1 {
            return;
        }
        let held = self.held_ids(st);
        let candidates: Vec<usize> = (0..st.chains.len())
            .filter(|&i| {
                st.chains[i].face.is_some() && !st.chains[i].ids.iter().any(|id| held.contains(id))
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        let i = candidates[self.program.rng.below(candidates.len() as u64) as usize];
        let known = &st.chains[i];
        let face = known.face.expect("filtered");
        let k = self.program.rng.below(known.ids.len() as u64) as usize;
        let range = known.chain.layout().range(k);
        let value = 1 + self.program.rng.below(255) as u8;
        assert!(
            range.end <= face.len,
            "a chunk lies inside its chain's memory"
        );
        // SAFETY: `face` points at the chain's memory, which lives as long
        // as the chain (see `FaceBytes`); one thread runs at a time, and no
        // scope of this client is open on the chunk.
        unsafe { std::ptr::write_bytes(face.ptr.add(range.start), value, range.len()) };
        let id = known.ids[k];
        self.note(|| format!("wrote {value} over chunk {id}'s bytes outside any scope"));
    }

    /// PUT of new bytes into a shared chunk, or GET of one.
    fn put_get(&mut self, st: &mut State) {
        if !st.held.is_empty() {
            return;
        }
        let id = self.pick_shared();
        let size = self.program.chunks.size(id);
        if self.program.rng.chance(25) {
            self.read_in_place(id);
            return;
        }
        if self.program.rng.chance(50) {
            set_op(self, Some(format!("GET {id}")));
            let mut buf = vec![0u8; size];
            match self.client.get(id, &mut buf) {
                Ok(()) => {
                    if let Err(e) = self.shared.check_sees(self.client_index, id, &buf, true) {
                        self.shared.fail(
                            "a scope sees the home's current version",
                            format!("GET: {e}"),
                        );
                    }
                }
                Err(e) if self.lost(&e, "GET") => {}
                Err(e) => self.shared.fail("GET works", format!("chunk {id}: {e}")),
            }
            return;
        }
        // The token is made before the scope, its version found after.
        let token =
            Shared::lock(&self.shared.oracle).token(self.client_index, id, 0, content::BLIND);
        let mut bytes = vec![0u8; size];
        content::write(&mut bytes, id, token, content::BLIND);
        set_op(self, Some(format!("PUT {id} token {token}")));
        {
            // Its version is known once published (0 until then).
            let mut o = Shared::lock(&self.shared.oracle);
            o.tokens.get_mut(&token).expect("made").version = 0;
            o.releasing(token);
        }
        match self.client.put(id, &bytes) {
            Ok(()) => {
                let version = self.client.local_version(id).unwrap_or(0);
                let mut o = Shared::lock(&self.shared.oracle);
                let t = o.tokens.get_mut(&token).expect("made");
                // The home may have shown it already, at its version, while
                // the release waited (for the backup, in a run with
                // replicated homes); the chunk's copy here may have been
                // evicted meanwhile.
                if t.status != Status::Committed {
                    t.version = version;
                }
                if let Err(e) = o.commit(token) {
                    drop(o);
                    self.shared.fail("each version has one release", e);
                }
            }
            // Its release may have been published, or not.
            Err(e) if self.lost(&e, "PUT") => Shared::lock(&self.shared.oracle).lose(token),
            Err(e) => {
                Shared::lock(&self.shared.oracle).abort(token);
                self.shared.fail("PUT works", format!("chunk {id}: {e}"));
            }
        }
    }

    /// A READ of `id` in place (`client/in_place.rs`), where its host slot
    /// allows it: the bytes seen there must be the home's version, as a
    /// scope's are.
    fn read_in_place(&mut self, id: ChunkId) {
        set_op(self, Some(format!("READ in place {id}")));
        match self.client.read_in_place(id) {
            Ok(Some(view)) => {
                if let Err(e) = self
                    .shared
                    .check_sees(self.client_index, id, view.bytes(), true)
                {
                    self.shared.fail(
                        "a scope sees the home's current version",
                        format!("READ in place: {e}"),
                    );
                }
                match self.client.end_read_in_place(id) {
                    Ok(()) => {}
                    Err(e) if self.lost(&e, "end of a READ in place") => {}
                    Err(e) => self
                        .shared
                        .fail("a READ in place ends", format!("chunk {id}: {e}")),
                }
            }
            Ok(None) => self.note(|| format!("chunk {id} cannot be read in place")),
            Err(e) if self.lost(&e, "READ in place") => {}
            Err(e) => self
                .shared
                .fail("READ in place works", format!("chunk {id}: {e}")),
        }
    }

    /// Misuse that fails part way: inside a READ scope on a shared chunk,
    /// WRITE a chain of this thread's own chunk and that one. The own
    /// chunk is granted first (ascending order), the shared one refused:
    /// nothing may be published.
    fn failing_write(&mut self, st: &mut State) {
        if !st.held.is_empty() {
            return;
        }
        let id = self.pick_shared();
        set_op(
            self,
            Some(format!("READ {id}, then WRITE [{}, {id}]", st.private)),
        );
        if self.client.acquire(id, Access::Read).is_err() {
            return;
        }
        let seen = self
            .client
            .with_data(id, |b| b.to_vec())
            .unwrap_or_default();
        let version = match self.shared.check_sees(self.client_index, id, &seen, true) {
            Ok(v) => v,
            Err(e) => {
                self.shared.fail(
                    "a scope sees the home's current version",
                    format!("READ: {e}"),
                );
                return;
            }
        };
        self.record_scope(id, version);
        let pair = self.client.lookup_lst(&[st.private, id], LOOKUP_WAIT);
        match pair {
            Ok(chain) => match self.client.acquire_chain(&chain, Access::Write) {
                Ok(()) => self.shared.fail(
                    "misuse is refused",
                    format!(
                        "WRITE of [{}, {id}] inside a READ of {id} succeeded",
                        st.private
                    ),
                ),
                Err(e) => self.note(|| format!("WRITE [{}, {id}] refused: {e}", st.private)),
            },
            Err(e) if self.lost(&e, "LOOKUP_LST") => {}
            Err(e) => self
                .shared
                .fail("LOOKUP_LST works", format!("[{}, {id}]: {e}", st.private)),
        }
        {
            let mut o = Shared::lock(&self.shared.oracle);
            if let Some(k) = o
                .scopes
                .iter()
                .position(|s| s.thread == self.id && s.chunk == id)
            {
                o.scopes.remove(k);
            }
        }
        if let Err(e) = self.client.release(id) {
            self.shared
                .fail("RELEASE works", format!("chunk {id}: {e}"));
        }
    }

    /// Runs the handlers of the events that arrived, now, as a role that
    /// computes between its waits does (`Client::run_handlers`): on the
    /// role's thread (thread 0) they run, and what they check is checked as
    /// in a wait; on another thread the call is refused and runs nothing.
    fn serve_now(&mut self, st: &mut State) {
        // Handlers run on this thread: one that READs a chunk this thread
        // holds in a scope would be refused (as in a barrier's wait, which
        // is why the barrier ends them too).
        if self.thread_index == 0 {
            while !st.held.is_empty() {
                self.end_scope(st, st.held.len() - 1, End::Release);
            }
        }
        set_op(self, Some("run_handlers".into()));
        let role = self.thread_index == 0;
        match (self.client.run_handlers(), role) {
            (Ok(_), true) | (Err(crate::error::SatError::Usage(_)), false) => {}
            (Err(e), true) if self.lost(&e, "run_handlers") => {}
            (r, _) => self.shared.fail(
                "run_handlers runs handlers on the role's thread, and only there",
                format!("thread {}: {r:?}", self.thread_index),
            ),
        }
    }

    /// SUBSCRIBE to a shared chunk or to a chain this thread knows
    /// (handlers GET every chunk subscribed to and check what they see;
    /// some unsubscribe after a few events), or UNSUBSCRIBE. Each
    /// subscription is recorded as a [`Hearing`]: at the end of a run, a
    /// subscription still in place must have heard of every release of its
    /// chunks made after it was confirmed.
    fn subscription(&mut self, st: &State) {
        let with_data = self.program.rng.chance(50);
        let stop_after = self.program.rng.below(4);
        let chain = match st.chains.len() {
            0 => None,
            n if self.program.rng.chance(50) => Some(
                st.chains[self.program.rng.below(n as u64) as usize]
                    .chain
                    .clone(),
            ),
            _ => None,
        };
        let ids: Vec<ChunkId> = match &chain {
            Some(c) => c.ids().collect(),
            None => vec![self.pick_shared()],
        };
        let what = match &chain {
            Some(_) => format!("the chain {ids:?}"),
            None => format!("chunk {}", ids[0]),
        };
        set_op(self, Some(format!("SUBSCRIBE {what}")));
        let hearing = {
            let mut o = Shared::lock(&self.shared.oracle);
            o.hearings.push(Hearing {
                client: self.client_index,
                what: what.clone(),
                chunks: Vec::new(),
                live: false,
            });
            o.hearings.len() - 1
        };
        let shared = self.shared.clone();
        let sizes: Vec<(ChunkId, usize)> = ids
            .iter()
            .map(|&id| (id, self.program.chunks.size(id)))
            .collect();
        let runs = AtomicUsize::new(0);
        let told = std::sync::Mutex::new(std::collections::HashMap::<ChunkId, u64>::new());
        let stopped = Arc::new(AtomicBool::new(false));
        let unsubscribed = stopped.clone();
        let client = self.client_index;
        let of_chain = chain.clone();
        let server_loss = self.program.server_loss;
        let handler = move |c: &Client, event: &Event| -> crate::client::HandlerResult {
            Shared::lock(&shared.oracle).notifications += 1;
            let heard = match event {
                Event::Chunk { chunk, .. } => sizes.iter().any(|s| s.0 == *chunk),
                Event::Signal { .. } => false,
            };
            if !heard {
                shared.fail(
                    "events match subscriptions",
                    format!("{event:?} for a subscription to {:?}", sizes),
                );
                return Ok(());
            }
            if let Event::Chunk {
                chunk,
                version,
                data,
            } = event
            {
                // A chunk's events never go back to an older version: the
                // last one a handler sees is the newest.
                let mut last = told.lock().unwrap_or_else(|p| p.into_inner());
                let before = last.insert(*chunk, *version).unwrap_or(0);
                if *version < before {
                    shared.fail(
                        "a chunk's notifications never go back",
                        format!(
                            "client {client}: chunk {chunk} notified at version {version} after \
                             version {before}"
                        ),
                    );
                }
                // The data a notification carries is its version's bytes.
                if let Some(data) = data {
                    let o = Shared::lock(&shared.oracle);
                    let token = content::read(data, *chunk).map(|(t, _)| t);
                    let made = token
                        .as_ref()
                        .ok()
                        .and_then(|t| o.tokens.get(t))
                        .map_or(0, |t| t.version);
                    if made != *version {
                        drop(o);
                        shared.fail(
                            "a notification's data is its version",
                            format!(
                                "client {client}: chunk {chunk} notified at version {version} \
                                 with bytes {token:?} of version {made}"
                            ),
                        );
                    }
                }
            }
            for &(chunk, size) in &sizes {
                let mut buf = vec![0u8; size];
                // Made again when a server's loss fails it.
                loop {
                    match c.get(chunk, &mut buf) {
                        Err(crate::error::SatError::ProcessLost(_)) if server_loss => continue,
                        other => break other,
                    }
                }?;
                match shared.check_sees(client, chunk, &buf, true) {
                    Ok(seen) => {
                        let mut o = Shared::lock(&shared.oracle);
                        if let Some(h) =
                            o.hearings[hearing].chunks.iter_mut().find(|h| h.0 == chunk)
                        {
                            h.2 = h.2.max(seen);
                        }
                    }
                    Err(e) => shared.fail(
                        "a scope sees the home's current version",
                        format!("a handler's GET: {e}"),
                    ),
                }
            }
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            if stop_after > 0 && n as u64 >= stop_after {
                stopped.store(true, Ordering::SeqCst);
                Shared::lock(&shared.oracle).hearings[hearing].live = false;
                match &of_chain {
                    Some(chain) => c.unsubscribe_chain(chain)?,
                    None => c.unsubscribe(sizes[0].0)?,
                }
            }
            Ok(())
        };
        let r = match &chain {
            Some(chain) => self.client.subscribe_chain(chain, with_data, handler),
            None => self.client.subscribe(ids[0], with_data, handler),
        };
        match r {
            Ok(()) => {
                // Releases the homes applied before now may not be told;
                // every later one must be.
                let since: Vec<(ChunkId, u64, u64)> = ids
                    .iter()
                    .map(|&id| (id, self.shared.home(id).map_or(0, |h| h.0), 0))
                    .collect();
                let mut o = Shared::lock(&self.shared.oracle);
                let h = &mut o.hearings[hearing];
                h.live = !unsubscribed.load(Ordering::SeqCst);
                h.chunks = since;
                drop(o);
                self.note(|| format!("subscribed to {what} (data {with_data})"));
            }
            Err(e) if self.lost(&e, "SUBSCRIBE") => {}
            Err(e) => {
                if !e.to_string().contains("already subscribed") {
                    self.shared.fail("SUBSCRIBE works", format!("{what}: {e}"));
                }
            }
        }
    }

    /// Raise a signal, or subscribe to one with a handler that subscribes
    /// to a chunk and unsubscribes from the signal.
    /// Passes the run's barrier, holding no scope (a scope held across it
    /// could be one another arrival waits for).
    fn barrier(&mut self, st: &mut State, b: Barrier) {
        while !st.held.is_empty() {
            self.end_scope(st, st.held.len() - 1, End::Release);
        }
        let round = {
            let mut o = Shared::lock(&self.shared.oracle);
            let arrived = (o.barrier_rounds.entry(self.id)).or_insert((self.client_index, 0));
            arrived.1 += 1;
            arrived.1
        };
        set_op(
            self,
            Some(format!("barrier {} of {}, round {round}", b.id, b.count)),
        );
        // A run that loses a process fails each thread's first call after
        // the loss, uncounted (sat.h: call it again with the count left: a
        // lost server takes no client with it, a lost client its threads).
        // Any other failure, or a second one, breaks the barrier.
        let count_left = |st: &State| {
            if st.barrier_failed_for_loss {
                b.count - Shared::lock(&self.shared.oracle).dead_threads
            } else {
                b.count
            }
        };
        loop {
            match self.client.barrier(b.id, count_left(st)) {
                Ok(()) => break,
                Err(crate::SatError::ProcessLost(why))
                    if (self.program.server_loss || self.program.client_loss)
                        && !st.barrier_failed_for_loss =>
                {
                    st.barrier_failed_for_loss = true;
                    Shared::lock(&self.shared.oracle).barriers_called_again += 1;
                    self.note(|| format!("barrier {} failed for the loss: {why}", b.id));
                }
                Err(e) => {
                    return self
                        .shared
                        .fail("a barrier every thread reaches ends", e.to_string());
                }
            }
        }
        // It let this thread through only once every thread had arrived at
        // this round (every thread of a client that is still alive: a dead
        // one's arrival may have counted, or not).
        {
            let o = Shared::lock(&self.shared.oracle);
            let dead = o.dead_threads;
            let arrived = (o.barrier_rounds.values())
                .filter(|&&(c, r)| r >= round && !o.dead.contains(&c))
                .count();
            if arrived < (b.count - dead) as usize {
                let rounds: Vec<String> = (o.barrier_rounds.iter())
                    .map(|(t, (c, r))| format!("thread {t} of client {c}: {r}"))
                    .collect();
                drop(o);
                return self.shared.fail(
                    "a barrier lets a thread through only once every thread arrived",
                    format!(
                        "round {round} of barrier {} passed with {arrived} of {} live threads \
                         arrived at it ({})",
                        b.id,
                        b.count - dead,
                        rounds.join(", ")
                    ),
                );
            }
        }
        self.note(|| format!("passed barrier {}, round {round}", b.id));
        // As an iterative program does after a barrier: read the chunks of
        // protocols that learn (pushed to it from the second round on).
        let learned: Vec<usize> = (0..st.chains.len())
            .filter(|&i| {
                let ids = &st.chains[i].ids;
                let protocol = self.program.chunks.protocol(ids[0]);
                ids.len() == 1 && (protocol.learns() || protocol == ProtocolId::Adaptive)
            })
            .collect();
        for i in learned {
            if self.program.rng.chance(70) {
                self.open_scope_on(st, i, Access::Read);
                if !st.held.is_empty() {
                    self.end_scope(st, st.held.len() - 1, End::Release);
                }
            }
        }
    }

    fn signal(&mut self) {
        let id = 1 + self.program.rng.below(2) as u32;
        if self.program.rng.chance(50) {
            set_op(self, Some(format!("raise {id}")));
            if let Err(e) = self.client.raise(id) {
                self.shared.fail("raise works", e.to_string());
            }
            return;
        }
        let chunk = self.pick_shared();
        let shared = self.shared.clone();
        set_op(self, Some(format!("subscribe to signal {id}")));
        let r = self.client.subscribe_signal(id, move |c, _| {
            Shared::lock(&shared.oracle).notifications += 1;
            c.unsubscribe_signal(id)?;
            match c.subscribe(chunk, true, |_, _| Ok(())) {
                Ok(()) => {}
                Err(e) if e.to_string().contains("already subscribed") => {}
                Err(e) => return Err(e.into()),
            }
            Ok(())
        });
        if let Err(e) = r {
            if !e.to_string().contains("already subscribed") {
                self.shared.fail("subscribe_signal works", e.to_string());
            }
        }
    }
}

impl Thread {
    /// A wakeup, then a rendezvous on the same id, this thread's own (a
    /// sibling thread's rendezvous would consume the wakeup for the whole
    /// process): the wakeup returned once its coordinator applied it, so
    /// the rendezvous returns on it at once, however the messages of the
    /// two calls are delivered. A run that loses a process may fail the
    /// rendezvous once (`ProcessLost`): then the pair is not checked. The
    /// wakeup never fails for a server's loss.
    ///
    /// Holding no scope, as for the barrier: the rendezvous runs the
    /// process's handlers, which read chunks this thread might hold.
    fn wakeup_then_rendezvous(&mut self, st: &mut State) {
        while !st.held.is_empty() {
            self.end_scope(st, st.held.len() - 1, End::Release);
        }
        let id = 1000 + self.id as u32;
        set_op(self, Some(format!("wakeup {id}")));
        // A server's loss does not fail it: the wakeup is sent again
        // through the stand-in and applied once (sat.h, `sat_wakeup`).
        if let Err(e) = self.client.wakeup(id) {
            return self.shared.fail("wakeup works", e.to_string());
        }
        set_op(self, Some(format!("rendezvous {id} after a wakeup")));
        match self.client.rendezvous(id) {
            Ok(()) => {
                Shared::lock(&self.shared.oracle).rendezvous_met += 1;
                self.note(|| format!("woke and met rendezvous {id}"));
            }
            // Once per process the run may lose, at most: each loss fails
            // a rendezvous once (`crate::sync`).
            Err(crate::SatError::ProcessLost(why))
                if st.rendezvous_failed_for_loss
                    < u32::from(self.program.server_loss) + u32::from(self.program.client_loss) =>
            {
                st.rendezvous_failed_for_loss += 1;
                self.note(|| format!("rendezvous {id} failed for a loss: {why}"));
            }
            Err(e) => self
                .shared
                .fail("a rendezvous after a wakeup returns", e.to_string()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Release,
    Abort,
}

/// Faults a client's transport may show: one coherence send that fails,
/// the end of the process, or a server that died: what is sent to it is
/// lost, and the next poll reports it unreachable, as the tcp provider's
/// failed completions do, before (or after) the run's word of the loss.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fault(Arc<FaultState>);

#[derive(Debug, Default)]
struct FaultState {
    /// The thread whose next coherence message fails.
    fail_next: std::sync::Mutex<Option<std::thread::ThreadId>>,
    dead: AtomicBool,
    /// A server that died (0: none; server 0, the seed's, never dies here).
    server_gone: std::sync::atomic::AtomicU32,
    /// A failed send to it, reported by the next poll.
    deferred: std::sync::Mutex<Option<TransportError>>,
}

impl Fault {
    /// The next coherence message the calling thread sends fails.
    fn fail_next_coherence(&self) {
        *Shared::lock(&self.0.fail_next) = Some(std::thread::current().id());
    }

    fn clear(&self) {
        *Shared::lock(&self.0.fail_next) = None;
    }

    /// Whether this send fails (once).
    fn fails_now(&self) -> bool {
        let mut armed = Shared::lock(&self.0.fail_next);
        if *armed == Some(std::thread::current().id()) {
            *armed = None;
            return true;
        }
        false
    }

    /// The process is gone: nothing leaves, nothing arrives.
    pub fn die(&self) {
        self.0.dead.store(true, Ordering::Relaxed);
    }

    /// Server `rank` died: what this process sends it from now on fails.
    pub fn server_died(&self, rank: Rank) {
        self.0.server_gone.store(rank, Ordering::Relaxed);
    }

    fn server_is_gone(&self, rank: Rank) -> bool {
        let gone = self.0.server_gone.load(Ordering::Relaxed);
        gone != 0 && gone == rank
    }
}

/// A client's transport with [`Fault`]s.
pub(crate) struct Faulty<T> {
    inner: T,
    fault: Fault,
}

impl<T: Transport> Faulty<T> {
    pub fn new(inner: T, fault: Fault) -> Faulty<T> {
        Faulty { inner, fault }
    }
}

impl<T: Transport> Sender for Faulty<T> {
    fn send(
        &mut self,
        dest: Rank,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<(), TransportError> {
        let lost = |reason: &str| {
            Err(TransportError::PeerLost {
                rank: dest,
                reason: reason.into(),
            })
        };
        if self.fault.0.dead.load(Ordering::Relaxed) {
            return lost("this process is dead (simulated)");
        }
        if matches!(wire::decode(header), Ok(Message::Coherence { .. })) && self.fault.fails_now() {
            return lost("a simulated send failure");
        }
        if self.fault.server_is_gone(dest) {
            // Taken, and failed later, as a connection's send does.
            let mut deferred = Shared::lock(&self.fault.0.deferred);
            deferred.get_or_insert(TransportError::PeerLost {
                rank: dest,
                reason: "a send failed: the server died (simulated)".into(),
            });
            return Ok(());
        }
        self.inner.send(dest, header, payload)
    }
}

impl<T: Transport> Transport for Faulty<T> {
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
        if self.fault.0.dead.load(Ordering::Relaxed) {
            return Ok(0);
        }
        let n = self.inner.poll(on_message)?;
        match Shared::lock(&self.fault.0.deferred).take() {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    fn messages_sent(&self) -> u64 {
        self.inner.messages_sent()
    }

    fn sends_drained(&mut self) -> Result<bool, TransportError> {
        self.inner.sends_drained()
    }

    fn post_hint(&mut self, rank: Rank, chunk: u64) -> bool {
        // A dead process tells nobody; it still reaches the inbox, so its
        // releases are not sent to the home instead.
        self.fault.0.dead.load(Ordering::Relaxed) || self.inner.post_hint(rank, chunk)
    }

    fn reaches_inbox(&self, rank: Rank) -> bool {
        self.inner.reaches_inbox(rank)
    }

    fn take_hints(&mut self) -> Option<crate::segment::inbox::Taken> {
        if self.fault.0.dead.load(Ordering::Relaxed) {
            return None;
        }
        self.inner.take_hints()
    }
}
