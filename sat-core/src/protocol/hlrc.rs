//! Home-based lazy release consistency with multiple writers (HLRC, as in
//! ViSMI and DSM-PM2's hbrc_mw): several processes write one chunk at once,
//! each publishing only the bytes it changed.
//!
//! A write scope keeps a **twin** of the chunk's bytes as it opened (the
//! client runtime makes it: handlers never touch bytes); its release sends
//! the **diff** against the twin, the runs of bytes that differ, and the
//! home applies it to its last version, which makes the next version. So
//! writers of disjoint bytes of one chunk (rows of a matrix that share a
//! chunk) never wait for each other, and nobody is invalidated.
//!
//! - **Overlapping diffs**: the home applies releases in the order they
//!   reach it, byte by byte, so where two writers changed the same byte the
//!   later release's value stays. A READWRITE that adds to a counter other
//!   writers add to at the same time can therefore lose their additions:
//!   writers that share bytes need MESI (or a lock around their scopes).
//! - **A byte rewritten with the value its twin had** is no change: it is
//!   not published, and another writer's value for it stays.
//! - **WRITE and READWRITE** both ask the home for its last version first
//!   (2 messages, the bytes only when they changed), which the twin is made
//!   of. A twin of older bytes would leave out of the diff a byte written
//!   with the value the old version had, and the home would keep a newer
//!   value there: a row its writer rewrote whole would come out mixed.
//!   READ asks the home each time too: with no invalidations, a client
//!   cannot know whether its copy is still current.
//! - **A release returns once the home has applied its diff** (the home
//!   acknowledges it): a reader's request and a writer's diff travel
//!   different paths, and a READ opened after a release returned (after a
//!   barrier, say) must see it. The home does not track writers, so it
//!   could not hold the reader back instead.
//! - After its release a writer's bytes are its own changes over an older
//!   version, not a version: its next READ fetches the merged one.
//! - Readers and writers never wait for each other: a read scope sees the
//!   version of its grant, and its bytes do not change while it is open.
//!   Threads of one process share its copy, so a READ by a thread while
//!   another thread of the process has a read scope open on the chunk (or
//!   its READ under way) shares that grant and sees its version, which a
//!   release elsewhere may have passed since. A READ with no other read of
//!   the chunk open in its process asks the home and sees every release
//!   that returned before it.
//!
//! Message counts (home on the client's server): READ 2; WRITE and
//! READWRITE 2, and their release 2 (the diff and its acknowledgement); no
//! write waits for another.

use std::sync::Arc;

use super::mesi::check_grant_data;
use super::{
    Access, Acquire, ClientSide, Consistency, HomeSide, Join, LastRelease, Out, ProtocolId,
    ProtocolViolation, Reaction, ScopeError, State, ToClient, ToHome, Version,
};
use crate::transport::Rank;

/// The multiple-writer protocol's handlers.
pub struct MultipleWriters;

impl Consistency for MultipleWriters {
    fn id(&self) -> ProtocolId {
        ProtocolId::MultipleWriters
    }
    fn new_home(&self, size: usize) -> Box<dyn HomeSide> {
        Box::new(Home {
            last: LastRelease::new(size),
        })
    }
    fn new_client(&self, size: usize) -> Box<dyn ClientSide> {
        Box::new(Client {
            size,
            version: None,
            read_scopes: 0,
            writing: false,
            waiting: None,
            acking: false,
        })
    }
}

// ------------------------------------------------------------------ diffs

/// The bytes of a run's header: its offset and length (u32 each, LE).
const RUN_HEADER: usize = 8;

/// The diff of `now` against `twin` (same length): every run of bytes that
/// differ, as (offset, length, bytes), in ascending order. Unchanged bytes
/// are never included, even between two close runs: they would overwrite
/// another writer's change of them.
pub fn diff(twin: &[u8], now: &[u8]) -> Vec<u8> {
    debug_assert_eq!(twin.len(), now.len());
    let mut out = Vec::new();
    let mut i = 0;
    let n = now.len();
    while i < n {
        // Skip equal bytes a word at a time where both slices allow it.
        while i + 8 <= n && twin[i..i + 8] == now[i..i + 8] {
            i += 8;
        }
        while i < n && twin[i] == now[i] {
            i += 1;
        }
        if i == n {
            break;
        }
        let start = i;
        while i < n && twin[i] != now[i] {
            i += 1;
        }
        out.extend_from_slice(&(start as u32).to_le_bytes());
        out.extend_from_slice(&((i - start) as u32).to_le_bytes());
        out.extend_from_slice(&now[start..i]);
    }
    out
}

/// The diff of `now` against `twin`; without a twin (which a write scope
/// always takes), the whole chunk as one run: the scope's bytes replace the
/// version, as a MESI release's do.
pub fn diff_or_whole(twin: Option<&[u8]>, now: &[u8]) -> Vec<u8> {
    match twin {
        Some(twin) => diff(twin, now),
        None if now.is_empty() => Vec::new(),
        None => {
            let mut out = Vec::with_capacity(RUN_HEADER + now.len());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&(now.len() as u32).to_le_bytes());
            out.extend_from_slice(now);
            out
        }
    }
}

/// A diff that does not fit the chunk: a hostile or broken peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a diff whose run at byte {at} of the message does not fit a chunk of {size} bytes")]
pub struct BadDiff {
    pub at: usize,
    pub size: usize,
}

/// Checks `diff` against a chunk of `size` bytes: runs in ascending order,
/// none empty, none past the end, nothing left over.
pub fn check_diff(diff: &[u8], size: usize) -> Result<(), BadDiff> {
    let mut at = 0;
    let mut end = 0usize;
    while at < diff.len() {
        let bad = BadDiff { at, size };
        let header = diff.get(at..at + RUN_HEADER).ok_or(bad.clone())?;
        let offset = u32::from_le_bytes(header[..4].try_into().expect("4")) as usize;
        let len = u32::from_le_bytes(header[4..].try_into().expect("4")) as usize;
        let fits = len > 0
            && offset >= end
            && offset.checked_add(len).is_some_and(|e| e <= size)
            && diff.len() - at - RUN_HEADER >= len;
        if !fits {
            return Err(bad);
        }
        end = offset + len;
        at += RUN_HEADER + len;
    }
    Ok(())
}

/// Applies a diff [`check_diff`] accepted.
pub fn apply_diff(data: &mut [u8], diff: &[u8]) {
    let mut at = 0;
    while at < diff.len() {
        let offset = u32::from_le_bytes(diff[at..at + 4].try_into().expect("4")) as usize;
        let len = u32::from_le_bytes(diff[at + 4..at + 8].try_into().expect("4")) as usize;
        at += RUN_HEADER;
        data[offset..offset + len].copy_from_slice(&diff[at..at + len]);
        at += len;
    }
}

// ------------------------------------------------------------------ home

/// The home's entry: the last version, which every diff is applied to.
#[derive(Debug)]
pub struct Home {
    last: LastRelease,
}

impl HomeSide for Home {
    fn version(&self) -> Version {
        self.last.version
    }

    /// The home keeps nothing but the last release: no scope of its is
    /// under way here, and a client that leaves is forgotten with no data.
    fn can_spill(&self) -> bool {
        true
    }

    fn last_release_mut(&mut self) -> Option<&mut LastRelease> {
        Some(&mut self.last)
    }

    fn data(&self) -> &Arc<[u8]> {
        &self.last.data
    }

    /// Writers are not exclusive: there is no owner.
    fn owner(&self) -> Option<Rank> {
        None
    }

    fn client_left(&mut self, _client: Rank, _out: &mut Vec<Out<ToClient>>) {}

    fn on_message(
        &mut self,
        from: Rank,
        msg: ToHome,
        data: Option<&[u8]>,
        out: &mut Vec<Out<ToClient>>,
    ) -> Result<(), ProtocolViolation> {
        let version = self.last.version;
        match msg {
            ToHome::ReadReq { have } => {
                let with_data = have != Some(version);
                out.push(Out {
                    to: from,
                    msg: ToClient::ReadGrant { version, with_data },
                    data: with_data.then(|| self.last.data.clone()),
                });
            }
            ToHome::WriteReq { have, need_data } => {
                let with_data = need_data && have != Some(version);
                out.push(Out {
                    to: from,
                    msg: ToClient::WriteGrant { version, with_data },
                    data: with_data.then(|| self.last.data.clone()),
                });
            }
            ToHome::ReleaseDiff => {
                let diff = data.unwrap_or(&[]);
                check_diff(diff, self.last.data.len()).map_err(ProtocolViolation::BadDiff)?;
                apply_diff(unique(&mut self.last.data), diff);
                self.last.version += 1;
                out.push(Out {
                    to: from,
                    msg: ToClient::DiffAck {
                        version: self.last.version,
                    },
                    data: None,
                });
            }
            other => return Err(ProtocolViolation::Foreign(other.name())),
        }
        Ok(())
    }
}

/// The bytes of `data`, copied first only when a send of the last version
/// still holds them (`Arc<[u8]>` has no `make_mut`).
fn unique(data: &mut Arc<[u8]>) -> &mut [u8] {
    if Arc::get_mut(data).is_none() {
        *data = Arc::from(&data[..]);
    }
    Arc::get_mut(data).expect("unique now")
}

// ---------------------------------------------------------------- client

/// A client's view of one chunk: the version its bytes hold, if they hold
/// one, and its scopes.
#[derive(Debug, Clone)]
pub struct Client {
    size: usize,
    version: Option<Version>,
    read_scopes: u32,
    writing: bool,
    waiting: Option<Access>,
    /// A release waits for the home's acknowledgement of its diff.
    acking: bool,
}

impl ClientSide for Client {
    fn acquire(&mut self, access: Access) -> Result<Acquire, ScopeError> {
        if self.waiting.is_some() || self.acking {
            return Err(ScopeError::Waiting);
        }
        if self.writing {
            return Err(ScopeError::AlreadyAcquired);
        }
        match access {
            Access::Read if self.read_scopes > 0 => {
                // Threads of one process share the grant of the first.
                self.read_scopes += 1;
                Ok(Acquire::Hit)
            }
            Access::Read => {
                self.waiting = Some(access);
                Ok(Acquire::Request(ToHome::ReadReq { have: self.version }))
            }
            _ if self.read_scopes > 0 => Err(ScopeError::UpgradeInScope),
            Access::Write | Access::ReadWrite => {
                self.waiting = Some(access);
                Ok(Acquire::Request(ToHome::WriteReq {
                    have: self.version,
                    need_data: true,
                }))
            }
        }
    }

    fn on_message(
        &mut self,
        msg: ToClient,
        data: Option<&[u8]>,
    ) -> Result<Reaction, ProtocolViolation> {
        if let ToClient::DiffAck { .. } = msg {
            if !self.acking {
                return Err(ProtocolViolation::StrayGrant);
            }
            self.acking = false;
            return Ok(Reaction::default());
        }
        let (version, with_data, exclusive) = match msg {
            ToClient::ReadGrant { version, with_data } => (version, with_data, false),
            ToClient::WriteGrant { version, with_data } => (version, with_data, true),
            other => return Err(ProtocolViolation::Foreign(other.name())),
        };
        let Some(access) = self.waiting.filter(|a| a.exclusive() == exclusive) else {
            return Err(ProtocolViolation::StrayGrant);
        };
        let take_data = check_grant_data(self.size, self.version, version, with_data, data)?;
        self.version = Some(version);
        self.waiting = None;
        if access == Access::Read {
            self.read_scopes += 1;
        } else {
            self.writing = true;
        }
        Ok(Reaction {
            reply: None,
            take_data,
        })
    }

    fn release(&mut self) -> Result<Option<ToHome>, ScopeError> {
        if self.writing {
            self.writing = false;
            // Our changes over an older version: no version the home holds.
            self.version = None;
            self.acking = true;
            return Ok(Some(ToHome::ReleaseDiff));
        }
        if self.read_scopes == 0 {
            return Err(ScopeError::NotAcquired);
        }
        self.read_scopes -= 1;
        Ok(None)
    }

    fn abort(&mut self) -> Result<Option<ToHome>, ScopeError> {
        if !self.writing {
            return self.release();
        }
        // The home does not know of write scopes: nothing to tell it. The
        // bytes are no version any more.
        self.writing = false;
        self.version = None;
        Ok(None)
    }

    fn join(&self) -> Join {
        Join::Local
    }

    fn snapshot(&self) -> Box<dyn ClientSide> {
        Box::new(self.clone())
    }

    fn evict(&mut self) -> bool {
        if self.in_scope() || self.waiting() {
            return false;
        }
        self.version = None;
        true
    }

    fn state(&self) -> State {
        if self.writing {
            State::Modified
        } else if self.version.is_some() {
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
        self.waiting.is_some() || self.acking
    }

    fn diffs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_holds_exactly_the_changed_runs_and_applies_back() {
        let twin = vec![0u8; 40];
        let mut now = twin.clone();
        now[3] = 1;
        now[4] = 2;
        now[20..30].fill(9);
        now[39] = 7;
        let d = diff(&twin, &now);
        assert_eq!(d.len(), 3 * RUN_HEADER + 2 + 10 + 1);
        check_diff(&d, 40).unwrap();
        let mut other = vec![5u8; 40];
        apply_diff(&mut other, &d);
        // Changed bytes come from the diff, the others stay another
        // writer's.
        assert_eq!(&other[3..5], &[1, 2]);
        assert_eq!(&other[20..30], &[9; 10]);
        assert_eq!(other[39], 7);
        assert!(other[..3].iter().chain(&other[5..20]).all(|&b| b == 5));
        assert!(diff(&twin, &twin).is_empty());
    }

    #[test]
    fn hostile_diffs_are_refused() {
        let run = |offset: u32, len: u32, bytes: usize| {
            let mut d = offset.to_le_bytes().to_vec();
            d.extend_from_slice(&len.to_le_bytes());
            d.extend(std::iter::repeat_n(1u8, bytes));
            d
        };
        assert!(check_diff(&run(0, 8, 8), 8).is_ok());
        assert!(check_diff(&run(1, 8, 8), 8).is_err(), "past the end");
        assert!(check_diff(&run(0, 0, 0), 8).is_err(), "empty run");
        assert!(check_diff(&run(0, 4, 3), 8).is_err(), "truncated");
        assert!(check_diff(&run(u32::MAX, 2, 2), 8).is_err(), "overflow");
        assert!(check_diff(&[1, 2, 3], 8).is_err(), "a partial header");
        let mut twice = run(4, 2, 2);
        twice.extend(run(0, 2, 2));
        assert!(check_diff(&twice, 8).is_err(), "out of order");
        let mut home = Home {
            last: LastRelease::new(8),
        };
        let mut out = Vec::new();
        assert!(home
            .on_message(1, ToHome::ReleaseDiff, Some(&run(6, 4, 4)), &mut out)
            .is_err());
        assert_eq!(home.version(), 0, "a refused diff makes no version");
        home.on_message(1, ToHome::ReleaseDiff, Some(&run(6, 2, 2)), &mut out)
            .unwrap();
        assert_eq!(
            (home.version(), &home.data()[..]),
            (1, &[0, 0, 0, 0, 0, 0, 1, 1][..])
        );
    }
}
