//! A run with replicated homes and recovery outlives a server
//! (`<topologies replication="2">`, `satrun --enable-recovery`): the
//! backups take its chunks over and its clients move to its stand-in, the
//! next server alive (`topology/ring.rs`).
//!
//! 1. **The seed hears of the loss** from its watch, marks the server done
//!    for the termination protocol and sends `ServerLost` to every other
//!    server alive; the seed cannot be lost itself (its watch is the run's
//!    membership), nor can a loss be survived in a run without replicas.
//! 2. **Every server applies it** ([`ServerState::apply_server_loss`]):
//!    - it drops whatever comes from the lost server from then on;
//!    - its homes forget the lost server's clients as a home forgets a
//!      client that left: their write scopes are revoked (the chunk keeps
//!      its last released version), their copies and requests forgotten;
//!    - the stand-in makes a home of each replica the lost server had sent
//!      it (the chunk's last acknowledged version: no process heard of a
//!      later one, `server/replicas.rs`) and serves the lost server's
//!      clients;
//!    - every chunk whose backup was the lost server, or that the stand-in
//!      took over, is sent to its new backup, and what it holds back waits
//!      for that one;
//!    - it fences its own clients: what they sent about the lost server's
//!      chunks before they knew of the loss is dropped until they say
//!      `LossSeen` (it was sent to a home that is gone, and they will not
//!      wait for its answer);
//!    - it tells every other server `LossApplied`.
//! 3. **Once every server alive has applied it**, each tells its clients
//!    `ServerLost` (the stand-in tells the lost server's clients too). No
//!    client can then send a request that reaches a server which has not
//!    applied the loss (it would send it to the lost home). A client drops
//!    what it held of the lost server's chunks (and, if it was that
//!    server's, of every chunk), fails the calls that waited for them, and
//!    answers `LossSeen` (`client/failover.rs`).

use std::collections::{BTreeMap, BTreeSet};

use super::{HomeEntry, ServerState, SEED};
use crate::protocol::LastRelease;
use crate::transport::{Payload, Rank, Sender};
use crate::wire::Message;

/// What the servers keep to survive the loss of one of them.
#[derive(Default)]
pub(super) struct Failover {
    /// Per lost server: the servers that have applied its loss (this one
    /// included once it has), until its clients are told.
    applying: BTreeMap<Rank, BTreeSet<Rank>>,
    /// Per client of ours: the lost servers it has not said `LossSeen` for.
    fenced: BTreeMap<Rank, BTreeSet<Rank>>,
    /// Lost servers whose endpoints go after the poll.
    pub(super) forget: Vec<Rank>,
    /// Seed: the processes that said goodbye ([`crate::wire::ToSeed`]'s
    /// `Bye`): a client of a lost server that had finished is done.
    pub(super) finished: BTreeSet<Rank>,
}

impl ServerState<'_> {
    /// Why the run cannot go on without server `server`; None when it can
    /// (the seed hears of its loss).
    pub(super) fn cannot_fail_over(&self, server: Rank) -> Option<&'static str> {
        if !self.replicated() {
            Some("the versions of the chunks it homed are gone (the run keeps no replicas)")
        } else if server == SEED {
            Some("the seed keeps the run's membership")
        } else if self.ring.alive().filter(|&s| s != server).count() == 0 {
            Some("no server is left")
        } else {
            None
        }
    }

    /// Seed: server `server` is lost and the run goes on without it.
    pub(super) fn seed_server_lost(&mut self, out: &mut dyn Sender, server: Rank, why: &str) {
        if self.ring.is_lost(server) {
            return;
        }
        let stand_in = self.stand_in_after_loss(server);
        tracing::warn!(
            "server {server} was lost ({why}); its chunks are served by their backups and its \
             clients by server {stand_in}: the run goes on without it"
        );
        self.mark_server_done(server);
        // It will not acknowledge the shutdown.
        self.acks_left = self.acks_left.saturating_sub(1);
        let others: Vec<Rank> = self
            .ring
            .alive()
            .filter(|&s| s != server && s != self.rank)
            .collect();
        for s in others {
            self.send(out, s, &Message::ServerLost { server }, Payload::None);
        }
        self.apply_server_loss(out, server);
        let finished: Vec<Rank> = (self.topology.clients_of(server).iter())
            .copied()
            .filter(|c| self.failover.finished.contains(c))
            .collect();
        for client in finished {
            self.finished_elsewhere(out, client);
        }
    }

    /// Seed: `client` said goodbye; if its server is lost, the server that
    /// serves it now is told it finished.
    pub(super) fn said_goodbye(&mut self, out: &mut dyn Sender, client: Rank) {
        self.failover.finished.insert(client);
        let own = self.topology.server_of(client);
        if self.ring.is_lost(own) {
            self.finished_elsewhere(out, client);
        }
    }

    fn finished_elsewhere(&mut self, out: &mut dyn Sender, client: Rank) {
        if self.is_my_client(client) {
            self.client_finished(out, client);
        } else {
            let to = self.serving(client);
            self.send(out, to, &Message::ClientFinished { client }, Payload::None);
        }
    }

    /// `client`, whose server was lost, finished the run: it is done here.
    pub(super) fn client_finished(&mut self, out: &mut dyn Sender, client: Rank) {
        if std::mem::replace(&mut self.client_done[client as usize], true) {
            return;
        }
        tracing::debug!(
            "server {}: client {client} had finished before its server was lost",
            self.rank
        );
        self.clients_left -= 1;
        self.accounts.client_lost(client, true);
        self.announce_departure(out, client, false);
    }

    /// Where `server`'s part goes once it is lost.
    fn stand_in_after_loss(&self, server: Rank) -> Rank {
        let mut ring = self.ring.clone();
        ring.lose(server);
        ring.stand_in(server)
    }

    /// Applies the loss of server `lost` here (see the module's doc).
    pub(super) fn apply_server_loss(&mut self, out: &mut dyn Sender, lost: Rank) {
        if self.ring.is_lost(lost) {
            return;
        }
        // Before the ring changes: the chunks whose backup was `lost`, and
        // the replicas it had sent here.
        let rebackup: Vec<u64> = (self.homes.keys().copied())
            .filter(|&c| self.backup_of(c) == Some(lost))
            .collect();
        let orphans: Vec<u64> = self.replicas.kept_from(|chunk| self.home_of(chunk) == lost);
        self.ring.lose(lost);
        self.failover.forget.push(lost);
        let stand_in = self.ring.stand_in(lost);
        tracing::info!(
            "server {}: server {lost} is lost; server {stand_in} stands in for it",
            self.rank
        );
        // Every home forgets the lost server's clients: what they held or
        // asked for went through it.
        let moved: Vec<Rank> = self.topology.clients_of(lost).to_vec();
        for &client in &moved {
            self.forget_client_at_homes(out, client);
            if self.rank == SEED {
                let mut answers = Vec::new();
                self.coordinator.client_lost(client, &mut answers);
                for (to, op) in answers {
                    self.send_to_client(out, to, &Message::Sync { client: to, op });
                }
            }
        }
        for chunk in orphans {
            self.take_over_replica(out, chunk);
        }
        for chunk in rebackup {
            self.rebackup(out, chunk);
        }
        if stand_in == self.rank {
            for &client in &moved {
                if !self.client_done[client as usize] {
                    self.clients_left += 1;
                }
                self.accounts.adopt(client);
            }
        }
        // Our own clients' requests about the lost server's chunks, sent
        // before they knew, are dropped until they say they know.
        let mine: Vec<Rank> = (self.topology.clients_of(self.rank).iter())
            .copied()
            .filter(|&c| !self.client_done[c as usize])
            .collect();
        for client in mine {
            self.failover.fenced.entry(client).or_default().insert(lost);
        }
        let others: Vec<Rank> = self.ring.alive().filter(|&s| s != self.rank).collect();
        for s in others {
            self.send(
                out,
                s,
                &Message::LossApplied { server: lost },
                Payload::None,
            );
        }
        self.failover
            .applying
            .entry(lost)
            .or_default()
            .insert(self.rank);
        self.tell_clients_once_applied(out, lost);
    }

    /// Server `src` has applied the loss of `lost`.
    pub(super) fn loss_applied(&mut self, out: &mut dyn Sender, src: Rank, lost: Rank) {
        self.failover.applying.entry(lost).or_default().insert(src);
        self.tell_clients_once_applied(out, lost);
    }

    fn tell_clients_once_applied(&mut self, out: &mut dyn Sender, lost: Rank) {
        let Some(applied) = self.failover.applying.get(&lost) else {
            return;
        };
        if !self.ring.is_lost(lost) || !self.ring.alive().all(|s| applied.contains(&s)) {
            return;
        }
        self.failover.applying.remove(&lost);
        let clients: Vec<Rank> = (0..self.topology.len())
            .filter(|&c| self.is_my_client(c) && !self.client_done[c as usize])
            .collect();
        tracing::debug!(
            "server {}: every server applied the loss of {lost}; telling clients {clients:?}",
            self.rank
        );
        for client in clients {
            self.send(
                out,
                client,
                &Message::ServerLost { server: lost },
                Payload::None,
            );
        }
    }

    /// Whether what client `src` sent must be dropped: it concerns a chunk
    /// of a lost server, sent before the client knew of the loss. Takes in
    /// the client's `LossSeen`.
    pub(super) fn fenced_off(&mut self, src: Rank, msg: &Message) -> bool {
        let Some(lost) = self.failover.fenced.get_mut(&src) else {
            return false;
        };
        if let Message::LossSeen { server } = *msg {
            lost.remove(&server);
            if lost.is_empty() {
                self.failover.fenced.remove(&src);
            }
            return true;
        }
        let chunk = match *msg {
            Message::Coherence { chunk, .. }
            | Message::Malloc { chunk, .. }
            | Message::Lookup { chunk, .. }
            | Message::Subscribe { chunk, .. }
            | Message::Unsubscribe { chunk, .. } => chunk,
            _ => return false,
        };
        let first = self.ring.first_home(chunk);
        let old = lost
            .iter()
            .any(|&l| self.ring.stand_in_without(first, l) == l);
        if old {
            tracing::debug!(
                "server {}: {} of client {src} about chunk {chunk}, sent before it knew its \
                 home was lost: dropped",
                self.rank,
                msg.kind()
            );
        }
        old
    }

    /// The stand-in makes a home of the replica of `chunk` that the lost
    /// server sent it.
    fn take_over_replica(&mut self, out: &mut dyn Sender, chunk: u64) {
        let Some((version, bytes, size, protocol)) = self.replicas.take(chunk) else {
            return;
        };
        if self.home_of(chunk) != self.rank || self.homes.contains_key(&chunk) {
            return;
        }
        let data = bytes.unwrap_or_else(|| vec![0u8; size as usize].into());
        let Some(side) = protocol
            .handlers()
            .and_then(|h| h.resume_home(LastRelease { version, data }))
        else {
            tracing::error!(
                "server {}: chunk {chunk} cannot be taken over ({}): its versions are lost",
                self.rank,
                protocol.name()
            );
            return;
        };
        tracing::debug!(
            "server {}: took chunk {chunk} over at version {version}",
            self.rank
        );
        self.homes.insert(chunk, HomeEntry::new(protocol, side));
        let _ = self
            .alloc
            .malloc(chunk, size, protocol, crate::chunk::NO_LABEL);
        self.spill.used(chunk, size as usize);
        self.make_room(chunk);
        self.rebackup(out, chunk);
    }

    /// Every home here forgets `client` as one that left: its scopes are
    /// revoked, its copies and requests forgotten, its subscriptions
    /// dropped (it subscribes again once told).
    fn forget_client_at_homes(&mut self, out: &mut dyn Sender, client: Rank) {
        let chunks: Vec<u64> = self.homes.keys().copied().collect();
        let mut outs = std::mem::take(&mut self.home_out);
        for chunk in chunks {
            let entry = self.homes.get_mut(&chunk).expect("listed");
            entry.subscribers.remove(&client);
            entry.side.client_left(client, &mut outs);
            self.answers_after_backup(out, chunk, &mut outs);
        }
        self.home_out = outs;
        self.alloc.client_left(client);
    }
}
