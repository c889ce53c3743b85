//! Chain-atomic releases: a chain's release applied all or nothing, where a
//! run outlives its clients (a service, a run with recovery).
//!
//! A chain's release is one message per chunk, to each chunk's home. A
//! client that dies half way through sending them would leave some chunks
//! at the new version and some at the old. So such a client brackets them:
//! `ChainBegin`, the releases (host-slot chunks send `Staged`: their bytes
//! wait in the slot's next buffer, under the client's write lock), then
//! `ChainCommit`. Every message of a client goes through its own server, in
//! order, so that server is where the bracket is kept: it holds what comes
//! between the two and handles it, in order, when the commit comes. If the
//! client is lost first, the held messages are dropped, its homes revoke its
//! write scopes, and every chunk keeps its last released version; once the
//! commit is here, this server (alive) carries them all to their homes.
//!
//! Why at the client's server rather than at each home: the homes' protocols
//! stay as they are (a held release is a message still on its way), and one
//! place decides, with nothing to agree on. What it does not cover: the
//! client's server dying with a bracket held (its homes' versions would be
//! lost anyway without replicas).

use std::collections::HashMap;

use super::ServerState;
use crate::transport::{Rank, Received, Sender};

/// The most a bracket holds: the largest chain a client brackets, and its
/// messages' headers.
const MAX_HELD: usize = crate::client::MAX_BRACKETED + (16 << 20);

/// A held message: its header and its payload.
type Held = (Vec<u8>, Vec<u8>);

/// The brackets open at one server, by client.
#[derive(Default)]
pub(crate) struct Brackets {
    /// By client: the bytes held, and the messages.
    open: HashMap<Rank, (usize, Vec<Held>)>,
}

impl Brackets {
    /// Whether `client` has a bracket open.
    pub(crate) fn holds(&self, client: Rank) -> bool {
        self.open.contains_key(&client)
    }

    /// Bytes held for `client`.
    fn bytes(&self, client: Rank) -> usize {
        self.open.get(&client).map_or(0, |(bytes, _)| *bytes)
    }
}

impl ServerState<'_> {
    /// `ChainBegin` from our client `client`.
    pub(super) fn bracket_begin(&mut self, client: Rank) {
        if self.brackets.open.insert(client, (0, Vec::new())).is_some() {
            // A client sends no begin inside a bracket: what was held goes
            // with the new one's commit (nothing is lost).
            tracing::warn!(
                "server {}: client {client} opened a chain release inside another",
                self.rank
            );
        }
    }

    /// A message of `m.src` inside its bracket: held. A bracket past
    /// [`MAX_HELD`] is not a release a client makes: the client is
    /// forgotten, as one that died, and what it held is dropped.
    pub(super) fn bracket_hold(&mut self, out: &mut dyn Sender, m: &Received<'_>) {
        let client = m.src;
        if self.brackets.bytes(client) + m.header.len() + m.payload.len() > MAX_HELD {
            tracing::warn!(
                "server {}: client {client} sent more than {MAX_HELD} bytes inside one chain's \
                 release: forgotten",
                self.rank
            );
            self.client_lost(out, client, "it sent too much inside one chain's release");
            return;
        }
        if let Some((bytes, held)) = self.brackets.open.get_mut(&client) {
            *bytes += m.header.len() + m.payload.len();
            held.push((m.header.to_vec(), m.payload.to_vec()));
        }
    }

    /// `ChainCommit` from our client `client`: what it held is handled now,
    /// in order.
    pub(super) fn bracket_commit(&mut self, out: &mut dyn Sender, client: Rank) {
        let Some((_, held)) = self.brackets.open.remove(&client) else {
            tracing::warn!(
                "server {}: chain commit from client {client} with no chain release open: dropped",
                self.rank
            );
            return;
        };
        tracing::debug!(
            "server {}: client {client} committed a chain release of {} messages",
            self.rank,
            held.len()
        );
        for (header, payload) in held {
            let m = Received {
                src: client,
                header: &header,
                payload: &payload,
            };
            self.handle(out, m);
        }
    }

    /// `client` is gone (lost, or done): a bracket it left open is dropped,
    /// so none of that chain's releases is applied.
    pub(super) fn bracket_drop(&mut self, client: Rank) {
        if self.brackets.holds(client) {
            tracing::warn!(
                "server {}: client {client} left in the middle of a chain's release: its {} \
                 bytes of releases are dropped (its RELEASE may have returned), and the chain keeps the \
                 version before it",
                self.rank,
                self.brackets.bytes(client)
            );
            self.brackets.open.remove(&client);
        }
    }
}
