//! Synchronization objects (section 2.4), as their coordinator server keeps
//! them: rendezvous, barriers and signals.
//!
//! Each object has one coordinator, the server `servers[id % n]` (as a chunk
//! has one home); requests reach it through the client's server and the
//! answers come back the same way. A single coordinator per object is the
//! centralized form of Raynal's algorithms: it costs one request and one
//! answer per participant, and the client/server topology already routes
//! every message through servers, so a token ring over clients would only
//! add hops. Rendezvous, barriers and signals have separate id spaces.
//!
//! Semantics where the report is vague, chosen so that a program is correct
//! whatever the timing:
//! - **Rendezvous** keep a generation counter per id. `wakeup` increments it
//!   and wakes every sleeper; `rendezvous` returns once the generation is
//!   past the last one this client consumed. So a wakeup sent before the
//!   matching rendezvous is remembered, and several wakeups before one
//!   rendezvous release it once (they are not counted). A `wakeup` returns
//!   once its coordinator has applied it ([`SyncOp::WakeupDone`]): "before"
//!   is then what the program's order says. Were it sent and forgotten, a
//!   rendezvous called after three wakeups had returned (in another process
//!   told of them through a chunk, or in another client of the same one)
//!   could overtake the last two on its way to the coordinator, return on
//!   the first, and let the next rendezvous return on the others.
//! - **Barriers** release a round when `count` arrivals of the same id have
//!   come (an arrival is one call: two threads of one process are two). The
//!   first arrival of a round fixes its count; an arrival with another count
//!   is refused with an error, and does not count. Each answer echoes the
//!   arrival's ticket (the client's own numbering), so a client can tell the
//!   answer of a call that gave up from the answer of its next call.
//! - **Barriers after a loss** (a run with recovery, `bootstrap/watch.rs`):
//!   a round may count on a process that died, and would wait forever. So
//!   each arrival says how many lost processes its thread has been told of;
//!   when a coordinator hears of a loss, it answers every waiting arrival
//!   told of fewer with `BarrierLost`, and answers so any later arrival
//!   told of fewer. The call fails with the number of processes lost, its
//!   thread is then told, and its next call (with the count of the calls
//!   left) goes ahead. Every surviving thread's first barrier call after a
//!   loss thus fails once, whether it arrived before or after the loss:
//!   what a program sees does not depend on the timing, nor on which of a
//!   process's threads heard first.
//! - **Rendezvous after a loss** likewise: the wakeup a rendezvous waits
//!   for may have been the lost process's to send. Each sleep says how many
//!   losses its client has been told of; a coordinator that hears of a loss
//!   answers every sleeper `SleepLost`, and so any later sleep told of
//!   fewer. The call fails with `ProcessLost` once, whether it waited
//!   before the loss or came after; called again, it returns on a wakeup
//!   sent before or after. A client counts the losses its barriers and its
//!   rendezvous were told of apart, so each kind fails once, whichever
//!   comes first.
//! - **Signals** are publish-subscribe without a chunk: raising one notifies
//!   every client subscribed to it at that moment, the raiser included.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::transport::Rank;
use crate::wire::SyncOp;

#[derive(Debug, Default)]
struct Rendezvous {
    generation: u64,
    /// Clients asleep, with the generation they have already consumed.
    sleepers: Vec<(Rank, u64)>,
}

#[derive(Debug, Default)]
struct Barrier {
    count: u32,
    /// The round's arrivals: the client, its ticket and the losses it had
    /// been told of.
    arrived: Vec<(Rank, u64, u32)>,
    /// The chunks each arrival asked to be pushed as the round ends
    /// (learned communication sets, `client/learned.rs`).
    fetches: Vec<(Rank, Vec<u64>)>,
}

/// The synchronization objects one server coordinates.
#[derive(Debug, Default)]
pub struct Coordinator {
    rendezvous: HashMap<u32, Rendezvous>,
    barriers: HashMap<u32, Barrier>,
    signals: HashMap<u32, BTreeSet<Rank>>,
    /// The pushes rounds that have just ended ask for, until the server
    /// takes them ([`Coordinator::take_fetches`]).
    fetches: Vec<(Rank, Vec<u64>)>,
    /// Processes the run has lost (a run with recovery).
    losses: u32,
    /// Per client, the tickets of its last wakeups applied and barrier
    /// arrivals whose round ended (at most [`TAKEN`]): a lost server's
    /// client sends again what that server carried, not knowing whether it
    /// got here (`client/failover.rs`); such a ticket is answered again,
    /// not applied or counted twice.
    taken: HashMap<Rank, VecDeque<u64>>,
}

/// How many tickets of each client [`Coordinator`] remembers: more than a
/// client has requests in flight (one per thread).
const TAKEN: usize = 1024;

impl Coordinator {
    /// Handles `op` from `client`; appends the answers to `out`. Returns an
    /// error for an operation a client may not send (an answer kind).
    /// `fetch` is what a barrier arrival asks to be pushed as its round ends
    /// (ignored otherwise, and dropped with a refused arrival).
    pub fn on_request(
        &mut self,
        client: Rank,
        op: SyncOp,
        fetch: Vec<u64>,
        out: &mut Vec<(Rank, SyncOp)>,
    ) -> Result<(), &'static str> {
        match op {
            SyncOp::Sleep { id, seen, losses } => {
                if losses < self.losses {
                    let lost = SyncOp::SleepLost {
                        id,
                        losses: self.losses,
                    };
                    out.push((client, lost));
                    return Ok(());
                }
                let r = self.rendezvous.entry(id).or_default();
                if r.generation > seen {
                    out.push((
                        client,
                        SyncOp::Awake {
                            id,
                            generation: r.generation,
                        },
                    ));
                } else if !r.sleepers.iter().any(|&(c, _)| c == client) {
                    // One entry per client is enough: every sleeper queued
                    // here has seen the current generation (a client knows
                    // no later one), so one Awake wakes all its calls. A
                    // rendezvous that gave up (its handler failed) leaves
                    // its entry, and the client's next one adds no other.
                    r.sleepers.push((client, seen));
                }
            }
            SyncOp::Wakeup { id, ticket } => {
                if self.was_taken(client, ticket) {
                    out.push((client, SyncOp::WakeupDone { id, ticket }));
                    return Ok(());
                }
                self.take(client, ticket);
                let r = self.rendezvous.entry(id).or_default();
                r.generation += 1;
                let generation = r.generation;
                for (sleeper, _) in r.sleepers.drain(..) {
                    out.push((sleeper, SyncOp::Awake { id, generation }));
                }
                out.push((client, SyncOp::WakeupDone { id, ticket }));
            }
            SyncOp::Barrier {
                id,
                count,
                ticket,
                losses,
            } => {
                if self.was_taken(client, ticket) {
                    out.push((client, SyncOp::BarrierDone { id, ticket }));
                    return Ok(());
                }
                if losses < self.losses {
                    let lost = SyncOp::BarrierLost {
                        id,
                        ticket,
                        losses: self.losses,
                    };
                    out.push((client, lost));
                    return Ok(());
                }
                if count == 0 {
                    let refused = SyncOp::BarrierRefused {
                        id,
                        count: 0,
                        ticket,
                    };
                    out.push((client, refused));
                    return Ok(());
                }
                let b = self.barriers.entry(id).or_default();
                if b.arrived.is_empty() {
                    b.count = count;
                } else if b.count != count {
                    let refused = SyncOp::BarrierRefused {
                        id,
                        count: b.count,
                        ticket,
                    };
                    out.push((client, refused));
                    return Ok(());
                }
                b.arrived.push((client, ticket, losses));
                if !fetch.is_empty() {
                    b.fetches.push((client, fetch));
                }
                if b.arrived.len() as u32 == b.count {
                    let ended: Vec<(Rank, u64, u32)> = b.arrived.drain(..).collect();
                    self.fetches.append(&mut b.fetches);
                    for (c, ticket, _) in ended {
                        self.take(c, ticket);
                        out.push((c, SyncOp::BarrierDone { id, ticket }));
                    }
                }
            }
            SyncOp::SignalSubscribe { id } => {
                self.signals.entry(id).or_default().insert(client);
                out.push((client, SyncOp::SignalSubscribed { id }));
            }
            SyncOp::SignalUnsubscribe { id } => {
                if let Some(s) = self.signals.get_mut(&id) {
                    s.remove(&client);
                }
            }
            SyncOp::Raise { id } => {
                if let Some(s) = self.signals.get(&id) {
                    for &c in s {
                        out.push((c, SyncOp::Signal { id }));
                    }
                }
            }
            _ => return Err("an answer sent as a request"),
        }
        Ok(())
    }

    /// Client `client` has left: it sleeps nowhere and subscribes to nothing.
    /// A barrier it entered keeps its arrival (it was counted when made).
    pub fn client_left(&mut self, client: Rank) {
        self.withdraw(client);
        // A later process in its place (a service's slot) numbers its
        // tickets afresh.
        self.taken.remove(&client);
    }

    /// Whether `client`'s request `ticket` was applied (a wakeup) or
    /// counted in a round that ended (a barrier arrival).
    fn was_taken(&self, client: Rank, ticket: u64) -> bool {
        self.taken.get(&client).is_some_and(|t| t.contains(&ticket))
    }

    fn take(&mut self, client: Rank, ticket: u64) {
        let t = self.taken.entry(client).or_default();
        if t.len() == TAKEN {
            t.pop_front();
        }
        t.push_back(ticket);
    }

    /// [`Coordinator::client_left`], remembering its tickets: a lost
    /// server's client, told as lost, goes on and sends again what that
    /// server carried.
    fn withdraw(&mut self, client: Rank) {
        for r in self.rendezvous.values_mut() {
            r.sleepers.retain(|&(c, _)| c != client);
        }
        for s in self.signals.values_mut() {
            s.remove(&client);
        }
        // A client that left inside a barrier (it died, or a service's
        // client detached from another thread) withdraws its arrival: the
        // answer could reach only a later process in the same slot.
        for b in self.barriers.values_mut() {
            b.arrived.retain(|&(c, _, _)| c != client);
            b.fetches.retain(|(c, _)| *c != client);
        }
    }

    /// Client `client` was lost (a run with recovery): it has left, every
    /// waiting arrival told of fewer losses is answered `BarrierLost`, and
    /// every rendezvous sleeper `SleepLost` (its wakeup may have been the
    /// lost process's to send).
    pub fn client_lost(&mut self, client: Rank, out: &mut Vec<(Rank, SyncOp)>) {
        self.withdraw(client);
        self.lose(out);
    }

    /// A server was lost (a run with replicated homes): one loss, whatever
    /// the number of its clients, `moved`, which go on through another
    /// server. Their sleeps and signal subscriptions went through it and
    /// are forgotten (they make them again, and send again what it carried:
    /// `client/failover.rs`); every waiting arrival and sleeper is told of
    /// the loss, as for a client's.
    pub fn server_lost(&mut self, moved: &[Rank], out: &mut Vec<(Rank, SyncOp)>) {
        for &client in moved {
            self.withdraw(client);
        }
        self.lose(out);
    }

    /// Counts one more loss: every waiting arrival told of fewer is answered
    /// `BarrierLost`, and every rendezvous sleeper `SleepLost`.
    fn lose(&mut self, out: &mut Vec<(Rank, SyncOp)>) {
        self.losses += 1;
        let losses = self.losses;
        // In id order: the answers' order is the same in every replay of a
        // simulated run.
        let mut ids: Vec<u32> = self.rendezvous.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let r = self.rendezvous.get_mut(&id).expect("listed");
            for (c, _) in r.sleepers.drain(..) {
                out.push((c, SyncOp::SleepLost { id, losses }));
            }
        }
        let mut ids: Vec<u32> = self.barriers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let b = self.barriers.get_mut(&id).expect("listed");
            b.arrived.retain(|&(c, ticket, told)| {
                let keep = told >= losses;
                if !keep {
                    out.push((c, SyncOp::BarrierLost { id, ticket, losses }));
                }
                keep
            });
            let arrived = &b.arrived;
            b.fetches
                .retain(|(c, _)| arrived.iter().any(|&(a, _, _)| a == *c));
        }
    }

    /// The pushes asked for by the arrivals of rounds that have ended since
    /// the last call: (client, chunks). The server sends them to the homes
    /// before the rounds' answers, so that on one server the data is there
    /// when the barrier returns.
    pub fn take_fetches(&mut self) -> Vec<(Rank, Vec<u64>)> {
        std::mem::take(&mut self.fetches)
    }

    /// The object a request is about, which picks its coordinator; None
    /// for an answer.
    pub fn request_id(op: &SyncOp) -> Option<u32> {
        match *op {
            SyncOp::Sleep { id, .. }
            | SyncOp::Wakeup { id, .. }
            | SyncOp::Barrier { id, .. }
            | SyncOp::BarrierPlace { id }
            | SyncOp::SignalSubscribe { id }
            | SyncOp::SignalUnsubscribe { id }
            | SyncOp::Raise { id } => Some(id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(c: &mut Coordinator, client: Rank, op: SyncOp) -> Vec<(Rank, SyncOp)> {
        let mut out = Vec::new();
        c.on_request(client, op, Vec::new(), &mut out).unwrap();
        out
    }

    /// The answer that wakes `client`'s sleepers of rendezvous `id`.
    fn awake(client: Rank, id: u32, generation: u64) -> (Rank, SyncOp) {
        (client, SyncOp::Awake { id, generation })
    }

    /// A rendezvous call of a client told of no loss.
    fn sleep(id: u32, seen: u64) -> SyncOp {
        SyncOp::Sleep {
            id,
            seen,
            losses: 0,
        }
    }

    /// A wakeup by `client`: what it sends to the others. Its own answer,
    /// that the wakeup is applied, comes last, with its ticket.
    fn wake(c: &mut Coordinator, client: Rank, id: u32) -> Vec<(Rank, SyncOp)> {
        // Each call its own ticket, as a client numbers them.
        static TICKETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
        let ticket = TICKETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut out = run(c, client, SyncOp::Wakeup { id, ticket });
        assert_eq!(
            out.pop(),
            Some((client, SyncOp::WakeupDone { id, ticket })),
            "the waker hears its wakeup is applied"
        );
        out
    }

    #[test]
    fn a_wakeup_before_the_rendezvous_is_remembered() {
        let mut c = Coordinator::default();
        assert!(wake(&mut c, 2, 7).is_empty());
        assert_eq!(run(&mut c, 3, sleep(7, 0)), vec![awake(3, 7, 1)]);
        // Consumed: the next rendezvous waits for the next wakeup.
        assert!(run(&mut c, 3, sleep(7, 1)).is_empty());
        assert_eq!(wake(&mut c, 2, 7), vec![awake(3, 7, 2)]);
    }

    #[test]
    fn a_rendezvous_before_the_wakeup_waits_for_it() {
        let mut c = Coordinator::default();
        assert!(run(&mut c, 3, sleep(1, 0)).is_empty());
        assert!(run(&mut c, 4, sleep(1, 0)).is_empty());
        assert!(wake(&mut c, 4, 2).is_empty(), "another id");
        let woken = wake(&mut c, 2, 1);
        assert_eq!(woken, vec![awake(3, 1, 1), awake(4, 1, 1)]);
    }

    #[test]
    fn a_barrier_releases_a_round_at_its_count_and_refuses_another_count() {
        let mut c = Coordinator::default();
        let arrive = |c: &mut Coordinator, client, count, ticket| {
            run(
                c,
                client,
                SyncOp::Barrier {
                    id: 5,
                    count,
                    ticket,
                    losses: 0,
                },
            )
        };
        for round in 0..3u64 {
            // Each client numbers its own arrivals: two per round.
            let (t, refused) = (2 * round, 2 * round + 1);
            assert!(arrive(&mut c, 2, 3, t).is_empty());
            assert_eq!(
                arrive(&mut c, 3, 4, t),
                vec![(
                    3,
                    SyncOp::BarrierRefused {
                        id: 5,
                        count: 3,
                        ticket: t
                    }
                )],
                "round {round}"
            );
            assert!(arrive(&mut c, 3, 3, refused).is_empty());
            // Every answer carries the ticket of the arrival it answers.
            assert_eq!(
                arrive(&mut c, 4, 3, t),
                vec![
                    (2, SyncOp::BarrierDone { id: 5, ticket: t }),
                    (
                        3,
                        SyncOp::BarrierDone {
                            id: 5,
                            ticket: refused
                        }
                    ),
                    (4, SyncOp::BarrierDone { id: 5, ticket: t }),
                ]
            );
        }
        assert_eq!(
            run(
                &mut c,
                2,
                SyncOp::Barrier {
                    id: 6,
                    count: 0,
                    ticket: 9,
                    losses: 0,
                }
            ),
            vec![(
                2,
                SyncOp::BarrierRefused {
                    id: 6,
                    count: 0,
                    ticket: 9
                }
            )]
        );
    }

    /// A survivor's first barrier after a loss fails once whether it
    /// arrived before the loss or after it, and the next one, told of the
    /// loss and counting the processes left, completes.
    #[test]
    fn every_survivor_hears_of_a_loss_at_one_barrier_whatever_the_timing() {
        let arrive = |c: &mut Coordinator, client, count, ticket, losses| {
            let op = SyncOp::Barrier {
                id: 5,
                count,
                ticket,
                losses,
            };
            run(c, client, op)
        };
        let lost = |ticket, client| {
            (
                client,
                SyncOp::BarrierLost {
                    id: 5,
                    ticket,
                    losses: 1,
                },
            )
        };
        let mut c = Coordinator::default();
        // Client 2 arrives before client 4 is lost, client 3 after.
        assert!(arrive(&mut c, 2, 3, 0, 0).is_empty());
        let mut out = Vec::new();
        c.client_lost(4, &mut out);
        assert_eq!(out, vec![lost(0, 2)]);
        assert_eq!(arrive(&mut c, 3, 3, 0, 0), vec![lost(0, 3)]);
        // Told of the loss, both pass a barrier of the two left.
        assert!(arrive(&mut c, 2, 2, 1, 1).is_empty());
        assert_eq!(
            arrive(&mut c, 3, 2, 1, 1),
            vec![
                (2, SyncOp::BarrierDone { id: 5, ticket: 1 }),
                (3, SyncOp::BarrierDone { id: 5, ticket: 1 }),
            ]
        );
        // An arrival already told of the loss (by another coordinator)
        // stays when this one hears of it.
        let mut c = Coordinator::default();
        assert!(arrive(&mut c, 2, 2, 7, 1).is_empty());
        let mut out = Vec::new();
        c.client_lost(4, &mut out);
        assert!(out.is_empty());
        assert_eq!(arrive(&mut c, 3, 2, 7, 1).len(), 2);
    }

    #[test]
    fn a_client_sleeps_once_per_rendezvous_however_often_it_asks() {
        // A rendezvous that gave up left its entry; the client's next one
        // adds none, and one wakeup answers the client once.
        let mut c = Coordinator::default();
        assert!(run(&mut c, 3, sleep(1, 0)).is_empty());
        assert!(run(&mut c, 3, sleep(1, 0)).is_empty());
        assert_eq!(wake(&mut c, 2, 1), vec![awake(3, 1, 1)]);
    }

    #[test]
    fn signals_reach_the_subscribers_of_the_moment() {
        let mut c = Coordinator::default();
        assert_eq!(
            run(&mut c, 2, SyncOp::SignalSubscribe { id: 9 }),
            vec![(2, SyncOp::SignalSubscribed { id: 9 })]
        );
        run(&mut c, 3, SyncOp::SignalSubscribe { id: 9 });
        assert_eq!(run(&mut c, 4, SyncOp::Raise { id: 9 }).len(), 2);
        run(&mut c, 2, SyncOp::SignalUnsubscribe { id: 9 });
        assert_eq!(
            run(&mut c, 3, SyncOp::Raise { id: 9 }),
            vec![(3, SyncOp::Signal { id: 9 })]
        );
        c.client_left(3);
        assert!(run(&mut c, 4, SyncOp::Raise { id: 9 }).is_empty());
        let mut out = Vec::new();
        assert!(c
            .on_request(2, SyncOp::Signal { id: 9 }, Vec::new(), &mut out)
            .is_err());
    }

    #[test]
    fn a_rounds_pushes_leave_when_it_ends_and_not_for_a_refused_or_departed_arrival() {
        let mut c = Coordinator::default();
        let mut out = Vec::new();
        let arrive = |c: &mut Coordinator, client, count, fetch: Vec<u64>, out: &mut Vec<_>| {
            let op = SyncOp::Barrier {
                id: 3,
                count,
                ticket: 1,
                losses: 0,
            };
            c.on_request(client, op, fetch, out).unwrap();
        };
        arrive(&mut c, 2, 3, vec![10, 11], &mut out);
        arrive(&mut c, 5, 3, vec![12], &mut out);
        // A refused arrival (another count) asks for nothing.
        arrive(&mut c, 6, 4, vec![13], &mut out);
        assert!(c.take_fetches().is_empty(), "nothing before the round ends");
        // A client that left withdraws its arrival and its pushes.
        c.client_left(5);
        arrive(&mut c, 4, 3, vec![], &mut out);
        arrive(&mut c, 7, 3, vec![14], &mut out);
        assert_eq!(c.take_fetches(), vec![(2, vec![10, 11]), (7, vec![14])]);
        assert!(c.take_fetches().is_empty(), "taken once");
    }

    /// A rendezvous whose wakeup may have died with a lost process fails
    /// once, whether it waited at the loss or came after it; called again
    /// (told of the loss), it waits, and a wakeup sent before or after
    /// releases it.
    #[test]
    fn every_sleeper_hears_of_a_loss_once_whatever_the_timing() {
        let told = |id, seen, losses| SyncOp::Sleep { id, seen, losses };
        let mut c = Coordinator::default();
        // Client 3 waits on rendezvous 1 (for client 5's wakeup), client 4
        // on 2; then client 5 is lost.
        assert!(run(&mut c, 3, told(1, 0, 0)).is_empty());
        assert!(run(&mut c, 4, told(2, 0, 0)).is_empty());
        let mut out = Vec::new();
        c.client_lost(5, &mut out);
        assert_eq!(
            out,
            vec![
                (3, SyncOp::SleepLost { id: 1, losses: 1 }),
                (4, SyncOp::SleepLost { id: 2, losses: 1 }),
            ]
        );
        // Client 6, not told yet, comes after the loss: it fails the same way.
        assert_eq!(
            run(&mut c, 6, told(1, 0, 0)),
            vec![(6, SyncOp::SleepLost { id: 1, losses: 1 })]
        );
        // Told, they wait again; nobody is dropped twice for one loss.
        assert!(run(&mut c, 3, told(1, 0, 1)).is_empty());
        assert!(run(&mut c, 6, told(1, 0, 1)).is_empty());
        let mut woken = wake(&mut c, 7, 1);
        woken.sort_by_key(|&(to, _)| to);
        assert_eq!(woken, vec![awake(3, 1, 1), awake(6, 1, 1),]);
        // A wakeup sent before a told sleeper comes still counts.
        wake(&mut c, 7, 2);
        assert_eq!(run(&mut c, 4, told(2, 0, 1)), vec![awake(4, 2, 1)]);
    }

    /// A lost server's client sends again the wakeups and barrier arrivals
    /// that server carried, not knowing whether they got here: one that did
    /// is answered again, not applied or counted a second time; one that
    /// did not is taken as new.
    #[test]
    fn a_request_sent_again_after_a_servers_loss_is_taken_once() {
        let mut c = Coordinator::default();
        let wakeup = SyncOp::Wakeup { id: 1, ticket: 40 };
        assert_eq!(
            run(&mut c, 3, wakeup),
            vec![(3, SyncOp::WakeupDone { id: 1, ticket: 40 })]
        );
        // Again: answered, and the rendezvous is still one wakeup ahead.
        assert_eq!(
            run(&mut c, 3, wakeup),
            vec![(3, SyncOp::WakeupDone { id: 1, ticket: 40 })]
        );
        assert_eq!(run(&mut c, 4, sleep(1, 0)), vec![awake(4, 1, 1)]);
        assert!(
            run(&mut c, 4, sleep(1, 1)).is_empty(),
            "one wakeup, not two"
        );
        // A round of 2 ends with client 3's arrival; it comes again (its
        // answer was lost with its server) and is answered, not counted in
        // the next round.
        let arrive = |ticket| SyncOp::Barrier {
            id: 5,
            count: 2,
            ticket,
            losses: 0,
        };
        assert!(run(&mut c, 3, arrive(41)).is_empty());
        assert_eq!(run(&mut c, 4, arrive(7)).len(), 2);
        assert_eq!(
            run(&mut c, 3, arrive(41)),
            vec![(3, SyncOp::BarrierDone { id: 5, ticket: 41 })]
        );
        assert!(
            run(&mut c, 4, arrive(8)).is_empty(),
            "the next round waits for 2"
        );
        // Told as lost (its server was), client 3 is withdrawn, but its
        // tickets are remembered; one that never came is taken as new.
        let mut out = Vec::new();
        c.client_lost(3, &mut out);
        let told = |ticket| SyncOp::Barrier {
            id: 5,
            count: 2,
            ticket,
            losses: 1,
        };
        assert_eq!(
            run(&mut c, 3, told(41)),
            vec![(3, SyncOp::BarrierDone { id: 5, ticket: 41 })]
        );
        assert!(run(&mut c, 3, told(42)).is_empty(), "a new arrival waits");
        // A client that leaves (a service's slot given to another process)
        // is forgotten with its tickets.
        c.client_left(3);
        assert_eq!(
            run(&mut c, 3, SyncOp::Wakeup { id: 1, ticket: 40 }),
            vec![(3, SyncOp::WakeupDone { id: 1, ticket: 40 })]
        );
        let after_loss = SyncOp::Sleep {
            id: 1,
            seen: 1,
            losses: 1,
        };
        assert_eq!(run(&mut c, 4, after_loss), vec![awake(4, 1, 2)], "applied");
    }

    /// A lost server is one loss, however many clients it served: a waiting
    /// arrival is told of it once, and its call made again, told of that
    /// one loss, counts (sat.h: a barrier call fails once for a loss).
    #[test]
    fn a_servers_loss_counts_once_whatever_its_clients() {
        let mut c = Coordinator::default();
        let arrive = |ticket, losses| SyncOp::Barrier {
            id: 9,
            count: 3,
            ticket,
            losses,
        };
        // Client 5 waits in a round of 3; the server of clients 3 and 4 is
        // lost.
        assert!(run(&mut c, 5, arrive(1, 0)).is_empty());
        let mut out = Vec::new();
        c.server_lost(&[3, 4], &mut out);
        assert_eq!(
            out,
            vec![(
                5,
                SyncOp::BarrierLost {
                    id: 9,
                    ticket: 1,
                    losses: 1
                }
            )]
        );
        // Each comes again, told of the one loss: counted, and the round
        // of 3 ends.
        assert!(run(&mut c, 5, arrive(2, 1)).is_empty());
        assert!(run(&mut c, 3, arrive(1, 1)).is_empty());
        assert_eq!(
            run(&mut c, 4, arrive(1, 1)),
            vec![
                (5, SyncOp::BarrierDone { id: 9, ticket: 2 }),
                (3, SyncOp::BarrierDone { id: 9, ticket: 1 }),
                (4, SyncOp::BarrierDone { id: 9, ticket: 1 }),
            ]
        );
    }
}
