//! When may a run end while clients still wait for notifications?
//!
//! A client whose role has returned keeps running the handlers of its
//! subscriptions (section 2.5's client loop). It ends by itself once it has
//! no subscription and no pending event; otherwise the run must end it,
//! once nothing can notify it any more: every client waits (or is done),
//! no handler runs, and no publication or notification is in flight.
//!
//! That is the termination-detection problem, solved here with Mattern's
//! four-counter method. The basic messages are publications (a write
//! release or a raised signal, client -> home or coordinator) and
//! notifications (home or coordinator -> subscriber). Clients count what
//! they publish and receive, servers what they apply and notify (and the
//! notifications they drop for clients already gone). The seed sends waves
//! of probes through the servers to the waiting clients; the run is over
//! when one wave finds no client busy, as many messages received as sent,
//! and the same totals as the wave before it (the counters only grow, so
//! equal totals mean nothing moved in between).
//!
//! Waves start only once every server reports all its clients waiting or
//! done, and repeat with a growing pause (1 to 50 ms) while handlers run.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::transport::Rank;

/// Where a client of this server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Running,
    Waiting,
    Done,
}

/// One server's part: its clients' states and the counters of its homes.
#[derive(Debug)]
pub struct Accounts {
    /// In rank order (found by binary search: a server may have a thousand
    /// clients, and a notification must not scan them).
    clients: Vec<(Rank, Status)>,
    /// How many of `clients` are running and waiting: a server asks whether
    /// it is quiet at every step.
    running: usize,
    waiting: usize,
    /// Notifications this server handed to each of its clients.
    delivered: Vec<u64>,
    /// Published and received by clients that are done.
    done_sent: u64,
    done_received: u64,
    /// Publications applied here, notifications sent from here, and
    /// notifications dropped because their client was done.
    applied: u64,
    notified: u64,
    dropped: u64,
    /// Publications applied here, by the client that made them: what a
    /// lost client published, in a run with recovery, is what its
    /// servers applied (it never reports its own counters).
    applied_from: std::collections::BTreeMap<Rank, u64>,
    /// Clients lost (a run with recovery): what the homes here applied of
    /// theirs counts as sent, at every report.
    lost: BTreeSet<Rank>,
    /// This server holds notifications back (`server/notices.rs`): it is
    /// busy until it has sent them.
    holding: bool,
    probing: Option<Probing>,
}

#[derive(Debug)]
struct Probing {
    wave: u64,
    waiting: BTreeSet<Rank>,
    busy: bool,
    sent: u64,
    received: u64,
}

/// A server's answer to a wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub wave: u64,
    pub busy: bool,
    pub sent: u64,
    pub received: u64,
}

/// What starting a wave at a server needs.
#[derive(Debug, PartialEq, Eq)]
pub enum WaveStart {
    /// Probe these waiting clients, then report.
    Probe(Vec<Rank>),
    /// Report this at once.
    Report(Report),
}

impl Accounts {
    pub fn new(clients: &[Rank]) -> Accounts {
        let mut clients: Vec<(Rank, Status)> =
            clients.iter().map(|&c| (c, Status::Running)).collect();
        clients.sort_unstable_by_key(|&(c, _)| c);
        Accounts {
            running: clients.len(),
            waiting: 0,
            delivered: vec![0; clients.len()],
            clients,
            done_sent: 0,
            done_received: 0,
            applied: 0,
            notified: 0,
            dropped: 0,
            applied_from: Default::default(),
            lost: BTreeSet::new(),
            holding: false,
            probing: None,
        }
    }

    /// `client` is served here from now on (its server was lost, and this
    /// one stands in for it: `server/failover.rs`). What it did before is
    /// counted where it was.
    pub fn adopt(&mut self, client: Rank) {
        if let Err(at) = self.clients.binary_search_by_key(&client, |&(c, _)| c) {
            self.clients.insert(at, (client, Status::Running));
            self.delivered.insert(at, 0);
            self.running += 1;
        }
    }

    fn index(&self, client: Rank) -> Option<usize> {
        self.clients.binary_search_by_key(&client, |&(c, _)| c).ok()
    }

    /// Moves client number `i` to `to`, keeping the counts.
    fn set_status(&mut self, i: usize, to: Status) {
        for (status, step) in [(self.clients[i].1, -1isize), (to, 1)] {
            match status {
                Status::Running => self.running = self.running.wrapping_add_signed(step),
                Status::Waiting => self.waiting = self.waiting.wrapping_add_signed(step),
                Status::Done => {}
            }
        }
        self.clients[i].1 = to;
    }

    /// `client`'s role returned; it waits for notifications.
    pub fn client_waiting(&mut self, client: Rank) {
        if let Some(i) = self.index(client) {
            if self.clients[i].1 == Status::Running {
                self.set_status(i, Status::Waiting);
            }
        }
    }

    /// A notification left for `client` (one of ours).
    pub fn count_delivered(&mut self, client: Rank) {
        if let Some(i) = self.index(client) {
            self.delivered[i] += 1;
        }
    }

    /// `client` is done, with these lifetime counters. Notifications this
    /// server handed it that it had not received when it counted are on
    /// their way to a client that will never act on them: they count as
    /// dropped, or the totals would never balance and the run never end.
    pub fn client_done(&mut self, client: Rank, published: u64, received: u64) {
        if let Some(i) = self.index(client) {
            if self.clients[i].1 != Status::Done {
                self.set_status(i, Status::Done);
                self.done_sent += published;
                self.done_received += received;
                self.dropped += self.delivered[i].saturating_sub(received);
            }
        }
        // A wave waiting for this client's reply now counts it as done.
        if let Some(p) = self.probing.as_mut() {
            p.waiting.remove(&client);
        }
    }

    /// A publication of `client` applied here.
    pub fn count_applied(&mut self, client: Rank) {
        self.applied += 1;
        *self.applied_from.entry(client).or_default() += 1;
    }

    /// `client` was lost (a run with recovery) and will never report its
    /// counters: what it published is what the homes applied of it, each
    /// server counting its own at every report (a message of it that
    /// reaches a moved home after the news of its loss counts as both sent
    /// and received); its server (`ours`) counts every notification it
    /// handed it as dropped. The news may come more than once.
    pub fn client_lost(&mut self, client: Rank, ours: bool) {
        self.lost.insert(client);
        if ours {
            self.client_done(client, 0, 0);
        }
    }

    /// What clients that are done or lost sent.
    fn gone_sent(&self) -> u64 {
        let lost: u64 = (self.lost.iter())
            .map(|c| self.applied_from.get(c).copied().unwrap_or(0))
            .sum();
        self.done_sent + lost
    }

    /// Whether this server holds notifications back.
    pub fn holding(&mut self, holding: bool) {
        self.holding = holding;
    }

    pub fn count_notified(&mut self) {
        self.notified += 1;
    }

    pub fn count_dropped(&mut self) {
        self.dropped += 1;
    }

    /// No client runs its role any more, and at least one waits for
    /// events (when all are done, the plain termination protocol applies).
    pub fn quiet(&self) -> bool {
        self.running == 0 && self.waiting > 0
    }

    /// Starts wave `wave` here.
    pub fn start_wave(&mut self, wave: u64) -> WaveStart {
        let waiting: BTreeSet<Rank> = self
            .clients
            .iter()
            .filter(|&&(_, s)| s == Status::Waiting)
            .map(|&(c, _)| c)
            .collect();
        let running = self.running > 0 || self.holding;
        if running || waiting.is_empty() {
            self.probing = None;
            return WaveStart::Report(Report {
                wave,
                busy: running,
                sent: self.gone_sent() + self.notified,
                received: self.done_received + self.applied + self.dropped,
            });
        }
        let probe = waiting.iter().copied().collect();
        self.probing = Some(Probing {
            wave,
            waiting,
            busy: false,
            sent: 0,
            received: 0,
        });
        WaveStart::Probe(probe)
    }

    /// A waiting client's answer to the probe of `wave`; the server's report
    /// once every probed client has answered (or is done).
    pub fn on_probe_reply(&mut self, client: Rank, r: Report) -> Option<Report> {
        let p = self.probing.as_mut()?;
        if p.wave != r.wave || !p.waiting.remove(&client) {
            return None;
        }
        p.busy |= r.busy;
        p.sent += r.sent;
        p.received += r.received;
        self.report_if_complete()
    }

    /// The report of the wave in progress, once nobody is left to answer.
    pub fn report_if_complete(&mut self) -> Option<Report> {
        if !self.probing.as_ref()?.waiting.is_empty() {
            return None;
        }
        let p = self.probing.take().expect("checked");
        Some(Report {
            wave: p.wave,
            busy: p.busy || self.holding,
            sent: p.sent + self.gone_sent() + self.notified,
            received: p.received + self.done_received + self.applied + self.dropped,
        })
    }
}

/// The seed's part: which servers are quiet, and the waves.
#[derive(Debug)]
pub struct Waves {
    /// Per server: quiet (some client waits) or done (all clients done).
    quiet: Vec<bool>,
    done: Vec<bool>,
    wave: u64,
    /// Replies still due for the wave in progress, and their sums.
    collecting: Option<(usize, bool, u64, u64)>,
    /// The totals of the last complete, not busy wave.
    last: Option<(u64, u64)>,
    next_at: Option<Instant>,
    pause: Duration,
    /// Per server: lost (a run with replicated homes outlived it,
    /// `server/failover.rs`): it answers no wave, and the counts it held
    /// are gone with it.
    lost: Vec<bool>,
    /// Waves in a row, not busy, with the same totals.
    same: u32,
}

const FIRST_PAUSE: Duration = Duration::from_millis(1);
const MAX_PAUSE: Duration = Duration::from_millis(50);

impl Waves {
    pub fn new(servers: usize) -> Waves {
        Waves {
            quiet: vec![false; servers],
            done: vec![false; servers],
            wave: 0,
            collecting: None,
            last: None,
            next_at: None,
            pause: FIRST_PAUSE,
            lost: vec![false; servers],
            same: 0,
        }
    }

    /// Server number `i` is lost: it answers no wave, and the counters of
    /// the publications and notifications it took in or sent are gone, so
    /// the totals can no longer balance. From then on the run is quiescent
    /// once three waves in a row, apart, find no client busy and nothing
    /// moved: a notification on its way through all three could then be
    /// missed (the weaker test a run pays for outliving a server).
    pub fn server_lost(&mut self, i: usize) {
        self.server_done(i);
        if let Some(l) = self.lost.get_mut(i) {
            *l = true;
        }
        // A wave still collecting (which it may have answered or not) is
        // given up: the next one waits only for the servers left.
        self.collecting = None;
        self.next_at = None;
    }

    /// Server number `i` (its index in the server list) has no client
    /// running its role, and some waiting.
    pub fn server_quiet(&mut self, i: usize) {
        if let Some(q) = self.quiet.get_mut(i) {
            *q = true;
        }
    }

    /// Server number `i` has all its clients done.
    pub fn server_done(&mut self, i: usize) {
        if let Some(d) = self.done.get_mut(i) {
            *d = true;
        }
    }

    /// Server number `i` has clients not done again (it took over a lost
    /// server's).
    pub fn server_undone(&mut self, i: usize) {
        if let Some(d) = self.done.get_mut(i) {
            *d = false;
        }
    }

    /// The next wave to send, if one is due at `now`.
    pub fn due(&mut self, now: Instant) -> Option<u64> {
        // Waves only while some client waits: otherwise the plain
        // termination protocol ends the run.
        let settled = self.quiet.iter().zip(&self.done).all(|(&q, &d)| q || d);
        let waiting = self.quiet.iter().zip(&self.done).any(|(&q, &d)| q && !d);
        if self.collecting.is_some() || !settled || !waiting {
            return None;
        }
        if self.next_at.is_some_and(|t| now < t) {
            return None;
        }
        self.wave += 1;
        let answering = self.lost.iter().filter(|&&l| !l).count();
        self.collecting = Some((answering, false, 0, 0));
        Some(self.wave)
    }

    /// A server's report; `Some(true)` when the run is quiescent.
    pub fn on_report(&mut self, r: Report, now: Instant) -> Option<bool> {
        if r.wave != self.wave {
            return None;
        }
        let (left, busy, sent, received) = self.collecting.as_mut()?;
        *left -= 1;
        *busy |= r.busy;
        *sent += r.sent;
        *received += r.received;
        if *left > 0 {
            return None;
        }
        let (_, busy, sent, received) = self.collecting.take().expect("checked");
        let totals = (sent, received);
        tracing::trace!(
            "quiescence: wave {} busy {busy} sent {sent} received {received}",
            r.wave
        );
        let same = !busy && self.last == Some(totals);
        self.same = if same { self.same + 1 } else { 0 };
        let over = if self.lost.iter().any(|&l| l) {
            self.same >= 2
        } else {
            same && sent == received
        };
        self.last = (!busy).then_some(totals);
        if !over {
            // Back to back when the first of a pair of waves just passed.
            let pause = if !busy && sent == received && !self.lost.iter().any(|&l| l) {
                Duration::ZERO
            } else {
                let p = self.pause;
                self.pause = (self.pause * 2).min(MAX_PAUSE);
                p
            };
            self.next_at = Some(now + pause);
        }
        Some(over)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(wave: u64, busy: bool, sent: u64, received: u64) -> Report {
        Report {
            wave,
            busy,
            sent,
            received,
        }
    }

    #[test]
    fn a_server_with_a_running_client_is_busy_at_once() {
        let mut a = Accounts::new(&[2, 3]);
        a.client_waiting(2);
        assert!(!a.quiet());
        assert_eq!(a.start_wave(1), WaveStart::Report(report(1, true, 0, 0)));
        a.client_done(3, 4, 1);
        assert!(a.quiet());
        assert_eq!(a.start_wave(2), WaveStart::Probe(vec![2]));
        a.count_applied(2);
        a.count_notified();
        assert_eq!(
            a.on_probe_reply(2, report(1, false, 9, 9)),
            None,
            "old wave"
        );
        assert_eq!(
            a.on_probe_reply(2, report(2, false, 1, 2)),
            Some(report(2, false, 4 + 1 + 1, 1 + 2 + 1))
        );
    }

    #[test]
    fn a_client_done_during_a_wave_completes_it() {
        let mut a = Accounts::new(&[2, 3]);
        a.client_waiting(2);
        a.client_waiting(3);
        assert_eq!(a.start_wave(1), WaveStart::Probe(vec![2, 3]));
        assert_eq!(a.on_probe_reply(2, report(1, false, 1, 1)), None);
        a.client_done(3, 2, 2);
        assert_eq!(a.report_if_complete(), Some(report(1, false, 3, 3)));
    }

    #[test]
    fn the_run_ends_after_two_equal_idle_waves() {
        let t = Instant::now();
        let mut w = Waves::new(2);
        assert_eq!(w.due(t), None, "no server is quiet yet");
        w.server_done(0);
        assert_eq!(w.due(t), None, "server 1 still runs");
        let mut all_done = Waves::new(2);
        all_done.server_done(0);
        all_done.server_done(1);
        assert_eq!(all_done.due(t), None, "nobody waits: no waves");
        w.server_quiet(1);
        let one = w.due(t).unwrap();
        assert_eq!(w.due(t), None, "one wave at a time");
        assert_eq!(w.on_report(report(one, false, 5, 4), t), None);
        assert_eq!(w.on_report(report(one, false, 0, 1), t), Some(false));
        // Balanced, but a first sighting: the next wave is due at once.
        let two = w.due(t).unwrap();
        w.on_report(report(two, false, 5, 5), t);
        assert_eq!(w.on_report(report(two, false, 0, 0), t), Some(true));
    }

    #[test]
    fn moving_counters_or_a_busy_client_keep_the_run_going() {
        let t = Instant::now();
        let mut w = Waves::new(1);
        w.server_quiet(0);
        let wave = |w: &mut Waves, busy, s, r| {
            let n = w.due(t + Duration::from_secs(1)).unwrap();
            w.on_report(report(n, busy, s, r), t).unwrap()
        };
        assert!(!wave(&mut w, false, 3, 3));
        assert!(!wave(&mut w, false, 4, 4), "something happened between");
        assert!(!wave(&mut w, true, 4, 4), "a handler runs");
        assert!(!wave(&mut w, false, 4, 4), "the busy wave does not count");
        assert!(wave(&mut w, false, 4, 4));
    }
}
