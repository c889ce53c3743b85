//! Bootstrap and termination (section 3 of the SAT report).
//!
//! Every process of a run calls [`run`] with the table of role functions
//! (index 0, the server role, has none: SAT runs it). The steps:
//! 1. find this process's rank and the run's size ([`env::RunEnv`]);
//! 2. contact the seed (rank 0) over TCP: the seed loads the topology, picks
//!    the provider, and hands everyone the address table ([`seed`]);
//! 3. open the libfabric endpoint and enter the global barrier;
//! 4. run the role: servers serve, clients run their function;
//! 5. terminate: a client tells its server when its function returned;
//!    a server whose clients are all done tells the seed; once every server
//!    is done the seed shuts them down.

pub mod env;
pub mod seed;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::error::{SatError, SatResult};
use crate::observe;
use crate::progress::IdlePolicy;
use crate::server;
use crate::topology::Topology;
use crate::transport::fabric::{FabricEndpoint, FabricOptions, FabricTransport};
use crate::transport::{Provider, Transport};

pub use env::RunEnv;

/// What a role function may return: any error fails the process (and, under
/// `satrun`, the run), after the termination protocol has completed.
pub type RoleResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

type RoleFn = Box<dyn FnOnce(&Client) -> RoleResult + Send>;

/// The table of role functions, indexed by role id (the report's
/// `_SAT_Roles_t roles[] = {NULL, prod, cons}`).
#[derive(Default)]
pub struct Roles {
    fns: Vec<Option<RoleFn>>,
    /// Runs once the run is over for this client, before its client goes
    /// (see [`Roles::before_client_ends`]).
    before_client_ends: Option<Box<dyn FnOnce() + Send>>,
}

impl Roles {
    /// No role yet: add each client role's function with [`Roles::role`]
    /// (servers play role 0, which needs none).
    pub fn new() -> Roles {
        Roles::default()
    }

    /// Registers the function of client role `id` (1 and above: role 0 is
    /// the S-DSM server, which SAT runs itself).
    pub fn role(
        mut self,
        id: u32,
        f: impl FnOnce(&Client) -> RoleResult + Send + 'static,
    ) -> Roles {
        assert!(
            id > 0,
            "role 0 is the S-DSM server: client roles start at 1"
        );
        let id = id as usize;
        if self.fns.len() <= id {
            self.fns.resize_with(id + 1, || None);
        }
        self.fns[id] = Some(Box::new(f));
        self
    }

    /// Registers what runs when this process's role and its handlers are
    /// over, before the termination protocol and before the client goes: no
    /// call of the role's thread is in progress, but other threads may still
    /// be inside one. A face that lends the client beyond the role function (the
    /// C ABI, to threads the role started) waits for them here.
    pub fn before_client_ends(mut self, f: impl FnOnce() + Send + 'static) -> Roles {
        self.before_client_ends = Some(Box::new(f));
        self
    }

    fn take(&mut self, id: u32) -> Option<RoleFn> {
        self.fns.get_mut(id as usize).and_then(Option::take)
    }
}

/// How long the processes of a run wait for each other to start
/// (`SAT_BOOTSTRAP_TIMEOUT` seconds, default 60).
fn bootstrap_timeout() -> Duration {
    Duration::from_secs(crate::settings::get().bootstrap_timeout_s)
}

/// The topology file named by `--topology FILE` (or `--topology=FILE`) among
/// the program's arguments, or else by `SAT_TOPOLOGY`.
pub fn topology_path(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--topology" {
            return it.next().cloned();
        }
        if let Some(p) = a.strip_prefix("--topology=") {
            return Some(p.to_string());
        }
    }
    std::env::var("SAT_TOPOLOGY").ok().filter(|p| !p.is_empty())
}

/// The run's topology, checked to have one entry per process.
fn load_topology(args: &[String], size: u32) -> SatResult<Topology> {
    let t = read_topology(args, size)?;
    t.check_size(size)?;
    Ok(t)
}

fn read_topology(args: &[String], size: u32) -> SatResult<Topology> {
    if args.last().is_some_and(|a| a == "--topology") {
        // Else the run would go on under the default topology, unsaid.
        return Err(SatError::Usage(
            "the program's arguments end with --topology and no file: write --topology FILE".into(),
        ));
    }
    match topology_path(args) {
        Some(path) => {
            let t = Topology::from_file(std::path::Path::new(&path))?;
            tracing::debug!("Topology ({} topologies) loaded from file {path}", t.len());
            Ok(t)
        }
        None => {
            tracing::debug!("Topology: none given, one server and {} clients", size - 1);
            Ok(Topology::default_for(size))
        }
    }
}

/// A process that has joined its run: every endpoint address is known and
/// every process has passed the global barrier.
pub struct Joined {
    /// This process's place in the run, from its environment.
    pub env: RunEnv,
    /// The run's topology, as the seed handed it to every process.
    pub topology: Arc<Topology>,
    /// The libfabric provider every process of the run uses.
    pub provider: Provider,
    /// This process's endpoint, with every rank's address entered.
    pub transport: FabricTransport,
    /// Every process of the run is on this host.
    pub one_host: bool,
    /// The address the run's endpoints are on (the seed's side of its
    /// connections): loopback when no other host can reach them.
    pub local_ip: std::net::IpAddr,
    /// The endpoint address of every rank, as the transport entered them
    /// (empty for a service's client slots).
    pub addresses: Vec<Vec<u8>>,
    /// This process's part in the run's watch ([`watch`]), which lives as
    /// long as it takes part in the run (every run of more than one
    /// process; not a service's).
    pub watch: Option<watch::Watch>,
    /// The run has recovery on (`SAT_RECOVERY=on` at the seed): it outlives
    /// a lost client; otherwise a lost process ends it.
    pub recovery: bool,
    /// The run's id, made by the seed: a service hands it to the processes
    /// that attach, so that every statistics file of the service names it.
    pub run_id: seed::RunId,
}

/// Steps 1 to 3 of the bootstrap: discover, meet the seed, open the endpoint,
/// pass the global barrier. `roles_known` says whether this program has a
/// function for a client role, so that a missing role fails the whole run
/// before anyone starts. [`run`] is the usual entry point; tools that drive
/// the transport themselves (benchmarks) stop here.
pub fn join(args: &[String], roles_known: impl Fn(u32) -> bool) -> SatResult<Joined> {
    let prog = args
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    join_with(&prog, |size| load_topology(args, size), roles_known, true).map(|(joined, _)| joined)
}

/// The bootstrap of a service's servers: the processes that start are the
/// topology's servers only; its client ranks are slots with no endpoint
/// yet. Returns the servers' endpoint addresses too (the seed hands them to
/// attaching clients).
pub(crate) fn join_service(
    topology: impl FnOnce(u32) -> SatResult<Topology>,
) -> SatResult<(Joined, Vec<Vec<u8>>)> {
    join_with("sat-service", topology, |_| false, false)
}

fn join_with(
    prog: &str,
    topology: impl FnOnce(u32) -> SatResult<Topology>,
    roles_known: impl Fn(u32) -> bool,
    bells_wanted: bool,
) -> SatResult<(Joined, Vec<Vec<u8>>)> {
    // The bootstrap is SAT's time in the statistics (docs/STATISTICS.md).
    let began = std::time::Instant::now();
    observe::init();
    let env = RunEnv::discover()?;
    observe::set_rank(env.rank);
    // Under satrun: this rank is a SAT process, and the run waits for it.
    crate::launcher::joins::announce_joining(env.rank);
    tracing::debug!(
        "Bootstrap SAT {} id {} np {} on host {} with pid {} (rank from {})",
        prog,
        env.rank,
        env.size,
        env.host,
        env.pid,
        env.rank_source
    );

    let mut link = seed::SeedLink::connect(&env, bootstrap_timeout())?;
    // A malformed setting stops the whole run here, saying which.
    if let Err(e) = crate::settings::check().and_then(|()| crate::protocol::advice::check()) {
        link.fail(&format!("rank {}: {e}", env.rank));
        return Err(e);
    }
    let setup = link.setup(|| topology(env.size))?;
    crate::stats::joined(setup.run_id, began);
    let topology = Arc::new(setup.topology);
    let role = topology.role(env.rank);
    if role != 0 && !roles_known(role) {
        let reason = format!(
            "rank {} plays role {role}, but this program registers no function for role {role}",
            env.rank
        );
        link.fail(&reason);
        return Err(SatError::Usage(reason));
    }

    let opts = FabricOptions {
        provider: setup.provider,
        local_ip: Some(setup.local_ip),
        // Doorbells wake the processes of a run on one host (below).
        wait_descriptor: !(setup.one_host && bells_wanted),
    };
    let endpoint = match FabricEndpoint::open(&opts) {
        Ok(ep) => ep,
        Err(e) => {
            link.fail(&e.to_string());
            return Err(e.into());
        }
    };
    // Doorbells wake the processes of a run on one host; a service's
    // clients attach later, without one, so its servers keep polling.
    let own_bell = if setup.one_host && bells_wanted {
        match crate::transport::doorbell::Doorbell::create() {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::debug!("no doorbell for this process ({e}): its waits poll and sleep");
                None
            }
        }
    } else {
        None
    };
    let (started, bells) =
        link.exchange_addresses(endpoint.address(), own_bell.as_ref().map(|b| b.1))?;
    // In a service the ranks past the processes that started are client
    // slots: no endpoint until a client attaches.
    let mut table = started.clone();
    table.resize(topology.len() as usize, Vec::new());
    let mut transport = match endpoint.connect(env.rank, &table) {
        Ok(t) => t,
        Err(e) => {
            link.fail(&e.to_string());
            return Err(e.into());
        }
    };
    if let Some((own, _)) = own_bell {
        ring_peers(&mut transport, env.rank, own, &bells);
    }
    link.barrier()?;
    // Every run's processes are watched (a service's servers watch their
    // clients through the desk instead): with recovery, to go on without a
    // lost client; otherwise to end the run, not hang, when a process dies
    // or its host becomes unreachable (`watch.rs`).
    let watch = match (setup.recovery, bells_wanted) {
        (Some(lease), true) => {
            tracing::debug!("recovery on: lease {} s", lease.as_secs());
            // Fenced (a lost process killed) only where it may hold a
            // host slot's lock: with the servers' own choice of where the
            // versions live (a replicated run keeps them in messages).
            let slots = crate::server::host::backing_for(setup.one_host, true, &topology).is_some();
            Some(link.into_watch(watch::Judge::Lease(lease), slots)?)
        }
        (None, true) if env.size > 1 => {
            let keepalive = Duration::from_secs(crate::settings::get().lease_s);
            Some(link.into_watch(watch::Judge::Keepalive(keepalive), false)?)
        }
        _ => None,
    };
    tracing::debug!("Starting code (role {role}) over {}", setup.provider);
    Ok((
        Joined {
            env,
            topology,
            provider: setup.provider,
            transport,
            one_host: setup.one_host,
            local_ip: setup.local_ip,
            addresses: table,
            watch,
            recovery: setup.recovery.is_some(),
            run_id: setup.run_id,
        },
        started,
    ))
}

/// Rings the doorbells of the other processes after sending to them, and
/// sleeps on `own` when every one of them rings it (`transport/doorbell.rs`);
/// a doorbell that cannot be opened leaves its process to its sleeps.
fn ring_peers(
    transport: &mut FabricTransport,
    me: crate::Rank,
    own: crate::transport::doorbell::Doorbell,
    bells: &[Option<crate::transport::doorbell::BellPlace>],
) {
    use crate::transport::doorbell::{self, Doorbell};
    let mut segments = crate::segment::Segments::default();
    let mut all = true;
    let opened: Vec<Option<Doorbell>> = bells
        .iter()
        .enumerate()
        .map(|(rank, place)| {
            if rank as crate::Rank == me {
                return None;
            }
            let bell = place.and_then(|p| match Doorbell::open(&mut segments, p) {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::debug!("rank {rank}'s doorbell cannot be opened: {e}");
                    None
                }
            });
            all &= bell.is_some();
            bell
        })
        .collect();
    if all {
        let peers: Vec<Doorbell> = opened.iter().flatten().cloned().collect();
        crate::balance::install(&own, &peers);
    }
    transport.set_doorbells(opened, &own);
    if all {
        doorbell::install_own(own);
    }
}

/// Bootstraps this process into the run, plays its role, and returns once
/// the termination protocol lets it go. Every process of the run calls it.
///
/// A role that returns an error makes `run` return [`SatError::Role`]. A
/// role that panics has its open scopes aborted and leaves the run as a
/// failed role does; the panic then goes on from `run` (it is resumed, not
/// turned into an error), so the process ends as a panicking Rust program
/// does, with status 101, unless the caller catches it.
pub fn run(roles: Roles, args: impl IntoIterator<Item = String>) -> SatResult<()> {
    let args: Vec<String> = args.into_iter().collect();
    let joined = join(&args, |role| {
        roles.fns.get(role as usize).is_some_and(|f| f.is_some())
    })?;
    run_joined(joined, roles)
}

/// Steps 4 and 5 for a process that has [`join`]ed its run: serve, or run
/// its role's function, then terminate. [`run`] is both halves.
pub fn run_joined(joined: Joined, mut roles: Roles) -> SatResult<()> {
    let role = joined.topology.role(joined.env.rank);
    let policy = IdlePolicy::from_env();
    let mut transport: Box<dyn Transport> = Box::new(joined.transport);
    let watch = joined.watch;
    let recovering = joined.recovery && watch.is_some();
    let host = server::host::backing_for(joined.one_host, recovering, &joined.topology);
    if role == 0 {
        let (topology, transport) = (&joined.topology, transport.as_mut());
        // The server's loop takes part in the balancing of the host's cores
        // (`crate::balance`) as a role's thread does.
        crate::balance::enter_role();
        let served = match watch {
            Some(w) if recovering => server::run_recovering(
                topology,
                transport,
                policy,
                host,
                server::recovery::RunRecovery::new(w),
            ),
            Some(w) => {
                let guard = server::guard::RunGuard::new(w);
                server::run_guarded(topology, transport, policy, host, guard)
            }
            None => server::run_on_host(topology, transport, policy, host),
        };
        crate::balance::leave_role();
        return served;
    }
    let Some(f) = roles.take(role) else {
        return Err(SatError::Role(format!(
            "this program has no function for role {role}: register one with Roles::role"
        )));
    };
    let before_client_ends = roles.before_client_ends.take();
    let reader = server::host::service_reader(&joined.topology, joined.env.rank);
    let client = Client::new(joined.topology, transport);
    if let Some(w) = &watch {
        client.watch(w.fatal());
    }
    match (recovering, host) {
        // With recovery, this client reads host slots under its own bit,
        // which its homes clear if it is lost inside a read scope; barriers
        // go by messages, where a lost process's arrivals can be withdrawn.
        (true, Some(_)) => {
            client.release_chains_atomically();
            if let Some(reader) = reader {
                client.read_host_slots_as(reader);
            }
        }
        (true, None) => client.release_chains_atomically(),
        (false, Some(_)) => client.use_host_sync(),
        (false, None) => {}
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (outcome, finished) = std::thread::scope(|s| {
        s.spawn(|| client.background_progress(&stop));
        // The role's own failure must not stop the termination protocol, or
        // the servers would wait for this client forever.
        // After the role function, the client loop runs the handlers of
        // its subscriptions (section 2.5) until none is left or the run is
        // quiescent.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            client.enter_role();
            f(&client)?;
            client.serve_subscriptions()?;
            RoleResult::Ok(())
        }));
        // Calls still in progress on other threads end while the servers
        // still answer them.
        if let Some(f) = before_client_ends {
            f();
        }
        // A failed role's open scopes publish nothing (abort semantics).
        let finished = if matches!(outcome, Ok(Ok(()))) {
            client.finish(bootstrap_timeout())
        } else {
            client.finish_failed(bootstrap_timeout())
        };
        crate::balance::leave_role();
        stop.store(true, std::sync::atomic::Ordering::Release);
        (outcome, finished)
    });
    // Once the termination protocol has let this process go, it says
    // goodbye: the seed takes its watch connection closing as no news.
    match watch {
        Some(watch::Watch::Peer(p)) if finished.is_ok() => p.bye(),
        other => drop(other),
    }
    finished?;
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(SatError::Role(format!("role {role} failed: {e}"))),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
