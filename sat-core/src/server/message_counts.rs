//! The exact message cost of every coherence path, counted on the wire.
//!
//! The real `Client`s (store, protocol handlers) and the real servers (homes,
//! forwarding) run over the in-process transport, which counts every message
//! per (sender, receiver) pair. Each operation runs alone: one thread calls
//! the client API while this thread steps both servers and lets the other
//! clients take in what reaches them (an invalidation is answered there);
//! once the call has returned, everything runs until no message is in
//! flight. The counts then hold every message the operation caused, on any
//! rank, and nothing else.
//!
//! Each expected count is derived from the protocol's rule (PROTOCOL-NOTES,
//! the doc comments of `protocol/mesi.rs` and `protocol/home_only.rs`), never
//! read off a run:
//! - home-based MESI, home on the client's own server: read hit 0; read miss
//!   2 (request, grant); write with s other sharers 2 + 2s (request, s
//!   invalidations, s acknowledgements, grant); release of a write scope 1;
//!   release of a read scope 0;
//! - home-only: every scope 3 (request, grant, release), whoever else used
//!   the chunk;
//! - MALLOC: a request and its answer;
//! - a message between a client and a home on another server than the
//!   client's takes one hop more (Figure 14: the client's server forwards
//!   it), so each such message adds one, in either direction.
//!
//! A message added to any path fails the test that runs it: per rank, the
//! number of messages each server and each client sent is compared, then
//! the count of every (sender, receiver) pair.

use std::collections::BTreeMap;
use std::sync::Arc;

mod scale;

use super::{Server, Step};
use crate::client::{Client, Traffic};
use crate::error::SatResult;
use crate::progress::Clock;
use crate::protocol::{Access, ProtocolId};
use crate::topology::Topology;
use crate::transport::mem::{MemNetwork, MemTransport, Schedule};
use crate::transport::{Rank, Transport};

/// Two servers, so that both a home on the client's own server and a
/// forwarded one are counted: server 0 has clients 2 to 5 (a writer and
/// three sharers on one server), server 1 has clients 6 and 7. The home of
/// chunk `c` is server `c % 2`.
const TOPOLOGY: &str = r#"<?xml version="1.0"?>
<SAT><topologies>
  <topology id="0" role="0"><memory capacity="0"/><clients><intlist>2 3 4 5</intlist></clients></topology>
  <topology id="1" role="0"><memory capacity="0"/><clients><intlist>6 7</intlist></clients></topology>
  <topology id="2" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="3" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="4" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="5" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="6" role="1"><memory capacity="0"/><servers><intlist>1</intlist></servers></topology>
  <topology id="7" role="1"><memory capacity="0"/><servers><intlist>1</intlist></servers></topology>
</topologies></SAT>"#;

const SIZE: usize = 64;

/// Rounds of stepping after a call before the run must be quiet: a path is
/// a handful of messages, so this is only a guard against a message storm.
const SETTLE_ROUNDS: u32 = 10_000;

fn topology() -> Arc<Topology> {
    Arc::new(Topology::parse(TOPOLOGY, "two servers").expect("a valid topology"))
}

/// The messages one operation sent, per (sender, receiver).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Counts(BTreeMap<(Rank, Rank), u64>);

impl Counts {
    fn sent_by(&self, rank: Rank) -> u64 {
        self.0
            .iter()
            .filter(|((from, _), _)| *from == rank)
            .map(|(_, n)| n)
            .sum()
    }

    fn received_by(&self, rank: Rank) -> u64 {
        self.0
            .iter()
            .filter(|((_, to), _)| *to == rank)
            .map(|(_, n)| n)
            .sum()
    }

    fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

/// What an operation should cost: the protocol's messages between clients
/// and homes, each laid out on the hops it takes.
struct Budget<'t> {
    topology: &'t Topology,
    hops: Counts,
}

impl<'t> Budget<'t> {
    fn new(topology: &'t Topology) -> Budget<'t> {
        Budget {
            topology,
            hops: Counts(BTreeMap::new()),
        }
    }

    fn hop(&mut self, from: Rank, to: Rank) {
        *self.hops.0.entry((from, to)).or_default() += 1;
    }

    /// One message from `client` to the home `home`: to the client's
    /// server, and on to the home when that is another server.
    fn up(mut self, client: Rank, home: Rank) -> Self {
        let server = self.topology.server_of(client);
        self.hop(client, server);
        if server != home {
            self.hop(server, home);
        }
        self
    }

    /// One message from the home `home` to `client`: through the client's
    /// server when that is another server.
    fn down(mut self, home: Rank, client: Rank) -> Self {
        let server = self.topology.server_of(client);
        if server != home {
            self.hop(home, server);
        }
        self.hop(server, client);
        self
    }
}

/// The servers and clients of one run, and the network between them.
struct Stack<'t> {
    topology: &'t Arc<Topology>,
    net: MemNetwork,
    servers: Vec<(Server<'t>, MemTransport)>,
    /// Client rank r is `clients[r - servers]`.
    clients: Vec<Client>,
    /// A client that takes nothing in (a busy process): what is sent to it
    /// waits in the network.
    asleep: Option<Rank>,
}

impl<'t> Stack<'t> {
    fn new(topology: &'t Arc<Topology>) -> Stack<'t> {
        let (net, endpoints) = MemNetwork::new(topology.len(), Schedule::Immediate);
        let mut servers = Vec::new();
        let mut clients = Vec::new();
        for ep in endpoints {
            let rank = ep.rank();
            if topology.is_server(rank) {
                servers.push((Server::new(topology, rank, None, Clock::Real, None), ep));
            } else {
                clients.push(Client::new(topology.clone(), Box::new(ep)));
            }
        }
        Stack {
            topology,
            net,
            servers,
            clients,
            asleep: None,
        }
    }

    /// One round of everything but the calling client: each server steps
    /// once, and each other client with a message waiting takes in what has
    /// reached it (answering an invalidation, as its background progress
    /// would). Returns whether anything happened.
    fn round(
        net: &MemNetwork,
        servers: &mut [(Server<'t>, MemTransport)],
        clients: &[Client],
        busy: [Option<Rank>; 2],
    ) -> bool {
        Stack::round_without(net, servers, clients, busy, None)
    }

    /// [`Stack::round`] in which server `dead` (an index) takes no step.
    fn round_without(
        net: &MemNetwork,
        servers: &mut [(Server<'t>, MemTransport)],
        clients: &[Client],
        busy: [Option<Rank>; 2],
        dead: Option<usize>,
    ) -> bool {
        let mut moved = false;
        for (i, (server, ep)) in servers.iter_mut().enumerate() {
            if dead == Some(i) {
                continue;
            }
            match server.step(ep).expect("a server step") {
                Step::Busy => moved = true,
                Step::Idle => {}
                Step::Finished => panic!("a server finished while its clients run"),
            }
        }
        let first_client = servers.len() as Rank;
        for rank in net.ranks_with_mail() {
            if rank < first_client || busy.contains(&Some(rank)) {
                continue;
            }
            let c = &clients[(rank - first_client) as usize];
            let user = c.try_recv().expect("a client takes in its messages");
            assert!(user.is_none(), "no user message is sent here: {user:?}");
        }
        moved
    }

    /// Runs `op` on client `rank` alone and returns every message it caused.
    /// Also checks the clients' own counters ([`Client::traffic`], which the
    /// benchmarks report from real processes) against the wire's.
    fn run(&mut self, rank: Rank, op: impl FnOnce(&Client) -> SatResult<()> + Send) -> Counts {
        self.net.reset_counters();
        let before: Vec<Traffic> = self.clients.iter().map(Client::traffic).collect();
        let servers = &mut self.servers;
        let clients = &self.clients;
        let net = &self.net;
        let asleep = self.asleep;
        std::thread::scope(|s| {
            let client = &clients[rank as usize - servers.len()];
            let call = s.spawn(move || op(client));
            while !call.is_finished() {
                if !Stack::round(net, servers, clients, [Some(rank), asleep]) {
                    std::thread::yield_now();
                }
            }
            call.join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
                .expect("the operation")
        });
        // Everything the call set going ends here: nothing runs meanwhile,
        // so an empty network (but for what waits for a sleeping client)
        // means every handler has run.
        let mut rounds = 0;
        loop {
            Stack::round(&self.net, servers, clients, [None, asleep]);
            let waiting = asleep.map_or(0, |r| self.net.in_flight_to(r));
            if self.net.in_flight() == waiting {
                break;
            }
            rounds += 1;
            assert!(
                rounds < SETTLE_ROUNDS,
                "still {} messages in flight after {SETTLE_ROUNDS} rounds",
                self.net.in_flight()
            );
        }
        let counts = self.counts();
        for (c, before) in self.clients.iter().zip(before) {
            let t = c.traffic().since(before);
            let r = c.rank();
            if Some(r) == self.asleep {
                // What was sent to it has not arrived.
                continue;
            }
            assert_eq!(
                (t.sent, t.received),
                (counts.sent_by(r), counts.received_by(r)),
                "client {r}'s own counters (sent, received) disagree with the wire's"
            );
        }
        counts
    }

    /// Runs `op` on client `rank` and checks what it cost against `want`:
    /// first what each rank sent (a server's count covers its forwarding as
    /// well as its home's answers), then every (sender, receiver) pair, then
    /// the total against `total`, the rule's closed form for the path.
    fn expect(
        &mut self,
        what: &str,
        rank: Rank,
        op: impl FnOnce(&Client) -> SatResult<()> + Send,
        want: Budget<'_>,
        total: u64,
    ) {
        let got = self.run(rank, op);
        let want = want.hops;
        for r in 0..self.topology.len() {
            let kind = if self.topology.is_server(r) {
                "server"
            } else {
                "client"
            };
            assert_eq!(
                got.sent_by(r),
                want.sent_by(r),
                "{what}: {kind} {r} sent {} messages where the protocol sends {}\n\
                 sent (from, to): {:?}\nexpected:         {:?}",
                got.sent_by(r),
                want.sent_by(r),
                got.0,
                want.0
            );
        }
        assert_eq!(got, want, "{what}: the messages per (sender, receiver)");
        assert_eq!(got.total(), total, "{what}: messages in all");
    }

    /// The messages sent since the last reset, per (sender, receiver).
    fn counts(&self) -> Counts {
        Counts(self.net.sent_pairs())
    }
}

fn read(chunk: u64) -> impl FnOnce(&Client) -> SatResult<()> + Send {
    move |c: &Client| c.acquire(chunk, Access::Read)
}

fn write(chunk: u64) -> impl FnOnce(&Client) -> SatResult<()> + Send {
    move |c: &Client| c.acquire(chunk, Access::Write)
}

fn release(chunk: u64) -> impl FnOnce(&Client) -> SatResult<()> + Send {
    move |c: &Client| c.release(chunk)
}

/// MALLOC of one 64-byte chunk with `protocol`.
fn malloc(protocol: ProtocolId, chunk: u64) -> impl FnOnce(&Client) -> SatResult<()> + Send {
    move |c: &Client| c.malloc_lst(protocol, &[chunk], &[SIZE]).map(|_| ())
}

/// The first 8 bytes of `chunk`, read inside the caller's scope.
fn value(c: &Client, chunk: u64) -> u64 {
    c.with_data(chunk, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))
        .expect("a chunk in scope")
}

/// Writes `v` into the first 8 bytes of `chunk` inside the caller's write
/// scope, then releases it.
fn write_back(chunk: u64, v: u64) -> impl FnOnce(&Client) -> SatResult<()> + Send {
    move |c: &Client| {
        c.with_data_mut(chunk, |d| d[..8].copy_from_slice(&v.to_le_bytes()))?;
        c.release(chunk)
    }
}

/// A whole read scope that must see `v`: its cost is the acquire's, since
/// the release of a MESI read scope sends nothing.
fn read_sees(chunk: u64, v: u64) -> impl FnOnce(&Client) -> SatResult<()> + Send {
    move |c: &Client| {
        c.acquire(chunk, Access::Read)?;
        assert_eq!(
            value(c, chunk),
            v,
            "chunk {chunk} as client {} reads it",
            c.rank()
        );
        c.release(chunk)
    }
}

#[test]
fn a_mesi_read_costs_nothing_on_a_hit_and_a_round_trip_to_its_home_on_a_miss() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Client 2 is server 0's, client 6 server 1's; chunk 0's home is server
    // 0, chunk 1's server 1: each client reads a chunk homed on its own
    // server and one homed on the other.
    for (chunk, home) in [(0, 0), (1, 1)] {
        for c in [2, 6] {
            // A request and its answer, one hop more each way when the home
            // is not the client's server.
            let hops = if topology.server_of(c) == home { 0 } else { 2 };
            let want = b().up(c, home).down(home, c);
            s.expect(
                "MALLOC",
                c,
                malloc(ProtocolId::HomeMesi, chunk),
                want,
                2 + hops,
            );
        }
    }
    for (chunk, home) in [(0, 0), (1, 1)] {
        for c in [2, 6] {
            let hops = if topology.server_of(c) == home { 0 } else { 2 };
            // A miss: READ_REQ to the home, the grant back.
            let miss = b().up(c, home).down(home, c);
            s.expect("READ miss", c, read(chunk), miss, 2 + hops);
            // Read scopes end silently.
            s.expect("RELEASE of a read miss", c, release(chunk), b(), 0);
            // The copy is valid now: a hit sends nothing, wherever the home.
            s.expect("READ hit", c, read(chunk), b(), 0);
            s.expect("RELEASE of a read hit", c, release(chunk), b(), 0);
        }
    }
}

#[test]
fn a_mesi_write_costs_two_plus_two_per_other_sharer_and_its_release_one() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 2's home is server 0, the server of the writer and of its three
    // would-be sharers: no message is forwarded.
    let (chunk, home, writer, sharers) = (2, 0, 2, [3, 4, 5]);
    for c in [writer, 3, 4, 5] {
        let want = b().up(c, home).down(home, c);
        s.expect("MALLOC", c, malloc(ProtocolId::HomeMesi, chunk), want, 2);
    }
    // s = 0, nobody holds a copy: WRITE_REQ and the grant.
    let want = b().up(writer, home).down(home, writer);
    s.expect("WRITE, no sharer", writer, write(chunk), want, 2);
    // The write-back: the new version goes home, 1.
    let want = b().up(writer, home);
    s.expect("RELEASE of a write", writer, write_back(chunk, 1), want, 1);
    // The writer kept a shared copy, which is not another sharer: s = 0.
    let want = b().up(writer, home).down(home, writer);
    s.expect(
        "WRITE, the writer's own copy only",
        writer,
        write(chunk),
        want,
        2,
    );
    s.expect(
        "RELEASE of a write",
        writer,
        write_back(chunk, 2),
        b().up(writer, home),
        1,
    );
    for n in 1..=sharers.len() {
        let v = 2 + n as u64;
        for &r in &sharers[..n] {
            // Each sharer's read miss (2) fetches the last release.
            let want = b().up(r, home).down(home, r);
            s.expect("READ miss of a sharer", r, read_sees(chunk, v - 1), want, 2);
        }
        // WRITE_REQ, an invalidation to each other sharer and its
        // acknowledgement, the grant: 2 + 2s.
        let mut want = b().up(writer, home);
        for &r in &sharers[..n] {
            want = want.down(home, r).up(r, home);
        }
        let want = want.down(home, writer);
        let what = format!("WRITE, other sharers: {n}");
        s.expect(&what, writer, write(chunk), want, 2 + 2 * n as u64);
        s.expect(
            "RELEASE of a write",
            writer,
            write_back(chunk, v),
            b().up(writer, home),
            1,
        );
    }
    // The benchmarks' hand-off: client 3 takes the chunk for READWRITE (the
    // writer's copy is the one other: 2 + 2), releases (1), and the writer
    // reads the new version (a miss, 2).
    let want = b()
        .up(3, home)
        .down(home, writer)
        .up(writer, home)
        .down(home, 3);
    let readwrite = |c: &Client| {
        c.acquire(chunk, Access::ReadWrite)?;
        assert_eq!(value(c, chunk), 5, "READWRITE sees the last release");
        Ok(())
    };
    s.expect("READWRITE with 1 other sharer", 3, readwrite, want, 4);
    s.expect(
        "RELEASE of a write",
        3,
        write_back(chunk, 6),
        b().up(3, home),
        1,
    );
    let want = b().up(writer, home).down(home, writer);
    s.expect(
        "READ miss after a hand-off",
        writer,
        read_sees(chunk, 6),
        want,
        2,
    );
}

#[test]
fn every_message_to_or_from_a_home_on_another_server_takes_one_hop_more() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 3's home is server 1. The writer (2) and one sharer (3) are
    // clients of server 0, whose messages to and from the home server 0
    // forwards; the other sharers (6, 7) are server 1's own.
    let (chunk, home, writer) = (3, 1, 2);
    for c in [writer, 3, 6, 7] {
        let hops = if topology.server_of(c) == home { 0 } else { 2 };
        let want = b().up(c, home).down(home, c);
        s.expect(
            "MALLOC",
            c,
            malloc(ProtocolId::HomeMesi, chunk),
            want,
            2 + hops,
        );
    }
    // Read misses: 2, plus 2 for client 3 (its request and its grant are
    // forwarded).
    s.expect(
        "forwarded READ miss",
        3,
        read_sees(chunk, 0),
        b().up(3, home).down(home, 3),
        4,
    );
    for r in [6, 7] {
        s.expect(
            "READ miss",
            r,
            read_sees(chunk, 0),
            b().up(r, home).down(home, r),
            2,
        );
    }
    // A write with 3 other sharers is 2 + 2 * 3 = 8; the writer's request
    // and grant and sharer 3's invalidation and acknowledgement each take
    // one hop more: 8 + 4.
    let want = b()
        .up(writer, home)
        .down(home, 3)
        .up(3, home)
        .down(home, 6)
        .up(6, home)
        .down(home, 7)
        .up(7, home)
        .down(home, writer);
    s.expect(
        "forwarded WRITE with 3 other sharers",
        writer,
        write(chunk),
        want,
        8 + 4,
    );
    // The write-back, forwarded: 1 + 1.
    let want = b().up(writer, home);
    s.expect(
        "forwarded RELEASE of a write",
        writer,
        write_back(chunk, 1),
        want,
        2,
    );

    // Chunk 4's home is server 0, the writer's own; its one other sharer (6)
    // is server 1's: 2 + 2 * 1, plus one hop each way for the
    // invalidation and its acknowledgement.
    let (chunk, home) = (4, 0);
    for c in [writer, 6] {
        let hops = if topology.server_of(c) == home { 0 } else { 2 };
        let want = b().up(c, home).down(home, c);
        s.expect(
            "MALLOC",
            c,
            malloc(ProtocolId::HomeMesi, chunk),
            want,
            2 + hops,
        );
    }
    s.expect(
        "forwarded READ miss",
        6,
        read_sees(chunk, 0),
        b().up(6, home).down(home, 6),
        4,
    );
    let want = b()
        .up(writer, home)
        .down(home, 6)
        .up(6, home)
        .down(home, writer);
    s.expect(
        "WRITE with a forwarded sharer",
        writer,
        write(chunk),
        want,
        4 + 2,
    );
    s.expect(
        "RELEASE of a write",
        writer,
        write_back(chunk, 1),
        b().up(writer, home),
        1,
    );
    // Client 6 now writes it, with the writer's kept copy as the other
    // sharer: 2 + 2, plus one hop each way for 6's request and grant.
    let want = b()
        .up(6, home)
        .down(home, writer)
        .up(writer, home)
        .down(home, 6);
    s.expect(
        "forwarded WRITE with 1 other sharer",
        6,
        write(chunk),
        want,
        4 + 2,
    );
    let want = b().up(6, home);
    s.expect(
        "forwarded RELEASE of a write",
        6,
        write_back(chunk, 2),
        want,
        2,
    );
    s.expect(
        "READ miss",
        writer,
        read_sees(chunk, 2),
        b().up(writer, home).down(home, writer),
        2,
    );
}

#[test]
fn a_home_only_scope_costs_three_messages_and_one_more_each_way_per_hop() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 10's home is server 0, chunk 11's server 1; clients 2 and 3 are
    // server 0's, client 6 server 1's.
    let clients = [2, 3, 6];
    for (chunk, home) in [(10, 0), (11, 1)] {
        for c in clients {
            let hops = if topology.server_of(c) == home { 0 } else { 2 };
            let want = b().up(c, home).down(home, c);
            s.expect(
                "MALLOC",
                c,
                malloc(ProtocolId::HomeOnly, chunk),
                want,
                2 + hops,
            );
        }
    }
    for (chunk, home) in [(10, 0), (11, 1)] {
        let mut v = 0;
        for c in clients {
            // One more message per message when the home is on the other
            // server.
            let hop = u64::from(topology.server_of(c) != home);
            // Twice: the second read of an unchanged chunk is no hit, the
            // home is asked again (request, grant) and told of the end.
            for _ in 0..2 {
                let want = b().up(c, home).down(home, c);
                let check = move |cl: &Client| {
                    cl.acquire(chunk, Access::Read)?;
                    assert_eq!(value(cl, chunk), v, "home-only READ sees the last release");
                    Ok(())
                };
                s.expect("home-only READ", c, check, want, 2 + 2 * hop);
                let want = b().up(c, home);
                s.expect(
                    "home-only end of a read scope",
                    c,
                    release(chunk),
                    want,
                    1 + hop,
                );
            }
            // A write invalidates nobody, whoever read before: request and
            // grant, then the release.
            let want = b().up(c, home).down(home, c);
            s.expect("home-only WRITE", c, write(chunk), want, 2 + 2 * hop);
            v += 1;
            let want = b().up(c, home);
            s.expect(
                "home-only RELEASE of a write",
                c,
                write_back(chunk, v),
                want,
                1 + hop,
            );
        }
    }
}

#[test]
fn an_e_state_holder_writes_again_with_no_message_and_a_reader_elsewhere_costs_two_more() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 12's home is server 0; the writer (2) is its client, the
    // reader (6) is server 1's: its messages take one hop more each way.
    let (chunk, home, writer, reader) = (12, 0, 2, 6);
    for c in [writer, reader] {
        let hops = if topology.server_of(c) == home { 0 } else { 2 };
        let want = b().up(c, home).down(home, c);
        s.expect(
            "MALLOC",
            c,
            malloc(ProtocolId::MesiExclusive, chunk),
            want,
            2 + hops,
        );
    }
    // The first write: request and grant, then the write-back (1), which
    // leaves the writer holding the only copy, in E.
    let want = b().up(writer, home).down(home, writer);
    s.expect("WRITE, no sharer", writer, write(chunk), want, 2);
    s.expect(
        "RELEASE",
        writer,
        write_back(chunk, 1),
        b().up(writer, home),
        1,
    );
    // Every write after it by the sole holder opens with no message.
    for v in 2..5 {
        s.expect("WRITE by the E holder", writer, write(chunk), b(), 0);
        s.expect(
            "RELEASE",
            writer,
            write_back(chunk, v),
            b().up(writer, home),
            1,
        );
    }
    // A reader on the other server: its request, the home asks the holder
    // to share (it could be writing) and hears back, the grant: 2 more
    // than a MESI read miss. It sees the last write-back.
    let want = b()
        .up(reader, home)
        .down(home, writer)
        .up(writer, home)
        .down(home, reader);
    s.expect(
        "READ, the holder asked",
        reader,
        read_sees(chunk, 4),
        want,
        4 + 2,
    );
    // Both copies are Shared now: reads on both sides are hits, and the
    // holder's next write invalidates the reader's copy as in MESI.
    s.expect("READ hit", reader, read_sees(chunk, 4), b(), 0);
    s.expect("READ hit", writer, read_sees(chunk, 4), b(), 0);
    let want = b()
        .up(writer, home)
        .down(home, reader)
        .up(reader, home)
        .down(home, writer);
    s.expect("WRITE, one other sharer", writer, write(chunk), want, 4 + 2);
    s.expect(
        "RELEASE",
        writer,
        write_back(chunk, 5),
        b().up(writer, home),
        1,
    );
    s.expect("WRITE by the E holder", writer, write(chunk), b(), 0);
    s.expect(
        "RELEASE",
        writer,
        write_back(chunk, 6),
        b().up(writer, home),
        1,
    );
}

#[test]
fn an_update_release_pushes_the_version_to_the_readers_it_invalidated() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 14's home is server 0; the producer (2) and one consumer (3)
    // are its clients, the other consumer (6) is server 1's.
    let (chunk, home, producer) = (14, 0, 2);
    let consumers = [3, 6];
    for c in [producer, 3, 6] {
        let hops = if topology.server_of(c) == home { 0 } else { 2 };
        let want = b().up(c, home).down(home, c);
        s.expect(
            "MALLOC",
            c,
            malloc(ProtocolId::UpdateMesi, chunk),
            want,
            2 + hops,
        );
    }
    for &c in &consumers {
        let want = b().up(c, home).down(home, c);
        s.expect(
            "READ miss",
            c,
            read_sees(chunk, 0),
            want,
            2 + 2 * u64::from(topology.server_of(c) != home),
        );
    }
    update_rounds(&mut s, (chunk, home, producer), &consumers, 1..4);
}

/// Rounds of update-based MESI once every reader holds a copy: each write
/// invalidates the readers' copies, as in MESI; its release goes home, and
/// the home pushes it to them; their reads of it then cost no message.
fn update_rounds(
    s: &mut Stack<'_>,
    (chunk, home, producer): (u64, Rank, Rank),
    readers: &[Rank],
    versions: std::ops::Range<u64>,
) {
    let topology = s.topology;
    let b = || Budget::new(topology);
    let n = readers.len() as u64;
    let hops: u64 = readers
        .iter()
        .map(|&c| u64::from(topology.server_of(c) != home))
        .sum();
    for v in versions {
        let mut want = b().up(producer, home);
        for &c in readers {
            want = want.down(home, c).up(c, home);
        }
        let want = want.down(home, producer);
        s.expect(
            "WRITE, every reader a sharer",
            producer,
            write(chunk),
            want,
            2 + 2 * n + 2 * hops,
        );
        let mut want = b().up(producer, home);
        for &c in readers {
            want = want.down(home, c);
        }
        s.expect(
            "RELEASE, pushed",
            producer,
            write_back(chunk, v),
            want,
            1 + n + hops,
        );
        for &c in readers {
            s.expect("READ after the push", c, read_sees(chunk, v), b(), 0);
        }
    }
}

#[test]
fn multiple_writers_ask_for_the_version_and_release_a_diff() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 16's home is server 0: writer 2 is its client, writer 6 is
    // server 1's (one hop more each way). Each writes its own 8 bytes.
    let (chunk, home) = (16, 0);
    for c in [2, 6] {
        let hops = if topology.server_of(c) == home { 0 } else { 2 };
        let want = b().up(c, home).down(home, c);
        let alloc = malloc(ProtocolId::MultipleWriters, chunk);
        s.expect("MALLOC", c, alloc, want, 2 + hops);
    }
    let lane = |at: usize, v: u64| {
        move |c: &Client| {
            c.with_data_mut(chunk, |d| d[at..at + 8].copy_from_slice(&v.to_le_bytes()))?;
            c.release(chunk)
        }
    };
    let lanes = |want: [u64; 2]| {
        move |c: &Client| {
            c.acquire(chunk, Access::Read)?;
            let got = c.with_data(chunk, |d| {
                [0, 8].map(|at| u64::from_le_bytes(d[at..at + 8].try_into().unwrap()))
            })?;
            assert_eq!(got, want, "client {} reads the merged lanes", c.rank());
            c.release(chunk)
        }
    };
    for round in 1..4 {
        // A WRITE asks for the current version, which its twin is made
        // of; its release sends the diff.
        let want = b().up(2, home).down(home, 2);
        s.expect("WRITE", 2, write(chunk), want, 2);
        // The release: the diff, and the home's acknowledgement, which it
        // waits for.
        let want = b().up(2, home).down(home, 2);
        s.expect("RELEASE, a diff", 2, lane(0, round), want, 2);
        // A READWRITE asks the home for the current version first.
        let want = b().up(6, home).down(home, 6);
        s.expect(
            "READWRITE",
            6,
            move |c: &Client| c.acquire(chunk, Access::ReadWrite),
            want,
            4,
        );
        s.expect(
            "RELEASE, a diff",
            6,
            lane(8, 10 * round),
            b().up(6, home).down(home, 6),
            4,
        );
        // A READ asks every time, and sees both writers' bytes.
        let want = b().up(2, home).down(home, 2);
        s.expect("READ", 2, lanes([round, 10 * round]), want, 2);
    }
}

#[test]
fn a_barrier_pushes_what_was_read_after_it_last_time_with_one_message_per_chunk() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunks 14 and 16 are homed on server 0, chunk 15 on server 1, and
    // barrier 4's coordinator is server 0. The writer (2) is server 0's
    // client, like one reader (3); the other reader (6) is server 1's.
    let chunks = [14, 15, 16];
    let (writer, readers, coordinator) = (2, [3, 6], 0);
    let home = |chunk: u64| (chunk % 2) as Rank;
    for c in [writer, 3, 6] {
        for chunk in chunks {
            let hops = 2 * u64::from(topology.server_of(c) != home(chunk));
            let want = b().up(c, home(chunk)).down(home(chunk), c);
            s.expect(
                "MALLOC",
                c,
                malloc(ProtocolId::LearnedMesi, chunk),
                want,
                2 + hops,
            );
        }
    }
    // A barrier reached for the first time pushes nothing: what it costs
    // alone (the coordinator's messages) is measured here.
    let barrier = |c: &Client| c.barrier(4, 1);
    let alone: Vec<Counts> = readers.iter().map(|&r| s.run(r, barrier)).collect();
    // After it, each reader misses on the three chunks, learning them.
    for &r in &readers {
        for chunk in chunks {
            let hops = 2 * u64::from(topology.server_of(r) != home(chunk));
            let want = b().up(r, home(chunk)).down(home(chunk), r);
            s.expect("READ miss", r, read_sees(chunk, 0), want, 2 + hops);
        }
    }
    for v in 1..4 {
        // The writer invalidates both readers' copies of each chunk (their
        // first copies, read on a miss, are kept; the pushed ones were
        // dropped: then the write costs 2).
        for chunk in chunks {
            let hops = |c: Rank| u64::from(topology.server_of(c) != home(chunk));
            // An invalidation and its answer per reader holding a copy.
            let invals: u64 = if v == 1 {
                readers.iter().map(|&r| 2 + 2 * hops(r)).sum()
            } else {
                0
            };
            let got = s.run(writer, write(chunk));
            assert_eq!(
                got.total(),
                2 + 2 * hops(writer) + invals,
                "WRITE of chunk {chunk}, round {v}: {got:?}"
            );
            s.run(writer, write_back(chunk, v));
        }
        for (&r, alone) in readers.iter().zip(&alone) {
            // The barrier as before, its arrival listing the three chunks;
            // as the round ends the coordinator asks the other home for its
            // chunk (one message), and each home pushes each chunk (one
            // message, a hop more from a home on another server than the
            // reader's): 1 + 3 + 1 or 2, against 6 + 2 or 4 for three READ
            // misses.
            let mut want = Budget {
                topology: &topology,
                hops: alone.clone(),
            };
            want.hop(coordinator, 1);
            for chunk in chunks {
                want = want.down(home(chunk), r);
            }
            let server = topology.server_of(r);
            let cross = chunks.iter().filter(|&&c| home(c) != server).count() as u64;
            s.expect(
                "a barrier whose round pushes 3 chunks of 2 homes",
                r,
                barrier,
                want,
                alone.total() + 1 + 3 + cross,
            );
            // The program's READs are hits, and see the writer's release;
            // each pushed copy serves that one read and is dropped at its
            // release (one message home), so the next write invalidates
            // nobody.
            for chunk in chunks {
                let hops = u64::from(topology.server_of(r) != home(chunk));
                s.expect(
                    "READ of a pushed chunk, then its drop",
                    r,
                    read_sees(chunk, v),
                    b().up(r, home(chunk)),
                    1 + hops,
                );
            }
        }
    }
    assert_eq!(
        s.clients[6 - 2].learned_pushes(),
        9,
        "reader 6 took 3 pushes in each of 3 rounds"
    );
}

/// The protocol client `rank` runs `chunk` under now.
fn running(s: &Stack<'_>, rank: Rank, chunk: u64) -> Option<ProtocolId> {
    s.clients[rank as usize - 2].running_protocol(chunk)
}

#[test]
fn an_adaptive_chunk_switches_while_a_reader_holds_a_scope_then_costs_what_update_costs() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 20's home is server 0. Producer 2 writes it; readers 3 to 7
    // (6 and 7 are server 1's) read every version.
    let (chunk, home, producer) = (20, 0, 2);
    let readers = [3, 4, 5, 6, 7];
    for c in [producer].iter().chain(&readers) {
        s.run(*c, malloc(ProtocolId::Adaptive, chunk));
        assert_eq!(running(&s, *c, chunk), Some(ProtocolId::HomeMesi));
    }
    // Five rounds of MESI: a write request and five read misses each (30
    // requests, 5 of them writes: the home has not chosen yet).
    for v in 1..=5 {
        s.run(producer, write(chunk));
        s.run(producer, write_back(chunk, v));
        for &r in &readers {
            s.run(r, read_sees(chunk, v));
        }
    }
    s.run(producer, write(chunk));
    s.run(producer, write_back(chunk, 6));
    // The 32nd request, reader 3's miss, makes the home choose update (one
    // writer, readers miss after its writes). The read is granted as in
    // MESI; the switch then goes out to every client, and reader 3, inside
    // its read scope, keeps it for the scope's end.
    s.expect(
        "READ miss, then the switch to the others",
        3,
        |c: &Client| {
            c.acquire(chunk, Access::Read)?;
            assert_eq!(value(c, chunk), 6);
            Ok(())
        },
        {
            let mut want = b().up(3, home).down(home, 3).down(home, 3);
            for c in [producer, 4, 5, 6, 7] {
                want = want.down(home, c).up(c, home);
            }
            want
        },
        2 + 1 + 5 * 2 + 2 * 2,
    );
    assert_eq!(running(&s, 3, chunk), Some(ProtocolId::HomeMesi));
    assert_eq!(running(&s, 6, chunk), Some(ProtocolId::UpdateMesi));
    // The read scope's end acknowledges the switch, which completes.
    s.expect(
        "RELEASE of the read scope, acknowledging",
        3,
        release(chunk),
        b().up(3, home),
        1,
    );
    for c in [producer].iter().chain(&readers) {
        assert_eq!(running(&s, *c, chunk), Some(ProtocolId::UpdateMesi));
    }
    // Nobody holds a copy now: one round of misses, then update's costs.
    s.run(producer, write(chunk));
    s.run(producer, write_back(chunk, 7));
    for &r in &readers {
        s.run(r, read_sees(chunk, 7));
    }
    update_rounds(&mut s, (chunk, home, producer), &readers, 8..11);
    let switches: u64 = s.clients.iter().map(Client::protocol_switches).sum();
    assert_eq!(switches, 6, "each of the six clients switched once");
}

#[test]
fn a_client_that_missed_the_switch_is_told_at_its_first_request() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 22's home is server 0: writer 2 writes it again and again and
    // nobody reads it, so after 8 writes it moves to MESI with E. Client 7
    // (server 1's) allocated it and says nothing until then.
    let (chunk, home, writer, late) = (22, 0, 2, 7);
    for c in [writer, late] {
        s.run(c, malloc(ProtocolId::Adaptive, chunk));
    }
    for v in 1..=8 {
        s.run(writer, write(chunk));
        s.run(writer, write_back(chunk, v));
    }
    assert_eq!(running(&s, writer, chunk), Some(ProtocolId::MesiExclusive));
    assert_eq!(running(&s, late, chunk), Some(ProtocolId::HomeMesi));
    // Its first write under E asks (the switch left it no copy); from then
    // on it holds the only copy, and its write scopes open with no message.
    let want = b().up(writer, home).down(home, writer);
    s.expect("WRITE after the switch", writer, write(chunk), want, 2);
    s.run(writer, write_back(chunk, 9));
    s.expect("WRITE in E", writer, write(chunk), b(), 0);
    s.expect(
        "RELEASE",
        writer,
        write_back(chunk, 10),
        b().up(writer, home),
        1,
    );
    // The late client's read, in epoch 0, is answered with the switch; it
    // acknowledges, asks again under MESI with E, and the home asks the
    // holder to share first. Each message of the late client's takes two
    // hops (its server forwards it).
    let want = b()
        .up(late, home)
        .down(home, late)
        .up(late, home)
        .up(late, home)
        .down(home, writer)
        .up(writer, home)
        .down(home, late);
    s.expect("READ in an old epoch", late, read_sees(chunk, 10), want, 12);
    assert_eq!(running(&s, late, chunk), Some(ProtocolId::MesiExclusive));
}

#[test]
fn an_adaptive_chunk_moves_its_home_to_the_server_of_the_process_that_writes_it() {
    let topology = topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 24's first home is server 0; only client 6 (server 1's) writes
    // it: each of its messages takes a hop between the servers.
    let (chunk, writer, reader) = (24, 6, 3);
    for c in [writer, reader] {
        s.run(c, malloc(ProtocolId::Adaptive, chunk));
    }
    let far = b().up(writer, 0).down(0, writer);
    s.expect("WRITE at the first home", writer, write(chunk), far, 4);
    s.run(writer, write_back(chunk, 1));
    for v in 2..=8 {
        s.run(writer, write(chunk));
        s.run(writer, write_back(chunk, v));
    }
    // The 8th write chose MESI with E and the writer's server; at its
    // release the chunk went there.
    assert_eq!(running(&s, writer, chunk), Some(ProtocolId::MesiExclusive));
    assert_eq!(s.servers[0].0.moved_away_to(chunk), Some(1));
    let near = b().up(writer, 1).down(1, writer);
    s.expect("WRITE at the new home", writer, write(chunk), near, 2);
    s.expect(
        "RELEASE",
        writer,
        write_back(chunk, 9),
        b().up(writer, 1),
        1,
    );
    s.expect("WRITE in E", writer, write(chunk), b(), 0);
    s.run(writer, write_back(chunk, 10));
    // The reader (server 0's) still sends to the first home, which
    // forwards: told of the switch, it asks again; the home asks the
    // holder to share first.
    let want = b()
        .up(reader, 1)
        .down(1, reader)
        .up(reader, 1)
        .up(reader, 1)
        .down(1, writer)
        .up(writer, 1)
        .down(1, reader);
    s.expect(
        "READ through the first home",
        reader,
        read_sees(chunk, 10),
        want,
        12,
    );
}

/// A subscriber that takes nothing in while a writer releases ten times: its
/// server queues the first notifications, then, the subscriber being behind
/// ([`crate::transport::Sender::backlog`]: three wait for it in the
/// in-process network), holds back one, the newest, instead of queueing the
/// others (`server/notices.rs`); once the subscriber takes in what waits, it
/// gets that one, and its handler ends on the last version, having never
/// gone back.
#[test]
fn a_subscriber_that_is_behind_costs_one_held_version_and_hears_the_newest() {
    use crate::client::Event;
    use std::sync::Mutex;
    let topology = topology();
    let mut s = Stack::new(&topology);
    // Chunk 20's home is server 0, the server of both clients.
    let (chunk, writer, subscriber) = (20, 2, 3);
    for c in [writer, subscriber] {
        s.run(c, malloc(ProtocolId::HomeMesi, chunk));
    }
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let log = Arc::clone(&seen);
    s.run(subscriber, move |c: &Client| {
        c.subscribe(chunk, true, move |_, event| {
            let Event::Chunk { version, data, .. } = event else {
                return Err("a signal".into());
            };
            let data = data.as_ref().ok_or("no data")?;
            // Each write-back writes its version number: the bytes are the
            // version's.
            assert_eq!(u64::from_le_bytes(data[..8].try_into().unwrap()), *version);
            log.lock().unwrap().push(*version);
            Ok(())
        })
    });
    s.asleep = Some(subscriber);
    for v in 1..=10 {
        s.run(writer, write(chunk));
        s.run(writer, write_back(chunk, v));
    }
    let waiting = s.net.in_flight_to(subscriber);
    let held = &s.servers[0].0.st.held;
    assert_eq!(waiting, 3, "the notifications queued before the backlog");
    assert_eq!(held.count(), 7, "the other seven were held back");
    assert!(held.any());
    // It wakes and takes in what waits (its counters, which count what
    // reached it while it slept, are not compared with this call's wire).
    let log = Arc::clone(&seen);
    s.run(subscriber, move |c: &Client| {
        for _ in 0..100_000 {
            c.try_recv()?;
            c.run_pending_handlers()?;
            if log.lock().unwrap().last() == Some(&10) {
                return Ok(());
            }
            std::thread::yield_now();
        }
        panic!(
            "the newest version was never told: {:?}",
            log.lock().unwrap()
        );
    });
    s.asleep = None;
    assert!(
        !s.servers[0].0.st.held.any(),
        "nothing is held once it caught up"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert!(
        seen.len() <= 4,
        "at most the three queued and the held one: {seen:?}"
    );
}

/// [`TOPOLOGY`] with every home's versions on two servers: chunk `c`'s
/// home is server `c % 2`, its backup the other.
fn replicated_topology() -> Arc<Topology> {
    Arc::new(
        Topology::parse(TOPOLOGY, "two servers")
            .and_then(|t| t.with_replication(2))
            .expect("a valid topology"),
    )
}

/// Replicated homes (`server/replicas.rs`): each version a home applies
/// goes to its backup (the next server) and is acknowledged, and only then
/// does the home answer: a MALLOC costs the replica and its acknowledgement
/// more, a release of a write scope those two and the writer's `Durable`
/// (3 more: the release now returns once both servers hold the version).
/// Reads and write grants, which apply no version, cost what they cost
/// without replication.
#[test]
fn a_replicated_home_sends_each_version_to_its_backup_before_it_answers() {
    let topology = replicated_topology();
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    // Chunk 0: home 0, backup 1; chunk 1: home 1, backup 0. Client 2 is
    // server 0's.
    for (chunk, home, backup) in [(0, 0, 1), (1, 1, 0)] {
        let hops = if home == 0 { 0 } else { 2 };
        let mut want = b().up(2, home);
        want.hop(home, backup);
        want.hop(backup, home);
        let want = want.down(home, 2);
        let first = malloc(ProtocolId::HomeMesi, chunk);
        s.expect("replicated MALLOC", 2, first, want, 4 + hops);
        let (version, bytes, size, protocol) = s.servers[backup as usize]
            .0
            .replica(chunk)
            .expect("the backup knows the new chunk");
        assert_eq!((version, bytes, size), (0, None, SIZE as u64));
        assert_eq!(protocol, ProtocolId::HomeMesi);

        let want = b().up(2, home).down(home, 2);
        s.expect("WRITE, replicated", 2, write(chunk), want, 2 + hops);
        let mut want = b().up(2, home);
        want.hop(home, backup);
        want.hop(backup, home);
        let want = want.down(home, 2);
        s.expect(
            "RELEASE of a write, replicated",
            2,
            write_back(chunk, 7 + chunk),
            want,
            4 + hops,
        );
        let (version, bytes, _, _) = s.servers[backup as usize].0.replica(chunk).expect("kept");
        let bytes = bytes.expect("a written version has bytes");
        assert_eq!(version, 1, "the backup holds the release");
        assert_eq!(bytes[..8], (7 + chunk).to_le_bytes());
        // A reader elsewhere: its MALLOC of the existing chunk applies no
        // version, and its read costs what it costs without replication.
        let hops = if home == 1 { 0 } else { 2 };
        let want = b().up(6, home).down(home, 6);
        let again = malloc(ProtocolId::HomeMesi, chunk);
        s.expect(
            "MALLOC of an existing chunk, replicated",
            6,
            again,
            want,
            2 + hops,
        );
        let want = b().up(6, home).down(home, 6);
        let read = read_sees(chunk, 7 + chunk);
        s.expect("READ miss, replicated", 6, read, want, 2 + hops);
    }
    // A chunk whose home a backup could not rebuild is refused, with why.
    let refused = s.run(2, |c: &Client| {
        let e = c
            .malloc_lst(ProtocolId::MultipleWriters, &[4], &[SIZE])
            .expect_err("a diffing chunk cannot be replicated");
        assert!(e.to_string().contains("refused"), "{e}");
        Ok(())
    });
    assert_eq!(refused.total(), 2, "the request and its refusal");
}

/// While a replicated home's backup has not acknowledged a version, nothing
/// about that chunk leaves its home: the writer's RELEASE does not return
/// and another client's read of the chunk is not granted (it would see a
/// version only one server holds). Once the backup steps, both complete and
/// the reader sees the release.
#[test]
fn a_replicated_release_and_the_reads_after_it_wait_for_the_backup() {
    let topology = replicated_topology();
    let mut s = Stack::new(&topology);
    // Chunk 0: home server 0, backup server 1. Clients 2 and 3 are server
    // 0's: nothing they do needs server 1 but the replicas.
    s.run(2, malloc(ProtocolId::HomeMesi, 0));
    s.run(3, malloc(ProtocolId::HomeMesi, 0));
    s.run(2, write(0));
    let Stack {
        net,
        servers,
        clients,
        ..
    } = &mut s;
    let (writer, reader) = (&clients[0], &clients[1]);
    std::thread::scope(|sc| {
        let release = sc.spawn(move || write_back(0, 9)(writer));
        let read = sc.spawn(move || read_sees(0, 9)(reader));
        // Only server 0 steps: the backup holds back the acknowledgement.
        for _ in 0..2_000 {
            Stack::round(net, &mut servers[..1], clients, [Some(2), Some(3)]);
            std::thread::yield_now();
        }
        let early = (release.is_finished(), read.is_finished());
        // Then everyone steps (before any assertion: the calls must end
        // for the threads to be joined).
        while !(release.is_finished() && read.is_finished()) {
            Stack::round(net, servers, clients, [Some(2), Some(3)]);
            std::thread::yield_now();
        }
        let (released, read) = (release.join(), read.join());
        assert!(
            !early.0,
            "the RELEASE returned before the backup held the version"
        );
        assert!(!early.1, "a read was granted a version only its home held");
        released.unwrap().expect("the release");
        read.unwrap().expect("the read");
    });
    let (version, bytes, _, _) = s.servers[1].0.replica(0).expect("kept");
    assert_eq!(version, 1);
    assert_eq!(bytes.expect("bytes")[..8], 9u64.to_le_bytes());
}

/// Steps server 0 alone (server 1 is dead) and the clients but `busy`,
/// while `op` runs on client `rank`, then until the clients are quiet.
fn with_server_1_dead<R: Send>(
    s: &mut Stack<'_>,
    rank: Rank,
    op: impl FnOnce(&Client) -> R + Send,
) -> R {
    let Stack {
        net,
        servers,
        clients,
        ..
    } = s;
    let first = servers.len() as Rank;
    let dead = Some(1);
    let r = std::thread::scope(|sc| {
        let client = &clients[(rank - first) as usize];
        let call = sc.spawn(move || op(client));
        while !call.is_finished() {
            Stack::round_without(net, servers, clients, [Some(rank), None], dead);
            std::thread::yield_now();
        }
        call.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    // What the call set going (nothing reaches server 1 any more).
    let last = first + clients.len() as Rank;
    for _ in 0..SETTLE_ROUNDS {
        let moved = Stack::round_without(net, servers, clients, [None, None], dead);
        if !moved && (first..last).all(|c| net.in_flight_to(c) == 0) {
            break;
        }
    }
    r
}

/// A run with replicated homes and recovery loses server 1 (the test stops
/// stepping it and tells the seed, as its watch would): server 0, the
/// backup of every chunk server 1 homed and its stand-in, takes those
/// chunks over at their last released version and serves server 1's
/// clients. A write scope a client held on such a chunk ends without
/// publishing; the copies and requests the lost home knew of are dropped;
/// both clients read the chunk from its new home, and a client of the lost
/// server writes on through the stand-in.
#[test]
fn a_lost_servers_chunks_and_clients_go_to_its_backup() {
    let topology = replicated_topology();
    let mut s = Stack::new(&topology);
    for (server, _) in s.servers.iter_mut() {
        server.recover(super::recovery::RunRecovery::unwatched());
    }
    // Chunk 1: home server 1, backup server 0. Client 6 is server 1's,
    // client 2 server 0's.
    for c in [2, 6] {
        s.run(c, malloc(ProtocolId::HomeMesi, 1));
    }
    s.run(6, write(1));
    s.run(6, write_back(1, 41));
    s.run(2, read_sees(1, 41));
    // Client 6 opens a write scope, and writes in it, when server 1 dies.
    s.run(6, write(1));
    s.clients[4]
        .with_data_mut(1, |d| d[..8].copy_from_slice(&99u64.to_le_bytes()))
        .unwrap();
    {
        let (seed, ep) = &mut s.servers[0];
        seed.server_lost(ep, 1);
    }
    // The news reaches both clients.
    for c in [2, 6] {
        with_server_1_dead(&mut s, c, |c| c.try_recv().map(|_| ())).expect("the news");
    }
    assert_eq!(
        s.clients[4].server(),
        0,
        "client 6 moved to server 1's stand-in"
    );
    // Its write scope ends without publishing: its home went with it.
    let ended = with_server_1_dead(&mut s, 6, |c| c.release(1));
    assert!(
        matches!(&ended, Err(crate::error::SatError::ProcessLost(why)) if why.contains("nothing was published")),
        "{ended:?}"
    );
    // Both read the last released version from the new home.
    for c in [2, 6] {
        with_server_1_dead(&mut s, c, read_sees(1, 41)).expect("read from the new home");
    }
    // And write on: with no other server left, a release needs no backup.
    with_server_1_dead(&mut s, 6, write(1)).expect("WRITE at the new home");
    with_server_1_dead(&mut s, 6, write_back(1, 42)).expect("RELEASE at the new home");
    with_server_1_dead(&mut s, 2, read_sees(1, 42)).expect("the new version");
    assert!(s.servers[0].0.st.homes.contains_key(&1));
}
