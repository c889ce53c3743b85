//! `sat-simulate`: runs the whole-stack simulator (`sat_core::simulator`)
//! over many seeds, or replays one.
//!
//! ```text
//! sat-simulate [--seeds N] [--from S] [--jobs J] [--ops K]   # seeds S..S+N, J at a time
//! sat-simulate --seed S [--trace]                            # one seed, every step printed
//! ```
//! Exits 0 when every seed passes; otherwise prints each failure (its seed,
//! the invariant, the last steps, and the command that replays it) and
//! exits 1. `make simulate SEEDS=N` runs it.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use sat_core::simulator::{run, Config, Failure};

struct Options {
    from: u64,
    seeds: u64,
    jobs: u64,
    config: Config,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        from: 0,
        seeds: 200,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        config: Config::default(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--seeds" => o.seeds = num("--seeds")?,
            "--from" => o.from = num("--from")?,
            "--seed" => {
                o.from = num("--seed")?;
                o.seeds = 1;
            }
            "--jobs" => o.jobs = num("--jobs")?.max(1),
            "--ops" => o.config.ops = num("--ops")? as u32,
            "--trace" => o.config.trace = true,
            "-h" | "--help" => {
                println!(
                    "usage: sat-simulate [--seeds N] [--from S] [--jobs J] [--ops K] | --seed S [--trace]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sat-simulate: {e}");
            return ExitCode::from(2);
        }
    };
    // SAT_LOG=debug shows the debug stream of every simulated process.
    if std::env::var_os("SAT_LOG").is_some() {
        sat_core::observe::init();
    }
    let started = Instant::now();
    let next = AtomicU64::new(o.from);
    let end = o.from + o.seeds;
    let failures: Mutex<Vec<Failure>> = Mutex::new(Vec::new());
    let totals = Mutex::new((
        0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64,
        0u64, 0u64, 0u64, 0u64,
    ));
    std::thread::scope(|s| {
        for _ in 0..o.jobs.min(o.seeds.max(1)) {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    return;
                }
                match run(seed, &o.config) {
                    Ok(out) => {
                        let mut t = totals.lock().unwrap();
                        t.0 += 1;
                        t.1 += out.steps;
                        t.2 += out.committed;
                        t.3 += out.aborted;
                        t.4 += out.read_checks;
                        t.5 += u64::from(out.host_slots);
                        t.6 += out.pushed;
                        t.7 += out.switches;
                        t.8 += out.moved;
                        t.9 += out.spilled;
                        t.10 += out.lost;
                        t.11 += out.held;
                        t.12 += out.backed_up;
                        t.13 += out.servers_lost;
                        t.14 += out.asked_ahead;
                        t.15 += out.put_direct;
                        t.16 += out.read_in_place;
                        t.17 += out.rendezvous_met;
                        t.18 += out.barriers_called_again;
                        if o.seeds == 1 {
                            println!("{out:?}");
                        }
                    }
                    Err(f) => {
                        eprintln!("{f}\n");
                        failures.lock().unwrap().push(f);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let (
        passed,
        steps,
        committed,
        aborted,
        reads,
        host,
        pushed,
        switches,
        moved,
        spilled,
        lost,
        held,
        backed_up,
        servers_lost,
        asked_ahead,
        put_direct,
        in_place,
        rendezvous,
        barriers_again,
    ) = totals.into_inner().unwrap();
    println!(
        "sat-simulate: {passed} of {} seeds passed ({}..{}) in {:.1} s: {steps} steps, \
         {committed} releases published, {aborted} scopes aborted, {reads} reads checked, \
         {pushed} chunks pushed as barriers ended, {asked_ahead} reads asked ahead of a chain's \
         READ, {put_direct} PUTs straight into host slots, {in_place} READs in place, {rendezvous} rendezvous met after their own wakeup, \
         {barriers_again} barrier calls made again after a loss, \
         {switches} protocol switches applied, \
         {moved} \
         homes moved, {spilled} versions read back from spill files, {lost} clients lost by \
         runs with recovery, {held} notifications held back for subscribers behind, \
         {backed_up} homes found whole at their backup, {servers_lost} servers lost by runs with \
         replicated homes that went on; {host} \
         passing runs kept their versions \
         in host slots",
        o.seeds,
        o.from,
        end,
        started.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        let mut seeds: Vec<u64> = failures.iter().map(|f| f.seed).collect();
        seeds.sort_unstable();
        println!("failing seeds: {seeds:?}");
        ExitCode::FAILURE
    }
}
