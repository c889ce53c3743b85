//! The drain before a run shuts down.
//!
//! Once every client of every server is done, the seed tells the servers to
//! shut down, and each closes at once. A message one server sent another
//! before that (a client's release forwarded to its chunk's home; twice,
//! when the home had moved and the client's server did not know yet) can
//! still be on its way then: the order between two servers is kept, but the
//! seed's `Shutdown` travels on another channel than the forward, so the
//! home may close first and never apply a release its client saw return.
//! The whole-stack simulator found it ("no lost update": a forward from the
//! client's server to the old home, on to the new one, behind the shutdown).
//!
//! So the seed drains the servers first: waves of `Drain`, each server
//! answering how many messages it has sent to other servers and taken in
//! from them (the termination protocol's own aside). The run shuts down once
//! two waves in a row find the same totals and as many taken in as sent:
//! the counters only grow, so equal totals mean nothing moved between the
//! waves, and equal sums mean nothing is on its way (Mattern's four
//! counters, as the quiescence detection uses for notifications). A run that
//! lost a server cannot balance its counters (the lost one's are gone) and
//! shuts down at once, as before. The drain gives up after [`DRAIN_LIMIT`],
//! with a warning, so that a miscount cannot keep a finished run alive.

use std::time::{Duration, Instant};

use crate::wire::Message;

/// How long the seed drains before it shuts the run down anyway.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Whether `msg`, from one server to another, counts in the drain: every
/// message but the termination protocol's own (which flow while the drain
/// runs, or after it).
pub(crate) fn counted(msg: &Message) -> bool {
    !matches!(
        msg,
        Message::ServerDone
            | Message::Shutdown
            | Message::ShutdownAck
            | Message::Drain { .. }
            | Message::Drained { .. }
            | Message::Probe { .. }
            | Message::ProbeReply { .. }
            | Message::ServerQuiet
            | Message::Stop
    )
}

/// The seed's side of the drain.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    wave: u64,
    /// Answers still due for the wave in progress, and their sums.
    collecting: Option<(usize, u64, u64)>,
    /// The totals of the last complete wave.
    last: Option<(u64, u64)>,
    started: Option<Instant>,
    /// Two waves agreed (or the drain gave up): the run may shut down.
    over: bool,
}

impl Drain {
    /// Whether the run may shut down.
    pub fn over(&self) -> bool {
        self.over
    }

    /// Whether a wave is under way.
    pub fn collecting(&self) -> bool {
        self.collecting.is_some()
    }

    /// Starts the next wave, which `answering` servers will answer; the
    /// seed's own counts are in from the start. Returns its number.
    pub fn start(&mut self, answering: usize, (sent, received): (u64, u64), now: Instant) -> u64 {
        self.started.get_or_insert(now);
        self.wave += 1;
        self.collecting = Some((answering, sent, received));
        if answering == 0 {
            self.complete();
        }
        self.wave
    }

    /// A server's answer to wave `wave`.
    pub fn on_report(&mut self, wave: u64, sent: u64, received: u64) {
        if wave != self.wave {
            return;
        }
        let Some((left, s, r)) = self.collecting.as_mut() else {
            return;
        };
        *left = left.saturating_sub(1);
        *s += sent;
        *r += received;
        if *left == 0 {
            self.complete();
        }
    }

    fn complete(&mut self) {
        let Some((_, sent, received)) = self.collecting.take() else {
            return;
        };
        let totals = (sent, received);
        tracing::debug!(
            "seed: drain wave {}: {sent} messages between servers sent, {received} taken in",
            self.wave
        );
        self.over = sent == received && self.last == Some(totals);
        self.last = Some(totals);
    }

    /// Gives up when the drain has run for [`DRAIN_LIMIT`]; says whether it did.
    pub fn give_up_at(&mut self, now: Instant) -> bool {
        let expired = self
            .started
            .is_some_and(|t| now.duration_since(t) >= DRAIN_LIMIT);
        if expired && !self.over {
            tracing::warn!(
                "seed: the servers' messages to each other did not balance within {DRAIN_LIMIT:?} \
                 (last totals sent, taken in: {:?}): shutting down anyway",
                self.last
            );
            self.over = true;
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_equal_balanced_waves_end_the_drain_and_a_message_on_its_way_does_not() {
        let now = Instant::now();
        let mut d = Drain::default();
        // Wave 1: one message sent, not yet taken in.
        let w = d.start(1, (3, 2), now);
        d.on_report(w, 1, 1);
        assert!(!d.over() && !d.collecting());
        // Wave 2: taken in since, so the totals moved: not over yet.
        let w = d.start(1, (3, 3), now);
        d.on_report(w, 1, 1);
        assert!(!d.over(), "totals that moved between waves end nothing");
        // Wave 3: the same balanced totals again.
        let w = d.start(1, (3, 3), now);
        d.on_report(w - 1, 5, 0); // a late answer to an old wave counts for nothing
        assert!(d.collecting());
        d.on_report(w, 1, 1);
        assert!(d.over());
    }

    #[test]
    fn equal_but_unbalanced_waves_keep_draining_until_the_limit() {
        let now = Instant::now();
        let mut d = Drain::default();
        for _ in 0..3 {
            let w = d.start(0, (4, 3), now);
            assert_eq!(w, d.wave);
        }
        assert!(!d.over(), "a message on its way is not the end");
        assert!(!d.give_up_at(now + Duration::from_millis(10)));
        assert!(d.give_up_at(now + DRAIN_LIMIT));
        assert!(d.over());
    }

    #[test]
    fn the_termination_protocol_s_own_messages_are_not_counted() {
        assert!(!counted(&Message::Shutdown));
        assert!(!counted(&Message::Drained {
            wave: 1,
            sent: 0,
            received: 0
        }));
        assert!(counted(&Message::Fetch {
            client: 2,
            chunks: vec![]
        }));
    }
}
