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
    /// The stand-in: the chunks it took over from each lost server, whose
    /// coherence requests wait (`parked`) until every client has dropped its
    /// copies of them (a copy their new home does not know of would be read
    /// after a write it never invalidated), and the servers still to say so.
    sealed: BTreeMap<Rank, (BTreeSet<u64>, BTreeSet<Rank>)>,
    /// Coherence requests for sealed chunks: (source, header, payload).
    parked: Vec<(Rank, Vec<u8>, Vec<u8>)>,
    /// The stand-in: the lost server's clients that have not said
    /// `LossSeen` yet, per lost server.
    unseen: BTreeMap<Rank, BTreeSet<Rank>>,
    /// Seed: the clients that are gone, having said goodbye (they finished
    /// the run) or been lost: a lost server's client among them is done for
    /// its stand-in.
    pub(super) gone: BTreeSet<Rank>,
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
        // It is done for the termination protocol once its stand-in says it
        // serves its clients (`adopted`).
        let i = self.servers.iter().position(|&s| s == server);
        if let (Some(w), Some(i)) = (self.waves.as_mut(), i) {
            w.server_lost(i);
        }
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
            .filter(|c| self.failover.gone.contains(c))
            .collect();
        for client in finished {
            self.finished_elsewhere(out, client);
        }
    }

    /// Seed: `client` is gone (it said goodbye, or was lost); if its server
    /// is lost, the server that serves it now is told it is done.
    pub(super) fn said_goodbye(&mut self, out: &mut dyn Sender, client: Rank) {
        self.failover.gone.insert(client);
        let own = self.topology.server_of(client);
        if self.ring.is_lost(own) {
            self.finished_elsewhere(out, client);
        }
    }

    fn finished_elsewhere(&mut self, out: &mut dyn Sender, client: Rank) {
        if self.shutdown_sent {
            // Every server is done, so every client is: a goodbye heard
            // this late has nobody to tell, and the stand-in may have ended
            // already (a send to it would fail the seed's end).
            return;
        }
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
        self.unfence(out, client);
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
        // The lost server's clients: what they asked for went through it.
        // The homes forget their copies and scopes once they have dropped
        // them (`moved_client_ready`): till then a write of a chunk they
        // hold waits, or one could read a copy its home no longer tracks.
        let moved: Vec<Rank> = self.topology.clients_of(lost).to_vec();
        // Their requests went through it too, and they ask again once they
        // know: a grant of an old one, sent on after their loss, would be
        // taken for the answer to a new one (a second writer, and a scope
        // the home waits for that nobody holds). The simulator found it.
        for entry in self.homes.values_mut() {
            for &client in &moved {
                entry.side.requests_void(client);
            }
        }
        // One process lost, however many clients it served: counted once,
        // or a barrier call told of it would fail again for the same loss.
        if self.rank == SEED {
            let mut answers = Vec::new();
            self.coordinator.server_lost(&moved, &mut answers);
            for (to, op) in answers {
                self.send_to_client(out, to, &Message::Sync { client: to, op });
            }
        }
        let mut taken = BTreeSet::new();
        for chunk in orphans {
            if self.take_over_replica(out, chunk) {
                taken.insert(chunk);
            }
        }
        if stand_in == self.rank {
            let servers: BTreeSet<Rank> = self.ring.alive().collect();
            self.failover.sealed.insert(lost, (taken, servers));
        }
        for chunk in rebackup {
            self.rebackup(out, chunk);
        }
        if stand_in == self.rank {
            let mut busy = false;
            for &client in &moved {
                if !self.client_done[client as usize] {
                    self.clients_left += 1;
                    busy = true;
                }
                self.accounts.adopt(client);
            }
            let unseen: BTreeSet<Rank> = (moved.iter().copied())
                .filter(|&c| !self.client_done[c as usize])
                .collect();
            self.failover.unseen.insert(lost, unseen);
            // The seed counts this server done again once they are.
            if busy {
                self.told_seed = false;
            }
            let adopted = Message::Adopted { server: lost, busy };
            if self.rank == SEED {
                self.adopted(self.rank, lost, busy);
            } else {
                self.send(out, SEED, &adopted, Payload::None);
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
        self.clients_seen_if_all(out, lost);
    }

    /// Tells the stand-in of `lost` when every client of ours (and, on the
    /// stand-in, every client it took over) has seen its loss.
    fn clients_seen_if_all(&mut self, out: &mut dyn Sender, lost: Rank) {
        let fenced = self.failover.fenced.values().any(|l| l.contains(&lost));
        let unseen = self
            .failover
            .unseen
            .get(&lost)
            .is_some_and(|u| !u.is_empty());
        if fenced || unseen || !self.ring.is_lost(lost) {
            return;
        }
        let stand_in = self.ring.stand_in(lost);
        if stand_in == self.rank {
            self.clients_seen(out, self.rank, lost);
        } else {
            self.send(
                out,
                stand_in,
                &Message::ClientsSeen { server: lost },
                Payload::None,
            );
        }
    }

    /// Server `src` says its clients have all seen the loss of `lost`: once
    /// every server has, the chunks taken over from it are opened, and the
    /// requests that waited for them are handled.
    pub(super) fn clients_seen(&mut self, out: &mut dyn Sender, src: Rank, lost: Rank) {
        let Some((_, waiting)) = self.failover.sealed.get_mut(&lost) else {
            return;
        };
        waiting.remove(&src);
        if !waiting.iter().all(|&s| self.ring.is_lost(s)) {
            return;
        }
        self.failover.sealed.remove(&lost);
        tracing::debug!(
            "server {}: every client saw the loss of server {lost}: its chunks are open",
            self.rank
        );
        for (src, header, payload) in std::mem::take(&mut self.failover.parked) {
            let m = crate::transport::Received {
                src,
                header: &header,
                payload: &payload,
            };
            self.handle(out, m);
        }
    }

    /// Whether a coherence request for `chunk` must wait: a chunk taken
    /// over from a lost server, which some client may still hold a copy of.
    pub(super) fn sealed(&self, chunk: u64) -> bool {
        self.failover
            .sealed
            .values()
            .any(|(chunks, _)| chunks.contains(&chunk))
    }

    /// Keeps a request for a sealed chunk until it opens.
    pub(super) fn park(&mut self, m: &crate::transport::Received<'_>) {
        (self.failover.parked).push((m.src, m.header.to_vec(), m.payload.to_vec()));
    }

    /// A client of ours is done or gone: it will say no `LossSeen`.
    pub(super) fn unfence(&mut self, out: &mut dyn Sender, client: Rank) {
        let mut lost: BTreeSet<Rank> = self.failover.fenced.remove(&client).unwrap_or_default();
        for (l, unseen) in self.failover.unseen.iter_mut() {
            if unseen.remove(&client) {
                lost.insert(*l);
            }
        }
        for l in lost {
            self.clients_seen_if_all(out, l);
        }
    }

    /// Seed: `stand_in` serves lost server `lost`'s clients now: `lost` is
    /// done for the termination protocol, and `stand_in` is not while
    /// `busy` (some of them are not done).
    pub(super) fn adopted(&mut self, stand_in: Rank, lost: Rank, busy: bool) {
        self.mark_server_done(lost);
        if busy && std::mem::replace(&mut self.server_done[stand_in as usize], false) {
            self.servers_left += 1;
            let i = self.servers.iter().position(|&s| s == stand_in);
            if let (Some(w), Some(i)) = (self.waves.as_mut(), i) {
                w.server_undone(i);
            }
        }
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
            return false;
        }
        let chunk = match *msg {
            Message::Coherence { chunk, .. }
            | Message::Malloc { chunk, .. }
            | Message::Lookup { chunk, .. }
            | Message::Subscribe { chunk, .. }
            | Message::Resubscribe { chunk, .. }
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
    fn take_over_replica(&mut self, out: &mut dyn Sender, chunk: u64) -> bool {
        let Some((version, bytes, size, protocol)) = self.replicas.take(chunk) else {
            return false;
        };
        if self.home_of(chunk) != self.rank || self.homes.contains_key(&chunk) {
            return false;
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
            return false;
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
        true
    }

    /// The stand-in hears `LossSeen` from `client` (one of ours): if it was
    /// the lost server's, it has dropped every copy and scope it had, and
    /// every home forgets it.
    pub(super) fn moved_client_ready(&mut self, out: &mut dyn Sender, client: Rank, lost: Rank) {
        // One of ours from the start: its fence is lifted (`fenced_off`).
        let own = self.topology.server_of(client);
        if !self.ring.is_lost(own) {
            self.clients_seen_if_all(out, lost);
            return;
        }
        if let Some(unseen) = self.failover.unseen.get_mut(&lost) {
            unseen.remove(&client);
        }
        self.clients_seen_if_all(out, lost);
        let others: Vec<Rank> = self.ring.alive().filter(|&s| s != self.rank).collect();
        for s in others {
            self.send(out, s, &Message::Moved { client }, Payload::None);
        }
        self.forget_client_at_homes(out, client);
    }

    /// Every home here forgets `client` as one that left: its scopes are
    /// revoked, its copies and requests forgotten, its subscriptions
    /// dropped (it subscribes again once told).
    pub(super) fn forget_client_at_homes(&mut self, out: &mut dyn Sender, client: Rank) {
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
