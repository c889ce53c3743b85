//! The protocol under every message ordering a seeded scheduler produces:
//! clients and one home exchange messages through per-pair FIFO queues, and
//! after every step the invariants of PROTOCOL-NOTES are checked.

use std::collections::VecDeque;
use std::sync::Arc;

use super::*;
use crate::protocol::{ClientSide, HomeSide};

/// A tiny deterministic generator (splitmix64), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A queue of messages in flight on one pair, with their data.
type Queue<M> = VecDeque<(M, Option<Arc<[u8]>>)>;

struct Sim {
    home: Home,
    clients: Vec<Cache>,
    /// The bytes each client holds (the client's local store).
    data: Vec<Vec<u8>>,
    to_home: Vec<Queue<ToHome>>,
    to_client: Vec<Queue<ToClient>>,
    messages: u64,
    /// The newest version any client has released (sent), and its value.
    released: (Version, u64),
    increments: u64,
}

fn value(data: &[u8]) -> u64 {
    u64::from_le_bytes(data[..8].try_into().unwrap())
}

impl Sim {
    fn new(clients: usize) -> Sim {
        Sim {
            home: Home::new(16),
            clients: (0..clients).map(|_| Cache::new(16)).collect(),
            data: vec![vec![0; 16]; clients],
            to_home: vec![VecDeque::new(); clients],
            to_client: vec![VecDeque::new(); clients],
            messages: 0,
            released: (0, 0),
            increments: 0,
        }
    }

    /// Client ranks are 1..=n; index c is rank c + 1.
    fn acquire(&mut self, c: usize, access: Access) -> Acquire {
        let step = self.clients[c].acquire(access).expect("a legal acquire");
        if let Acquire::Request(req) = step {
            self.to_home[c].push_back((req, None));
            self.messages += 1;
        } else {
            self.check_read_open(c);
        }
        step
    }

    fn release(&mut self, c: usize) {
        let writing = self.clients[c].writing;
        if writing {
            // A READWRITE increments the counter it read.
            let v = value(&self.data[c]) + 1;
            self.data[c][..8].copy_from_slice(&v.to_le_bytes());
        }
        let sent = self.clients[c].release().expect("a legal release");
        if let Some(msg) = sent {
            let data: Option<Arc<[u8]>> =
                matches!(msg, ToHome::Release { .. }).then(|| self.data[c].as_slice().into());
            if let ToHome::Release { version } = msg {
                assert!(version > self.released.0, "versions only grow");
                self.released = (version, value(data.as_deref().unwrap()));
                self.increments += 1;
            }
            self.to_home[c].push_back((msg, data));
            self.messages += 1;
        }
    }

    fn deliver_to_home(&mut self, c: usize) {
        let (msg, data) = self.to_home[c].pop_front().unwrap();
        let mut out = Vec::new();
        let before = self.home.version();
        self.home
            .on_message(c as Rank + 1, msg, data.as_deref(), &mut out)
            .expect("legal traffic");
        assert!(
            self.home.version() >= before,
            "the home's version only grows"
        );
        for o in out {
            self.to_client[o.to as usize - 1].push_back((o.msg, o.data));
            self.messages += 1;
        }
    }

    fn deliver_to_client(&mut self, c: usize) {
        let (msg, data) = self.to_client[c].pop_front().unwrap();
        let was_waiting = self.clients[c].waiting();
        let r = self.clients[c]
            .on_message(msg, data.as_deref())
            .expect("legal traffic");
        if r.take_data {
            self.data[c].copy_from_slice(data.as_deref().unwrap());
        }
        if let Some(reply) = r.reply {
            self.to_home[c].push_back((reply, None));
            self.messages += 1;
        }
        if was_waiting
            && !self.clients[c].waiting()
            && self.clients[c].read_scopes > 0
            && !self.clients[c].writing
        {
            self.check_read_open(c);
        }
    }

    /// A read scope just opened at `c`: it must see the newest release.
    fn check_read_open(&self, c: usize) {
        let cache = &self.clients[c];
        assert_eq!(
            cache.version().unwrap_or(0),
            self.released.0,
            "client {} reads version {:?} after version {} was released",
            c + 1,
            cache.version(),
            self.released.0
        );
        assert_eq!(value(&self.data[c]), self.released.1);
    }

    fn check(&self) {
        let writers = self.clients.iter().filter(|c| c.writing).count();
        let readers = self.clients.iter().filter(|c| c.read_scopes > 0).count();
        assert!(writers <= 1, "{writers} clients write at once");
        assert!(
            writers == 0 || readers == 0,
            "a read scope is open during a write scope"
        );
    }

    fn quiet(&self) -> bool {
        self.to_home.iter().all(VecDeque::is_empty) && self.to_client.iter().all(VecDeque::is_empty)
    }

    /// One random step: deliver some queued message, or let an idle client
    /// open or close a scope.
    fn step(&mut self, rng: &mut Rng, new_ops: bool) {
        let n = self.clients.len();
        let queues: Vec<(bool, usize)> = (0..n)
            .flat_map(|c| [(true, c), (false, c)])
            .filter(|&(home, c)| {
                if home {
                    !self.to_home[c].is_empty()
                } else {
                    !self.to_client[c].is_empty()
                }
            })
            .collect();
        let act = new_ops && (queues.is_empty() || rng.below(3) == 0);
        if act {
            let c = rng.below(n as u64) as usize;
            let cache = &self.clients[c];
            if cache.waiting() {
            } else if cache.in_scope() {
                self.release(c);
            } else if rng.below(4) == 0 {
                // A chain's READ asking for this copy ahead of its turn.
                if let Some(req) = self.clients[c].read_ahead() {
                    self.to_home[c].push_back((req, None));
                    self.messages += 1;
                }
            } else {
                let access = if rng.below(2) == 0 {
                    Access::Read
                } else {
                    Access::ReadWrite
                };
                self.acquire(c, access);
            }
        } else if !queues.is_empty() {
            let (home, c) = queues[rng.below(queues.len() as u64) as usize];
            if home {
                self.deliver_to_home(c);
            } else {
                self.deliver_to_client(c);
            }
        } else {
            // Draining: close every open scope so waiting requests can go on.
            for c in 0..n {
                if self.clients[c].in_scope() && !self.clients[c].waiting() {
                    self.release(c);
                }
            }
        }
        self.check();
    }
}

#[test]
fn message_counts_of_each_path() {
    let mut sim = Sim::new(4);
    let drain = |sim: &mut Sim| {
        while !sim.quiet() {
            for c in 0..4 {
                while !sim.to_home[c].is_empty() {
                    sim.deliver_to_home(c);
                }
            }
            for c in 0..4 {
                while !sim.to_client[c].is_empty() {
                    sim.deliver_to_client(c);
                }
            }
        }
    };
    // Read miss: request and grant.
    sim.messages = 0;
    sim.acquire(0, Access::Read);
    drain(&mut sim);
    assert_eq!(sim.messages, 2);
    sim.release(0);
    // Read hit: nothing.
    sim.messages = 0;
    assert_eq!(sim.acquire(0, Access::Read), Acquire::Hit);
    sim.release(0);
    assert_eq!(sim.messages, 0);
    // Clients 2 and 3 share it too: 3 sharers.
    for c in [1, 2] {
        sim.acquire(c, Access::Read);
        drain(&mut sim);
        sim.release(c);
    }
    // Write by client 4 with 3 other sharers: 2 + 2 * 3.
    sim.messages = 0;
    sim.acquire(3, Access::ReadWrite);
    drain(&mut sim);
    assert_eq!(sim.messages, 2 + 2 * 3);
    // Release of the write scope: 1.
    sim.messages = 0;
    sim.release(3);
    drain(&mut sim);
    assert_eq!(sim.messages, 1);
    // Write miss with 1 sharer (the last writer keeps a shared copy).
    sim.messages = 0;
    sim.acquire(0, Access::ReadWrite);
    drain(&mut sim);
    assert_eq!(sim.messages, 2 + 2);
    sim.release(0);
    drain(&mut sim);
    assert_eq!(sim.home.version(), 2);
    assert_eq!(value(sim.home.data()), 2);
}

#[test]
fn a_writer_waits_for_readers_in_scope() {
    let mut sim = Sim::new(2);
    sim.acquire(0, Access::Read);
    sim.deliver_to_home(0);
    sim.deliver_to_client(0);
    assert!(sim.clients[0].read_scopes > 0);
    sim.acquire(1, Access::ReadWrite);
    sim.deliver_to_home(1); // the home invalidates client 1's copy
    sim.deliver_to_client(0); // inside a read scope: no acknowledgement yet
    assert!(sim.to_home[0].is_empty());
    assert!(
        sim.home.owner().is_none(),
        "no grant while a reader is in scope"
    );
    sim.release(0); // the acknowledgement leaves with the release
    sim.deliver_to_home(0);
    sim.deliver_to_client(1);
    assert!(sim.clients[1].writing);
}

#[test]
fn random_orderings_keep_every_invariant() {
    for seed in 0..3000u64 {
        let mut rng = Rng(seed);
        let clients = 2 + (seed % 4) as usize;
        let mut sim = Sim::new(clients);
        for _ in 0..200 {
            sim.step(&mut rng, true);
        }
        // No new operations: everything must drain (no deadlock, no lost
        // request), with every scope closed.
        let mut steps = 0;
        while !sim.quiet() || sim.clients.iter().any(|c| c.in_scope() || c.waiting()) {
            sim.step(&mut rng, false);
            steps += 1;
            assert!(steps < 100_000, "seed {seed}: no progress");
        }
        assert!(sim.home.owner().is_none());
        // No lost update: every READWRITE incremented the counter once.
        assert_eq!(value(sim.home.data()), sim.increments, "seed {seed}");
        assert_eq!(sim.home.version(), sim.increments, "seed {seed}");
    }
}

#[test]
fn misuse_and_hostile_messages_are_errors() {
    let mut c = Cache::new(8);
    assert_eq!(c.release().unwrap_err(), ScopeError::NotAcquired);
    assert!(matches!(c.acquire(Access::Write), Ok(Acquire::Request(_))));
    assert_eq!(c.acquire(Access::Read).unwrap_err(), ScopeError::Waiting);
    assert_eq!(
        c.on_message(
            ToClient::ReadGrant {
                version: 0,
                with_data: true
            },
            Some(&[0; 8])
        )
        .unwrap_err(),
        ProtocolViolation::StrayGrant
    );
    assert_eq!(
        c.on_message(
            ToClient::WriteGrant {
                version: 3,
                with_data: true
            },
            Some(&[0; 3])
        )
        .unwrap_err(),
        ProtocolViolation::WrongSize { got: 3, want: 8 }
    );
    c.on_message(
        ToClient::WriteGrant {
            version: 3,
            with_data: false,
        },
        None,
    )
    .unwrap();
    assert_eq!(
        c.acquire(Access::Read).unwrap_err(),
        ScopeError::AlreadyAcquired
    );

    let mut h = Home::new(8);
    let mut out = Vec::new();
    assert_eq!(
        h.on_message(5, ToHome::Release { version: 1 }, Some(&[0; 8]), &mut out)
            .unwrap_err(),
        ProtocolViolation::ReleaseWithoutOwnership { from: 5 }
    );
    assert_eq!(
        h.on_message(5, ToHome::InvalAck, None, &mut out)
            .unwrap_err(),
        ProtocolViolation::StrayAck
    );
    h.on_message(
        5,
        ToHome::WriteReq {
            have: None,
            need_data: false,
        },
        None,
        &mut out,
    )
    .unwrap();
    assert_eq!(h.owner(), Some(5));
    assert_eq!(
        h.on_message(5, ToHome::Release { version: 9 }, Some(&[0; 8]), &mut out)
            .unwrap_err(),
        ProtocolViolation::WrongVersion { got: 9, want: 1 }
    );
    assert_eq!(
        h.on_message(5, ToHome::Release { version: 1 }, Some(&[0; 2]), &mut out)
            .unwrap_err(),
        ProtocolViolation::WrongSize { got: 2, want: 8 }
    );
    assert_eq!(h.version(), 0, "nothing was applied");
}

#[test]
fn a_second_read_scope_while_an_invalidation_is_owed_does_not_deadlock() {
    let mut c = Cache::new(8);
    assert!(matches!(c.acquire(Access::Read), Ok(Acquire::Request(_))));
    let r = c
        .on_message(
            ToClient::ReadGrant {
                version: 0,
                with_data: true,
            },
            Some(&[0; 8]),
        )
        .unwrap();
    assert!(r.take_data);
    // A writer's invalidation arrives during the read scope: owed.
    assert_eq!(c.on_message(ToClient::Inval, None).unwrap().reply, None);
    // Another read scope of this process (another thread) opens locally:
    // asking the home would queue it behind the writer that waits for us.
    assert_eq!(c.acquire(Access::Read).unwrap(), Acquire::Hit);
    assert_eq!(c.release().unwrap(), None, "one scope is still open");
    assert_eq!(c.release().unwrap(), Some(ToHome::InvalAck));
    assert_eq!(c.state(), State::Invalid);
    assert!(matches!(c.acquire(Access::Read), Ok(Acquire::Request(_))));
}

/// A writer that leaves while its invalidations are answered: the readers
/// they reached may still be inside read scopes, so the next writer waits
/// for their acknowledgements too (a requester's departure never lets a
/// writer in beside readers).
#[test]
fn a_departing_requester_leaves_no_stale_read_scopes() {
    let mut home = Home::new(8);
    let mut out = Vec::new();
    // Client 1 reads: it is in the copyset (and inside a read scope).
    home.on_message(1, ToHome::ReadReq { have: None }, None, &mut out)
        .unwrap();
    out.clear();
    // Client 2 asks to write: client 1 is invalidated.
    home.on_message(
        2,
        ToHome::WriteReq {
            have: None,
            need_data: false,
        },
        None,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].to, out[0].msg), (1, ToClient::Inval));
    out.clear();
    // Client 2 leaves before the acknowledgement; client 3 asks to write.
    home.client_left(2, &mut out);
    home.on_message(
        3,
        ToHome::WriteReq {
            have: None,
            need_data: false,
        },
        None,
        &mut out,
    )
    .unwrap();
    assert!(
        out.is_empty(),
        "client 1 is still inside its read scope: no grant yet, got {out:?}"
    );
    // Client 1's scope ends: now client 3 is granted.
    home.on_message(1, ToHome::InvalAck, None, &mut out)
        .unwrap();
    assert!(
        out.iter()
            .any(|o| o.to == 3 && matches!(o.msg, ToClient::WriteGrant { .. })),
        "{out:?}"
    );
}

/// A requester whose server was lost (its requests void, its copies kept):
/// the grant being prepared for it and its waiting requests are dropped, so
/// nothing answers them later, while its own copy is still invalidated
/// before anyone writes.
#[test]
fn void_requests_are_never_granted() {
    let mut home = Home::new(8);
    let mut out = Vec::new();
    let write = ToHome::WriteReq {
        have: None,
        need_data: false,
    };
    let granted = |out: &[Out<ToClient>], to: Rank| {
        out.iter().any(|o| {
            o.to == to
                && matches!(
                    o.msg,
                    ToClient::WriteGrant { .. } | ToClient::ReadGrant { .. }
                )
        })
    };
    home.on_message(1, ToHome::ReadReq { have: None }, None, &mut out)
        .unwrap();
    home.on_message(2, ToHome::ReadReq { have: None }, None, &mut out)
        .unwrap();
    out.clear();
    // Client 2 asks to write (client 1 is invalidated); client 3 waits.
    home.on_message(2, write, None, &mut out).unwrap();
    home.on_message(3, write, None, &mut out).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].to, out[0].msg), (1, ToClient::Inval));
    out.clear();
    home.requests_void(2);
    // The invalidation is answered: the grant it waited for goes nowhere
    // (client 2 gave its copy up to ask), and client 3 is next.
    home.on_message(1, ToHome::InvalAck, None, &mut out)
        .unwrap();
    assert!(!granted(&out, 2), "a void request was answered: {out:?}");
    assert!(granted(&out, 3), "{out:?}");
    // Client 3 releases; client 2, told of its loss, is forgotten: nothing
    // of its old requests comes back.
    out.clear();
    home.on_message(3, ToHome::Release { version: 1 }, Some(&[7; 8]), &mut out)
        .unwrap();
    home.client_left(2, &mut out);
    assert!(!out.iter().any(|o| o.to == 2), "{out:?}");
}

/// Learned sets: a home pushes a wanted copy only when nothing holds the
/// chunk and the client is no sharer; the client takes it only while its
/// copy is invalid, held a version and is not asked for; a protocol
/// without the flavor refuses the message.
#[test]
fn a_wanted_push_is_made_and_taken_only_when_nothing_holds_the_chunk() {
    let learned = Flavor {
        learned: true,
        ..Flavor::default()
    };
    let mut out = Vec::new();
    assert!(Home::new(8)
        .on_message(1, ToHome::Want, None, &mut out)
        .is_err());
    let mut home = Home::with_flavor(8, learned);
    let mut reader = Cache::with_flavor(8, learned);
    // Client 1 reads (version 0), client 2 writes: 1's copy is invalidated.
    let Ok(Acquire::Request(req)) = reader.acquire(Access::Read) else {
        panic!("a miss")
    };
    home.on_message(1, req, None, &mut out).unwrap();
    let grant = out.pop().unwrap();
    reader.on_message(grant.msg, grant.data.as_deref()).unwrap();
    reader.release().unwrap();
    let write = ToHome::WriteReq {
        have: None,
        need_data: false,
    };
    home.on_message(2, write, None, &mut out).unwrap();
    let inval = out.pop().unwrap();
    assert_eq!((inval.to, inval.msg), (1, ToClient::Inval));
    let ack = reader.on_message(inval.msg, None).unwrap().reply.unwrap();
    // While 2 writes, a wanted push would be stale: none is made.
    home.on_message(1, ack, None, &mut out).unwrap();
    out.clear();
    home.on_message(1, ToHome::Want, None, &mut out).unwrap();
    assert!(
        out.is_empty(),
        "no push while a writer holds the chunk: {out:?}"
    );
    home.on_message(2, ToHome::Release { version: 1 }, Some(&[7u8; 8]), &mut out)
        .unwrap();
    // Nothing holds it now: pushed once, and taken by the invalid copy.
    home.on_message(1, ToHome::Want, None, &mut out).unwrap();
    let push = out.pop().expect("a push");
    assert_eq!(push.msg, ToClient::Update { version: 1 });
    home.on_message(1, ToHome::Want, None, &mut out).unwrap();
    assert!(out.is_empty(), "1 is a sharer now: no second push");
    let taken = reader.on_message(push.msg, push.data.as_deref()).unwrap();
    assert!(taken.take_data && reader.state() == State::Shared);
    assert_eq!(reader.version(), Some(1));
    // 2 writes again, invalidating 1; 1 asks for the chunk, and a push
    // made before its request reaches the home is not taken: the request
    // gets its own answer.
    home.on_message(2, write, None, &mut out).unwrap();
    let inval = out.pop().unwrap();
    let ack = reader.on_message(inval.msg, None).unwrap().reply.unwrap();
    home.on_message(1, ack, None, &mut out).unwrap();
    out.clear();
    home.on_message(2, ToHome::Release { version: 2 }, Some(&[8u8; 8]), &mut out)
        .unwrap();
    let Ok(Acquire::Request(_)) = reader.acquire(Access::Read) else {
        panic!("a miss")
    };
    home.on_message(1, ToHome::Want, None, &mut out).unwrap();
    let push = out.pop().expect("a push");
    let ignored = reader.on_message(push.msg, push.data.as_deref()).unwrap();
    assert!(!ignored.take_data && reader.waiting());
}

/// A copy asked for ahead of a chain's READ: its grant opens no scope, so a
/// writer that comes next is answered at once (nothing here holds the
/// chunk); asked ahead again, the READ that comes for it is a hit on the
/// newest release.
#[test]
fn a_copy_asked_ahead_opens_no_scope_and_gives_way_to_a_writer() {
    let mut sim = Sim::new(2);
    let req = sim.clients[0]
        .read_ahead()
        .expect("an invalid copy is asked for");
    assert!(matches!(req, ToHome::ReadReq { have: None }), "{req:?}");
    assert_eq!(sim.clients[0].read_ahead(), None, "asked for already");
    sim.to_home[0].push_back((req, None));
    sim.deliver_to_home(0);
    sim.deliver_to_client(0);
    assert!(!sim.clients[0].waiting() && !sim.clients[0].in_scope());
    assert_eq!(sim.clients[0].state(), State::Shared);
    assert_eq!(sim.clients[0].read_ahead(), None, "valid already");
    // A writer: the invalidation is answered at once.
    sim.acquire(1, Access::ReadWrite);
    sim.deliver_to_home(1);
    sim.deliver_to_client(0);
    assert_eq!(sim.to_home[0].len(), 1, "the acknowledgement left at once");
    sim.deliver_to_home(0);
    sim.deliver_to_client(1);
    assert!(sim.clients[1].writing);
    sim.release(1);
    sim.deliver_to_home(1);
    // Asked ahead again, then READ: a hit on what the writer released.
    let req = sim.clients[0].read_ahead().expect("invalidated");
    sim.to_home[0].push_back((req, None));
    sim.deliver_to_home(0);
    sim.deliver_to_client(0);
    assert_eq!(sim.acquire(0, Access::Read), Acquire::Hit);
    assert_eq!(sim.clients[0].read_scopes, 1);
    sim.release(0);
    assert!(!sim.clients[0].in_scope());
}
