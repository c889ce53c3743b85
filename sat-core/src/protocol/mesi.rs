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
//! message) or Modified (inside its write scope). The exclusive-clean state E
//! of the report collapses into Modified here because ownership ends at each
//! release; keeping E across releases (migratory data) is a later option.
//!
//! Message counts (home on the client's server): read hit 0; read miss 2;
//! write with s other sharers 2 + 2s; release of a write scope 1; release of
//! a read scope 0 (plus the deferred acknowledgement, if one is owed).
//!
//! Per-pair FIFO order is assumed (the transport guarantees it): a client's
//! release reaches the home before its next request.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::{Access, ClientSide, Consistency, HomeSide, Join, LastRelease, ProtocolId, Reaction};
use crate::transport::Rank;

/// The home-based MESI protocol's handlers.
pub struct HomeBasedMesi;

impl Consistency for HomeBasedMesi {
    fn id(&self) -> ProtocolId {
        ProtocolId::HomeMesi
    }
    fn new_home(&self, size: usize) -> Box<dyn HomeSide> {
        Box::new(Home::new(size))
    }
    fn new_client(&self, size: usize) -> Box<dyn ClientSide> {
        Box::new(Cache::new(size))
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
}

/// Home -> client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToClient {
    ReadGrant { version: Version, with_data: bool },
    WriteGrant { version: Version, with_data: bool },
    Inval,
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
}

/// Misuse of the client API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("RELEASE without a matching READ, WRITE or READWRITE on this chunk")]
    NotAcquired,
    #[error("the chunk is already acquired for writing in this process: release it first")]
    AlreadyAcquired,
    #[error("a read scope is open on this chunk: release it before acquiring it for writing")]
    UpgradeInScope,
    #[error("an acquire of this chunk is already waiting for the home")]
    Waiting,
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
        _ => return None,
    })
}

// ------------------------------------------------------------------ home

#[derive(Debug, Clone)]
struct Granting {
    /// The requester; None once it has left: the invalidations sent for it
    /// are still awaited, because the readers they reach may be inside read
    /// scopes, and nobody may be granted before those end.
    to: Option<Rank>,
    have: Option<Version>,
    need_data: bool,
    /// The clients whose invalidation acknowledgement is still due.
    owed: BTreeSet<Rank>,
}

/// The home's directory entry and data for one chunk.
#[derive(Debug)]
pub struct Home {
    last: LastRelease,
    owner: Option<Rank>,
    copyset: BTreeSet<Rank>,
    pending: VecDeque<(Rank, ToHome)>,
    granting: Option<Granting>,
}

impl Home {
    /// A new chunk of `size` zero bytes at version 0.
    pub fn new(size: usize) -> Home {
        Home {
            last: LastRelease::new(size),
            owner: None,
            copyset: BTreeSet::new(),
            pending: VecDeque::new(),
            granting: None,
        }
    }

    fn busy(&self) -> bool {
        self.owner.is_some() || self.granting.is_some()
    }
}

impl HomeSide for Home {
    fn version(&self) -> Version {
        self.last.version
    }

    fn data(&self) -> &Arc<[u8]> {
        &self.last.data
    }

    fn owner(&self) -> Option<Rank> {
        self.owner
    }

    /// Client `client` has left the run (its role returned; it released its
    /// scopes before): forget its copy and its waiting requests, and stop
    /// waiting for an acknowledgement it can no longer send.
    fn client_left(&mut self, client: Rank, out: &mut Vec<Out<ToClient>>) {
        self.copyset.remove(&client);
        self.pending.retain(|&(c, _)| c != client);
        if self.owner == Some(client) {
            // Its release, sent before it left, would have cleared this.
            self.owner = None;
        }
        if let Some(g) = self.granting.as_mut() {
            if g.to == Some(client) {
                g.to = None;
            }
            g.owed.remove(&client);
            if g.owed.is_empty() {
                let g = self.granting.take().expect("checked");
                self.grant_write(g, out);
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
            ToHome::InvalAck => {
                let g = self.granting.as_mut().ok_or(ProtocolViolation::StrayAck)?;
                if !g.owed.remove(&from) {
                    return Err(ProtocolViolation::StrayAck);
                }
                if g.owed.is_empty() {
                    let g = self.granting.take().expect("checked");
                    self.grant_write(g, out);
                }
            }
            ToHome::ReadRelease => return Err(ProtocolViolation::Foreign("read_release")),
            ToHome::Release { version } => {
                self.last.apply(self.owner, from, version, data)?;
                self.owner = None;
                self.copyset.insert(from);
            }
            ToHome::Abort => {
                if self.owner != Some(from) {
                    return Err(ProtocolViolation::AbortWithoutOwnership { from });
                }
                // The version stays; the writer's bytes are no version, so
                // it is no sharer either.
                self.owner = None;
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
            match msg {
                ToHome::ReadReq { have } => {
                    self.copyset.insert(from);
                    let with_data = have != Some(self.last.version);
                    out.push(Out {
                        to: from,
                        msg: ToClient::ReadGrant {
                            version: self.last.version,
                            with_data,
                        },
                        data: with_data.then(|| self.last.data.clone()),
                    });
                }
                ToHome::WriteReq { have, need_data } => {
                    let others: Vec<Rank> = self
                        .copyset
                        .iter()
                        .copied()
                        .filter(|&c| c != from)
                        .collect();
                    self.copyset.clear();
                    for &c in &others {
                        out.push(Out {
                            to: c,
                            msg: ToClient::Inval,
                            data: None,
                        });
                    }
                    let g = Granting {
                        to: Some(from),
                        have,
                        need_data,
                        owed: others.iter().copied().collect(),
                    };
                    if others.is_empty() {
                        self.grant_write(g, out);
                    } else {
                        self.granting = Some(g);
                    }
                }
                _ => unreachable!("only requests wait"),
            }
        }
    }

    fn grant_write(&mut self, g: Granting, out: &mut Vec<Out<ToClient>>) {
        let Some(to) = g.to else {
            // The requester left while its invalidations were answered.
            return;
        };
        self.owner = Some(to);
        let with_data = g.need_data && g.have != Some(self.last.version);
        out.push(Out {
            to,
            msg: ToClient::WriteGrant {
                version: self.last.version,
                with_data,
            },
            data: with_data.then(|| self.last.data.clone()),
        });
    }
}

// ---------------------------------------------------------------- client

/// The coherence state of a client's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Invalid,
    Shared,
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
    size: usize,
    state: State,
    /// The version of the bytes held locally, if any (valid or not).
    version: Option<Version>,
    read_scopes: u32,
    writing: bool,
    waiting: Option<Access>,
    inval_owed: bool,
}

impl Cache {
    pub fn new(size: usize) -> Cache {
        Cache {
            size,
            state: State::Invalid,
            version: None,
            read_scopes: 0,
            writing: false,
            waiting: None,
            inval_owed: false,
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
        if self.state == State::Shared && (!self.inval_owed || self.read_scopes > 0) {
            self.read_scopes += 1;
            return Ok(Acquire::Hit);
        }
        self.waiting = Some(access);
        Ok(Acquire::Request(ToHome::ReadReq { have: self.version }))
    }

    fn on_message(
        &mut self,
        msg: ToClient,
        data: Option<&[u8]>,
    ) -> Result<Reaction, ProtocolViolation> {
        match msg {
            ToClient::Inval => {
                if self.read_scopes > 0 {
                    self.inval_owed = true;
                    return Ok(Reaction::default());
                }
                if self.state == State::Shared {
                    self.state = State::Invalid;
                }
                Ok(Reaction {
                    reply: Some(ToHome::InvalAck),
                    take_data: false,
                })
            }
            ToClient::ReadGrant { version, with_data } => {
                if self.waiting != Some(Access::Read) {
                    return Err(ProtocolViolation::StrayGrant);
                }
                let take_data =
                    check_grant_data(self.size, self.version, version, with_data, data)?;
                self.version = Some(version);
                self.waiting = None;
                self.state = State::Shared;
                self.read_scopes += 1;
                Ok(Reaction {
                    reply: None,
                    take_data,
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
                self.state = State::Modified;
                self.writing = true;
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
            self.state = State::Shared;
            return Ok(Some(ToHome::Release { version }));
        }
        if self.read_scopes == 0 {
            return Err(ScopeError::NotAcquired);
        }
        self.read_scopes -= 1;
        if self.read_scopes == 0 && self.inval_owed {
            self.inval_owed = false;
            self.state = State::Invalid;
            return Ok(Some(ToHome::InvalAck));
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

    fn evict(&mut self) -> bool {
        if self.in_scope() || self.waiting.is_some() || self.state == State::Modified {
            return false;
        }
        // A Shared copy goes silently: the home still counts us in the
        // copyset and its invalidation is answered at once (PROTOCOL-NOTES).
        self.state = State::Invalid;
        self.version = None;
        true
    }
}

#[cfg(test)]
mod tests;
