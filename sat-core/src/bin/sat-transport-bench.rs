//! The transport benchmark: round trips of SAT's raw transport between two
//! ranks, next to libfabric's own `fi_pingpong` measured in the same run.
//!
//! ```text
//! sat-transport-bench [--providers shm,tcp] [--sizes 64,4096,65536,1048576] [--reps 3]
//! ```
//! Without `SAT_RANK` in its environment the program orchestrates: for each
//! provider and repetition it starts `satrun -n 2` on itself (the worker
//! mode, which ping-pongs over the transport and prints its median) and then
//! `fi_pingpong` server and client for each size, alternating so that both
//! see the same machine load. It prints one table: SAT's median round trip,
//! `fi_pingpong`'s round trip (it reports the mean one-way time per transfer,
//! doubled here) and their ratio.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sat_core::bootstrap::join;
use sat_core::transport::{Payload, Received, Sender, Transport};

struct Options {
    providers: Vec<String>,
    sizes: Vec<usize>,
    reps: usize,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        providers: vec!["shm".into(), "tcp".into()],
        sizes: vec![64, 4096, 65536, 1 << 20],
        reps: 3,
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--providers" => o.providers = val()?.split(',').map(str::to_string).collect(),
            "--sizes" => {
                o.sizes = val()?
                    .split(',')
                    .map(|s| s.parse().map_err(|_| format!("bad size {s}")))
                    .collect::<Result<_, _>>()?
            }
            "--reps" => {
                o.reps = val()?
                    .parse()
                    .map_err(|_| "--reps takes a number".to_string())?
            }
            "--worker" => {}
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

/// Iterations per size: enough that fixed start-up costs vanish.
fn iterations(size: usize) -> usize {
    match size {
        0..=8192 => 20_000,
        8193..=131072 => 5_000,
        _ => 1_000,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

// ---------------------------------------------------------------- worker

/// Data messages carry no header (the payload is the message, as in
/// fi_pingpong); the closing handshake is the one-byte header `[1]`.
fn worker(args: &[String], o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let mut joined = join(args, |_| true)?;
    let t = &mut joined.transport;
    let me = t.rank();
    let peer = 1 - me;
    let max = *o.sizes.iter().max().unwrap_or(&0);
    let buf: Arc<[u8]> = vec![0xA5u8; max].into();
    let mut peer_done = false;
    for &size in &o.sizes {
        let payload: Arc<[u8]> = buf[..size].into();
        let iters = iterations(size);
        let warmup = iters / 10;
        let mut rtts = Vec::with_capacity(iters);
        for i in 0..warmup + iters {
            if me == 0 {
                let start = Instant::now();
                t.send(peer, &[], Payload::Shared(&payload))?;
                wait_reply(t, size, &mut peer_done)?;
                if i >= warmup {
                    rtts.push(start.elapsed().as_secs_f64() * 1e6);
                }
            } else {
                wait_reply(t, size, &mut peer_done)?;
                t.send(peer, &[], Payload::Shared(&payload))?;
            }
        }
        if me == 0 {
            println!("RESULT {} {size} {:.3}", joined.provider, median(&mut rtts));
        }
    }
    // Close together: neither side may leave while a message is in flight.
    // The peer's goodbye may arrive in the same poll as its last reply.
    t.send(peer, &[1], Payload::None)?;
    while !peer_done {
        t.poll(&mut |_, m| peer_done |= m.header == [1])?;
    }
    while !t.sends_drained()? {
        t.poll(&mut |_, _| {})?;
    }
    Ok(())
}

/// Busy-polls (as fi_pingpong does) until the peer's one message of this
/// iteration arrives, and checks its size.
fn wait_reply(
    t: &mut impl Transport,
    size: usize,
    peer_done: &mut bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut got = false;
    let mut wrong = None;
    while !got {
        t.poll(&mut |_: &mut dyn Sender, m: Received<'_>| {
            if m.header == [1] {
                *peer_done = true;
            } else {
                got = true;
                if m.payload.len() != size {
                    wrong = Some(m.payload.len());
                }
            }
        })?;
    }
    match wrong {
        Some(len) => Err(format!("expected {size} bytes, got {len}").into()),
        None => Ok(()),
    }
}

// ---------------------------------------------------------- orchestrator

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(47592)
}

fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .map(|s| {
                s.lines()
                    .any(|l| l.contains(&hex) && l.split_whitespace().nth(3) == Some("0A"))
            })
            .unwrap_or(false)
    })
}

/// One fi_pingpong measurement: the round trip in microseconds.
fn fi_pingpong(provider: &str, size: usize) -> Result<f64, String> {
    let port = free_port();
    let prov = if provider == "tcp" { "tcp" } else { provider };
    let common = |c: &mut Command| {
        c.args([
            "-p",
            prov,
            "-e",
            "rdm",
            "-m",
            "tagged",
            "-S",
            &size.to_string(),
            "-I",
            &iterations(size).to_string(),
        ])
        .env("FI_TCP_IFACE", "lo")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    };
    let mut server = Command::new("fi_pingpong");
    common(&mut server);
    let mut server = server
        .args(["-B", &port.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start fi_pingpong (apt-get install libfabric-bin): {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !listening(port) {
        if Instant::now() > deadline || server.try_wait().ok().flatten().is_some() {
            let _ = server.kill();
            let _ = server.wait();
            return Err("fi_pingpong server did not start".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut client = Command::new("fi_pingpong");
    common(&mut client);
    let out = client.args(["-P", &port.to_string(), "127.0.0.1"]).output();
    let _ = server.wait();
    let out = out.map_err(|e| format!("fi_pingpong client: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    let line = text
        .lines()
        .nth(1)
        .ok_or_else(|| format!("fi_pingpong printed no result: {text}"))?;
    let usec: f64 = line
        .split_whitespace()
        .nth(6)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("cannot read fi_pingpong's line: {line}"))?;
    Ok(usec * 2.0)
}

fn sat_run(
    satrun: &Path,
    me: &Path,
    provider: &str,
    o: &Options,
) -> Result<Vec<(usize, f64)>, String> {
    let sizes: Vec<String> = o.sizes.iter().map(|s| s.to_string()).collect();
    let out = Command::new(satrun)
        .args(["-n", "2", "--provider", provider, "--"])
        .arg(me)
        .args(["--worker", "--sizes", &sizes.join(",")])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", satrun.display()))?;
    if !out.status.success() {
        return Err(format!(
            "the SAT worker run failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut res = Vec::new();
    for line in BufReader::new(&out.stdout[..])
        .lines()
        .map_while(Result::ok)
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = f.iter().position(|w| *w == "RESULT") {
            if let (Some(size), Some(us)) = (f.get(i + 2), f.get(i + 3)) {
                res.push((size.parse().unwrap_or(0), us.parse().unwrap_or(f64::NAN)));
            }
        }
    }
    Ok(res)
}

fn orchestrate(o: &Options) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let satrun: PathBuf = me.with_file_name("satrun");
    if !satrun.exists() {
        return Err(format!(
            "{} not found: build it first (cargo build --release --bin satrun)",
            satrun.display()
        ));
    }
    println!(
        "Round trip, median of {} runs, microseconds (lower is better)",
        o.reps
    );
    println!(
        "{:<9} {:>9} {:>12} {:>14} {:>16}",
        "provider", "size", "SAT raw", "fi_pingpong", "SAT/fi_pingpong"
    );
    for provider in &o.providers {
        let mut sat: Vec<Vec<f64>> = vec![Vec::new(); o.sizes.len()];
        let mut fi: Vec<Vec<f64>> = vec![Vec::new(); o.sizes.len()];
        for _ in 0..o.reps {
            for (size, us) in sat_run(&satrun, &me, provider, o)? {
                if let Some(i) = o.sizes.iter().position(|&s| s == size) {
                    sat[i].push(us);
                }
            }
            for (i, &size) in o.sizes.iter().enumerate() {
                fi[i].push(fi_pingpong(provider, size)?);
            }
        }
        for (i, &size) in o.sizes.iter().enumerate() {
            let s = median(&mut sat[i]);
            let f = median(&mut fi[i]);
            println!(
                "{:<9} {:>9} {:>12.2} {:>14.2} {:>16.2}",
                provider,
                human(size),
                s,
                f,
                s / f
            );
        }
    }
    println!("fi_pingpong: -e rdm -m tagged, mean one-way time per transfer doubled; SAT: median of per-iteration round trips, busy polling.");
    Ok(())
}

fn human(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let o = match parse_options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sat-transport-bench: {e}");
            std::process::exit(2);
        }
    };
    let result = if std::env::var_os("SAT_RANK").is_some() {
        worker(&args, &o).map_err(|e| e.to_string())
    } else {
        orchestrate(&o)
    };
    if let Err(e) = result {
        eprintln!("sat-transport-bench: {e}");
        std::process::exit(1);
    }
}
