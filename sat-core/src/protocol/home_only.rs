//! Home-only: the home serializes every scope; clients keep no valid copy
//! between scopes.
//!
//! Every READ, WRITE and READWRITE asks the home, and every RELEASE tells it
//! (a read release too: the home counts readers instead of invalidating
//! copies). Many readers or one writer, in arrival order. There is no
//! invalidation and no copyset, so a write never waits on the network for
//! other clients' answers, only for the scopes open at the home to end.
//!
//! The bytes a client still holds from an earlier scope are reused when the
//! home's version has not moved (the grant then carries no data), so an
//! unchanged chunk costs messages but no data transfer.
//!
//! Message counts (home on the client's server): every scope 3 (request,
//! grant, release); a read hit does not exist.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::mesi::check_grant_data;
use super::{
    Access, Acquire, ClientSide, Consistency, HomeSide, Join, LastRelease, Out, ProtocolId,
    ProtocolViolation, Reaction, ScopeError, State, ToClient, ToHome, Version,
};
use crate::transport::Rank;

/// The home-only protocol's handlers.
pub struct HomeOnly;

impl Consistency for HomeOnly {
    fn id(&self) -> ProtocolId {
        ProtocolId::HomeOnly
    }
    fn new_home(&self, size: usize) -> Box<dyn HomeSide> {
        Box::new(Home::new(size))
    }
    fn new_client(&self, size: usize) -> Box<dyn ClientSide> {
        Box::new(Client::new(size))
    }
    fn resume_home(&self, last: LastRelease) -> Option<Box<dyn HomeSide>> {
        let mut home = Home::new(0);
        home.last = last;
        Some(Box::new(home))
    }
}

// ------------------------------------------------------------------ home

/// The home's entry: the data, the open scopes, the waiting requests.
#[derive(Debug)]
pub struct Home {
    last: LastRelease,
    writer: Option<Rank>,
    /// Read scopes open per client (a client's threads may share a grant,
    /// but the client releases it once, so this is 0 or 1 in practice).
    readers: BTreeMap<Rank, u32>,
    pending: VecDeque<(Rank, ToHome)>,
}

impl Home {
    pub fn new(size: usize) -> Home {
        Home {
            last: LastRelease::new(size),
            writer: None,
            readers: BTreeMap::new(),
            pending: VecDeque::new(),
        }
    }

    /// Grants waiting requests in arrival order while they are compatible
    /// with the open scopes (a waiting writer holds back later readers).
    fn serve_pending(&mut self, out: &mut Vec<Out<ToClient>>) {
        while let Some(&(from, msg)) = self.pending.front() {
            match msg {
                ToHome::ReadReq { have } if self.writer.is_none() => {
                    *self.readers.entry(from).or_default() += 1;
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
                ToHome::WriteReq { have, need_data }
                    if self.writer.is_none() && self.readers.is_empty() =>
                {
                    self.writer = Some(from);
                    let with_data = need_data && have != Some(self.last.version);
                    out.push(Out {
                        to: from,
                        msg: ToClient::WriteGrant {
                            version: self.last.version,
                            with_data,
                        },
                        data: with_data.then(|| self.last.data.clone()),
                    });
                }
                _ => return,
            }
            self.pending.pop_front();
        }
    }
}

impl HomeSide for Home {
    fn idle(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty() && self.pending.is_empty()
    }

    /// Nothing waits to be granted: open scopes may end (their clients
    /// may leave) with no data sent.
    fn can_spill(&self) -> bool {
        self.pending.is_empty()
    }

    fn last_release_mut(&mut self) -> Option<&mut LastRelease> {
        Some(&mut self.last)
    }

    fn on_message(
        &mut self,
        from: Rank,
        msg: ToHome,
        data: Option<&[u8]>,
        out: &mut Vec<Out<ToClient>>,
    ) -> Result<(), ProtocolViolation> {
        match msg {
            ToHome::ReadReq { .. } | ToHome::WriteReq { .. } => self.pending.push_back((from, msg)),
            ToHome::ReadRelease => {
                let open = self
                    .readers
                    .get_mut(&from)
                    .ok_or(ProtocolViolation::StrayReadRelease { from })?;
                *open -= 1;
                if *open == 0 {
                    self.readers.remove(&from);
                }
            }
            ToHome::Release { version } => {
                self.last.apply(self.writer, from, version, data)?;
                self.writer = None;
            }
            ToHome::Abort => {
                if self.writer != Some(from) {
                    return Err(ProtocolViolation::AbortWithoutOwnership { from });
                }
                self.writer = None;
            }
            ToHome::InvalAck => return Err(ProtocolViolation::Foreign("inval_ack")),
            ToHome::ReleaseYield { .. } => return Err(ProtocolViolation::Foreign("release_yield")),
            ToHome::AbortYield | ToHome::ReleaseDiff | ToHome::Want | ToHome::Drop => {
                return Err(ProtocolViolation::Foreign(msg.name()))
            }
        }
        self.serve_pending(out);
        Ok(())
    }

    fn requests_void(&mut self, client: Rank) {
        self.pending.retain(|&(c, _)| c != client);
    }

    fn client_left(&mut self, client: Rank, out: &mut Vec<Out<ToClient>>) {
        self.readers.remove(&client);
        self.pending.retain(|&(c, _)| c != client);
        if self.writer == Some(client) {
            // Its release, sent before it left, would have cleared this.
            self.writer = None;
        }
        self.serve_pending(out);
    }

    fn version(&self) -> Version {
        self.last.version
    }

    fn data(&self) -> &Arc<[u8]> {
        &self.last.data
    }

    fn owner(&self) -> Option<Rank> {
        self.writer
    }
}

// ---------------------------------------------------------------- client

/// A client's view of one chunk: scopes only, no valid copy between them.
#[derive(Debug, Clone)]
pub struct Client {
    size: usize,
    /// The version of the bytes held locally, if any: the home sends no
    /// data when this is still current.
    version: Option<Version>,
    read_scopes: u32,
    /// The read grants the home counts for us (each ends with one
    /// ReadRelease); the other read scopes joined one locally.
    grants: u32,
    writing: bool,
    waiting: Option<Access>,
}

impl Client {
    pub fn new(size: usize) -> Client {
        Client {
            size,
            version: None,
            read_scopes: 0,
            grants: 0,
            writing: false,
            waiting: None,
        }
    }
}

impl ClientSide for Client {
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
        // A read scope is open and the caller holds one (other threads ask
        // the home, see `join`): its grant covers this one.
        if self.read_scopes > 0 {
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
        let (version, with_data, exclusive) = match msg {
            ToClient::ReadGrant { version, with_data } => (version, with_data, false),
            ToClient::WriteGrant { version, with_data } => (version, with_data, true),
            ToClient::Inval => return Err(ProtocolViolation::Foreign("inval")),
            ToClient::ExclusiveGrant { .. } => {
                return Err(ProtocolViolation::Foreign("exclusive_grant"))
            }
            ToClient::Update { .. } => return Err(ProtocolViolation::Foreign("update")),
            ToClient::Share | ToClient::DiffAck { .. } => {
                return Err(ProtocolViolation::Foreign(msg.name()))
            }
        };
        let Some(access) = self.waiting.filter(|a| a.exclusive() == exclusive) else {
            return Err(ProtocolViolation::StrayGrant);
        };
        let take_data = if access != Access::Write || with_data {
            check_grant_data(self.size, self.version, version, with_data, data)?
        } else {
            false
        };
        self.version = Some(version);
        self.waiting = None;
        if exclusive {
            self.writing = true;
        } else {
            self.read_scopes += 1;
            self.grants += 1;
        }
        Ok(Reaction {
            reply: None,
            take_data,
        })
    }

    fn release(&mut self) -> Result<Option<ToHome>, ScopeError> {
        if self.writing {
            self.writing = false;
            let version = self.version.map_or(1, |v| v + 1);
            self.version = Some(version);
            return Ok(Some(ToHome::Release { version }));
        }
        if self.read_scopes == 0 {
            return Err(ScopeError::NotAcquired);
        }
        self.read_scopes -= 1;
        // Each grant ends once: when fewer scopes than grants remain.
        if self.read_scopes < self.grants {
            self.grants -= 1;
            return Ok(Some(ToHome::ReadRelease));
        }
        Ok(None)
    }

    fn abort(&mut self) -> Result<Option<ToHome>, ScopeError> {
        if !self.writing {
            return self.release();
        }
        self.writing = false;
        self.version = None;
        Ok(Some(ToHome::Abort))
    }

    fn join(&self) -> Join {
        // A writer waiting at the home is unseen from here: threads that
        // joined our grant locally could keep it open for ever. Each
        // thread's scope asks the home instead, which serves readers and
        // writers in arrival order.
        Join::Ask
    }

    fn acquire_beside(&mut self) -> Result<Acquire, ScopeError> {
        if self.waiting.is_some() {
            return Err(ScopeError::Waiting);
        }
        if self.writing {
            return Err(ScopeError::AlreadyAcquired);
        }
        self.waiting = Some(Access::Read);
        Ok(Acquire::Request(ToHome::ReadReq { have: self.version }))
    }

    fn snapshot(&self) -> Box<dyn ClientSide> {
        Box::new(self.clone())
    }

    fn evict(&mut self) -> bool {
        if self.in_scope() || self.waiting.is_some() {
            return false;
        }
        self.version = None;
        true
    }

    fn state(&self) -> State {
        if self.writing {
            State::Modified
        } else if self.read_scopes > 0 {
            State::Shared
        } else {
            State::Invalid
        }
    }

    fn version(&self) -> Option<Version> {
        self.version
    }

    fn in_scope(&self) -> bool {
        self.read_scopes > 0 || self.writing
    }

    fn writing(&self) -> bool {
        self.writing
    }

    fn waiting(&self) -> bool {
        self.waiting.is_some()
    }
}
