//! The encryption layer's cost: 1 MiB chunks written by one client and read
//! by another, plaintext against protected, in the same run.
//!
//! ```text
//! sat-abe-bench [--providers shm,tcp] [--iters 30] [--epochs 5] [--size BYTES]
//! ```
//! Without `SAT_RANK` the program orchestrates: it makes an authority and
//! two tenant keys (same tenant: writer A, which may read too, reader B) in a temporary folder,
//! then for each provider starts `satrun -n 3` on itself (rank 0 the only
//! server, home of every chunk; ranks 1 and 2 the clients A and B) and
//! prints one table.
//!
//! Each chain is one chunk of `--size` bytes (1 MiB). Per round, A writes
//! the chunk (a WRITE scope that stamps every 4 KiB, then RELEASE) and B
//! reads it (a READ scope that checks every stamp, then RELEASE); the
//! plaintext chain and the protected one alternate round by round, so both
//! see the same machine load. What is timed:
//!
//! - **write**: A's acquire to the moment the home holds the version (A
//!   then sends itself a relayed message, which its server forwards only
//!   after it has applied A's release; one small round trip).
//! - **read**: B's acquire to its release, a miss that fetches the version.
//! - **read again**: the same read once more, the version unchanged: a hit
//!   on B's copy, which the layer does not decrypt again.
//! - **first read of an epoch**: B's read right after A started a new key
//!   epoch (and wrote under it): B fetches the epoch's record and unwraps
//!   its KEK with CP-ABE once, then caches it.
//! - **new epoch**: A's `new_epoch` (one CP-ABE wrap, the record written,
//!   the chunk sealed again).
//!
//! Steady state is write and read: the KEK is cached, a version costs one
//! AEAD pass and a signature on each side.

mod bench_common;

use std::time::Instant;

use bench_common::{human, median, micros, push_f64s, take_f64s, Coord, SatRun};
use sat_core::abe::keys::AuthorityKeys;
use sat_core::abe::{Protection, SecureChain, Vault};
use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Chain, Client};
use sat_core::protocol::{Access, ProtocolId};
use sat_core::{SatError, SatResult};

const PLAIN: u64 = 1000;
const SEALED: u64 = 2000;
const STAMP_EVERY: usize = 4096;

struct Options {
    providers: Vec<String>,
    iters: usize,
    epochs: usize,
    size: usize,
    worker: bool,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        providers: vec!["shm".into(), "tcp".into()],
        iters: 30,
        epochs: 5,
        size: 1 << 20,
        worker: false,
    };
    bench_common::parse_options(args, |a, val| {
        match a {
            "--providers" => o.providers = bench_common::providers(&val()?),
            "--iters" => o.iters = bench_common::positive(a, &val()?)?,
            "--epochs" => o.epochs = bench_common::positive(a, &val()?)?,
            "--size" => o.size = bench_common::positive(a, &val()?)?.max(STAMP_EVERY),
            "--worker" => o.worker = true,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(o)
}

// ----------------------------------------------------------------- worker

const WROTE: u32 = 1;
const READ: u32 = 2;
const FLUSH: u32 = 3;
const FIGURES: u32 = 4;

fn bad(what: &str) -> SatError {
    SatError::Usage(format!("abe bench: {what}"))
}

fn stamp(d: &mut [u8], v: u64) {
    for o in (0..d.len() - 8).step_by(STAMP_EVERY) {
        d[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
}

fn check(d: &[u8], v: u64) -> SatResult<()> {
    for o in (0..d.len() - 8).step_by(STAMP_EVERY) {
        let got = u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
        if got != v {
            return Err(bad(&format!(
                "byte {o} holds version {got}, the writer wrote {v}"
            )));
        }
    }
    Ok(())
}

/// One of the two chains the rounds alternate between.
enum Target<'a> {
    Plain(&'a Chain),
    Sealed(&'a Vault, &'a SecureChain),
}

impl Target<'_> {
    fn write(&self, c: &Client, v: u64) -> SatResult<()> {
        match self {
            Target::Plain(ch) => {
                c.acquire_chain(ch, Access::Write)?;
                c.with_chain_mut(ch, |d| stamp(d, v))?;
                c.release_chain(ch)
            }
            Target::Sealed(vault, ch) => {
                vault.acquire(c, ch, Access::Write)?;
                ch.with_data_mut(|d| stamp(d, v))?;
                vault.release(c, ch)
            }
        }
    }

    fn read(&self, c: &Client, v: u64) -> SatResult<()> {
        match self {
            Target::Plain(ch) => {
                c.acquire_chain(ch, Access::Read)?;
                let seen = c.with_chain(ch, |d| check(d, v))?;
                c.release_chain(ch)?;
                seen
            }
            Target::Sealed(vault, ch) => {
                vault.acquire(c, ch, Access::Read)?;
                let seen = ch.with_data(|d| check(d, v))?;
                vault.release(c, ch)?;
                seen
            }
        }
    }
}

#[derive(Default)]
struct Figures {
    write: [Vec<f64>; 2],
    read: [Vec<f64>; 2],
    hit: [Vec<f64>; 2],
    first_read: Vec<f64>,
    new_epoch: Vec<f64>,
}

fn worker(args: &[String], o: Options) -> Result<(), String> {
    let roles = Roles::new().role(1, move |c| bench_client(c, &o));
    run(roles, args.iter().cloned()).map_err(|e| e.to_string())
}

fn bench_client(c: &Client, o: &Options) -> RoleResult {
    let clients = c.topology().clients();
    if clients.len() != 2 {
        return Err(format!(
            "the abe bench needs 2 clients (satrun -n 3), the run has {}",
            clients.len()
        )
        .into());
    }
    let (a, b) = (clients[0], clients[1]);
    let vault = Vault::from_env(c.rank())?.ok_or("SAT_ABE_KEY is not set")?;
    c.set_chunk_size(o.size)?;
    let mut co = Coord::new(c);
    let protection = Protection::new("tenant_x and reader", "tenant_x and writer")?;
    let (plain, sealed) = if c.rank() == a {
        let p = c.malloc(PLAIN, o.size)?;
        let s = vault.malloc(c, ProtocolId::HomeMesi, SEALED, o.size, &protection)?;
        co.send(b, WROTE, &[])?;
        (p, s)
    } else {
        co.expect(a, WROTE)?;
        let p = c.lookup_chain(PLAIN, 1, std::time::Duration::from_secs(30))?;
        let s = vault.lookup_lst(c, &[SEALED], std::time::Duration::from_secs(30))?;
        (p, s)
    };
    let targets = [Target::Plain(&plain), Target::Sealed(&vault, &sealed)];
    let mut f = Figures::default();
    let warm = 2;
    let mut v = 0u64;
    for k in 0..warm + o.iters {
        for (which, t) in targets.iter().enumerate() {
            v += 1;
            let measured = k >= warm;
            if c.rank() == a {
                let t0 = Instant::now();
                t.write(c, v)?;
                co.send(a, FLUSH, &[])?;
                co.expect(a, FLUSH)?;
                let us = micros(t0.elapsed());
                co.send(b, WROTE, &[])?;
                co.expect(b, READ)?;
                if measured {
                    f.write[which].push(us);
                }
            } else {
                co.expect(a, WROTE)?;
                let t0 = Instant::now();
                t.read(c, v)?;
                let us = micros(t0.elapsed());
                // Again, unchanged: a hit on the local copy.
                let t1 = Instant::now();
                t.read(c, v)?;
                let hit = micros(t1.elapsed());
                co.send(a, READ, &[])?;
                if measured {
                    f.read[which].push(us);
                    f.hit[which].push(hit);
                }
            }
        }
    }
    for _ in 0..o.epochs {
        v += 1;
        if c.rank() == a {
            let t0 = Instant::now();
            vault.new_epoch(c, &sealed, None)?;
            f.new_epoch.push(micros(t0.elapsed()));
            targets[1].write(c, v)?;
            co.send(b, WROTE, &[])?;
            co.expect(b, READ)?;
        } else {
            co.expect(a, WROTE)?;
            let t0 = Instant::now();
            targets[1].read(c, v)?;
            f.first_read.push(micros(t0.elapsed()));
            co.send(a, READ, &[])?;
        }
    }
    if c.rank() == b {
        let mut buf = Vec::new();
        for list in [&f.read[0], &f.read[1], &f.hit[0], &f.hit[1], &f.first_read] {
            push_f64s(&mut buf, list);
        }
        co.send(a, FIGURES, &buf)?;
        return Ok(());
    }
    let d = co.expect(b, FIGURES)?;
    let mut at = 0;
    f.read[0] = take_f64s(&d, &mut at)?;
    f.read[1] = take_f64s(&d, &mut at)?;
    f.hit[0] = take_f64s(&d, &mut at)?;
    f.hit[1] = take_f64s(&d, &mut at)?;
    f.first_read = take_f64s(&d, &mut at)?;
    let m = |v: &mut Vec<f64>| median(v);
    let (w0, w1) = (m(&mut f.write[0]), m(&mut f.write[1]));
    let (r0, r1) = (m(&mut f.read[0]), m(&mut f.read[1]));
    println!("RESULT write {w0:.1} {w1:.1}");
    println!("RESULT read {r0:.1} {r1:.1}");
    let (h0, h1) = (m(&mut f.hit[0]), m(&mut f.hit[1]));
    println!("RESULT read-hit {h0:.1} {h1:.1}");
    println!("RESULT first-read - {:.1}", m(&mut f.first_read));
    println!("RESULT new-epoch - {:.1}", m(&mut f.new_epoch));
    Ok(())
}

// ----------------------------------------------------------- orchestrator

/// An authority and the two tenants' keys, in a folder removed at the end.
struct Keys(std::path::PathBuf);

impl Keys {
    fn new() -> Result<Keys, String> {
        let dir = std::env::temp_dir().join(format!("sat-abe-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let keys = Keys(dir);
        let auth = AuthorityKeys::setup().map_err(|e| e.to_string())?;
        // A may read too: its `new_epoch` reads the chunk to seal it again
        // (docs/ENCRYPTION.md), which a write-only key may not.
        let writer: &[&str] = &["tenant_x", "writer", "reader"];
        let reader: &[&str] = &["tenant_x", "reader"];
        for (rank, attrs) in [(1, writer), (2, reader)] {
            auth.issue(&format!("tenant-{rank}"), attrs)
                .and_then(|k| k.save(&keys.0.join(format!("tenant-{rank}.key"))))
                .map_err(|e| e.to_string())?;
        }
        Ok(keys)
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn orchestrate(o: &Options) -> Result<(), String> {
    let satrun = SatRun::find()?;
    let keys = Keys::new()?;
    // The workers inherit it; `{rank}` picks each one's key.
    std::env::set_var("SAT_ABE_KEY", keys.0.join("tenant-{rank}.key"));
    let worker = [
        "--worker".to_string(),
        "--iters".into(),
        o.iters.to_string(),
        "--epochs".into(),
        o.epochs.to_string(),
        "--size".into(),
        o.size.to_string(),
    ];
    let worker: Vec<&str> = worker.iter().map(String::as_str).collect();
    println!(
        "The encryption layer on {} chunks, one writer and one reader of one server, medians \
         ({} rounds after 2 warm-up; {} epochs); AEAD {}",
        human(o.size),
        o.iters,
        o.epochs,
        sat_core::abe::seal::Aead::preferred().name()
    );
    println!(
        "{:<9} {:<22} {:>14} {:>14} {:>7}",
        "provider", "operation", "plaintext us", "encrypted us", "ratio"
    );
    for provider in &o.providers {
        for f in satrun.results(3, None, provider, &worker, "RESULT")? {
            let num =
                |i: usize| -> f64 { f.get(i).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN) };
            let (plain, sealed) = (num(1), num(2));
            let name = match f.first().map(String::as_str) {
                Some("write") => "write (steady)",
                Some("read") => "read (steady)",
                Some("read-hit") => "read again (a hit)",
                Some("first-read") => "first read of an epoch",
                Some("new-epoch") => "new epoch (writer)",
                _ => "?",
            };
            let show = |x: f64| {
                if x.is_nan() {
                    "-".to_string()
                } else {
                    format!("{x:.1}")
                }
            };
            let ratio = if plain.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2}x", sealed / plain)
            };
            println!(
                "{:<9} {:<22} {:>14} {:>14} {:>7}",
                provider,
                name,
                show(plain),
                show(sealed),
                ratio
            );
        }
    }
    println!(
        "write: A's WRITE scope until the home holds the version; read: B's READ scope of the \
         fresh version;\n  read again: the same, unchanged (a hit);\n  first read of an epoch: \
         B's read after A's new epoch (record fetch + CP-ABE unwrap);\n  new epoch: A's CP-ABE \
         wrap, record and re-seal."
    );
    Ok(())
}

fn main() {
    bench_common::main(
        "sat-abe-bench",
        parse_options,
        |args, o| {
            if o.worker {
                worker(args, o)
            } else {
                Err("a worker needs --worker".into())
            }
        },
        orchestrate,
    );
}
