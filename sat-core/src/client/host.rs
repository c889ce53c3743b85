//! Scopes on chunks whose home keeps the version in a host slot.
//!
//! When every process of a run is on one host, each home keeps its chunks'
//! versions in slots of a segment its clients map (`server/host.rs`). The
//! slot is then the home, for this client: its readers-writer lock is the
//! scope discipline (many readers or one writer, a waiting writer keeping
//! new readers out), and its header holds the version. A request that would
//! go to the home as a message is served here instead:
//! - READ takes a read lock; READWRITE and WRITE take the write lock;
//! - the grant is made here, with the slot's version, and its bytes are
//!   copied straight from the slot into the chain when the client does not
//!   hold that version (one copy; nothing goes through a message queue);
//! - a RELEASE copies the scope's bytes into the slot as the next version
//!   and lets the lock go; then its subscribers are told: by the releaser
//!   itself, through their inboxes (`segment/inbox.rs`), when the home's
//!   record in the slot lists them all and none wants data; otherwise by
//!   the home, which is told (`Message::Published`, with the bytes only
//!   when a subscriber wants data);
//! - a read release or an abort lets the lock go and tells nobody.
//!
//! The client side of such a chunk is the home-only protocol's, whatever
//! protocol the chunk was allocated with: a scope always asks its home, and
//! here asking costs an atomic operation on the slot, not a round trip. The
//! protocol's handlers stay pure state machines: they see a grant exactly as
//! if the home had sent it.
//!
//! A lock that is taken is asked for again each time the client polls
//! (`ClientState::progress`), in the order the requests were made, so a
//! waiting scope needs no thread of its own and the simulator can run it
//! step by step.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::events::Queue;
use crate::chunk::ChunkId;
use crate::error::{SatError, SatResult};
use crate::protocol::{ToClient, ToHome};
use crate::segment::barrier::HostBarrier;
use crate::segment::{Reader, Segments, SlotPlace, SlotRef};
use crate::store::Store;
use crate::transport::{Payload, Rank, Transport, MAX_HEADER};
use crate::wire::{self, Message};

pub(super) struct HostPath {
    /// How this process holds read locks: counted in a run, under its own
    /// bit in a service (whose homes free a dead client's locks).
    reader: Reader,
    segments: Segments,
    /// Slots the homes named in their allocation answers, until the chunks
    /// join the store.
    named: HashMap<ChunkId, SlotPlace>,
    /// Requests waiting for their slot's lock, oldest first (at most one
    /// per chunk: a chunk's client side has one request at a time).
    waiting: VecDeque<(ChunkId, ToHome)>,
    /// Releases the home has not been told of yet, oldest first.
    unsent: VecDeque<Published>,
    /// `Published` messages sent and not answered yet.
    in_flight: u32,
}

impl Default for HostPath {
    fn default() -> HostPath {
        HostPath {
            reader: Reader::Counted,
            segments: Segments::default(),
            named: HashMap::new(),
            waiting: VecDeque::new(),
            unsent: VecDeque::new(),
            in_flight: 0,
        }
    }
}

/// A segment could not be mapped because the process that made it (a
/// server) is gone: not a misconfiguration but a lost peer, said as such (a
/// run then ends, or its recovery reports the loss).
fn owner_gone(what: &str, pid: u32) -> Option<SatError> {
    crate::os::process_gone(pid).then(|| {
        SatError::Aborted(format!(
            "{what} is unreachable: its process (pid {pid}) is gone, with the shared memory it \
             kept the versions in"
        ))
    })
}

impl HostPath {
    /// Read locks are taken as `reader` from now on (before any is taken).
    pub fn read_as(&mut self, reader: Reader) {
        self.reader = reader;
    }

    pub fn reader(&self) -> Reader {
        self.reader
    }

    /// The barrier in the slot at `place`.
    pub fn open_barrier(&mut self, id: u32, place: &SlotPlace) -> SatResult<HostBarrier> {
        self.segments
            .open(place)
            .map(HostBarrier::new)
            .map_err(|e| {
                owner_gone(&format!("barrier {id}: its coordinator"), place.pid).unwrap_or_else(
                    || {
                        SatError::Usage(format!(
                            "barrier {id}: its coordinator keeps it in a segment of process {} \
                             that this process cannot map ({e}); set SAT_HOST_SEGMENTS=off for \
                             the whole run",
                            place.pid
                        ))
                    },
                )
            })
    }

    /// A home said `chunk`'s version is in the slot at `place`.
    pub fn named(&mut self, chunk: ChunkId, place: SlotPlace) {
        self.named.insert(chunk, place);
    }

    /// The slot of `chunk`, if its home named one, mapped here. A slot that
    /// cannot be mapped is an error: the other processes of the run use it,
    /// so this one cannot fall back to messages.
    pub fn take_slot(&mut self, chunk: ChunkId) -> SatResult<Option<SlotRef>> {
        let Some(place) = self.named.remove(&chunk) else {
            return Ok(None);
        };
        self.segments.open(&place).map(Some).map_err(|e| {
            if let Some(gone) = owner_gone(&format!("chunk {chunk}: its home"), place.pid) {
                return gone;
            }
            SatError::Usage(format!(
                "chunk {chunk}: its home keeps it in a segment of process {} that this process \
                 cannot map ({e}); every process of a run or service on one host must run as \
                 the same user, or set SAT_HOST_SEGMENTS=off for the whole run (for a service: \
                 in the environment of `satrun --serve`)",
                place.pid
            ))
        })
    }

    /// Serves `req`, a request of `chunk`'s client side: the grant now when
    /// the lock is free, else once it is (see [`HostPath::retry`]).
    pub fn request(
        &mut self,
        store: &mut Store,
        events: &mut Queue,
        me: Rank,
        chunk: ChunkId,
        req: ToHome,
    ) {
        if !grant(store, events, (me, self.reader), chunk, req) {
            // Counted in the slot, so that the holder wakes this process
            // when it lets go.
            if let Some(slot) = store.get(chunk).and_then(|c| c.host.as_ref()) {
                slot.slot().lock_waiter(true);
            }
            self.waiting.push_back((chunk, req));
        }
    }

    /// Asks again for the locks of waiting requests; returns how many were
    /// granted.
    pub fn retry(&mut self, store: &mut Store, events: &mut Queue, me: Rank) -> usize {
        let before = self.waiting.len();
        if before == 0 {
            return 0;
        }
        let reader = self.reader;
        self.waiting.retain(|&(chunk, req)| {
            let granted = grant(store, events, (me, reader), chunk, req);
            if granted {
                if let Some(slot) = store.get(chunk).and_then(|c| c.host.as_ref()) {
                    slot.slot().lock_waiter(false);
                }
            }
            !granted
        });
        before - self.waiting.len()
    }
}

/// Takes the lock `req` asks for on `chunk`'s slot and gives the client
/// side its grant, with the slot's bytes when it lacks the version. Returns
/// false when the lock is taken. A scope that reads the slot's version
/// tells the subscriptions to the chunk of it first ([`Queue::read_at`]).
fn grant(
    store: &mut Store,
    events: &mut Queue,
    who: (Rank, Reader),
    chunk: ChunkId,
    req: ToHome,
) -> bool {
    let Some(slot) = store.take_slot(chunk) else {
        tracing::warn!("chunk {chunk}: a request for a host slot it does not have: dropped");
        return true;
    };
    let granted = grant_on(&slot, store, events, who, chunk, req);
    store.put_slot(chunk, slot);
    granted
}

/// [`grant`] on `slot`, the chunk's slot.
fn grant_on(
    slot: &SlotRef,
    store: &mut Store,
    events: &mut Queue,
    (me, reader): (Rank, Reader),
    chunk: ChunkId,
    req: ToHome,
) -> bool {
    let s = slot.slot();
    let (msg, with_data) = match req {
        ToHome::ReadReq { have } => {
            if !s.try_lock_read(reader) {
                return false;
            }
            let version = s.peek_version();
            let with_data = have != Some(version);
            (ToClient::ReadGrant { version, with_data }, with_data)
        }
        ToHome::WriteReq { have, need_data } => {
            if !s.try_lock_write(me) {
                return false;
            }
            let version = s.peek_version();
            let with_data = need_data && have != Some(version);
            (ToClient::WriteGrant { version, with_data }, with_data)
        }
        other => {
            tracing::warn!("chunk {chunk}: {other:?} is not a request: dropped");
            return true;
        }
    };
    let reads = match msg {
        ToClient::ReadGrant { version, .. } => Some(version),
        ToClient::WriteGrant { version, .. }
            if matches!(
                req,
                ToHome::WriteReq {
                    need_data: true,
                    ..
                }
            ) =>
        {
            Some(version)
        }
        _ => None,
    };
    if let Some(version) = reads {
        // SAFETY: this process holds the lock just taken.
        events.read_at(chunk, version, || Arc::from(unsafe { s.held_bytes() }));
    }
    // SAFETY: this process holds the lock just taken; the bytes are used
    // before anything could let it go.
    let data = with_data.then(|| unsafe { s.held_bytes() });
    let c = store.get_mut(chunk).expect("checked above");
    match c.side.on_message(msg, data) {
        Ok(reaction) => {
            c.grants += 1;
            tracing::debug!(
                "[host slot] chunk {chunk}: {msg:?}, local state {:?}",
                c.side.state()
            );
            if let (true, Some(bytes)) = (reaction.take_data, data) {
                store.take_data(chunk, bytes);
            }
        }
        Err(e) => {
            // The client side refused its own grant: a bug, never a
            // reason to keep the lock.
            tracing::warn!("chunk {chunk}: host slot grant refused: {e}");
            // SAFETY: taken above by this call.
            unsafe { unlock(&s, req, reader) };
        }
    }
    true
}

/// Lets go of the lock a request of kind `req` took.
///
/// # Safety
/// This process holds that lock.
unsafe fn unlock(s: &crate::segment::Slot<'_>, req: ToHome, reader: Reader) {
    match req {
        // SAFETY: the caller's promise.
        ToHome::ReadReq { .. } | ToHome::ReadRelease => unsafe { s.unlock_read(reader) },
        // SAFETY: the caller's promise.
        _ => unsafe { s.unlock_write() },
    }
}

/// Ends a scope on `chunk`'s slot: `op` is what the client side would send
/// its home, `bytes` the scope's bytes after a write, which are copied into
/// the slot. Returns the version published, if the scope published one.
pub(super) fn end_scope(
    slot: &SlotRef,
    (chunk, reader): (ChunkId, Reader),
    op: ToHome,
    bytes: Option<&[u8]>,
) -> SatResult<Option<u64>> {
    let s = slot.slot();
    match op {
        ToHome::Release { version } => {
            let bytes = bytes.unwrap_or(&[]);
            // SAFETY: the client side releases only a write scope it was
            // granted, so this process holds the write lock.
            let published = unsafe { s.publish_held(bytes) };
            // SAFETY: as above; the publication is done.
            unsafe { s.unlock_write() };
            match published {
                Ok(v) if v == version => Ok(Some(v)),
                Ok(v) => {
                    tracing::warn!(
                        "chunk {chunk}: released as version {version}, published as {v} in its \
                         host slot"
                    );
                    Ok(Some(v))
                }
                Err(size) => Err(SatError::Usage(format!(
                    "chunk {chunk}: a release of {} bytes into a slot of {size}",
                    bytes.len()
                ))),
            }
        }
        // SAFETY: the client side ends only scopes it was granted.
        ToHome::ReadRelease => unsafe {
            s.unlock_read(reader);
            Ok(None)
        },
        // SAFETY: as above, for a write scope.
        ToHome::Abort => unsafe {
            s.unlock_write();
            Ok(None)
        },
        other => {
            tracing::warn!("chunk {chunk}: {other:?} does not end a scope: ignored");
            Ok(None)
        }
    }
}

/// A release into a host slot that the home must hear of (its chunk has
/// subscribers); the bytes when one of them wants data.
pub(super) struct Published {
    pub chunk: ChunkId,
    pub version: u64,
    pub bytes: Option<Vec<u8>>,
    /// The releases it tells of: those of one chunk that wait to be told
    /// merge into one message, naming the newest (subscribers' events merge
    /// the same way).
    pub releases: u32,
}

/// `Published` messages a client may have unanswered: a burst of releases
/// (a writer needs no message to release on one host) must not flood its
/// server's receive queue, which stalls the shm provider.
const PUBLISHED_WINDOW: u32 = 32;

impl HostPath {
    /// Tells the home of `p`, now if nothing told earlier is still waiting
    /// and the transport takes it, else when the client next polls.
    pub fn tell_home(
        &mut self,
        transport: &mut dyn Transport,
        header: &mut [u8; MAX_HEADER],
        to: (Rank, Rank),
        p: Published,
    ) {
        match self.unsent.iter_mut().find(|q| q.chunk == p.chunk) {
            Some(q) => {
                q.version = p.version;
                q.bytes = p.bytes;
                q.releases += p.releases;
            }
            None => self.unsent.push_back(p),
        }
        self.tell_home_again(transport, header, to);
    }

    /// The home answered `n` of our `Published`.
    pub fn acknowledged(&mut self, n: u32) {
        self.in_flight = self.in_flight.saturating_sub(n);
    }

    /// Sends what the home has not been told yet, in order, until the
    /// transport refuses one.
    pub fn tell_home_again(
        &mut self,
        transport: &mut dyn Transport,
        header: &mut [u8; MAX_HEADER],
        (me, server): (Rank, Rank),
    ) {
        while let Some(p) = self.unsent.front() {
            if self.in_flight >= PUBLISHED_WINDOW {
                return;
            }
            let msg = Message::Published {
                chunk: p.chunk,
                client: me,
                version: p.version,
                releases: p.releases,
            };
            let n = wire::encode(&msg, header).expect("fits");
            let payload = p.bytes.as_deref().map_or(Payload::None, Payload::Copy);
            match transport.send(server, &header[..n], payload) {
                Ok(()) => {
                    self.unsent.pop_front();
                    self.in_flight += 1;
                }
                Err(e) => {
                    tracing::debug!(
                        "chunk {}: the home will hear of version {} later: {e}",
                        p.chunk,
                        p.version
                    );
                    return;
                }
            }
        }
    }

    /// Whether the home has been told of every release made here (and
    /// has taken it in).
    pub fn told_everything(&self) -> bool {
        self.unsent.is_empty() && self.in_flight == 0
    }
}
