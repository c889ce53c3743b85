//! The transport benchmark: round trips of SAT's raw transport between two
//! ranks, next to libfabric's own `fi_pingpong` measured in the same run.
//!
//! ```text
//! sat-transport-bench [--providers shm,tcp] [--sizes 64,4096,65536,1048576] [--reps 3]
//!                     [--iters N]
//! ```
//! `--iters` sets the round trips of every size (default: 20,000 up to
//! 8 KiB, 5,000 up to 128 KiB, then about 1 GiB each way: 1,000 at 1 MiB,
//! 15 at 64 MiB).
//! Without `SAT_RANK` in its environment the program orchestrates: for each
//! provider and repetition it starts `satrun -n 2` on itself (the worker
//! mode, which ping-pongs over the transport and prints its median) and then
//! `fi_pingpong` server and client for each size, alternating so that both
//! see the same machine load. It prints one table: SAT's median round trip,
//! `fi_pingpong`'s round trip (it reports the mean one-way time per transfer,
//! doubled here) and their ratio.

mod bench_common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bench_common::{human, median, raw_ping_pong, SatRun};

struct Options {
    providers: Vec<String>,
    sizes: Vec<usize>,
    reps: usize,
    /// `--iters`: the round trips of every size, instead of [`iterations`].
    iters: Option<usize>,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        providers: vec!["shm".into(), "tcp".into()],
        sizes: vec![64, 4096, 65536, 1 << 20],
        reps: 3,
        iters: None,
    };
    bench_common::parse_options(args, |a, val| {
        match a {
            "--providers" => o.providers = bench_common::providers(&val()?),
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
            "--iters" => o.iters = Some(bench_common::positive(a, &val()?)?),
            "--worker" => {}
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(o)
}

/// Iterations per size: enough that fixed start-up costs vanish. Above
/// 1 MiB each size moves about 1 GiB each way (64 MiB: 15 round trips),
/// and never fewer than 10 round trips.
fn iterations(size: usize) -> usize {
    match size {
        0..=8192 => 20_000,
        8193..=131072 => 5_000,
        _ => ((1000 << 20) / size).clamp(10, 1_000),
    }
}

impl Options {
    fn iters(&self, size: usize) -> usize {
        self.iters.unwrap_or_else(|| iterations(size))
    }
}

// ---------------------------------------------------------------- worker

/// The raw round trip of each size, busy polling (`bench_common`).
fn worker(args: &[String], o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let runs: Vec<(usize, usize)> = o.sizes.iter().map(|&s| (s, o.iters(s))).collect();
    raw_ping_pong(args, &runs, |provider, size, us| {
        println!("RESULT {provider} {size} {us:.3}")
    })
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
fn fi_pingpong(provider: &str, size: usize, iters: usize) -> Result<f64, String> {
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
            &iters.to_string(),
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
    let client = client
        .args(["-P", &port.to_string(), "127.0.0.1"])
        .stdout(Stdio::piped())
        .spawn();
    // A pair that hangs (a provider refusing a size) must not hang the
    // bench: both end by the deadline, 1 s per MiB moved and 60 s more.
    let deadline = Instant::now() + Duration::from_secs(60 + ((2 * size * iters) >> 20) as u64);
    let mut client = match client {
        Ok(c) => c,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            return Err(format!("fi_pingpong client: {e}"));
        }
    };
    let mut stdout = client.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let mut finished = true;
    for child in [&mut client, &mut server] {
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                finished = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.wait();
    }
    let text = reader.join().unwrap_or_default();
    if !finished {
        return Err(format!(
            "fi_pingpong {provider} {size} B: no result by its deadline"
        ));
    }
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

/// One SAT worker run: the median round trip of each size.
fn sat_run(satrun: &SatRun, provider: &str, o: &Options) -> Result<Vec<(usize, f64)>, String> {
    let sizes: Vec<String> = o.sizes.iter().map(|s| s.to_string()).collect();
    let sizes = sizes.join(",");
    let iters = o.iters.map(|n| n.to_string());
    let mut worker = vec!["--worker", "--sizes", &sizes];
    if let Some(n) = &iters {
        worker.extend(["--iters", n]);
    }
    let words = satrun.results(2, None, provider, &worker, "RESULT")?;
    // RESULT provider size us
    Ok(words
        .iter()
        .filter_map(|f| Some((f.get(1)?, f.get(2)?)))
        .map(|(size, us)| (size.parse().unwrap_or(0), us.parse().unwrap_or(f64::NAN)))
        .collect())
}

fn orchestrate(o: &Options) -> Result<(), String> {
    let satrun = SatRun::find()?;
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
            for (size, us) in sat_run(&satrun, provider, o)? {
                if let Some(i) = o.sizes.iter().position(|&s| s == size) {
                    sat[i].push(us);
                }
            }
            for (i, &size) in o.sizes.iter().enumerate() {
                fi[i].push(fi_pingpong(provider, size, o.iters(size))?);
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

fn main() {
    bench_common::main(
        "sat-transport-bench",
        parse_options,
        |args, o| worker(args, &o).map_err(|e| e.to_string()),
        orchestrate,
    );
}
