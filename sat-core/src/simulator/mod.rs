//! The whole-stack simulator: the real clients, stores, servers, protocols,
//! symbols and synchronization objects of a run, over the in-process
//! transport, driven by one seeded scheduler, with the invariants of a
//! shared memory checked after every step (feature `simulator`).
//!
//! In the spirit of FoundationDB's and TigerBeetle's simulators: a seed
//! fixes everything (the topology, the memory capacities, the protocols of
//! the chunks, every thread's program, the delivery delays within per-pair
//! FIFO order, which thread or server runs at each step, the sends that
//! fail, the clients that fail or die), so a failure prints its seed and
//! `sat-simulate --seed S` replays it exactly.
//!
//! What runs (see [`workload`]): 1 to 3 servers and 2 to 4 clients of 1 to 3
//! API threads each. Threads allocate and look up chunks, build chains that
//! overlap, with SAT's memory or their own (as the C and Python faces do),
//! open READ, WRITE and READWRITE scopes (nested in ascending order), end
//! them by release, abort or a panic, PUT and GET, subscribe (handlers that
//! read, unsubscribe, subscribe from a handler), raise signals, pass a
//! barrier every thread reaches (outside services: the chunks of protocols
//! that learn are then pushed as it ends), and probe misuse (a WRITE chain
//! that fails part way). Some runs allocate under advice (`SAT_ADVICE`):
//! some of their MESI chunks take another protocol at MALLOC. Clients may end their role in failure with scopes
//! open; in a service, clients may die at any step. The
//! run ends by its termination protocol (section 3), including the
//! quiescence detection that stops clients waiting on subscriptions.
//!
//! What is checked (see [`world`]):
//! - every version a home publishes is the bytes of exactly one release,
//!   at the version its writer was granted plus one, in order: no invented
//!   bytes, no bytes of a scope that did not release, nothing published
//!   twice, and a READWRITE builds on the version before it (no lost
//!   update);
//! - a READ or READWRITE scope sees the home's current version when it
//!   opens, and no home version changes while a scope on it is open (one
//!   writer or many readers);
//! - a handler's events of a chunk never go back in version, and the data
//!   an event carries is the bytes of the version it names;
//! - a barrier lets a thread through a round only once every thread has
//!   arrived at it, and a server's loss fails a thread's barrier call at
//!   most once (most runs that lose a server pass a barrier, and lose no
//!   client then); a wakeup never fails for a server's loss;
//! - every operation ends within a step bound, and the run ends;
//! - no panic, no server error.
//!
//! New paths (a shared segment, batched requests, another protocol) plug in
//! by being used by the real client and server: the simulator drives those,
//! and its workload picks protocols from [`ProtocolId`]'s list.

pub mod scheduler;
pub mod workload;
pub mod world;

use std::fmt;

use crate::protocol::ProtocolId;

pub use world::run;

/// The shape of the runs a seed may pick from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Operations per API thread, at most.
    pub ops: u32,
    /// A step bound for the whole run: past it, the run is not live.
    pub max_steps: u64,
    /// A step bound for one operation.
    pub op_steps: u64,
    /// Print every step (for replaying one seed).
    pub trace: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            ops: 40,
            max_steps: 400_000,
            op_steps: 60_000,
            trace: false,
        }
    }
}

/// What a passing run did, for the summary.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub steps: u64,
    pub servers: u32,
    pub clients: u32,
    pub service: bool,
    /// The homes kept their versions in host slots.
    pub host_slots: bool,
    pub committed: u64,
    pub aborted: u64,
    pub read_checks: u64,
    pub notifications: u64,
    /// Chunks pushed as a barrier ended (learned communication sets).
    pub pushed: u64,
    /// Read requests sent ahead of a chain's READ.
    pub asked_ahead: u64,
    /// PUTs published straight from the caller's bytes into a host slot.
    pub put_direct: u64,
    /// READs of a version where it is, in its host slot.
    pub read_in_place: u64,
    /// Rendezvous that returned on their thread's own wakeup, answered.
    pub rendezvous_met: u64,
    /// Barrier calls a loss failed, made again with the count left.
    pub barriers_called_again: u64,
    /// Protocol switches of adaptive chunks the clients applied.
    pub switches: u64,
    /// Adaptive chunks whose home moved to another server.
    pub moved: u64,
    /// Versions the servers read back from their spill files.
    pub spilled: u64,
    /// Clients a run with recovery lost (and went on without).
    pub lost: u64,
    /// Notifications servers held back for subscribers that were behind.
    pub held: u64,
    /// Chunks whose backup held their home's version at the end (runs
    /// with replicated homes).
    pub backed_up: u64,
    /// Servers lost by runs with replicated homes, which went on.
    pub servers_lost: u64,
}

/// A broken invariant, with what replays it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub step: u64,
    /// The invariant that broke, in a few words.
    pub invariant: String,
    pub detail: String,
    /// The last steps before the failure.
    pub recent: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} broke \"{}\" at step {}: {}",
            self.seed, self.invariant, self.step, self.detail
        )?;
        if !self.recent.is_empty() {
            writeln!(f, "the last steps:")?;
            for line in &self.recent {
                writeln!(f, "  {line}")?;
            }
        }
        write!(
            f,
            "replay it with: sat-simulate --seed {} --trace",
            self.seed
        )
    }
}

/// The protocols the workload allocates chunks with: a new protocol joins
/// the simulation by being listed here.
/// (Multi-writer chunks are allocated besides them, with their own
/// content: `content::write_lane`.)
pub const PROTOCOLS: [ProtocolId; 6] = [
    ProtocolId::HomeMesi,
    ProtocolId::HomeOnly,
    ProtocolId::MesiExclusive,
    ProtocolId::UpdateMesi,
    ProtocolId::LearnedMesi,
    ProtocolId::Adaptive,
];

/// The protocols a run draws from: [`PROTOCOLS`], and one registered at
/// run time ([`crate::protocol::registry`]) whose handlers are home-only's,
/// so that ids of registered protocols travel in MALLOC and allocation
/// answers and are resolved in every client and server.
pub(crate) fn protocols() -> Vec<ProtocolId> {
    static REGISTERED: std::sync::OnceLock<ProtocolId> = std::sync::OnceLock::new();
    let user = *REGISTERED.get_or_init(|| {
        crate::protocol::registry::register("simulated-user", |id| Box::new(Registered(id)))
            .expect("registered once")
    });
    PROTOCOLS.iter().copied().chain([user]).collect()
}

/// A registered protocol: home-only's handlers under a registered id.
struct Registered(ProtocolId);

impl crate::protocol::Consistency for Registered {
    fn id(&self) -> ProtocolId {
        self.0
    }
    fn new_home(&self, size: usize) -> Box<dyn crate::protocol::HomeSide> {
        crate::protocol::home_only::HomeOnly.new_home(size)
    }
    fn new_client(&self, size: usize) -> Box<dyn crate::protocol::ClientSide> {
        crate::protocol::home_only::HomeOnly.new_client(size)
    }
}

/// SplitMix64: the run's generator (written out, so a seed's run never
/// changes with a dependency's version).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A generator for a part of the run, independent of the others.
    pub fn fork(&mut self, salt: u64) -> Rng {
        Rng::new(self.next_u64() ^ salt.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }
}

/// The bytes a simulated write scope leaves in a chunk: who wrote them and
/// on what, so that any version a home publishes can be traced to exactly
/// one release. `prev` is the token a READWRITE read (`BLIND` for a WRITE).
/// Chunks are at least [`content::MIN_CHUNK`] bytes.
pub mod content {
    /// The `prev` of a WRITE, which does not read.
    pub const BLIND: u64 = u64::MAX;
    /// The smallest chunk the workload allocates: the header and some fill.
    pub const MIN_CHUNK: usize = 40;

    fn fill(token: u64, i: usize) -> u8 {
        (token.wrapping_mul(31).wrapping_add(i as u64 * 7) >> 3) as u8
    }

    /// Writes token `token` (never 0) of `chunk` over `bytes`.
    pub fn write(bytes: &mut [u8], chunk: u64, token: u64, prev: u64) {
        bytes[0..8].copy_from_slice(&token.to_le_bytes());
        bytes[8..16].copy_from_slice(&prev.to_le_bytes());
        bytes[16..24].copy_from_slice(&chunk.to_le_bytes());
        for (i, b) in bytes.iter_mut().enumerate().skip(24) {
            *b = fill(token, i);
        }
    }

    /// Multi-writer chunks ([`crate::protocol::hlrc`]): client `k` writes
    /// only its lane, bytes `LANE * k ..`: the number of its write scope
    /// (1, 2, ...) and a check word.
    pub const LANE: usize = 16;
    /// Lanes per multi-writer chunk: the most clients a run has.
    pub const LANES: usize = 4;
    pub const LANE_CHUNK: usize = LANE * LANES;

    fn lane_check(chunk: u64, lane: usize, n: u64) -> u64 {
        n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ chunk.rotate_left(17) ^ lane as u64
    }

    /// Writes write scope `n` of the client of lane `lane` into its lane.
    pub fn write_lane(bytes: &mut [u8], chunk: u64, lane: usize, n: u64) {
        let at = LANE * lane;
        bytes[at..at + 8].copy_from_slice(&n.to_le_bytes());
        bytes[at + 8..at + 16].copy_from_slice(&lane_check(chunk, lane, n).to_le_bytes());
    }

    /// The write scope number each lane holds (0: never written), or an
    /// error for a lane no write scope left as it is.
    pub fn read_lanes(bytes: &[u8], chunk: u64) -> Result<Vec<u64>, String> {
        (0..LANES)
            .map(|lane| {
                let at = LANE * lane;
                let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8"));
                let (n, check) = (word(at), word(at + 8));
                if n == 0 && check == 0 {
                    Ok(0)
                } else if check == lane_check(chunk, lane, n) {
                    Ok(n)
                } else {
                    Err(format!(
                        "chunk {chunk} lane {lane}: bytes no write scope left (number {n}, check \
                         {check:#x})"
                    ))
                }
            })
            .collect()
    }

    /// The (token, prev) the bytes of `chunk` carry: (0, BLIND) for the
    /// zeros of version 0; an error for bytes no write scope left.
    pub fn read(bytes: &[u8], chunk: u64) -> Result<(u64, u64), String> {
        if bytes.iter().all(|&b| b == 0) {
            return Ok((0, BLIND));
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let (token, prev, owner) = (word(0), word(8), word(16));
        if owner != chunk {
            return Err(format!(
                "bytes of chunk {owner} (token {token}) found in chunk {chunk}"
            ));
        }
        if let Some(i) = (24..bytes.len()).find(|&i| bytes[i] != fill(token, i)) {
            return Err(format!(
                "chunk {chunk} token {token}: byte {i} is {} where its writer left {}",
                bytes[i],
                fill(token, i)
            ));
        }
        Ok((token, prev))
    }
}
