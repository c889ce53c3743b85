//! A process that attaches to a running SAT service (`satrun --serve`),
//! does one thing and detaches. The service tests use it.
//!
//! ```text
//! satrun --serve --address-file /tmp/sat.addr &
//! target/release/examples/attach write $(cat /tmp/sat.addr) --chunk 7 --bytes 1048576 --seed 3
//! target/release/examples/attach check $(cat /tmp/sat.addr) --chunk 7 --bytes 1048576 --seed 3
//! ```
//! Commands:
//! - `write ADDR`: MALLOC the chain, fill it with the pattern of `--seed`;
//! - `check ADDR`: LOOKUP the chain and check every byte of that pattern;
//! - `cycle ADDR --times N`: attach, increment a counter chunk, detach, N
//!   times; prints the counter's last value;
//! - `hold ADDR`: attach, write, print `attached`, then wait for a line on
//!   standard input (so a test can kill it while attached);
//! - `hold-scope ADDR`: attach and open a write scope on the counter chunk
//!   of `cycle`, then wait the same way (killed or stopped inside the
//!   scope); after the line, release it and print the outcome;
//! - `hold-read-scope ADDR`: the same with a read scope;
//! - `rounds ADDR --chunk C --bytes B`: MALLOC the chain, then round after
//!   round fill every byte with the round's number and release it, printing
//!   `releasing round N` before each release (so that a test can kill it
//!   while it releases), until killed;
//! - `uniform ADDR --chunk C --bytes B`: LOOKUP that chain and check that
//!   every chunk holds the same round (one release, all or nothing); prints
//!   `uniform at round N`.

use std::io::BufRead;
use std::time::Duration;

use sat_core::client::Client;
use sat_core::service;

struct Options {
    command: String,
    address: String,
    chunk: u64,
    bytes: usize,
    seed: u64,
    times: u64,
}

fn options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    let command = it
        .next()
        .ok_or("give a command: write, check, cycle or hold")?;
    let address = it.next().ok_or("give the service's address")?;
    let mut o = Options {
        command: command.clone(),
        address: address.clone(),
        chunk: 1,
        bytes: 4096,
        seed: 1,
        times: 1,
    };
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("{name} takes a number"))
        };
        match a.as_str() {
            "--chunk" => o.chunk = value("--chunk")?,
            "--bytes" => o.bytes = value("--bytes")? as usize,
            "--seed" => o.seed = value("--seed")?,
            "--times" => o.times = value("--times")?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

/// The byte at `i` of the pattern of `seed`: every position differs from
/// its neighbours and from other seeds.
fn pattern(seed: u64, i: usize) -> u8 {
    let x =
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03);
    (x >> 29) as u8
}

fn write(client: &Client, o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let chain = client.malloc(o.chunk, o.bytes)?;
    let scope = client.write(&chain)?;
    scope.data_mut(|d| {
        for (i, b) in d.iter_mut().enumerate() {
            *b = pattern(o.seed, i);
        }
    })?;
    drop(scope);
    Ok(())
}

fn check(client: &Client, o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let chunks = o.bytes.div_ceil(client.chunk_size()) as u64;
    let chain = client.lookup_chain(o.chunk, chunks, Duration::from_secs(10))?;
    if chain.size() != o.bytes {
        return Err(format!("the chain has {} bytes, not {}", chain.size(), o.bytes).into());
    }
    let scope = client.read(&chain)?;
    let bad = scope.data(|d| {
        d.iter()
            .enumerate()
            .position(|(i, &b)| b != pattern(o.seed, i))
    })?;
    if let Some(i) = bad {
        return Err(format!("byte {i} differs from the pattern of seed {}", o.seed).into());
    }
    println!("checked {} bytes", o.bytes);
    Ok(())
}

/// `rounds`: releases of the whole chain, one round after another.
fn rounds(client: &Client, o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::Write;
    let chain = client.malloc(o.chunk, o.bytes)?;
    println!("{} chunks", chain.len());
    for round in 1u64.. {
        let scope = client.write(&chain)?;
        scope.data_mut(|d| d.fill(round as u8))?;
        println!("releasing round {round}");
        std::io::stdout().flush()?;
        scope.release()?;
    }
    Ok(())
}

/// `uniform`: every chunk of the chain holds the same round's bytes.
fn uniform(client: &Client, o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let size = client.chunk_size();
    let chunks = o.bytes.div_ceil(size) as u64;
    let chain = client.lookup_chain(o.chunk, chunks, Duration::from_secs(10))?;
    let scope = client.read(&chain)?;
    let rounds: Vec<(u8, bool)> = scope.data(|d| {
        d.chunks(size)
            .map(|c| (c[0], c.iter().all(|&b| b == c[0])))
            .collect()
    })?;
    drop(scope);
    if let Some(k) = rounds.iter().position(|&(_, whole)| !whole) {
        return Err(format!("chunk {k} of the chain holds bytes of two rounds").into());
    }
    let first = rounds[0].0;
    if let Some(k) = rounds.iter().position(|&(r, _)| r != first) {
        return Err(format!(
            "torn release: chunk 0 holds round {first}, chunk {k} round {}",
            rounds[k].0
        )
        .into());
    }
    println!("uniform at round {first}");
    Ok(())
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("attach: {e}");
            std::process::exit(2);
        }
    };
    let outcome: Result<(), Box<dyn std::error::Error>> = (|| {
        match o.command.as_str() {
            "write" => {
                let session = service::connect(&o.address)?;
                write(&session, &o)?;
                session.detach()?;
            }
            "check" => {
                let session = service::connect(&o.address)?;
                check(&session, &o)?;
                session.detach()?;
            }
            "cycle" => {
                let mut last = 0u64;
                for _ in 0..o.times {
                    let session = service::connect(&o.address)?;
                    let chain = session.malloc(o.chunk, 8)?;
                    let scope = session.readwrite(&chain)?;
                    last = scope.data_mut(|d| {
                        let v = u64::from_le_bytes(d[..8].try_into().expect("8 bytes")) + 1;
                        d[..8].copy_from_slice(&v.to_le_bytes());
                        v
                    })?;
                    drop(scope);
                    session.detach()?;
                }
                println!("counter {last}");
            }
            "hold" => {
                let session = service::connect(&o.address)?;
                write(&session, &o)?;
                println!("attached in slot {}", session.rank());
                let mut line = String::new();
                std::io::stdin().lock().read_line(&mut line)?;
                session.detach()?;
            }
            "rounds" => {
                let session = service::connect(&o.address)?;
                rounds(&session, &o)?;
            }
            "uniform" => {
                let session = service::connect(&o.address)?;
                uniform(&session, &o)?;
                session.detach()?;
            }
            "hold-scope" | "hold-read-scope" => {
                // Dies (when killed) inside a scope of the counter.
                let session = service::connect(&o.address)?;
                let chain = session.malloc(o.chunk, 8)?;
                let (scope, kind) = if o.command == "hold-scope" {
                    (session.readwrite(&chain)?, "write")
                } else {
                    (session.read(&chain)?, "read")
                };
                println!(
                    "in a {kind} scope in slot {} (pid {})",
                    session.rank(),
                    std::process::id()
                );
                let mut line = String::new();
                std::io::stdin().lock().read_line(&mut line)?;
                // Still alive (stopped and continued, say): the service may
                // have gone on without it.
                match scope.release() {
                    Ok(()) => println!("released"),
                    Err(e) => println!("release refused: {e}"),
                }
            }
            other => return Err(format!("unknown command {other}").into()),
        }
        Ok(())
    })();
    if let Err(e) = outcome {
        eprintln!("attach: {e}");
        std::process::exit(1);
    }
}
