//! The client's side of a server's loss in a run with replicated homes and
//! recovery (`server/failover.rs`).
//!
//! Its server tells it `ServerLost` once every server alive has applied the
//! loss (the lost server's own clients hear it from the stand-in, which
//! serves them from then on). The lost server's homes, and, for its own
//! clients, every path the client's messages took, are gone with what they
//! knew of this process: its copies, scopes and requests. So:
//! - a chunk of the lost server's (every chunk, for its own clients) that
//!   no thread holds starts afresh: the next scope asks its new home;
//! - a scope open on one ends when its thread ends it, with no message: a
//!   READ as usual, a write with `ProcessLost` (nothing was published; the
//!   chunk keeps its last released version, which its backup held);
//! - a call waiting for such a chunk's grant fails with `ProcessLost`; so
//!   does a RELEASE waiting for the home to say both servers hold it (it
//!   may have been published or not: read the chunk to know), a MALLOC or
//!   LOOKUP waiting for its home;
//! - for the lost server's clients, barrier arrivals and wakeups it carried
//!   (or whose answers it did) are sent again through the stand-in, as they
//!   were: their coordinator takes each once (`sync.rs`), so the calls end
//!   as their first requests would have;
//! - its subscriptions to those chunks are made again at the new homes;
//! - a chain's release whose `Durable`s the loss took (some of its chunks'
//!   releases may have been applied and others not) is sent again, chunk by
//!   chunk, as `Republish`: each home applies what it did not have, so the
//!   chain ends all new (`server/republish.rs`);
//! - it answers `LossSeen`, after which its server takes its requests about
//!   those chunks again.
//!
//! The transport may see the loss first: a message to the dead server, or
//! one on its way from it, fails, and the next poll reports the server
//! unreachable. That is not the run's word: it may come before the
//! stand-in's `ServerLost`, and reported as it is, it would fail the call
//! it caught with a transport error a program is not told to retry (and
//! every later call, each sending through the dead server again), while
//! the run goes on without that server. So a server the transport cannot
//! reach is [`Suspect`]: the error is held back and the calls wait on,
//! until the `ServerLost` ends them as above, or, if no such news comes
//! within [`suspect_patience`], the error is reported after all.

use std::time::{Duration, Instant};

use super::{ClientState, Mailbox};
use crate::chunk::ChunkId;
use crate::protocol::mesi::ToHome;
use crate::transport::{Payload, Rank, Sender, TransportError, MAX_HEADER};
use crate::wire::{self, Message};

/// A chunk's release made in a chain's release, in a run with replicated
/// homes, whose `Durable` has not come: what `Republish` sends again.
pub(super) struct Unconfirmed {
    /// The release (its version; whether it yields an E copy).
    op: ToHome,
    /// The chunk's count of publishing releases that this one made: its
    /// `Durable` is the one that brings the count of `Durable`s there.
    due: u64,
    bytes: Vec<u8>,
}

/// A server the transport reported unreachable, of which the run has not
/// said that it was lost (see the module's doc).
pub(super) struct Suspect {
    server: Rank,
    error: TransportError,
    since: Instant,
}

/// How long a suspect server's error is held back: past the lease in which
/// the run's seed declares a silent process lost (under `satrun` a dead
/// process is declared at once), with room for the news to travel.
fn suspect_patience() -> Duration {
    Duration::from_secs(2 * crate::settings::get().lease_s.max(1) + 5)
}

impl ClientState {
    /// What an error of the transport's poll means for this client: held
    /// back (Ok) when it says a server of a run with replicated homes is
    /// unreachable, whose loss the run is about to announce or already
    /// did (then the error is only about messages that were on their way
    /// to or from it); the error itself otherwise.
    pub(super) fn peer_trouble(&mut self, error: TransportError) -> Result<(), TransportError> {
        let TransportError::PeerLost { rank, .. } = &error else {
            return Err(error);
        };
        let rank = *rank;
        if !self.replicated || !self.ring.servers().contains(&rank) {
            return Err(error);
        }
        if self.ring.is_lost(rank) {
            tracing::debug!("lost server {rank}: {error}");
        } else if !self.suspects.iter().any(|s| s.server == rank) {
            tracing::warn!(
                "{error}: waiting for the run to say it was lost (up to {} s), as its backups \
                 then take its place",
                suspect_patience().as_secs()
            );
            self.suspects.push(Suspect {
                server: rank,
                error,
                since: Instant::now(),
            });
        }
        Ok(())
    }

    /// The held-back error of a suspect server whose loss the run did not
    /// announce in time; forgets the suspects it did announce.
    pub(super) fn suspicion_expired(&mut self) -> Result<(), TransportError> {
        // Every poll asks: nothing to do in the usual case.
        if self.suspects.is_empty() {
            return Ok(());
        }
        let ring = &self.ring;
        self.suspects.retain(|s| !ring.is_lost(s.server));
        match self
            .suspects
            .iter()
            .position(|s| s.since.elapsed() >= suspect_patience())
        {
            Some(i) => Err(self.suspects.swap_remove(i).error),
            None => Ok(()),
        }
    }

    /// Message `ServerLost { server: lost }` from `src` (see the module's
    /// doc). Returns whether it was taken.
    pub(super) fn server_lost(&mut self, me: Rank, src: Rank, lost: Rank) -> bool {
        if self.ring.is_lost(lost) || !self.ring.servers().contains(&lost) {
            tracing::warn!(
                "dropped news of the loss of server {lost} from {src}: known, or no server"
            );
            return false;
        }
        let moved = self.server == lost;
        let mut after = self.ring.clone();
        after.lose(lost);
        let stand_in = after.stand_in(lost);
        if src != if moved { stand_in } else { self.server } {
            tracing::warn!(
                "dropped news of the loss of server {lost} from {src}: not from this client's \
                 server"
            );
            return false;
        }
        let why = if moved {
            format!(
                "server {lost}, this client's, was lost: its calls in progress went through it; \
                 server {stand_in} serves it now"
            )
        } else {
            format!("server {lost}, the home of the chunk, was lost")
        };
        tracing::warn!("{why}");
        let affected: Vec<ChunkId> = (self.store.chunk_ids().into_iter())
            .filter(|&c| moved || self.ring.home(c) == lost)
            .collect();
        // Before `home_lost` counts their `Durable`s as come.
        let again = self.mail.unconfirmed_of(&affected);
        for &chunk in &affected {
            self.store.orphan(chunk, &why);
        }
        let ring = &self.ring;
        let was_home = |chunk: ChunkId| moved || ring.home(chunk) == lost;
        self.mail.home_lost(&affected, was_home, &why);
        self.ring = after;
        if moved {
            self.server = stand_in;
        }
        let server = self.server;
        // What waits to go to it never will.
        if let Err(e) = self.transport.remove_peer(lost) {
            tracing::debug!("could not forget the endpoint of lost server {lost}: {e}");
        }
        let out: &mut dyn Sender = self.transport.as_mut();
        // Ahead of `LossSeen`: the homes take them before any other
        // process can read the chunks (`server/republish.rs`).
        for (chunk, u) in again {
            let msg = Message::Republish {
                chunk,
                client: me,
                version: u.op.released_version().unwrap_or(0),
                yielded: matches!(u.op, ToHome::ReleaseYield { .. }),
            };
            send_with(out, server, &msg, Payload::Copy(&u.bytes));
        }
        send(out, server, &Message::LossSeen { server: lost });
        for (chunk, with_data, seen) in self.mail.events.subscribe_again(&affected) {
            let msg = Message::Resubscribe {
                chunk,
                client: me,
                with_data,
                seen,
            };
            send(out, server, &msg);
        }
        if moved {
            // The coordinator forgot this client's signal subscriptions
            // with its server (`Coordinator::server_lost`): made again. A
            // signal raised meanwhile is not told.
            for id in self.mail.events.signals_again() {
                let op = wire::SyncOp::SignalSubscribe { id };
                send(out, server, &Message::Sync { client: me, op });
            }
            // A rendezvous that waits may have sent its request through
            // the lost server, which never passed it on, and the
            // coordinator forgot this client's sleeper entries with it:
            // asked again (the coordinator keeps one entry per client,
            // and answers at once a generation past what was consumed).
            let losses = self.mail.sync.sleep_losses();
            for (id, seen) in self.mail.sync.sleeps_again() {
                let op = wire::SyncOp::Sleep { id, seen, losses };
                send(out, server, &Message::Sync { client: me, op });
            }
            // Barrier arrivals and wakeups the lost server carried, or whose
            // answers it did: sent again as they were. Their coordinator
            // takes each ticket once, and answers it again if it had.
            for (op, fetch) in self.mail.sync.in_flight() {
                let msg = Message::Sync { client: me, op };
                send_with(out, server, &msg, Payload::Copy(&fetch));
            }
        }
        if moved && self.mail.idle_told {
            // It waits for events only: the stand-in hears it too.
            send(out, server, &Message::ClientIdle);
        }
        if moved {
            // Its end went to the lost server (acknowledged or not): the
            // stand-in hears it.
            if let Some((published, received)) = self.mail.done_sent {
                let msg = Message::ClientDone {
                    published,
                    received,
                };
                send(out, server, &msg);
            }
        }
        true
    }
}

impl Mailbox {
    /// Keeps the bytes of `op`, the release of `chunk` that made its count
    /// of publishing releases `due`, until its `Durable` comes.
    pub(super) fn keep_unconfirmed(
        &mut self,
        chunk: ChunkId,
        op: ToHome,
        due: u64,
        bytes: Vec<u8>,
    ) {
        if op.released_version().is_some() {
            self.unconfirmed
                .insert(chunk, Unconfirmed { op, due, bytes });
        }
    }

    /// `chunk`'s count of `Durable`s is now `got`.
    pub(super) fn confirmed(&mut self, chunk: ChunkId, got: u64) {
        if self.unconfirmed.get(&chunk).is_some_and(|u| u.due <= got) {
            self.unconfirmed.remove(&chunk);
        }
    }

    /// Of `chunks`, the releases whose `Durable` has not come, to send
    /// again; every one of them is forgotten.
    fn unconfirmed_of(&mut self, chunks: &[ChunkId]) -> Vec<(ChunkId, Unconfirmed)> {
        let mut again = Vec::new();
        for chunk in chunks {
            let Some(u) = self.unconfirmed.remove(chunk) else {
                continue;
            };
            let got = self.durable.get(chunk).map_or(0, |d| d.1);
            if got < u.due {
                again.push((*chunk, u));
            }
        }
        again
    }

    /// The waits of this client that the loss ends (see the module's doc).
    fn home_lost(&mut self, chunks: &[ChunkId], was_home: impl Fn(ChunkId) -> bool, why: &str) {
        for chunk in chunks {
            if let Some((due, got)) = self.durable.get_mut(chunk) {
                if *got < *due {
                    self.durable_lost.insert(*chunk, (*due, why.to_owned()));
                    *got = *due;
                }
            }
        }
        for (number, (chunk, answer)) in self.alloc.iter() {
            if answer.is_none() && was_home(*chunk) {
                self.alloc_lost.insert(*number, why.to_owned());
            }
        }
    }
}

fn send(out: &mut dyn Sender, to: Rank, msg: &Message) {
    send_with(out, to, msg, Payload::None)
}

fn send_with(out: &mut dyn Sender, to: Rank, msg: &Message, payload: Payload<'_>) {
    let mut header = [0u8; MAX_HEADER];
    let n = wire::encode(msg, &mut header).expect("fits a header");
    if let Err(e) = out.send(to, &header[..n], payload) {
        tracing::warn!("could not send {} to server {to}: {e}", msg.kind());
    }
}
