//! `satrun`: starts the processes of a run on this host, the way `mpirun`
//! does in the SAT report (section 3, Figure 12).
//!
//! ```text
//! satrun -n 3 --topology topo.xml -- ./prodcons --input in.bmp
//! satrun --topology topo.xml -n 1 ./a args : -n 2 ./b args
//! ```
//!
//! Everything that can be checked is checked before the first process
//! starts: the command line, the topology (parsed, validated and sized
//! against the number of processes), the provider and the programs. Then
//! satrun opens the seed socket, hands it to rank 0, starts every rank with
//! its environment, prefixes every line they print with their rank, and
//! supervises them: when one fails, the others are stopped, and satrun exits
//! with the failure's status.

use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::auth::{Secret, ServiceAddress, SECRET_VAR};
use crate::topology::{Topology, TopologyError};
use crate::transport::fabric::{check_provider, remove_shm_leftovers, sweep_dead_regions};
use crate::transport::{Provider, TransportError};

pub(crate) mod joins;
pub use joins::announce_leaving_role;
mod sys;

/// The help text of `satrun --help`.
pub const USAGE: &str = "\
satrun: start the processes of a SAT run on this host

Usage:
  satrun -n N [--topology FILE] [--provider shm|tcp|verbs] [--enable-recovery]
         [--] PROG [ARGS...]
  satrun [--topology FILE] [--provider P] -n N1 PROG1 [ARGS...] : -n N2 PROG2 [ARGS...] ...
  satrun --serve [--servers K] [--slots M] [--topology FILE] [--provider P]
         [--listen HOST:PORT] [--address-file FILE]

Options:
  -n, -np N          run N processes of PROG; with ':' several programs share one run
                     and take the ranks in the order they are written; at most 256
                     processes in all
  --topology FILE    the topology of the run (XML, the SAT report's Figure 11); it is
                     also found in PROG's own arguments (--topology FILE or
                     --topology=FILE), else in $SAT_TOPOLOGY; without one, rank 0
                     is the only server and every other rank a client of it with
                     role 1
  --provider NAME    the libfabric provider: shm (this host), tcp or verbs;
                     default: $SAT_PROVIDER, else tcp for a run with recovery
                     (a process killed while it sends can freeze shm), else shm
  --enable-recovery  the run outlives a client process that dies or stops answering
                     for $SAT_LEASE_S seconds (default 10): its write scopes are
                     revoked, its chunks keep their last released versions, and the
                     others go on (sets SAT_RECOVERY=on; under mpirun or srun, set
                     it yourself; SAT_RECOVERY=on asks the same, and
                     SAT_RECOVERY=off with this option is an error). A lost
                     server ends the run, unless the topology
                     keeps replicated homes (<topologies replication=\"2\">) and it
                     is not the seed (rank 0): its backups then take its chunks
                     over and its clients move to the next server.
  --                 the end of satrun's options: the next argument is PROG
  -h, --help         print this help

Service mode (--serve): start the S-DSM's servers and keep them running;
processes attach and detach at any time (sat_connect in C, sat.connect in
Python, sat_core::service::connect in Rust) and find the data others left.
  --servers K        the number of server processes (default 1, at most 256)
  --slots M          how many clients may be attached at once (default 16, at
                     most 65536)
  --topology FILE    instead of --servers/--slots: its servers must have the
                     first ids, and each client entry is a slot; without any of
                     the three, $SAT_TOPOLOGY when set
  --listen HOST:PORT where clients attach (default 127.0.0.1 and a free port;
                     0.0.0.0 to accept other hosts)
  --address-file F   where to write the connection string clients attach with,
                     sat://SECRET@HOST:PORT (mode 0600); default
                     $XDG_RUNTIME_DIR/sat/service-PORT, else ~/.sat/service-PORT
                     (a folder made 0700). The service keeps the file locked
                     (flock) while it runs: a second service given the same
                     file refuses to start
The service's secret is $SAT_SECRET, else a new random one. A process attaches
only if it proves it holds the secret (the connection string, or HOST:PORT with
$SAT_SECRET set); the secret itself never crosses the network. The service
prints 'SAT service listening on HOST:PORT' and the address file's path (never
the secret), and runs until SIGINT or SIGTERM, which stop it with status 0.

Each run has a secret too: satrun makes a new one and hands it to its processes
in $SAT_SECRET; a process that cannot prove it holds it gets no rank. Under
another launcher (mpirun, srun) set $SAT_SECRET for every process yourself: it
is required when the seed's address is not loopback. See docs/SECURITY.md.

The tuning variables of README's \"Environment\" (SAT_CHUNK_SIZE, SAT_LEASE_S,
...) are checked before anything starts: a value that does not parse stops
satrun with status 2, naming it.

Every line a process prints is prefixed with its rank: \"[2] ...\".
A run starts once every rank has joined it: a rank that exits with 0 without
ever calling SAT (a program that does not use it, in an MPMD line) stops the
run as soon as rank 0 has joined, with a message naming it.

Exit status: 0 when every process exits with 0; otherwise the status of the
first process that failed (1 if a signal killed it), also when the run went on
without it (--enable-recovery); 1 when a rank left before it joined (above);
128+N when satrun was stopped by signal N (SIGINT, SIGTERM or SIGHUP, whenever
it comes: a service stopped so exits with 0); 2 when the run could not start.
";

/// How long the ranks have to exit after SIGTERM before SIGKILL.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(3);

/// How long satrun waits for the last output of the ranks once they are all
/// gone (a descendant of a rank may still hold its pipes open).
const OUTPUT_DRAIN: Duration = Duration::from_secs(1);

/// A line longer than this is forwarded in pieces.
const MAX_LINE: usize = 1 << 20;

/// Exit status when the run could not start.
pub const EXIT_NOT_STARTED: i32 = 2;

/// The most processes satrun starts (the ranks of a run, the servers of a
/// service). They all run on this host, and 256 is where two limits meet:
/// libfabric's shm provider, the default here, addresses at most 256 peers
/// from one endpoint (`SMR_MAX_PEERS` in every release since 1.6), so a
/// server over shm could not reach more processes than that; and satrun
/// itself holds two pipes per rank, which is 512 of the 1024 descriptors
/// a process may open by default (`ulimit -n`). A larger run is one for
/// several hosts, started by mpirun or srun.
pub const MAX_PROCESSES: u32 = 256;

/// The most client slots `satrun --serve --slots` gives a service. Each slot
/// is a rank of the service's topology, which every server and attaching
/// process holds whole, and clients over shm are limited to 256 peers like
/// any process; over tcp a service may take many more clients than one host
/// runs, but not billions: past this, a number is a mistake, refused before
/// a topology of that size is built.
pub const MAX_SLOTS: u32 = 65_536;

/// Set in every rank's environment unless the user set them: libinfinipath
/// and libhfi (loaded by libfabric's psm and psm2 providers) otherwise
/// install SIGINT and SIGTERM handlers that call `exit(1)`, which can
/// deadlock on a lock of libfabric the signal interrupted (a process then
/// survives SIGTERM), and turn a stop by signal into status 1. Open MPI
/// sets them for the same reason.
const NO_BACKTRACE_VARS: [&str; 2] = ["IPATH_NO_BACKTRACE", "HFI_NO_BACKTRACE"];

/// Why satrun could not start the run; printed as `satrun: <error>`.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The command line is wrong.
    #[error("{0}\nTry 'satrun --help' for more information.")]
    Usage(String),
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// `--provider` or `SAT_PROVIDER` names no provider.
    #[error("{0}")]
    UnknownProvider(String),
    #[error(transparent)]
    Provider(#[from] TransportError),
    /// A program cannot be started.
    #[error("cannot run {program} (ranks {first} to {last}): {reason}")]
    Program {
        program: String,
        first: u32,
        last: u32,
        reason: String,
    },
    /// The operating system refused something satrun needs.
    #[error("{what}: {error}")]
    System { what: String, error: io::Error },
    /// An environment variable, or the state of a file, that stops the
    /// run before it starts; the message says which and what to do.
    #[error("{0}")]
    Refused(String),
}

/// The environment variables satrun reads itself (the others pass through
/// to the processes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchEnv {
    /// `SAT_PROVIDER`.
    pub provider: Option<OsString>,
    /// `SAT_TOPOLOGY`: the topology file when no option names one.
    pub topology: Option<OsString>,
    /// `SAT_RECOVERY`.
    pub recovery: Option<OsString>,
}

impl LaunchEnv {
    /// This process's environment.
    pub fn from_process() -> LaunchEnv {
        LaunchEnv {
            provider: std::env::var_os("SAT_PROVIDER"),
            topology: std::env::var_os("SAT_TOPOLOGY"),
            recovery: std::env::var_os("SAT_RECOVERY"),
        }
    }

    /// `SAT_TOPOLOGY`, when set and not empty.
    fn topology_file(&self) -> Option<PathBuf> {
        self.topology
            .as_ref()
            .filter(|t| !t.is_empty())
            .map(PathBuf::from)
    }

    /// `SAT_RECOVERY`: `None` when unset or empty, else whether it says on;
    /// a value that does not parse is the processes' own error.
    fn recovery(&self) -> Result<Option<bool>, LaunchError> {
        let Some(value) = self
            .recovery
            .as_ref()
            .map(|v| v.to_string_lossy().trim().to_owned())
            .filter(|v| !v.is_empty())
        else {
            return Ok(None);
        };
        crate::settings::parse(|name| (name == "SAT_RECOVERY").then(|| value.clone()))
            .map(|s| Some(s.recovery))
            .map_err(LaunchError::Refused)
    }
}

/// Checks the tuning variables every process reads (README, "Environment")
/// with the processes' own parser, so a bad one stops satrun, with the
/// message the processes would give, before anything starts.
pub fn check_settings(var: impl Fn(&str) -> Option<String>) -> Result<(), LaunchError> {
    crate::settings::parse(&var).map_err(LaunchError::Refused)?;
    crate::protocol::advice::check_with(&var).map_err(LaunchError::Refused)
}

/// One program of the command line and how many processes run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppContext {
    pub count: u32,
    pub program: OsString,
    pub args: Vec<OsString>,
}

/// The command line of a run, as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchArgs {
    /// In declaration order: the ranks are numbered across them.
    pub apps: Vec<AppContext>,
    /// `--topology` given to satrun.
    pub topology: Option<PathBuf>,
    /// `--provider` given to satrun.
    pub provider: Option<String>,
    /// `--enable-recovery`: the run outlives a client that dies.
    pub recovery: bool,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Help,
    Run(LaunchArgs),
    Serve(ServeArgs),
}

/// The command line of `satrun --serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeArgs {
    pub servers: u32,
    pub slots: u32,
    /// `--servers` or `--slots` was given (then `SAT_TOPOLOGY` is not read).
    pub sized: bool,
    pub topology: Option<PathBuf>,
    pub provider: Option<String>,
    pub listen: String,
    pub address_file: Option<PathBuf>,
}

impl Default for ServeArgs {
    fn default() -> ServeArgs {
        ServeArgs {
            servers: 1,
            slots: 16,
            sized: false,
            topology: None,
            provider: None,
            listen: "127.0.0.1:0".into(),
            address_file: None,
        }
    }
}

/// Parses `satrun --serve ...` (the arguments after `--serve`).
fn parse_serve_args(args: &[OsString]) -> Result<Invocation, LaunchError> {
    let mut out = ServeArgs::default();
    let (mut servers, mut slots) = (None, None);
    let mut i = 0;
    while i < args.len() {
        let text = args[i].to_string_lossy().into_owned();
        let (name, inline) = match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
            _ => (text.clone(), None),
        };
        let mut value = || -> Result<String, LaunchError> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            let value = args
                .get(i)
                .map(|v| v.to_string_lossy().into_owned())
                .ok_or_else(|| usage(format!("{name} needs a value")))?;
            not_an_option(&name, &value)?;
            Ok(value)
        };
        let number = |v: String, what: &str| -> Result<u32, LaunchError> {
            match v.parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(usage(format!("{what} takes a positive number, not '{v}'"))),
            }
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Invocation::Help),
            "--servers" => set_once(&mut servers, number(value()?, "--servers")?, "--servers")?,
            "--slots" => set_once(&mut slots, number(value()?, "--slots")?, "--slots")?,
            "--topology" => set_once(&mut out.topology, PathBuf::from(value()?), "--topology")?,
            "--provider" => set_once(&mut out.provider, value()?, "--provider")?,
            "--listen" => out.listen = value()?,
            "--address-file" => set_once(
                &mut out.address_file,
                PathBuf::from(value()?),
                "--address-file",
            )?,
            other => {
                return Err(usage(format!(
                    "unknown option '{other}' for --serve (a service runs no program: \
                     processes attach to it)"
                )))
            }
        }
        i += 1;
    }
    if out.topology.is_some() && (servers.is_some() || slots.is_some()) {
        return Err(usage(
            "--topology gives the servers and slots: do not add --servers or --slots",
        ));
    }
    out.sized = servers.is_some() || slots.is_some();
    out.servers = servers.unwrap_or(out.servers);
    out.slots = slots.unwrap_or(out.slots);
    if out.servers > MAX_PROCESSES {
        return Err(usage(format!(
            "--servers {}: satrun starts at most {MAX_PROCESSES} processes, all on this \
             host (libfabric's shm provider reaches at most 256 peers); give fewer",
            out.servers
        )));
    }
    if out.slots > MAX_SLOTS {
        return Err(usage(format!(
            "--slots {}: a service has at most {MAX_SLOTS} client slots; give fewer",
            out.slots
        )));
    }
    Ok(Invocation::Serve(out))
}

fn usage(message: impl Into<String>) -> LaunchError {
    LaunchError::Usage(message.into())
}

/// Parses satrun's arguments (without the program name).
pub fn parse_args<I>(args: I) -> Result<Invocation, LaunchError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.first().is_some_and(|a| a == "--serve") {
        return parse_serve_args(&args[1..]);
    }
    let mut out = LaunchArgs::default();
    let mut count: Option<u32> = None;
    let mut i = 0;
    // Program contexts: options, then PROG, then its arguments up to ':'.
    while i < args.len() {
        let arg = &args[i];
        let text = arg.to_str().unwrap_or("");
        // An option of the whole run inside a later program's context would
        // look as if it were that program's alone.
        let whole_run = ["--topology", "--provider", "--enable-recovery"]
            .into_iter()
            .find(|o| text == *o || text.strip_prefix(o).is_some_and(|v| v.starts_with('=')));
        if let (Some(option), false) = (whole_run, out.apps.is_empty()) {
            return Err(usage(format!(
                "{option} is an option of the whole run, not of one program: give it before the \
                 first program (satrun {option} ... -n N PROG : -n M PROG2)"
            )));
        }
        let mut value_of = |name: &str| -> Result<OsString, LaunchError> {
            i += 1;
            let value = args
                .get(i)
                .cloned()
                .ok_or_else(|| usage(format!("{name} needs a value")))?;
            not_an_option(name, &value.to_string_lossy())?;
            Ok(value)
        };
        match text {
            "-h" | "--help" => return Ok(Invocation::Help),
            "-n" | "-np" | "--np" => {
                let value = value_of(text)?;
                set_count(&mut count, &value)?;
            }
            "--topology" => {
                let value = value_of(text)?;
                set_once(&mut out.topology, PathBuf::from(value), "--topology")?;
            }
            "--provider" => {
                let value = value_of(text)?;
                let value = value.to_string_lossy().into_owned();
                set_once(&mut out.provider, value, "--provider")?;
            }
            "--enable-recovery" => out.recovery = true,
            ":" => {
                return Err(usage(
                    "':' must follow a program: -n N PROG [ARGS...] : -n M PROG2 [ARGS...]",
                ))
            }
            "--" => {
                i += 1;
                let program = args
                    .get(i)
                    .ok_or_else(|| usage("'--' must be followed by the program to run"))?;
                i = take_program(&args, i, program, &mut count, &mut out)?;
                continue;
            }
            _ => {
                if let Some(value) = text.strip_prefix("--topology=") {
                    set_once(&mut out.topology, PathBuf::from(value), "--topology")?;
                } else if let Some(value) = text.strip_prefix("--provider=") {
                    set_once(&mut out.provider, value.to_owned(), "--provider")?;
                } else if let Some(value) = text
                    .strip_prefix("-n")
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                {
                    set_count(&mut count, OsStr::new(value))?;
                } else if arg.as_bytes().starts_with(b"-") {
                    return Err(usage(format!(
                        "unknown option '{}'; if it is the program's, write '--' before \
                         the program",
                        arg.to_string_lossy()
                    )));
                } else {
                    i = take_program(&args, i, arg, &mut count, &mut out)?;
                    continue;
                }
            }
        }
        i += 1;
    }
    if out.apps.is_empty() {
        return Err(usage("no program to run: satrun -n N [--] PROG [ARGS...]"));
    }
    if count.is_some() {
        return Err(usage("-n N must be followed by the program to run"));
    }
    check_process_count(out.apps.iter().map(|a| u64::from(a.count)).sum())?;
    Ok(Invocation::Run(out))
}

/// Takes PROG at `args[at]` and its arguments up to ':'; returns the index
/// after them.
fn take_program(
    args: &[OsString],
    at: usize,
    program: &OsString,
    count: &mut Option<u32>,
    out: &mut LaunchArgs,
) -> Result<usize, LaunchError> {
    let Some(n) = count.take() else {
        return Err(usage(format!(
            "how many processes run {}? write -n N before it",
            program.to_string_lossy()
        )));
    };
    let mut end = at + 1;
    while end < args.len() && args[end] != ":" {
        end += 1;
    }
    out.apps.push(AppContext {
        count: n,
        program: program.clone(),
        args: args[at + 1..end].to_vec(),
    });
    if end < args.len() {
        // Skip the ':', which must introduce another program.
        end += 1;
        if end == args.len() {
            return Err(usage("nothing after ':'; give -n N PROG [ARGS...]"));
        }
    }
    Ok(end)
}

/// At most [`MAX_PROCESSES`] ranks.
fn check_process_count(total: u64) -> Result<(), LaunchError> {
    if total > u64::from(MAX_PROCESSES) {
        return Err(usage(format!(
            "{total} processes: satrun starts at most {MAX_PROCESSES}, all on this host \
             (libfabric's shm provider reaches at most 256 peers); a larger run spans \
             several hosts: start it with mpirun or srun"
        )));
    }
    Ok(())
}

fn set_count(count: &mut Option<u32>, value: &OsStr) -> Result<(), LaunchError> {
    let text = value.to_string_lossy();
    let n: u32 = text
        .parse()
        .map_err(|_| usage(format!("-n takes a number of processes, not '{text}'")))?;
    if n == 0 {
        return Err(usage("-n 0 starts no process; give at least 1"));
    }
    if count.replace(n).is_some() {
        return Err(usage("-n is given twice for the same program"));
    }
    Ok(())
}

fn set_once<T: PartialEq>(slot: &mut Option<T>, value: T, name: &str) -> Result<(), LaunchError> {
    match slot {
        Some(old) if *old != value => Err(usage(format!("{name} is given twice"))),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// The options of satrun's command line, which no option's value can be:
/// `--topology -n 2 PROG` lacks the file, and reading `-n` as it would
/// leave `2` where a program's name goes.
const OPTION_NAMES: [&str; 14] = [
    "-n",
    "-np",
    "--np",
    "--topology",
    "--provider",
    "--enable-recovery",
    "--serve",
    "--servers",
    "--slots",
    "--listen",
    "--address-file",
    "-h",
    "--help",
    "--",
];

/// Refuses `value`, given to option `name`, when it is one of satrun's
/// options: the value was left out.
fn not_an_option(name: &str, value: &str) -> Result<(), LaunchError> {
    if OPTION_NAMES.contains(&value) {
        return Err(usage(format!(
            "{name} needs a value, and got the option {value}: write {name} VALUE (or \
             {name}=VALUE)"
        )));
    }
    Ok(())
}

/// `--topology FILE` or `--topology=FILE` in a program's own arguments (the
/// report's command lines pass it to the program, which hands it to the seed).
pub fn topology_in_program_args(args: &[OsString]) -> Option<PathBuf> {
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--topology" {
            return iter.next().map(PathBuf::from);
        }
        if let Some(value) = arg.as_bytes().strip_prefix(b"--topology=") {
            return Some(PathBuf::from(OsStr::from_bytes(value)));
        }
    }
    None
}

/// One process of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankPlan {
    pub rank: u32,
    pub program: OsString,
    pub args: Vec<OsString>,
}

/// A run checked and ready to start.
#[derive(Debug, Clone)]
pub struct Plan {
    pub ranks: Vec<RankPlan>,
    pub topology: Topology,
    /// The topology file, absolute, when one was given.
    pub topology_file: Option<PathBuf>,
    pub provider: Provider,
    /// Set for `satrun --serve`.
    pub service: Option<ServicePlan>,
    /// `--enable-recovery`.
    pub recovery: bool,
}

/// What `satrun --serve` adds to a plan.
#[derive(Debug, Clone)]
pub struct ServicePlan {
    pub listen: String,
    pub address_file: Option<PathBuf>,
    pub slots: u32,
}

/// Checks a service's command line and plans its server processes: each is
/// satrun itself, in its server role.
pub fn plan_service(args: &ServeArgs, env: &LaunchEnv) -> Result<Plan, LaunchError> {
    let system = |what: &str| {
        let what = what.to_owned();
        move |error| LaunchError::System { what, error }
    };
    // --topology, else (without --servers and --slots) SAT_TOPOLOGY.
    let file = match (&args.topology, args.sized) {
        (Some(path), _) => Some((path.clone(), false)),
        (None, false) => env.topology_file().map(|p| (p, true)),
        (None, true) => None,
    };
    let (topology, topology_file) = match file {
        Some((path, from_env)) => {
            let topology = Topology::from_file(&path)
                .and_then(|t| t.check_service().map(|()| t))
                .map_err(|e| from_env_topology(e, from_env))?;
            let canonical = std::fs::canonicalize(&path).map_err(system(&format!(
                "{}: cannot resolve the path",
                path.display()
            )))?;
            (topology, Some(canonical))
        }
        None => (Topology::service(args.servers, args.slots)?, None),
    };
    topology.check_service()?;
    let servers = topology.servers().len() as u32;
    if servers > MAX_PROCESSES {
        return Err(LaunchError::Refused(format!(
            "{}: {servers} servers; satrun starts at most {MAX_PROCESSES} processes, all on \
             this host (libfabric's shm provider reaches at most 256 peers)",
            topology.source()
        )));
    }
    let me = std::env::current_exe().map_err(system("finding satrun's own program"))?;
    let ranks = topology
        .servers()
        .into_iter()
        .map(|rank| RankPlan {
            rank,
            program: me.clone().into_os_string(),
            args: vec![crate::service::SERVER_PROCESS_ARG.into()],
        })
        .collect();
    let provider = choose_provider(args.provider.as_ref(), env.provider.as_deref(), false)?;
    let slots = topology.clients().len() as u32;
    Ok(Plan {
        ranks,
        topology,
        topology_file,
        provider,
        service: Some(ServicePlan {
            listen: args.listen.clone(),
            address_file: args.address_file.clone(),
            slots,
        }),
        recovery: false,
    })
}

/// Where a service's servers open their endpoints, and the address its
/// connection string names: the `--listen` address, or, when that is
/// unspecified (0.0.0.0, ::, to accept every interface), this host's
/// address towards its default route, else its first interface that is up
/// and not loopback, else loopback (said in a warning: other hosts cannot
/// attach then).
fn service_host(listen: IpAddr) -> IpAddr {
    if !listen.is_unspecified() {
        return listen;
    }
    // connect() on a UDP socket only picks the route: nothing is sent.
    let towards_default = std::net::UdpSocket::bind((listen, 0))
        .and_then(|s| {
            let probe: IpAddr = if listen.is_ipv4() {
                IpAddr::from([192, 0, 2, 1])
            } else {
                IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1])
            };
            s.connect((probe, 9))?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_unspecified() && !ip.is_loopback());
    if let Some(ip) = towards_default.or_else(|| sys::first_interface(listen.is_ipv4())) {
        return ip;
    }
    tracing::warn!(
        "satrun: no network interface but loopback: the service can be reached from this host only"
    );
    if listen.is_ipv4() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
    }
}

/// `--provider`, else the `env_provider` value of `SAT_PROVIDER`, else tcp
/// for a run with `recovery` and shm for any other; checked to be available
/// here. A run with recovery outlives processes killed at any moment, also
/// while they send, which can freeze libfabric 1.17's shm provider (its
/// queues' locks stay held: docs/DESIGN.md, "Killed processes and the shm
/// provider"); versions still go through host slots on one host. Asked for
/// shm all the same, satrun says so.
fn choose_provider(
    given: Option<&String>,
    env_provider: Option<&OsStr>,
    recovery: bool,
) -> Result<Provider, LaunchError> {
    let provider = match (given, env_provider) {
        (Some(name), _) => Provider::parse(name).map_err(LaunchError::UnknownProvider)?,
        (None, Some(name)) if !name.is_empty() => Provider::parse(&name.to_string_lossy())
            .map_err(|e| LaunchError::UnknownProvider(format!("SAT_PROVIDER: {e}")))?,
        _ if recovery => Provider::Tcp,
        _ => Provider::Shm,
    };
    check_provider(provider)?;
    if recovery && provider == Provider::Shm {
        eprintln!(
            "satrun: warning: a run with recovery over the shm provider can freeze when a process \
             is killed while it sends (libfabric's shm queues stay locked; docs/DESIGN.md, \
             \"Killed processes and the shm provider\"); without --provider, such a run uses tcp"
        );
    }
    Ok(provider)
}

impl Plan {
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }
}

/// Checks everything before a process starts: the topology (read, validated,
/// sized against the ranks), the provider (`--provider`, else the
/// `env_provider` value of `SAT_PROVIDER`, else shm) and the programs.
pub fn plan(args: &LaunchArgs, env: &LaunchEnv) -> Result<Plan, LaunchError> {
    check_process_count(args.apps.iter().map(|a| u64::from(a.count)).sum())?;
    // --enable-recovery, or SAT_RECOVERY=on; the two must agree.
    let recovery = match (args.recovery, env.recovery()?) {
        (true, Some(false)) => {
            return Err(LaunchError::Refused(format!(
                "--enable-recovery asks for recovery but SAT_RECOVERY={} says off: unset \
                 SAT_RECOVERY (or set it to on), or drop --enable-recovery",
                env.recovery
                    .as_deref()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .trim()
            )))
        }
        (flag, from_env) => flag || from_env == Some(true),
    };
    let mut ranks = Vec::new();
    for app in &args.apps {
        for _ in 0..app.count {
            let rank = u32::try_from(ranks.len()).map_err(|_| usage("too many processes"))?;
            ranks.push(RankPlan {
                rank,
                program: app.program.clone(),
                args: app.args.clone(),
            });
        }
    }
    let size = u32::try_from(ranks.len()).map_err(|_| usage("too many processes"))?;

    let file = find_topology_file(args, env)?;
    let topology = match &file {
        Some((path, from_env)) => Topology::from_file(path)
            .and_then(|t| t.check_size(size).map(|()| t))
            .map_err(|e| from_env_topology(e, *from_env))?,
        None => Topology::default_for(size),
    };
    topology.check_size(size)?;
    let topology_file = match file.map(|(path, _)| path) {
        Some(path) => Some(
            std::fs::canonicalize(&path).map_err(|error| LaunchError::System {
                what: format!("{}: cannot resolve the path", path.display()),
                error,
            })?,
        ),
        None => None,
    };

    let provider = choose_provider(args.provider.as_ref(), env.provider.as_deref(), recovery)?;

    let mut first = 0u32;
    for app in &args.apps {
        if let Err(reason) = check_program(&app.program) {
            return Err(LaunchError::Program {
                program: app.program.to_string_lossy().into_owned(),
                first,
                last: first + app.count - 1,
                reason,
            });
        }
        first += app.count;
    }

    Ok(Plan {
        ranks,
        topology,
        topology_file,
        provider,
        service: None,
        recovery,
    })
}

/// A topology error; one about the file `SAT_TOPOLOGY` names says so.
fn from_env_topology(error: TopologyError, from_env: bool) -> LaunchError {
    if from_env {
        LaunchError::Refused(format!(
            "{error} (the topology file SAT_TOPOLOGY names: fix it, unset SAT_TOPOLOGY or \
             give --topology FILE)"
        ))
    } else {
        error.into()
    }
}

/// satrun's `--topology`, else the first found in the programs' arguments
/// (two different files are an error), else `SAT_TOPOLOGY`; with whether
/// it came from `SAT_TOPOLOGY`.
fn find_topology_file(
    args: &LaunchArgs,
    env: &LaunchEnv,
) -> Result<Option<(PathBuf, bool)>, LaunchError> {
    let mut found: Option<(PathBuf, String)> = args
        .topology
        .clone()
        .map(|p| (p, "satrun's --topology".to_owned()));
    for app in &args.apps {
        if app.args.last().is_some_and(|a| a == "--topology") {
            // The seed would find no file there either, and the run would
            // go on under the default topology, unsaid.
            return Err(usage(format!(
                "the arguments of {} end with --topology and no file: write --topology FILE",
                app.program.to_string_lossy()
            )));
        }
        let Some(path) = topology_in_program_args(&app.args) else {
            continue;
        };
        let origin = format!("the --topology of {}", app.program.to_string_lossy());
        match &found {
            None => found = Some((path, origin)),
            Some((known, known_origin)) if !same_file(known, &path) => {
                return Err(usage(format!(
                    "{known_origin} is {} but {origin} is {}; name one topology",
                    known.display(),
                    path.display()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(match found {
        Some((path, _)) => Some((path, false)),
        None => env.topology_file().map(|path| (path, true)),
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether `program` names an executable file, directly or through PATH.
fn check_program(program: &OsStr) -> Result<(), String> {
    let executable = |path: &Path| -> Result<(), String> {
        let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
        if !meta.is_file() {
            return Err("not a file".into());
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err("not executable (chmod +x)".into());
        }
        Ok(())
    };
    if program.as_bytes().contains(&b'/') {
        return executable(Path::new(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| executable(&dir.join(program)).is_ok()) {
        Ok(())
    } else {
        Err("command not found in PATH".into())
    }
}

/// What the supervisor hears about.
enum Event {
    /// A rank's process has exited (not yet reaped).
    Exited(u32),
    /// satrun received a signal; `from_terminal` when the ranks got it too.
    Signal { sig: i32, from_terminal: bool },
}

/// Counts the output streams still open, so satrun can wait for the last
/// lines before exiting.
#[derive(Default)]
struct OpenStreams {
    count: Mutex<usize>,
    closed: Condvar,
}

impl OpenStreams {
    fn opened(&self) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    fn close(&self) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        self.closed.notify_all();
    }

    fn wait_all_closed(&self, timeout: Duration) {
        let guard = self.count.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.closed.wait_timeout_while(guard, timeout, |n| *n > 0);
    }
}

/// Writes `satrun: <message>` to stderr as one line.
fn notice(message: &str) {
    let line = format!("satrun: {message}\n");
    let mut err = io::stderr().lock();
    let _ = err.write_all(line.as_bytes());
    let _ = err.flush();
}

/// Removes what processes of this user left when they were killed with
/// nobody to clean up after them (a `satrun --serve` killed with SIGKILL
/// takes its servers with it), and says so: their shm regions, 16 MiB of RAM
/// each until removed (`transport/shm_files.rs` says what is taken and what
/// is left alone), and their servers' spill folders (`server/spill.rs`).
fn sweep_leftovers() {
    let pids = |pids: &mut Vec<u32>| {
        pids.sort_unstable();
        pids.dedup();
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match sweep_dead_regions() {
        Ok(swept) if swept.is_empty() => {}
        Ok(swept) => notice(&format!(
            "removed {} shared-memory file(s) in /dev/shm left by processes that no longer run \
             (pid {})",
            swept.len(),
            pids(&mut swept.iter().map(|r| r.pid).collect())
        )),
        Err(e) => tracing::debug!("no sweep of /dev/shm: {e}"),
    }
    match crate::server::spill::sweep_dead_folders() {
        Ok(swept) if swept.is_empty() => {}
        Ok(swept) => notice(&format!(
            "removed {} spill folder(s) left by servers that no longer run (pid {})",
            swept.len(),
            pids(&mut swept.iter().map(|f| f.pid).collect())
        )),
        Err(e) => tracing::debug!("no sweep of the spill folders: {e}"),
    }
}

/// Forwards a rank's stream line by line, each prefixed `[rank] `.
fn forward_lines(rank: u32, stream: impl Read, to_stderr: bool, open: Arc<OpenStreams>) {
    let prefix = format!("[{rank}] ");
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let mut line = Vec::with_capacity(256);
    let mut out = Vec::with_capacity(256);
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        out.clear();
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(&line);
        if !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        // Write errors (a closed satrun stdout) are ignored: the pipe keeps
        // being drained so the rank never blocks on a full pipe.
        if to_stderr {
            let mut err = io::stderr().lock();
            let _ = err.write_all(&out);
            let _ = err.flush();
        } else {
            let mut stdout = io::stdout().lock();
            let _ = stdout.write_all(&out);
            let _ = stdout.flush();
        }
    }
    open.close();
}

fn spawn_thread(name: String, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    thread::Builder::new()
        .name(name)
        .stack_size(128 * 1024)
        .spawn(f)
        .map(|_| ())
}

/// A rank that has been started.
struct Running {
    rank: u32,
    program: String,
    pid: u32,
    /// `None` once reaped.
    child: Option<Child>,
}

/// Starts the run and supervises it until every rank is gone; returns
/// satrun's exit status.
///
/// Meant for the satrun process itself: it blocks SIGINT, SIGTERM and SIGHUP
/// in the calling thread (a dedicated thread receives and forwards them) and
/// makes the process a child subreaper.
pub fn run(plan: &Plan) -> Result<i32, LaunchError> {
    let system = |what: &str| {
        let what = what.to_owned();
        move |error| LaunchError::System { what, error }
    };
    // Before any thread exists, so every thread inherits the blocked mask
    // and only the watcher below receives these signals (`main` blocked
    // them already, at its start; blocking again changes nothing).
    let signals = sys::block_forwarded_signals().map_err(system("blocking signals"))?;
    sys::become_subreaper();
    sweep_leftovers();
    let (events, inbox) = mpsc::channel::<Event>();
    // The first signal received, 0 before: no rank starts once it is set.
    // A signal that came before `run` (while `main` checked the run, with
    // the signals blocked) is taken here, before anything starts.
    let stopped = Arc::new(AtomicI32::new(
        sys::take_pending(&signals).map_or(0, |(sig, _)| sig),
    ));
    {
        let events = events.clone();
        let stopped = stopped.clone();
        spawn_thread("satrun-signals".into(), move || loop {
            let (sig, from_terminal) = sys::wait_signal(&signals);
            let _ = stopped.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
            if events.send(Event::Signal { sig, from_terminal }).is_err() {
                return;
            }
        })
        .map_err(system("starting the signal thread"))?;
    }
    // What satrun exits with when a signal stops it before any rank runs.
    let stopped_before_start = |sig: i32| {
        notice(&format!(
            "received {} before any process started; none was started",
            sys::signal_name(sig)
        ));
        if plan.service.is_some() {
            0
        } else {
            128 + sig
        }
    };

    // One secret per run, or per service: only the processes satrun starts
    // (and, for a service, those given its connection string) hold it, so
    // nobody else who reaches the seed's or the service's port joins. An
    // operator may choose a service's secret with SAT_SECRET.
    let secret = match &plan.service {
        Some(_) => Secret::from_env()
            .map_err(|e| LaunchError::Usage(e.to_string()))?
            .map_or_else(Secret::generate, Ok),
        None => Secret::generate(),
    }
    .map_err(|e| LaunchError::System {
        what: "making the run's secret".into(),
        error: io::Error::other(e.to_string()),
    })?;
    if let sig @ 1.. = stopped.load(Ordering::SeqCst) {
        return Ok(stopped_before_start(sig));
    }
    let (mut service_listener, address_file, seed_ip) = match &plan.service {
        Some(service) => {
            let (listener, file, host) = open_service(plan, service, &secret)?;
            (Some(listener), Some(file), host)
        }
        None => (None, None, IpAddr::from([127, 0, 0, 1])),
    };
    // A run's seed stays on loopback: its processes are all here. A
    // service's seed listens where clients attach, because its servers
    // open their endpoints on the address they reached the seed from, and
    // clients on other hosts must reach those endpoints.
    let listener = TcpListener::bind((seed_ip, 0))
        .map_err(system(&format!("opening the seed socket on {seed_ip}")))?;
    let seed = listener
        .local_addr()
        .map_err(system("reading the seed socket address"))?;
    let mut listener = Some(listener);
    let parent = sys::my_pid();
    let open_streams = Arc::new(OpenStreams::default());
    let mut running: Vec<Running> = Vec::with_capacity(plan.ranks.len());
    let mut start_failure: Option<i32> = None;
    let mut joins =
        joins::JoinNotices::open().map_err(system("opening the pipe ranks say they join by"))?;

    for rank in &plan.ranks {
        if stopped.load(Ordering::SeqCst) != 0 {
            // A signal came: start no more; the supervisor stops the
            // ranks already started.
            break;
        }
        let mut cmd = Command::new(&rank.program);
        cmd.args(&rank.args)
            .env("SAT_RANK", rank.rank.to_string())
            .env("SAT_SIZE", plan.size().to_string())
            .env("SAT_SEED", seed.to_string())
            .env(SECRET_VAR, secret.expose())
            .env("SAT_PROVIDER", plan.provider.name())
            .env("SAT_LAUNCHER", "satrun")
            .env("SAT_OUTPUT_PREFIXED", "1")
            .env("SAT_RECOVERY", if plan.recovery { "on" } else { "off" })
            .env_remove("SAT_SEED_FD")
            .env_remove(joins::JOIN_FD_VAR)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match &plan.topology_file {
            Some(path) => cmd.env("SAT_TOPOLOGY", path),
            None => cmd.env_remove("SAT_TOPOLOGY"),
        };
        for var in NO_BACKTRACE_VARS {
            if std::env::var_os(var).is_none() {
                cmd.env(var, "1");
            }
        }
        cmd.env_remove(crate::service::SERVICE_FD_VAR);
        if let Some(service) = &plan.service {
            cmd.env(crate::service::SERVICE_SLOTS_VAR, service.slots.to_string());
        }
        let service_fd = match (&service_listener, rank.rank) {
            (Some(l), 0) => Some(l.as_raw_fd()),
            _ => None,
        };
        if let Some(fd) = service_fd {
            cmd.env(crate::service::SERVICE_FD_VAR, fd.to_string());
        }
        let seed_fd = match (&listener, rank.rank) {
            (Some(l), 0) => Some(l.as_raw_fd()),
            _ => None,
        };
        let join_fd = joins.write_fd();
        if let Some(value) = joins.env_value() {
            cmd.env(joins::JOIN_FD_VAR, value);
        }
        if let Some(fd) = seed_fd {
            cmd.env("SAT_SEED_FD", fd.to_string());
            // Like mpirun: standard input goes to rank 0 only.
            cmd.stdin(Stdio::inherit());
        } else {
            cmd.stdin(Stdio::null());
        }
        // SAFETY: child_setup only makes async-signal-safe calls and
        // allocates nothing; it captures a pid and three optional
        // descriptors, plain integers.
        unsafe {
            cmd.pre_exec(move || sys::child_setup(parent, [seed_fd, service_fd, join_fd]));
        }
        let program = rank.program.to_string_lossy().into_owned();
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                notice(&format!("cannot start rank {} ({program}): {e}", rank.rank));
                start_failure = Some(match e.kind() {
                    io::ErrorKind::NotFound => 127,
                    io::ErrorKind::PermissionDenied => 126,
                    _ => 1,
                });
                break;
            }
        };
        if rank.rank == 0 {
            // Rank 0 holds the seed socket now; satrun's copy would keep the
            // port open after rank 0 is gone.
            listener = None;
            service_listener = None;
        }
        let pid = child.id();
        for (stream, to_stderr) in [
            (
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                false,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                true,
            ),
        ] {
            if let Some(stream) = stream {
                let open = open_streams.clone();
                open.opened();
                let r = rank.rank;
                if let Err(e) = spawn_thread(format!("satrun-out-{r}"), move || {
                    forward_lines(r, stream, to_stderr, open)
                }) {
                    open_streams.close();
                    notice(&format!("cannot forward the output of rank {r}: {e}"));
                }
            }
        }
        let events = events.clone();
        let r = rank.rank;
        let waiter = spawn_thread(format!("satrun-wait-{r}"), move || {
            let _ = sys::wait_exited_no_reap(pid);
            let _ = events.send(Event::Exited(r));
        });
        running.push(Running {
            rank: rank.rank,
            program,
            pid,
            child: Some(child),
        });
        if let Err(e) = waiter {
            notice(&format!("cannot watch rank {r}: {e}"));
            start_failure = Some(1);
            break;
        }
    }
    drop(listener);
    drop(service_listener);
    drop(events);
    joins.every_rank_started();

    if running.is_empty() && start_failure.is_none() {
        if let sig @ 1.. = stopped.load(Ordering::SeqCst) {
            if let Some(file) = address_file {
                file.remove();
            }
            return Ok(stopped_before_start(sig));
        }
    }
    let mode = match (&plan.service, plan.recovery) {
        (Some(_), _) => Mode::Service,
        (None, true) => Mode::Recovering(&plan.topology),
        (None, false) => Mode::Run,
    };
    let code = supervise(&mut running, &inbox, &mut joins, start_failure, mode);
    if let Some(file) = address_file {
        file.remove();
    }

    for r in &running {
        match remove_shm_leftovers(r.pid) {
            Ok(0) => {}
            Ok(n) => notice(&format!(
                "removed {n} shared-memory files left by rank {} (pid {})",
                r.rank, r.pid
            )),
            Err(e) => notice(&format!(
                "cannot remove the shared-memory files of rank {} (pid {}): {e}",
                r.rank, r.pid
            )),
        }
        if let Err(e) = crate::server::spill::remove_leftovers(r.pid) {
            notice(&format!(
                "cannot remove the spill folder of rank {} (pid {}): {e}",
                r.rank, r.pid
            ));
        }
    }
    open_streams.wait_all_closed(OUTPUT_DRAIN);
    sys::reap_orphans();
    Ok(code)
}

/// Opens the socket where processes attach to a service, writes its
/// connection string (`sat://SECRET@host:port`) to the address file, which
/// only its owner may read and which stays locked while the service runs,
/// and prints where it listens and where the connection string is (never
/// the secret: satrun's output often ends in a log). Returns the socket and
/// the address file.
fn open_service(
    plan: &Plan,
    service: &ServicePlan,
    secret: &Secret,
) -> Result<(TcpListener, AddressFile, IpAddr), LaunchError> {
    let listener = TcpListener::bind(&service.listen).map_err(|error| LaunchError::System {
        what: format!(
            "cannot listen for clients on {} (--listen HOST:PORT; port 0 picks a free one)",
            service.listen
        ),
        error,
    })?;
    let address = listener.local_addr().map_err(|error| LaunchError::System {
        what: "reading the service's address".into(),
        error,
    })?;
    let host = service_host(address.ip());
    let address = SocketAddr::new(host, address.port());
    let path = match &service.address_file {
        Some(path) => path.clone(),
        None => default_address_file(address.port())?,
    };
    let connection = ServiceAddress {
        host_port: address.to_string(),
        secret: Some(secret.clone()),
    };
    // The address file's one line; the string is wiped when dropped.
    let mut line = connection.connection_string();
    line.push('\n');
    let file = match write_private(&path, &line) {
        Ok(file) => file,
        Err(Published::InUse) => {
            return Err(LaunchError::Refused(format!(
                "{}: another service is using this address file (it holds it locked while \
                 it runs): stop that service, or give this one another --address-file",
                path.display()
            )))
        }
        Err(Published::Failed(error)) => {
            return Err(LaunchError::System {
                what: format!("writing the service's address to {}", path.display()),
                error,
            })
        }
    };
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "SAT service listening on {address} ({} server{}, {} client slots, provider {}); \
         connect with the string in {} (only you can read it)",
        plan.ranks.len(),
        if plan.ranks.len() == 1 { "" } else { "s" },
        service.slots,
        plan.provider,
        path.display()
    );
    let _ = out.flush();
    Ok((listener, AddressFile { path, file }, host))
}

/// A service's address file, locked (`flock`) through `file` for as long
/// as the service runs, so that a second service given the same file
/// refuses to start instead of replacing it.
struct AddressFile {
    path: PathBuf,
    file: std::fs::File,
}

impl AddressFile {
    /// Removes the file, if it is still the one this service wrote; the
    /// lock goes with it.
    fn remove(self) {
        use std::os::unix::fs::MetadataExt;
        let ours = match (std::fs::symlink_metadata(&self.path), self.file.metadata()) {
            (Ok(at_path), Ok(mine)) => at_path.dev() == mine.dev() && at_path.ino() == mine.ino(),
            _ => false,
        };
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Where a service's connection string goes when no `--address-file` is
/// given: `$XDG_RUNTIME_DIR/sat/service-PORT`, else `~/.sat/service-PORT`,
/// in a folder only the user may enter: made so when it does not exist,
/// tightened to 0700 (said on stderr) when it is the user's and others may
/// enter it, refused when it is another user's.
fn default_address_file(port: u16) -> Result<PathBuf, LaunchError> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty() && Path::new(d).is_dir())
        .map(|d| PathBuf::from(d).join("sat"))
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".sat"))
        })
        .ok_or_else(|| {
            LaunchError::Usage(
                "neither XDG_RUNTIME_DIR nor HOME is set: give --address-file FILE, \
                 where the service's connection string goes"
                    .into(),
            )
        })?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
        .map_err(|error| LaunchError::System {
            what: format!("creating {}", base.display()),
            error,
        })?;
    private_folder(&base)?;
    Ok(base.join(format!("service-{port}")))
}

/// Checks that `dir` (which exists) is a folder of this user's that nobody
/// else may enter, making it so when it is this user's.
fn private_folder(dir: &Path) -> Result<(), LaunchError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|error| LaunchError::System {
        what: format!("reading {}", dir.display()),
        error,
    })?;
    if !meta.is_dir() {
        return Err(LaunchError::Refused(format!(
            "{} is not a folder (a symbolic link or a file), where the service's address \
             file goes: remove it, or give --address-file FILE",
            dir.display()
        )));
    }
    let me = sys::my_uid();
    if meta.uid() != me {
        return Err(LaunchError::Refused(format!(
            "{} belongs to user {}, not to you (user {me}): its owner could read the \
             service's connection string there; remove it, or give --address-file FILE",
            dir.display(),
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|error| {
            LaunchError::System {
                what: format!("making {} private (mode 0700)", dir.display()),
                error,
            }
        })?;
        notice(&format!(
            "{} had mode {mode:04o}: made it 0700, so that only you may enter the folder \
             that holds the services' connection strings",
            dir.display()
        ));
    }
    Ok(())
}

/// Why [`write_private`] did not write.
enum Published {
    /// The file is locked by a service that runs.
    InUse,
    Failed(io::Error),
}

impl From<io::Error> for Published {
    fn from(error: io::Error) -> Published {
        Published::Failed(error)
    }
}

/// Writes `text` to `path` readable and writable by its owner only,
/// whole: a reader never sees half of it, and nobody else sees any of it.
/// Returns the file, locked (`flock`, exclusive) until it is closed; a
/// `path` that another process holds locked is left as it is.
///
/// The text goes to a new file, locked before it gets its name, so the file
/// at `path` is always locked while its service runs. It takes the name by
/// `link`, which never replaces a file (two services starting at the same
/// moment cannot both succeed); a file already there is replaced (by
/// `rename`) only once this process holds its lock, so no running service's
/// file is replaced, and the one a dead service left is.
fn write_private(path: &Path, text: &str) -> Result<std::fs::File, Published> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            sys::try_lock(&f)?;
            Ok(f)
        });
    let file = match written {
        Ok(file) => file,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
    };
    let placed = place_locked(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    placed.map(|()| file)
}

/// Gives the locked file `tmp` the name `path` (see [`write_private`]).
fn place_locked(tmp: &Path, path: &Path) -> Result<(), Published> {
    if std::fs::hard_link(tmp, path).is_ok() {
        return Ok(());
    }
    // A file is there (or links are not supported here):
    // O_NONBLOCK: a FIFO put there does not block the open; O_NOFOLLOW: a
    // symbolic link is replaced, never followed.
    let existing = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    // Held locked until the rename is done.
    let _held = match existing {
        Ok(f) => match sys::try_lock(&f) {
            Ok(()) => Some(f),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(Published::InUse),
            Err(e) => return Err(e.into()),
        },
        // Nothing there, a symbolic link, or a file we may not read: the
        // rename says whether it may be replaced.
        Err(_) => None,
    };
    std::fs::rename(tmp, path)?;
    Ok(())
}

/// Waits for every rank; on the first failure (or a signal to satrun, or a
/// rank that could not start) stops the others: SIGTERM, then SIGKILL after
/// [`TERMINATE_GRACE`]. Returns satrun's exit status.
/// What a failed process means to the rest.
#[derive(Clone, Copy)]
enum Mode<'t> {
    /// Any failure stops every process.
    Run,
    /// `--enable-recovery`: a client's failure is reported and the others go
    /// on; a server's stops every process, but for one of a topology with
    /// replicated homes other than the seed.
    Recovering(&'t Topology),
    /// A service: ends by a signal.
    Service,
}

/// How often satrun looks for a rank joining while one has left without
/// joining and none has joined yet (a run of programs that do not use SAT
/// looks that often until it ends).
const JOIN_LOOK: Duration = Duration::from_millis(100);

fn supervise(
    running: &mut [Running],
    inbox: &mpsc::Receiver<Event>,
    joins: &mut joins::JoinNotices,
    start_failure: Option<i32>,
    mode: Mode<'_>,
) -> i32 {
    let service = matches!(mode, Mode::Service);
    let mut live = running.len();
    let mut code: Option<i32> = start_failure;
    let mut kill_at: Option<Instant> = None;
    let mut give_up_at: Option<Instant> = None;
    if start_failure.is_some() {
        kill_at = Some(stop_all(running, libc::SIGTERM));
    }
    // The ranks that began to join (and the seed's word that the run
    // started), and the first other than the seed that exited with status 0
    // before it joined (`launcher/joins.rs`).
    use std::collections::BTreeSet;
    let mut joined = BTreeSet::<u32>::new();
    let mut left_unjoined: Option<u32> = None;
    // The ranks whose exit handler said they exited inside their role.
    let mut left_role = BTreeSet::<u32>::new();
    let mut take_records = |joined: &mut BTreeSet<u32>, left_role: &mut BTreeSet<u32>| {
        for record in joins.drain() {
            if record != joins::STARTED && record & joins::LEFT_ROLE != 0 {
                left_role.insert(record & !joins::LEFT_ROLE);
            } else {
                joined.insert(record);
            }
        }
    };
    while live > 0 {
        let looking = left_unjoined.is_some()
            && !joined.contains(&0)
            && kill_at.is_none()
            && give_up_at.is_none();
        let deadline = give_up_at
            .or(kill_at)
            .or(looking.then(|| Instant::now() + JOIN_LOOK));
        let event = match deadline {
            Some(t) => inbox.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match event {
            Ok(Event::Exited(rank)) => {
                let Some(r) = running.iter_mut().find(|r| r.rank == rank) else {
                    continue;
                };
                let Some(mut child) = r.child.take() else {
                    continue;
                };
                live -= 1;
                let status = match child.wait() {
                    Ok(status) => status,
                    Err(e) => {
                        notice(&format!("cannot reap rank {rank}: {e}"));
                        ExitStatus::from_raw(1 << 8)
                    }
                };
                // A rank writes its records before it can exit, so the pipe
                // holds them by now.
                take_records(&mut joined, &mut left_role);
                if status.success() && rank != 0 && !joined.contains(&rank) {
                    left_unjoined = left_unjoined.or(Some(rank));
                }
                // A C client that called exit() inside its role ended with
                // status 0, but its run fails for it, and the server that
                // lost it would be named instead.
                let in_role = status.success() && left_role.contains(&rank);
                let failed = !status.success() || in_role;
                let what = if in_role {
                    "exited with status 0 inside its role (exit() or a return from main while \
                     sat_bootstrap ran it)"
                        .to_string()
                } else {
                    describe(status)
                };
                // A server other than the seed, when its backups can take
                // its part over (`server/failover.rs`).
                let goes_on = match mode {
                    Mode::Recovering(t) => !t.is_server(rank) || (t.replication() > 1 && rank != 0),
                    _ => false,
                };
                if failed && goes_on && kill_at.is_none() {
                    notice(&format!(
                        "rank {rank} ({}) {what}; the run goes on without it (--enable-recovery)",
                        r.program,
                    ));
                    code.get_or_insert(match status.code() {
                        Some(c) if c != 0 => c,
                        _ => 1,
                    });
                } else if failed && kill_at.is_none() && give_up_at.is_none() {
                    // The first failure that stops the run (the failures
                    // its stopping causes are not news).
                    notice(&format!("rank {rank} ({}) {what}", r.program));
                    code.get_or_insert(match status.code() {
                        Some(c) if c != 0 => c,
                        _ => 1,
                    });
                    if live > 0 {
                        notice(&format!(
                            "stopping the {live} other running rank{}",
                            if live == 1 { "" } else { "s" }
                        ));
                        kill_at = Some(stop_all(running, libc::SIGTERM));
                    }
                }
            }
            Ok(Event::Signal { sig, from_terminal }) => {
                if kill_at.is_some() || give_up_at.is_some() {
                    // A second signal while stopping: no more grace.
                    notice(&format!(
                        "{}: killing every rank now",
                        sys::signal_name(sig)
                    ));
                    stop_all(running, libc::SIGKILL);
                    kill_at = None;
                    give_up_at = Some(Instant::now() + TERMINATE_GRACE);
                    continue;
                }
                notice(&format!(
                    "received {}; stopping the {live} running rank{}",
                    sys::signal_name(sig),
                    if live == 1 { "" } else { "s" }
                ));
                // A service ends by a signal: that is its normal stop.
                code.get_or_insert(if service { 0 } else { 128 + sig });
                // From the terminal, the ranks (in satrun's process group)
                // received the signal too; only their descendants need it.
                let sig_to_ranks = if from_terminal { 0 } else { sig };
                kill_at = Some(stop_all_with(running, sig_to_ranks, sig));
            }
            Err(RecvTimeoutError::Timeout) if looking => {}
            Err(RecvTimeoutError::Timeout) => {
                if give_up_at.is_some() {
                    let left: Vec<String> = running
                        .iter()
                        .filter(|r| r.child.is_some())
                        .map(|r| format!("{} (pid {})", r.rank, r.pid))
                        .collect();
                    notice(&format!(
                        "ranks {} did not exit after SIGKILL; giving up on them",
                        left.join(", ")
                    ));
                    break;
                }
                notice(&format!(
                    "{live} rank{} still running {} s after SIGTERM: sending SIGKILL",
                    if live == 1 { "" } else { "s" },
                    TERMINATE_GRACE.as_secs()
                ));
                stop_all(running, libc::SIGKILL);
                kill_at = None;
                give_up_at = Some(Instant::now() + TERMINATE_GRACE);
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
        take_records(&mut joined, &mut left_role);
        // Only before the run started, and once the seed joined: a rank
        // seen to leave then cannot have joined silently (its SAT process
        // would have passed the global barrier, which the seed's record
        // precedes), and the seed waits for it.
        let before_start = joined.contains(&0) && !joined.contains(&joins::STARTED);
        if let (Some(gone), true, None, None) = (left_unjoined, before_start, kill_at, give_up_at) {
            if live > 0 {
                let program = running
                    .iter()
                    .find(|r| r.rank == gone)
                    .map_or("?", |r| r.program.as_str());
                notice(&format!(
                    "rank {gone} ({program}) exited with status 0 before it joined the run, and \
                     rank 0 has joined: a run starts only once every rank has joined, so this \
                     one cannot (is rank {gone}'s program one that uses SAT?); stopping the \
                     {live} running rank{}",
                    if live == 1 { "" } else { "s" }
                ));
                code.get_or_insert(1);
                kill_at = Some(stop_all(running, libc::SIGTERM));
            }
        }
    }
    code.unwrap_or(0)
}

/// Sends `sig` to every rank still running and to its descendants; returns
/// the moment to escalate to SIGKILL.
fn stop_all(running: &[Running], sig: i32) -> Instant {
    stop_all_with(running, sig, sig)
}

/// Sends `to_ranks` (0: nothing) to the ranks still running and
/// `to_descendants` to their descendants.
fn stop_all_with(running: &[Running], to_ranks: i32, to_descendants: i32) -> Instant {
    let alive: Vec<u32> = running
        .iter()
        .filter(|r| r.child.is_some())
        .map(|r| r.pid)
        .collect();
    for pid in sys::descendants(&alive) {
        let _ = sys::send_signal(pid, to_descendants);
    }
    if to_ranks != 0 {
        for &pid in &alive {
            if let Err(e) = sys::send_signal(pid, to_ranks) {
                notice(&format!("cannot signal pid {pid}: {e}"));
            }
        }
    }
    Instant::now() + TERMINATE_GRACE
}

/// "exited with status 3", "was killed by signal SIGKILL (9)".
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!(
            "was killed by signal {} ({sig}){}",
            sys::signal_name(sig),
            if status.core_dumped() {
                ", core dumped"
            } else {
                ""
            }
        ),
        _ => format!("ended with {status}"),
    }
}

/// Blocks the signals satrun forwards (SIGINT, SIGTERM, SIGHUP), before
/// anything else runs in the process (`satrun`'s `.preinit_array`); [`main`]
/// unblocks them again where satrun plays a service's server.
pub fn block_signals_at_start() {
    let _ = sys::block_forwarded_signals();
}

/// Debug builds only: `SAT_SATRUN_TEST_HOLD=DIR` makes satrun, in the
/// middle of its checks, create `DIR/holding` and wait until `DIR/go`
/// exists, so that a test can send a signal exactly then (a signal that
/// comes while satrun checks the run must still stop it with the documented
/// status). Release builds ignore the variable.
fn hold_in_checks() {
    if !cfg!(debug_assertions) {
        return;
    }
    let Some(dir) = std::env::var_os("SAT_SATRUN_TEST_HOLD").map(PathBuf::from) else {
        return;
    };
    if std::fs::write(dir.join("holding"), b"").is_err() {
        return;
    }
    while !dir.join("go").exists() {
        thread::sleep(Duration::from_millis(2));
    }
}

/// The whole of satrun: parse, check, run. Returns the exit status; errors
/// are printed as `satrun: <error>`.
pub fn main<I>(args: I) -> i32
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args
        .first()
        .is_some_and(|a| a == crate::service::SERVER_PROCESS_ARG)
    {
        // satrun started this process as a server of a service: the
        // signals take their usual course (satrun sets IPATH_NO_BACKTRACE
        // and HFI_NO_BACKTRACE for it, so no library's handler is there).
        if let Err(e) = sys::unblock_forwarded_signals() {
            notice(&format!("service server: unblocking signals: {e}"));
            return 1;
        }
        return match crate::service::serve() {
            Ok(()) => 0,
            Err(e) => {
                notice(&format!("service server: {e}"));
                1
            }
        };
    }
    // First of all, before any thread exists and before libfabric is
    // loaded (checking the provider loads it, and some of its providers'
    // libraries install SIGINT and SIGTERM handlers): from here on these
    // signals wait, blocked, for the thread of `run` that handles them, so
    // a signal that comes while satrun checks the run still stops it with
    // the documented status.
    if let Err(e) = sys::block_forwarded_signals() {
        notice(&format!("blocking signals: {e}"));
        return EXIT_NOT_STARTED;
    }
    let env = LaunchEnv::from_process();
    let outcome = parse_args(args).and_then(|invocation| match invocation {
        Invocation::Help => {
            let mut out = io::stdout().lock();
            let _ = out.write_all(USAGE.as_bytes());
            let _ = out.flush();
            Ok(None)
        }
        Invocation::Run(args) => {
            check_settings(|name| std::env::var(name).ok())?;
            hold_in_checks();
            Ok(Some(plan(&args, &env)?))
        }
        Invocation::Serve(args) => {
            check_settings(|name| std::env::var(name).ok())?;
            hold_in_checks();
            Ok(Some(plan_service(&args, &env)?))
        }
    });
    let plan = match outcome {
        Ok(Some(plan)) => plan,
        Ok(None) => return 0,
        Err(e) => {
            notice(&e.to_string());
            return EXIT_NOT_STARTED;
        }
    };
    match run(&plan) {
        Ok(code) => code,
        Err(e) => {
            notice(&e.to_string());
            EXIT_NOT_STARTED
        }
    }
}

#[cfg(test)]
mod tests;
