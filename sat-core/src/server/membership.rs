//! The server's part in a service's membership: admitting a client into
//! its slot, and forgetting it everywhere when it detaches or dies, before
//! the slot can take another process ([`crate::service`] has the whole
//! exchange).
//!
//! Why a slot is freed only once every server confirms: other servers may
//! still have answers for the old client on their way through its server.
//! `ClientForgotten` travels after them on each server's path, so once all
//! have arrived nothing addressed to the old client can reach a newcomer.

use std::collections::HashMap;

use super::{ServerState, SEED};
use crate::error::{SatError, SatResult};
use crate::service::desk::{Desk, DeskAction};
use crate::transport::{Payload, Rank, Sender, Transport, TransportError};
use crate::wire::Message;

/// What a server of a service keeps about clients coming and going.
pub(crate) struct ServiceSide {
    /// Clients of ours being forgotten: how many servers have yet to confirm.
    forgetting: HashMap<Rank, usize>,
    /// Admissions received while polling, applied after the poll (entering
    /// an address needs the whole transport, not the lent sender).
    joining: Vec<(Rank, Vec<u8>)>,
    /// Clients of ours whose endpoint is dead: their address goes.
    leaving: Vec<Rank>,
    /// Clients the transport reported unreachable, handled after the poll.
    unreachable: Vec<Rank>,
    /// Detaching clients of ours that get their `ClientDoneAck` once every
    /// server has forgotten them.
    acks_due: std::collections::HashSet<Rank>,
    /// The seed's admission desk (None on the other servers).
    desk: Option<Desk>,
}

impl ServiceSide {
    /// The service stops: the seed's desk tells its attached processes
    /// ([`Desk::tell_stopped`]); other servers have no desk.
    pub(crate) fn tell_stopped(&mut self, deadline: std::time::Instant) {
        if let Some(desk) = self.desk.as_mut() {
            desk.tell_stopped(deadline);
        }
    }

    pub(crate) fn new(desk: Option<Desk>) -> ServiceSide {
        ServiceSide {
            forgetting: HashMap::new(),
            joining: Vec::new(),
            leaving: Vec::new(),
            unreachable: Vec::new(),
            acks_due: Default::default(),
            desk,
        }
    }
}

impl ServerState<'_> {
    fn service_mut(&mut self) -> &mut ServiceSide {
        self.service
            .as_mut()
            .expect("membership messages are accepted in service mode only")
    }

    /// `Admit` from the seed: `client`'s endpoint is entered after the poll.
    pub(super) fn admit(&mut self, client: Rank, address: &[u8]) {
        if self.service.is_none() {
            tracing::warn!("server {}: admit outside a service dropped", self.rank);
            return;
        }
        self.service_mut().joining.push((client, address.to_vec()));
    }

    /// Seed: the server of `client` answered an admission.
    pub(super) fn admitted(&mut self, client: Rank, refused: String) {
        let outcome = if refused.is_empty() {
            Ok(())
        } else {
            Err(refused)
        };
        if let Some(desk) = self.service.as_mut().and_then(|s| s.desk.as_mut()) {
            desk.admitted(client, outcome);
        }
    }

    /// The seed says `client`'s control connection closed (a service), or
    /// its watch lost it (a run with recovery): unless it has finished
    /// already, it died or stopped answering, and every server forgets it.
    /// `why` is for the operator's log.
    pub(super) fn client_lost(&mut self, out: &mut dyn Sender, client: Rank, why: &str) {
        if !self.outlives_clients() || self.client_done[client as usize] {
            return;
        }
        if self.service.is_some() {
            tracing::warn!(
                "server {}: client {client} went away without detaching ({why}); forgetting it",
                self.rank
            );
        } else {
            tracing::warn!(
                "server {}: client {client} was lost ({why}); the run goes on without it",
                self.rank
            );
        }
        self.bracket_drop(client);
        self.client_done[client as usize] = true;
        self.drop_held_for(client);
        // It will not say it saw a server's loss (`server/failover.rs`).
        self.unfence(out, client);
        // First the departure, which may tell subscribers of a release it
        // made: a wave that completes below must count those notifications.
        self.announce_departure(out, client, true);
        if self.service.is_none() {
            // A run ends without its `ClientDone`.
            self.clients_left -= 1;
            self.accounts.client_lost(client, true);
            self.report_wave_if_complete(out);
        }
        match (self.service.as_mut(), self.recovery.as_mut()) {
            (Some(side), _) => side.leaving.push(client),
            (None, Some(r)) => r.leaving.push(client),
            (None, None) => {}
        }
    }

    /// Starts waiting for every other server to confirm it forgot `client`.
    pub(super) fn await_forgotten(&mut self, out: &mut dyn Sender, client: Rank) {
        let others = self.servers.len() - 1;
        if others == 0 {
            self.forgotten_everywhere(out, client);
        } else {
            self.service_mut().forgetting.insert(client, others);
        }
    }

    /// One server confirmed it forgot `client`.
    /// Comes off the wire: outside a service (where nothing is being
    /// forgotten) or for a client not being forgotten it is dropped.
    pub(super) fn forgotten_by(&mut self, out: &mut dyn Sender, client: Rank) {
        let waiting = self.service.as_mut().map(|s| &mut s.forgetting);
        let Some(left) = waiting.and_then(|w| w.get_mut(&client)) else {
            tracing::warn!(
                "server {}: unexpected confirmation about client {client}: dropped",
                self.rank
            );
            return;
        };
        *left -= 1;
        if *left == 0 {
            self.service_mut().forgetting.remove(&client);
            self.forgotten_everywhere(out, client);
        }
    }

    /// Holds back the acknowledgement of `client`'s detach until every
    /// server has forgotten it.
    pub(super) fn ack_when_forgotten(&mut self, client: Rank) {
        self.service_mut().acks_due.insert(client);
    }

    fn forgotten_everywhere(&mut self, out: &mut dyn Sender, client: Rank) {
        tracing::debug!("server {}: client {client} forgotten everywhere", self.rank);
        let detached = self.service_mut().acks_due.remove(&client);
        if detached {
            self.send(out, client, &Message::ClientDoneAck, Payload::None);
        }
        if self.rank == SEED {
            self.slot_free(client, !detached);
        } else {
            // The payload says the client did not detach (it was lost).
            let lost: &[u8] = if detached { &[] } else { &[1] };
            self.send(
                out,
                SEED,
                &Message::SlotFree { client },
                Payload::Copy(lost),
            );
        }
    }

    /// Seed: every server has forgotten `client`, which detached or, when
    /// `lost`, went away or could not be reached.
    pub(super) fn slot_free(&mut self, client: Rank, lost: bool) {
        if let Some(desk) = self.service.as_mut().and_then(|s| s.desk.as_mut()) {
            desk.slot_forgotten(client, lost);
        }
    }

    /// A transport error while polling. A service outlives its clients: an
    /// unreachable client is forgotten; anything else ends the server.
    ///
    /// Outside a service a lost client ends the server too: a run's
    /// membership is fixed, so the run could not end without that client's
    /// `ClientDone`, homes may wait for its acknowledgements, and a client
    /// that is alive but lost a message would wait for it forever. Ending
    /// with the error lets `satrun` (or the job launcher) name the failure
    /// and stop the run, rather than leave it hanging or finish it without
    /// one of its processes.
    ///
    /// A run with recovery outlives its clients too: there an unreachable
    /// client is lost.
    pub(super) fn survive(&mut self, e: TransportError) -> SatResult<()> {
        let replaceable = match &e {
            TransportError::PeerLost { rank, .. } => {
                self.topology.get(*rank).is_some_and(|e| e.is_server())
                    && self.recovery.is_some()
                    && self.cannot_fail_over(*rank).is_none()
            }
            _ => false,
        };
        match (&mut self.service, &mut self.recovery, &e) {
            (Some(side), _, TransportError::PeerLost { rank, reason })
                if !self.topology.is_server(*rank) =>
            {
                tracing::warn!("server {}: client {rank} unreachable: {reason}", self.rank);
                side.unreachable.push(*rank);
                Ok(())
            }
            (None, Some(r), TransportError::PeerLost { rank, reason })
                if !self.topology.is_server(*rank) =>
            {
                tracing::warn!("server {}: client {rank} unreachable: {reason}", self.rank);
                r.unreachable.push(*rank);
                Ok(())
            }
            (None, Some(_), TransportError::PeerLost { rank, reason }) if replaceable => {
                // Replicated homes: the seed's watch hears of the loss too,
                // and every server applies it when the seed says so
                // (`server/failover.rs`); till then, what is sent to it is
                // lost with it.
                tracing::warn!(
                    "server {}: server {rank} unreachable ({reason}): waiting for the seed's \
                     word on its loss",
                    self.rank
                );
                Ok(())
            }
            (None, Some(r), TransportError::PeerLost { rank, reason }) => {
                // The seed tells every process why the run stops.
                Err(r.server_lost(*rank, reason))
            }
            _ => Err(SatError::from(e)),
        }
    }

    /// Removes `client`'s endpoint from the transport.
    fn forget_endpoint(&self, transport: &mut dyn Transport, client: Rank) {
        if let Err(e) = transport.remove_peer(client) {
            tracing::warn!(
                "server {}: could not forget the endpoint of {client}: {e}",
                self.rank
            );
        }
    }

    /// After each poll: the desk's requests, then the endpoints to remove,
    /// then those to enter.
    pub(super) fn apply_membership(&mut self, transport: &mut dyn Transport) {
        while let Some(action) = self
            .service
            .as_mut()
            .and_then(|s| s.desk.as_mut())
            .and_then(Desk::next_action)
        {
            match action {
                DeskAction::Admit { client, address } => {
                    let server = self.topology.server_of(client);
                    if server == self.rank {
                        self.service_mut().joining.push((client, address));
                    } else {
                        let msg = Message::Admit { client };
                        self.send(transport, server, &msg, Payload::Copy(&address));
                    }
                }
                DeskAction::Lost { client } => {
                    let server = self.topology.server_of(client);
                    let why = "its control connection closed";
                    if server == self.rank {
                        self.client_lost(transport, client, why);
                    } else {
                        self.send(
                            transport,
                            server,
                            &Message::ClientLost { client },
                            Payload::Copy(why.as_bytes()),
                        );
                    }
                }
            }
        }
        for client in std::mem::take(&mut self.service_mut().unreachable) {
            if self.is_my_client(client) {
                self.client_lost(transport, client, "the transport could not reach it");
            }
        }
        // Those that left first: a joiner's endpoint may be where a client
        // that has just left had its own (over tcp, the port the system
        // gives again), and must not be taken for that client's.
        for client in std::mem::take(&mut self.service_mut().leaving) {
            self.forget_endpoint(transport, client);
        }
        for (client, address) in std::mem::take(&mut self.service_mut().joining) {
            // The endpoint of a client that detached stays entered (its
            // acknowledgement went to it) until its slot is taken again.
            // A joiner at the same address shows that endpoint closed (over
            // tcp the system gave its port again; over shm its pid): it is
            // forgotten now. A client still attached keeps its own, and the
            // joiner is refused (`transport/fabric.rs`).
            if let Some(gone) = transport.rank_of_address(&address).filter(|&other| {
                other != client
                    && !self.topology.is_server(other)
                    && self.client_done.get(other as usize) == Some(&true)
            }) {
                tracing::debug!(
                    "server {}: client {client} joins at the endpoint client {gone} had before it \
                     left: forgotten",
                    self.rank
                );
                self.forget_endpoint(transport, gone);
            }
            let refused = match transport.add_peer(client, &address) {
                Ok(()) => {
                    self.client_done[client as usize] = false;
                    tracing::debug!("server {}: client {client} attached", self.rank);
                    String::new()
                }
                Err(e) => {
                    tracing::warn!("server {}: client {client} refused: {e}", self.rank);
                    e.to_string()
                }
            };
            if self.rank == SEED {
                self.admitted(client, refused);
            } else {
                let msg = Message::Admitted { client, refused };
                self.send(transport, SEED, &msg, Payload::None);
            }
        }
    }
}
