//! Coherence protocols, as pure state machines.
//!
//! A protocol (the DSM-PM2 idea) is a set of handlers with a client side
//! ([`ClientSide`]) and a home side ([`HomeSide`]). Handlers never touch the
//! network nor the chunk bytes a client holds: they take an event and return
//! what to send and whether the bytes that came with a message must be kept.
//! That way the property tests drive every message ordering
//! deterministically, and the server and client loops only route.
//!
//! Protocols are chosen per chunk at allocation ([`ProtocolId`] travels with
//! MALLOC and comes back with every allocation answer):
//! - [`mesi`]: home-based MESI, the default (section 2.3). Clients keep valid
//!   copies between scopes; a read hit costs no message.
//!   Two more members of its family share its state machine: MESI with its
//!   E state kept across releases (a repeated writer needs no grant) and
//!   update-based MESI (a release pushes the new version to the copies it
//!   invalidated).
//!   A third, MESI with learned communication sets (FDSM), keeps MESI's
//!   handlers: its client runtime (`client/learned.rs`) asks, as a barrier
//!   ends, for the chunks the process read after that barrier last time.
//! - [`hlrc`]: home-based lazy release consistency with multiple writers:
//!   concurrent write scopes publish diffs against their twins, merged at
//!   the home.
//! - [`home_only`]: the home serializes every scope and clients keep no valid
//!   copy between scopes. Simpler and cheaper for data written by many and
//!   read once (no invalidations), dearer for data read often.
//! - [`ProtocolId::Adaptive`]: a chunk that starts on MESI and whose home
//!   moves it, once, to the protocol its access pattern calls for
//!   ([`adaptive`] decides; `server/switch.rs` and `client/switch.rs` carry
//!   the switch out).

pub mod adaptive;
pub mod advice;
pub mod hlrc;
pub mod home_only;
pub mod mesi;
pub mod registry;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use bincode::{Decode, Encode};

use crate::transport::Rank;

pub use mesi::{Acquire, Out, ProtocolViolation, ScopeError, State, ToClient, ToHome, Version};

/// How a scope opens a chunk (Figures 5 and 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read only; local changes are dropped at release.
    Read,
    /// Exclusive, the data may be stale: the writer overwrites it.
    Write,
    /// Exclusive, the data is up to date.
    ReadWrite,
}

impl Access {
    /// Whether the scope excludes every other (WRITE, READWRITE).
    pub fn exclusive(self) -> bool {
        !matches!(self, Access::Read)
    }
}

/// The protocols a chunk can be allocated with (the report's
/// `Consistency_t`, whose constructor for the default is `newHomeBaseMESI`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
pub enum ProtocolId {
    /// Home-based MESI: [`mesi`].
    #[default]
    HomeMesi,
    /// Every scope at the home, no client caching: [`home_only`].
    HomeOnly,
    /// Home-based MESI with its E state: [`mesi`], [`mesi::EXCLUSIVE`].
    MesiExclusive,
    /// Home-based MESI whose releases update the copies they invalidated:
    /// [`mesi`], [`mesi::UPDATE`].
    UpdateMesi,
    /// Multiple writers publishing diffs: [`hlrc`].
    MultipleWriters,
    /// Home-based MESI whose readers learn, per barrier, the chunks they
    /// read after it, which the homes push them as it ends: [`mesi::LEARNED`].
    LearnedMesi,
    /// The `n`-th protocol this process registered ([`registry`]).
    User(u16),
    /// Starts as home-based MESI; its home watches the requests it serves
    /// and switches the chunk, while the run goes on, to the protocol its
    /// pattern calls for ([`adaptive`]).
    Adaptive,
}

impl ProtocolId {
    /// The name the debug stream uses (Figure 14 writes "Home-Based MESI").
    pub fn name(self) -> &'static str {
        match self {
            ProtocolId::HomeMesi => "Home-Based MESI",
            ProtocolId::HomeOnly => "Home-Only",
            ProtocolId::MesiExclusive => "Home-Based MESI with E",
            ProtocolId::UpdateMesi => "Update-Based MESI",
            ProtocolId::MultipleWriters => "Home-Based LRC, Multiple Writers",
            ProtocolId::LearnedMesi => "Home-Based MESI, Learned Sets",
            ProtocolId::User(n) => registry::name(n).unwrap_or("an unregistered protocol"),
            ProtocolId::Adaptive => "Adaptive (from Home-Based MESI)",
        }
    }

    /// The short name the Python module, the statistics tools and the
    /// benchmarks use.
    pub fn short_name(self) -> &'static str {
        match self {
            ProtocolId::HomeMesi => "mesi",
            ProtocolId::HomeOnly => "home-only",
            ProtocolId::MesiExclusive => "mesi-e",
            ProtocolId::UpdateMesi => "update",
            ProtocolId::MultipleWriters => "hlrc",
            ProtocolId::LearnedMesi => "learned",
            ProtocolId::User(n) => registry::name(n).unwrap_or("unregistered"),
            ProtocolId::Adaptive => "adaptive",
        }
    }

    /// Every built-in protocol (the registered ones are [`registry`]'s).
    pub const ALL: [ProtocolId; 7] = [
        ProtocolId::HomeMesi,
        ProtocolId::HomeOnly,
        ProtocolId::MesiExclusive,
        ProtocolId::UpdateMesi,
        ProtocolId::MultipleWriters,
        ProtocolId::LearnedMesi,
        ProtocolId::Adaptive,
    ];

    /// The protocol a chunk allocated with this one runs first: MESI for
    /// [`ProtocolId::Adaptive`], itself for every other.
    pub fn starting(self) -> ProtocolId {
        match self {
            ProtocolId::Adaptive => ProtocolId::HomeMesi,
            other => other,
        }
    }

    /// Whether write scopes publish diffs against a twin ([`hlrc`]): such
    /// chunks cannot be protected (a diff of ciphertexts merges nothing).
    pub fn diffs(self) -> bool {
        self == ProtocolId::MultipleWriters
    }

    /// Whether the client runtime learns, per barrier, the chunks read after
    /// it and fetches them when the barrier next ends (`client/learned.rs`).
    pub fn learns(self) -> bool {
        self == ProtocolId::LearnedMesi
    }

    /// The protocol of a short name, built in or registered.
    pub fn from_short_name(name: &str) -> Option<ProtocolId> {
        ProtocolId::ALL
            .into_iter()
            .find(|p| p.short_name() == name)
            .or_else(|| registry::find(name))
    }

    /// Whether this process has the protocol's handlers: always for a
    /// built-in one, once registered for a user one.
    pub fn known(self) -> bool {
        self.handlers().is_some()
    }

    /// The protocol's handlers, None for a user protocol this process has
    /// not registered (an id from another process).
    pub fn handlers(self) -> Option<&'static dyn Consistency> {
        match self {
            ProtocolId::User(n) => registry::handlers(n),
            builtin => Some(builtin.consistency()),
        }
    }

    /// A clear error for a protocol this process does not know.
    pub fn unknown_error(self, what: &str) -> crate::error::SatError {
        crate::error::SatError::Usage(format!(
            "{what}: the chunk's protocol is user protocol number {}, which this process has not \
             registered: register the same protocols, in the same order, in every process before \
             allocating",
            match self {
                ProtocolId::User(n) => n,
                _ => 0,
            }
        ))
    }

    /// The protocol's handlers. A user protocol must be [`known`](Self::known)
    /// here: every path that meets an id from another process checks first.
    pub fn consistency(self) -> &'static dyn Consistency {
        match self {
            ProtocolId::HomeMesi => &mesi::HOME_BASED,
            ProtocolId::HomeOnly => &home_only::HomeOnly,
            ProtocolId::MesiExclusive => &mesi::EXCLUSIVE,
            ProtocolId::UpdateMesi => &mesi::UPDATE,
            ProtocolId::MultipleWriters => &hlrc::MultipleWriters,
            ProtocolId::LearnedMesi => &mesi::LEARNED,
            ProtocolId::User(n) => registry::handlers(n).expect("checked known before use"),
            ProtocolId::Adaptive => &mesi::HOME_BASED,
        }
    }
}

/// A protocol: how to make its two sides for a chunk of `size` bytes.
pub trait Consistency: Sync {
    /// The protocol's id, as MALLOC names it.
    fn id(&self) -> ProtocolId;
    /// The home's directory entry, holding version 0 (zeroed data).
    fn new_home(&self, size: usize) -> Box<dyn HomeSide>;
    /// A client's view of a chunk it has no copy of yet.
    fn new_client(&self, size: usize) -> Box<dyn ClientSide>;
    /// The home's directory entry for a chunk that another protocol ran
    /// until now ([`ProtocolId::Adaptive`]): it holds `last`, and no client
    /// holds a copy, a scope or a request. None: this protocol cannot take
    /// over a chunk (a registered one).
    fn resume_home(&self, last: LastRelease) -> Option<Box<dyn HomeSide>> {
        let _ = last;
        None
    }
}

/// The home side of one chunk: directory entry and the released data.
pub trait HomeSide: Send + Debug {
    /// Handles one message from client `from`; appends what to send to
    /// `out`. A violation leaves the state unchanged; the caller drops the
    /// message and logs it.
    fn on_message(
        &mut self,
        from: Rank,
        msg: ToHome,
        data: Option<&[u8]>,
        out: &mut Vec<Out<ToClient>>,
    ) -> Result<(), ProtocolViolation>;
    /// Client `client` has left the run: forget it and stop waiting for it.
    fn client_left(&mut self, client: Rank, out: &mut Vec<Out<ToClient>>);
    /// Client `client`'s requests will never be answered: its server was
    /// lost, they went through it, and the client fails them and asks again
    /// once it knows (`server/failover.rs`). They are dropped, waiting or
    /// being granted, so that no grant of one reaches the client later and
    /// is taken for the answer to a new request. Its copies and scopes stay
    /// until [`HomeSide::client_left`]. The protocols a run with replicated
    /// homes refuses (`server/replicas.rs`) are never asked.
    fn requests_void(&mut self, client: Rank) {
        let _ = client;
    }
    /// The last released version (0: never written).
    fn version(&self) -> Version;
    /// The data of that version.
    fn data(&self) -> &Arc<[u8]>;
    /// The client inside a granted write scope, if any.
    fn owner(&self) -> Option<Rank>;
    /// The client holding the only copy in E, which may be inside a write
    /// scope the home did not grant (MESI with its E state).
    fn exclusive(&self) -> Option<Rank> {
        None
    }
    /// Whether nothing is under way: no scope the home granted or could
    /// not see open, no request waiting, no acknowledgement owed. Only then
    /// may the chunk move to another protocol ([`ProtocolId::Adaptive`]).
    /// False by default: a protocol that cannot tell never moves.
    fn idle(&self) -> bool {
        false
    }
    /// Whether the home may write the last release's bytes out of memory
    /// now (`server/spill.rs`): it sends none unless a message comes first
    /// (forgetting a client that left sends none). [`HomeSide::idle`] by
    /// default.
    fn can_spill(&self) -> bool {
        self.idle()
    }
    /// The last release, for the home to spill its bytes and bring them
    /// back; None: this protocol's versions stay in memory.
    fn last_release_mut(&mut self) -> Option<&mut LastRelease> {
        None
    }
}

/// What a client does with a message from the home.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reaction {
    /// The answer to send home, if any.
    pub reply: Option<ToHome>,
    /// The bytes that came with the message are the chunk's new content:
    /// copy them into every local instance of the chunk.
    pub take_data: bool,
}

/// The client side of one chunk: its coherence state and scopes. The bytes
/// live in the client's local store; a release that sends a new version
/// ([`ToHome::Release`]) takes them from there.
pub trait ClientSide: Send + Debug {
    /// Opens a scope, or says what to ask the home for.
    fn acquire(&mut self, access: Access) -> Result<Acquire, ScopeError>;
    /// Handles a message from the home; `data` is the bytes that came with
    /// it (checked against the chunk's size when they are taken).
    fn on_message(
        &mut self,
        msg: ToClient,
        data: Option<&[u8]>,
    ) -> Result<Reaction, ProtocolViolation>;
    /// Closes a scope; returns what to send home, if anything.
    fn release(&mut self) -> Result<Option<ToHome>, ScopeError>;
    /// Closes a scope without publishing (it ended in an error, a panic,
    /// or a failed role): a write scope sends [`ToHome::Abort`], so the home
    /// keeps its version, and the local bytes are no longer a valid copy; a
    /// read scope ends as with [`ClientSide::release`].
    fn abort(&mut self) -> Result<Option<ToHome>, ScopeError>;
    /// How a READ by a thread that holds no scope on the chunk meets the
    /// read scopes other threads of this process hold open.
    fn join(&self) -> Join;
    /// A READ that asks the home for a grant of its own while other
    /// threads' read scopes are open (when [`ClientSide::join`] says
    /// [`Join::Ask`]).
    fn acquire_beside(&mut self) -> Result<Acquire, ScopeError> {
        self.acquire(Access::Read)
    }
    /// A copy of this state, to put back when the message an event produced
    /// could not be sent (the home then never heard of the event).
    fn snapshot(&self) -> Box<dyn ClientSide>;
    /// Drops the local copy (to make room): allowed only outside scopes and
    /// requests, and only when the home holds the data (true of every copy
    /// not inside a write scope, as releases write back). Returns whether
    /// the copy was dropped; the next acquire then fetches the data.
    fn evict(&mut self) -> bool;
    /// The local copy's state (MESI's letters; other protocols map theirs).
    fn state(&self) -> State;
    /// The version of the bytes held locally, valid or not.
    fn version(&self) -> Option<Version>;
    /// Whether a scope is open on the chunk here.
    fn in_scope(&self) -> bool;
    /// Whether a write scope is open.
    fn writing(&self) -> bool;
    /// Whether an acquire waits for the home.
    fn waiting(&self) -> bool;
    /// The next write scope asks the home even if it could open with no
    /// message ([`mesi::EXCLUSIVE_BURST`]).
    fn ask_next_write(&mut self) {}
    /// Asks for a valid copy before any READ wants it: a chain's READ
    /// sends its next chunks' requests while it waits for the first
    /// (`Client::acquire_chain`), instead of one round trip after another.
    /// The grant opens no scope: it leaves the copy valid, and the READ
    /// that comes for it later is a hit (a miss if it was invalidated
    /// since). Nothing is held while the request waits or after its grant,
    /// so asking ahead cannot add a deadlock to the chain's ascending
    /// order. Returns the request to send; None when the copy is valid
    /// already, asked for, in a scope, or when the protocol does not read
    /// ahead (the default).
    fn read_ahead(&mut self) -> Option<ToHome> {
        None
    }
    /// Whether a write scope publishes a diff against a twin of the bytes
    /// it opened on ([`hlrc`]): the client runtime then keeps the twin, and
    /// sends the diff with [`ToHome::ReleaseDiff`].
    fn diffs(&self) -> bool {
        false
    }
}

/// How a new reader meets the read scopes other threads hold (see
/// [`ClientSide::join`]). A thread that holds a scope itself always joins:
/// nested read scopes of one thread never wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// It shares them, with no message.
    Local,
    /// It waits until they end: a writer waits for them at the home and
    /// must not be starved by readers that keep arriving here.
    Wait,
    /// It asks the home for a grant of its own, queued there in arrival
    /// order with the writers ([`ClientSide::acquire_beside`]).
    Ask,
}

/// The last released version a home keeps, and the checks every write-back
/// must pass before it replaces it.
#[derive(Debug)]
pub struct LastRelease {
    /// Its version number.
    pub version: Version,
    /// Its bytes.
    pub data: Arc<[u8]>,
}

impl LastRelease {
    /// Version 0: `size` zero bytes, shared with every other version 0 of
    /// that size ([`zeros`]).
    pub fn new(size: usize) -> LastRelease {
        LastRelease {
            version: 0,
            data: zeros(size),
        }
    }

    /// Applies client `from`'s release of `version`, if `from` is the
    /// `owner`, the version is the next one and the size is right.
    pub fn apply(
        &mut self,
        owner: Option<Rank>,
        from: Rank,
        version: Version,
        data: Option<&[u8]>,
    ) -> Result<(), ProtocolViolation> {
        if owner != Some(from) {
            return Err(ProtocolViolation::ReleaseWithoutOwnership { from });
        }
        if version != self.version + 1 {
            return Err(ProtocolViolation::WrongVersion {
                got: version,
                want: self.version + 1,
            });
        }
        let bytes = data.unwrap_or(&[]);
        if bytes.len() != self.data.len() {
            return Err(ProtocolViolation::WrongSize {
                got: bytes.len(),
                want: self.data.len(),
            });
        }
        self.version = version;
        // Reuse the buffer when no send of the previous version still holds
        // it: a fresh allocation of a large chunk costs a page fault per
        // page on top of the copy.
        match Arc::get_mut(&mut self.data) {
            Some(mine) => mine.copy_from_slice(bytes),
            None => self.data = bytes.into(),
        }
        Ok(())
    }
}

/// `size` zero bytes, one buffer for every caller that asks for that size
/// while one still holds it. Every home starts with a version 0; a chunk
/// whose versions live in a host slot never replaces it, and a buffer of
/// its own would hold the chunk's size a second time in the server's
/// memory, resident (moving zeros into an `Arc` writes every page). The
/// first release replaces a shared buffer with one of its own: writers
/// copy it first when another holds it ([`LastRelease::apply`]).
pub fn zeros(size: usize) -> Arc<[u8]> {
    static SHARED: std::sync::Mutex<Option<HashMap<usize, std::sync::Weak<[u8]>>>> =
        std::sync::Mutex::new(None);
    let mut guard = SHARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let by_size = guard.get_or_insert_with(HashMap::new);
    if let Some(held) = by_size.get(&size).and_then(std::sync::Weak::upgrade) {
        return held;
    }
    let fresh: Arc<[u8]> = vec![0u8; size].into();
    if by_size.len() >= 256 {
        by_size.retain(|_, w| w.strong_count() > 0);
    }
    by_size.insert(size, Arc::downgrade(&fresh));
    fresh
}

#[cfg(test)]
mod tests;
