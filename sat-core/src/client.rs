//! The client side of a run, as user code sees it.
//!
//! A [`Client`] is handed to every role function. Clients talk only to their
//! own server (the super-peer topology of Figure 2); servers carry everything
//! further. Waiting inside a call drives the process's progress engine, so a
//! client never needs a thread of its own to make progress.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{SatError, SatResult};
use crate::progress::{Idle, IdlePolicy};
use crate::protocol::mesi::{self, Acquire, Cache};
use crate::protocol::Access;
use crate::topology::Topology;
use crate::transport::{Payload, Rank, Received, Sender, Transport, MAX_HEADER};
use crate::wire::{self, AllocOutcome, CoherenceOp, Message};

fn unknown(chunk: u64) -> SatError {
    SatError::Usage(format!(
        "chunk {chunk} is unknown to this process: MALLOC or LOOKUP it first"
    ))
}

/// A point-to-point message from another client, relayed by the servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMessage {
    pub from: Rank,
    pub tag: u32,
    pub data: Vec<u8>,
}

/// The client runtime of one process: its place in the topology and its
/// endpoint. Safe to share between threads (calls are serialized inside).
pub struct Client {
    rank: Rank,
    server: Rank,
    role: u32,
    topology: Arc<Topology>,
    policy: IdlePolicy,
    state: Mutex<ClientState>,
}

struct ClientState {
    transport: Box<dyn Transport>,
    mail: Mailbox,
    /// This process's copies of the chunks it allocated or looked up.
    caches: HashMap<u64, Cache>,
    /// The threads inside a scope (or waiting for one) of each chunk: a
    /// thread waits for another's scope, and is told of its own misuse.
    holders: HashMap<u64, Vec<std::thread::ThreadId>>,
    header: [u8; MAX_HEADER],
}

impl Client {
    pub(crate) fn new(topology: Arc<Topology>, transport: Box<dyn Transport>) -> Client {
        let rank = transport.rank();
        Client {
            rank,
            server: topology.server_of(rank),
            role: topology.role(rank),
            topology,
            policy: IdlePolicy::from_env(),
            state: Mutex::new(ClientState {
                transport,
                mail: Mailbox::default(),
                caches: HashMap::new(),
                holders: HashMap::new(),
                header: [0; MAX_HEADER],
            }),
        }
    }

    /// This process's rank in the run.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// The number of processes in the run, servers included.
    pub fn size(&self) -> u32 {
        self.topology.len()
    }

    /// The role this process plays (1 and above; 0 is the server role).
    pub fn role(&self) -> u32 {
        self.role
    }

    /// The server this client is attached to.
    pub fn server(&self) -> Rank {
        self.server
    }

    /// The number of clients in the run (the report's `clientGetClientNr`).
    pub fn client_count(&self) -> u32 {
        self.topology.clients().len() as u32
    }

    /// The number of servers in the run.
    pub fn server_count(&self) -> u32 {
        self.topology.servers().len() as u32
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Progress while no call drives the endpoint: answers invalidations
    /// and takes in messages while user code computes between SAT calls.
    /// Runs until `stop` is set; a call in progress (holding the lock) is
    /// never waited for: this loop only takes the lock when it is free.
    pub(crate) fn background_progress(&self, stop: &std::sync::atomic::AtomicBool) {
        let mut idle = Idle::new(IdlePolicy {
            busy: false,
            ..self.policy
        });
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            let got = match self.state.try_lock() {
                Ok(mut st) => st.progress(self.rank, self.server).unwrap_or_else(|e| {
                    tracing::warn!("background progress: {e}");
                    0
                }),
                Err(_) => 0,
            };
            if got > 0 {
                idle.traffic();
            } else {
                idle.idle();
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, ClientState> {
        // A panic in another thread's call leaves nothing half-updated that a
        // later call could trip on: every update is a single push or flag.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `data` to client `to`, tagged `tag`, through the servers. It
    /// arrives after every earlier message from this client to `to`.
    pub fn send(&self, to: Rank, tag: u32, data: &[u8]) -> SatResult<()> {
        if to >= self.size() {
            return Err(SatError::Usage(format!(
                "send to rank {to}: the run has ranks 0 to {}",
                self.size() - 1
            )));
        }
        if self.topology.is_server(to) {
            return Err(SatError::Usage(format!(
                "send to rank {to}: it is a server; user messages go to clients"
            )));
        }
        let mut st = self.lock();
        let st = &mut *st;
        let n = wire::encode(
            &Message::Relay {
                from: self.rank,
                to,
                tag,
            },
            &mut st.header,
        )
        .map_err(|e| SatError::Usage(e.to_string()))?;
        st.transport
            .send(self.server, &st.header[..n], Payload::Copy(data))?;
        tracing::trace!(
            "relay to {to} tag {tag} ({} bytes) via server {}",
            data.len(),
            self.server
        );
        Ok(())
    }

    /// Waits for the next message sent to this client.
    pub fn recv(&self) -> SatResult<UserMessage> {
        self.wait(None, |st| st.mail.inbox.pop_front())?
            .ok_or_else(|| SatError::Timeout("no deadline was given".into()))
    }

    /// Waits at most `timeout` for the next message.
    pub fn recv_timeout(&self, timeout: Duration) -> SatResult<Option<UserMessage>> {
        self.wait(Some(Instant::now() + timeout), |st| {
            st.mail.inbox.pop_front()
        })
    }

    /// The next message if one has arrived, without waiting.
    pub fn try_recv(&self) -> SatResult<Option<UserMessage>> {
        let mut st = self.lock();
        st.progress(self.rank, self.server)?;
        Ok(st.mail.inbox.pop_front())
    }

    /// MALLOC: allocates `chunk` with `size` bytes in the S-DSM, or joins it
    /// when it already exists with that size. Another size is an error.
    pub fn malloc(&self, chunk: u64, size: usize) -> SatResult<()> {
        if size == 0 {
            return Err(crate::chunk::ChunkError::ZeroSize.into());
        }
        if size > crate::chunk::MAX_CHUNK_SIZE {
            return Err(crate::chunk::ChunkError::TooLarge { size }.into());
        }
        let msg = Message::Malloc {
            chunk,
            size: size as u64,
            client: self.rank,
        };
        match self.allocation(chunk, &msg, None)? {
            AllocOutcome::Size(_) => {
                self.lock().caches.entry(chunk).or_insert_with(|| Cache::new(size));
                Ok(())
            }
            AllocOutcome::SizeMismatch { existing } => Err(SatError::Usage(format!(
                "MALLOC of chunk {chunk} with {size} bytes: it already exists with {existing} bytes; \
                 allocate it with the same size, or LOOKUP it"
            ))),
            AllocOutcome::NotAllocated => Err(SatError::Usage(format!(
                "MALLOC of chunk {chunk}: the home answered as to a LOOKUP"
            ))),
        }
    }

    /// LOOKUP: the size of `chunk`, once any process has allocated it. It
    /// waits at most `timeout` for that (see [`crate::directory`] for why),
    /// then fails with [`SatError::Timeout`].
    pub fn lookup(&self, chunk: u64, timeout: Duration) -> SatResult<usize> {
        let wait_ms = timeout.as_millis().min(u32::MAX as u128) as u32;
        let msg = Message::Lookup {
            chunk,
            client: self.rank,
            wait_ms,
        };
        // The home answers within `timeout`; allow for the way back.
        let bound = timeout + Duration::from_secs(30);
        match self.allocation(chunk, &msg, Some(bound))? {
            AllocOutcome::Size(size) => {
                self.lock()
                    .caches
                    .entry(chunk)
                    .or_insert_with(|| Cache::new(size as usize));
                Ok(size as usize)
            }
            AllocOutcome::NotAllocated => Err(SatError::Timeout(format!(
                "LOOKUP of chunk {chunk}: no process allocated it within {timeout:?}"
            ))),
            AllocOutcome::SizeMismatch { .. } => Err(SatError::Usage(format!(
                "LOOKUP of chunk {chunk}: the home answered as to a MALLOC"
            ))),
        }
    }

    /// READ, WRITE or READWRITE: opens a scope on `chunk` (allocated or
    /// looked up by this process), waiting for the home when the local copy
    /// does not allow it. Close it with [`Client::release`].
    pub fn acquire(&self, chunk: u64, access: Access) -> SatResult<()> {
        let me = std::thread::current().id();
        loop {
            let mut guard = self.lock();
            let st = &mut *guard;
            let cache = st.caches.get_mut(&chunk).ok_or_else(|| unknown(chunk))?;
            let holders = st.holders.entry(chunk).or_default();
            // Another thread's scope (or request) on this chunk: wait for it
            // to end, as a lock would. This thread's own is misuse, reported.
            let busy =
                cache.writing() || cache.waiting() || (access.exclusive() && cache.in_scope());
            if busy && !holders.is_empty() && !holders.contains(&me) {
                drop(guard);
                self.wait(None, |st| {
                    let c = st.caches.get(&chunk)?;
                    let busy = c.writing() || c.waiting() || (access.exclusive() && c.in_scope());
                    (!busy).then_some(())
                })?;
                continue;
            }
            let step = cache
                .acquire(access)
                .map_err(|e| SatError::Usage(format!("chunk {chunk}: {e}")))?;
            holders.push(me);
            let req = match step {
                Acquire::Hit => return Ok(()),
                Acquire::Request(req) => req,
            };
            tracing::debug!(
                "[Home-Based MESI] {access:?} chunk {chunk} local state {:?}",
                cache.state()
            );
            let msg = Message::Coherence {
                chunk,
                client: self.rank,
                op: req.into(),
            };
            let n = wire::encode(&msg, &mut st.header).expect("fits");
            st.transport
                .send(self.server, &st.header[..n], Payload::None)?;
            break;
        }
        self.wait(None, |st| {
            st.caches.get(&chunk).filter(|c| !c.waiting()).map(|_| ())
        })?;
        Ok(())
    }

    /// RELEASE: closes the scope on `chunk`; after a write, the new version
    /// goes home (one message); after a read, local changes are dropped.
    pub fn release(&self, chunk: u64) -> SatResult<()> {
        let mut st = self.lock();
        let st = &mut *st;
        let cache = st.caches.get_mut(&chunk).ok_or_else(|| unknown(chunk))?;
        let sent = cache
            .release()
            .map_err(|e| SatError::Usage(format!("chunk {chunk}: {e}")))?;
        if let Some(holders) = st.holders.get_mut(&chunk) {
            let me = std::thread::current().id();
            let i = holders.iter().position(|&t| t == me).unwrap_or(0);
            if i < holders.len() {
                holders.swap_remove(i);
            }
        }
        if let Some((op, data)) = sent {
            let to = (self.rank, self.server);
            send_to_home(st.transport.as_mut(), &mut st.header, to, chunk, op, data)?;
        }
        Ok(())
    }

    /// PUT: WRITE, copy `data` into `chunk`, RELEASE (Figure 6).
    pub fn put(&self, chunk: u64, data: &[u8]) -> SatResult<()> {
        self.check_size(chunk, data.len(), "PUT")?;
        self.acquire(chunk, Access::Write)?;
        self.with_data_mut(chunk, |d| d.copy_from_slice(data))?;
        self.release(chunk)
    }

    /// GET: READ, copy `chunk` into `data`, RELEASE (Figure 6).
    pub fn get(&self, chunk: u64, data: &mut [u8]) -> SatResult<()> {
        self.check_size(chunk, data.len(), "GET")?;
        self.acquire(chunk, Access::Read)?;
        self.with_data(chunk, |d| data.copy_from_slice(d))?;
        self.release(chunk)
    }

    fn check_size(&self, chunk: u64, len: usize, call: &str) -> SatResult<()> {
        let st = self.lock();
        let size = st
            .caches
            .get(&chunk)
            .ok_or_else(|| unknown(chunk))?
            .data()
            .len();
        if size != len {
            return Err(SatError::Usage(format!(
                "{call} of chunk {chunk} with a buffer of {len} bytes: the chunk has {size}"
            )));
        }
        Ok(())
    }

    /// The messages this process has sent so far (its own requests and
    /// acknowledgements; the servers' answers are not counted here).
    pub fn messages_sent(&self) -> u64 {
        self.lock().transport.messages_sent()
    }

    /// Runs `f` on the data of `chunk`, inside an open scope.
    pub fn with_data<R>(&self, chunk: u64, f: impl FnOnce(&[u8]) -> R) -> SatResult<R> {
        let st = self.lock();
        let cache = st.caches.get(&chunk).ok_or_else(|| unknown(chunk))?;
        if !cache.in_scope() {
            return Err(SatError::Usage(format!(
                "chunk {chunk} is read outside a scope: call READ, WRITE or READWRITE first"
            )));
        }
        Ok(f(cache.data()))
    }

    /// Runs `f` on the data of `chunk`, inside an open write scope.
    pub fn with_data_mut<R>(&self, chunk: u64, f: impl FnOnce(&mut [u8]) -> R) -> SatResult<R> {
        let mut st = self.lock();
        let cache = st.caches.get_mut(&chunk).ok_or_else(|| unknown(chunk))?;
        if !cache.writing() {
            return Err(SatError::Usage(format!(
                "chunk {chunk} is written outside a write scope: call WRITE or READWRITE first"
            )));
        }
        Ok(f(cache.data_mut()))
    }

    /// Sends an allocation request and waits for the home's answer.
    fn allocation(
        &self,
        chunk: u64,
        msg: &Message,
        bound: Option<Duration>,
    ) -> SatResult<AllocOutcome> {
        {
            let mut st = self.lock();
            let st = &mut *st;
            let n =
                wire::encode(msg, &mut st.header).map_err(|e| SatError::Usage(e.to_string()))?;
            st.transport
                .send(self.server, &st.header[..n], Payload::None)?;
        }
        let deadline = bound.map(|b| Instant::now() + b);
        let got = self.wait(deadline, |st| {
            st.mail.alloc.get_mut(&chunk).and_then(VecDeque::pop_front)
        })?;
        got.ok_or_else(|| SatError::Timeout(format!("the home of chunk {chunk} did not answer")))
    }

    /// Tells the server this client's role has returned and waits for its
    /// acknowledgement, so no message of ours is in flight when we close.
    pub(crate) fn finish(&self, timeout: Duration) -> SatResult<()> {
        {
            let mut st = self.lock();
            let st = &mut *st;
            // A scope left open would block every other process forever.
            for (&chunk, cache) in st.caches.iter_mut() {
                if cache.in_scope() {
                    tracing::warn!(
                        "chunk {chunk} was still acquired when the role returned: released"
                    );
                }
                while cache.in_scope() {
                    if let Ok(Some((op, data))) = cache.release() {
                        let to = (self.rank, self.server);
                        send_to_home(st.transport.as_mut(), &mut st.header, to, chunk, op, data)?;
                    }
                }
            }
            let n = wire::encode(&Message::ClientDone, &mut st.header).expect("fits");
            st.transport
                .send(self.server, &st.header[..n], Payload::None)?;
        }
        let acked = self.wait(Some(Instant::now() + timeout), |st| {
            st.mail.done_acked.then_some(())
        })?;
        if acked.is_none() {
            return Err(SatError::Timeout(format!(
                "server {} did not acknowledge the end of this client within {timeout:?}",
                self.server
            )));
        }
        self.wait(Some(Instant::now() + timeout), |st| {
            st.transport.sends_drained().ok().filter(|d| *d).map(|_| ())
        })?;
        tracing::debug!("client {} terminated", self.rank);
        Ok(())
    }

    /// Drives progress until `ready` yields a value or the deadline passes.
    /// The lock is released between polls so other threads can make calls.
    fn wait<T>(
        &self,
        deadline: Option<Instant>,
        mut ready: impl FnMut(&mut ClientState) -> Option<T>,
    ) -> SatResult<Option<T>> {
        let mut idle = Idle::new(self.policy);
        loop {
            {
                let mut st = self.lock();
                let got = st.progress(self.rank, self.server)?;
                if let Some(v) = ready(&mut st) {
                    return Ok(Some(v));
                }
                if got > 0 {
                    idle.traffic();
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            idle.idle();
        }
    }
}

/// What has arrived for this client and not been taken yet.
#[derive(Default)]
struct Mailbox {
    inbox: VecDeque<UserMessage>,
    done_acked: bool,
    /// Answers to MALLOC and LOOKUP, by chunk, in arrival order.
    alloc: HashMap<u64, VecDeque<AllocOutcome>>,
}

impl ClientState {
    fn progress(&mut self, me: Rank, server: Rank) -> SatResult<usize> {
        let mail = &mut self.mail;
        let caches = &mut self.caches;
        let n = self
            .transport
            .poll(&mut |out: &mut dyn Sender, m: Received<'_>| {
                if let Ok(Message::Coherence { chunk, client, op }) = wire::decode(m.header) {
                    if m.src == server && client == me {
                        coherence(me, server, caches, out, chunk, op, m.payload);
                        return;
                    }
                }
                handle(me, server, mail, m)
            })?;
        Ok(n)
    }
}

/// Sends a coherence message about `chunk` from client `to.0` through its
/// server `to.1` to the chunk's home, with the chunk data after a write.
fn send_to_home(
    transport: &mut dyn Transport,
    header: &mut [u8; MAX_HEADER],
    to: (Rank, Rank),
    chunk: u64,
    op: mesi::ToHome,
    data: Option<&[u8]>,
) -> SatResult<()> {
    let msg = Message::Coherence {
        chunk,
        client: to.0,
        op: op.into(),
    };
    let n = wire::encode(&msg, header).expect("coherence headers fit");
    let payload = data.map_or(Payload::None, Payload::Copy);
    transport.send(to.1, &header[..n], payload)?;
    Ok(())
}

/// A coherence message from the home about one of our chunks.
fn coherence(
    me: Rank,
    server: Rank,
    caches: &mut HashMap<u64, Cache>,
    out: &mut dyn Sender,
    chunk: u64,
    op: CoherenceOp,
    payload: &[u8],
) {
    let (Some(cache), Some(msg)) = (caches.get_mut(&chunk), mesi::to_client(op)) else {
        tracing::warn!("dropped a coherence message for chunk {chunk}, unknown here");
        return;
    };
    let data = (!payload.is_empty()).then_some(payload);
    match cache.on_message(msg, data) {
        Ok(Some(reply)) => {
            let mut header = [0u8; MAX_HEADER];
            let answer = Message::Coherence {
                chunk,
                client: me,
                op: reply.into(),
            };
            let n = wire::encode(&answer, &mut header).expect("fits");
            if let Err(e) = out.send(server, &header[..n], Payload::None) {
                tracing::warn!("chunk {chunk}: could not answer the home: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("chunk {chunk}: {e}; message dropped"),
    }
}

fn handle(me: Rank, server: Rank, mail: &mut Mailbox, m: Received<'_>) {
    if m.src != server {
        tracing::warn!(
            "dropped a message from rank {}: clients only hear from their server {server}",
            m.src
        );
        return;
    }
    match wire::decode(m.header) {
        Ok(Message::Relay { from, tag, .. }) => mail.inbox.push_back(UserMessage {
            from,
            tag,
            data: m.payload.to_vec(),
        }),
        Ok(Message::ClientDoneAck) => mail.done_acked = true,
        Ok(Message::AllocReply {
            chunk,
            client,
            outcome,
        }) if client == me => mail.alloc.entry(chunk).or_default().push_back(outcome),
        Ok(other) => tracing::warn!("dropped unexpected {} from server {server}", other.kind()),
        Err(e) => tracing::warn!("dropped a malformed message from server {server}: {e}"),
    }
}
