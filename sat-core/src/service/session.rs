//! The client side of the service mode: attach to a running service, use
//! the S-DSM through a [`Client`], detach.

use std::net::{TcpStream, ToSocketAddrs};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::desk::{
    recv_by, FromDesk, ToDesk, Unread, ADMISSION_TIMEOUT, HELLO_WAIT, MAX_FRAME, MAX_UNPROVEN,
};
use crate::auth::{self, Handshake, Refusal, ServiceAddress, Side};
use crate::bootstrap::seed::send;
use crate::bootstrap::watch::{Fatal, PeerWatch};
use crate::client::Client;
use crate::error::{SatError, SatResult};
use crate::observe;
use crate::transport::fabric::{FabricEndpoint, FabricOptions};
use crate::transport::Provider;
use crate::wire::WIRE_VERSION;

/// How long a detach waits for the server's acknowledgement.
const DETACH_TIMEOUT: Duration = Duration::from_secs(30);

/// A process attached to a service: a [`Client`] (through `Deref`) in one
/// of the service's client slots, until [`Session::detach`] or drop.
///
/// Detaching releases any scope still open (with a warning), waits until
/// the servers have taken in every release, closes the endpoint and gives
/// the slot back. Dropping a session detaches too; call `detach` to see
/// its errors.
pub struct Session {
    client: Arc<Client>,
    stop: Arc<AtomicBool>,
    progress: Option<JoinHandle<()>>,
    /// Kept open while attached: its closing is how the service learns
    /// that this process is gone, whichever way it goes.
    control: Option<PeerWatch>,
    address: String,
}

/// Attaches this process to the service at `address` and returns its
/// session. `address` is the service's connection string,
/// `sat://SECRET@host:port`, the one line of the address file that
/// `satrun --serve` writes; a plain `host:port` takes the secret from
/// `SAT_SECRET`. The process proves it holds the secret without sending it
/// ([`crate::auth`]), and checks that the service holds it too; a service
/// refuses a process with no secret or a wrong one before it gets a slot.
///
/// The calling thread becomes the client's role thread: handlers of
/// subscriptions run there, during its waits (see [`Client::subscribe`]).
pub fn connect(address: &str) -> SatResult<Session> {
    // The attach is SAT's time in the statistics, as a run's bootstrap is.
    let began = Instant::now();
    observe::init();
    crate::settings::check()?;
    crate::protocol::advice::check()?;
    let parsed = ServiceAddress::parse(address)?;
    // From here on, `address` names the service without its secret.
    let address = parsed.host_port.as_str();
    let secret = parsed.secret.as_ref();
    let deadline = Instant::now() + ADMISSION_TIMEOUT;
    let unreachable = |e: std::io::Error| {
        SatError::Bootstrap(format!(
            "cannot reach the SAT service at {address}: {e}; is `satrun --serve` running there?"
        ))
    };
    let target = address
        .to_socket_addrs()
        .map_err(|e| {
            SatError::Usage(format!(
                "'{address}' is not a service address (sat://SECRET@host:port, or host:port): {e}"
            ))
        })?
        .next()
        .ok_or_else(|| SatError::Usage(format!("'{address}' resolves to no address")))?;
    let mut control =
        TcpStream::connect_timeout(&target, Duration::from_secs(10)).map_err(unreachable)?;
    // Every service has a secret: without one, nothing could check that
    // the process at the address is the service, and no service admits us.
    // Said once connected (an address with nothing there says so first),
    // before this process tells whatever listens there its pid or endpoint.
    if secret.is_none() {
        return Err(SatError::Bootstrap(format!(
            "cannot attach to the SAT service at {address}: a service requires a secret and \
             none was given: use the connection string of the service's address file \
             (sat://SECRET@host:port), or set {}",
            auth::SECRET_VAR
        )));
    }
    let _ = control.set_nodelay(true);
    let local_ip = control.local_addr().map_err(unreachable)?.ip();
    let lost = |error: std::io::Error| cut_off(address, Unread::Io { error });
    let hear = |control: &mut TcpStream| {
        recv_by::<FromDesk>(control, deadline, MAX_FRAME).map_err(|e| cut_off(address, e))
    };
    let handshake = Handshake::start(secret, Side::Joiner)?;
    send(
        &mut control,
        &ToDesk::Hello {
            wire_version: WIRE_VERSION,
            pid: claimed_pid(),
            host: crate::os::hostname(),
            nonce: handshake.token(),
        },
    )
    .map_err(lost)?;
    let (theirs, their_proof) = match hear(&mut control)? {
        FromDesk::Challenge { nonce, proof } => (nonce, proof),
        // Before the process at the address proved the secret: its words
        // are shown as its, not the service's (a process that merely
        // listens there could write anything, a request for the secret
        // included).
        FromDesk::Refused(why) => {
            return Err(SatError::Bootstrap(format!(
                "the process at {address}, which has not proved that it is the service, \
                 refused to attach: {why:?}"
            )))
        }
        other => return Err(unexpected(address, &other)),
    };
    // A process that does not hold the secret gets no endpoint address of
    // ours: check the service before proving ourselves.
    let proofs = handshake.finish(&theirs)?;
    {
        if let Err(refusal) = proofs.check_theirs(their_proof.as_ref()) {
            // From here a wrong secret in the string and a process that
            // is not the service look the same: the message names both,
            // the likelier first.
            return Err(SatError::Bootstrap(match refusal {
                Refusal::Missing => format!(
                    "the process at {address} is not the service of this connection string (it \
                     proved no secret): check the address"
                ),
                _ => format!(
                    "the process at {address} is not the service of this connection string (it \
                     does not hold this secret): check the secret (the `sat://SECRET@...` line of \
                     the service's address file, or SAT_SECRET), then the address"
                ),
            }));
        }
    }
    send(&mut control, &ToDesk::Proof(proofs.mine())).map_err(lost)?;
    let provider = match hear(&mut control)? {
        FromDesk::Offer { provider } => provider,
        FromDesk::Refused(why) => return Err(refused(address, why)),
        other => return Err(unexpected(address, &other)),
    };
    let endpoint = FabricEndpoint::open(&FabricOptions {
        provider,
        local_ip: Some(local_ip),
        // A service's processes have no doorbells.
        wait_descriptor: true,
    })?;
    send(
        &mut control,
        &ToDesk::Join {
            address: endpoint.address().to_vec(),
        },
    )
    .map_err(lost)?;
    let (rank, topology, servers, lease, run_id) = match hear(&mut control)? {
        FromDesk::Welcome {
            rank,
            topology,
            servers,
            lease_s,
            run_id,
        } => (
            rank,
            topology,
            servers,
            Duration::from_secs(lease_s.max(2)),
            run_id,
        ),
        FromDesk::Refused(why) => return Err(refused(address, why)),
        other => return Err(unexpected(address, &other)),
    };
    topology.validate()?;
    if rank >= topology.len() || topology.is_server(rank) || servers.len() > rank as usize {
        return Err(SatError::Bootstrap(format!(
            "the service at {address} gave slot {rank}, which its topology does not have"
        )));
    }
    check_reachable(address, &control, &servers, provider)?;
    let mut table = servers;
    table.resize(topology.len() as usize, Vec::new());
    table[rank as usize] = endpoint.address().to_vec();
    let transport = endpoint.connect(rank, &table)?;
    observe::set_rank(rank);
    tracing::debug!("attached to the service at {address} in slot {rank} over {provider}");
    crate::stats::joined(run_id, began);

    let reader = crate::server::host::service_reader(&topology, rank);
    let client = Arc::new(Client::new(Arc::new(topology), Box::new(transport)));
    // Where the homes keep versions in host slots, this client reads them
    // under its own bit of their lock words, which its homes clear if it
    // dies inside a read scope.
    if let Some(reader) = reader {
        client.read_host_slots_as(reader);
    }
    // The control connection carries the watch's beats from now on: the
    // desk drops this process if it goes silent for a lease, and this
    // process's calls fail once the service is gone or has dropped it.
    let control = PeerWatch::start(
        control,
        crate::bootstrap::watch::Judge::Lease(lease),
        Fatal::default(),
        format!("the service at {address}"),
    )
    .map_err(|e| SatError::Bootstrap(format!("cannot start the session's watch: {e}")))?;
    client.watch(control.fatal().clone());
    // A service outlives its clients: a chain's release applies all or
    // nothing, whenever this process dies.
    client.release_chains_atomically();
    client.enter_role();
    let stop = Arc::new(AtomicBool::new(false));
    let progress = {
        let (client, stop) = (client.clone(), stop.clone());
        std::thread::Builder::new()
            .name("sat-progress".into())
            .spawn(move || client.background_progress(&stop))
            .map_err(|e| SatError::Bootstrap(format!("cannot start the progress thread: {e}")))?
    };
    Ok(Session {
        client,
        stop,
        progress: Some(progress),
        control: Some(control),
        address: address.to_owned(),
    })
}

/// How long a server endpoint may take to answer [`check_reachable`].
const REACH_TIMEOUT: Duration = Duration::from_secs(5);

/// Fails at once, rather than after the transport's minutes of retries,
/// when a server endpoint of the service cannot be reached from here: one
/// only its own host reaches (loopback) while this process came from
/// elsewhere, or, over tcp, one that does not answer a TCP connection.
fn check_reachable(
    address: &str,
    control: &TcpStream,
    servers: &[Vec<u8>],
    provider: Provider,
) -> SatResult<()> {
    let from_afar = control.peer_addr().is_ok_and(|a| !a.ip().is_loopback());
    for endpoint in servers {
        let Some(sa) = crate::transport::fabric::socket_address(endpoint) else {
            continue;
        };
        tracing::debug!("the service's server endpoint: {sa}");
        if from_afar && sa.ip().is_loopback() {
            return Err(SatError::Bootstrap(format!(
                "the service at {address} has its servers' endpoints on {sa}, which only its own \
                 host reaches: start it with --listen set to an address this host reaches \
                 (satrun --serve --listen ADDR:PORT)"
            )));
        }
        // The tcp provider's endpoint is a listening TCP socket: knock
        // once, so that a firewall or a wrong route shows now, not after
        // the provider's minutes of retries. On loopback too, where it
        // finds neither, so that every client takes the same path (the
        // knock leaves nothing behind in the server). verbs listens through
        // rdma_cm, which a TCP connection does not reach.
        if provider != Provider::Tcp {
            continue;
        }
        if let Err(e) = crate::transport::fabric::knock(sa, REACH_TIMEOUT) {
            return Err(SatError::Bootstrap(format!(
                "the service at {address} has a server endpoint at {sa}, which this host cannot \
                 reach ({e}): check the route and the firewall between the two hosts, or start \
                 the service with --listen set to an address this host reaches"
            )));
        }
    }
    Ok(())
}

/// The service did not answer as one: it closed or reset the connection,
/// was too slow, or sent what is not a SAT message.
fn cut_off(address: &str, e: Unread) -> SatError {
    match e {
        Unread::Late { .. } => SatError::Timeout(format!(
            "the service at {address} did not answer within {} s ({e}): is it overloaded, or \
             stopped (SIGSTOP)?",
            ADMISSION_TIMEOUT.as_secs()
        )),
        Unread::Closed { .. } | Unread::Io { .. } => SatError::Bootstrap(format!(
            "the service at {address} closed or reset the connection before admitting this \
             process ({e}): try again. A service closes the oldest of the connections that have \
             not proved its secret when {MAX_UNPROVEN} are open, and those that do not prove it \
             within {} s; its log (at the default level) says why it refused a connection",
            2 * HELLO_WAIT.as_secs()
        )),
        Unread::TooLong { .. } | Unread::Undecodable { .. } => SatError::Bootstrap(format!(
            "what answers at {address} sent {e}: is it a SAT service, of the same SAT version?"
        )),
    }
}

fn refused(address: &str, why: String) -> SatError {
    SatError::Bootstrap(format!("the service at {address} refused to attach: {why}"))
}

fn unexpected(address: &str, msg: &FromDesk) -> SatError {
    SatError::Bootstrap(format!(
        "the service at {address} answered out of turn ({msg:?}): is it the same SAT version?"
    ))
}

impl Session {
    /// The client, for code that keeps it apart from the session.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// The service's address (`host:port`, without the secret) this
    /// session attached to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Detaches: releases open scopes, tells the server, waits until it has
    /// taken in everything this client sent, and closes the endpoint once
    /// the last reference to the client is gone.
    pub fn detach(mut self) -> SatResult<()> {
        self.detach_inner()
    }

    fn detach_inner(&mut self) -> SatResult<()> {
        let Some(control) = self.control.take() else {
            return Ok(());
        };
        let finished = self.client.finish_session(DETACH_TIMEOUT);
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.progress.take() {
            let _ = t.join();
        }
        // Closing the connection hands the slot back once the servers have
        // forgotten this client.
        drop(control);
        tracing::debug!("detached from the service at {}", self.address);
        finished
    }
}

impl Deref for Session {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(e) = self.detach_inner() {
            tracing::warn!("detaching from the service at {}: {e}", self.address);
        }
    }
}

/// The pid this process gives the desk: its own. Debug builds only:
/// `SAT_TEST_CLAIM_PID=N` claims another one, as a hostile process that
/// holds the secret could (`tests/service.rs` checks the desk believes it
/// only of the process that holds the connection).
fn claimed_pid() -> u32 {
    #[cfg(debug_assertions)]
    if let Some(pid) = std::env::var("SAT_TEST_CLAIM_PID")
        .ok()
        .and_then(|p| p.parse().ok())
    {
        return pid;
    }
    std::process::id()
}
