//! Notifications held back for a subscriber that is behind.
//!
//! A home tells every subscriber of every release, and a subscriber takes
//! them in only as its process polls. A subscriber that releases slower
//! than its chunks are written (a busy process, a handler that runs at its
//! next wait) would otherwise leave behind it, in its server's send queue,
//! one message per release: found by the soak, where a server grew by 20 MB
//! a second under 14 clients that each released a 16 KiB chunk watched by
//! a neighbour.
//!
//! So a server whose transport still holds unsent messages for one of its
//! clients ([`Sender::backlog`]) does not queue a notification for it: it
//! keeps the newest per (client, chunk), replacing an older one, and sends
//! it once the backlog has cleared. A handler never sees a chunk's version
//! go back, and notifications of a chunk already merge at the client while
//! the handler waits (README, "publish-subscribe"): merging them earlier,
//! at the server, changes nothing a program may count on, and the memory a
//! slow subscriber costs is one version per chunk it watches, not one per
//! release. The quiescence detection counts a notification when it leaves,
//! and a server holding one reports itself busy, so a run never ends with a
//! notification held.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::ServerState;
use crate::transport::{Payload, Rank, Sender};
use crate::wire::Message;

/// A held notification: its version, whether it carries data, the bytes.
type Notice = (u64, bool, Option<Arc<[u8]>>);

/// The held notifications by (client, chunk); and how many notifications
/// were held back in all.
#[derive(Default)]
pub(super) struct Held(BTreeMap<(Rank, u64), Notice>, u64);

impl Held {
    pub(super) fn any(&self) -> bool {
        !self.0.is_empty()
    }

    /// Notifications held back since the server started.
    #[cfg(any(test, feature = "simulator"))]
    pub(super) fn count(&self) -> u64 {
        self.1
    }
}

impl ServerState<'_> {
    /// Where a message for `client` goes from here.
    fn hop_to(&self, client: Rank) -> Rank {
        if self.is_my_client(client) {
            client
        } else {
            self.serving(client)
        }
    }

    /// Holds `msg` when it is a chunk's notification for `client` and the
    /// next hop to it (the client, or its server) is behind, or one of that
    /// chunk is held already (so that the versions it is told stay in
    /// order). Returns whether it did.
    pub(super) fn hold_notification(
        &mut self,
        out: &mut dyn Sender,
        (client, hop): (Rank, Rank),
        msg: &Message,
        payload: &Payload<'_>,
    ) -> bool {
        let Message::Notify {
            chunk,
            version,
            with_data,
            ..
        } = *msg
        else {
            return false;
        };
        let key = (client, chunk);
        if !self.held.0.contains_key(&key) && !out.backlog(hop) {
            return false;
        }
        self.held.1 += 1;
        let bytes = match payload {
            Payload::Shared(d) => Some(Arc::clone(d)),
            Payload::Copy(b) if with_data => Some(Arc::from(*b)),
            _ => None,
        };
        // The home counted every notification it sent; one merged into
        // another here never arrives, and counts as dropped.
        let newer = self.held.0.get(&key).is_none_or(|&(v, _, _)| version > v);
        if newer {
            if self
                .held
                .0
                .insert(key, (version, with_data, bytes))
                .is_some()
            {
                self.accounts.count_dropped();
            }
        } else {
            self.accounts.count_dropped();
        }
        self.accounts.holding(true);
        true
    }

    /// Drops the notifications held for `client`, which is gone: the queue
    /// they wait behind drains no more, and a server holding one stays
    /// busy for ever (the simulator found a run with recovery that never
    /// ended, its lost client's notification held).
    pub(super) fn drop_held_for(&mut self, client: Rank) {
        let before = self.held.0.len();
        self.held.0.retain(|&(c, _), _| c != client);
        for _ in self.held.0.len()..before {
            self.accounts.count_dropped();
        }
        self.accounts.holding(self.held.any());
    }

    /// Sends the held notifications whose next hop has caught up (after
    /// each poll, while any is held). One whose client left or unsubscribed
    /// meanwhile is dropped: it never arrives.
    pub(super) fn send_held(&mut self, out: &mut dyn Sender) {
        let ready: Vec<(Rank, u64)> = (self.held.0.keys())
            .filter(|&&(client, _)| !out.backlog(self.hop_to(client)))
            .copied()
            .collect();
        for key in ready {
            let (client, chunk) = key;
            let Some((version, with_data, bytes)) = self.held.0.remove(&key) else {
                continue;
            };
            // (A home elsewhere decided when it sent it.)
            let subscribed = match self.homes.get(&chunk) {
                Some(e) => e.subscribers.contains_key(&client),
                None => true,
            };
            let ours = self.is_my_client(client);
            if !subscribed || (ours && self.client_done[client as usize]) {
                self.accounts.count_dropped();
                continue;
            }
            let msg = Message::Notify {
                chunk,
                client,
                version,
                with_data,
            };
            let payload = match &bytes {
                Some(d) => Payload::Shared(d),
                None => Payload::None,
            };
            if ours {
                self.accounts.count_delivered(client);
            }
            self.send(out, self.hop_to(client), &msg, payload);
        }
        self.accounts.holding(self.held.any());
    }
}
