//! Moving messages between the processes of a run.
//!
//! The protocol code talks to a [`Transport`] and never sees libfabric: the
//! [`fabric`] implementation drives a libfabric reliable-datagram endpoint, the
//! [`mem`] implementation moves messages between endpoints of one process and
//! can delay and reorder them under a seed, for deterministic protocol tests.
//!
//! A message is a small `header` (the protocol's encoded header, at most
//! [`MAX_HEADER`] bytes) followed by a `payload` of any size. Payload bytes are
//! never serialized: small ones ride in the same packet as the header, large
//! ones move with the provider's own rendezvous straight into a receive buffer.

use std::fmt;
use std::sync::Arc;

pub mod doorbell;
pub mod fabric;
pub mod mem;
pub(crate) mod sequence;
mod shm_files;
pub mod wakeup;

/// A process of the run: index in the address table, 0 is the seed server.
pub type Rank = u32;

/// The largest header a message may carry.
pub const MAX_HEADER: usize = 1024;

/// The libfabric providers SAT knows how to drive over `FI_EP_RDM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bincode::Encode, bincode::Decode)]
pub enum Provider {
    /// Shared memory between processes of one host.
    Shm,
    /// TCP sockets through the `ofi_rxm` utility provider (`tcp;ofi_rxm`).
    Tcp,
    /// InfiniBand / RoCE through `ofi_rxm` (`verbs;ofi_rxm`); needs an RDMA device.
    Verbs,
}

impl Provider {
    /// The name a user writes (`--provider`, `SAT_PROVIDER`).
    pub fn name(self) -> &'static str {
        match self {
            Provider::Shm => "shm",
            Provider::Tcp => "tcp",
            Provider::Verbs => "verbs",
        }
    }

    /// The provider string handed to `fi_getinfo`.
    pub fn fabric_name(self) -> &'static str {
        match self {
            Provider::Shm => "shm",
            Provider::Tcp => "tcp;ofi_rxm",
            Provider::Verbs => "verbs;ofi_rxm",
        }
    }

    /// Parse a user-given provider name; the error says which names exist.
    pub fn parse(name: &str) -> Result<Provider, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "shm" => Ok(Provider::Shm),
            "tcp" | "tcp;ofi_rxm" => Ok(Provider::Tcp),
            "verbs" | "verbs;ofi_rxm" => Ok(Provider::Verbs),
            other => Err(format!(
                "unknown provider '{other}': choose one of shm, tcp, verbs"
            )),
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a sender hands over as the payload of a message.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// No payload.
    None,
    /// Bytes copied by the transport before `send` returns.
    Copy(&'a [u8]),
    /// Bytes shared with the transport: a large one is sent without a copy and
    /// the transport keeps its reference until the provider is done with it.
    Shared(&'a Arc<[u8]>),
}

impl Payload<'_> {
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Copy(b) => b.len(),
            Payload::Shared(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Payload::None => &[],
            Payload::Copy(b) => b,
            Payload::Shared(b) => b,
        }
    }
}

/// One delivered message, valid for the duration of the delivery callback.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// The rank that sent it (established by the transport, not by the header).
    pub src: Rank,
    pub header: &'a [u8],
    pub payload: &'a [u8],
}

/// Errors of the message layer.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("libfabric provider '{provider}' is not available on this machine: {reason}")]
    ProviderUnavailable { provider: Provider, reason: String },
    #[error("libfabric call {call} failed: {message} (error {code})")]
    Fabric {
        call: &'static str,
        code: i32,
        message: String,
    },
    #[error("rank {dest} is not part of this run of {size} processes")]
    UnknownRank { dest: Rank, size: u32 },
    #[error("rank {dest} has no endpoint here: it is a client slot of the service with no client attached")]
    NotAttached { dest: Rank },
    #[error("this transport's membership is fixed at the bootstrap: {0}")]
    FixedMembership(&'static str),
    #[error("header of {len} bytes exceeds the {MAX_HEADER}-byte limit")]
    HeaderTooLarge { len: usize },
    #[error("payload of {len} bytes exceeds the transport's limit; split it")]
    PayloadTooLarge { len: usize },
    #[error("malformed endpoint address from rank {rank}: {reason}")]
    BadAddress { rank: Rank, reason: String },
    #[error("peer rank {rank} is unreachable: {reason}")]
    PeerLost { rank: Rank, reason: String },
}

/// The sending half of a transport, lent to the delivery callback so that a
/// handler can answer or forward a message while it still borrows its bytes
/// (a server forwards a request to the home with no copy of the payload).
pub trait Sender {
    /// Queue one message to `dest`. When this returns, `header` and a
    /// `Payload::Copy` may be reused; a `Payload::Shared` is kept alive by
    /// the transport until the provider no longer needs it.
    fn send(
        &mut self,
        dest: Rank,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<(), TransportError>;

    /// Whether messages to `dest` wait in this sender, not yet handed on
    /// (the peer is behind in taking them in). A server then holds back
    /// what it may merge (`server/notices.rs`). False by default.
    fn backlog(&self, _dest: Rank) -> bool {
        false
    }
}

/// A reliable, per-pair-ordered message service between the ranks of a run.
///
/// Guarantees every implementation gives:
/// - messages from one sender to one receiver are delivered in send order
///   (libfabric: `FI_ORDER_SAS`, requested and checked at endpoint creation);
/// - nothing on the steady-state path allocates per message;
/// - a malformed packet from a peer is logged and dropped, never a panic.
pub trait Transport: Sender + Send {
    /// This process's rank.
    fn rank(&self) -> Rank;

    /// The number of ranks reachable through this transport.
    fn size(&self) -> u32;

    /// Make progress and deliver the messages that have arrived, in order per
    /// sender, to `on_message`, which may send through the lent [`Sender`].
    /// Returns the number delivered (0 when idle).
    fn poll(
        &mut self,
        on_message: &mut dyn FnMut(&mut dyn Sender, Received<'_>),
    ) -> Result<usize, TransportError>;

    /// The messages this endpoint has sent so far (those `send` accepted):
    /// what the tests count to check a protocol path's message budget.
    fn messages_sent(&self) -> u64;

    /// Whether every send queued so far has left this process's buffers
    /// (checked before shutdown so that closing early loses no message).
    fn sends_drained(&mut self) -> Result<bool, TransportError>;

    /// What a thread that polled and found nothing may sleep on (past its
    /// spin, with the endpoint held): the endpoint's wait descriptor where
    /// the provider has one and nothing is pending (`wakeup.rs`).
    fn wakeup(&mut self) -> wakeup::Wakeup {
        wakeup::Wakeup::Usual
    }

    /// Whether sends are queued in this process, waiting for room in the
    /// provider or in a large-message window: only polling posts them, so a
    /// waiting process must not sleep meanwhile (a 64 MiB release of 64 KiB
    /// chunks is 1,024 large sends, four in flight at a time).
    fn sends_queued(&self) -> bool {
        false
    }

    /// Posts to `rank`'s inbox that `chunk`'s host slot holds a newer
    /// version, and wakes `rank` (`segment/inbox.rs`): how a releaser on
    /// one host tells a subscriber, with no message. False when this
    /// transport reaches no inbox of `rank`.
    fn post_hint(&mut self, rank: Rank, chunk: u64) -> bool {
        let _ = (rank, chunk);
        false
    }

    /// Whether [`Transport::post_hint`] reaches `rank`.
    fn reaches_inbox(&self, rank: Rank) -> bool {
        let _ = rank;
        false
    }

    /// What was posted to this process's inbox since the last call: None
    /// when nothing was (or it has no inbox).
    fn take_hints(&mut self) -> Option<crate::segment::inbox::Taken> {
        None
    }

    /// Gives `rank` (a service's client slot) the endpoint `address`, which
    /// replaces the slot's previous one if any. Only transports whose
    /// membership can change (the service mode) support it.
    fn add_peer(&mut self, rank: Rank, address: &[u8]) -> Result<(), TransportError> {
        let _ = (rank, address);
        Err(TransportError::FixedMembership("a peer cannot join"))
    }

    /// Forgets the endpoint of `rank`: sends to it fail until
    /// [`Transport::add_peer`] gives it a new one; queued sends are dropped.
    fn remove_peer(&mut self, rank: Rank) -> Result<(), TransportError> {
        let _ = rank;
        Err(TransportError::FixedMembership("a peer cannot leave"))
    }

    /// The rank whose endpoint `address` is entered as, if any (an address
    /// that is not one of this transport's format is no rank's).
    fn rank_of_address(&self, address: &[u8]) -> Option<Rank> {
        let _ = address;
        None
    }
}
