//! Both protocols through their traits, on several chunks, homes and clients
//! at once, under every message ordering a seeded scheduler produces.
//!
//! The real transport guarantees per-pair FIFO order and nothing more, so
//! here each (client, home server) pair has one queue per direction, shared
//! by every chunk of that home (home = chunk id mod number of homes), and at
//! each step the scheduler picks at random which non-empty queue delivers its
//! head or which client acts. Each chunk draws its protocol at random, so
//! MESI and home-only chunks share the same queues in one run, as they share
//! a server in a real one.
//!
//! The protocol sides never hold bytes: the simulated clients keep them (the
//! client's local store), copy a message's bytes when a [`Reaction`] says
//! so, and send their own bytes with a release. The simulation keeps the
//! newest released version and bytes of every chunk, which is what every
//! scope must see when it opens.
//!
//! A failing seed prints its trace and replays alone with
//! `SAT_PROTOCOL_SEED=<seed> cargo test -p sat-core --lib protocol::tests -- --nocapture`.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::{
    Access, Acquire, ClientSide, HomeSide, ProtocolId, ProtocolViolation, Reaction, ScopeError,
    State, ToClient, ToHome, Version,
};
use crate::transport::Rank;

/// A tiny deterministic generator (splitmix64), so a failing seed replays on
/// every machine and build.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

/// What an evicted copy is overwritten with: a grant that wrongly reuses the
/// local bytes instead of sending fresh ones then reads garbage, which no
/// release ever wrote (counters stay small).
const GARBAGE: u8 = 0xEE;

/// Client `c` has rank `FIRST_CLIENT + c`, far from the home servers' ranks,
/// so a grant addressed to a wrong rank cannot land on a client by accident.
const FIRST_CLIENT: Rank = 100;

/// The 8-byte counter at the start of every chunk.
fn value(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// The bytes after the counter in version `version` written by client `c`:
/// they differ from version to version, so a stale copy whose counter happens
/// to match is still caught.
fn tail_byte(version: Version, c: usize, i: usize) -> u8 {
    (version as u8)
        .wrapping_mul(31)
        .wrapping_add(c as u8 * 7)
        .wrapping_add(i as u8)
}

/// One step of a run, kept to print the story of a failing seed (its fields
/// are read only through `Debug`).
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
enum Event {
    Acquire {
        client: usize,
        chunk: usize,
        access: Access,
        hit: bool,
    },
    Release {
        client: usize,
        chunk: usize,
        sent: Option<ToHome>,
    },
    Evict {
        client: usize,
        chunk: usize,
        dropped: bool,
    },
    AtHome {
        from: usize,
        chunk: usize,
        msg: ToHome,
    },
    AtClient {
        to: usize,
        chunk: usize,
        msg: ToClient,
        took_data: bool,
    },
}

/// A message in flight on one pair, tagged with its chunk (the wire carries
/// the chunk id in the header), with the bytes that travel with it.
struct Msg<M> {
    chunk: usize,
    msg: M,
    data: Option<Arc<[u8]>>,
}

/// One chunk: its home side, and what the simulation knows about it.
struct Chunk {
    protocol: ProtocolId,
    home: Box<dyn HomeSide>,
    /// The newest version any client has released (sent home), and its
    /// bytes: what a scope that opens now must see.
    newest: Version,
    newest_bytes: Vec<u8>,
    /// Write scopes (WRITE and READWRITE) released on this chunk.
    writes: u64,
    /// READWRITE scopes released on this chunk: each added one to the counter.
    increments: u64,
    /// The home's version when last looked at (it may only grow).
    home_version: Version,
    /// A diffing protocol ([`super::hlrc`]): writers share the chunk, each
    /// writing its own 8-byte lane (client `c` at byte `8c`) with the
    /// number of its write scopes; `released[c]` counts those sent home.
    lanes: bool,
    released: Vec<u64>,
    /// Messages sent about this chunk, both ways.
    sent: u64,
    /// The requests the home has received and not granted yet, in arrival
    /// order: (client, exclusive). Both protocols grant in arrival order
    /// (FIFO: a writer is never overtaken by later readers, so it cannot
    /// starve), and the grants must follow this order.
    arrived: VecDeque<(usize, bool)>,
}

/// One client process, single-threaded: it blocks on at most one acquire.
struct Client {
    sides: Vec<Box<dyn ClientSide>>,
    /// The bytes this client holds per chunk (its local store).
    bytes: Vec<Vec<u8>>,
    /// The scope it has open on each chunk (at most one per chunk).
    open: Vec<Option<Access>>,
    /// The acquire it is blocked on, if any.
    waiting: Option<(usize, Access)>,
    /// The chunk whose release waits for the home's acknowledgement (a
    /// diff), blocking the client as an acquire does.
    acking: Option<usize>,
    /// Per chunk: the twin of an open write scope of a diffing protocol.
    twins: Vec<Option<Vec<u8>>>,
    /// Per chunk: each lane as the home held it when this client last
    /// asked, which the scope's grant must not be older than.
    floors: Vec<Vec<u64>>,
}

struct Sim {
    homes: usize,
    chunks: Vec<Chunk>,
    clients: Vec<Client>,
    /// `up[c][h]`: client `c` to home server `h`, in send order.
    up: Vec<Vec<VecDeque<Msg<ToHome>>>>,
    /// `down[c][h]`: home server `h` to client `c`, in send order.
    down: Vec<Vec<VecDeque<Msg<ToClient>>>>,
    messages: u64,
    trace: Vec<Event>,
}

impl Sim {
    /// `homes` home servers, `clients` clients, and one chunk per entry of
    /// `chunks` (its protocol and size, at least 8 bytes for the counter).
    fn new(homes: usize, clients: usize, chunks: &[(ProtocolId, usize)]) -> Sim {
        Sim {
            homes,
            chunks: chunks
                .iter()
                .map(|&(protocol, size)| {
                    assert!(size >= 8);
                    Chunk {
                        protocol,
                        home: protocol.consistency().new_home(size),
                        newest: 0,
                        newest_bytes: vec![0; size],
                        writes: 0,
                        increments: 0,
                        home_version: 0,
                        lanes: protocol.diffs(),
                        released: vec![0; clients],
                        sent: 0,
                        arrived: VecDeque::new(),
                    }
                })
                .collect(),
            clients: (0..clients)
                .map(|_| Client {
                    sides: chunks
                        .iter()
                        .map(|&(p, size)| p.consistency().new_client(size))
                        .collect(),
                    // A client that never held a chunk holds no valid bytes.
                    bytes: chunks
                        .iter()
                        .map(|&(_, size)| vec![GARBAGE; size])
                        .collect(),
                    open: vec![None; chunks.len()],
                    waiting: None,
                    acking: None,
                    twins: vec![None; chunks.len()],
                    floors: vec![vec![0; clients]; chunks.len()],
                })
                .collect(),
            up: (0..clients)
                .map(|_| (0..homes).map(|_| VecDeque::new()).collect())
                .collect(),
            down: (0..clients)
                .map(|_| (0..homes).map(|_| VecDeque::new()).collect())
                .collect(),
            messages: 0,
            trace: Vec::new(),
        }
    }

    fn home_of(&self, chunk: usize) -> usize {
        chunk % self.homes
    }

    fn rank(c: usize) -> Rank {
        FIRST_CLIENT + c as Rank
    }

    fn send_up(&mut self, c: usize, chunk: usize, msg: ToHome, data: Option<Arc<[u8]>>) {
        let h = self.home_of(chunk);
        self.up[c][h].push_back(Msg { chunk, msg, data });
        self.messages += 1;
        self.chunks[chunk].sent += 1;
    }

    /// Client `c` opens a scope on `chunk`, or sends its request and blocks.
    /// Returns whether it was a hit.
    fn acquire(&mut self, c: usize, chunk: usize, access: Access) -> bool {
        assert!(
            self.clients[c].waiting.is_none()
                && self.clients[c].acking.is_none()
                && self.clients[c].open[chunk].is_none()
        );
        let step = self.clients[c].sides[chunk]
            .acquire(access)
            .unwrap_or_else(|e| panic!("client {c}: a legal {access:?} of chunk {chunk}: {e}"));
        let hit = step == Acquire::Hit;
        self.trace.push(Event::Acquire {
            client: c,
            chunk,
            access,
            hit,
        });
        match step {
            Acquire::Hit => {
                self.clients[c].open[chunk] = Some(access);
                self.scope_opened(c, chunk, access);
            }
            Acquire::Request(req) => {
                self.clients[c].waiting = Some((chunk, access));
                if self.chunks[chunk].lanes {
                    self.clients[c].floors[chunk] = self.home_lanes(chunk);
                }
                self.send_up(c, chunk, req, None);
            }
        }
        hit
    }

    /// Client `c` closes its scope on `chunk`. A write scope writes the
    /// counter first: READWRITE adds one to the value it read; WRITE (whose
    /// data may be stale) writes the value the simulation knows is current,
    /// so it changes the version but not the count, and the final counter
    /// still equals the number of READWRITE scopes. Both rewrite the rest of
    /// the chunk, so every version has its own bytes.
    fn release(&mut self, c: usize, chunk: usize) {
        let access = self.clients[c].open[chunk]
            .take()
            .expect("releases an open scope");
        if self.chunks[chunk].lanes {
            return self.release_lane(c, chunk, access);
        }
        let ch = &self.chunks[chunk];
        let next = ch.newest + 1;
        if access.exclusive() {
            let counter = match access {
                Access::ReadWrite => value(&self.clients[c].bytes[chunk]) + 1,
                _ => value(&ch.newest_bytes),
            };
            let bytes = &mut self.clients[c].bytes[chunk];
            bytes[..8].copy_from_slice(&counter.to_le_bytes());
            for (i, b) in bytes.iter_mut().enumerate().skip(8) {
                *b = tail_byte(next, c, i);
            }
        }
        let sent = self.clients[c].sides[chunk]
            .release()
            .unwrap_or_else(|e| panic!("client {c}: a legal release of chunk {chunk}: {e}"));
        self.trace.push(Event::Release {
            client: c,
            chunk,
            sent,
        });
        match sent {
            Some(msg @ (ToHome::Release { version } | ToHome::ReleaseYield { version })) => {
                assert!(
                    access.exclusive(),
                    "client {c}: a read scope of chunk {chunk} sent a new version"
                );
                // Versions only grow, one per write scope.
                assert_eq!(
                    version,
                    next,
                    "client {c}: release of version {version} of chunk {chunk} after version {}",
                    next - 1
                );
                let bytes = self.clients[c].bytes[chunk].clone();
                let ch = &mut self.chunks[chunk];
                ch.newest = version;
                ch.writes += 1;
                if access == Access::ReadWrite {
                    ch.increments += 1;
                }
                let data: Arc<[u8]> = bytes.as_slice().into();
                ch.newest_bytes = bytes;
                self.send_up(c, chunk, msg, Some(data));
            }
            Some(msg) => {
                assert!(
                    !access.exclusive(),
                    "client {c}: a write scope of chunk {chunk} ended with {msg:?}, not its data"
                );
                self.send_up(c, chunk, msg, None);
            }
            None => assert!(
                !access.exclusive(),
                "client {c}: a write scope of chunk {chunk} ended without sending its data"
            ),
        }
    }

    /// Client `c` ends its scope on `chunk` without publishing; returns
    /// what it sent home.
    fn abort(&mut self, c: usize, chunk: usize) -> Option<ToHome> {
        let sent = self.clients[c].sides[chunk]
            .abort()
            .unwrap_or_else(|e| panic!("client {c}: a legal abort of chunk {chunk}: {e}"));
        self.clients[c].open[chunk] = None;
        if let Some(msg) = sent {
            self.send_up(c, chunk, msg, None);
        }
        sent
    }

    /// Client `c` tries to drop its copy of `chunk` to make room. A protocol
    /// may refuse; inside a scope or an acquire it must.
    fn evict(&mut self, c: usize, chunk: usize) {
        let busy = self.clients[c].open[chunk].is_some()
            || self.clients[c].waiting.map(|w| w.0) == Some(chunk);
        let dropped = self.clients[c].sides[chunk].evict();
        self.trace.push(Event::Evict {
            client: c,
            chunk,
            dropped,
        });
        assert!(
            !(busy && dropped),
            "client {c} dropped chunk {chunk} inside a scope or an acquire"
        );
        if dropped {
            self.clients[c].bytes[chunk].fill(GARBAGE);
        }
    }

    fn deliver_up(&mut self, c: usize, h: usize) {
        let Msg { chunk, msg, data } = self.up[c][h].pop_front().expect("a message");
        debug_assert_eq!(self.home_of(chunk), h);
        self.trace.push(Event::AtHome {
            from: c,
            chunk,
            msg,
        });
        let mut out = Vec::new();
        let ch = &mut self.chunks[chunk];
        ch.home
            .on_message(Self::rank(c), msg, data.as_deref(), &mut out)
            .unwrap_or_else(|e| {
                panic!(
                    "the home of chunk {chunk} ({:?}) rejects {msg:?} from client {c}: {e}",
                    ch.protocol
                )
            });
        let v = ch.home.version();
        assert!(
            v >= ch.home_version,
            "chunk {chunk}: the home's version went from {} back to {v}",
            ch.home_version
        );
        let releases = if ch.lanes { ch.writes } else { ch.newest };
        assert!(
            v <= releases,
            "chunk {chunk}: the home holds version {v}, newer than any release"
        );
        ch.home_version = v;
        match msg {
            ToHome::ReadReq { .. } => ch.arrived.push_back((c, false)),
            ToHome::WriteReq { .. } => ch.arrived.push_back((c, true)),
            _ => {}
        }
        for o in out {
            let to =
                o.to.checked_sub(FIRST_CLIENT)
                    .map(|t| t as usize)
                    .filter(|&t| t < self.clients.len())
                    .unwrap_or_else(|| panic!("chunk {chunk}: a message to rank {}", o.to));
            let grant = match o.msg {
                ToClient::ReadGrant { .. } | ToClient::ExclusiveGrant { .. } => Some(false),
                ToClient::WriteGrant { .. } => Some(true),
                ToClient::Inval
                | ToClient::Share
                | ToClient::Update { .. }
                | ToClient::DiffAck { .. } => None,
            };
            if let Some(exclusive) = grant {
                let first = self.chunks[chunk].arrived.pop_front();
                assert_eq!(
                    first,
                    Some((to, exclusive)),
                    "chunk {chunk}: {:?} to client {to} out of arrival order",
                    o.msg
                );
            }
            self.down[to][h].push_back(Msg {
                chunk,
                msg: o.msg,
                data: o.data,
            });
            self.messages += 1;
            self.chunks[chunk].sent += 1;
        }
    }

    fn deliver_down(&mut self, c: usize, h: usize) {
        let Msg { chunk, msg, data } = self.down[c][h].pop_front().expect("a message");
        let client = &mut self.clients[c];
        let Reaction { reply, take_data } = client.sides[chunk]
            .on_message(msg, data.as_deref())
            .unwrap_or_else(|e| panic!("client {c} rejects {msg:?} for chunk {chunk}: {e}"));
        self.trace.push(Event::AtClient {
            to: c,
            chunk,
            msg,
            took_data: take_data,
        });
        if take_data {
            let bytes = data
                .as_deref()
                .unwrap_or_else(|| panic!("client {c}: take the bytes of {msg:?}, which has none"));
            client.bytes[chunk].copy_from_slice(bytes);
        }
        if client.acking == Some(chunk) && !client.sides[chunk].waiting() {
            client.acking = None;
        }
        if let Some((k, access)) = client.waiting {
            if k == chunk && !client.sides[chunk].waiting() {
                client.waiting = None;
                client.open[chunk] = Some(access);
                self.scope_opened(c, chunk, access);
            }
        }
        if let Some(reply) = reply {
            self.send_up(c, chunk, reply, None);
        }
    }

    /// A scope just opened (a hit or a grant): a READ or READWRITE sees
    /// exactly the newest released bytes; every scope holds the newest
    /// version, since a write scope's release builds on it.
    fn scope_opened(&mut self, c: usize, chunk: usize, access: Access) {
        if !self.chunks[chunk].lanes {
            return self.opened(c, chunk, access);
        }
        if access.exclusive() {
            self.clients[c].twins[chunk] = Some(self.clients[c].bytes[chunk].clone());
        }
        if access == Access::Write {
            return; // WRITE reads nothing: its bytes may be any older ones.
        }
        // Every lane holds a count its writer sent, no older than the home
        // held when this client asked: the grant brought what the home had.
        let bytes = &self.clients[c].bytes[chunk];
        let ch = &self.chunks[chunk];
        for (k, &floor) in self.clients[c].floors[chunk].iter().enumerate() {
            let seen = value(&bytes[8 * k..]);
            assert!(
                seen >= floor && seen <= ch.released[k],
                "client {c} opens {access:?} on multi-writer chunk {chunk}: lane {k} holds \
                 {seen}; the home held {floor} when it asked, and {} were released",
                ch.released[k]
            );
        }
    }

    /// The lanes of a multi-writer chunk's home.
    fn home_lanes(&self, chunk: usize) -> Vec<u64> {
        let data = self.chunks[chunk].home.data();
        (0..self.clients.len())
            .map(|k| value(&data[8 * k..]))
            .collect()
    }

    /// A write scope on a multi-writer chunk writes its own lane, and its
    /// release sends the diff against the twin.
    fn release_lane(&mut self, c: usize, chunk: usize, access: Access) {
        if access.exclusive() {
            let count = self.chunks[chunk].released[c] + 1;
            self.clients[c].bytes[chunk][8 * c..8 * c + 8].copy_from_slice(&count.to_le_bytes());
        }
        let sent = self.clients[c].sides[chunk]
            .release()
            .unwrap_or_else(|e| panic!("client {c}: a legal release of chunk {chunk}: {e}"));
        self.trace.push(Event::Release {
            client: c,
            chunk,
            sent,
        });
        match sent {
            Some(ToHome::ReleaseDiff) => {
                assert!(access.exclusive(), "client {c}: a read scope sent a diff");
                let twin = self.clients[c].twins[chunk]
                    .take()
                    .expect("a write scope has a twin");
                let diff = super::hlrc::diff(&twin, &self.clients[c].bytes[chunk]);
                let ch = &mut self.chunks[chunk];
                ch.released[c] += 1;
                ch.writes += 1;
                self.send_up(c, chunk, ToHome::ReleaseDiff, Some(diff.as_slice().into()));
                // The release returns when the home has applied it.
                self.clients[c].acking = Some(chunk);
            }
            None => assert!(
                !access.exclusive(),
                "client {c}: a write scope sent nothing"
            ),
            Some(other) => panic!("client {c}: a multi-writer scope ended with {other:?}"),
        }
    }

    fn opened(&self, c: usize, chunk: usize, access: Access) {
        let ch = &self.chunks[chunk];
        let side = &self.clients[c].sides[chunk];
        assert_eq!(
            side.version(),
            Some(ch.newest),
            "client {c} opens {access:?} on chunk {chunk} ({:?}) at version {:?}; \
             version {} was released",
            ch.protocol,
            side.version(),
            ch.newest
        );
        if access != Access::Write {
            assert_eq!(
                self.clients[c].bytes[chunk], ch.newest_bytes,
                "client {c} opens {access:?} on chunk {chunk} ({:?}) with the wrong bytes \
                 for version {}",
                ch.protocol, ch.newest
            );
        }
    }

    /// The invariants that hold after every step, per chunk.
    fn check(&self) {
        for (k, ch) in self.chunks.iter().enumerate() {
            let mut writer = None;
            let mut readers = 0;
            for (c, client) in self.clients.iter().enumerate() {
                let side = &client.sides[k];
                let open = client.open[k];
                // The protocol side agrees with the client on its scopes.
                assert_eq!(side.in_scope(), open.is_some(), "client {c}, chunk {k}");
                assert_eq!(
                    side.writing(),
                    open.is_some_and(Access::exclusive),
                    "client {c}, chunk {k}"
                );
                assert_eq!(
                    side.waiting(),
                    client.waiting.map(|w| w.0) == Some(k) || client.acking == Some(k),
                    "client {c}, chunk {k}"
                );
                assert_eq!(
                    side.writing(),
                    side.state() == State::Modified,
                    "client {c}, chunk {k}: state {:?}",
                    side.state()
                );
                match open {
                    Some(Access::Read) => {
                        assert!(
                            matches!(side.state(), State::Shared | State::Exclusive),
                            "client {c}, chunk {k}: a read scope in state {:?}",
                            side.state()
                        );
                        readers += 1;
                    }
                    Some(_) if ch.lanes => {} // writers share the chunk
                    Some(_) => {
                        assert!(
                            writer.is_none(),
                            "chunk {k}: clients {} and {c} are both in a write scope",
                            writer.unwrap()
                        );
                        writer = Some(c);
                    }
                    None => {}
                }
            }
            if let Some(w) = writer {
                assert_eq!(
                    readers, 0,
                    "chunk {k}: {readers} read scopes open during client {w}'s write scope"
                );
                assert!(
                    ch.home.owner() == Some(Self::rank(w))
                        || ch.home.exclusive() == Some(Self::rank(w)),
                    "chunk {k}: client {w} writes but the home does not know it"
                );
            }
        }
    }

    fn quiet(&self) -> bool {
        self.up.iter().flatten().all(VecDeque::is_empty)
            && self.down.iter().flatten().all(VecDeque::is_empty)
    }

    /// One random step: deliver the head of some non-empty queue, or let a
    /// client act. With `new_ops`, clients open scopes, close them and evict
    /// copies; without, they only close the scopes they hold. Returns false
    /// when nothing can happen any more.
    fn step(&mut self, rng: &mut Rng, new_ops: bool) -> bool {
        let n = self.clients.len();
        if new_ops && rng.below(10) == 0 {
            // Any client may evict, a blocked one too (eviction runs in its
            // store, not in the thread that waits).
            let (c, k) = (rng.below(n), rng.below(self.chunks.len()));
            self.evict(c, k);
            self.check();
            return true;
        }
        if new_ops && rng.below(12) == 0 {
            // A barrier's coordinator asks for a push to a client (learned
            // sets): it travels another path than the client's messages,
            // so it may reach the home before or after any of them.
            let (c, k) = (rng.below(n), rng.below(self.chunks.len()));
            if self.chunks[k].protocol.learns() {
                let h = self.home_of(k);
                let at = rng.below(self.up[c][h].len() + 1);
                self.up[c][h].insert(
                    at,
                    Msg {
                        chunk: k,
                        msg: ToHome::Want,
                        data: None,
                    },
                );
                return true;
            }
        }
        let mut queues = Vec::new();
        for c in 0..n {
            for h in 0..self.homes {
                if !self.up[c][h].is_empty() {
                    queues.push((true, c, h));
                }
                if !self.down[c][h].is_empty() {
                    queues.push((false, c, h));
                }
            }
        }
        let actors: Vec<usize> = (0..n)
            .filter(|&c| {
                let client = &self.clients[c];
                client.waiting.is_none()
                    && client.acking.is_none()
                    && (new_ops || client.open.iter().any(Option::is_some))
            })
            .collect();
        if queues.is_empty() && actors.is_empty() {
            return false;
        }
        if !actors.is_empty() && (queues.is_empty() || rng.below(3) == 0) {
            let c = rng.pick(&actors);
            self.act(rng, c, new_ops);
        } else {
            let (up, c, h) = rng.pick(&queues);
            if up {
                self.deliver_up(c, h);
            } else {
                self.deliver_down(c, h);
            }
        }
        self.check();
        true
    }

    /// Client `c`, not blocked, closes one of its scopes or opens another.
    /// While it holds scopes it acquires only chunks above the ones it holds
    /// (ascending order), as a program must to avoid a deadlock cycle of its
    /// own between two clients that each hold what the other waits for.
    fn act(&mut self, rng: &mut Rng, c: usize, new_ops: bool) {
        let held: Vec<usize> = (0..self.chunks.len())
            .filter(|&k| self.clients[c].open[k].is_some())
            .collect();
        let first_free = held.last().map_or(0, |&k| k + 1);
        let can_open = new_ops && first_free < self.chunks.len();
        if !held.is_empty() && (!can_open || rng.below(3) == 0) {
            let k = rng.pick(&held);
            self.release(c, k);
        } else if can_open {
            let k = first_free + rng.below(self.chunks.len() - first_free);
            let access = match rng.below(4) {
                0 | 1 => Access::Read,
                2 => Access::ReadWrite,
                _ => Access::Write,
            };
            self.acquire(c, k, access);
        }
    }

    /// No new scopes: runs until every queue is empty and every scope
    /// closed, which must come in a bounded number of steps with no client
    /// left waiting (no deadlock, no request forgotten at a home).
    fn drain(&mut self, rng: &mut Rng) {
        let mut steps = 0;
        while self.step(rng, false) {
            steps += 1;
            assert!(steps < 100_000, "no end after {steps} steps: a livelock");
        }
        for (c, client) in self.clients.iter().enumerate() {
            if let Some((k, access)) = client.waiting {
                panic!(
                    "client {c} waits forever for {access:?} on chunk {k} ({:?}): \
                     every queue is empty",
                    self.chunks[k].protocol
                );
            }
            assert!(client.open.iter().all(Option::is_none));
            assert_eq!(
                client.acking, None,
                "client {c} waits for an acknowledgement"
            );
        }
    }

    /// Delivers everything in a fixed order until no message is in flight
    /// (for the tests that count messages).
    fn settle(&mut self) {
        while !self.quiet() {
            for c in 0..self.clients.len() {
                for h in 0..self.homes {
                    while !self.up[c][h].is_empty() {
                        self.deliver_up(c, h);
                        self.check();
                    }
                }
            }
            for c in 0..self.clients.len() {
                for h in 0..self.homes {
                    while !self.down[c][h].is_empty() {
                        self.deliver_down(c, h);
                        self.check();
                    }
                }
            }
        }
    }

    /// The end state, once everything has drained: no owner, no request
    /// that reached a home left ungranted, and no lost update: each home holds the newest release, its version counts the
    /// write scopes and its counter the READWRITE scopes.
    fn check_final(&self) {
        assert!(self.quiet());
        for (k, ch) in self.chunks.iter().enumerate() {
            let home = &ch.home;
            assert_eq!(home.owner(), None, "chunk {k}: an owner is left");
            assert!(
                ch.arrived.is_empty(),
                "chunk {k}: requests never granted: {:?}",
                ch.arrived
            );
            if ch.lanes {
                // Every writer's releases merged: no lane lost a write.
                assert_eq!(home.version(), ch.writes, "chunk {k}: version");
                assert_eq!(self.home_lanes(k), ch.released, "chunk {k}: lanes");
                continue;
            }
            assert_eq!(home.version(), ch.writes, "chunk {k}: version");
            assert_eq!(value(home.data()), ch.increments, "chunk {k}: lost update");
            assert_eq!(&home.data()[..], &ch.newest_bytes[..], "chunk {k}: data");
        }
    }

    fn print_trace(&self, last: usize) {
        let from = self.trace.len().saturating_sub(last);
        for (i, e) in self.trace.iter().enumerate().skip(from) {
            eprintln!("  {i:5} {e:?}");
        }
    }
}

/// Random actions per seed before draining.
const STEPS: usize = 250;

/// One seeded run: 2 or 3 homes, 3 to 5 chunks of random protocol and size,
/// 2 to 6 clients; random steps, then a drain, then one READWRITE by every
/// client on every chunk (a request stuck at a home would never be served),
/// then the end-state checks.
fn run_seed(seed: u64, trace_all: bool) {
    let mut rng = Rng(seed);
    let homes = 2 + rng.below(2);
    let clients = 2 + rng.below(5);
    let chunks: Vec<(ProtocolId, usize)> = (0..3 + rng.below(3))
        .map(|_| {
            let protocol = rng.pick(&ProtocolId::ALL);
            // A multi-writer chunk has a lane per client.
            let size = if protocol.diffs() {
                8 * clients
            } else {
                8 * (1 + rng.below(3))
            };
            (protocol, size)
        })
        .collect();
    let mut sim = Sim::new(homes, clients, &chunks);
    let run = catch_unwind(AssertUnwindSafe(|| {
        for _ in 0..STEPS {
            sim.step(&mut rng, true);
        }
        sim.drain(&mut rng);
        for c in 0..clients {
            for k in 0..chunks.len() {
                sim.acquire(c, k, Access::ReadWrite);
                sim.drain(&mut rng);
            }
        }
        sim.check_final();
    }));
    let setup = format!("{homes} homes, {clients} clients, chunks (protocol, size) {chunks:?}");
    if trace_all || run.is_err() {
        eprintln!("seed {seed}: {setup}");
        sim.print_trace(if trace_all { usize::MAX } else { 80 });
    }
    if let Err(e) = run {
        let why = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "seed {seed} fails ({setup}): {why}\n\
             replay: SAT_PROTOCOL_SEED={seed} cargo test -p sat-core --lib protocol::tests \
             -- --nocapture"
        );
    }
}

/// Runs `seeds`, or only the seed in `SAT_PROTOCOL_SEED` with its full trace.
fn run_seeds(seeds: std::ops::Range<u64>) {
    if let Ok(s) = std::env::var("SAT_PROTOCOL_SEED") {
        let seed = s.parse().expect("SAT_PROTOCOL_SEED is a number");
        if seeds.contains(&seed) {
            run_seed(seed, true);
        }
        return;
    }
    for seed in seeds {
        run_seed(seed, false);
    }
}

// Two tests over disjoint seed ranges, so the harness runs them on two
// threads.

#[test]
fn mixed_protocols_keep_every_invariant_seeds_0_to_2000() {
    run_seeds(0..2000);
}

#[test]
fn mixed_protocols_keep_every_invariant_seeds_2000_to_4000() {
    run_seeds(2000..4000);
}

/// Runs one scope of client `c` on `chunk` to completion with no other
/// traffic: returns the messages its acquire and its release cost, after
/// checking that no other chunk saw any.
fn scope_cost(sim: &mut Sim, c: usize, chunk: usize, access: Access) -> (u64, u64) {
    let before = (sim.messages, sim.chunks[chunk].sent);
    sim.acquire(c, chunk, access);
    sim.settle();
    assert_eq!(sim.clients[c].open[chunk], Some(access), "granted");
    let mid = (sim.messages, sim.chunks[chunk].sent);
    sim.release(c, chunk);
    sim.settle();
    let after = (sim.messages, sim.chunks[chunk].sent);
    assert_eq!(mid.0 - before.0, mid.1 - before.1, "only this chunk talks");
    assert_eq!(after.0 - mid.0, after.1 - mid.1, "only this chunk talks");
    (mid.0 - before.0, after.0 - mid.0)
}

#[test]
fn message_counts_of_each_path() {
    use Access::*;
    // Chunks 0 and 2 on home 0, chunk 1 on home 1: the two MESI chunks share
    // their pairs' queues, and a home-only chunk runs beside them.
    let mut sim = Sim::new(
        2,
        4,
        &[
            (ProtocolId::HomeMesi, 16),
            (ProtocolId::HomeOnly, 16),
            (ProtocolId::HomeMesi, 8),
        ],
    );

    // MESI. A read miss: request and grant; a read release: nothing.
    assert_eq!(scope_cost(&mut sim, 0, 0, Read), (2, 0));
    // A read hit: nothing at all.
    assert!(sim.acquire(0, 0, Read));
    sim.release(0, 0);
    assert_eq!(sim.messages, 2);
    // Two more sharers; then a write by a fourth client with s = 3 other
    // sharers: request, 3 invalidations, 3 acknowledgements, grant; its
    // release: 1.
    assert_eq!(scope_cost(&mut sim, 1, 0, Read), (2, 0));
    assert_eq!(scope_cost(&mut sim, 2, 0, Read), (2, 0));
    assert_eq!(scope_cost(&mut sim, 3, 0, ReadWrite), (2 + 2 * 3, 1));
    // The writer keeps a valid copy: its next read is a hit.
    assert!(sim.acquire(3, 0, Read));
    sim.release(3, 0);
    // WRITE by client 0 with s = 1 (the last writer's copy).
    assert_eq!(scope_cost(&mut sim, 0, 0, Write), (2 + 2, 1));
    // Client 0 is now the only copy: s = 0.
    assert_eq!(scope_cost(&mut sim, 0, 0, ReadWrite), (2, 1));
    // Sharers inside their read scopes hold the writer back: the
    // acknowledgement leaves with the read release, and the total is still
    // 2 + 2s (here s = 2: client 0's copy and client 1's open scope).
    assert_eq!(scope_cost(&mut sim, 1, 0, Read), (2, 0));
    assert!(sim.acquire(1, 0, Read));
    let before = sim.messages;
    sim.acquire(2, 0, ReadWrite);
    sim.settle();
    assert_eq!(
        sim.clients[2].open[0], None,
        "no grant while a reader is in scope"
    );
    assert_eq!(
        sim.messages - before,
        1 + 2 + 1,
        "request, 2 invalidations, 1 ack"
    );
    sim.release(1, 0);
    sim.settle();
    assert_eq!(sim.clients[2].open[0], Some(ReadWrite));
    assert_eq!(sim.messages - before, 2 + 2 * 2);
    sim.release(2, 0);
    sim.settle();

    // Home-only: every scope costs request, grant, release, whatever came
    // before (no hit, no invalidation), for every kind of scope.
    for (c, access) in [
        (0, Read),
        (0, Read),
        (1, Read),
        (2, ReadWrite),
        (2, ReadWrite),
        (3, Write),
        (0, Read),
        (0, ReadWrite),
    ] {
        assert_eq!(scope_cost(&mut sim, c, 1, access), (2, 1), "{c} {access:?}");
    }
    // Two readers at once: each still 3.
    let before = sim.messages;
    sim.acquire(1, 1, Read);
    sim.acquire(3, 1, Read);
    sim.settle();
    sim.release(1, 1);
    sim.release(3, 1);
    sim.settle();
    assert_eq!(sim.messages - before, 2 * 3);

    // The second MESI chunk was never touched, and the first one's traffic
    // did not disturb it: its first write costs 2.
    assert_eq!(sim.chunks[2].sent, 0);
    assert_eq!(scope_cost(&mut sim, 2, 2, ReadWrite), (2, 1));
    sim.check_final();
}

/// MESI with its E state: the only holder writes again with no message;
/// anyone else's request first takes the copy back.
#[test]
fn message_counts_with_the_e_state() {
    use Access::*;
    let mut sim = Sim::new(1, 3, &[(ProtocolId::MesiExclusive, 16)]);
    // A write with nobody else holding a copy: request and grant, then the
    // release (write-back) keeps the copy Exclusive.
    assert_eq!(scope_cost(&mut sim, 0, 0, ReadWrite), (2, 1));
    assert_eq!(sim.clients[0].sides[0].state(), State::Exclusive);
    // Repeated writes by the sole holder: no message to open the scope,
    // the write-back at release.
    for access in [ReadWrite, Write, ReadWrite] {
        assert_eq!(scope_cost(&mut sim, 0, 0, access), (0, 1), "{access:?}");
    }
    // A burst is bounded (the client runtime asks past EXCLUSIVE_BURST
    // silent writes): the next write asks once, granted at once, then the
    // holder goes on silently.
    sim.clients[0].sides[0].ask_next_write();
    assert_eq!(
        scope_cost(&mut sim, 0, 0, ReadWrite),
        (2, 1),
        "the grant after a burst"
    );
    assert_eq!(scope_cost(&mut sim, 0, 0, ReadWrite), (0, 1));
    // A reader elsewhere: request, the holder asked to share (it may be
    // writing) and its answer, grant; both copies are Shared then, and
    // both read with no message.
    assert_eq!(scope_cost(&mut sim, 1, 0, Read), (4, 0));
    assert_eq!(sim.clients[0].sides[0].state(), State::Shared);
    assert_eq!(sim.clients[1].sides[0].state(), State::Shared);
    assert_eq!(scope_cost(&mut sim, 0, 0, Read), (0, 0));
    assert_eq!(scope_cost(&mut sim, 1, 0, Read), (0, 0));
    // A write invalidates the other copy as in MESI, and leaves E.
    assert_eq!(scope_cost(&mut sim, 1, 0, ReadWrite), (2 + 2, 1));
    assert_eq!(scope_cost(&mut sim, 1, 0, ReadWrite), (0, 1));
    // A read miss of the only copy's holder gets E too.
    assert_eq!(scope_cost(&mut sim, 2, 0, Read), (4, 0));
    assert_eq!(scope_cost(&mut sim, 0, 0, Read), (2, 0));
    sim.evict(1, 0);
    sim.evict(2, 0);
    assert_eq!(scope_cost(&mut sim, 0, 0, ReadWrite), (2 + 2 * 2, 1));
    // An evicted holder still counts at the home (eviction is silent): it
    // answers at once, and the reader gets a Shared copy.
    sim.evict(0, 0);
    assert_eq!(scope_cost(&mut sim, 2, 0, Read), (2 + 2, 0));
    assert_eq!(sim.clients[2].sides[0].state(), State::Shared);
    assert_eq!(scope_cost(&mut sim, 2, 0, ReadWrite), (2 + 2, 1));
    assert_eq!(sim.clients[2].sides[0].state(), State::Exclusive);

    // The holder inside a write it opened with no grant when another
    // client reads: the request waits for the scope, and the release and
    // the answer leave as one message.
    assert!(sim.acquire(2, 0, ReadWrite), "a hit");
    let before = sim.messages;
    sim.acquire(1, 0, Read);
    sim.settle();
    assert_eq!(
        sim.clients[1].open[0], None,
        "no grant while the holder writes"
    );
    assert_eq!(sim.messages - before, 2, "the request and the question");
    sim.release(2, 0);
    sim.settle();
    assert_eq!(sim.clients[1].open[0], Some(Read));
    assert_eq!(
        sim.messages - before,
        4,
        "then the release with the answer, and the grant"
    );
    assert_eq!(sim.clients[2].sides[0].state(), State::Shared);
    sim.release(1, 0);
    // An abort of such a scope, asked for meanwhile: the version stays.
    assert_eq!(scope_cost(&mut sim, 0, 0, Write), (2 + 2 * 2, 1));
    assert!(sim.acquire(0, 0, ReadWrite), "a hit");
    sim.acquire(2, 0, ReadWrite);
    sim.settle();
    assert_eq!(sim.abort(0, 0), Some(ToHome::AbortYield));
    sim.settle();
    assert_eq!(sim.clients[2].open[0], Some(ReadWrite));
    sim.release(2, 0);
    sim.settle();
    sim.check_final();
}

/// Update-based MESI: a release pushes the new version to the copies its
/// write invalidated, and their next READ is a hit.
#[test]
fn message_counts_with_updates() {
    use Access::*;
    let mut sim = Sim::new(1, 4, &[(ProtocolId::UpdateMesi, 16)]);
    // Two readers, then a writer: as in MESI up to the release, which
    // pushes the new version to both readers.
    assert_eq!(scope_cost(&mut sim, 1, 0, Read), (2, 0));
    assert_eq!(scope_cost(&mut sim, 2, 0, Read), (2, 0));
    assert_eq!(scope_cost(&mut sim, 0, 0, ReadWrite), (2 + 2 * 2, 1 + 2));
    for c in [1, 2] {
        assert!(
            sim.acquire(c, 0, Read),
            "client {c} reads the pushed version"
        );
        sim.release(c, 0);
    }
    // The producer-consumer hand-off: write, release (pushed), a read hit.
    for _ in 0..3 {
        assert_eq!(scope_cost(&mut sim, 0, 0, ReadWrite), (2 + 2 * 2, 1 + 2));
        assert!(sim.acquire(1, 0, Read));
        sim.release(1, 0);
    }
    // A copy that asked again before the push gets its grant instead, and
    // does not take the push; an evicted copy is not filled again.
    assert_eq!(scope_cost(&mut sim, 3, 0, Read), (2, 0));
    sim.evict(3, 0);
    sim.acquire(0, 0, ReadWrite);
    sim.settle();
    sim.acquire(2, 0, Read);
    sim.settle();
    sim.release(0, 0);
    sim.settle();
    assert_eq!(sim.clients[2].open[0], Some(Read));
    sim.release(2, 0);
    assert_eq!(sim.clients[3].sides[0].state(), State::Invalid);
    assert!(!sim.acquire(3, 0, Read), "the evicted copy asks");
    sim.settle();
    sim.release(3, 0);
    // An aborted write pushes nothing: the copies it invalidated ask again.
    sim.acquire(0, 0, Write);
    sim.settle();
    assert_eq!(sim.abort(0, 0), Some(ToHome::Abort));
    let before = sim.messages;
    sim.settle();
    assert_eq!(sim.messages, before, "no push after an abort");
    assert!(!sim.acquire(1, 0, Read));
    sim.settle();
    sim.release(1, 0);
    sim.settle();
    sim.check_final();
}

/// Multiple writers: every scope asks the home, every write's release
/// sends a diff, which the home acknowledges; writers never wait for each
/// other, and disjoint writes all survive.
#[test]
fn message_counts_with_multiple_writers() {
    use Access::*;
    let mut sim = Sim::new(1, 3, &[(ProtocolId::MultipleWriters, 24)]);
    assert_eq!(scope_cost(&mut sim, 0, 0, Read), (2, 0));
    assert_eq!(
        scope_cost(&mut sim, 0, 0, Read),
        (2, 0),
        "no cached copy is trusted"
    );
    // The release: the diff and the home's acknowledgement.
    assert_eq!(scope_cost(&mut sim, 1, 0, Write), (2, 2));
    assert_eq!(scope_cost(&mut sim, 2, 0, ReadWrite), (2, 2));
    // Three writers at once: nobody waits, nobody is invalidated.
    sim.acquire(0, 0, Write);
    sim.acquire(1, 0, ReadWrite);
    sim.acquire(2, 0, ReadWrite);
    sim.settle();
    for c in 0..3 {
        assert!(
            sim.clients[c].open[0].is_some(),
            "writer {c} is in its scope"
        );
    }
    let before = sim.messages;
    for c in [2, 0, 1] {
        sim.release(c, 0);
    }
    sim.settle();
    assert_eq!(
        sim.messages - before,
        6,
        "a diff and its acknowledgement each"
    );
    // Each writer's lane holds its count: the diffs merged.
    assert_eq!(sim.home_lanes(0), vec![1, 2, 2]);
    assert_eq!(sim.chunks[0].home.version(), 5);
    sim.check_final();
}

// ------------------------------------------------- hostile and misplaced

/// `msg` from `from` must be refused with `want`, sending nothing and
/// leaving the home as it was.
fn home_refuses(
    home: &mut dyn HomeSide,
    from: Rank,
    msg: ToHome,
    data: Option<&[u8]>,
    want: ProtocolViolation,
) {
    let before = format!("{home:?}");
    let mut out = Vec::new();
    assert_eq!(
        home.on_message(from, msg, data, &mut out),
        Err(want),
        "{msg:?}"
    );
    assert!(out.is_empty(), "{msg:?} was refused but sent {out:?}");
    assert_eq!(
        format!("{home:?}"),
        before,
        "refusing {msg:?} changed the home"
    );
}

/// `msg` from `from` is accepted; returns what the home sends.
fn home_takes(
    home: &mut dyn HomeSide,
    from: Rank,
    msg: ToHome,
    data: Option<&[u8]>,
) -> Vec<(Rank, ToClient)> {
    let mut out = Vec::new();
    home.on_message(from, msg, data, &mut out)
        .unwrap_or_else(|e| panic!("{msg:?}: {e}"));
    out.into_iter().map(|o| (o.to, o.msg)).collect()
}

/// `msg` must be refused with `want`, leaving the client as it was.
fn client_refuses(
    side: &mut dyn ClientSide,
    msg: ToClient,
    data: Option<&[u8]>,
    want: ProtocolViolation,
) {
    let before = format!("{side:?}");
    assert_eq!(side.on_message(msg, data), Err(want), "{msg:?}");
    assert_eq!(
        format!("{side:?}"),
        before,
        "refusing {msg:?} changed the client"
    );
}

/// A misuse of the client API must be refused and change nothing.
fn scope_refused(side: &mut dyn ClientSide, access: Option<Access>, want: ScopeError) {
    let before = format!("{side:?}");
    let got = match access {
        Some(a) => side.acquire(a).map(|_| ()),
        None => side.release().map(|_| ()),
    };
    assert_eq!(got, Err(want), "{access:?}");
    assert_eq!(
        format!("{side:?}"),
        before,
        "a refused {access:?} changed the client"
    );
}

#[test]
fn hostile_messages_to_a_mesi_home_are_refused() {
    let mut home = ProtocolId::HomeMesi.consistency().new_home(8);
    let home = home.as_mut();
    let (a, b, x) = (1, 2, 3);
    let bytes = [7u8; 8];
    // Nobody owns anything, no invalidation is out.
    home_refuses(
        home,
        a,
        ToHome::Release { version: 1 },
        Some(&bytes),
        ProtocolViolation::ReleaseWithoutOwnership { from: a },
    );
    home_refuses(home, a, ToHome::InvalAck, None, ProtocolViolation::StrayAck);
    // MESI reads end silently: a read release belongs to home-only.
    home_refuses(
        home,
        a,
        ToHome::ReadRelease,
        None,
        ProtocolViolation::Foreign("read_release"),
    );
    // a takes a copy; b asks to write, which invalidates a's copy.
    home_takes(home, a, ToHome::ReadReq { have: None }, None);
    let sent = home_takes(
        home,
        b,
        ToHome::WriteReq {
            have: None,
            need_data: true,
        },
        None,
    );
    assert_eq!(sent, vec![(a, ToClient::Inval)]);
    // Only a owes an acknowledgement; b is not the owner yet.
    home_refuses(home, x, ToHome::InvalAck, None, ProtocolViolation::StrayAck);
    home_refuses(home, b, ToHome::InvalAck, None, ProtocolViolation::StrayAck);
    home_refuses(
        home,
        b,
        ToHome::Release { version: 1 },
        Some(&bytes),
        ProtocolViolation::ReleaseWithoutOwnership { from: b },
    );
    home_refuses(
        home,
        a,
        ToHome::ReadRelease,
        None,
        ProtocolViolation::Foreign("read_release"),
    );
    let sent = home_takes(home, a, ToHome::InvalAck, None);
    assert!(matches!(sent[..], [(to, ToClient::WriteGrant { version: 0, .. })] if to == b));
    assert_eq!(home.owner(), Some(b));
    // The acknowledgement is not owed twice; only the owner releases, the
    // next version, with the chunk's size.
    home_refuses(home, a, ToHome::InvalAck, None, ProtocolViolation::StrayAck);
    home_refuses(
        home,
        a,
        ToHome::Release { version: 1 },
        Some(&bytes),
        ProtocolViolation::ReleaseWithoutOwnership { from: a },
    );
    home_refuses(
        home,
        b,
        ToHome::Release { version: 2 },
        Some(&bytes),
        ProtocolViolation::WrongVersion { got: 2, want: 1 },
    );
    home_refuses(
        home,
        b,
        ToHome::Release { version: 0 },
        Some(&bytes),
        ProtocolViolation::WrongVersion { got: 0, want: 1 },
    );
    home_refuses(
        home,
        b,
        ToHome::Release { version: 1 },
        Some(&[7; 3]),
        ProtocolViolation::WrongSize { got: 3, want: 8 },
    );
    home_refuses(
        home,
        b,
        ToHome::Release { version: 1 },
        None,
        ProtocolViolation::WrongSize { got: 0, want: 8 },
    );
    assert_eq!(home.version(), 0, "nothing was applied");
    home_takes(home, b, ToHome::Release { version: 1 }, Some(&bytes));
    assert_eq!((home.version(), &home.data()[..]), (1, &bytes[..]));
    assert_eq!(home.owner(), None);
    // A release replayed after it was applied is refused too.
    home_refuses(
        home,
        b,
        ToHome::Release { version: 1 },
        Some(&bytes),
        ProtocolViolation::ReleaseWithoutOwnership { from: b },
    );
}

#[test]
fn hostile_messages_to_a_home_only_home_are_refused() {
    let mut home = ProtocolId::HomeOnly.consistency().new_home(8);
    let home = home.as_mut();
    let (a, b) = (1, 2);
    let bytes = [7u8; 8];
    // Home-only sends no invalidation, so it takes no acknowledgement.
    home_refuses(
        home,
        a,
        ToHome::InvalAck,
        None,
        ProtocolViolation::Foreign("inval_ack"),
    );
    home_refuses(
        home,
        a,
        ToHome::ReadRelease,
        None,
        ProtocolViolation::StrayReadRelease { from: a },
    );
    home_refuses(
        home,
        a,
        ToHome::Release { version: 1 },
        Some(&bytes),
        ProtocolViolation::ReleaseWithoutOwnership { from: a },
    );
    // a reads: a reader is not a writer, and only a ends its read scope.
    home_takes(home, a, ToHome::ReadReq { have: None }, None);
    home_refuses(
        home,
        a,
        ToHome::Release { version: 1 },
        Some(&bytes),
        ProtocolViolation::ReleaseWithoutOwnership { from: a },
    );
    home_refuses(
        home,
        b,
        ToHome::ReadRelease,
        None,
        ProtocolViolation::StrayReadRelease { from: b },
    );
    // b's write waits for a's read scope.
    let sent = home_takes(
        home,
        b,
        ToHome::WriteReq {
            have: None,
            need_data: true,
        },
        None,
    );
    assert!(sent.is_empty());
    home_refuses(
        home,
        a,
        ToHome::InvalAck,
        None,
        ProtocolViolation::Foreign("inval_ack"),
    );
    let sent = home_takes(home, a, ToHome::ReadRelease, None);
    assert!(matches!(sent[..], [(to, ToClient::WriteGrant { .. })] if to == b));
    // a's read scope ended once; b owns the chunk now.
    home_refuses(
        home,
        a,
        ToHome::ReadRelease,
        None,
        ProtocolViolation::StrayReadRelease { from: a },
    );
    home_refuses(
        home,
        b,
        ToHome::ReadRelease,
        None,
        ProtocolViolation::StrayReadRelease { from: b },
    );
    home_refuses(
        home,
        a,
        ToHome::Release { version: 1 },
        Some(&bytes),
        ProtocolViolation::ReleaseWithoutOwnership { from: a },
    );
    home_refuses(
        home,
        b,
        ToHome::Release { version: 2 },
        Some(&bytes),
        ProtocolViolation::WrongVersion { got: 2, want: 1 },
    );
    home_refuses(
        home,
        b,
        ToHome::Release { version: 1 },
        Some(&[7; 9]),
        ProtocolViolation::WrongSize { got: 9, want: 8 },
    );
    home_refuses(
        home,
        b,
        ToHome::InvalAck,
        None,
        ProtocolViolation::Foreign("inval_ack"),
    );
    assert_eq!(home.version(), 0, "nothing was applied");
    home_takes(home, b, ToHome::Release { version: 1 }, Some(&bytes));
    assert_eq!((home.version(), &home.data()[..]), (1, &bytes[..]));
    assert_eq!(home.owner(), None);
}

/// The refusals both clients share: grants nobody asked for, grants of the
/// wrong kind, grants without the bytes the client lacks or with bytes of
/// the wrong size, and misuse of the scope API.
fn client_refuses_stray_grants(protocol: ProtocolId) {
    let mut side = protocol.consistency().new_client(8);
    let side = side.as_mut();
    let bytes = [5u8; 8];
    let read0 = |with_data| ToClient::ReadGrant {
        version: 0,
        with_data,
    };
    let write0 = |with_data| ToClient::WriteGrant {
        version: 0,
        with_data,
    };
    // Idle: no grant was asked for, and there is nothing to release.
    client_refuses(
        side,
        read0(true),
        Some(&bytes),
        ProtocolViolation::StrayGrant,
    );
    client_refuses(
        side,
        write0(true),
        Some(&bytes),
        ProtocolViolation::StrayGrant,
    );
    scope_refused(side, None, ScopeError::NotAcquired);

    // Waiting for a read: a write grant is not what was asked; a grant
    // without bytes for a client that holds none, or with the wrong size.
    assert_eq!(
        side.acquire(Access::Read),
        Ok(Acquire::Request(ToHome::ReadReq { have: None }))
    );
    scope_refused(side, Some(Access::Read), ScopeError::Waiting);
    scope_refused(side, Some(Access::Write), ScopeError::Waiting);
    scope_refused(side, None, ScopeError::NotAcquired);
    client_refuses(
        side,
        write0(true),
        Some(&bytes),
        ProtocolViolation::StrayGrant,
    );
    client_refuses(side, read0(false), None, ProtocolViolation::MissingData);
    client_refuses(side, read0(true), None, ProtocolViolation::MissingData);
    client_refuses(
        side,
        read0(true),
        Some(&[5; 3]),
        ProtocolViolation::WrongSize { got: 3, want: 8 },
    );
    let r = side.on_message(read0(true), Some(&bytes)).unwrap();
    assert!(r.take_data && r.reply.is_none());
    assert!(side.in_scope() && !side.writing());

    // In a read scope: a replayed grant is stray; no upgrade.
    client_refuses(
        side,
        read0(true),
        Some(&bytes),
        ProtocolViolation::StrayGrant,
    );
    client_refuses(
        side,
        write0(true),
        Some(&bytes),
        ProtocolViolation::StrayGrant,
    );
    scope_refused(side, Some(Access::ReadWrite), ScopeError::UpgradeInScope);
    scope_refused(side, Some(Access::Write), ScopeError::UpgradeInScope);
    side.release().unwrap();

    // Waiting for READWRITE with version 0 held: a read grant is stray; a
    // grant of another version must bring its bytes.
    assert_eq!(
        side.acquire(Access::ReadWrite),
        Ok(Acquire::Request(ToHome::WriteReq {
            have: Some(0),
            need_data: true
        }))
    );
    client_refuses(
        side,
        read0(true),
        Some(&bytes),
        ProtocolViolation::StrayGrant,
    );
    client_refuses(
        side,
        ToClient::WriteGrant {
            version: 4,
            with_data: false,
        },
        None,
        ProtocolViolation::MissingData,
    );
    client_refuses(
        side,
        write0(true),
        Some(&[5; 9]),
        ProtocolViolation::WrongSize { got: 9, want: 8 },
    );
    let r = side.on_message(write0(false), None).unwrap();
    assert!(!r.take_data && r.reply.is_none());
    assert!(side.writing());

    // In a write scope: nothing else is granted, nothing else is acquired,
    // and the copy cannot be evicted.
    client_refuses(
        side,
        write0(true),
        Some(&bytes),
        ProtocolViolation::StrayGrant,
    );
    client_refuses(
        side,
        read0(true),
        Some(&bytes),
        ProtocolViolation::StrayGrant,
    );
    scope_refused(side, Some(Access::Read), ScopeError::AlreadyAcquired);
    scope_refused(side, Some(Access::ReadWrite), ScopeError::AlreadyAcquired);
    let before = format!("{side:?}");
    assert!(!side.evict());
    assert_eq!(format!("{side:?}"), before);
    assert_eq!(side.release(), Ok(Some(ToHome::Release { version: 1 })));
    assert!(!side.in_scope());
}

#[test]
fn hostile_messages_to_a_mesi_client_are_refused() {
    client_refuses_stray_grants(ProtocolId::HomeMesi);
    // An invalidation for a copy no longer held is legal (silent eviction):
    // it is acknowledged at once.
    let mut side = ProtocolId::HomeMesi.consistency().new_client(8);
    assert_eq!(
        side.on_message(ToClient::Inval, None),
        Ok(Reaction {
            reply: Some(ToHome::InvalAck),
            take_data: false
        })
    );
}

#[test]
fn hostile_messages_to_a_home_only_client_are_refused() {
    client_refuses_stray_grants(ProtocolId::HomeOnly);
    // Home-only never invalidates: in any state an invalidation is foreign.
    let mut side = ProtocolId::HomeOnly.consistency().new_client(8);
    let side = side.as_mut();
    client_refuses(
        side,
        ToClient::Inval,
        None,
        ProtocolViolation::Foreign("inval"),
    );
    side.acquire(Access::Read).unwrap();
    client_refuses(
        side,
        ToClient::Inval,
        None,
        ProtocolViolation::Foreign("inval"),
    );
    side.on_message(
        ToClient::ReadGrant {
            version: 0,
            with_data: true,
        },
        Some(&[0; 8]),
    )
    .unwrap();
    client_refuses(
        side,
        ToClient::Inval,
        None,
        ProtocolViolation::Foreign("inval"),
    );
}
