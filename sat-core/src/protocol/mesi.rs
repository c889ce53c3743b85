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

use super::Access;
use crate::transport::Rank;

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
    to: Rank,
    have: Option<Version>,
    need_data: bool,
    /// The clients whose invalidation acknowledgement is still due.
    owed: BTreeSet<Rank>,
}

/// The home's directory entry and data for one chunk.
#[derive(Debug)]
pub struct Home {
    version: Version,
    data: Arc<[u8]>,
    owner: Option<Rank>,
    copyset: BTreeSet<Rank>,
    pending: VecDeque<(Rank, ToHome)>,
    granting: Option<Granting>,
}

impl Home {
    /// A new chunk of `size` zero bytes at version 0.
    pub fn new(size: usize) -> Home {
        Home {
            version: 0,
            data: vec![0u8; size].into(),
            owner: None,
            copyset: BTreeSet::new(),
            pending: VecDeque::new(),
            granting: None,
        }
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn data(&self) -> &Arc<[u8]> {
        &self.data
    }

    pub fn owner(&self) -> Option<Rank> {
        self.owner
    }

    /// Client `client` has left the run (its role returned; it released its
    /// scopes before): forget its copy and its waiting requests, and stop
    /// waiting for an acknowledgement it can no longer send.
    pub fn client_left(&mut self, client: Rank, out: &mut Vec<Out<ToClient>>) {
        self.copyset.remove(&client);
        self.pending.retain(|&(c, _)| c != client);
        if self.owner == Some(client) {
            // Its release, sent before it left, would have cleared this.
            self.owner = None;
        }
        if let Some(g) = self.granting.as_mut() {
            if g.to == client {
                self.granting = None;
            } else {
                g.owed.remove(&client);
                if g.owed.is_empty() {
                    let g = self.granting.take().expect("checked");
                    self.grant_write(g, out);
                }
            }
        }
        self.serve_pending(out);
    }

    fn busy(&self) -> bool {
        self.owner.is_some() || self.granting.is_some()
    }

    /// Handles one message from client `from`; appends what to send to `out`.
    pub fn on_message(
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
            ToHome::Release { version } => {
                if self.owner != Some(from) {
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
                self.data = bytes.into();
                self.owner = None;
                self.copyset.insert(from);
            }
        }
        self.serve_pending(out);
        Ok(())
    }

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
                    let with_data = have != Some(self.version);
                    out.push(Out {
                        to: from,
                        msg: ToClient::ReadGrant {
                            version: self.version,
                            with_data,
                        },
                        data: with_data.then(|| self.data.clone()),
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
                        to: from,
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
        self.owner = Some(g.to);
        let with_data = g.need_data && g.have != Some(self.version);
        out.push(Out {
            to: g.to,
            msg: ToClient::WriteGrant {
                version: self.version,
                with_data,
            },
            data: with_data.then(|| self.data.clone()),
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

/// What a release sends home: the message, and the new data after a write.
pub type Released<'a> = (ToHome, Option<&'a [u8]>);

/// A client's copy of one chunk and its scopes.
#[derive(Debug)]
pub struct Cache {
    state: State,
    /// The version of `data`, if the client holds any (valid or not).
    version: Option<Version>,
    data: Vec<u8>,
    read_scopes: u32,
    writing: bool,
    waiting: Option<Access>,
    inval_owed: bool,
}

impl Cache {
    pub fn new(size: usize) -> Cache {
        Cache {
            state: State::Invalid,
            version: None,
            data: vec![0u8; size],
            read_scopes: 0,
            writing: false,
            waiting: None,
            inval_owed: false,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn version(&self) -> Option<Version> {
        self.version
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The data of an open write scope.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Whether a write scope is open.
    pub fn writing(&self) -> bool {
        self.writing
    }

    pub fn in_scope(&self) -> bool {
        self.read_scopes > 0 || self.writing
    }

    pub fn waiting(&self) -> bool {
        self.waiting.is_some()
    }

    /// Opens a scope, or says what to ask the home for.
    pub fn acquire(&mut self, access: Access) -> Result<Acquire, ScopeError> {
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
        // A valid copy whose invalidation is not yet owed reads locally.
        if self.state == State::Shared && !self.inval_owed {
            self.read_scopes += 1;
            return Ok(Acquire::Hit);
        }
        self.waiting = Some(access);
        Ok(Acquire::Request(ToHome::ReadReq { have: self.version }))
    }

    /// Handles a message from the home; returns what to send back, if anything.
    pub fn on_message(
        &mut self,
        msg: ToClient,
        data: Option<&[u8]>,
    ) -> Result<Option<ToHome>, ProtocolViolation> {
        match msg {
            ToClient::Inval => {
                if self.read_scopes > 0 {
                    self.inval_owed = true;
                    return Ok(None);
                }
                if self.state == State::Shared {
                    self.state = State::Invalid;
                }
                Ok(Some(ToHome::InvalAck))
            }
            ToClient::ReadGrant { version, with_data } => {
                if self.waiting != Some(Access::Read) {
                    return Err(ProtocolViolation::StrayGrant);
                }
                self.take_data(version, with_data, data)?;
                self.waiting = None;
                self.state = State::Shared;
                self.read_scopes += 1;
                Ok(None)
            }
            ToClient::WriteGrant { version, with_data } => {
                let Some(access) = self.waiting.filter(|a| a.exclusive()) else {
                    return Err(ProtocolViolation::StrayGrant);
                };
                if access == Access::ReadWrite {
                    self.take_data(version, with_data, data)?;
                } else {
                    // WRITE: the data may be stale (Figure 5); only the
                    // version the release builds on matters.
                    if with_data {
                        self.take_data(version, true, data)?;
                    }
                    self.version = Some(version);
                }
                self.waiting = None;
                self.state = State::Modified;
                self.writing = true;
                Ok(None)
            }
        }
    }

    fn take_data(
        &mut self,
        version: Version,
        with_data: bool,
        data: Option<&[u8]>,
    ) -> Result<(), ProtocolViolation> {
        if with_data {
            let bytes = data.ok_or(ProtocolViolation::MissingData)?;
            if bytes.len() != self.data.len() {
                return Err(ProtocolViolation::WrongSize {
                    got: bytes.len(),
                    want: self.data.len(),
                });
            }
            self.data.copy_from_slice(bytes);
        } else if self.version != Some(version) {
            return Err(ProtocolViolation::MissingData);
        }
        self.version = Some(version);
        Ok(())
    }

    /// Closes a scope; returns what to send home (the new version after a
    /// write scope, a deferred acknowledgement after the last read scope).
    pub fn release(&mut self) -> Result<Option<Released<'_>>, ScopeError> {
        if self.writing {
            self.writing = false;
            let version = self.version.map_or(1, |v| v + 1);
            self.version = Some(version);
            self.state = State::Shared;
            return Ok(Some((ToHome::Release { version }, Some(&self.data))));
        }
        if self.read_scopes == 0 {
            return Err(ScopeError::NotAcquired);
        }
        self.read_scopes -= 1;
        if self.read_scopes == 0 && self.inval_owed {
            self.inval_owed = false;
            self.state = State::Invalid;
            return Ok(Some((ToHome::InvalAck, None)));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
