//! The service mode: the S-DSM as a long-running service that processes
//! attach to and detach from at any time, as opposed to a run whose
//! processes all start and end together.
//!
//! ```text
//! satrun --serve --servers 2 --slots 16 --listen 127.0.0.1:7070
//! ```
//!
//! starts the servers (the topology's servers, ranks 0 to K-1); the
//! topology's clients are *slots* (ranks K and up). A process attaches with
//! [`connect`] (`sat_connect` in C, `sat.connect` in Python): the seed's
//! admission desk (`desk`) gives it a free slot, the slot's server enters
//! its endpoint, and from then on it is a client like any other, talking to
//! its server only. Chunks, symbols and synchronization objects live at the
//! servers, so data written by one process is there for a process that
//! attaches later.
//!
//! Detaching ([`Session::detach`]) ends the client as the end of a run
//! does: its server takes in what it sent, tells every other server, which
//! forget its copies, subscriptions and waits (`ClientLeft`) and confirm
//! (`ClientForgotten`); then the slot is free (`SlotFree` to the seed). A
//! process that dies is detected by its control connection closing, and
//! forgotten the same way.
//!
//! A service runs until it is stopped (SIGINT or SIGTERM to `satrun`).

pub(crate) mod desk;
mod session;

use std::net::TcpListener;
use std::os::fd::FromRawFd;

pub use session::{connect, Session};

use crate::auth::{Secret, SECRET_VAR};
use crate::bootstrap;
use crate::error::{SatError, SatResult};
use crate::progress::IdlePolicy;
use crate::server::{self, ServiceSide};
use crate::topology::Topology;

/// The variable naming the admission socket `satrun --serve` hands the seed.
pub const SERVICE_FD_VAR: &str = "SAT_SERVICE_FD";
/// The variable giving the number of client slots (without a topology file).
pub const SERVICE_SLOTS_VAR: &str = "SAT_SERVICE_SLOTS";
/// The argument that makes `satrun` play a server of a service.
pub const SERVER_PROCESS_ARG: &str = "--sat-service-server";

/// The topology of a service of `servers` processes: from `SAT_TOPOLOGY`
/// when set (its clients are the slots), else `SAT_SERVICE_SLOTS` slots.
fn service_topology(servers: u32) -> SatResult<Topology> {
    let t = match std::env::var("SAT_TOPOLOGY").ok().filter(|p| !p.is_empty()) {
        Some(path) => Topology::from_file(std::path::Path::new(&path))?,
        None => {
            let slots = std::env::var(SERVICE_SLOTS_VAR)
                .ok()
                .and_then(|v| v.trim().parse::<u32>().ok())
                .ok_or_else(|| {
                    SatError::Usage(format!(
                        "{SERVICE_SLOTS_VAR} is not set to a number of client slots"
                    ))
                })?;
            Topology::service(servers, slots)?
        }
    };
    t.check_service()?;
    if t.servers().len() as u32 != servers {
        return Err(SatError::Usage(format!(
            "{}: the topology has {} servers, but {servers} server processes started",
            t.source(),
            t.servers().len()
        )));
    }
    Ok(t)
}

/// One server process of a service (what `satrun --serve` starts): joins
/// the other servers, then serves until stopped. The seed also runs the
/// admission desk on the socket `satrun` opened.
pub fn serve() -> SatResult<()> {
    let (joined, servers) = bootstrap::join_service(service_topology)?;
    // Clients attach through the desk's port and reach the servers'
    // endpoints: when those are on loopback (or shm's), only this host's
    // processes can be clients, and they share the versions in host
    // segments instead of moving them in messages.
    let local_only = joined.one_host
        && (joined.provider == crate::transport::Provider::Shm || joined.local_ip.is_loopback());
    let host = server::host::backing_for_service(local_only, &joined.topology);
    let desk = if joined.env.rank == 0 {
        let fd = std::env::var(SERVICE_FD_VAR)
            .ok()
            .and_then(|v| v.trim().parse::<i32>().ok())
            .ok_or_else(|| {
                SatError::Usage(format!(
                    "{SERVICE_FD_VAR} is not set: start a service with `satrun --serve`"
                ))
            })?;
        // A service admits only processes that prove they hold its secret;
        // satrun hands it to its servers.
        let secret = Secret::from_env()?.ok_or_else(|| {
            SatError::Usage(format!(
                "{SECRET_VAR} is not set: start a service with `satrun --serve`"
            ))
        })?;
        // SAFETY: satrun opened this listening socket for this process and
        // nothing else in it owns the descriptor.
        let listener = unsafe { TcpListener::from_raw_fd(fd) };
        Some(desk::Desk::open(
            listener,
            (
                joined.provider,
                (*joined.topology).clone(),
                servers,
                joined.run_id,
            ),
            secret,
            host.is_some(),
        )?)
    } else {
        None
    };
    tracing::debug!(
        "service server {}: versions {}",
        joined.env.rank,
        if host.is_some() {
            "in host segments"
        } else {
            "moved by messages"
        }
    );
    let mut transport = joined.transport;
    server::run_service(
        &joined.topology,
        &mut transport,
        IdlePolicy::from_env(),
        ServiceSide::new(desk),
        host,
    )
}
