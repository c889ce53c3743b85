//! An adaptive chunk's protocol switch, as this process carries it out
//! (the home's part and why the whole is safe: `server/switch.rs`).
//!
//! When the home's [`CoherenceOp::Switch`] comes:
//! - with no scope open here on the chunk, the process drops its copy and
//!   its protocol state, takes the new protocol's (holding no copy), and
//!   acknowledges. A request it had sent and not had answered was held by
//!   the home and will not be granted: it is asked again, under the new
//!   protocol, right after the acknowledgement, and the thread waiting for
//!   it goes on waiting for that grant.
//! - with a scope open (a read of a valid copy: the home grants nothing
//!   while a write scope is open), the switch waits for the last scope to
//!   end. Meanwhile other threads may join the open read scopes, but a
//!   thread that would have to ask the home waits for the switch (its
//!   request, in the old protocol, would be held and never granted).
//!
//! Every message the process sends about the chunk carries its epoch; a
//! message of the home in another epoch than the process's is dropped (a
//! duplicate `Switch` included).

use super::Store;
use crate::chunk::ChunkId;
use crate::protocol::adaptive::TARGETS;
use crate::protocol::{Acquire, ProtocolId};
use crate::transport::{Payload, Rank, Sender, MAX_HEADER};
use crate::wire::{self, CoherenceOp, Message};

/// A `Switch` of `chunk` to `protocol` in `epoch` from its home.
pub(super) fn on_switch(
    to: (Rank, Rank),
    store: &mut Store,
    out: &mut dyn Sender,
    chunk: ChunkId,
    epoch: u32,
    protocol: ProtocolId,
) {
    let Some(c) = store.get_mut(chunk) else {
        tracing::warn!("dropped a switch of chunk {chunk}, unknown here");
        return;
    };
    let passed = epoch <= c.epoch || c.switch_to.is_some_and(|(e, _)| e >= epoch);
    if passed {
        tracing::debug!(
            "chunk {chunk}: switch to epoch {epoch} dropped: this process is in epoch {}",
            c.epoch
        );
        return;
    }
    if !TARGETS.contains(&protocol) || c.host.is_some() {
        tracing::warn!(
            "chunk {chunk}: dropped a switch to {protocol:?}: not a protocol an adaptive chunk \
             moves to, or the chunk is in a host slot"
        );
        return;
    }
    c.switch_to = Some((epoch, protocol));
    apply_pending(to, store, out, chunk);
}

/// Applies `chunk`'s pending switch once no scope is open on it here, and
/// asks again for what was asked before it. A message that cannot leave
/// changes nothing and is tried again at the next poll ([`retry`]): the
/// home waits for the acknowledgement, and the thread that asked for the
/// grant.
pub(super) fn apply_pending(
    to: (Rank, Rank),
    store: &mut Store,
    out: &mut dyn Sender,
    chunk: ChunkId,
) {
    let Some(c) = store.get_mut(chunk) else {
        return;
    };
    if let Some((epoch, protocol)) = c.switch_to.filter(|_| !c.side.in_scope()) {
        if send(to, out, chunk, CoherenceOp::SwitchAck, epoch).is_err() {
            store.switching.insert(chunk);
            return;
        }
        let asking = if c.side.waiting() { c.asking } else { None };
        tracing::debug!(
            "[adaptive] chunk {chunk}: {} -> {} (epoch {epoch}){}",
            c.protocol.short_name(),
            protocol.short_name(),
            if asking.is_some() {
                ", asking again"
            } else {
                ""
            }
        );
        c.switch_to = None;
        c.side = protocol.consistency().new_client(c.size);
        c.protocol = protocol;
        c.epoch = epoch;
        c.reask = asking;
        store.forget_version(chunk);
        store.switches += 1;
    }
    let c = store.get_mut(chunk).expect("known");
    if let Some(access) = c.reask {
        let before = c.side.snapshot();
        match c.side.acquire(access) {
            Ok(Acquire::Request(req)) => {
                if send(to, out, chunk, req.into(), c.epoch).is_err() {
                    c.side = before;
                    store.switching.insert(chunk);
                    return;
                }
            }
            // A new protocol holds no copy, so this is not expected; the
            // waiting thread counts grants, and this one needs no message.
            Ok(Acquire::Hit) => c.grants += 1,
            Err(e) => tracing::warn!("chunk {chunk}: cannot ask again after the switch: {e}"),
        }
        c.reask = None;
    }
    if c.switch_to.is_none() {
        store.switching.remove(&chunk);
    }
}

/// Tries again the switches whose messages could not leave.
pub(super) fn retry(to: (Rank, Rank), store: &mut Store, out: &mut dyn Sender) {
    if store.switching.is_empty() {
        return;
    }
    let chunks: Vec<ChunkId> = store.switching.iter().copied().collect();
    for chunk in chunks {
        apply_pending(to, store, out, chunk);
    }
}

/// Sends `op` about `chunk` in `epoch` to the home, through the server.
fn send(
    to: (Rank, Rank),
    out: &mut dyn Sender,
    chunk: ChunkId,
    op: CoherenceOp,
    epoch: u32,
) -> Result<(), crate::transport::TransportError> {
    let msg = Message::Coherence {
        chunk,
        client: to.0,
        op,
        epoch,
        after_barrier: false,
    };
    let mut header = [0u8; MAX_HEADER];
    let n = wire::encode(&msg, &mut header).expect("coherence headers fit");
    out.send(to.1, &header[..n], Payload::None)
        .inspect_err(|e| {
            tracing::warn!(
                "chunk {chunk}: could not send {} to the home ({e}); tried again at the next poll",
                op.name()
            )
        })
}
