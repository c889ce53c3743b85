//! A chain's release, whole again after a server's loss (a run with
//! replicated homes and recovery).
//!
//! A chain's release is one release per chunk, each to its chunk's home
//! (`server/bracket.rs` makes it all or nothing when its *client* is lost).
//! When a *server* is lost during it, some homes may have applied their
//! chunk's release and others not:
//! - the lost server was the home of some chunks, and died before their
//!   backup held the release (their backup takes them over at the version
//!   before it);
//! - or it was the client's own server, through which every release went:
//!   the homes it had passed them on to applied theirs, the others never
//!   heard of them (the client's write scopes there stay until it says
//!   `LossSeen`, then are revoked).
//!
//! Either way the chain would be torn: part new version, part old, which no
//! scope wrote. So the client keeps the bytes of each release of a chain
//! until that release's `Durable` comes (both servers hold it), and when a
//! loss takes a `Durable` with it, sends the release again as `Republish`
//! through its server, before its `LossSeen` (`client/failover.rs`). The
//! home applies it only where the release cannot have reached it by its
//! first way, and only as the chunk's next version:
//! - **the client still holds the chunk's write scope here**: the release
//!   never came (its server was lost with it); it is handled as the release
//!   itself;
//! - **the chunk was just taken over from the lost server and is sealed**
//!   (no scope or copy of it exists yet, `server/failover.rs`): the backup
//!   held the version before the release; the release becomes the next
//!   version;
//! - otherwise it is dropped: the home applied it already (its version is
//!   past), or another writer's scope began after the revocation.
//!
//! Why this is in time, before anyone reads the chunk: a sealed chunk opens
//! only once every server said its clients saw the loss, and each client's
//! `Republish` goes through its server before its `LossSeen`, on a path
//! that keeps order between two processes; a chunk whose write scope the
//! client holds is revoked by the stand-in's `Moved`, which it sends after
//! that client's `LossSeen`, so after its `Republish`. The writer is sent no
//! `Durable` for it: its RELEASE already returned `ProcessLost` ("may or may
//! not have been published"), and a `Durable` counted for a later release
//! would let that one return before both servers held it.

use super::{ServerState, TellWriter};
use crate::protocol::{mesi, LastRelease};
use crate::transport::{Payload, Received, Sender};
use crate::wire::Message;

impl ServerState<'_> {
    /// `Republish` of `version` of `chunk` by `client` (see the module's
    /// doc), from `m.src`.
    pub(super) fn republish(
        &mut self,
        out: &mut dyn Sender,
        m: Received<'_>,
        src_is_server: bool,
        (chunk, client, version): (u64, u32, u64),
        yielded: bool,
    ) {
        if !self.on_behalf_of(m.src, src_is_server, client) || !self.replicated() {
            tracing::warn!(
                "server {}: dropped a republish of chunk {chunk} from {} for client {client}: \
                 not a client's own, or no replicated run",
                self.rank,
                m.src
            );
            return;
        }
        let home = self.current_home(chunk);
        if home != self.rank {
            if src_is_server {
                tracing::debug!(
                    "server {}: republish of chunk {chunk} forwarded here, its home is {home}: \
                     dropped",
                    self.rank
                );
            } else {
                let msg = Message::Republish {
                    chunk,
                    client,
                    version,
                    yielded,
                };
                self.send(out, home, &msg, Payload::Copy(m.payload));
            }
            return;
        }
        if !self.homes.contains_key(&chunk) || !self.bring_in(chunk) {
            tracing::debug!(
                "server {}: republish of chunk {chunk}, not homed here: dropped",
                self.rank
            );
            return;
        }
        let sealed = self.sealed(chunk);
        let entry = self.homes.get(&chunk).expect("brought in");
        let next = entry.side.version() + 1;
        let writing = entry.side.owner() == Some(client) || entry.side.exclusive() == Some(client);
        let fresh = sealed && entry.side.owner().is_none() && entry.side.idle();
        if version != next || !(writing || fresh) {
            tracing::debug!(
                "server {}: republish of chunk {chunk} version {version} by client {client}: \
                 the home is at version {} (applied already, or written since): dropped",
                self.rank,
                next - 1
            );
            return;
        }
        if m.payload.len() != entry.side.data().len() {
            tracing::warn!(
                "server {}: republish of chunk {chunk} by client {client}: {} bytes for a chunk \
                 of {}: dropped",
                self.rank,
                m.payload.len(),
                entry.side.data().len()
            );
            return;
        }
        tracing::info!(
            "server {}: chunk {chunk}: client {client}'s release of version {version}, which a \
             lost server kept from this home, applied",
            self.rank
        );
        if writing {
            let op = if yielded {
                mesi::ToHome::ReleaseYield { version }
            } else {
                mesi::ToHome::Release { version }
            };
            let op = op.into();
            let src = (m.src, src_is_server);
            self.home_step(
                out,
                src,
                (chunk, client),
                op,
                m.payload,
                TellWriter::Nothing,
            );
            return;
        }
        let protocol = entry.protocol;
        let last = LastRelease {
            version,
            data: m.payload.into(),
        };
        let Some(side) = protocol.handlers().and_then(|h| h.resume_home(last)) else {
            return;
        };
        let entry = self.homes.get_mut(&chunk).expect("brought in");
        entry.side = side;
        let subscribed = !entry.subscribers.is_empty();
        let data = entry.side.data().clone();
        self.replicate(out, chunk);
        self.accounts.count_applied(client);
        if subscribed {
            self.send_or_hold(out, chunk, super::replicas::Held::Notify { version, data });
        }
        self.make_room(chunk);
    }
}
