//! A run with replicated homes that loses a server and goes on
//! (`<topologies replication="2">`, and recovery: `SAT_RECOVERY=on`).
//!
//! ```text
//! satrun --enable-recovery -n 6 --topology sat-core/topologies/replicated.xml \
//!     -- target/release/examples/failover --rounds 200 --chunks 12
//! ```
//! Every client owns `--chunks` chunks of `--bytes` bytes (ids spread over
//! every server's homes) and, for `--rounds` rounds, writes each of them in
//! its own WRITE scope: a header (its rank, the chunk, the round) and bytes
//! derived from it, so that a torn or invented version shows. A RELEASE
//! that returns is a version two servers hold; one that fails with
//! `ProcessLost` (a server was lost while it was under way) may or may not
//! have been published, and the client notes it. Each round it also reads
//! a chunk of the next client and checks it is whole and never older than
//! one it read before. Every tenth round it prints `round N` (a test kills
//! a server then).
//!
//! At the end, after a barrier of every client, each client reads back its
//! own chunks: each must hold the round of its last release that returned
//! (or of one under way when a server was lost), byte for byte. Calls that
//! a server's loss caught are made again.
//!
//! With `--sync`, the clients write nothing: each round passes a token
//! round the ring of clients by rendezvous and wakeup, then meets at a
//! barrier (two barrier ids in turn). A wakeup applied twice or never, or
//! a barrier arrival counted and then called again, leaves them waiting
//! for each other for good. Each client prints how many of its barrier,
//! rendezvous and wakeup calls a loss failed (made again).
//!
//! With `--chains`, each round writes all of a client's chunks in one WRITE
//! scope of their chain and releases it as one, and reads the next client's
//! whole chain in one READ scope: every chunk of a chain must hold the same
//! round (a chain's release applies all or nothing, also when a server is
//! lost during it).

use std::time::Duration;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Chain, Client};
use sat_core::protocol::Access;
use sat_core::SatError;

/// The first client's first chunk; each client's chunks follow.
const BASE: u64 = 1_000;
const HEADER: usize = 16;

struct Options {
    rounds: u64,
    chunks: u64,
    bytes: usize,
    chains: bool,
    sync: bool,
}

/// The bytes of `rank`'s chunk `j` at `round`.
fn fill(d: &mut [u8], rank: u32, j: u64, round: u64) {
    d[..4].copy_from_slice(&rank.to_le_bytes());
    d[4..8].copy_from_slice(&(j as u32).to_le_bytes());
    d[8..16].copy_from_slice(&round.to_le_bytes());
    for (i, b) in d[HEADER..].iter_mut().enumerate() {
        *b = (round as usize * 31 + i * 7 + j as usize) as u8;
    }
}

/// The (rank, chunk, round) a version holds; an error when its bytes are
/// not exactly what that writer wrote (0 for a chunk never written).
fn parse(d: &[u8], chunk: u64) -> Result<(u32, u64, u64), String> {
    if d.iter().all(|&b| b == 0) {
        return Ok((0, 0, 0));
    }
    let rank = u32::from_le_bytes(d[..4].try_into().unwrap());
    let j = u64::from(u32::from_le_bytes(d[4..8].try_into().unwrap()));
    let round = u64::from_le_bytes(d[8..16].try_into().unwrap());
    let mut want = vec![0u8; d.len()];
    fill(&mut want, rank, j, round);
    if want != d {
        return Err(format!(
            "chunk {chunk} is not a version anyone wrote (it says rank {rank}, chunk {j}, \
             round {round})"
        ));
    }
    Ok((rank, j, round))
}

/// Calls `f` again while a server's loss fails it.
fn again<T>(lost: &mut u64, mut f: impl FnMut() -> Result<T, SatError>) -> Result<T, SatError> {
    loop {
        match f() {
            Err(SatError::ProcessLost(why)) => {
                *lost += 1;
                eprintln!("failover: a call failed for a loss, made again: {why}");
            }
            other => return other,
        }
    }
}

fn read(c: &Client, chunk: u64, lost: &mut u64) -> Result<(u32, u64, u64), SatError> {
    let seen = again(lost, || {
        c.acquire(chunk, Access::Read)?;
        let seen = c.with_data(chunk, |d| parse(d, chunk));
        c.release(chunk)?;
        seen
    })?;
    seen.map_err(SatError::Usage)
}

/// The round every chunk of `chain` (`chunks` of `bytes` each, its writer's
/// chunk numbers in order) holds, as one READ scope of the chain sees it;
/// an error for a torn chain (chunks of different rounds or writers).
fn read_chain(
    c: &Client,
    chain: &Chain,
    o: &Options,
    lost: &mut u64,
) -> Result<(u32, u64), SatError> {
    let seen = again(lost, || {
        c.acquire_chain(chain, Access::Read)?;
        let seen = c.with_chain(chain, |d| {
            let mut whole = None;
            for (j, chunk) in chain.ids().enumerate() {
                let (rank, k, round) = parse(&d[j * o.bytes..(j + 1) * o.bytes], chunk)?;
                if k != j as u64 && round != 0 {
                    return Err(format!("chunk {chunk} holds chunk {k} of rank {rank}"));
                }
                match whole {
                    None => whole = Some((rank, round, chunk)),
                    Some((r, n, first)) if (r, n) != (rank, round) => {
                        return Err(format!(
                            "torn chain: chunk {first} holds rank {r}'s round {n}, chunk {chunk} \
                             rank {rank}'s round {round}"
                        ))
                    }
                    Some(_) => {}
                }
            }
            let (rank, round, _) = whole.unwrap_or((0, 0, 0));
            Ok((rank, round))
        });
        c.release_chain(chain)?;
        seen
    })?;
    seen.map_err(SatError::Usage)
}

/// `--chains`: every round writes the client's chain in one scope and reads
/// the next client's in one scope (see the module's doc).
fn role_chains(c: &Client, o: &Options, own: &Chain, theirs: &Chain, n: u64) -> RoleResult {
    let rank = c.rank();
    let mut lost = 0;
    let (mut acked, mut maybe, mut newest) = (0u64, 0u64, 0u64);
    for round in 1..=o.rounds {
        again(&mut lost, || c.acquire_chain(own, Access::Write))?;
        c.with_chain_mut(own, |d| {
            for (j, part) in d.chunks_mut(o.bytes).enumerate() {
                fill(part, rank, j as u64, round);
            }
        })?;
        match c.release_chain(own) {
            Ok(()) => acked = round,
            Err(SatError::ProcessLost(why)) => {
                lost += 1;
                maybe = round;
                eprintln!("failover: release of the chain, round {round}: {why}");
            }
            Err(e) => return Err(e.into()),
        }
        let (_, seen) = read_chain(c, theirs, o, &mut lost)?;
        if seen < newest {
            return Err(
                format!("the next client's chain went back from round {newest} to {seen}").into(),
            );
        }
        newest = seen;
        if round % 10 == 0 {
            println!("rank {rank} round {round}");
        }
    }
    again(&mut lost, || c.barrier(2, n as u32))?;
    let (writer, round) = read_chain(c, own, o, &mut lost)?;
    if writer != rank || !(round == acked || (round == maybe && maybe > acked)) {
        return Err(format!(
            "the chain holds rank {writer}'s round {round}; its last release that returned was \
             round {acked} (one under way: {maybe})"
        )
        .into());
    }
    again(&mut lost, || c.barrier(3, n as u32))?;
    println!(
        "rank {rank}: {} rounds of a chain of {} chunks, every chain read whole and the last \
         released version read back ({lost} calls made again after a loss)",
        o.rounds, o.chunks
    );
    Ok(())
}

/// `--sync`: the token ring and the barriers (see the module's doc).
fn role_sync(c: &Client, o: &Options, me: u64, n: u64) -> RoleResult {
    let rank = c.rank();
    // Counted apart: sat.h says a loss fails a process's barrier once and
    // its rendezvous once, and a wakeup never.
    let (mut woke, mut slept, mut arrived) = (0, 0, 0);
    let next = ((me + 1) % n) as u32;
    for round in 1..=o.rounds {
        if me == 0 {
            again(&mut woke, || c.wakeup(100 + next))?;
            again(&mut slept, || c.rendezvous(100))?;
        } else {
            again(&mut slept, || c.rendezvous(100 + me as u32))?;
            again(&mut woke, || c.wakeup(100 + next))?;
        }
        again(&mut arrived, || c.barrier(1 + (round % 2) as u32, n as u32))?;
        if round % 10 == 0 {
            println!("rank {rank} round {round}");
        }
    }
    println!(
        "rank {rank}: {} rounds of a token ring and a barrier ({} calls made again after a \
         loss: {arrived} barrier, {slept} rendezvous, {woke} wakeup)",
        o.rounds,
        woke + slept + arrived
    );
    Ok(())
}

fn role(c: &Client, o: &Options) -> RoleResult {
    let rank = c.rank();
    let clients = c.topology().clients();
    let me = clients.iter().position(|&r| r == rank).unwrap() as u64;
    let n = clients.len() as u64;
    if o.sync {
        let mut lost = 0;
        again(&mut lost, || c.barrier(1, n as u32))?;
        println!("rank {rank} started");
        return role_sync(c, o, me, n);
    }
    let own: Vec<u64> = (0..o.chunks).map(|j| BASE + me * o.chunks + j).collect();
    let sizes = vec![o.bytes; own.len()];
    let own_chain = c.malloc_lst(sat_core::protocol::ProtocolId::HomeMesi, &own, &sizes)?;
    let next = (me + 1) % n;
    let theirs: Vec<u64> = (0..o.chunks).map(|j| BASE + next * o.chunks + j).collect();
    let their_chain = c.lookup_lst(&theirs, Duration::from_secs(60))?;
    let mut lost = 0;
    again(&mut lost, || c.barrier(1, n as u32))?;
    println!("rank {rank} started");
    if o.chains {
        return role_chains(c, o, &own_chain, &their_chain, n);
    }
    // The round of each own chunk's last release that returned, and of one
    // under way when a server was lost (published or not).
    let mut acked = vec![0u64; own.len()];
    let mut maybe = vec![0u64; own.len()];
    let mut newest = vec![0u64; theirs.len()];
    for round in 1..=o.rounds {
        for (j, &chunk) in own.iter().enumerate() {
            again(&mut lost, || c.acquire(chunk, Access::Write))?;
            c.with_data_mut(chunk, |d| fill(d, rank, j as u64, round))?;
            match c.release(chunk) {
                Ok(()) => acked[j] = round,
                Err(SatError::ProcessLost(why)) => {
                    lost += 1;
                    maybe[j] = round;
                    eprintln!("failover: release of chunk {chunk} round {round}: {why}");
                }
                Err(e) => return Err(e.into()),
            }
        }
        let k = (round % o.chunks) as usize;
        let (_, _, seen) = read(c, theirs[k], &mut lost)?;
        if seen < newest[k] {
            return Err(format!(
                "chunk {} went back from round {} to {seen}",
                theirs[k], newest[k]
            )
            .into());
        }
        newest[k] = seen;
        if round % 10 == 0 {
            println!("rank {rank} round {round}");
        }
    }
    again(&mut lost, || c.barrier(2, n as u32))?;
    for (j, &chunk) in own.iter().enumerate() {
        let (writer, k, round) = read(c, chunk, &mut lost)?;
        let ok = writer == rank
            && k == j as u64
            && (round == acked[j] || (round == maybe[j] && maybe[j] > acked[j]));
        if !ok {
            return Err(format!(
                "chunk {chunk} holds rank {writer}'s chunk {k} round {round}; its last release \
                 that returned was round {} (one under way: {})",
                acked[j], maybe[j]
            )
            .into());
        }
    }
    again(&mut lost, || c.barrier(3, n as u32))?;
    println!(
        "rank {rank}: {} rounds of {} chunks, every released version read back ({lost} calls \
         made again after a loss)",
        o.rounds, o.chunks
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let o = std::sync::Arc::new(Options {
        rounds: number("--rounds", 100),
        chunks: number("--chunks", 12).max(1),
        bytes: (number("--bytes", 4096) as usize).max(HEADER),
        chains: args.iter().any(|a| a == "--chains"),
        sync: args.iter().any(|a| a == "--sync"),
    });
    let mut roles = Roles::new();
    for id in 1..=8 {
        let o = o.clone();
        roles = roles.role(id, move |c| role(c, &o));
    }
    if let Err(e) = run(roles, args) {
        eprintln!("failover: {e}");
        std::process::exit(1);
    }
}
