//! Scale by simulation: a thousand processes over the in-process transport.
//!
//! The real clients and servers of runs of 1,024 processes, with 1 to 64 of
//! them servers, each client's operations counted on the wire as in the
//! parent module. What must hold at every size:
//! - **messages per operation do not grow with the number of servers**:
//!   every operation costs exactly its protocol's messages, each laid on at
//!   most two hops (the client's server, then the home), so no path
//!   broadcasts to servers or scans clients; the mean per operation is
//!   printed for each size;
//! - **homes are balanced**: the chunks the clients allocate are spread over
//!   the servers' homes, and so are the messages the servers handle.
//!
//! The workload is the access pattern of the paper's applications: every
//! process allocates its own chunk (ids given out in a block, as a program
//! numbers its buffers), writes it, reads a neighbour's, and writes its own
//! again, which invalidates the neighbour's copy.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{malloc, read_sees, write, write_back, Budget, Stack};
use crate::protocol::ProtocolId;
use crate::topology::Topology;
use crate::transport::Rank;

const PROCESSES: u32 = 1024;

/// What the clients of one run cost, and where it landed.
struct Measured {
    servers: u32,
    operations: u64,
    messages: u64,
    /// Per server: the chunks its homes hold.
    homes: Vec<f64>,
    /// Per server: the messages it received.
    received: Vec<f64>,
}

impl Measured {
    fn per_operation(&self) -> f64 {
        self.messages as f64 / self.operations as f64
    }
}

/// Max over mean: 1.0 is perfectly even.
fn imbalance(values: &[f64]) -> f64 {
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    values.iter().copied().fold(0.0, f64::max) / mean
}

/// One run of `PROCESSES` processes, `servers` of them servers, each client
/// through the workload; every operation's messages are checked against its
/// rule.
fn run(servers: u32) -> Measured {
    let topology = Arc::new(
        Topology::service(servers, PROCESSES - servers).expect("a topology of 1,024 processes"),
    );
    let mut s = Stack::new(&topology);
    let b = || Budget::new(&topology);
    let clients: Vec<Rank> = topology.clients();
    let n = clients.len() as u64;
    // Client k owns one chunk of 0..n, given out in an order that knows
    // nothing of the topology (37 is prime to every n here), so homes fall
    // on the client's own server or another as in a real program. The
    // home of chunk c is server c % servers.
    let chunk_of = |k: usize| (k as u64 * 37 + 11) % n;
    let home_of = |chunk: u64| (chunk % u64::from(servers)) as Rank;
    let neighbour = |k: usize| (k + 1) % clients.len();
    let mut operations = 0u64;
    let mut messages = 0u64;
    let mut received = vec![0.0; servers as usize];
    let mut tally = |counts: &super::Counts| {
        operations += 1;
        messages += counts.total();
        for (r, got) in received.iter_mut().enumerate() {
            *got += counts.received_by(r as Rank) as f64;
        }
    };
    let mut step = |s: &mut Stack<'_>, what: &str, c: Rank, op, want: Budget<'_>| {
        let got = s.run(c, op);
        assert_eq!(
            got.0, want.hops.0,
            "{servers} servers, client {c}, {what}: the messages per (sender, receiver)"
        );
        tally(&got);
    };
    for (k, &c) in clients.iter().enumerate() {
        let (chunk, home) = (chunk_of(k), home_of(chunk_of(k)));
        let want = b().up(c, home).down(home, c);
        step(
            &mut s,
            "MALLOC",
            c,
            Box::new(malloc(ProtocolId::HomeMesi, chunk)) as Op,
            want,
        );
        let want = b().up(c, home).down(home, c);
        step(&mut s, "WRITE, no sharer", c, Box::new(write(chunk)), want);
        step(
            &mut s,
            "RELEASE",
            c,
            Box::new(write_back(chunk, 1)),
            b().up(c, home),
        );
    }
    // Every neighbour's chunk is at version 1 now: each client looks it up
    // and misses on it.
    for (k, &c) in clients.iter().enumerate() {
        let other = chunk_of(neighbour(k));
        let home = home_of(other);
        let lookup = move |client: &crate::client::Client| {
            client.lookup(other, std::time::Duration::ZERO).map(|_| ())
        };
        let want = b().up(c, home).down(home, c);
        step(&mut s, "LOOKUP", c, Box::new(lookup), want);
        let want = b().up(c, home).down(home, c);
        step(&mut s, "READ miss", c, Box::new(read_sees(other, 1)), want);
    }
    // Its own chunk now has one other sharer: the client before it, whose
    // copy the home invalidates before it grants.
    for (k, &c) in clients.iter().enumerate() {
        let (chunk, home) = (chunk_of(k), home_of(chunk_of(k)));
        let sharer = clients[(k + clients.len() - 1) % clients.len()];
        let want = b()
            .up(c, home)
            .down(home, sharer)
            .up(sharer, home)
            .down(home, c);
        step(
            &mut s,
            "WRITE, one other sharer",
            c,
            Box::new(write(chunk)),
            want,
        );
        step(
            &mut s,
            "RELEASE",
            c,
            Box::new(write_back(chunk, 2)),
            b().up(c, home),
        );
    }
    let homes = s
        .servers
        .iter()
        .map(|(server, _)| server.st.homes.len() as f64)
        .collect();
    assert_eq!(operations, n * 7);
    Measured {
        servers,
        operations,
        messages,
        homes,
        received,
    }
}

type Op = Box<dyn FnOnce(&crate::client::Client) -> crate::error::SatResult<()> + Send>;

#[test]
fn messages_per_operation_stay_constant_and_homes_balanced_up_to_1024_processes() {
    let mut table = BTreeMap::new();
    for servers in [1, 4, 16, 64] {
        let m = run(servers);
        let (homes, load) = (imbalance(&m.homes), imbalance(&m.received));
        println!(
            "{PROCESSES} processes, {:>2} servers: {} operations, {:.2} messages per \
             operation; homes max/mean {homes:.2}, server messages max/mean {load:.2}",
            m.servers,
            m.operations,
            m.per_operation()
        );
        assert_eq!(
            m.homes.iter().sum::<f64>(),
            f64::from(PROCESSES - servers),
            "every allocated chunk has one home"
        );
        assert!(
            homes <= 1.1 && load <= 1.1,
            "{servers} servers: homes {:?}, messages received {:?}",
            m.homes,
            m.received
        );
        table.insert(servers, m.per_operation());
    }
    // Each message takes at most one hop more than on one server, whatever
    // the number of servers; with 4 servers already 3 in 4 homes are
    // elsewhere, so from there on the mean may only creep towards that.
    let one = table[&1];
    for (&servers, &mean) in &table {
        assert!(
            mean <= 2.0 * one,
            "{servers} servers: {mean:.2} messages per operation, more than twice one server's \
             {one:.2}"
        );
    }
    assert!(
        table[&64] <= table[&4] * 4.0 / 3.0,
        "64 servers cost {:.2} messages per operation against 4 servers' {:.2}: a path grows \
         with the number of servers",
        table[&64],
        table[&4]
    );
}
