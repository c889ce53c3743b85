//! Switching an adaptive chunk's protocol while the run goes on
//! ([`ProtocolId::Adaptive`]), at the chunk's home.
//!
//! Every process that has talked about the chunk under its protocol may
//! hold state of that protocol: a cached copy, a read scope the home never
//! saw open, a request on its way. None of it may meet the new protocol's
//! handlers. So a switch is a two-phase change of the chunk's *epoch*,
//! which every coherence message carries:
//! 1. Once the new protocol is chosen, the home holds every new request
//!    (so that a busy chunk drains: writers queued one behind the other
//!    would otherwise never leave it idle), lets its protocol finish what
//!    it has under way, and waits until that protocol is idle
//!    ([`HomeSide::idle`]: no write scope, no Exclusive holder, no request
//!    waiting, no acknowledgement owed). It then sends
//!    [`CoherenceOp::Switch`] in the next epoch to each client it exchanged
//!    a message with in this epoch.
//! 2. A client answers [`CoherenceOp::SwitchAck`] once no scope of its own
//!    is open on the chunk, dropping its copy and its protocol state; a
//!    request it had sent is asked again, under the new protocol, after
//!    the acknowledgement (`client/switch.rs`).
//! 3. Once every acknowledgement is in, the home hands the last released
//!    version to the new protocol ([`crate::protocol::Consistency::resume_home`]),
//!    and serves the requests it held meanwhile.
//!
//! Why nothing is lost or seen out of order, whatever the timing:
//! - While the home drains and switches, it grants nothing new: every
//!   request is held until the new protocol runs. A held request waits for
//!   what was under way before it, as it would in the protocol's own queue,
//!   so holding it adds no cycle of waits a program did not already have.
//! - A chunk never leaves MESI with E: its holder keeps the only copy with
//!   no scope open, and only another process's request, which a draining
//!   home holds, would take it back. Messages between a client and the home
//!   keep their order, so a grant sent before the switch reaches the
//!   client before the switch does.
//! - A client's read scope open when the switch comes reads the version
//!   it was granted, which is still the last one: nobody can write until
//!   that client acknowledges.
//! - A request in an older epoch (from a client that was not told, having
//!   never talked in this epoch) is answered with the current epoch's
//!   `Switch`, and asked again under it; a client ignores a `Switch` of an
//!   epoch it has passed.
//! - The home's messages of a new epoch go only to clients that have
//!   talked in it (a pushed copy too: `Want` is refused for the others), so
//!   no client meets a message of a protocol it has not switched to.

use std::collections::BTreeSet;

use super::{HomeEntry, ServerState};
use crate::protocol::adaptive::{Observer, Seen};
use crate::protocol::{LastRelease, ProtocolId};
use crate::transport::{Payload, Rank, Sender};
use crate::wire::{CoherenceOp, Message};

/// A coherence message as the home reads it: what the client said, in
/// which epoch, and (for a read request) whether it follows a barrier.
#[derive(Debug, Clone, Copy)]
pub(super) struct Said {
    pub client: Rank,
    pub op: CoherenceOp,
    pub epoch: u32,
    pub after_barrier: bool,
}

/// How homes choose an adaptive chunk's next protocol.
#[derive(Debug, Clone)]
pub(crate) enum SwitchPolicy {
    /// Once, by the rules of [`crate::protocol::adaptive`].
    Rules,
    /// Again and again, at random (the whole-stack simulator's: every
    /// transition, at every moment the home allows, over many seeds).
    #[cfg(feature = "simulator")]
    Random(u64),
}

/// What a policy chose: the protocol, and the server the home moves to
/// (itself when it stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    protocol: ProtocolId,
    home: Rank,
}

/// Where a home may move a chunk: to the server of one of its clients, or
/// nowhere (a chunk moves once, away from its home by the modulo, only in a
/// run, not a service, and only a plain chunk: a protected one keeps its
/// line of key epochs there).
struct Moves<'a> {
    here: Rank,
    allowed: bool,
    /// The servers a random move draws from (the simulator's policy).
    #[cfg_attr(not(feature = "simulator"), allow(dead_code))]
    servers: &'a [Rank],
    topology: &'a crate::topology::Topology,
}

impl Moves<'_> {
    /// The server of `client`, if the home may move there.
    fn to_server_of(&self, client: Option<Rank>) -> Rank {
        client
            .filter(|_| self.allowed)
            .map_or(self.here, |c| self.topology.server_of(c))
    }
}

impl SwitchPolicy {
    /// After a request of the running epoch: what to switch to, if it is
    /// chosen now.
    fn next(&mut self, adapt: &mut Adapt, from: Rank, seen: Seen, moves: &Moves) -> Option<Plan> {
        if adapt.running == ProtocolId::MesiExclusive {
            // Its holder would keep the chunk from ever being idle (module
            // docs).
            return None;
        }
        match self {
            SwitchPolicy::Rules => {
                let observer = adapt.observer.as_mut()?;
                let choice = observer.see(from, seen)?;
                let home = moves.to_server_of(observer.heaviest_writer());
                adapt.observer = None;
                tracing::debug!(
                    "[adaptive] {} chosen: {}; home: server {home}",
                    choice.protocol.short_name(),
                    choice.why
                );
                Some(Plan {
                    protocol: choice.protocol,
                    home,
                })
            }
            #[cfg(feature = "simulator")]
            SwitchPolicy::Random(state) => {
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                let targets = crate::protocol::adaptive::TARGETS;
                let protocol = targets[(*state >> 8) as usize % targets.len()];
                let home = if moves.allowed && (*state >> 20) % 2 == 0 {
                    moves.servers[(*state >> 24) as usize % moves.servers.len()]
                } else {
                    moves.here
                };
                (*state % 4 == 0).then_some(Plan { protocol, home })
            }
        }
    }
}

/// An adaptive chunk's state at its home, beside its protocol's.
#[derive(Debug)]
pub(super) struct Adapt {
    /// The epoch the running protocol speaks in.
    pub epoch: u32,
    /// The protocol the chunk runs now.
    pub running: ProtocolId,
    /// The clients this home exchanged a message with in this epoch: those
    /// that may hold state of the running protocol.
    participants: BTreeSet<Rank>,
    /// Watching the requests, until the rules choose.
    observer: Option<Observer>,
    /// The protocol (and home) chosen, waiting for the running one to drain.
    chosen: Option<Plan>,
    switching: Option<Switching>,
    /// The messages held while the chunk drains and switches, served once
    /// the new protocol runs.
    held: Vec<(Said, Vec<u8>)>,
}

/// A switch under way: the acknowledgements still due.
#[derive(Debug)]
struct Switching {
    to: Plan,
    owed: BTreeSet<Rank>,
}

impl Adapt {
    pub(super) fn new() -> Adapt {
        Adapt {
            epoch: 0,
            running: ProtocolId::Adaptive.starting(),
            participants: BTreeSet::new(),
            observer: Some(Observer::default()),
            chosen: None,
            switching: None,
            held: Vec::new(),
        }
    }

    /// Whether the home's messages to `client` may go now: it has talked in
    /// this epoch, and no switch is coming (a push is refused otherwise).
    pub(super) fn may_push(&self, client: Rank) -> bool {
        self.chosen.is_none() && self.switching.is_none() && self.participants.contains(&client)
    }

    /// The home sent `client` a message of this epoch.
    pub(super) fn sent_to(&mut self, client: Rank) {
        self.participants.insert(client);
    }

    /// A chunk handed over from its first home: it runs `running` from
    /// `epoch`, every process told, nothing under way.
    fn arrived(epoch: u32, running: ProtocolId) -> Adapt {
        Adapt {
            epoch,
            running,
            participants: BTreeSet::new(),
            observer: None,
            chosen: None,
            switching: None,
            held: Vec::new(),
        }
    }
}

fn is_request(op: CoherenceOp) -> bool {
    matches!(
        op,
        CoherenceOp::ReadReq { .. } | CoherenceOp::WriteReq { .. }
    )
}

impl ServerState<'_> {
    /// A coherence message for an adaptive chunk homed here.
    pub(super) fn at_adaptive_home(
        &mut self,
        out: &mut dyn Sender,
        src: (Rank, bool),
        chunk: u64,
        said: Said,
        payload: &[u8],
    ) {
        let Said {
            client, op, epoch, ..
        } = said;
        let static_home = self.servers[(chunk % self.servers.len() as u64) as usize];
        let entry = self.homes.get_mut(&chunk).expect("checked by the caller");
        let moves = Moves {
            here: self.rank,
            // Not in a service: a slot's next client would meet the news of
            // its predecessor's departure on two paths.
            allowed: static_home == self.rank
                && entry.epochs.is_none()
                && self.servers.len() > 1
                && self.service.is_none(),
            servers: &self.servers,
            topology: self.topology,
        };
        let idle = entry.side.idle();
        let adapt = entry.adapt.as_mut().expect("adaptive");
        let next = adapt.epoch + 1;
        if let Some(sw) = adapt.switching.as_mut() {
            if op == CoherenceOp::SwitchAck {
                if epoch == next && sw.owed.remove(&client) {
                    self.maybe_complete(out, chunk);
                } else {
                    tracing::debug!(
                        "chunk {chunk}: stray switch_ack of epoch {epoch} from {client}: dropped"
                    );
                }
            } else if is_request(op) || epoch == next {
                // Served once the new protocol runs (or told to switch).
                adapt.held.push((said, payload.to_vec()));
            } else if epoch == adapt.epoch {
                // The end of something the old protocol started (a pushed
                // copy's drop): it runs until the switch completes.
                self.at_home(out, src, chunk, client, op, payload);
            } else {
                tracing::debug!(
                    "chunk {chunk}: {} of epoch {epoch} from {client} during the switch to \
                     epoch {next}: dropped",
                    op.name()
                );
            }
            return;
        }
        if epoch != adapt.epoch || op == CoherenceOp::SwitchAck {
            if epoch < adapt.epoch && is_request(op) {
                // A client that never talked in this epoch: it learns the
                // protocol now, and asks again.
                let (epoch, protocol) = (adapt.epoch, adapt.running);
                self.send_switch(out, chunk, client, epoch, protocol);
            } else {
                tracing::debug!(
                    "chunk {chunk}: {} of epoch {epoch} from {client} (the chunk is in epoch \
                     {}): dropped",
                    op.name(),
                    adapt.epoch
                );
            }
            return;
        }
        adapt.participants.insert(client);
        if adapt.chosen.is_some() && is_request(op) {
            // Draining: served once the new protocol runs.
            adapt.held.push((said, payload.to_vec()));
            return;
        }
        let seen = match op {
            CoherenceOp::ReadReq { .. } => Some(Seen::Read {
                after_barrier: said.after_barrier,
            }),
            CoherenceOp::WriteReq { .. } => Some(Seen::Write { contended: !idle }),
            _ => None,
        };
        if let (Some(seen), None) = (seen, adapt.chosen) {
            if let Some(plan) = self.switch_policy.next(adapt, client, seen, &moves) {
                let changes = plan.protocol != adapt.running || plan.home != self.rank;
                adapt.chosen = changes.then_some(plan);
            }
        }
        self.at_home(out, src, chunk, client, op, payload);
        self.maybe_start_switch(out, chunk);
    }

    /// Starts the chosen switch of `chunk` if its protocol is idle.
    pub(super) fn maybe_start_switch(&mut self, out: &mut dyn Sender, chunk: u64) {
        let Some(entry) = self.homes.get_mut(&chunk) else {
            return;
        };
        let idle = entry.side.idle();
        let Some(adapt) = entry.adapt.as_mut() else {
            return;
        };
        let Some(to) = adapt.chosen.filter(|_| idle && adapt.switching.is_none()) else {
            return;
        };
        adapt.chosen = None;
        let owed = std::mem::take(&mut adapt.participants);
        let next = adapt.epoch + 1;
        tracing::debug!(
            "[adaptive] chunk {chunk}: switching from {} to {} (epoch {next}, home: server {}), \
             {} clients to tell",
            adapt.running.short_name(),
            to.protocol.short_name(),
            to.home,
            owed.len()
        );
        adapt.switching = Some(Switching {
            to,
            owed: owed.clone(),
        });
        for client in owed {
            self.send_switch(out, chunk, client, next, to.protocol);
        }
        self.maybe_complete(out, chunk);
    }

    /// Ends `chunk`'s switch once every acknowledgement is in: the new
    /// protocol takes the last released version, then the held messages.
    fn maybe_complete(&mut self, out: &mut dyn Sender, chunk: u64) {
        let complete = self.homes[&chunk]
            .adapt
            .as_ref()
            .is_some_and(|a| a.switching.as_ref().is_some_and(|s| s.owed.is_empty()));
        // The new protocol (or home) takes the bytes: in memory first.
        if complete && !self.bring_in(chunk) {
            return;
        }
        let entry: &mut HomeEntry = self.homes.get_mut(&chunk).expect("switching");
        let adapt = entry.adapt.as_mut().expect("adaptive");
        if !adapt.switching.as_ref().is_some_and(|s| s.owed.is_empty()) {
            return;
        }
        let sw = adapt.switching.take().expect("checked");
        if sw.to.home != self.rank {
            self.hand_over(out, chunk, sw.to);
            return;
        }
        let last = LastRelease {
            version: entry.side.version(),
            data: entry.side.data().clone(),
        };
        entry.side = sw
            .to
            .protocol
            .consistency()
            .resume_home(last)
            .expect("every switch target resumes a chunk");
        adapt.epoch += 1;
        adapt.running = sw.to.protocol;
        tracing::debug!(
            "[adaptive] chunk {chunk}: runs {} from epoch {}",
            sw.to.protocol.short_name(),
            adapt.epoch
        );
        for (said, payload) in std::mem::take(&mut adapt.held) {
            self.at_adaptive_home(out, (self.rank, true), chunk, said, &payload);
        }
    }

    /// Tells `client` that `chunk` runs `protocol` in `epoch`.
    fn send_switch(
        &mut self,
        out: &mut dyn Sender,
        chunk: u64,
        client: Rank,
        epoch: u32,
        protocol: ProtocolId,
    ) {
        let msg = Message::Coherence {
            chunk,
            client,
            op: CoherenceOp::Switch { protocol },
            epoch,
            after_barrier: false,
        };
        self.send_to_client_with(out, client, &msg, Payload::None);
    }

    /// `client` has left: a switch stops waiting for it.
    pub(super) fn switch_client_left(&mut self, out: &mut dyn Sender, chunk: u64, client: Rank) {
        let Some(adapt) = self.homes.get_mut(&chunk).and_then(|e| e.adapt.as_mut()) else {
            return;
        };
        adapt.participants.remove(&client);
        adapt.held.retain(|(said, _)| said.client != client);
        if let Some(sw) = adapt.switching.as_mut() {
            sw.owed.remove(&client);
            self.maybe_complete(out, chunk);
        } else {
            self.maybe_start_switch(out, chunk);
        }
    }

    /// The switch of `chunk` ends with its home on another server: the
    /// entry goes there ([`Message::Handover`]), then the requests held
    /// here, in order behind it; this server forwards whatever comes for
    /// the chunk from now on (`moved`).
    fn hand_over(&mut self, out: &mut dyn Sender, chunk: u64, to: Plan) {
        let entry = self.homes.remove(&chunk).expect("switching");
        self.spill.forget(chunk);
        let adapt = entry.adapt.expect("adaptive");
        let data = entry.side.data().clone();
        let mut payload = Vec::with_capacity(data.len() + 5 * entry.subscribers.len());
        payload.extend_from_slice(&data);
        for (&rank, &with_data) in &entry.subscribers {
            payload.extend_from_slice(&rank.to_le_bytes());
            payload.push(u8::from(with_data));
        }
        let msg = Message::Handover {
            chunk,
            epoch: adapt.epoch + 1,
            running: to.protocol,
            version: entry.side.version(),
            size: data.len() as u64,
            published: entry.published,
        };
        tracing::debug!(
            "[adaptive] chunk {chunk}: handed over to server {} (runs {} from epoch {})",
            to.home,
            to.protocol.short_name(),
            adapt.epoch + 1
        );
        self.send(out, to.home, &msg, Payload::Copy(&payload));
        self.moved.insert(chunk, to.home);
        for (said, payload) in adapt.held {
            let msg = Message::Coherence {
                chunk,
                client: said.client,
                op: said.op,
                epoch: said.epoch,
                after_barrier: said.after_barrier,
            };
            self.send(out, to.home, &msg, Payload::Copy(&payload));
        }
    }

    /// A chunk's first home hands it over to this server (`src`, checked:
    /// only that server may, once).
    pub(super) fn take_over(
        &mut self,
        src: Rank,
        handover: (u64, u32, ProtocolId, u64),
        (size, published): (u64, u64),
        payload: &[u8],
    ) {
        let (chunk, epoch, running, version) = handover;
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        let fits = size > 0
            && size <= crate::chunk::MAX_CHUNK_SIZE
            && payload.len() >= size
            && (payload.len() - size).is_multiple_of(5);
        let from_first_home = src == self.home_of(chunk) && src != self.rank;
        let side = crate::protocol::adaptive::TARGETS
            .contains(&running)
            .then(|| {
                running.consistency().resume_home(LastRelease {
                    version,
                    data: payload[..size.min(payload.len())].into(),
                })
            })
            .flatten();
        let (true, true, false, Some(side)) =
            (fits, from_first_home, self.homes.contains_key(&chunk), side)
        else {
            tracing::warn!(
                "server {}: dropped a handover of chunk {chunk} from {src}: not its first home, \
                 a chunk already here, or a malformed one",
                self.rank
            );
            return;
        };
        let subscribers = payload[size..]
            .chunks_exact(5)
            .map(|s| {
                let rank = Rank::from_le_bytes(s[..4].try_into().expect("4 bytes"));
                (rank, s[4] != 0)
            })
            .filter(|&(rank, _)| rank < self.topology.len() && !self.topology.is_server(rank))
            .collect();
        tracing::debug!(
            "[adaptive] chunk {chunk}: taken over from server {src}, runs {} from epoch {epoch}",
            running.short_name()
        );
        self.homes.insert(
            chunk,
            HomeEntry {
                protocol: ProtocolId::Adaptive,
                side,
                subscribers,
                slot: None,
                published,
                epochs: None,
                adapt: Some(Adapt::arrived(epoch, running)),
            },
        );
        self.spill.used(chunk, size);
        self.make_room(chunk);
    }
}
