//! The server's part in a run with recovery (`SAT_RECOVERY=on`): the run
//! outlives a client that dies or stops answering.
//!
//! The seed's watch ([`crate::bootstrap::watch`]) reports lost processes. A
//! lost client is forgotten as a service forgets a client that dies
//! ([`super::membership`]): its server announces its departure on every
//! path, so each home revokes its write scope (the chunk keeps its last
//! released version: a host slot's two buffers keep a release it was
//! copying from showing), frees its host-slot locks and stops waiting for
//! it; its messages are dropped from then on, and the run ends without its
//! `ClientDone`. Barrier rounds that may count on it fail once in every
//! survivor ([`crate::sync`]). A lost server cannot be recovered from (its
//! homes' versions have no other copy), so the seed stops the run and tells
//! every process why: their calls fail with that reason instead of waiting
//! for answers that will never come.

use super::ServerState;
use crate::bootstrap::watch::{Fatal, PeerWatch, SeedWatch, Watch};
use crate::error::{SatError, SatResult};
use crate::transport::{Payload, Rank, Transport};
use crate::wire::Message;

/// What a server of a run with recovery keeps.
pub(crate) struct RunRecovery {
    /// The seed's watch over every other process (None elsewhere).
    watch: Option<SeedWatch>,
    /// Another server's watch of the seed: kept open as long as it serves.
    peer: Option<PeerWatch>,
    /// Why this server cannot go on, once its watch knows.
    fatal: Fatal,
    /// Lost clients of ours whose endpoint goes after the poll.
    pub(super) leaving: Vec<Rank>,
    /// Clients of ours the transport reported unreachable.
    pub(super) unreachable: Vec<Rank>,
}

impl RunRecovery {
    pub(crate) fn new(watch: Watch) -> RunRecovery {
        let fatal = watch.fatal();
        let (watch, peer) = match watch {
            Watch::Seed(w) => (Some(w), None),
            Watch::Peer(p) => (None, Some(p)),
        };
        RunRecovery {
            watch,
            peer,
            fatal,
            leaving: Vec::new(),
            unreachable: Vec::new(),
        }
    }

    /// Server `rank` is lost: the run cannot go on. The seed tells every
    /// process why; the error ends this server.
    pub(super) fn server_lost(&self, rank: Rank, why: &str) -> SatError {
        let reason = format!(
            "server {rank} was lost ({why}): the versions of the chunks it homed are gone, so \
             the run cannot go on"
        );
        tracing::error!("{reason}");
        if let Some(w) = self.watch.as_ref() {
            w.abort(&reason);
        }
        SatError::Aborted(reason)
    }

    /// The run ended well (this server finished and its last messages
    /// left): on the seed, every process is told, so that the seed's
    /// process ending is no news to one still taking in its last answer.
    pub(crate) fn run_ended(&mut self) {
        if let Some(w) = self.watch.as_ref() {
            w.ended();
        }
        // Another server says goodbye.
        if let Some(p) = self.peer.take() {
            p.bye();
        }
    }

    /// Without a watch: the simulator's servers, whose clients it kills
    /// itself.
    #[cfg(any(test, feature = "simulator"))]
    pub(crate) fn unwatched() -> RunRecovery {
        RunRecovery {
            watch: None,
            peer: None,
            fatal: Fatal::default(),
            leaving: Vec::new(),
            unreachable: Vec::new(),
        }
    }
}

impl ServerState<'_> {
    /// Seed: the watch says client `rank` is gone. Its server (the one
    /// serving it now) is told, after whatever the seed sent it before: a
    /// server's loss this server has to apply first, say.
    pub(super) fn watched_client_lost(
        &mut self,
        transport: &mut dyn Transport,
        rank: Rank,
        why: &str,
    ) {
        // Should its server be lost, its stand-in counts it done.
        self.failover.gone.insert(rank);
        let server = self.serving(rank);
        if server == self.rank {
            if self.client_done[rank as usize] {
                // Its connection closed as it exited after its run.
                return;
            }
            self.client_lost(transport, rank, why);
        } else {
            // Its server knows whether it had finished, and says so.
            tracing::debug!("seed: client {rank}'s watch connection ended ({why})");
            let msg = Message::ClientLost { client: rank };
            self.send(transport, server, &msg, Payload::Copy(why.as_bytes()));
        }
    }

    fn recovery_mut(&mut self) -> &mut RunRecovery {
        self.recovery.as_mut().expect("a run with recovery")
    }

    /// After each poll, in a run with recovery: the losses the watch
    /// reported, then the endpoints to forget. An error ends this server
    /// (and, on the seed, the run).
    pub(super) fn apply_losses(&mut self, transport: &mut dyn Transport) -> SatResult<()> {
        if let Some(why) = self.recovery_mut().fatal.reason() {
            return Err(SatError::Aborted(why.to_owned()));
        }
        let lost = self
            .recovery_mut()
            .watch
            .as_ref()
            .map(SeedWatch::lost)
            .unwrap_or_default();
        let finished = self
            .recovery_mut()
            .watch
            .as_ref()
            .map(SeedWatch::finished)
            .unwrap_or_default();
        for client in finished {
            if self.topology.get(client).is_some_and(|e| !e.is_server()) {
                self.said_goodbye(transport, client);
            }
        }
        for (rank, why) in lost {
            if self.topology.is_server(rank) {
                if self.shutdown_sent || self.ring.is_lost(rank) {
                    // It ended with the run, or is known lost.
                    continue;
                }
                // With replicated homes its backups take its part over
                // (`server/failover.rs`).
                match self.cannot_fail_over(rank) {
                    None => {
                        self.seed_server_lost(transport, rank, &why);
                        continue;
                    }
                    Some(why_not) if self.replicated() => {
                        let why = format!("{why}; {why_not}");
                        return Err(self.recovery_mut().server_lost(rank, &why));
                    }
                    Some(_) => return Err(self.recovery_mut().server_lost(rank, &why)),
                }
            }
            if self.topology.get(rank).is_some() {
                self.watched_client_lost(transport, rank, &why);
            }
        }
        for client in std::mem::take(&mut self.recovery_mut().unreachable) {
            if self.is_my_client(client) {
                self.client_lost(transport, client, "the transport could not reach it");
            }
        }
        for server in std::mem::take(&mut self.failover.forget) {
            if let Err(e) = transport.remove_peer(server) {
                tracing::warn!(
                    "server {}: could not forget the endpoint of lost server {server}: {e}",
                    self.rank
                );
            }
        }
        for client in std::mem::take(&mut self.recovery_mut().leaving) {
            if let Err(e) = transport.remove_peer(client) {
                tracing::warn!(
                    "server {}: could not forget the endpoint of lost client {client}: {e}",
                    self.rank
                );
            }
        }
        Ok(())
    }
}
