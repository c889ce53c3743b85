//! The seed exchange (section 3 of the SAT report): every process contacts
//! rank 0 over a plain TCP socket, the seed decides the provider, hands out
//! the topology and the table of libfabric addresses, and releases everyone
//! at once (the global barrier before roles start).
//!
//! The steps, each a round trip with every rank:
//! 0. `Hello` (rank, size, host, pid, provider asked for, a handshake
//!    token) -> `Challenge` (the seed's token and proof) -> `Proof`: the run's secret,
//!    proved both ways without being sent ([`crate::auth`]). The seed hears
//!    a process's claims only once it has proved it; one that cannot is
//!    told why and ignored, and the run goes on waiting for the real rank;
//! 1. -> `Setup` (provider, topology);
//! 2. `Address` (this rank's endpoint name) -> `Table` (all names, by rank);
//! 3. `Ready` (the table is in the address vector) -> `Go`.
//!
//! Any failure anywhere ends in `Abort(reason)` sent to every connected rank,
//! so that all processes stop with the same message instead of waiting for a
//! peer that will never come.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bincode::{Decode, Encode};

use super::env::RunEnv;
use crate::auth::{self, Handshake, Nonce, Proof, Secret, Side, SECRET_VAR};
use crate::error::{SatError, SatResult};
use crate::topology::Topology;
use crate::transport::doorbell::BellPlace;
use crate::transport::{Provider, Rank};
use crate::wire::WIRE_VERSION;

/// How the seed is named in messages.
const SEED_NAME: &str = "the seed (rank 0)";

/// The largest bootstrap frame (topology plus address table).
const MAX_FRAME: usize = 64 << 20;
/// How long the seed waits for a connection's hello (each on its own
/// thread), and how many it waits for at once: a joining process says hello
/// as soon as it connects, and sockets that never speak must not hold a
/// thread each for long.
const HELLO_WAIT: Duration = Duration::from_secs(10);
const MAX_PENDING_HELLOS: usize = 256;
/// How often the seed, gathering, looks at the hellos heard.
const SEED_TICK: Duration = Duration::from_millis(5);

#[derive(Debug, Encode, Decode)]
pub(crate) enum ToSeed {
    Hello {
        wire_version: u32,
        rank: Rank,
        size: u32,
        pid: u32,
        host: String,
        provider: Option<Provider>,
        /// The process's handshake token ([`crate::auth::Handshake`]).
        nonce: Nonce,
    },
    /// The endpoint name, and where this rank's doorbell is
    /// (`transport/doorbell.rs`), if it has one.
    Address(Vec<u8>, Option<BellPlace>),
    Ready,
    /// This rank cannot go on (for example its endpoint did not open).
    Failed(String),
    /// The joining process's proof of holding the run's secret. (New
    /// messages go last, so that processes of other versions still decode
    /// the old ones: see [`hello_version`].)
    Proof(Option<Proof>),
    /// After the bootstrap, in a run with recovery: this process is alive
    /// ([`super::watch`]).
    Beat,
    /// This process is done with the run: its watch connection closing is
    /// no news ([`super::watch`]).
    Bye,
}

impl ToSeed {
    /// The message's name, for logs (never its contents: a hostile peer's
    /// bytes have no business in the debug stream).
    fn kind(&self) -> &'static str {
        match self {
            ToSeed::Hello { .. } => "Hello",
            ToSeed::Address(..) => "Address",
            ToSeed::Ready => "Ready",
            ToSeed::Failed(_) => "Failed",
            ToSeed::Proof(_) => "Proof",
            ToSeed::Beat => "Beat",
            ToSeed::Bye => "Bye",
        }
    }
}

#[derive(Debug, Encode, Decode)]
pub(crate) enum FromSeed {
    Setup {
        provider: Provider,
        topology: Topology,
        one_host: bool,
        /// The lease in seconds when the run has recovery on.
        recovery: Option<u64>,
        /// The run's id ([`Setup::run_id`]).
        run_id: RunId,
    },
    /// Endpoint names and doorbells, by rank.
    Table(Vec<Vec<u8>>, Vec<Option<BellPlace>>),
    Go,
    Abort(String),
    /// The seed's handshake token and its proof of holding the run's secret.
    Challenge {
        nonce: Nonce,
        proof: Option<Proof>,
    },
    /// After the bootstrap, in a run with recovery: the seed is alive.
    Beat,
    /// The run ended well: the seed is about to go, and its connection
    /// closing from now on is no news ([`super::watch`]).
    Ended,
}

/// What step 2 gives every rank: the endpoint names and the doorbells, by
/// rank.
pub type Tables = (Vec<Vec<u8>>, Vec<Option<BellPlace>>);

/// A run's name: random, made by the seed for each run, shared by every
/// process of it. Unrelated to the run's secret (which the statistics files
/// that carry the id must not help to guess).
pub type RunId = [u8; 16];

/// What every rank learns in step 1.
#[derive(Debug, Clone)]
pub struct Setup {
    pub provider: Provider,
    pub topology: Topology,
    /// The local address libfabric's tcp provider should bind: the one this
    /// process uses to reach the seed (so it is on the network the peers share).
    pub local_ip: IpAddr,
    /// Every rank of the run is on one host (the seed compared the host
    /// names they reported): homes may keep versions in host segments.
    pub one_host: bool,
    /// The run outlives a lost client (`SAT_RECOVERY` at the seed): the
    /// lease of every process's watch ([`super::watch`]).
    pub recovery: Option<Duration>,
    /// Names the run in the statistics files (docs/STATISTICS.md), so that
    /// the files of two runs are not taken for one.
    pub run_id: RunId,
}

/// This process's link to the seed, for the duration of the bootstrap.
pub enum SeedLink {
    Seed(Seed),
    Peer(Peer),
}

pub struct Seed {
    size: u32,
    /// Connections by rank (index 0, the seed itself, stays empty).
    conns: Vec<Option<TcpStream>>,
    hosts: Vec<String>,
    pids: Vec<u32>,
    asked: Vec<Option<Provider>>,
    local_ip: IpAddr,
    deadline: Instant,
}

pub struct Peer {
    stream: TcpStream,
    local_ip: IpAddr,
    deadline: Instant,
}

pub(crate) fn encode_frame<T: Encode>(msg: &T) -> Vec<u8> {
    let body = bincode::encode_to_vec(msg, bincode::config::standard())
        .expect("bootstrap messages always encode");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    frame
}

pub(crate) fn send<T: Encode>(stream: &mut TcpStream, msg: &T) -> std::io::Result<()> {
    stream.write_all(&encode_frame(msg))
}

pub(crate) fn recv<T: Decode<()>>(
    stream: &mut TcpStream,
    deadline: Instant,
    from: &str,
) -> SatResult<T> {
    decode(&recv_frame(stream, deadline, from)?, from)
}

/// Reads one frame's body, growing the buffer as bytes come.
pub(crate) fn recv_frame(
    stream: &mut TcpStream,
    deadline: Instant,
    from: &str,
) -> SatResult<Vec<u8>> {
    let mut stream = ByDeadline { stream, deadline };
    let io = |e: std::io::Error| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            SatError::Timeout(format!("{from} did not answer during the bootstrap"))
        } else {
            SatError::Bootstrap(format!("lost the bootstrap connection with {from}: {e}"))
        }
    };
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).map_err(io)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(SatError::Bootstrap(format!(
            "{from} sent a bootstrap frame of {len} bytes: not a SAT process?"
        )));
    }
    // Grown as bytes come, not allocated at the length a peer claims: a
    // frame that announces 64 MiB and sends nothing costs nothing.
    let mut body = Vec::new();
    let got = (&mut stream)
        .take(len as u64)
        .read_to_end(&mut body)
        .map_err(io)?;
    if got < len {
        return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(body)
}

/// A stream read until a deadline, whatever comes before it: each read
/// waits only for the time left. (A timeout set once would be the limit of
/// each read, and a peer sending a byte now and then would never reach it.)
struct ByDeadline<'s> {
    stream: &'s mut TcpStream,
    deadline: Instant,
}

impl Read for ByDeadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that sends a frame a byte at a time, each well within the
    /// time left, is cut off at the deadline, not given its time per byte.
    #[test]
    fn a_frame_that_drips_in_is_cut_off_at_the_deadline() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = listener.local_addr().unwrap();
        let dripper = std::thread::spawn(move || {
            let mut s = TcpStream::connect(at).unwrap();
            let frame: Vec<u8> = 16u32.to_le_bytes().into_iter().chain([7u8; 16]).collect();
            for b in frame {
                if s.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let (mut stream, _) = listener.accept().unwrap();
        // The whole frame takes 2 s to come; the deadline is 0.5 s away.
        let got = recv_frame(
            &mut stream,
            Instant::now() + Duration::from_millis(500),
            "a peer",
        );
        assert!(matches!(got, Err(SatError::Timeout(_))), "{got:?}");
        drop(stream);
        dripper.join().unwrap();
    }
}

/// Decodes a frame's body.
pub(crate) fn decode<T: Decode<()>>(body: &[u8], from: &str) -> SatResult<T> {
    // Bounded: a length inside the frame that claims more than a frame can
    // hold is an error, never an allocation of that size.
    let config = bincode::config::standard().with_limit::<MAX_FRAME>();
    let (msg, _) = bincode::decode_from_slice(body, config).map_err(|e| {
        SatError::Bootstrap(format!(
            "{from} sent an undecodable bootstrap message ({e}): is it the same SAT version?"
        ))
    })?;
    Ok(msg)
}

/// The wire version a hello that did not decode claims, if it is a hello:
/// every version's hello starts with its variant (0) and the version, so a
/// process of another SAT version can be told why it is refused.
pub(crate) fn hello_version(body: &[u8]) -> Option<u32> {
    let config = bincode::config::standard().with_limit::<16>();
    match bincode::decode_from_slice::<(u32, u32), _>(body, config) {
        Ok(((0, version), _)) => Some(version),
        _ => None,
    }
}

/// Without a secret, a seed must be reachable from this host only.
fn check_secret_for(env: &RunEnv, addrs: &[SocketAddr]) -> SatResult<()> {
    if env.secret.is_none() && addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(SatError::Bootstrap(format!(
            "the seed (SAT_SEED={}) is not on loopback, so every process of the run needs the \
             run's secret: set {SECRET_VAR} to the same random string for every process \
             (16 characters or more, for example `openssl rand -hex 32`; mpirun -x {SECRET_VAR})",
            env.seed.as_deref().unwrap_or("?")
        )));
    }
    Ok(())
}

impl SeedLink {
    /// Step 0: rank 0 opens (or inherits) the seed socket and waits for every
    /// other rank's `Hello`; the others connect to it and say hello.
    pub fn connect(env: &RunEnv, timeout: Duration) -> SatResult<SeedLink> {
        let deadline = Instant::now() + timeout;
        if env.rank == 0 {
            Seed::gather(env, deadline).map(SeedLink::Seed)
        } else {
            Peer::connect(env, deadline).map(SeedLink::Peer)
        }
    }

    /// Step 1. The seed calls `topology` to load the run's topology (so that
    /// only rank 0 reads the file, as in the report); `topology` checks it
    /// fits the processes that started.
    pub fn setup(&mut self, topology: impl FnOnce() -> SatResult<Topology>) -> SatResult<Setup> {
        match self {
            SeedLink::Seed(seed) => seed.setup(topology),
            SeedLink::Peer(peer) => peer.setup(),
        }
    }

    /// Step 2: exchange endpoint names and doorbells; returns the tables
    /// indexed by rank.
    pub fn exchange_addresses(
        &mut self,
        mine: &[u8],
        bell: Option<BellPlace>,
    ) -> SatResult<Tables> {
        match self {
            SeedLink::Seed(seed) => seed.exchange_addresses(mine, bell),
            SeedLink::Peer(peer) => {
                send(&mut peer.stream, &ToSeed::Address(mine.to_vec(), bell)).map_err(lost)?;
                match peer.recv()? {
                    FromSeed::Table(t, bells) if bells.len() == t.len() => Ok((t, bells)),
                    other => Err(unexpected(&other)),
                }
            }
        }
    }

    /// Step 3: the global barrier before roles start.
    pub fn barrier(&mut self) -> SatResult<()> {
        match self {
            SeedLink::Seed(seed) => seed.barrier(),
            SeedLink::Peer(peer) => {
                send(&mut peer.stream, &ToSeed::Ready).map_err(lost)?;
                match peer.recv()? {
                    FromSeed::Go => Ok(()),
                    other => Err(unexpected(&other)),
                }
            }
        }
    }

    /// After the global barrier, in a run with recovery: keeps the
    /// connections open as the run's watch ([`super::watch`]).
    ///
    /// `fence_local`: the run keeps versions in host slots, which its
    /// processes write in place.
    pub fn into_watch(
        self,
        judge: super::watch::Judge,
        fence_local: bool,
    ) -> SatResult<super::watch::Watch> {
        use super::watch::{Fatal, PeerWatch, SeedWatch, Watch};
        let failed =
            |e: std::io::Error| SatError::Bootstrap(format!("cannot start the run's watch: {e}"));
        match self {
            SeedLink::Seed(mut seed) => {
                let conns = std::mem::take(&mut seed.conns);
                // Processes of this host that may hold locks on host slots
                // are fenced: a lost one is killed, and gone, before its
                // home frees its locks, so that it cannot wake and write
                // into a slot another process has taken since.
                // A pid is believed only of the process that holds the
                // rank's connection: any process with the secret could
                // otherwise name another one, or the seed's own group
                // (pid 0), to be killed.
                let fence = (0..seed.size as usize)
                    .map(|r| {
                        // The seed itself has no connection to watch.
                        let conn = conns.get(r).and_then(Option::as_ref)?;
                        let ours = seed.hosts[r] == seed.hosts[0] && seed.pids[r] != 0;
                        let pid = seed.pids[r];
                        if ours && fence_local && !crate::os::pid_holds_peer(conn, pid) {
                            tracing::warn!(
                                "rank {r} says it is pid {pid} of this host, which does not hold \
                                 its connection (or cannot be seen from here): if it is lost, no \
                                 process is killed for it"
                            );
                            return None;
                        }
                        (ours && fence_local).then_some(pid)
                    })
                    .collect();
                SeedWatch::start(conns, judge, fence)
                    .map(Watch::Seed)
                    .map_err(failed)
            }
            SeedLink::Peer(peer) => {
                { PeerWatch::start(peer.stream, judge, Fatal::default(), SEED_NAME.into()) }
                    .map(Watch::Peer)
                    .map_err(failed)
            }
        }
    }

    /// Reports a local failure so that the whole run stops with its reason.
    pub fn fail(&mut self, reason: &str) {
        match self {
            SeedLink::Seed(seed) => seed.abort(reason),
            SeedLink::Peer(peer) => {
                let _ = send(&mut peer.stream, &ToSeed::Failed(reason.to_string()));
            }
        }
    }
}

fn lost(e: std::io::Error) -> SatError {
    SatError::Bootstrap(format!("lost the connection to the seed (rank 0): {e}"))
}

fn unexpected(msg: &FromSeed) -> SatError {
    match msg {
        FromSeed::Abort(reason) => SatError::Aborted(reason.clone()),
        other => SatError::Bootstrap(format!("the seed sent {other:?} out of turn")),
    }
}

impl Peer {
    fn connect(env: &RunEnv, deadline: Instant) -> SatResult<Peer> {
        let seed = env
            .seed
            .as_deref()
            .expect("discover() requires SAT_SEED when size > 1");
        let addrs: Vec<SocketAddr> = seed
            .to_socket_addrs()
            .map_err(|e| {
                SatError::Bootstrap(format!(
                    "SAT_SEED={seed:?} is not a reachable host:port: {e}"
                ))
            })?
            .collect();
        check_secret_for(env, &addrs)?;
        // The seed may still be starting: retry until the deadline, backing
        // off. Under satrun it is not: satrun opens the seed's socket before
        // it starts any rank and hands it to rank 0, so a refused connection
        // means rank 0 is gone (or never was a SAT process) for good.
        let under_satrun = std::env::var("SAT_LAUNCHER").is_ok_and(|l| l == "satrun");
        let mut pause = Duration::from_millis(5);
        let stream = loop {
            let mut refused = true;
            let attempt = addrs.iter().find_map(|a| {
                TcpStream::connect_timeout(a, Duration::from_secs(1))
                    .map_err(|e| refused &= e.kind() == std::io::ErrorKind::ConnectionRefused)
                    .ok()
            });
            if let Some(s) = attempt {
                break s;
            }
            if under_satrun && refused {
                return Err(SatError::Bootstrap(format!(
                    "the seed (rank 0) at {seed} refuses connections: satrun opened its socket \
                     before starting any rank, so rank 0 has ended without joining the run (is \
                     rank 0's program one that uses SAT? its own output says more)"
                )));
            }
            if Instant::now() >= deadline {
                return Err(SatError::Timeout(format!(
                    "could not reach the seed (rank 0) at {seed}: is rank 0 running, and SAT_SEED the same for every process?"
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        };
        stream.set_nodelay(true).ok();
        let local_ip = stream
            .local_addr()
            .map(|a| a.ip())
            .unwrap_or(Ipv4Addr::LOCALHOST.into());
        let mut peer = Peer {
            stream,
            local_ip,
            deadline,
        };
        let secret = env.secret.as_ref();
        let handshake = Handshake::start(secret, Side::Joiner)?;
        let hello = ToSeed::Hello {
            wire_version: WIRE_VERSION,
            rank: env.rank,
            size: env.size,
            pid: env.pid,
            host: env.host.clone(),
            provider: env.provider,
            nonce: handshake.token(),
        };
        send(&mut peer.stream, &hello).map_err(lost)?;
        let (theirs, proof) = match peer.recv()? {
            FromSeed::Challenge { nonce, proof } => (nonce, proof),
            other => return Err(unexpected(&other)),
        };
        // The seed proves itself first: a process that merely listens on
        // SAT_SEED learns nothing more than the hello.
        let proofs = handshake.finish(&theirs)?;
        if let Err(refusal) = proofs.check_theirs(proof.as_ref()) {
            return Err(SatError::Bootstrap(format!(
                "the process at SAT_SEED={seed} is not this run's seed: {}",
                match refusal {
                    auth::Refusal::Missing => format!(
                        "it holds no secret and this process has {SECRET_VAR}: \
                         set the same {SECRET_VAR} for every process"
                    ),
                    auth::Refusal::Wrong => format!(
                        "it holds another secret: set the same {SECRET_VAR} for every process"
                    ),
                    auth::Refusal::Unexpected => format!(
                        "it holds a secret and this process has none: set the same \
                         {SECRET_VAR} for every process"
                    ),
                }
            )));
        }
        send(&mut peer.stream, &ToSeed::Proof(proofs.mine())).map_err(lost)?;
        Ok(peer)
    }

    fn recv(&mut self) -> SatResult<FromSeed> {
        recv(&mut self.stream, self.deadline, "the seed (rank 0)")
    }

    fn setup(&mut self) -> SatResult<Setup> {
        match self.recv()? {
            FromSeed::Setup {
                provider,
                topology,
                one_host,
                recovery,
                run_id,
            } => Ok(Setup {
                one_host,
                provider,
                topology,
                local_ip: self.local_ip,
                recovery: recovery.map(Duration::from_secs),
                run_id,
            }),
            other => Err(unexpected(&other)),
        }
    }
}

impl Seed {
    fn listener(env: &RunEnv) -> SatResult<TcpListener> {
        if let Some(fd) = env.seed_fd {
            return crate::os::take_inherited_listener(fd).map_err(|e| {
                SatError::Bootstrap(format!("SAT_SEED_FD={fd} is not a listening socket: {e}"))
            });
        }
        let seed = env.seed.as_deref().unwrap_or("127.0.0.1:0");
        let addrs: Vec<SocketAddr> = seed
            .to_socket_addrs()
            .map_err(|e| SatError::Bootstrap(format!("SAT_SEED={seed:?} is not a host:port: {e}")))?
            .collect();
        check_secret_for(env, &addrs)?;
        let port = addrs.first().map(|a| a.port()).unwrap_or(0);
        // Bind the named address when it is ours, else every interface
        // (a host name that resolves to an address of another interface
        // than the one the peers reach), saying so.
        addrs
            .iter()
            .find_map(|a| TcpListener::bind(a).ok())
            .or_else(|| {
                let any = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).ok()?;
                tracing::warn!(
                    "rank 0 cannot listen on SAT_SEED={seed} (not an address of this host): \
                     listening on every interface, port {port}, instead"
                );
                Some(any)
            })
            .ok_or_else(|| {
                SatError::Bootstrap(format!(
                    "rank 0 cannot listen on SAT_SEED={seed}: is the port already in use?"
                ))
            })
    }

    fn gather(env: &RunEnv, deadline: Instant) -> SatResult<Seed> {
        let size = env.size;
        let mut seed = Seed {
            size,
            conns: (0..size).map(|_| None).collect(),
            hosts: vec![String::new(); size as usize],
            pids: vec![0; size as usize],
            asked: vec![None; size as usize],
            local_ip: Ipv4Addr::LOCALHOST.into(),
            deadline,
        };
        seed.hosts[0] = env.host.clone();
        seed.asked[0] = env.provider;
        // The seed's endpoint goes where its socket listens: a service's
        // seed listens where clients attach, and they reach its endpoint
        // there, even when it is the run's only process.
        let listener = match Self::listener(env) {
            Ok(l) => l,
            Err(_) if size == 1 => return Ok(seed),
            Err(e) => return Err(e),
        };
        if let Ok(addr) = listener.local_addr() {
            if !addr.ip().is_unspecified() {
                seed.local_ip = addr.ip();
            }
        }
        if size == 1 {
            return Ok(seed);
        }
        let mut joined = 1;
        // Each connection's hello is read on a thread of its own, so that a
        // socket that never speaks (or speaks slowly) holds up nobody.
        let (hellos, heard) = std::sync::mpsc::channel::<Heard>();
        // The connections whose hello is being read, oldest first (a clone
        // of each, to close it): when too many wait, the oldest is closed to
        // make room, so that sockets that never speak cannot keep out a
        // process that holds the secret, which proves it within moments.
        let mut listening = std::collections::BTreeMap::<u64, TcpStream>::new();
        let mut next_id = 0u64;
        while joined < size {
            let Ok((id, mut stream, hello)) = heard.try_recv() else {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (1..size)
                        .filter(|&r| seed.conns[r as usize].is_none())
                        .map(|r| r.to_string())
                        .collect();
                    let reason = format!(
                        "ranks {} never contacted the seed: were all {size} processes started with the same SAT_SEED?",
                        missing.join(", ")
                    );
                    seed.abort(&reason);
                    return Err(SatError::Timeout(reason));
                }
                let tick = deadline.min(Instant::now() + SEED_TICK);
                if let Some(stream) = accept_before(&listener, tick)? {
                    if let (Ok(local), true) = (stream.local_addr(), seed.local_ip.is_loopback()) {
                        seed.local_ip = local.ip();
                    }
                    if listening.len() >= MAX_PENDING_HELLOS {
                        if let Some((_, oldest)) = listening.pop_first() {
                            let _ = oldest.shutdown(std::net::Shutdown::Both);
                        }
                        refusal(format_args!(
                            "{MAX_PENDING_HELLOS} connections to the seed have not proved the \
                             run's secret yet: closed the oldest"
                        ));
                    }
                    next_id += 1;
                    if let Some(clone) = hear_hello(stream, next_id, &hellos, deadline, &env.secret)
                    {
                        listening.insert(next_id, clone);
                    }
                }
                continue;
            };
            listening.remove(&id);
            let problem = match hello {
                Ok(ToSeed::Hello {
                    wire_version,
                    rank,
                    size: their_size,
                    host,
                    provider,
                    pid,
                    ..
                }) => {
                    if wire_version != WIRE_VERSION {
                        Some(format!("rank {rank} runs wire version {wire_version}, the seed {WIRE_VERSION}: rebuild every program against the same SAT"))
                    } else if their_size != size {
                        Some(format!("rank {rank} believes the run has {their_size} processes, the seed {size}"))
                    } else if rank == 0 || rank >= size {
                        Some(format!("a process claims rank {rank} in a run of {size}"))
                    } else if seed.conns[rank as usize].is_some() {
                        Some(format!("two processes claim rank {rank}"))
                    } else {
                        seed.hosts[rank as usize] = host;
                        seed.pids[rank as usize] = pid;
                        seed.asked[rank as usize] = provider;
                        seed.conns[rank as usize] = Some(stream);
                        joined += 1;
                        tracing::debug!("Received message type 1 (request_topology) from {rank}");
                        continue;
                    }
                }
                // Not from a SAT process of this run: a SAT process says
                // hello first. Ignored like bytes that do not decode.
                Ok(other) => {
                    refusal(format_args!(
                        "ignoring a connection to the seed: it sent {} before any hello",
                        other.kind()
                    ));
                    None
                }
                Err(e) => {
                    refusal(format_args!("ignoring a connection to the seed: {e}"));
                    None
                }
            };
            if let Some(reason) = problem {
                let _ = send(&mut stream, &FromSeed::Abort(reason.clone()));
                seed.abort(&reason);
                return Err(SatError::Bootstrap(reason));
            }
        }
        Ok(seed)
    }

    fn one_host(&self) -> bool {
        self.hosts.iter().all(|h| *h == self.hosts[0])
    }

    /// The provider: the one asked for (all askers must agree); otherwise
    /// `shm` when every rank is on this host, else `tcp`.
    fn choose_provider(&self) -> Result<Provider, String> {
        let mut chosen: Option<(Provider, usize)> = None;
        for (rank, asked) in self.asked.iter().enumerate() {
            if let Some(p) = asked {
                match chosen {
                    Some((q, r)) if q != *p => {
                        return Err(format!(
                            "rank {r} asks for provider {q} and rank {rank} for {p}: set the same SAT_PROVIDER everywhere"
                        ))
                    }
                    _ => chosen = Some((*p, rank)),
                }
            }
        }
        if let Some((p, _)) = chosen {
            return Ok(p);
        }
        // A run with recovery outlives processes killed while they send,
        // which can freeze the shm provider (docs/DESIGN.md, "Killed
        // processes and the shm provider"), as satrun's choice says.
        if self.one_host() && !crate::settings::get().recovery {
            Ok(Provider::Shm)
        } else {
            Ok(Provider::Tcp)
        }
    }

    fn setup(&mut self, topology: impl FnOnce() -> SatResult<Topology>) -> SatResult<Setup> {
        let prepared = topology().and_then(|t| {
            let provider = self.choose_provider().map_err(SatError::Bootstrap)?;
            let mut run_id = RunId::default();
            // Fresh random bytes, not the secret's nor the nonces'.
            getrandom::getrandom(&mut run_id).map_err(|e| {
                SatError::Bootstrap(format!(
                    "the operating system's random generator failed while naming the run: {e}"
                ))
            })?;
            Ok((t, provider, run_id))
        });
        let (topology, provider, run_id) = match prepared {
            Ok(v) => v,
            Err(e) => {
                self.abort(&e.to_string());
                return Err(e);
            }
        };
        let one_host = self.one_host();
        let settings = crate::settings::get();
        let recovery = settings.recovery.then_some(settings.lease_s);
        self.broadcast(&FromSeed::Setup {
            provider,
            topology: topology.clone(),
            one_host,
            recovery,
            run_id,
        })?;
        Ok(Setup {
            one_host,
            provider,
            topology,
            local_ip: self.local_ip,
            recovery: recovery.map(Duration::from_secs),
            run_id,
        })
    }

    fn exchange_addresses(&mut self, mine: &[u8], bell: Option<BellPlace>) -> SatResult<Tables> {
        let mut table = vec![Vec::new(); self.size as usize];
        let mut bells = vec![None; self.size as usize];
        table[0] = mine.to_vec();
        bells[0] = bell;
        for rank in 1..self.size {
            match self.recv_from(rank)? {
                ToSeed::Address(a, b) => {
                    table[rank as usize] = a;
                    bells[rank as usize] = b;
                }
                other => return Err(self.unexpected(rank, other)),
            }
        }
        self.broadcast(&FromSeed::Table(table.clone(), bells.clone()))?;
        Ok((table, bells))
    }

    fn barrier(&mut self) -> SatResult<()> {
        for rank in 1..self.size {
            match self.recv_from(rank)? {
                ToSeed::Ready => {}
                other => return Err(self.unexpected(rank, other)),
            }
        }
        // Under satrun: before any rank goes on, so that a rank ending
        // after the start finds the record (`launcher/joins.rs`).
        crate::launcher::joins::announce_started();
        self.broadcast(&FromSeed::Go)
    }

    fn recv_from(&mut self, rank: Rank) -> SatResult<ToSeed> {
        let stream = self.conns[rank as usize]
            .as_mut()
            .expect("every rank joined");
        match recv(stream, self.deadline, &format!("rank {rank}")) {
            Ok(msg) => Ok(msg),
            Err(e) => {
                self.abort(&e.to_string());
                Err(e)
            }
        }
    }

    fn unexpected(&mut self, rank: Rank, msg: ToSeed) -> SatError {
        let reason = match msg {
            ToSeed::Failed(why) => format!("rank {rank} failed: {why}"),
            other => format!("rank {rank} sent {other:?} out of turn"),
        };
        self.abort(&reason);
        SatError::Aborted(reason)
    }

    fn broadcast(&mut self, msg: &FromSeed) -> SatResult<()> {
        let frame = encode_frame(msg);
        for rank in 1..self.size {
            if let Some(stream) = self.conns[rank as usize].as_mut() {
                if let Err(e) = stream.write_all(&frame) {
                    let reason = format!("lost the bootstrap connection with rank {rank}: {e}");
                    self.abort(&reason);
                    return Err(SatError::Bootstrap(reason));
                }
            }
        }
        Ok(())
    }

    /// Tells every connected rank why the run stops, then forgets them.
    fn abort(&mut self, reason: &str) {
        let frame = encode_frame(&FromSeed::Abort(reason.to_string()));
        for stream in self.conns.iter_mut().flatten() {
            let _ = stream.write_all(&frame);
        }
        self.conns.iter_mut().for_each(|c| *c = None);
    }
}

/// A connection to the seed, by the number it was accepted under, with its
/// hello (an error instead if there is none, or no proof).
type Heard = (u64, TcpStream, SatResult<ToSeed>);

/// Logs a refused or ignored connection to the seed, rate-limited
/// ([`crate::refusals`]): anyone who reaches its port can cause them.
fn refusal(why: std::fmt::Arguments<'_>) {
    static LOG: std::sync::OnceLock<&'static crate::refusals::RefusalLog> =
        std::sync::OnceLock::new();
    LOG.get_or_init(|| crate::refusals::RefusalLog::start("seed"))
        .log(why);
}

/// Reads the hello of connection `id` to the seed, and the proof that the
/// process holds the run's secret, on a thread of its own; hands them to
/// `hellos`. Returns a clone of the stream to close it by, or None when
/// there is no thread for it (it is closed then).
fn hear_hello(
    mut stream: TcpStream,
    id: u64,
    hellos: &std::sync::mpsc::Sender<Heard>,
    deadline: Instant,
    secret: &Option<Secret>,
) -> Option<TcpStream> {
    stream.set_nodelay(true).ok();
    let clone = match stream.try_clone() {
        Ok(c) => c,
        Err(e) => {
            refusal(format_args!("a connection to the seed closed: {e}"));
            return None;
        }
    };
    let hellos = hellos.clone();
    let secret = secret.clone();
    let wait = deadline.min(Instant::now() + HELLO_WAIT);
    let spawned = std::thread::Builder::new()
        .name("sat-seed-hello".into())
        .spawn(move || {
            let hello = hear(&mut stream, wait, secret.as_ref());
            let _ = hellos.send((id, stream, hello));
        });
    if let Err(e) = &spawned {
        tracing::warn!("no thread to hear a process joining the run: {e}");
        return None;
    }
    Some(clone)
}

/// One joining process's hello and proof (see the module's step 0).
fn hear(stream: &mut TcpStream, wait: Instant, secret: Option<&Secret>) -> SatResult<ToSeed> {
    const FROM: &str = "a process joining the run";
    let body = recv_frame(stream, wait, FROM)?;
    let hello = match decode::<ToSeed>(&body, FROM) {
        Ok(hello) => hello,
        Err(e) => {
            if let Some(version) = hello_version(&body).filter(|&v| v != WIRE_VERSION) {
                let reason = format!(
                    "a process of wire version {version} tried to join a run of version \
                     {WIRE_VERSION}: rebuild every program against the same SAT"
                );
                let _ = send(stream, &FromSeed::Abort(reason.clone()));
                return Err(SatError::Bootstrap(reason));
            }
            return Err(e);
        }
    };
    let ToSeed::Hello {
        nonce: theirs,
        rank,
        ..
    } = &hello
    else {
        return Ok(hello);
    };
    let (ours, proofs) = Handshake::answer(secret, theirs)?;
    let challenge = FromSeed::Challenge {
        nonce: ours,
        proof: proofs.mine(),
    };
    send(stream, &challenge)
        .map_err(|e| SatError::Bootstrap(format!("lost the connection of {FROM}: {e}")))?;
    let proof = match decode::<ToSeed>(&recv_frame(stream, wait, FROM)?, FROM)? {
        ToSeed::Proof(proof) => proof,
        other => {
            return Err(SatError::Bootstrap(format!(
                "{FROM} sent {} instead of its proof",
                other.kind()
            )))
        }
    };
    if let Err(refusal) = proofs.check_theirs(proof.as_ref()) {
        let reason = auth::refusal_reason(refusal, "the run");
        let _ = send(stream, &FromSeed::Abort(reason.clone()));
        return Err(SatError::Bootstrap(format!(
            "refused a process that claims rank {rank}: {reason}"
        )));
    }
    Ok(hello)
}

/// Accepts one connection, or returns None once `deadline` passes.
fn accept_before(listener: &TcpListener, deadline: Instant) -> SatResult<Option<TcpStream>> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let ready = crate::os::wait_readable(listener, left)
            .map_err(|e| SatError::Bootstrap(format!("waiting for ranks to join: {e}")))?;
        if !ready {
            continue;
        }
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).ok();
                return Ok(Some(s));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                return Err(SatError::Bootstrap(format!(
                    "accepting a joining rank: {e}"
                )))
            }
        }
    }
}

/// The seed's decoders under `sat-fuzz` (feature `fuzz`): what a process
/// that reaches the seed's port, or poses as the seed, can make them do.
#[cfg(feature = "fuzz")]
pub(crate) mod fuzzing {
    use super::*;

    /// Valid frame bodies of every message, for the mutations to start from.
    pub(crate) fn corpus() -> Vec<Vec<u8>> {
        let body = |frame: Vec<u8>| frame[4..].to_vec();
        let topology = Topology::service(2, 3).expect("a valid service topology");
        vec![
            body(encode_frame(&ToSeed::Hello {
                wire_version: WIRE_VERSION,
                rank: 3,
                size: 5,
                pid: 4242,
                host: "node-7".into(),
                provider: Some(Provider::Tcp),
                nonce: [9; 32],
            })),
            body(encode_frame(&ToSeed::Address(
                vec![2, 0, 1, 2, 127, 0, 0, 1],
                Some((7, 3)),
            ))),
            body(encode_frame(&ToSeed::Ready)),
            body(encode_frame(&ToSeed::Failed("no endpoint".into()))),
            body(encode_frame(&ToSeed::Proof(Some([5; 32])))),
            body(encode_frame(&FromSeed::Setup {
                provider: Provider::Shm,
                topology,
                one_host: true,
                recovery: Some(10),
                run_id: [3; 16],
            })),
            body(encode_frame(&ToSeed::Beat)),
            body(encode_frame(&FromSeed::Beat)),
            body(encode_frame(&FromSeed::Table(
                vec![b"fi_shm://1:0:1\0".to_vec(), vec![2, 0, 31, 144]],
                vec![None, Some((1, 2))],
            ))),
            body(encode_frame(&FromSeed::Go)),
            body(encode_frame(&FromSeed::Abort("why".into()))),
            body(encode_frame(&FromSeed::Challenge {
                nonce: [1; 32],
                proof: None,
            })),
        ]
    }

    /// Decodes `body` as each side would; never panics, whatever it holds.
    pub(crate) fn input(body: &[u8]) {
        let _ = decode::<ToSeed>(body, "fuzz");
        let _ = decode::<FromSeed>(body, "fuzz");
        let _ = hello_version(body);
    }
}
