//! The messages servers and clients exchange over the transport, and their
//! encoding.
//!
//! Only the header is encoded (bincode 2, little-endian varints); payload
//! bytes travel beside it untouched (see [`crate::transport`]). Every decode is
//! bounds-checked and total: a malformed or hostile header yields a
//! [`WireError`], which the receiver logs and drops — it never panics.

use bincode::{Decode, Encode};

use crate::chunk::Label;
use crate::protocol::ProtocolId;
use crate::segment::SlotPlace;
use crate::transport::{Rank, MAX_HEADER};

/// Bumped whenever the encoding of [`Message`] changes, or the layout of
/// what processes share beside messages (host slots: 8 gave a service's
/// slots two buffers and its readers their own bits), or the transport's
/// framing (13: one tag for every eager packet, its order number in the
/// prefix; 14: the drain before a run's shutdown), or the bootstrap's
/// messages (15: the run's id in the seed's setup; 16: a rendezvous told of
/// the run's losses; 17: the service's run id in the desk's welcome; 18: the join's
/// handshake a key exchange, `auth.rs`; 19: `Republish`); the bootstrap and a service's desk
/// refuse processes built with another version.
pub const WIRE_VERSION: u32 = 19;

/// A message between two processes of a run.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Message {
    /// A client's point-to-point message to another client, carried by the
    /// servers (clients never talk to each other directly, Figure 2). The
    /// payload is the user's bytes.
    Relay { from: Rank, to: Rank, tag: u32 },
    /// Client -> its server: the client is done (its role returned and it
    /// has no subscription left, or the run is over). Its counters of
    /// publications sent and notifications received close its account in
    /// the quiescence detection ([`crate::quiescence`]).
    ClientDone { published: u64, received: u64 },
    /// Client -> its server: the role returned, and the client now waits
    /// for notifications of its subscriptions (section 2.5's client loop).
    ClientIdle,
    /// Seed -> servers -> waiting clients: report your counters (wave `wave`
    /// of the quiescence detection).
    Probe { wave: u64 },
    /// The answer to a probe, and the sum a server sends the seed.
    ProbeReply {
        wave: u64,
        busy: bool,
        sent: u64,
        received: u64,
    },
    /// Seed -> servers -> waiting clients: nothing can notify you any more;
    /// end.
    Stop,
    /// Server -> seed: every client of mine waits or is done (waves of the
    /// quiescence detection may start).
    ServerQuiet,
    /// Server -> the client: your termination is recorded, you may close.
    ClientDoneAck,
    /// Server -> seed: every client of this server is done.
    ServerDone,
    /// Seed -> every other server: the run is over, shut down.
    Shutdown,
    /// Server -> seed: shutdown received, closing.
    ShutdownAck,
    /// MALLOC of `chunk` with `size` bytes and `protocol` on behalf of
    /// `client`; travels to the chunk's home (through the client's server).
    /// `request` is the client's number for it, echoed in the answer.
    Malloc {
        chunk: u64,
        size: u64,
        client: Rank,
        request: u64,
        protocol: ProtocolId,
        label: Label,
    },
    /// LOOKUP of `chunk` for `client`, which waits at most `wait_ms` for a
    /// MALLOC of it anywhere; `request` as for `Malloc`.
    Lookup {
        chunk: u64,
        client: Rank,
        request: u64,
        wait_ms: u32,
    },
    /// The home's answer to a Malloc or a Lookup, routed back to `client`,
    /// with the `request` it answers: a client matches answers by request,
    /// never by chunk, since two requests of one chunk may be in flight (two
    /// threads) or one may have been given up (a LOOKUP that timed out).
    AllocReply {
        chunk: u64,
        client: Rank,
        request: u64,
        outcome: AllocOutcome,
        /// The slot that holds the chunk's version, when its home keeps it
        /// in a host segment (every process of the run on its host): the
        /// client then opens scopes on the slot, not through messages.
        host: Option<SlotPlace>,
    },
    /// A coherence message about `chunk` between `client` and the chunk's
    /// home, either way; chunk data, when it carries some, is the payload.
    Coherence {
        chunk: u64,
        client: Rank,
        op: CoherenceOp,
        /// The chunk's protocol epoch the sender speaks in: 0 until an
        /// adaptive chunk first switches protocol, then one more at each
        /// switch (`server/switch.rs`). Always 0 for other chunks.
        epoch: u32,
        /// A read request that is the client's first READ of the chunk
        /// since it last passed a barrier (what an adaptive chunk's home
        /// weighs, [`crate::protocol::adaptive`]).
        after_barrier: bool,
    },
    /// Server -> every other server: `client`'s role has returned (or, with
    /// `lost`, a run with recovery lost it: it died or stopped answering);
    /// homes forget its copies and stop waiting for its acknowledgements.
    ClientLeft { client: Rank, lost: bool },
    /// A synchronization request of `client` to the object's coordinator,
    /// or the coordinator's answer ([`crate::sync`]).
    Sync { client: Rank, op: SyncOp },
    /// Client -> the chunk's home: notify me of every write release, with
    /// the new data when `with_data`.
    Subscribe {
        chunk: u64,
        client: Rank,
        with_data: bool,
    },
    /// Home -> client: the subscription is recorded; every release applied
    /// from now on notifies.
    Subscribed { chunk: u64, client: Rank },
    /// Client -> the chunk's home: stop notifying me.
    Unsubscribe { chunk: u64, client: Rank },
    /// Seed -> the server of slot `client` (service mode): a process
    /// attaches in that slot; the payload is its endpoint address.
    Admit { client: Rank },
    /// The answer to `Admit`: the endpoint is known (`refused` empty), or
    /// why it could not be entered.
    Admitted { client: Rank, refused: String },
    /// Seed -> the server of slot `client`: the client's control connection
    /// closed without a detach (the process died), or its watch lost it (a
    /// run with recovery); forget it. The payload says why, for the log.
    ClientLost { client: Rank },
    /// Server -> the server of `client` (service mode): `ClientLeft`
    /// applied here, nothing more will come from here for that client.
    ClientForgotten { client: Rank },
    /// Server of `client` -> seed: every server has forgotten the client;
    /// its slot may take another process. A non-empty payload says it did
    /// not detach (it was lost): its session, if still open, is told.
    SlotFree { client: Rank },
    /// Client -> the chunk's home (through its server): the client released
    /// `version` of `chunk` into the chunk's host slot. The home notifies
    /// the subscribers; the payload is the version's bytes when the slot
    /// said that some subscriber wants data.
    Published {
        chunk: u64,
        client: Rank,
        version: u64,
        /// The releases this one message tells of (a client merges the
        /// releases of one chunk that wait to be told), for the quiescence
        /// detection's counts.
        releases: u32,
    },
    /// Home -> the client of a `Published`: taken in. A client keeps a
    /// window of unanswered `Published`, so that a burst of releases never
    /// floods its server's receive queue.
    PublishedAck { client: Rank },
    /// Home -> subscriber: `chunk` has a new version, applied at the home
    /// before this left; the payload is its data when subscribed with data.
    Notify {
        chunk: u64,
        client: Rank,
        version: u64,
        with_data: bool,
    },
    /// A barrier's coordinator -> the home of `chunks` (server to server),
    /// as the round ends: push `client` a copy of each, if that can be done
    /// at once ([`CoherenceOp::Want`]). Learned communication sets: the
    /// chunks are those `client` read after the same barrier last time,
    /// listed in the payload of its arrival (`client/learned.rs`); at most
    /// [`MAX_FETCH`] in one message.
    Fetch { client: Rank, chunks: Vec<u64> },
    /// The home of adaptive `chunk` -> the server it moves to (server to
    /// server, once every process has acknowledged the switch of `epoch`:
    /// `server/switch.rs`): run it under `running` from `version`, whose
    /// `size` bytes start the payload; the subscribers follow, 5 bytes each
    /// (rank, little-endian, then 1 for data or 0). `published` as in the
    /// home's entry.
    Handover {
        chunk: u64,
        epoch: u32,
        running: ProtocolId,
        version: u64,
        size: u64,
        published: u64,
    },
    /// Client -> its server, where a run outlives its clients (a service, a
    /// run with recovery): what this client sends next, up to its
    /// `ChainCommit`, is one chain's release, applied all or nothing. The
    /// server holds those messages and handles them, in order, once the
    /// commit comes; if the client is lost first, it drops them
    /// (`server/bracket.rs`).
    ChainBegin { client: Rank },
    /// Client -> its server: the chain's release is all sent.
    ChainCommit { client: Rank },
    /// Client -> the chunk's home (through its server), inside a chain's
    /// release: the client copied `version` of `chunk` into its host slot's
    /// next buffer and still holds the slot's write lock; the home makes it
    /// the slot's version, lets the lock go and notifies the subscribers,
    /// as for `Published`.
    Staged {
        chunk: u64,
        client: Rank,
        version: u64,
    },
    /// The home of `chunk` -> its backup, in a run with replicated homes
    /// (`server/replicas.rs`): keep `version` of the chunk, `size` bytes
    /// under `protocol`. The payload is the version's bytes; none for
    /// version 0 (zeros).
    Replica {
        chunk: u64,
        version: u64,
        size: u64,
        protocol: ProtocolId,
    },
    /// Backup -> home: the `Replica` of `version` of `chunk` is kept.
    ReplicaAck { chunk: u64, version: u64 },
    /// Home -> the writer (through its server), in a run with replicated
    /// homes: the release of `chunk` that made `version` is held by the
    /// chunk's home and its backup; the writer's RELEASE returns.
    Durable {
        chunk: u64,
        client: Rank,
        version: u64,
    },
    /// A run with replicated homes and recovery lost server `server`
    /// (`server/failover.rs`): seed -> every other server; then each server
    /// -> its clients, once every server has applied it (its stand-in tells
    /// the lost server's clients, which it serves from then on).
    ServerLost { server: Rank },
    /// Server -> every other server alive: it has applied the loss of
    /// `server` (took its chunks over, or now sends their backups
    /// elsewhere).
    LossApplied { server: Rank },
    /// Client -> its server: it has applied the loss of `server`; what it
    /// sends from now on knows of it.
    LossSeen { server: Rank },
    /// Seed -> the server now serving `client`: the client finished the run
    /// (it said goodbye) while its own server was lost.
    ClientFinished { client: Rank },
    /// Client -> the chunk's new home, once a lost server took the chunk's
    /// subscriptions with it (`client/failover.rs`): as `Subscribe`, and
    /// the home tells it the current version at once if it is newer than
    /// `seen`, the newest it was told (a release may have come between the
    /// loss and this).
    Resubscribe {
        chunk: u64,
        client: Rank,
        with_data: bool,
        seen: u64,
    },
    /// Stand-in -> every other server: `client`, a lost server's, has
    /// dropped every copy and scope it had (it said `LossSeen`): the homes
    /// forget it as one that left, and stop waiting for it.
    Moved { client: Rank },
    /// Server -> the stand-in of lost server `server`: every client of
    /// this server (and, from the stand-in itself, every client it took
    /// over) has said `LossSeen`: none holds a copy of the lost server's
    /// chunks any more, so their new home may write them.
    ClientsSeen { server: Rank },
    /// Stand-in -> seed: it serves lost server `server`'s clients now, for
    /// the termination protocol; `busy` when some of them are not done (it
    /// is then not done either, whatever it said before).
    Adopted { server: Rank, busy: bool },
    /// Seed -> every other server, once every server's clients are done:
    /// report how many messages you sent to and took in from other servers
    /// (wave `wave` of the drain before the shutdown: `server::Drain`).
    Drain { wave: u64 },
    /// Server -> seed: the answer to a `Drain`.
    Drained { wave: u64, sent: u64, received: u64 },
    /// Client -> the chunk's home (through its server), in a run with
    /// replicated homes, after a server's loss and before its `LossSeen`:
    /// the release of `version` of `chunk`, part of a chain's release whose
    /// `Durable` the loss kept from it, again. The payload is the released
    /// bytes. The home applies it only if it is the chunk's next version
    /// and the release cannot have reached it otherwise (the client still
    /// holds the write scope there, or the chunk was just taken over from
    /// the lost server): `server/republish.rs`.
    /// `yielded`: the release was a `ReleaseYield` (of a scope opened in
    /// E, with an invalidation to acknowledge), and is made again as one.
    Republish {
        chunk: u64,
        client: Rank,
        version: u64,
        yielded: bool,
    },
}

/// The chunks one [`Message::Fetch`] may list: its header must fit in
/// [`MAX_HEADER`] bytes whatever the ids (at most 10 bytes each); a longer
/// list goes in several messages.
pub const MAX_FETCH: usize = 96;

/// Synchronization operations: requests from a client, answers from the
/// coordinator. Ids of rendezvous, barriers and signals are separate spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum SyncOp {
    /// rendezvous(id): answer once the generation is past `seen`.
    /// `losses`: how many lost processes the client has been told of (a
    /// run with recovery; 0 otherwise): see [`crate::sync`].
    Sleep {
        id: u32,
        seen: u64,
        losses: u32,
    },
    /// wakeup(id). `ticket` numbers the client's calls (with its barrier
    /// arrivals); the coordinator answers [`SyncOp::WakeupDone`] with it
    /// once the wakeup is applied.
    Wakeup {
        id: u32,
        ticket: u64,
    },
    /// The rendezvous `id` is at `generation`: the sleeper may go.
    Awake {
        id: u32,
        generation: u64,
    },
    /// barrier(id, count). `ticket` numbers the client's arrivals (every
    /// barrier id together); the answer echoes it, so a client knows which
    /// of its calls an answer is for, even a call that gave up.
    Barrier {
        id: u32,
        count: u32,
        ticket: u64,
        /// How many lost processes the arriving client has been told of (a
        /// run with recovery; 0 otherwise): see [`crate::sync`].
        losses: u32,
    },
    /// The round of barrier `id` that arrival `ticket` was in is complete.
    BarrierDone {
        id: u32,
        ticket: u64,
    },
    /// Arrival `ticket` was refused: the round in progress has `count` (0:
    /// a count of 0 was asked).
    BarrierRefused {
        id: u32,
        count: u32,
        ticket: u64,
    },
    /// Where barrier `id` lives when its coordinator keeps barriers in a
    /// host segment (every process of the run on its host).
    BarrierPlace {
        id: u32,
    },
    /// The answer: the barrier's slot, or None (barrier `id` works by
    /// messages).
    BarrierAt {
        id: u32,
        place: Option<SlotPlace>,
    },
    SignalSubscribe {
        id: u32,
    },
    /// The signal subscription is recorded.
    SignalSubscribed {
        id: u32,
    },
    SignalUnsubscribe {
        id: u32,
    },
    /// Raise signal `id`: notify its subscribers.
    Raise {
        id: u32,
    },
    /// Signal `id` was raised.
    Signal {
        id: u32,
    },
    /// Arrival `ticket` was dropped from its round: the run has lost
    /// `losses` processes (a run with recovery), more than the arrival was
    /// told of, so the round may wait for a process that will never come.
    BarrierLost {
        id: u32,
        ticket: u64,
        losses: u32,
    },
    /// The rendezvous calls of `id` that waited are dropped: the run has
    /// lost `losses` processes (a run with recovery), more than they were
    /// told of, and the wakeup they wait for may have died with one.
    SleepLost {
        id: u32,
        losses: u32,
    },
    /// wakeup call `ticket` on rendezvous `id` is applied: every
    /// rendezvous that reaches the coordinator after this answer left
    /// sees it.
    WakeupDone {
        id: u32,
        ticket: u64,
    },
}

/// The coherence messages of every protocol ([`crate::protocol`]) on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum CoherenceOp {
    ReadReq {
        have: Option<u64>,
    },
    WriteReq {
        have: Option<u64>,
        need_data: bool,
    },
    Release {
        version: u64,
    },
    InvalAck,
    ReadRelease,
    ReadGrant {
        version: u64,
        with_data: bool,
    },
    WriteGrant {
        version: u64,
        with_data: bool,
    },
    Inval,
    /// A write scope ended without publishing (an error, a panic, a failed
    /// role): the home keeps its version.
    Abort,
    /// The protocol family of [`crate::protocol::mesi`]: see its messages.
    ExclusiveGrant {
        version: u64,
        with_data: bool,
    },
    Update {
        version: u64,
    },
    ReleaseYield {
        version: u64,
    },
    AbortYield,
    Share,
    ReleaseDiff,
    DiffAck {
        version: u64,
    },
    /// Learned sets ([`crate::protocol::mesi::ToHome::Want`]).
    Want,
    /// Learned sets ([`crate::protocol::mesi::ToHome::Drop`]).
    Drop,
    /// Home -> client: the adaptive chunk moves to `protocol`, in the
    /// message's epoch. The client answers with [`CoherenceOp::SwitchAck`]
    /// once no scope of its own is open on the chunk, and speaks the new
    /// protocol from then on (`client/switch.rs`).
    Switch {
        protocol: ProtocolId,
    },
    /// Client -> home: the switch of the message's epoch is applied here.
    SwitchAck,
}

impl CoherenceOp {
    /// Its name in the debug stream (Figure 14's `client_req_*`) and in
    /// refusals.
    pub fn name(self) -> &'static str {
        match self {
            CoherenceOp::ReadReq { .. } => "read",
            CoherenceOp::WriteReq {
                need_data: true, ..
            } => "readwrite",
            CoherenceOp::WriteReq { .. } => "write",
            CoherenceOp::Release { .. } => "release",
            CoherenceOp::ReadRelease => "read_release",
            CoherenceOp::InvalAck => "inval_ack",
            CoherenceOp::ReadGrant { .. } => "read_grant",
            CoherenceOp::WriteGrant { .. } => "write_grant",
            CoherenceOp::Inval => "inval",
            CoherenceOp::Abort => "abort",
            CoherenceOp::ExclusiveGrant { .. } => "exclusive_grant",
            CoherenceOp::Update { .. } => "update",
            CoherenceOp::ReleaseYield { .. } => "release_yield",
            CoherenceOp::AbortYield => "abort_yield",
            CoherenceOp::Share => "share",
            CoherenceOp::ReleaseDiff => "release_diff",
            CoherenceOp::DiffAck { .. } => "diff_ack",
            CoherenceOp::Want => "want",
            CoherenceOp::Drop => "drop",
            CoherenceOp::Switch { .. } => "switch",
            CoherenceOp::SwitchAck => "switch_ack",
        }
    }

    /// Whether a client sends it (to the chunk's home); the others go from
    /// the home to a client.
    pub fn from_client(self) -> bool {
        crate::protocol::mesi::to_home(self).is_some() || self == CoherenceOp::SwitchAck
    }
}

/// What the home says about an allocation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum AllocOutcome {
    /// The chunk exists with this size, protocol and label.
    Allocated {
        size: u64,
        protocol: ProtocolId,
        label: Label,
    },
    /// A MALLOC asked for another size, protocol or label than the chunk
    /// has: this is what it has.
    Mismatch {
        size: u64,
        protocol: ProtocolId,
        label: Label,
    },
    /// A LOOKUP waited its whole time and nobody allocated the chunk.
    NotAllocated,
    /// A MALLOC the home will not serve: its size is 0 or above
    /// [`crate::chunk::MAX_CHUNK_SIZE`]. The client API refuses such sizes
    /// before sending; this answers a request that got past it, which
    /// would otherwise wait for an answer that never comes.
    Refused,
}

/// As the debug stream shows it: the fields, a label only when the chunk
/// has one (its first bytes, in hex).
impl std::fmt::Display for AllocOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, size, protocol, label) = match *self {
            AllocOutcome::NotAllocated => return f.write_str("NotAllocated"),
            AllocOutcome::Refused => return f.write_str("Refused"),
            AllocOutcome::Allocated {
                size,
                protocol,
                label,
            } => ("Allocated", size, protocol, label),
            AllocOutcome::Mismatch {
                size,
                protocol,
                label,
            } => ("Mismatch", size, protocol, label),
        };
        write!(f, "{name} {{ size: {size}, protocol: {protocol:?}")?;
        if label != crate::chunk::NO_LABEL {
            write!(f, ", label: ")?;
            for b in &label[..8] {
                write!(f, "{b:02x}")?;
            }
            write!(f, "...")?;
        }
        f.write_str(" }")
    }
}

impl Message {
    /// A short name for the debug stream (Figure 14 prints message types).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Relay { .. } => "relay",
            Message::ClientDone { .. } => "client_done",
            Message::ClientIdle => "client_idle",
            Message::Probe { .. } => "probe",
            Message::ProbeReply { .. } => "probe_reply",
            Message::Stop => "stop",
            Message::ServerQuiet => "server_quiet",
            Message::Sync { .. } => "sync",
            Message::Subscribe { .. } => "subscribe",
            Message::Subscribed { .. } => "subscribed",
            Message::Unsubscribe { .. } => "unsubscribe",
            Message::Notify { .. } => "notify",
            Message::ClientDoneAck => "client_done_ack",
            Message::ServerDone => "server_done",
            Message::Shutdown => "shutdown",
            Message::ShutdownAck => "shutdown_ack",
            Message::Malloc { .. } => "malloc",
            Message::Lookup { .. } => "lookup",
            Message::AllocReply { .. } => "alloc_reply",
            Message::Coherence { .. } => "consistency",
            Message::ClientLeft { .. } => "client_left",
            Message::Admit { .. } => "admit",
            Message::Admitted { .. } => "admitted",
            Message::ClientLost { .. } => "client_lost",
            Message::ClientForgotten { .. } => "client_forgotten",
            Message::SlotFree { .. } => "slot_free",
            Message::Published { .. } => "published",
            Message::PublishedAck { .. } => "published_ack",
            Message::Fetch { .. } => "fetch",
            Message::Handover { .. } => "handover",
            Message::ChainBegin { .. } => "chain_begin",
            Message::ChainCommit { .. } => "chain_commit",
            Message::Staged { .. } => "staged",
            Message::Replica { .. } => "replica",
            Message::ReplicaAck { .. } => "replica_ack",
            Message::Durable { .. } => "durable",
            Message::ServerLost { .. } => "server_lost",
            Message::LossApplied { .. } => "loss_applied",
            Message::LossSeen { .. } => "loss_seen",
            Message::ClientFinished { .. } => "client_finished",
            Message::Adopted { .. } => "adopted",
            Message::Resubscribe { .. } => "resubscribe",
            Message::Moved { .. } => "moved",
            Message::ClientsSeen { .. } => "clients_seen",
            Message::Drain { .. } => "drain",
            Message::Drained { .. } => "drained",
            Message::Republish { .. } => "republish",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("undecodable header: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    #[error("header has {0} trailing bytes")]
    Trailing(usize),
    #[error("cannot encode header: {0}")]
    Encode(#[from] bincode::error::EncodeError),
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_HEADER>()
}

/// Encodes `msg` into `buf` (which must hold [`MAX_HEADER`] bytes) and returns
/// the encoded length. Uses a caller buffer so the send path does not allocate.
pub fn encode(msg: &Message, buf: &mut [u8; MAX_HEADER]) -> Result<usize, WireError> {
    Ok(bincode::encode_into_slice(msg, buf, config())?)
}

/// Decodes a whole header; trailing bytes are an error (they would mean the
/// sender and receiver disagree on the format).
pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
    let (msg, used) = bincode::decode_from_slice(bytes, config())?;
    if used != bytes.len() {
        return Err(WireError::Trailing(bytes.len() - used));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut buf = [0u8; MAX_HEADER];
        for msg in [
            Message::Relay {
                from: 3,
                to: 9,
                tag: 77,
            },
            Message::ClientDone {
                published: 7,
                received: u64::MAX,
            },
            Message::ClientIdle,
            Message::Probe { wave: 3 },
            Message::ProbeReply {
                wave: 3,
                busy: true,
                sent: 10,
                received: 9,
            },
            Message::Stop,
            Message::ServerQuiet,
            Message::Sync {
                client: 4,
                op: SyncOp::Barrier {
                    id: 1,
                    count: 8,
                    ticket: 5,
                    losses: 0,
                },
            },
            Message::Subscribe {
                chunk: 12,
                client: 3,
                with_data: true,
            },
            Message::Subscribed {
                chunk: 12,
                client: 3,
            },
            Message::Unsubscribe {
                chunk: 12,
                client: 3,
            },
            Message::Notify {
                chunk: 12,
                client: 3,
                version: 99,
                with_data: false,
            },
            Message::ClientDoneAck,
            Message::ServerDone,
            Message::Shutdown,
            Message::ShutdownAck,
            Message::Drain { wave: 3 },
            Message::Drained {
                wave: 3,
                sent: u64::MAX,
                received: 0,
            },
            Message::Malloc {
                chunk: u64::MAX,
                size: 1 << 40,
                client: 3,
                request: u64::MAX,
                protocol: ProtocolId::HomeOnly,
                label: [7; 32],
            },
            Message::Lookup {
                chunk: 42,
                client: 1,
                request: 0,
                wait_ms: 500,
            },
            Message::AllocReply {
                chunk: 7,
                client: 2,
                request: 1 << 40,
                outcome: AllocOutcome::Mismatch {
                    size: 9,
                    protocol: ProtocolId::HomeOnly,
                    label: [0xAB; 32],
                },
                host: None,
            },
            Message::AllocReply {
                chunk: 7,
                client: 2,
                request: 3,
                outcome: AllocOutcome::NotAllocated,
                host: None,
            },
            Message::AllocReply {
                chunk: 0,
                client: 2,
                request: 4,
                outcome: AllocOutcome::Refused,
                host: None,
            },
        ] {
            let n = encode(&msg, &mut buf).unwrap();
            assert_eq!(decode(&buf[..n]).unwrap(), msg);
        }
    }

    #[test]
    fn hostile_bytes_are_errors_not_panics() {
        // Every prefix of a valid header, every single byte, and some noise.
        let mut buf = [0u8; MAX_HEADER];
        let n = encode(
            &Message::Relay {
                from: u32::MAX,
                to: 1,
                tag: u32::MAX,
            },
            &mut buf,
        )
        .unwrap();
        for cut in 0..n {
            assert!(
                decode(&buf[..cut]).is_err(),
                "prefix of {cut} bytes decoded"
            );
        }
        for b in 0..=255u8 {
            let _ = decode(&[b]);
            let _ = decode(&[b, 0xff, 0xff, 0xff, 0xff, 0xff]);
        }
        let mut trailing = buf[..n].to_vec();
        trailing.push(0);
        assert!(matches!(decode(&trailing), Err(WireError::Trailing(1))));
    }

    #[test]
    fn allocation_messages_carry_their_request_and_cut_ones_are_errors() {
        let mut buf = [0u8; MAX_HEADER];
        for msg in [
            Message::Malloc {
                chunk: u64::MAX,
                size: u64::MAX,
                client: u32::MAX,
                request: u64::MAX,
                protocol: ProtocolId::HomeMesi,
                label: [0xff; 32],
            },
            Message::Lookup {
                chunk: u64::MAX,
                client: u32::MAX,
                request: u64::MAX,
                wait_ms: u32::MAX,
            },
            Message::AllocReply {
                chunk: u64::MAX,
                client: u32::MAX,
                request: u64::MAX,
                outcome: AllocOutcome::Allocated {
                    size: u64::MAX,
                    protocol: ProtocolId::HomeOnly,
                    label: [0xff; 32],
                },
                host: Some(SlotPlace {
                    pid: u32::MAX,
                    fd: i32::MIN,
                    segment_len: u64::MAX,
                    offset: u64::MAX,
                    capacity: u64::MAX,
                }),
            },
            Message::Published {
                chunk: u64::MAX,
                client: u32::MAX,
                version: u64::MAX,
                releases: u32::MAX,
            },
            Message::PublishedAck { client: u32::MAX },
            Message::Replica {
                chunk: u64::MAX,
                version: u64::MAX,
                size: u64::MAX,
                protocol: ProtocolId::MesiExclusive,
            },
            Message::ReplicaAck {
                chunk: u64::MAX,
                version: u64::MAX,
            },
            Message::Durable {
                chunk: u64::MAX,
                client: u32::MAX,
                version: u64::MAX,
            },
            Message::Republish {
                chunk: u64::MAX,
                client: u32::MAX,
                version: u64::MAX,
                yielded: true,
            },
        ] {
            let n = encode(&msg, &mut buf).unwrap();
            assert_eq!(decode(&buf[..n]).unwrap(), msg);
            for cut in 0..n {
                assert!(decode(&buf[..cut]).is_err(), "{msg:?} cut to {cut} bytes");
            }
        }
    }

    #[test]
    fn the_longest_fetch_fits_and_a_longer_claim_is_refused() {
        let mut buf = [0u8; MAX_HEADER];
        let longest = Message::Fetch {
            client: u32::MAX,
            chunks: vec![u64::MAX; MAX_FETCH],
        };
        let n = encode(&longest, &mut buf).expect("MAX_FETCH chunks fit a header");
        assert_eq!(decode(&buf[..n]).unwrap(), longest);
        for cut in 0..n {
            assert!(decode(&buf[..cut]).is_err(), "fetch cut to {cut} bytes");
        }
        // A list that claims more entries than a header can hold is an
        // error before anything is allocated for it.
        let head = encode(
            &Message::Fetch {
                client: 1,
                chunks: Vec::new(),
            },
            &mut buf,
        )
        .unwrap();
        let mut hostile = buf[..head - 1].to_vec();
        hostile.extend_from_slice(&[0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert!(decode(&hostile).is_err());
    }
}
