//! Home-based MESI for one chunk (section 2.3; design in PROTOCOL-NOTES).
//!
//! Many readers or one writer. The home keeps the last released version, the
//! owner (the one client inside a write scope) and the copyset (clients that
//! may hold a valid copy). A writer is granted only once every other copy is
//! invalidated, and a client answers an invalidation only when its read
//! scopes have ended: that is how "a writer waits for the readers" costs no
//! message on the read path. A write scope's release sends the new version
//! home (write-back), and the writer keeps a valid shared copy.
//!
//! States: a client is Invalid, Shared (valid copy, readable with no
//! message), Exclusive (the only copy: readable and writable with no message)
//! or Modified (inside its write scope).
//!
//! One state machine serves a family of protocols, told apart by a
//! [`Flavor`]:
//! - **home-based MESI** ([`ProtocolId::HomeMesi`], the default): E collapses
//!   into Modified, as ownership ends at each release.
//! - **MESI with its E state** ([`ProtocolId::MesiExclusive`]): a client that
//!   holds the only copy (after its own write, or a read nobody else shares)
//!   keeps it Exclusive, and opens its next write scopes with no message
//!   (up to [`EXCLUSIVE_BURST`] in a row per process, then one grant). Its
//!   release still writes back, so the home always holds the last released
//!   version (subscribers, readers and a client's death lose nothing). Since
//!   the home cannot see such a scope open, any other client's request
//!   first asks the holder: a writer's invalidates its copy, a reader's
//!   makes it Shared ([`ToClient::Share`]); the holder answers when its
//!   scope ends (with the release and the answer in one message,
//!   [`ToHome::ReleaseYield`]).
//! - **update-based MESI** ([`ProtocolId::UpdateMesi`]): a writer is granted
//!   as in MESI, once every other copy is invalidated, but its release pushes
//!   the new version to the copies it invalidated ([`ToClient::Update`]), so
//!   their next READ is a hit. Invalidating first keeps a READ seeing the
//!   last release: a copy is never readable while a newer version exists.
//!
//! - **learned communication sets** ([`ProtocolId::LearnedMesi`], FDSM):
//!   MESI, plus a push the client did not ask for. As a barrier ends, its
//!   coordinator sends [`ToHome::Want`] on behalf of each process for the
//!   chunks it read after that barrier the last time; a home that can
//!   (nothing holds the chunk) makes the process a sharer and pushes it the
//!   last release ([`ToClient::Update`]), taken if the copy is still
//!   invalid and not asked for. Its READ then hits. A pushed copy serves
//!   that one read: at its release the client drops it and tells the home
//!   ([`ToHome::Drop`]), so the next writer has no copy to invalidate; a
//!   writer that comes first invalidates it as any other.
//!
//! Message counts (home on the client's server): read hit 0; read miss 2;
//! write with s other sharers 2 + 2s; release of a write scope 1; release of
//! a read scope 0 (plus the deferred acknowledgement, if one is owed). With
//! E: a write by the client holding the only copy 0, its release 1, and a
//! request of another client 2 more (the invalidation and its answer). With
//! updates: a release 1 + s (the pushes), and a READ after it 0.
//!
//! Per-pair FIFO order is assumed (the transport guarantees it): a client's
//! release reaches the home before its next request.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::{Access, ClientSide, Consistency, HomeSide, Join, LastRelease, ProtocolId, Reaction};
use crate::transport::Rank;

/// Write scopes a process opens with no message (as Exclusive holder)
/// before its next write asks the home again (granted at once while it
/// still holds the only copy). Each of those scopes' write-backs leaves
/// with no answer due, and a run over shm stalled when two processes each
/// sent a few hundred such packets to one server with no reply in between
/// (docs/PROTOCOLS.md, "Bursts of write-backs"). A grant comes after the
/// server has taken every earlier message of the process, so the client
/// runtime counts silent writes across its chunks and calls
/// [`ClientSide::ask_next_write`] past this many.
pub const EXCLUSIVE_BURST: u32 = 16;

/// What sets the members of the MESI family apart (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flavor {
    /// E is kept: the client holding the only copy writes with no grant.
    pub exclusive: bool,
    /// A release pushes the new version to the copies its write invalidated.
    pub update: bool,
    /// Learned communication sets: a barrier's coordinator asks for a copy
    /// pushed to each process that read the chunk after that barrier last
    /// time ([`ToHome::Want`]).
    pub learned: bool,
}

/// One member of the MESI family: its protocol id and its flavor.
pub struct Mesi {
    id: ProtocolId,
    flavor: Flavor,
}

/// Home-based MESI, the default.
pub static HOME_BASED: Mesi = Mesi {
    id: ProtocolId::HomeMesi,
    flavor: Flavor {
        exclusive: false,
        update: false,
        learned: false,
    },
};

/// MESI with its E state kept across releases.
pub static EXCLUSIVE: Mesi = Mesi {
    id: ProtocolId::MesiExclusive,
    flavor: Flavor {
        exclusive: true,
        update: false,
        learned: false,
    },
};

/// MESI whose releases update the copies their write invalidated.
pub static UPDATE: Mesi = Mesi {
    id: ProtocolId::UpdateMesi,
    flavor: Flavor {
        exclusive: false,
        update: true,
        learned: false,
    },
};

/// MESI with learned communication sets (FDSM): as a barrier ends, its
/// coordinator asks the homes to push each arriving process the chunks it
/// read after that barrier the last time (`client/learned.rs`).
pub static LEARNED: Mesi = Mesi {
    id: ProtocolId::LearnedMesi,
    flavor: Flavor {
        exclusive: false,
        update: false,
        learned: true,
    },
};

impl Consistency for Mesi {
    fn id(&self) -> ProtocolId {
        self.id
    }
    fn new_home(&self, size: usize) -> Box<dyn HomeSide> {
        Box::new(Home::with_flavor(size, self.flavor))
    }
    fn new_client(&self, size: usize) -> Box<dyn ClientSide> {
        Box::new(Cache::with_flavor(size, self.flavor))
    }
    fn resume_home(&self, last: LastRelease) -> Option<Box<dyn HomeSide>> {
        let mut home = Home::with_flavor(0, self.flavor);
        home.last = last;
        Some(Box::new(home))
    }
}

/// A release counter: version 0 is the chunk's initial (zeroed) data.
pub type Version = u64;

/// Client -> home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToHome {
    /// A shared copy; `have` is the version of the data the client holds, so
    /// the home sends bytes only when they differ.
    ReadReq { have: Option<Version> },
    /// Exclusive access; `need_data` for READWRITE (WRITE may see stale data).
    WriteReq {
        have: Option<Version>,
        need_data: bool,
    },
    /// End of a write scope; the new data travels with it.
    Release { version: Version },
    /// An invalidation has been applied (after the client's read scopes).
    InvalAck,
    /// End of a read scope, for protocols whose home counts readers
    /// ([`super::home_only`]); MESI reads end silently.
    ReadRelease,
    /// End of a write scope that publishes nothing: the home keeps its
    /// last version, and the client keeps no valid copy.
    Abort,
    /// [`ToHome::Release`] of a write scope opened with no grant (E), then
    /// the acknowledgement of the invalidation that arrived during it.
    ReleaseYield { version: Version },
    /// [`ToHome::Abort`] of such a scope, then that acknowledgement.
    AbortYield,
    /// The end of a write scope of [`super::hlrc`]: the diff against its
    /// twin travels with it, and the home makes the next version of it.
    ReleaseDiff,
    /// Learned sets: push the client a copy, if that can be done at once
    /// (no writer at work, no request waiting, no copy there already);
    /// else nothing happens and the client's next READ asks. Sent by a
    /// barrier's coordinator, on the client's behalf, as the round ends.
    Want,
    /// Learned sets: the client has read a pushed copy once and dropped it
    /// (the home stops counting it as a sharer; an invalidation already on
    /// its way needs no other answer).
    Drop,
}

impl ToHome {
    /// The version a release of whole bytes makes (None for the others).
    pub fn released_version(self) -> Option<Version> {
        match self {
            ToHome::Release { version } | ToHome::ReleaseYield { version } => Some(version),
            _ => None,
        }
    }

    /// Whether the chunk's new bytes (or their diff) travel with it.
    pub fn publishes(self) -> bool {
        matches!(
            self,
            ToHome::Release { .. } | ToHome::ReleaseYield { .. } | ToHome::ReleaseDiff
        )
    }

    /// Its name in refusals and the debug stream ([`CoherenceOp::name`]).
    pub fn name(self) -> &'static str {
        CoherenceOp::from(self).name()
    }
}

/// Home -> client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToClient {
    ReadGrant {
        version: Version,
        with_data: bool,
    },
    WriteGrant {
        version: Version,
        with_data: bool,
    },
    Inval,
    /// A read grant that makes the client the only holder (E).
    ExclusiveGrant {
        version: Version,
        with_data: bool,
    },
    /// Another client reads: the Exclusive holder keeps its copy Shared,
    /// and answers ([`ToHome::InvalAck`]) once a write scope it opened with
    /// no grant has ended (with [`ToHome::ReleaseYield`] if it published).
    Share,
    /// [`super::hlrc`]: the diff of a release is applied, as `version`;
    /// the release returns only then, so that any scope another process
    /// opens after it sees the diff.
    DiffAck {
        version: Version,
    },
    /// The version a release made, pushed to a copy its write invalidated
    /// (the bytes travel with it). Not a grant: the client takes it only if
    /// it has not asked for the chunk meanwhile.
    Update {
        version: Version,
    },
}

impl ToClient {
    /// Its name in refusals and the debug stream ([`CoherenceOp::name`]).
    pub fn name(self) -> &'static str {
        CoherenceOp::from(self).name()
    }

    /// Whether this answers a request (what a waiting acquire counts).
    pub fn is_grant(self) -> bool {
        matches!(
            self,
            ToClient::ReadGrant { .. }
                | ToClient::WriteGrant { .. }
                | ToClient::ExclusiveGrant { .. }
                | ToClient::DiffAck { .. }
        )
    }
}

/// A message to send, with the chunk data when it carries some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Out<M> {
    pub to: Rank,
    pub msg: M,
    pub data: Option<Arc<[u8]>>,
}

/// A message that breaks the protocol (a hostile or buggy peer): dropped by
/// the caller, which logs it; the state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolViolation {
    #[error("release from client {from}, which does not own the chunk")]
    ReleaseWithoutOwnership { from: Rank },
    #[error("release of version {got} where {want} was due")]
    WrongVersion { got: Version, want: Version },
    #[error("release carries {got} bytes; the chunk has {want}")]
    WrongSize { got: usize, want: usize },
    #[error("invalidation acknowledgement that no invalidation asked for")]
    StrayAck,
    #[error("a grant that was not asked for")]
    StrayGrant,
    #[error("a grant without the data the client lacks")]
    MissingData,
    #[error("a message this protocol does not use: {0}")]
    Foreign(&'static str),
    #[error("end of a read scope from client {from}, which holds none")]
    StrayReadRelease { from: Rank },
    #[error("abort from client {from}, which is not inside a write scope")]
    AbortWithoutOwnership { from: Rank },
    #[error("{0}")]
    BadDiff(super::hlrc::BadDiff),
    /// A registered protocol's routine refused the message
    /// ([`super::registry`]).
    #[error("protocol {protocol} refused {message}")]
    Refused {
        protocol: &'static str,
        message: &'static str,
    },
}

/// Misuse of the client API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("RELEASE without a matching READ, WRITE or READWRITE on this chunk")]
    NotAcquired,
    #[error(
        "this thread already holds the chunk in a write scope: release it first (a thread \
         acquires a chunk once at a time; another thread would wait for the scope)"
    )]
    AlreadyAcquired,
    #[error("a read scope is open on this chunk: release it before acquiring it for writing")]
    UpgradeInScope,
    #[error("an acquire of this chunk is already waiting for the home")]
    Waiting,
    /// A registered protocol's routine refused the call ([`super::registry`]).
    #[error("protocol {0} refused this {1} here")]
    Refused(&'static str, &'static str),
}

// ------------------------------------------------------ wire conversions

use crate::wire::CoherenceOp;

impl From<ToHome> for CoherenceOp {
    fn from(m: ToHome) -> CoherenceOp {
        match m {
            ToHome::ReadReq { have } => CoherenceOp::ReadReq { have },
            ToHome::WriteReq { have, need_data } => CoherenceOp::WriteReq { have, need_data },
            ToHome::Release { version } => CoherenceOp::Release { version },
            ToHome::InvalAck => CoherenceOp::InvalAck,
            ToHome::ReadRelease => CoherenceOp::ReadRelease,
            ToHome::Abort => CoherenceOp::Abort,
            ToHome::ReleaseYield { version } => CoherenceOp::ReleaseYield { version },
            ToHome::AbortYield => CoherenceOp::AbortYield,
            ToHome::ReleaseDiff => CoherenceOp::ReleaseDiff,
            ToHome::Want => CoherenceOp::Want,
            ToHome::Drop => CoherenceOp::Drop,
        }
    }
}

impl From<ToClient> for CoherenceOp {
    fn from(m: ToClient) -> CoherenceOp {
        match m {
            ToClient::ReadGrant { version, with_data } => {
                CoherenceOp::ReadGrant { version, with_data }
            }
            ToClient::WriteGrant { version, with_data } => {
                CoherenceOp::WriteGrant { version, with_data }
            }
            ToClient::Inval => CoherenceOp::Inval,
            ToClient::Share => CoherenceOp::Share,
            ToClient::ExclusiveGrant { version, with_data } => {
                CoherenceOp::ExclusiveGrant { version, with_data }
            }
            ToClient::Update { version } => CoherenceOp::Update { version },
            ToClient::DiffAck { version } => CoherenceOp::DiffAck { version },
        }
    }
}

/// The message as the home reads it, if it is one for the home.
pub fn to_home(op: CoherenceOp) -> Option<ToHome> {
    Some(match op {
        CoherenceOp::ReadReq { have } => ToHome::ReadReq { have },
        CoherenceOp::WriteReq { have, need_data } => ToHome::WriteReq { have, need_data },
        CoherenceOp::Release { version } => ToHome::Release { version },
        CoherenceOp::InvalAck => ToHome::InvalAck,
        CoherenceOp::ReadRelease => ToHome::ReadRelease,
        CoherenceOp::Abort => ToHome::Abort,
        CoherenceOp::ReleaseYield { version } => ToHome::ReleaseYield { version },
        CoherenceOp::AbortYield => ToHome::AbortYield,
        CoherenceOp::ReleaseDiff => ToHome::ReleaseDiff,
        CoherenceOp::Want => ToHome::Want,
        CoherenceOp::Drop => ToHome::Drop,
        _ => return None,
    })
}

/// The message as a client reads it, if it is one for a client.
pub fn to_client(op: CoherenceOp) -> Option<ToClient> {
    Some(match op {
        CoherenceOp::ReadGrant { version, with_data } => ToClient::ReadGrant { version, with_data },
        CoherenceOp::WriteGrant { version, with_data } => {
            ToClient::WriteGrant { version, with_data }
        }
        CoherenceOp::Inval => ToClient::Inval,
        CoherenceOp::Share => ToClient::Share,
        CoherenceOp::ExclusiveGrant { version, with_data } => {
            ToClient::ExclusiveGrant { version, with_data }
        }
        CoherenceOp::Update { version } => ToClient::Update { version },
        CoherenceOp::DiffAck { version } => ToClient::DiffAck { version },
        _ => return None,
    })
}

// ------------------------------------------------------------------ home

/// A request the home serves once the copies it invalidated are given up.
#[derive(Debug, Clone)]
struct Granting {
    /// The requester; None once it has left: the invalidations sent for it
    /// are still awaited, because the readers they reach may be inside read
    /// scopes, and nobody may be granted before those end.
    to: Option<Rank>,
    request: ToHome,
    /// The clients whose invalidation acknowledgement is still due.
    owed: BTreeSet<Rank>,
    /// The Exclusive holder asked to give its copy up: it may be inside a
    /// write scope it opened with no grant, whose release is still to come.
    recalled: Option<Rank>,
}

/// The home's directory entry and data for one chunk.
#[derive(Debug)]
pub struct Home {
    flavor: Flavor,
    last: LastRelease,
    /// The client inside a granted write scope.
    owner: Option<Rank>,
    /// The client holding the only copy in E, which may open write scopes
    /// without asking (it is in the copyset too).
    exclusive: Option<Rank>,
    copyset: BTreeSet<Rank>,
    pending: VecDeque<(Rank, ToHome)>,
    granting: Option<Granting>,
    /// Updates: the copies the write under way invalidated, to which its
    /// release is pushed.
    updatees: BTreeSet<Rank>,
}

impl Home {
    /// A new chunk of `size` zero bytes at version 0 (home-based MESI).
    pub fn new(size: usize) -> Home {
        Home::with_flavor(size, Flavor::default())
    }

    pub fn with_flavor(size: usize, flavor: Flavor) -> Home {
        Home {
            flavor,
            last: LastRelease::new(size),
            owner: None,
            exclusive: None,
            copyset: BTreeSet::new(),
            pending: VecDeque::new(),
            granting: None,
            updatees: BTreeSet::new(),
        }
    }

    fn busy(&self) -> bool {
        self.owner.is_some() || self.granting.is_some()
    }

    /// Whether `from` may publish or abort a write scope now: the granted
    /// owner, or the Exclusive holder (also while it is being recalled).
    fn may_write(&self, from: Rank) -> bool {
        self.owner == Some(from)
            || self.exclusive == Some(from)
            || self.granting.as_ref().and_then(|g| g.recalled) == Some(from)
    }

    /// An acknowledgement of `from`'s invalidation.
    fn acknowledged(
        &mut self,
        from: Rank,
        out: &mut Vec<Out<ToClient>>,
    ) -> Result<(), ProtocolViolation> {
        let g = self.granting.as_mut().ok_or(ProtocolViolation::StrayAck)?;
        if !g.owed.remove(&from) {
            return Err(ProtocolViolation::StrayAck);
        }
        if g.recalled == Some(from) {
            g.recalled = None;
        }
        if g.owed.is_empty() {
            let g = self.granting.take().expect("checked");
            self.grant(g, out);
        }
        Ok(())
    }
}

impl HomeSide for Home {
    fn idle(&self) -> bool {
        !self.busy() && self.exclusive.is_none() && self.pending.is_empty()
    }

    /// Nothing waits to be granted: a client that leaves (a writer or the
    /// E holder too) is forgotten with no data sent. A write scope under
    /// way does not keep the bytes in memory: its release brings them back.
    fn can_spill(&self) -> bool {
        self.pending.is_empty() && self.granting.is_none()
    }

    fn last_release_mut(&mut self) -> Option<&mut LastRelease> {
        Some(&mut self.last)
    }

    fn version(&self) -> Version {
        self.last.version
    }

    fn data(&self) -> &Arc<[u8]> {
        &self.last.data
    }

    fn owner(&self) -> Option<Rank> {
        self.owner
    }

    fn exclusive(&self) -> Option<Rank> {
        self.exclusive
            .or_else(|| self.granting.as_ref().and_then(|g| g.recalled))
    }

    /// Client `client` has left the run (its role returned; it released its
    /// scopes before): forget its copy and its waiting requests, and stop
    /// waiting for an acknowledgement it can no longer send.
    fn requests_void(&mut self, client: Rank) {
        self.pending.retain(|&(c, _)| c != client);
        if let Some(g) = self.granting.as_mut().filter(|g| g.to == Some(client)) {
            // The invalidations sent for it are still awaited, as when a
            // requester leaves (`Granting::to`).
            g.to = None;
        }
    }

    fn client_left(&mut self, client: Rank, out: &mut Vec<Out<ToClient>>) {
        self.copyset.remove(&client);
        self.updatees.remove(&client);
        self.pending.retain(|&(c, _)| c != client);
        if self.owner == Some(client) {
            // Its release, sent before it left, would have cleared this.
            self.owner = None;
        }
        if self.exclusive == Some(client) {
            self.exclusive = None;
        }
        if let Some(g) = self.granting.as_mut() {
            if g.to == Some(client) {
                g.to = None;
            }
            if g.recalled == Some(client) {
                g.recalled = None;
            }
            g.owed.remove(&client);
            if g.owed.is_empty() {
                let g = self.granting.take().expect("checked");
                self.grant(g, out);
            }
        }
        self.serve_pending(out);
    }

    /// Handles one message from client `from`; appends what to send to `out`.
    fn on_message(
        &mut self,
        from: Rank,
        msg: ToHome,
        data: Option<&[u8]>,
        out: &mut Vec<Out<ToClient>>,
    ) -> Result<(), ProtocolViolation> {
        match msg {
            ToHome::ReadReq { .. } | ToHome::WriteReq { .. } => {
                self.pending.push_back((from, msg));
            }
            ToHome::InvalAck => self.acknowledged(from, out)?,
            ToHome::ReadRelease | ToHome::ReleaseDiff => {
                return Err(ProtocolViolation::Foreign(msg.name()))
            }
            ToHome::Want | ToHome::Drop if !self.flavor.learned => {
                return Err(ProtocolViolation::Foreign(msg.name()))
            }
            ToHome::Want => self.push_wanted(from, out),
            ToHome::Drop => {
                if self.owner == Some(from) {
                    return Err(ProtocolViolation::Foreign(msg.name()));
                }
                // The copy is gone: it answers an invalidation sent to it
                // (the client ignores that one when it comes), or else the
                // client is no sharer any more.
                let owed = self
                    .granting
                    .as_ref()
                    .is_some_and(|g| g.owed.contains(&from));
                if owed {
                    self.acknowledged(from, out)?;
                } else {
                    self.copyset.remove(&from);
                }
            }
            ToHome::Release { version } | ToHome::ReleaseYield { version } => {
                if !self.may_write(from) {
                    return Err(ProtocolViolation::ReleaseWithoutOwnership { from });
                }
                let yields = matches!(msg, ToHome::ReleaseYield { .. });
                if yields && self.granting.as_ref().and_then(|g| g.recalled) != Some(from) {
                    return Err(ProtocolViolation::StrayAck);
                }
                self.last.apply(Some(from), from, version, data)?;
                if self.owner == Some(from) {
                    self.owner = None;
                    self.copyset.insert(from);
                    self.push_updates(from, out);
                    // Every other copy was invalidated for this write: the
                    // writer holds the only one, unless updates made more.
                    if self.flavor.exclusive && self.copyset.len() == 1 {
                        self.exclusive = Some(from);
                    }
                }
                if yields {
                    self.acknowledged(from, out)?;
                }
            }
            ToHome::Abort | ToHome::AbortYield => {
                if !self.may_write(from) {
                    return Err(ProtocolViolation::AbortWithoutOwnership { from });
                }
                let yields = matches!(msg, ToHome::AbortYield);
                if yields && self.granting.as_ref().and_then(|g| g.recalled) != Some(from) {
                    return Err(ProtocolViolation::StrayAck);
                }
                // The version stays; the writer's bytes are no version, so
                // it is no sharer either, and the copies its write
                // invalidated stay invalid (they ask again).
                if self.owner == Some(from) {
                    self.owner = None;
                    self.updatees.clear();
                }
                if self.exclusive == Some(from) {
                    self.exclusive = None;
                }
                self.copyset.remove(&from);
                if yields {
                    self.acknowledged(from, out)?;
                }
            }
        }
        self.serve_pending(out);
        Ok(())
    }
}

impl Home {
    /// Serves waiting requests in arrival order while nothing holds them up
    /// (FIFO: a writer is never overtaken by later readers).
    fn serve_pending(&mut self, out: &mut Vec<Out<ToClient>>) {
        while !self.busy() {
            let Some((from, msg)) = self.pending.pop_front() else {
                return;
            };
            // The Exclusive holder may be writing with no grant: another
            // client's request first takes its copy back. Its own request
            // means it dropped that copy (evicted it).
            let held = self.exclusive.take();
            let others: Vec<Rank> = match msg {
                ToHome::WriteReq { .. } => {
                    let others: Vec<Rank> = self
                        .copyset
                        .iter()
                        .copied()
                        .filter(|&c| c != from)
                        .collect();
                    self.copyset.clear();
                    if self.flavor.update {
                        self.updatees = others.iter().copied().collect();
                    }
                    others
                }
                // A reader: the holder keeps its copy, Shared.
                _ => held.filter(|&e| e != from).into_iter().collect(),
            };
            let recalled = held.filter(|&e| e != from);
            let ask = match msg {
                ToHome::WriteReq { .. } => ToClient::Inval,
                _ => ToClient::Share,
            };
            for &c in &others {
                out.push(Out {
                    to: c,
                    msg: ask,
                    data: None,
                });
            }
            let g = Granting {
                to: Some(from),
                request: msg,
                owed: others.iter().copied().collect(),
                recalled,
            };
            if others.is_empty() {
                self.grant(g, out);
            } else {
                self.granting = Some(g);
            }
        }
    }

    /// Serves `g`'s request, every copy it invalidated being given up.
    fn grant(&mut self, g: Granting, out: &mut Vec<Out<ToClient>>) {
        let Some(to) = g.to else {
            // The requester left while its invalidations were answered.
            self.updatees.clear();
            return;
        };
        match g.request {
            ToHome::ReadReq { have } => {
                self.copyset.insert(to);
                let with_data = have != Some(self.last.version);
                let version = self.last.version;
                let msg = if self.flavor.exclusive && self.copyset.len() == 1 {
                    self.exclusive = Some(to);
                    ToClient::ExclusiveGrant { version, with_data }
                } else {
                    ToClient::ReadGrant { version, with_data }
                };
                out.push(Out {
                    to,
                    msg,
                    data: with_data.then(|| self.last.data.clone()),
                });
            }
            ToHome::WriteReq { have, need_data } => {
                self.owner = Some(to);
                self.updatees.remove(&to);
                let with_data = need_data && have != Some(self.last.version);
                out.push(Out {
                    to,
                    msg: ToClient::WriteGrant {
                        version: self.last.version,
                        with_data,
                    },
                    data: with_data.then(|| self.last.data.clone()),
                });
            }
            _ => unreachable!("only requests wait"),
        }
    }

    /// Learned sets: `client` gets the last release as a Shared copy, when
    /// nothing holds the chunk. Any writer after this invalidates that copy
    /// first (the client is a sharer from now on); a writer at work, or a
    /// request queued, would make the push stale or overtake it, so then
    /// nothing is sent, and the client's READ asks as in MESI.
    fn push_wanted(&mut self, client: Rank, out: &mut Vec<Out<ToClient>>) {
        if self.busy()
            || !self.pending.is_empty()
            || self.exclusive.is_some()
            || self.copyset.contains(&client)
        {
            return;
        }
        self.copyset.insert(client);
        out.push(Out {
            to: client,
            msg: ToClient::Update {
                version: self.last.version,
            },
            data: Some(self.last.data.clone()),
        });
    }

    /// Updates: the release just applied goes to the copies its write
    /// invalidated, which become sharers again.
    fn push_updates(&mut self, writer: Rank, out: &mut Vec<Out<ToClient>>) {
        for c in std::mem::take(&mut self.updatees) {
            if c == writer {
                continue;
            }
            self.copyset.insert(c);
            out.push(Out {
                to: c,
                msg: ToClient::Update {
                    version: self.last.version,
                },
                data: Some(self.last.data.clone()),
            });
        }
    }
}

// ---------------------------------------------------------------- client

/// The coherence state of a client's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Invalid,
    Shared,
    /// The only copy (MESI with its E state): a write scope opens on it
    /// with no message.
    Exclusive,
    Modified,
}

/// What an acquire needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The scope is open: no message was needed.
    Hit,
    /// Send this to the home and wait for the grant.
    Request(ToHome),
}

/// A client's view of one chunk and its scopes (the bytes live in the
/// client's local store).
#[derive(Debug, Clone)]
pub struct Cache {
    flavor: Flavor,
    size: usize,
    state: State,
    /// The version of the bytes held locally, if any (valid or not).
    version: Option<Version>,
    read_scopes: u32,
    writing: bool,
    waiting: Option<Access>,
    inval_owed: bool,
    /// E: a reader elsewhere asked this holder to share, during a write
    /// scope opened with no grant; answered when it ends.
    share_owed: bool,
    /// E: the next write scope asks the home even on the only copy
    /// ([`EXCLUSIVE_BURST`]).
    ask: bool,
    /// Updates: a writer invalidated this copy, and its release will be
    /// pushed here (cleared when the copy is evicted or asked for again).
    update_due: bool,
    /// Learned sets: the valid copy was pushed and serves one read scope;
    /// at its end the copy is dropped and the home told ([`ToHome::Drop`]).
    pushed: bool,
    /// Learned sets: a pushed copy was dropped and no copy has come since:
    /// an invalidation that crossed the drop is not answered (the drop
    /// answered it).
    dropped: bool,
    /// The read request waited for was sent ahead of any scope
    /// ([`ClientSide::read_ahead`]): its grant leaves a valid copy and
    /// opens no scope.
    ahead: bool,
}

impl Cache {
    pub fn new(size: usize) -> Cache {
        Cache::with_flavor(size, Flavor::default())
    }

    pub fn with_flavor(size: usize, flavor: Flavor) -> Cache {
        Cache {
            flavor,
            size,
            state: State::Invalid,
            version: None,
            read_scopes: 0,
            writing: false,
            waiting: None,
            inval_owed: false,
            pushed: false,
            dropped: false,
            share_owed: false,
            ask: false,
            update_due: false,
            ahead: false,
        }
    }

    pub fn read_scopes(&self) -> u32 {
        self.read_scopes
    }
}

/// Checks the bytes of a grant that carries data; without data, the local
/// bytes must already be that version.
pub(crate) fn check_grant_data(
    size: usize,
    held: Option<Version>,
    version: Version,
    with_data: bool,
    data: Option<&[u8]>,
) -> Result<bool, ProtocolViolation> {
    if with_data {
        let bytes = data.ok_or(ProtocolViolation::MissingData)?;
        if bytes.len() != size {
            return Err(ProtocolViolation::WrongSize {
                got: bytes.len(),
                want: size,
            });
        }
        Ok(true)
    } else if held != Some(version) {
        Err(ProtocolViolation::MissingData)
    } else {
        Ok(false)
    }
}

impl ClientSide for Cache {
    fn state(&self) -> State {
        self.state
    }

    fn version(&self) -> Option<Version> {
        self.version
    }

    fn writing(&self) -> bool {
        self.writing
    }

    fn in_scope(&self) -> bool {
        self.read_scopes > 0 || self.writing
    }

    fn waiting(&self) -> bool {
        self.waiting.is_some()
    }

    fn acquire(&mut self, access: Access) -> Result<Acquire, ScopeError> {
        if self.waiting.is_some() {
            return Err(ScopeError::Waiting);
        }
        if self.writing {
            return Err(ScopeError::AlreadyAcquired);
        }
        if access.exclusive() {
            if self.read_scopes > 0 {
                return Err(ScopeError::UpgradeInScope);
            }
            if self.state == State::Exclusive && !self.ask {
                // The only copy: the home lets us write without asking, and
                // asks us first if anyone else wants the chunk.
                self.state = State::Modified;
                self.writing = true;
                return Ok(Acquire::Hit);
            }
            self.update_due = false;
            self.waiting = Some(access);
            return Ok(Acquire::Request(ToHome::WriteReq {
                have: self.version,
                need_data: access == Access::ReadWrite,
            }));
        }
        // A valid copy whose invalidation is not yet owed reads locally; so
        // does another read scope while one is open (the writer waiting for
        // our acknowledgement waits for every open scope anyway: sending
        // this request to the home would queue it behind that writer, who
        // waits for us, a deadlock).
        let valid = matches!(self.state, State::Shared | State::Exclusive);
        if valid && (!self.inval_owed || self.read_scopes > 0) {
            self.read_scopes += 1;
            return Ok(Acquire::Hit);
        }
        self.update_due = false;
        self.waiting = Some(access);
        Ok(Acquire::Request(ToHome::ReadReq { have: self.version }))
    }

    fn read_ahead(&mut self) -> Option<ToHome> {
        if self.waiting.is_some() || self.in_scope() || self.state != State::Invalid {
            return None;
        }
        // The request a READ would send, granted as one: the home queues
        // it with the others, and nothing here holds the chunk meanwhile
        // (an invalidation after the grant is answered at once).
        self.update_due = false;
        self.waiting = Some(Access::Read);
        self.ahead = true;
        Some(ToHome::ReadReq { have: self.version })
    }

    fn on_message(
        &mut self,
        msg: ToClient,
        data: Option<&[u8]>,
    ) -> Result<Reaction, ProtocolViolation> {
        match msg {
            ToClient::Inval => {
                // Learned sets: the invalidation of a copy dropped since;
                // the drop answered it.
                if self.dropped && self.state == State::Invalid && !self.in_scope() {
                    self.dropped = false;
                    return Ok(Reaction::default());
                }
                // Inside a scope (a read, or a write opened in E) the answer
                // waits for its end.
                if self.read_scopes > 0 || self.writing {
                    self.inval_owed = true;
                    return Ok(Reaction::default());
                }
                if matches!(self.state, State::Shared | State::Exclusive) {
                    self.state = State::Invalid;
                    self.update_due = self.flavor.update && self.waiting.is_none();
                }
                Ok(Reaction {
                    reply: Some(ToHome::InvalAck),
                    take_data: false,
                })
            }
            ToClient::Share => {
                if !self.flavor.exclusive {
                    return Err(ProtocolViolation::Foreign("share"));
                }
                if self.writing {
                    self.share_owed = true;
                    return Ok(Reaction::default());
                }
                // Read scopes go on: they do not conflict with a reader.
                if self.state == State::Exclusive {
                    self.state = State::Shared;
                }
                Ok(Reaction {
                    reply: Some(ToHome::InvalAck),
                    take_data: false,
                })
            }
            ToClient::ReadGrant { version, with_data }
            | ToClient::ExclusiveGrant { version, with_data } => {
                if self.waiting != Some(Access::Read) {
                    return Err(ProtocolViolation::StrayGrant);
                }
                let exclusive = matches!(msg, ToClient::ExclusiveGrant { .. });
                if exclusive && !self.flavor.exclusive {
                    return Err(ProtocolViolation::Foreign("exclusive_grant"));
                }
                let take_data =
                    check_grant_data(self.size, self.version, version, with_data, data)?;
                self.version = Some(version);
                self.waiting = None;
                self.pushed = false;
                self.dropped = false;
                self.state = if exclusive {
                    State::Exclusive
                } else {
                    State::Shared
                };
                // A grant asked for ahead leaves the copy valid; the READ
                // that wants it opens on it as a hit.
                if !std::mem::take(&mut self.ahead) {
                    self.read_scopes += 1;
                }
                Ok(Reaction {
                    reply: None,
                    take_data,
                })
            }
            ToClient::DiffAck { .. } => Err(ProtocolViolation::Foreign(msg.name())),
            ToClient::Update { version } => {
                if !self.flavor.update && !self.flavor.learned {
                    return Err(ProtocolViolation::Foreign("update"));
                }
                let bytes = data.ok_or(ProtocolViolation::MissingData)?;
                if bytes.len() != self.size {
                    return Err(ProtocolViolation::WrongSize {
                        got: bytes.len(),
                        want: self.size,
                    });
                }
                // Taken only by the copy its write invalidated, still
                // invalid and not asked for since (a request gets its own
                // answer, with the bytes if they moved).
                // Learned sets: pushed as a barrier ended, to a copy that
                // held a version (not one evicted: its bytes are gone).
                let wanted = self.flavor.learned && self.version.is_some();
                let take = (self.update_due || wanted)
                    && self.state == State::Invalid
                    && self.waiting.is_none()
                    && !self.in_scope();
                self.update_due = false;
                // The home counts us as a sharer from this push on, taken
                // or not: its next invalidation is for it.
                self.dropped = false;
                if take {
                    self.version = Some(version);
                    self.state = State::Shared;
                    self.pushed = self.flavor.learned;
                }
                Ok(Reaction {
                    reply: None,
                    take_data: take,
                })
            }
            ToClient::WriteGrant { version, with_data } => {
                let Some(access) = self.waiting.filter(|a| a.exclusive()) else {
                    return Err(ProtocolViolation::StrayGrant);
                };
                // WRITE may see stale data (Figure 5): only the version the
                // release builds on matters, and bytes are taken if sent.
                let take_data = if access == Access::ReadWrite || with_data {
                    check_grant_data(self.size, self.version, version, with_data, data)?
                } else {
                    false
                };
                self.version = Some(version);
                self.waiting = None;
                self.pushed = false;
                self.dropped = false;
                self.state = State::Modified;
                self.writing = true;
                self.ask = false;
                Ok(Reaction {
                    reply: None,
                    take_data,
                })
            }
        }
    }

    fn release(&mut self) -> Result<Option<ToHome>, ScopeError> {
        if self.writing {
            self.writing = false;
            let version = self.version.map_or(1, |v| v + 1);
            self.version = Some(version);
            if self.inval_owed || self.share_owed {
                // Asked for during a write opened in E: the answer goes with
                // the release, in one message.
                self.state = if self.inval_owed {
                    State::Invalid
                } else {
                    State::Shared
                };
                self.inval_owed = false;
                self.share_owed = false;
                return Ok(Some(ToHome::ReleaseYield { version }));
            }
            self.state = if self.flavor.exclusive {
                State::Exclusive
            } else {
                State::Shared
            };
            return Ok(Some(ToHome::Release { version }));
        }
        if self.read_scopes == 0 {
            return Err(ScopeError::NotAcquired);
        }
        self.read_scopes -= 1;
        if self.read_scopes == 0 && self.inval_owed {
            self.inval_owed = false;
            self.pushed = false;
            self.state = State::Invalid;
            self.update_due = self.flavor.update;
            return Ok(Some(ToHome::InvalAck));
        }
        if self.read_scopes == 0 && self.pushed {
            // Learned sets: a pushed copy serves the read it was pushed
            // for. Kept, it would cost the next writer an invalidation and
            // its answer, on the writer's path; dropped, one message here.
            self.pushed = false;
            self.dropped = true;
            self.state = State::Invalid;
            return Ok(Some(ToHome::Drop));
        }
        Ok(None)
    }

    fn abort(&mut self) -> Result<Option<ToHome>, ScopeError> {
        if !self.writing {
            return self.release();
        }
        // Whatever the scope wrote is no version: the next acquire fetches
        // the home's, which did not move.
        self.writing = false;
        self.state = State::Invalid;
        self.version = None;
        if self.inval_owed || self.share_owed {
            self.inval_owed = false;
            self.share_owed = false;
            return Ok(Some(ToHome::AbortYield));
        }
        Ok(Some(ToHome::Abort))
    }

    fn join(&self) -> Join {
        // Once a writer waits for our acknowledgement, new readers wait
        // for our read scopes to end (then ask the home, queued behind the
        // writer) instead of extending them for ever: that would starve
        // the writer.
        if self.inval_owed {
            Join::Wait
        } else {
            Join::Local
        }
    }

    fn snapshot(&self) -> Box<dyn ClientSide> {
        Box::new(self.clone())
    }

    fn ask_next_write(&mut self) {
        self.ask = true;
    }

    fn evict(&mut self) -> bool {
        if self.in_scope() || self.waiting.is_some() || self.state == State::Modified {
            return false;
        }
        // A Shared or Exclusive copy goes silently: the home still counts
        // us in the copyset (or as the holder) and its invalidation is
        // answered at once (PROTOCOL-NOTES); the bytes are gone, so an
        // update is not taken either.
        self.state = State::Invalid;
        self.version = None;
        self.update_due = false;
        self.pushed = false;
        true
    }
}

#[cfg(test)]
mod tests;
