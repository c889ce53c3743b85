//! The in-process transport for deterministic protocol tests.
//!
//! [`MemNetwork::new`] builds one [`MemTransport`] endpoint per simulated rank;
//! a test drives all of them from one thread, calling `send` and `poll` in an
//! order it chooses. The endpoints honour the contract of the libfabric
//! transport:
//!
//! - delivery is reliable: every message sent is delivered exactly once,
//!   provided its receiver keeps polling;
//! - messages from one sender to one receiver are delivered in send order;
//! - `src` in [`Received`] is the sending endpoint's rank, set by the network;
//! - the handler given to `poll` may send through the lent [`Sender`].
//!
//! A [`Schedule`] decides when a message becomes deliverable and, among
//! senders with a deliverable message, which one goes first. Under
//! [`Schedule::Random`] the choice comes from a seeded generator owned by the
//! network, so the same seed and the same sequence of calls give the same
//! deliveries on every machine and every build.
//!
//! Time is counted per receiver in polls: each `poll` call advances that
//! receiver's clock by one and then delivers every message that is
//! deliverable at the new time. A message sent while a `poll` runs (by its
//! handler, even to the polling rank itself) is at the earliest deliverable at
//! the receiver's next poll, so one `poll` always terminates.
//!
//! This transport exists for tests: it copies header and payload bytes into
//! buffers it allocates per message, unlike the libfabric transport, which
//! must not allocate on the steady-state path.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Payload, Rank, Received, Sender, Transport, TransportError, MAX_HEADER};

/// When the network delivers messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Deliver every message at the receiver's next poll, senders in rank
    /// order (all deliverable messages of the lowest sender rank first, then
    /// the next sender, ...): fully predictable.
    Immediate,
    /// Delay and reorder under a seed: each message becomes deliverable after
    /// a random number of the receiver's polls in `0..=max_delay_polls` (0:
    /// its next poll); among senders with a deliverable message the next one
    /// is picked at random; per-pair FIFO is kept (a message that becomes
    /// deliverable early still waits for the earlier messages of its pair).
    /// Same seed and same calls give the same deliveries.
    Random { seed: u64, max_delay_polls: u32 },
}

/// The shared state of a set of in-process endpoints, and the counters tests
/// inspect. Cloning gives another handle to the same network.
#[derive(Clone)]
pub struct MemNetwork {
    shared: Arc<Mutex<Net>>,
}

/// One endpoint of a [`MemNetwork`]: rank `i` of the vector returned by
/// [`MemNetwork::new`].
pub struct MemTransport {
    rank: Rank,
    size: u32,
    shared: Arc<Mutex<Net>>,
    /// Messages this endpoint sent.
    sent: u64,
}

/// A message waiting in the network.
struct Message {
    /// The receiver's clock value from which it may be delivered.
    ready_at: u64,
    header: Vec<u8>,
    payload: Body,
}

/// Payload bytes held by the network: a copy, or a reference to a shared
/// buffer (kept alive until delivery, as the libfabric transport does).
enum Body {
    Copied(Vec<u8>),
    Shared(Arc<[u8]>),
}

impl Body {
    fn bytes(&self) -> &[u8] {
        match self {
            Body::Copied(b) => b,
            Body::Shared(b) => b,
        }
    }
}

struct Net {
    size: u32,
    schedule: Schedule,
    rng: SplitMix64,
    /// `queues[dst][src]`: the messages from `src` to `dst`, in send order.
    /// Only pairs with a message waiting have an entry, in sender order, so a
    /// poll costs what is waiting for it, not the network's size (the scale
    /// simulation runs a thousand ranks).
    queues: Vec<BTreeMap<Rank, VecDeque<Message>>>,
    /// The ranks whose `queues` entry is not empty.
    with_mail: BTreeSet<Rank>,
    /// Per receiver: the number of `poll` calls it has made.
    clocks: Vec<u64>,
    /// Messages sent since the last counter reset, per (src, dst) pair that
    /// sent any.
    sent: HashMap<(Rank, Rank), u64>,
    in_flight: usize,
    /// Per rank: the chunks posted to its inbox, in post order, each once
    /// (`segment/inbox.rs`; every endpoint has one, as every process of a
    /// host does).
    inboxes: Vec<Vec<u64>>,
}

impl Net {
    fn check_rank(&self, rank: Rank) {
        assert!(
            rank < self.size,
            "rank {rank} is not part of this network of {} ranks",
            self.size
        );
    }

    fn enqueue(
        &mut self,
        src: Rank,
        dst: Rank,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<(), TransportError> {
        if dst >= self.size {
            return Err(TransportError::UnknownRank {
                dest: dst,
                size: self.size,
            });
        }
        if header.len() > MAX_HEADER {
            return Err(TransportError::HeaderTooLarge { len: header.len() });
        }
        let delay = match self.schedule {
            Schedule::Immediate => 0,
            Schedule::Random {
                max_delay_polls, ..
            } => self.rng.below(u64::from(max_delay_polls) + 1),
        };
        // The receiver's next poll brings its clock to `clocks[dst] + 1`.
        let ready_at = self.clocks[dst as usize] + 1 + delay;
        let payload = match payload {
            Payload::None => Body::Copied(Vec::new()),
            Payload::Copy(b) => Body::Copied(b.to_vec()),
            Payload::Shared(b) => Body::Shared(Arc::clone(b)),
        };
        self.with_mail.insert(dst);
        self.queues[dst as usize]
            .entry(src)
            .or_default()
            .push_back(Message {
                ready_at,
                header: header.to_vec(),
                payload,
            });
        *self.sent.entry((src, dst)).or_default() += 1;
        self.in_flight += 1;
        Ok(())
    }

    /// Removes the next message `dst` may receive at time `now`, if any.
    fn next_deliverable(&mut self, dst: Rank, now: u64) -> Option<(Rank, Message)> {
        let queues = &mut self.queues[dst as usize];
        let ready = |q: &VecDeque<Message>| q.front().is_some_and(|m| m.ready_at <= now);
        // Senders in rank order, as the schedules are defined.
        let src = match self.schedule {
            Schedule::Immediate => queues.iter().find(|(_, q)| ready(q)).map(|(&s, _)| s)?,
            Schedule::Random { .. } => {
                let count = queues.values().filter(|q| ready(q)).count();
                if count == 0 {
                    return None;
                }
                let pick = self.rng.below(count as u64) as usize;
                queues
                    .iter()
                    .filter(|(_, q)| ready(q))
                    .nth(pick)
                    .map(|(&src, _)| src)?
            }
        };
        let queue = queues.get_mut(&src)?;
        let message = queue.pop_front()?;
        if queue.is_empty() {
            queues.remove(&src);
            if queues.is_empty() {
                self.with_mail.remove(&dst);
            }
        }
        self.in_flight -= 1;
        Some((src, message))
    }
}

impl MemNetwork {
    /// A network of `size` ranks; endpoint `i` of the returned vector has
    /// rank `i`.
    pub fn new(size: u32, schedule: Schedule) -> (MemNetwork, Vec<MemTransport>) {
        let n = size as usize;
        let seed = match schedule {
            Schedule::Immediate => 0,
            Schedule::Random { seed, .. } => seed,
        };
        let net = Net {
            size,
            schedule,
            rng: SplitMix64::new(seed),
            queues: (0..n).map(|_| BTreeMap::new()).collect(),
            with_mail: BTreeSet::new(),
            clocks: vec![0; n],
            sent: HashMap::new(),
            in_flight: 0,
            inboxes: vec![Vec::new(); n],
        };
        let shared = Arc::new(Mutex::new(net));
        let endpoints = (0..size)
            .map(|rank| MemTransport {
                rank,
                size,
                shared: Arc::clone(&shared),
                sent: 0,
            })
            .collect();
        (MemNetwork { shared }, endpoints)
    }

    fn lock(&self) -> MutexGuard<'_, Net> {
        lock(&self.shared)
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.lock().size
    }

    /// The schedule the network was built with.
    pub fn schedule(&self) -> Schedule {
        self.lock().schedule
    }

    /// Messages sent (successfully) since creation or the last
    /// [`reset_counters`](Self::reset_counters), over all pairs.
    pub fn messages_sent(&self) -> u64 {
        self.lock().sent.values().sum()
    }

    /// Messages sent from `src` to `dst` since creation or the last reset.
    ///
    /// # Panics
    /// If either rank is outside the network (a mistake in the test).
    pub fn messages_between(&self, src: Rank, dst: Rank) -> u64 {
        let net = self.lock();
        net.check_rank(src);
        net.check_rank(dst);
        net.sent.get(&(src, dst)).copied().unwrap_or(0)
    }

    /// Messages sent but not yet handed to a receiver's handler. Not affected
    /// by [`reset_counters`](Self::reset_counters).
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Messages waiting for `dst`, deliverable now or later.
    ///
    /// # Panics
    /// If `dst` is outside the network.
    pub fn in_flight_to(&self, dst: Rank) -> usize {
        let net = self.lock();
        net.check_rank(dst);
        net.queues[dst as usize].values().map(VecDeque::len).sum()
    }

    /// Every (sender, receiver) pair that sent messages since creation or the
    /// last reset, with its count.
    pub fn sent_pairs(&self) -> BTreeMap<(Rank, Rank), u64> {
        self.lock().sent.iter().map(|(&k, &v)| (k, v)).collect()
    }

    /// The ranks with a message waiting for them, in rank order.
    pub fn ranks_with_mail(&self) -> Vec<Rank> {
        self.lock().with_mail.iter().copied().collect()
    }

    /// Zeroes the sent-message counters (not the messages in flight).
    pub fn reset_counters(&self) {
        self.lock().sent.clear();
    }
}

impl fmt::Debug for MemNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let net = self.lock();
        f.debug_struct("MemNetwork")
            .field("size", &net.size)
            .field("schedule", &net.schedule)
            .field("in_flight", &net.in_flight)
            .finish()
    }
}

impl fmt::Debug for MemTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

/// Locks the network. A panic never happens while the lock is held by this
/// module's code in a way that leaves the state inconsistent (handlers run
/// with the lock released), so a poisoned lock is still usable.
fn lock(shared: &Mutex<Net>) -> MutexGuard<'_, Net> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Sender for MemTransport {
    fn send(
        &mut self,
        dest: Rank,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<(), TransportError> {
        lock(&self.shared).enqueue(self.rank, dest, header, payload)?;
        self.sent += 1;
        Ok(())
    }

    /// `BACKLOG` or more messages from here wait for `dest`: under the
    /// random schedule's delays a receiver falls behind now and then, as a
    /// busy process does, and what a server does about it is simulated.
    fn backlog(&self, dest: Rank) -> bool {
        let net = lock(&self.shared);
        (net.queues.get(dest as usize))
            .and_then(|q| q.get(&self.rank))
            .is_some_and(|q| q.len() >= BACKLOG)
    }
}

/// Messages waiting from one sender to one receiver that make a backlog.
const BACKLOG: usize = 3;

impl Transport for MemTransport {
    fn messages_sent(&self) -> u64 {
        self.sent
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn poll(
        &mut self,
        on_message: &mut dyn FnMut(&mut dyn Sender, Received<'_>),
    ) -> Result<usize, TransportError> {
        let now = {
            let mut net = lock(&self.shared);
            let clock = &mut net.clocks[self.rank as usize];
            *clock += 1;
            *clock
        };
        let mut delivered = 0;
        loop {
            // Take one message and release the lock before the handler runs,
            // so that the handler can send through this endpoint.
            let next = lock(&self.shared).next_deliverable(self.rank, now);
            let Some((src, message)) = next else { break };
            on_message(
                self,
                Received {
                    src,
                    header: &message.header,
                    payload: message.payload.bytes(),
                },
            );
            delivered += 1;
        }
        Ok(delivered)
    }

    /// Always true: `send` moves the message into the network at once.
    fn sends_drained(&mut self) -> Result<bool, TransportError> {
        Ok(true)
    }

    fn post_hint(&mut self, rank: Rank, chunk: u64) -> bool {
        let mut net = lock(&self.shared);
        let Some(inbox) = net.inboxes.get_mut(rank as usize) else {
            return false;
        };
        if !inbox.contains(&chunk) {
            inbox.push(chunk);
        }
        true
    }

    fn reaches_inbox(&self, rank: Rank) -> bool {
        rank < self.size
    }

    fn take_hints(&mut self) -> Option<crate::segment::inbox::Taken> {
        let chunks = std::mem::take(&mut lock(&self.shared).inboxes[self.rank as usize]);
        (!chunks.is_empty()).then_some(crate::segment::inbox::Taken {
            chunks,
            overflowed: false,
        })
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator, written out here so
/// that a seed's schedule never changes with a dependency's version.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`), by multiply-shift; the bias is below
    /// `n / 2^64`, irrelevant for test schedules.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One delivery as a test observes it: (receiver, src, header).
    type Delivery = (Rank, Rank, Vec<u8>);

    fn random(seed: u64, max_delay_polls: u32) -> Schedule {
        Schedule::Random {
            seed,
            max_delay_polls,
        }
    }

    /// A header carrying a sender-chosen sequence number.
    fn seq_header(seq: u32) -> [u8; 4] {
        seq.to_le_bytes()
    }

    fn seq_of(header: &[u8]) -> u32 {
        u32::from_le_bytes(header.try_into().expect("4-byte header"))
    }

    /// Polls every endpoint once, in rank order, recording the deliveries.
    fn poll_round(endpoints: &mut [MemTransport], log: &mut Vec<Delivery>) -> usize {
        let mut total = 0;
        for ep in endpoints.iter_mut() {
            let me = ep.rank();
            total += ep
                .poll(&mut |_, m| log.push((me, m.src, m.header.to_vec())))
                .unwrap();
        }
        total
    }

    /// Polls all endpoints round after round until nothing is in flight;
    /// returns the number of rounds, panicking beyond `bound`.
    fn drain(
        net: &MemNetwork,
        endpoints: &mut [MemTransport],
        log: &mut Vec<Delivery>,
        bound: u32,
    ) -> u32 {
        let mut rounds = 0;
        while net.in_flight() > 0 {
            assert!(
                rounds < bound,
                "messages still in flight after {bound} rounds"
            );
            poll_round(endpoints, log);
            rounds += 1;
        }
        rounds
    }

    /// Every sender's messages to every receiver arrive in send order, all
    /// of them, exactly once.
    fn assert_fifo(log: &[Delivery], size: u32, sent_per_pair: u32) {
        let mut next = vec![0u32; (size * size) as usize];
        for (dst, src, header) in log {
            let slot = &mut next[(src * size + dst) as usize];
            assert_eq!(seq_of(header), *slot, "pair {src}->{dst} out of order");
            *slot += 1;
        }
        assert!(next.iter().all(|&n| n == sent_per_pair));
    }

    /// Each rank sends a numbered stream to every rank (itself included), in
    /// bursts interleaved with polling rounds.
    fn all_to_all(schedule: Schedule, size: u32, per_pair: u32) -> Vec<Delivery> {
        let (net, mut eps) = MemNetwork::new(size, schedule);
        let mut log = Vec::new();
        let mut seq = 0;
        while seq < per_pair {
            let burst = (seq % 3) + 1;
            for _ in 0..burst.min(per_pair - seq) {
                for ep in eps.iter_mut() {
                    for dst in 0..size {
                        ep.send(dst, &seq_header(seq), Payload::None).unwrap();
                    }
                }
                seq += 1;
            }
            poll_round(&mut eps, &mut log);
        }
        drain(&net, &mut eps, &mut log, 1000);
        log
    }

    #[test]
    fn fifo_per_pair_holds_under_random_for_many_seeds() {
        for seed in 0..200 {
            for max_delay in [0, 1, 3, 10] {
                let log = all_to_all(random(seed, max_delay), 4, 20);
                assert_fifo(&log, 4, 20);
            }
        }
    }

    #[test]
    fn fifo_per_pair_holds_under_immediate() {
        let log = all_to_all(Schedule::Immediate, 4, 20);
        assert_fifo(&log, 4, 20);
    }

    /// Ranks 1 and 2 each send 5 messages to rank 0, alternating; rank 0
    /// polls until all arrived. Returns the senders in delivery order.
    fn interleaved_senders(schedule: Schedule) -> Vec<Rank> {
        let (net, mut eps) = MemNetwork::new(3, schedule);
        for seq in 0..5 {
            for src in [1, 2] {
                eps[src].send(0, &seq_header(seq), Payload::None).unwrap();
            }
        }
        let mut order = Vec::new();
        let mut polls = 0;
        while net.in_flight() > 0 {
            assert!(polls < 100);
            eps[0].poll(&mut |_, m| order.push(m.src)).unwrap();
            polls += 1;
        }
        order
    }

    #[test]
    fn immediate_delivers_everything_at_next_poll_in_rank_order() {
        let (net, mut eps) = MemNetwork::new(3, Schedule::Immediate);
        for seq in 0..3 {
            for src in [2, 1, 0] {
                eps[src].send(0, &seq_header(seq), Payload::None).unwrap();
            }
        }
        let mut got = Vec::new();
        let n = eps[0]
            .poll(&mut |_, m| got.push((m.src, seq_of(m.header))))
            .unwrap();
        assert_eq!(n, 9);
        assert_eq!(net.in_flight(), 0);
        assert_eq!(
            got,
            [
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 0),
                (1, 1),
                (1, 2),
                (2, 0),
                (2, 1),
                (2, 2)
            ]
        );
        // And the same run gives the same order every time.
        assert_eq!(
            interleaved_senders(Schedule::Immediate),
            [1, 1, 1, 1, 1, 2, 2, 2, 2, 2]
        );
        assert_eq!(
            interleaved_senders(Schedule::Immediate),
            interleaved_senders(Schedule::Immediate)
        );
    }

    #[test]
    fn random_reorders_different_senders() {
        let send_order = [1, 2, 1, 2, 1, 2, 1, 2, 1, 2];
        for max_delay in [0, 4] {
            let orders: Vec<_> = (0..50)
                .map(|seed| interleaved_senders(random(seed, max_delay)))
                .collect();
            assert!(
                orders.iter().any(|o| o[..] != send_order[..]),
                "no seed reordered senders (max_delay {max_delay})"
            );
            // Not all seeds agree either: the order really depends on the seed.
            assert!(orders.iter().any(|o| o != &orders[0]));
        }
    }

    #[test]
    fn random_delays_span_several_polls() {
        // With a delay bound, some message is not deliverable at the first
        // poll, and none waits longer than the bound allows.
        let max_delay = 5;
        let (net, mut eps) = MemNetwork::new(2, random(7, max_delay));
        for seq in 0..50 {
            eps[1].send(0, &seq_header(seq), Payload::None).unwrap();
        }
        let first = eps[0].poll(&mut |_, _| {}).unwrap();
        assert!(first < 50);
        let mut polls = 1;
        while net.in_flight() > 0 {
            eps[0].poll(&mut |_, _| {}).unwrap();
            polls += 1;
        }
        assert!(polls <= max_delay + 1);
    }

    /// Polls every endpoint once; a handler forwards every message with a
    /// nonzero hop count (header `[round, origin, hops]`) to the next rank
    /// with one hop less.
    fn forwarding_round(endpoints: &mut [MemTransport], log: &mut Vec<Delivery>) {
        let size = endpoints.len() as u32;
        for ep in endpoints.iter_mut() {
            let me = ep.rank();
            ep.poll(&mut |tx, m| {
                log.push((me, m.src, m.header.to_vec()));
                let hops = m.header[2];
                if hops > 0 {
                    let h = [m.header[0], m.header[1], hops - 1];
                    tx.send((me + 1) % size, &h, Payload::Copy(m.payload))
                        .unwrap();
                }
            })
            .unwrap();
        }
    }

    /// A scripted run with forwarding handlers: each rank starts a message
    /// per round, which then travels three more hops.
    fn forwarding_trace(schedule: Schedule) -> Vec<Delivery> {
        let size = 4;
        let (net, mut eps) = MemNetwork::new(size, schedule);
        let mut log = Vec::new();
        for round in 0..6u8 {
            for ep in eps.iter_mut() {
                let dst = (ep.rank() + u32::from(round)) % size;
                ep.send(dst, &[round, ep.rank() as u8, 3], Payload::Copy(&[round]))
                    .unwrap();
            }
            forwarding_round(&mut eps, &mut log);
        }
        let mut rounds = 0;
        while net.in_flight() > 0 {
            assert!(rounds < 1000, "messages still in flight");
            forwarding_round(&mut eps, &mut log);
            rounds += 1;
        }
        // 6 rounds x 4 origins x (1 + 3 forwards).
        assert_eq!(log.len(), 6 * 4 * 4);
        log
    }

    #[test]
    fn same_seed_gives_identical_deliveries() {
        for seed in [0, 1, 42, u64::MAX] {
            let a = forwarding_trace(random(seed, 3));
            let b = forwarding_trace(random(seed, 3));
            assert_eq!(a, b, "seed {seed}");
        }
        let traces: Vec<_> = (0..10).map(|s| forwarding_trace(random(s, 3))).collect();
        assert!(traces.iter().any(|t| t != &traces[0]));
        assert_eq!(
            forwarding_trace(Schedule::Immediate),
            forwarding_trace(Schedule::Immediate)
        );
    }

    /// Rank 0 starts a token that travels 0 -> 1 -> 2 -> 0 ... ; each
    /// handler replies from inside `poll` with the count plus one, until the
    /// count reaches `last`.
    fn ping_pong(schedule: Schedule, last: u32) {
        let (net, mut eps) = MemNetwork::new(3, schedule);
        eps[0]
            .send(1, &seq_header(0), Payload::Copy(b"token"))
            .unwrap();
        let mut seen = Vec::new();
        let mut rounds = 0;
        while net.in_flight() > 0 {
            assert!(rounds < 10_000, "token lost");
            for ep in eps.iter_mut() {
                let me = ep.rank();
                ep.poll(&mut |tx, m| {
                    let n = seq_of(m.header);
                    assert_eq!(m.src, (me + 2) % 3, "token came from the wrong rank");
                    assert_eq!(m.payload, b"token");
                    seen.push((me, n));
                    if n < last {
                        tx.send((me + 1) % 3, &seq_header(n + 1), Payload::Copy(m.payload))
                            .unwrap();
                    }
                })
                .unwrap();
            }
            rounds += 1;
        }
        let expected: Vec<_> = (0..=last).map(|n| ((n + 1) % 3, n)).collect();
        assert_eq!(seen, expected);
        assert_eq!(net.messages_sent(), u64::from(last) + 1);
        for src in 0..3 {
            let dst = (src + 1) % 3;
            assert_eq!(net.messages_between(src, (src + 2) % 3), 0);
            let expected = (0..=last).filter(|n| n % 3 == src).count() as u64;
            assert_eq!(net.messages_between(src, dst), expected);
        }
    }

    #[test]
    fn handler_replies_from_inside_poll_across_three_ranks() {
        ping_pong(Schedule::Immediate, 30);
        for seed in 0..20 {
            ping_pong(random(seed, 4), 30);
        }
    }

    #[test]
    fn message_sent_during_poll_waits_for_next_poll() {
        let (net, mut eps) = MemNetwork::new(1, Schedule::Immediate);
        eps[0].send(0, b"a", Payload::None).unwrap();
        let mut got = Vec::new();
        let n = eps[0]
            .poll(&mut |tx, m| {
                got.push(m.header.to_vec());
                tx.send(0, b"b", Payload::None).unwrap();
            })
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(net.in_flight(), 1);
        let n = eps[0]
            .poll(&mut |_, m| got.push(m.header.to_vec()))
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(got, [b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn counters_count() {
        let (net, mut eps) = MemNetwork::new(3, Schedule::Immediate);
        assert_eq!((net.messages_sent(), net.in_flight()), (0, 0));
        eps[0].send(1, b"x", Payload::None).unwrap();
        eps[0].send(1, b"x", Payload::None).unwrap();
        eps[2].send(1, b"x", Payload::None).unwrap();
        eps[1].send(1, b"x", Payload::None).unwrap();
        assert_eq!(net.messages_sent(), 4);
        assert_eq!(net.messages_between(0, 1), 2);
        assert_eq!(net.messages_between(1, 0), 0);
        assert_eq!(net.messages_between(2, 1), 1);
        assert_eq!(net.messages_between(1, 1), 1);
        assert_eq!(net.in_flight(), 4);
        assert_eq!(net.in_flight_to(1), 4);
        assert_eq!(net.in_flight_to(0), 0);

        // Polling a rank with nothing for it delivers nothing.
        assert_eq!(eps[0].poll(&mut |_, _| panic!()).unwrap(), 0);
        assert_eq!(eps[1].poll(&mut |_, _| {}).unwrap(), 4);
        assert_eq!(net.in_flight(), 0);
        assert_eq!(net.messages_sent(), 4);

        eps[2].send(0, b"y", Payload::None).unwrap();
        net.reset_counters();
        assert_eq!(net.messages_sent(), 0);
        assert_eq!(net.messages_between(0, 1), 0);
        assert_eq!(net.in_flight(), 1, "reset leaves messages in flight");
        eps[1].send(2, b"z", Payload::None).unwrap();
        assert_eq!(net.messages_sent(), 1);
        assert_eq!(net.messages_between(1, 2), 1);
    }

    #[test]
    fn every_message_is_eventually_delivered() {
        for seed in 0..50 {
            let max_delay = 8;
            let size = 5;
            let (net, mut eps) = MemNetwork::new(size, random(seed, max_delay));
            let mut log = Vec::new();
            for i in 0..200u32 {
                let src = (i * 7 + 3) % size;
                let dst = (i * 11 + seed as u32) % size;
                eps[src as usize]
                    .send(dst, &seq_header(i), Payload::None)
                    .unwrap();
                if i % 17 == 0 {
                    poll_round(&mut eps, &mut log);
                }
            }
            // No handler sends, so once sending stops every message is
            // deliverable within max_delay + 1 polls of its receiver.
            let rounds = drain(&net, &mut eps, &mut log, 10_000);
            assert!(rounds <= max_delay + 1, "seed {seed}: {rounds} rounds");
            assert_eq!(log.len(), 200);
            let mut seqs: Vec<_> = log.iter().map(|(_, _, h)| seq_of(h)).collect();
            seqs.sort_unstable();
            assert_eq!(seqs, (0..200).collect::<Vec<_>>());
        }
    }

    #[test]
    fn payloads_and_src_arrive_intact() {
        let (_net, mut eps) = MemNetwork::new(2, random(3, 2));
        let shared: Arc<[u8]> = Arc::from(vec![7u8; 100_000]);
        let mut copied = b"copied".to_vec();
        eps[1].send(0, b"none", Payload::None).unwrap();
        eps[1].send(0, b"copy", Payload::Copy(&copied)).unwrap();
        eps[1].send(0, b"shared", Payload::Shared(&shared)).unwrap();
        // The sender may reuse a copied payload at once.
        copied.fill(0);
        let mut got = Vec::new();
        while got.len() < 3 {
            eps[0]
                .poll(&mut |_, m| {
                    assert_eq!(m.src, 1);
                    got.push((m.header.to_vec(), m.payload.to_vec()));
                })
                .unwrap();
        }
        assert_eq!(got[0], (b"none".to_vec(), Vec::new()));
        assert_eq!(got[1], (b"copy".to_vec(), b"copied".to_vec()));
        assert_eq!(got[2], (b"shared".to_vec(), vec![7u8; 100_000]));
        // The network let go of the shared buffer once delivered.
        assert_eq!(Arc::strong_count(&shared), 1);
    }

    #[test]
    fn send_errors() {
        let (net, mut eps) = MemNetwork::new(2, Schedule::Immediate);
        match eps[0].send(2, b"h", Payload::None) {
            Err(TransportError::UnknownRank { dest: 2, size: 2 }) => {}
            other => panic!("expected UnknownRank, got {other:?}"),
        }
        let big = vec![0u8; MAX_HEADER + 1];
        match eps[0].send(1, &big, Payload::None) {
            Err(TransportError::HeaderTooLarge { len }) => assert_eq!(len, MAX_HEADER + 1),
            other => panic!("expected HeaderTooLarge, got {other:?}"),
        }
        assert_eq!(net.messages_sent(), 0);
        assert_eq!(net.in_flight(), 0);
        eps[0]
            .send(1, &big[..MAX_HEADER], Payload::None)
            .expect("a header of exactly MAX_HEADER bytes is fine");
        assert_eq!(net.messages_sent(), 1);
    }

    #[test]
    fn endpoints_report_rank_size_and_are_send() {
        fn assert_send<T: Send>() {}
        assert_send::<MemTransport>();
        assert_send::<MemNetwork>();
        let (net, mut eps) = MemNetwork::new(3, Schedule::Immediate);
        assert_eq!(net.size(), 3);
        assert_eq!(net.schedule(), Schedule::Immediate);
        for (i, ep) in eps.iter_mut().enumerate() {
            assert_eq!(ep.rank(), i as Rank);
            assert_eq!(ep.size(), 3);
            assert!(ep.sends_drained().unwrap());
        }
        // Endpoints can also be used as trait objects.
        let t: &mut dyn Transport = &mut eps[0];
        t.send(1, b"h", Payload::None).unwrap();
        assert_eq!(net.in_flight(), 1);
    }

    #[test]
    fn splitmix64_matches_reference() {
        // Reference values for seed 1234567 from the published algorithm.
        let mut rng = SplitMix64::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
        let mut rng = SplitMix64::new(0);
        for n in [1, 2, 3, 10, 1 << 40] {
            assert!(rng.below(n) < n);
        }
    }
}
