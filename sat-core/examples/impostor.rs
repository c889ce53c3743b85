//! A run in which one client attacks its servers over libfabric before it
//! does its share of honest work: the others must not notice.
//!
//! ```text
//! satrun -n 6 --topology sat-core/topologies/two-servers.xml -- target/release/examples/impostor --k 50
//! ```
//! Every client does K READWRITE-increment-RELEASE on chunks 7 (home:
//! server 1) and 8 (home: server 0), then checks both hold clients x K. Rank
//! 4 (a client of server 1) first:
//! 1. opens an endpoint of its own, which is no rank's, and with it speaks
//!    as rank 0, the seed, telling server 1 to shut down, and as rank 5, a
//!    client of server 1, saying it has finished;
//! 2. sends, under its own rank, the messages only servers send: Shutdown,
//!    ClientLost, Stop, Probe, Admit.
//!
//! Each attack, if a server took it, would stop server 1 or forget a
//! client, and the counters would never reach their total.

use std::time::{Duration, Instant};

use sat_core::bootstrap::{join, run_joined, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::Access;
use sat_core::transport::fabric::{FabricEndpoint, FabricOptions};
use sat_core::transport::{Payload, Sender, Transport, MAX_HEADER};
use sat_core::wire::{self, Message};

const COUNTERS: [u64; 2] = [7, 8];
const ATTACKER: u32 = 4;
const SEED: u32 = 0;
const VICTIM_SERVER: u32 = 1;
const VICTIM_CLIENT: u32 = 5;
/// Forged packets per claimed identity: enough to take whatever sequence
/// number the victim expects next from the rank claimed.
const COPIES: usize = 64;

fn encode(msg: &Message) -> Vec<u8> {
    let mut header = [0u8; MAX_HEADER];
    let n = wire::encode(msg, &mut header).expect("a small message");
    header[..n].to_vec()
}

/// Sends `header` `copies` times to `dest` from a forger's own endpoint,
/// which nobody sends to, and waits until the transport has handed every
/// copy on.
fn send_all(t: &mut dyn Transport, dest: u32, header: &[u8], copies: usize) -> RoleResult {
    for _ in 0..copies {
        t.send(dest, header, Payload::None)?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !t.sends_drained()? {
        t.poll(&mut |_: &mut dyn Sender, _| {})?;
        if Instant::now() > deadline {
            return Err("forged packets were never sent".into());
        }
    }
    Ok(())
}

/// Attack 1: an endpoint that is no rank's speaks as `claimed`.
fn speak_as(
    options: &FabricOptions,
    addresses: &[Vec<u8>],
    claimed: u32,
    msg: &Message,
) -> RoleResult {
    let endpoint = FabricEndpoint::open(options)?;
    let mut table = addresses.to_vec();
    table[claimed as usize] = endpoint.address().to_vec();
    let mut forger = endpoint.connect(claimed, &table)?;
    send_all(&mut forger, VICTIM_SERVER, &encode(msg), COPIES)?;
    println!(
        "impostor: sent {COPIES} {} to server {VICTIM_SERVER} as rank {claimed}",
        msg.kind()
    );
    Ok(())
}

fn attack(joined: &mut sat_core::bootstrap::Joined) -> RoleResult {
    let options = FabricOptions::new(joined.provider);
    speak_as(&options, &joined.addresses, SEED, &Message::Shutdown)?;
    speak_as(
        &options,
        &joined.addresses,
        VICTIM_CLIENT,
        &Message::ClientDone {
            published: 0,
            received: 0,
        },
    )?;
    // Attack 2: a client's own endpoint sends what only servers send.
    for msg in [
        Message::Shutdown,
        Message::ClientLost {
            client: VICTIM_CLIENT,
        },
        Message::Stop,
        Message::Probe { wave: 1 },
        Message::Admit {
            client: VICTIM_CLIENT,
        },
        // Ranks past the topology's end (once a panic in its lookup).
        Message::Admit { client: u32::MAX },
        Message::ClientLost { client: u32::MAX },
    ] {
        // Sent, not waited for: polling here would swallow what the
        // other clients send this one; its client drains the queue later.
        joined
            .transport
            .send(VICTIM_SERVER, &encode(&msg), Payload::None)?;
        println!(
            "impostor: sent {} to server {VICTIM_SERVER} as itself",
            msg.kind()
        );
    }
    Ok(())
}

fn counter(c: &Client, chunk: u64) -> Result<u64, sat_core::SatError> {
    c.with_data(chunk, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))
}

fn increment(c: &Client, k: u64) -> RoleResult {
    let clients = c.topology().clients();
    for chunk in COUNTERS {
        c.malloc(chunk, 8)?;
    }
    for _ in 0..k {
        for chunk in COUNTERS {
            c.acquire(chunk, Access::ReadWrite)?;
            let v = counter(c, chunk)? + 1;
            c.with_data_mut(chunk, |d| d[..8].copy_from_slice(&v.to_le_bytes()))?;
            c.release(chunk)?;
        }
    }
    // Everyone has released every increment before anyone checks.
    for &other in clients.iter().filter(|&&r| r != c.rank()) {
        c.send(other, 0, b"done")?;
    }
    for _ in 1..clients.len() {
        c.recv_timeout(Duration::from_secs(120))?
            .ok_or("a client never finished")?;
    }
    for chunk in COUNTERS {
        c.acquire(chunk, Access::Read)?;
        let v = counter(c, chunk)?;
        c.release(chunk)?;
        let want = clients.len() as u64 * k;
        if v != want {
            return Err(format!("chunk {chunk} holds {v}, expected {want}").into());
        }
        println!("rank {}: chunk {chunk} = {v}", c.rank());
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let k = args
        .iter()
        .position(|a| a == "--k")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(50u64);
    let result = join(&args, |_| true).and_then(|mut joined| {
        if joined.env.rank == ATTACKER {
            if let Err(e) = attack(&mut joined) {
                eprintln!("impostor: the attack could not be made: {e}");
                std::process::exit(1);
            }
        }
        let roles = Roles::new()
            .role(1, move |c| increment(c, k))
            .role(2, move |c| increment(c, k));
        run_joined(joined, roles)
    });
    if let Err(e) = result {
        eprintln!("impostor: {e}");
        std::process::exit(1);
    }
}
