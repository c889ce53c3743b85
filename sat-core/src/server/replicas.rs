//! Replicated homes (`<topologies replication="2">`): every chunk's
//! versions are kept by its home and by a backup, the next server after the
//! home in rank order.
//!
//! - **What the backup holds.** Each version the home applies (a release,
//!   and the allocation, version 0) goes to the backup in a `Replica`
//!   carrying the whole version; the backup keeps the newest and answers
//!   `ReplicaAck`. Messages between two servers arrive in order, so the
//!   acknowledgements come in the order the replicas left.
//! - **Nothing leaves ahead of its backup.** What a home's step on a chunk
//!   sends (its protocol's answers, the notifications of a release, the
//!   writer's `Durable`, an allocation's answer) waits until every replica
//!   of that chunk sent so far is acknowledged: no process learns of a
//!   version that only one server holds, so no process can act on a version
//!   a server's death takes away. Later steps on the same chunk queue behind
//!   it, in order; other chunks are not held up.
//! - **A release returns once both hold it.** The writer's RELEASE waits
//!   for `Durable` (one per release message that publishes): a release that
//!   returned is held by two servers. This costs the release a round trip
//!   through the home and its backup that a run without replication does
//!   not pay (a MESI release is otherwise one message, not waited for).
//! - **What is replicated.** Chunks whose home can be rebuilt from a
//!   version alone: the MESI family and home-only. A chunk of a diffing
//!   protocol, an adaptive one, a registered protocol or a protected
//!   (labelled) chunk is refused at MALLOC with the reason, and the run's
//!   versions stay on the message path (no host slots), where every release
//!   passes through its home.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::ServerState;
use crate::protocol::{LastRelease, Out, ProtocolId, ToClient};
use crate::transport::{Payload, Rank, Sender};
use crate::wire::{AllocOutcome, Message};

/// What this server keeps for replicated homes: the copies it backs up,
/// and the answers of its own homes that wait for their backup.
#[derive(Default)]
pub(super) struct Replicas {
    /// The newest version of each chunk this server is the backup of.
    kept: BTreeMap<u64, Kept>,
    /// Per chunk homed here that has sent a replica: its count of replicas
    /// sent and acknowledged, and what waits for them.
    gates: BTreeMap<u64, Gate>,
}

/// A version kept for another home, which this server takes over if that
/// home is lost (`server/failover.rs`).
#[derive(Debug)]
struct Kept {
    version: u64,
    size: u64,
    protocol: ProtocolId,
    /// The bytes; None for version 0 (zeros).
    data: Option<Arc<[u8]>>,
}

#[derive(Default)]
struct Gate {
    sent: u64,
    acked: u64,
    /// In order: what leaves once `acked` reaches the count it names.
    held: VecDeque<(u64, Held)>,
}

/// Something a home's step sends, held until its chunk's backup has caught up.
pub(super) enum Held {
    /// The protocol's answers.
    Answers(Vec<Out<ToClient>>),
    /// The subscribers' notifications of `version`.
    Notify { version: u64, data: Arc<[u8]> },
    /// One subscriber's notification of `version` (it subscribed again at
    /// a new home: `server/failover.rs`).
    NotifyOne {
        client: Rank,
        version: u64,
        with_data: bool,
        data: Arc<[u8]>,
    },
    /// The writer's release is held by both servers.
    Durable { client: Rank, version: u64 },
    /// An allocation request's answer.
    Alloc {
        client: Rank,
        request: u64,
        outcome: AllocOutcome,
    },
}

impl Replicas {
    /// Whether some replica sent from here waits for its acknowledgement.
    #[cfg(feature = "simulator")]
    pub(super) fn in_flight(&self) -> bool {
        self.gates.values().any(|g| g.acked < g.sent)
    }

    /// The chunks kept here whose home `was_home` says.
    pub(super) fn kept_from(&self, was_home: impl Fn(u64) -> bool) -> Vec<u64> {
        self.kept.keys().copied().filter(|&c| was_home(c)).collect()
    }

    /// Takes the version of `chunk` kept here: (version, bytes (None:
    /// zeros), size, protocol).
    #[allow(clippy::type_complexity)]
    pub(super) fn take(&mut self, chunk: u64) -> Option<(u64, Option<Arc<[u8]>>, u64, ProtocolId)> {
        self.kept
            .remove(&chunk)
            .map(|k| (k.version, k.data, k.size, k.protocol))
    }

    /// The version of `chunk` kept here for its home: (version, bytes
    /// (None: zeros), size, protocol).
    #[cfg(any(test, feature = "simulator"))]
    #[allow(clippy::type_complexity)]
    pub(super) fn replica(&self, chunk: u64) -> Option<(u64, Option<Arc<[u8]>>, u64, ProtocolId)> {
        self.kept
            .get(&chunk)
            .map(|k| (k.version, k.data.clone(), k.size, k.protocol))
    }
}

/// Whether `protocol`'s home can be rebuilt from its last version alone,
/// as a backup must do when it takes a chunk over. Not MESI with its E
/// state, whose writer may release again without telling the home (the
/// version then lives in one process only).
pub(crate) fn can_replicate(protocol: ProtocolId) -> bool {
    protocol != ProtocolId::Adaptive
        && protocol != ProtocolId::MesiExclusive
        && !protocol.diffs()
        && !matches!(protocol, ProtocolId::User(_))
        && protocol.handlers().is_some_and(|h| {
            h.resume_home(LastRelease {
                version: 0,
                data: Arc::from(&[][..]),
            })
            .is_some()
        })
}

impl ServerState<'_> {
    /// Whether this run keeps a backup of every home.
    pub(super) fn replicated(&self) -> bool {
        self.topology.replication() > 1 && self.servers.len() > 1
    }

    /// The backup of `chunk`: the server alive after its home in rank order
    /// (`topology/ring.rs`); None when it has none.
    pub(super) fn backup_of(&self, chunk: u64) -> Option<Rank> {
        if !self.replicated() {
            return None;
        }
        self.ring.backup(chunk)
    }

    /// Sends `chunk`'s current version (homed here) to its backup; what
    /// the chunk sends from now on waits for the acknowledgement.
    pub(super) fn replicate(&mut self, out: &mut dyn Sender, chunk: u64) {
        // A version spilled to a file comes back first (a new backup after
        // a loss is sent every chunk).
        if !self.homes.contains_key(&chunk) || !self.bring_in(chunk) {
            return;
        }
        let (Some(backup), Some(entry)) = (self.backup_of(chunk), self.homes.get(&chunk)) else {
            return;
        };
        let (version, data) = entry.current();
        let msg = Message::Replica {
            chunk,
            version,
            size: data.len() as u64,
            protocol: entry.protocol,
        };
        let payload = if version == 0 {
            Payload::None
        } else {
            Payload::Shared(&data)
        };
        self.send(out, backup, &msg, payload);
        self.replicas.gates.entry(chunk).or_default().sent += 1;
    }

    /// Whether what `chunk` sends now must wait for its backup.
    pub(super) fn held_back(&self, chunk: u64) -> bool {
        self.replicas
            .gates
            .get(&chunk)
            .is_some_and(|g| g.acked < g.sent || !g.held.is_empty())
    }

    /// Sends `held` now, or after the replicas of `chunk` sent so far.
    pub(super) fn send_or_hold(&mut self, out: &mut dyn Sender, chunk: u64, held: Held) {
        if self.held_back(chunk) {
            let gate = self.replicas.gates.get_mut(&chunk).expect("held back");
            gate.held.push_back((gate.sent, held));
        } else {
            self.dispatch(out, chunk, held);
        }
    }

    /// Sends a home step's `outs` about `chunk`, or holds them behind its
    /// replicas (they leave in order, so a later step's answers never pass
    /// an earlier one's).
    pub(super) fn answers_after_backup(
        &mut self,
        out: &mut dyn Sender,
        chunk: u64,
        outs: &mut Vec<Out<ToClient>>,
    ) {
        if self.held_back(chunk) {
            self.send_or_hold(out, chunk, Held::Answers(std::mem::take(outs)));
        } else {
            self.send_home_answers(out, chunk, outs);
        }
    }

    /// An allocation request's answer, after the chunk's replicas.
    pub(super) fn answer_after_backup(
        &mut self,
        out: &mut dyn Sender,
        chunk: u64,
        (client, request): (Rank, u64),
        outcome: AllocOutcome,
    ) {
        let held = Held::Alloc {
            client,
            request,
            outcome,
        };
        self.send_or_hold(out, chunk, held);
    }

    /// Why a chunk of `protocol` with `label` cannot be allocated in this
    /// run (its backup could not take it over); None when it can, or when
    /// the run keeps no backups, or the chunk exists already (its MALLOC
    /// answers as usual).
    pub(super) fn not_replicable(
        &self,
        chunk: u64,
        protocol: ProtocolId,
        label: crate::chunk::Label,
    ) -> Option<String> {
        if !self.replicated() || self.alloc.size_of(chunk).is_some() {
            return None;
        }
        if label != crate::chunk::NO_LABEL {
            return Some(
                "the run keeps a backup of every home (replication=\"2\"), and protected \
                 (labelled) chunks are not replicated yet: allocate it without a label, or run \
                 without replication"
                    .into(),
            );
        }
        (!can_replicate(protocol)).then(|| {
            format!(
                "the run keeps a backup of every home (replication=\"2\"), which rebuilds a \
                 home from its last version: {} cannot be rebuilt so; use MESI (without its E \
                 state), update MESI, learned MESI or home-only, or run without replication",
                protocol.name()
            )
        })
    }

    fn dispatch(&mut self, out: &mut dyn Sender, chunk: u64, held: Held) {
        match held {
            Held::Answers(mut outs) => self.send_home_answers(out, chunk, &mut outs),
            Held::Notify { version, data } => self.notify(out, chunk, version, Some(data)),
            Held::NotifyOne {
                client,
                version,
                with_data,
                data,
            } => {
                let data = with_data.then_some(&data);
                self.notify_one(out, (chunk, client), version, data);
            }
            Held::Durable { client, version } => {
                let msg = Message::Durable {
                    chunk,
                    client,
                    version,
                };
                self.send_to_client(out, client, &msg)
            }
            Held::Alloc {
                client,
                request,
                outcome,
            } => self.answer(out, chunk, (client, request), outcome),
        }
    }

    /// Sends `chunk` (homed here) to its backup as if for the first time:
    /// its backup changed (a server was lost, or this one took the chunk
    /// over). What the chunk holds back waits for the new backup; with no
    /// backup left, it leaves now.
    pub(super) fn rebackup(&mut self, out: &mut dyn Sender, chunk: u64) {
        if let Some(gate) = self.replicas.gates.get_mut(&chunk) {
            // The lost backup's acknowledgements will never come.
            gate.acked = gate.sent;
        }
        self.replicate(out, chunk);
        if let Some(gate) = self.replicas.gates.get_mut(&chunk) {
            let sent = gate.sent;
            for held in &mut gate.held {
                held.0 = sent;
            }
        }
        self.flush_acked(out, chunk);
    }

    /// A home's replica of `chunk`, for this server to keep.
    pub(super) fn on_replica(
        &mut self,
        out: &mut dyn Sender,
        src: Rank,
        (chunk, version, size): (u64, u64, u64),
        protocol: ProtocolId,
        payload: &[u8],
    ) {
        let fits = size > 0
            && size <= crate::chunk::MAX_CHUNK_SIZE as u64
            && if version == 0 {
                payload.is_empty()
            } else {
                payload.len() as u64 == size
            };
        // (The sender may have applied a server's loss before this one did:
        // any server alive may be a chunk's home by then.)
        if !fits || !self.replicated() || self.homes.contains_key(&chunk) {
            tracing::warn!(
                "server {}: dropped a replica of chunk {chunk} from {src}: homed here, in a run \
                 without replicas, or malformed ({} bytes for {size})",
                self.rank,
                payload.len()
            );
            return;
        }
        let data = (version > 0).then(|| Arc::from(payload));
        tracing::debug!("replica of chunk {chunk} version {version} from home {src}");
        if self
            .replicas
            .kept
            .get(&chunk)
            .is_some_and(|k| k.version > version)
        {
            // An older home's, passed by the newer one's.
            self.send(
                out,
                src,
                &Message::ReplicaAck { chunk, version },
                Payload::None,
            );
            return;
        }
        self.replicas.kept.insert(
            chunk,
            Kept {
                version,
                size,
                protocol,
                data,
            },
        );
        self.send(
            out,
            src,
            &Message::ReplicaAck { chunk, version },
            Payload::None,
        );
    }

    /// The backup of `chunk` holds another of its replicas: what waited for
    /// it leaves, in order.
    pub(super) fn on_replica_ack(&mut self, out: &mut dyn Sender, src: Rank, chunk: u64) {
        let from_backup = self.backup_of(chunk) == Some(src) && self.homes.contains_key(&chunk);
        let Some(gate) = self
            .replicas
            .gates
            .get_mut(&chunk)
            .filter(|g| from_backup && g.acked < g.sent)
        else {
            tracing::warn!(
                "server {}: dropped an unexpected replica acknowledgement of chunk {chunk} from \
                 {src}",
                self.rank
            );
            return;
        };
        gate.acked += 1;
        self.flush_acked(out, chunk);
    }

    /// Sends what `chunk` held back for replicas now acknowledged.
    fn flush_acked(&mut self, out: &mut dyn Sender, chunk: u64) {
        let Some(gate) = self.replicas.gates.get_mut(&chunk) else {
            return;
        };
        let acked = gate.acked;
        let mut ready = Vec::new();
        while gate.held.front().is_some_and(|&(needs, _)| needs <= acked) {
            ready.push(gate.held.pop_front().expect("checked").1);
        }
        if gate.acked == gate.sent && gate.held.is_empty() {
            self.replicas.gates.remove(&chunk);
        }
        for held in ready {
            self.dispatch(out, chunk, held);
        }
    }
}
