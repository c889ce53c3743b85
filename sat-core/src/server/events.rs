//! The server's part in synchronization, publish-subscribe and the
//! quiescence detection: routing to coordinators and homes, notifying
//! subscribers, and the waves that end a run whose clients only wait.

use super::{ServerState, SEED};
use crate::quiescence::{Report, WaveStart};
use crate::sync::Coordinator;
use std::sync::Arc;

use crate::transport::{Payload, Rank, Received, Sender};
use crate::wire::{Message, SyncOp};

impl ServerState<'_> {
    /// The coordinator of synchronization object `id` (rendezvous, barrier
    /// or signal): a modulo on the server list, as for chunk homes.
    fn coordinator_of(&self, id: u32) -> Rank {
        // A run with replicated homes keeps them at the seed, which no
        // server's loss takes away (`server/failover.rs`).
        if self.replicated() {
            return SEED;
        }
        self.servers[id as usize % self.servers.len()]
    }

    /// The host slot of barrier `id`, made on first demand, when this
    /// server keeps versions in host segments (its clients then keep the
    /// barrier there, `segment/barrier.rs`).
    fn barrier_place(&mut self, id: u32) -> Option<crate::segment::SlotPlace> {
        if let Some((_, place)) = self.barrier_slots.get(&id) {
            return Some(*place);
        }
        // A barrier's word counts arrivals, whoever they are: a service,
        // whose clients may die between two arrivals, keeps its barriers
        // in messages.
        if self.service.is_some() {
            return None;
        }
        match self.host.as_mut()?.allocate(8) {
            Ok(made) => {
                let place = made.1;
                self.barrier_slots.insert(id, made);
                Some(place)
            }
            Err(e) => {
                tracing::warn!(
                    "server {}: barrier {id} works by messages: no host slot for it: {e}",
                    self.rank
                );
                None
            }
        }
    }

    /// A synchronization request goes to its coordinator; an answer goes
    /// back to its client.
    /// A barrier arrival's payload lists the chunks its client asks to be
    /// pushed as the round ends (`client/learned.rs`).
    pub(super) fn sync(
        &mut self,
        out: &mut dyn Sender,
        (src, src_is_server): (Rank, bool),
        client: Rank,
        op: SyncOp,
        payload: &[u8],
    ) {
        let request = Coordinator::request_id(&op);
        let legit =
            self.on_behalf_of(src, src_is_server, client) && (src_is_server || request.is_some());
        if !legit {
            tracing::warn!(
                "server {}: dropped a sync message from {src} for {client}",
                self.rank
            );
            return;
        }
        let msg = Message::Sync { client, op };
        let Some(id) = request else {
            // The coordinator's answer, for one of our clients.
            if self.is_my_client(client) {
                self.send_to_client(out, client, &msg);
            }
            return;
        };
        let coordinator = self.coordinator_of(id);
        if coordinator != self.rank {
            if src_is_server {
                tracing::warn!(
                    "server {}: {op:?} forwarded here, but its coordinator is {coordinator}",
                    self.rank
                );
            } else {
                let fetch = matches!(op, SyncOp::Barrier { .. }) && !payload.is_empty();
                let payload = if fetch {
                    Payload::Copy(payload)
                } else {
                    Payload::None
                };
                self.send(out, coordinator, &msg, payload);
            }
            return;
        }
        tracing::debug!("[sync] {op:?} from {client}");
        if let SyncOp::BarrierPlace { id } = op {
            let place = self.barrier_place(id);
            let answer = SyncOp::BarrierAt { id, place };
            self.send_to_client(out, client, &Message::Sync { client, op: answer });
            return;
        }
        if matches!(op, SyncOp::Raise { .. }) {
            self.accounts.count_applied(client);
        }
        let fetch = match op {
            SyncOp::Barrier { id, .. } => crate::client::learned_set(payload).unwrap_or_else(|e| {
                tracing::warn!(
                    "server {}: barrier {id} arrival of client {client}: {e}; its pushes are \
                     dropped",
                    self.rank
                );
                Vec::new()
            }),
            _ => Vec::new(),
        };
        let mut answers = Vec::new();
        if let Err(e) = self.coordinator.on_request(client, op, fetch, &mut answers) {
            tracing::warn!("server {}: {e}; dropped", self.rank);
        }
        for (client, chunks) in self.coordinator.take_fetches() {
            self.push_learned(out, client, chunks);
        }
        for (to, op) in answers {
            if matches!(op, SyncOp::Signal { .. }) {
                self.accounts.count_notified();
            }
            self.send_to_client(out, to, &Message::Sync { client: to, op });
        }
    }

    /// SUBSCRIBE and UNSUBSCRIBE: recorded at the chunk's home.
    pub(super) fn subscription(
        &mut self,
        out: &mut dyn Sender,
        src: Rank,
        src_is_server: bool,
        chunk: u64,
        client: Rank,
        msg: &Message,
    ) {
        if !self.on_behalf_of(src, src_is_server, client) {
            tracing::warn!("server {}: dropped a {} from {src}", self.rank, msg.kind());
            return;
        }
        // (An adaptive chunk's home may have moved: its first home forwards.)
        let home = self.current_home(chunk);
        if home != self.rank {
            if !src_is_server || self.moved.contains_key(&chunk) {
                self.send(out, home, msg, Payload::None);
            }
            return;
        }
        // A version to tell comes back from its spill file first.
        if matches!(msg, Message::Resubscribe { .. }) && !self.bring_in(chunk) {
            return;
        }
        let Some(entry) = self.homes.get_mut(&chunk) else {
            tracing::warn!(
                "server {}: {} of chunk {chunk}, which nobody allocated: dropped",
                self.rank,
                msg.kind()
            );
            return;
        };
        match *msg {
            Message::Subscribe { with_data, .. } => {
                entry.subscribers.insert(client, with_data);
                // Before the answer: a release made after the SUBSCRIBE
                // returns sees that data is wanted.
                entry.subscribers_changed();
                tracing::debug!("chunk {chunk}: client {client} subscribed (data: {with_data})");
                self.send_to_client(out, client, &Message::Subscribed { chunk, client });
            }
            Message::Resubscribe {
                with_data, seen, ..
            } => {
                entry.subscribers.insert(client, with_data);
                tracing::debug!(
                    "chunk {chunk}: client {client} subscribed again (data: {with_data}, seen \
                     version {seen})"
                );
                let (version, data) = entry.current();
                self.send_to_client(out, client, &Message::Subscribed { chunk, client });
                // A version it was not told of (applied since its home was
                // lost, or whose notifications the lost home held back for
                // its backup), once its backup holds it.
                if version > seen {
                    let notify = super::replicas::Held::NotifyOne {
                        client,
                        version,
                        with_data,
                        data,
                    };
                    self.send_or_hold(out, chunk, notify);
                }
            }
            _ => {
                entry.subscribers.remove(&client);
                entry.subscribers_changed();
                tracing::debug!("chunk {chunk}: client {client} unsubscribed");
            }
        }
    }

    /// A release of `chunk` was applied here: tell every subscriber, after
    /// the fact, so that a handler's READ sees at least this version.
    pub(super) fn notify_subscribers(&mut self, out: &mut dyn Sender, chunk: u64) {
        let Some(entry) = self.homes.get(&chunk) else {
            return;
        };
        if entry.subscribers.is_empty() {
            return;
        }
        let version = entry.side.version();
        let data = entry.side.data().clone();
        self.notify(out, chunk, version, Some(data));
    }

    /// Tells every subscriber of `chunk` of `version`; those that want data
    /// get `data`, or a notification without it when there is none (a
    /// release into a host slot made before the subscription asked for data:
    /// not promised to it, see `client/events.rs`).
    pub(super) fn notify(
        &mut self,
        out: &mut dyn Sender,
        chunk: u64,
        version: u64,
        data: Option<Arc<[u8]>>,
    ) {
        let Some(entry) = self.homes.get(&chunk) else {
            return;
        };
        let subscribers: Vec<(Rank, bool)> =
            entry.subscribers.iter().map(|(&c, &d)| (c, d)).collect();
        for (client, wants_data) in subscribers {
            self.notify_one(
                out,
                (chunk, client),
                version,
                data.as_ref().filter(|_| wants_data),
            );
        }
    }

    /// Tells subscriber `client` of `version` of `chunk`, with `data` when
    /// given (counted for the quiescence detection).
    pub(super) fn notify_one(
        &mut self,
        out: &mut dyn Sender,
        (chunk, client): (u64, Rank),
        version: u64,
        data: Option<&Arc<[u8]>>,
    ) {
        self.accounts.count_notified();
        let msg = Message::Notify {
            chunk,
            client,
            version,
            with_data: data.is_some(),
        };
        let payload = data.map_or(Payload::None, Payload::Shared);
        self.send_to_client_with(out, client, &msg, payload);
    }

    /// A client released `version` of `chunk` into its host slot: the
    /// release is applied (the slot holds it), so the subscribers are told.
    /// The payload, when there is one, is the version's bytes for those
    /// that want data.
    pub(super) fn published(
        &mut self,
        out: &mut dyn Sender,
        m: Received<'_>,
        src_is_server: bool,
        (chunk, client, version): (u64, Rank, u64),
        releases: u32,
    ) {
        let msg = Message::Published {
            chunk,
            client,
            version,
            releases,
        };
        if !self.on_behalf_of(m.src, src_is_server, client) {
            tracing::warn!("server {}: dropped a published from {}", self.rank, m.src);
            return;
        }
        let home = self.home_of(chunk);
        if home != self.rank {
            if src_is_server {
                tracing::warn!(
                    "server {}: published of chunk {chunk} forwarded here, but its home is {home}",
                    self.rank
                );
            } else {
                self.send(out, home, &msg, Payload::Copy(m.payload));
            }
            return;
        }
        // Answered whatever becomes of it: the client's window moves on.
        self.send_to_client(out, client, &Message::PublishedAck { client });
        let Some(entry) = self.homes.get_mut(&chunk) else {
            tracing::warn!(
                "server {}: published of chunk {chunk}, which nobody allocated: dropped",
                self.rank
            );
            return;
        };
        let Some((slot, _)) = &entry.slot else {
            tracing::warn!(
                "server {}: published of chunk {chunk}, whose version is not in a host slot: \
                 dropped",
                self.rank
            );
            return;
        };
        let held = slot.slot().peek_version();
        if version == 0 || version > held {
            tracing::warn!(
                "server {}: published of chunk {chunk} version {version}, but its slot holds \
                 version {held}: dropped",
                self.rank
            );
            return;
        }
        self.tell_published(out, chunk, client, (version, releases), m.payload);
    }

    /// `Staged` of `chunk` from `client`, inside a chain's release that is
    /// committed (`server/bracket.rs`): routed as `Published`; at the home,
    /// the staged bytes become the slot's version, the client's write lock
    /// goes, and the subscribers hear of it (with the slot's bytes when one
    /// wants data).
    pub(super) fn staged(
        &mut self,
        out: &mut dyn Sender,
        m: Received<'_>,
        src_is_server: bool,
        (chunk, client, version): (u64, Rank, u64),
    ) {
        let msg = Message::Staged {
            chunk,
            client,
            version,
        };
        if !self.on_behalf_of(m.src, src_is_server, client) {
            tracing::warn!("server {}: dropped a staged from {}", self.rank, m.src);
            return;
        }
        let home = self.home_of(chunk);
        if home != self.rank {
            if !src_is_server {
                self.send(out, home, &msg, Payload::None);
            }
            return;
        }
        let Some((slot, _)) = self.homes.get(&chunk).and_then(|e| e.slot.clone()) else {
            tracing::warn!(
                "server {}: staged of chunk {chunk}, which has no host slot here: dropped",
                self.rank
            );
            return;
        };
        let (subscribers, with_data) = slot.slot().subscribers();
        let want = subscribers > 0 && with_data > 0;
        let Some(data) = slot.slot().commit_staged(client, version, want) else {
            tracing::warn!(
                "server {}: staged version {version} of chunk {chunk} from client {client}, \
                 which does not hold the slot's write lock at the version before: dropped",
                self.rank
            );
            return;
        };
        // Those waiting for the lock sleep on the slot.
        slot.slot().announce();
        self.tell_published(out, chunk, client, (version, 1), &data);
    }

    /// A release `client` made into `chunk`'s host slot (`releases` of
    /// them, the last `version`): counted, and told to the subscribers.
    fn tell_published(
        &mut self,
        out: &mut dyn Sender,
        chunk: u64,
        client: Rank,
        (version, releases): (u64, u32),
        payload: &[u8],
    ) {
        let Some(entry) = self.homes.get_mut(&chunk) else {
            return;
        };
        for _ in 0..releases {
            self.accounts.count_applied(client);
        }
        if version <= entry.published {
            tracing::debug!(
                "chunk {chunk}: client {client} published version {version}, its subscribers \
                 already heard of version {}",
                entry.published
            );
            return;
        }
        entry.published = version;
        let size = entry.side.data().len();
        let data = match payload.len() {
            0 => None,
            n if n == size => Some(Arc::from(payload)),
            n => {
                tracing::warn!(
                    "server {}: published of chunk {chunk} carries {n} bytes, the chunk has \
                     {size}: notified without data",
                    self.rank
                );
                None
            }
        };
        tracing::debug!("chunk {chunk}: client {client} published version {version} in its slot");
        self.notify(out, chunk, version, data);
    }

    /// Reports this server's state to the seed once no client of it runs
    /// its role any more; the seed sends waves once every server has.
    pub(super) fn advance_quiescence(&mut self, out: &mut dyn Sender) {
        if !self.told_quiet && self.accounts.quiet() {
            self.told_quiet = true;
            if self.rank == SEED {
                self.server_quiet(SEED);
            } else {
                self.send(out, SEED, &Message::ServerQuiet, Payload::None);
            }
        }
        let now = self.clock.now();
        let due = self.waves.as_mut().and_then(|w| w.due(now));
        if let Some(wave) = due {
            tracing::trace!("quiescence: wave {wave}");
            for s in self.ring.alive().collect::<Vec<_>>() {
                if s == SEED {
                    self.start_wave(out, wave);
                } else {
                    self.send(out, s, &Message::Probe { wave }, Payload::None);
                }
            }
        }
    }

    pub(super) fn server_quiet(&mut self, server: Rank) {
        let i = self.servers.iter().position(|&s| s == server);
        if let (Some(w), Some(i)) = (self.waves.as_mut(), i) {
            w.server_quiet(i);
        }
    }

    /// Wave `wave` reaches this server: probe the waiting clients, or
    /// report at once.
    pub(super) fn start_wave(&mut self, out: &mut dyn Sender, wave: u64) {
        match self.accounts.start_wave(wave) {
            WaveStart::Probe(clients) => {
                for c in clients {
                    self.send(out, c, &Message::Probe { wave }, Payload::None);
                }
            }
            WaveStart::Report(r) => self.report_wave(out, r),
        }
    }

    pub(super) fn report_wave_if_complete(&mut self, out: &mut dyn Sender) {
        if let Some(r) = self.accounts.report_if_complete() {
            self.report_wave(out, r);
        }
    }

    fn report_wave(&mut self, out: &mut dyn Sender, r: Report) {
        if self.rank == SEED {
            self.on_wave_report(out, r);
        } else {
            let msg = Message::ProbeReply {
                wave: r.wave,
                busy: r.busy,
                sent: r.sent,
                received: r.received,
            };
            self.send(out, SEED, &msg, Payload::None);
        }
    }

    /// A probe's answer: from one of our clients, or (at the seed) a
    /// server's report.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn probe_reply(
        &mut self,
        out: &mut dyn Sender,
        src: Rank,
        src_is_server: bool,
        wave: u64,
        busy: bool,
        sent: u64,
        received: u64,
    ) {
        let r = Report {
            wave,
            busy,
            sent,
            received,
        };
        if !src_is_server && self.is_my_client(src) {
            if let Some(report) = self.accounts.on_probe_reply(src, r) {
                self.report_wave(out, report);
            }
        } else if src_is_server && self.rank == SEED {
            self.on_wave_report(out, r);
        } else {
            tracing::warn!("server {}: dropped a probe reply from {src}", self.rank);
        }
    }

    fn on_wave_report(&mut self, out: &mut dyn Sender, r: Report) {
        let now = self.clock.now();
        let over = self.waves.as_mut().and_then(|w| w.on_report(r, now));
        if over == Some(true) {
            tracing::debug!(
                "seed: quiescent after wave {} ({} messages sent and received): \
                 the waiting clients may end",
                r.wave,
                r.sent
            );
            for s in self.ring.alive().collect::<Vec<_>>() {
                if s == SEED {
                    self.stop_waiting_clients(out);
                } else {
                    self.send(out, s, &Message::Stop, Payload::None);
                }
            }
        }
    }

    /// The run is quiescent: every client still here waits in vain.
    pub(super) fn stop_waiting_clients(&mut self, out: &mut dyn Sender) {
        // (Those a lost server's stand-in serves too: `server/failover.rs`.)
        let clients: Vec<Rank> = (0..self.topology.len())
            .filter(|&c| self.is_my_client(c) && !self.client_done[c as usize])
            .collect();
        for c in clients {
            self.send(out, c, &Message::Stop, Payload::None);
        }
    }
}
