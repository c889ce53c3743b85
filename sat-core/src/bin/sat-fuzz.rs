//! `sat-fuzz`: runs the fuzz targets of `sat_core::fuzz` (feature `fuzz`;
//! with feature `abe`, the encryption layer's too).
//!
//! ```text
//! sat-fuzz [--inputs N] [--seed S] [--target NAME] [--replay N] [--list]
//! ```
//! Each target gets N inputs (default 1,000,000), its corpus first, then
//! seeded mutations. A failure prints the target, the seed, the input's
//! number and bytes, and writes the bytes to `sat-fuzz-TARGET-SEED-N.bin`;
//! `--target T --seed S --replay N` runs that one input again. Exit status:
//! 0 when every target passed, 1 on a failure, 2 on bad usage.

use std::process::ExitCode;

use sat_core::fuzz::{self, Target};

struct Options {
    inputs: u64,
    seed: u64,
    target: Option<String>,
    replay: Option<u64>,
    list: bool,
}

const USAGE: &str = "usage: sat-fuzz [--inputs N] [--seed S] [--target NAME] [--replay N] [--list]";

fn options() -> Result<Options, String> {
    let mut o = Options {
        inputs: 1_000_000,
        seed: 1,
        target: None,
        replay: None,
        list: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |name: &str| {
            args.next()
                .and_then(|v| v.replace('_', "").parse::<u64>().ok())
                .ok_or_else(|| format!("{name} takes a number\n{USAGE}"))
        };
        match a.as_str() {
            "--inputs" => o.inputs = number("--inputs")?,
            "--seed" => o.seed = number("--seed")?,
            "--replay" => o.replay = Some(number("--replay")?),
            "--target" => {
                o.target = Some(
                    args.next()
                        .ok_or(format!("--target takes a name\n{USAGE}"))?,
                )
            }
            "--list" => o.list = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(o)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn main() -> ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sat-fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    let all = fuzz::targets();
    if o.list {
        for t in &all {
            println!("{}", t.name);
        }
        return ExitCode::SUCCESS;
    }
    let chosen: Vec<&Target> = all
        .iter()
        .filter(|t| o.target.as_deref().is_none_or(|n| n == t.name))
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = all.iter().map(|t| t.name).collect();
        eprintln!(
            "sat-fuzz: no target {:?}; the targets are {}",
            o.target.unwrap_or_default(),
            names.join(", ")
        );
        return ExitCode::from(2);
    }
    // A target's panics are its findings: they are reported below, once,
    // with the input, rather than by the default hook on every one.
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(n) = o.replay {
        let t = chosen[0];
        let corpus = (t.corpus)();
        let bytes = corpus
            .get(n as usize)
            .cloned()
            .unwrap_or_else(|| fuzz::input(&corpus, o.seed, n));
        println!("{} input {n} of seed {}: {}", t.name, o.seed, hex(&bytes));
        let _ = std::panic::take_hook();
        (t.check)(&bytes);
        println!("passed");
        return ExitCode::SUCCESS;
    }
    let mut failed = false;
    for t in chosen {
        let out = fuzz::run(t, o.seed, o.inputs);
        let rate = out.inputs as f64 / out.elapsed.as_secs_f64().max(1e-9);
        match &out.failure {
            None => println!(
                "{:<22} {:>10} inputs  {:>8.2} s  {:>10.0} inputs/s  no failure",
                out.name,
                out.inputs,
                out.elapsed.as_secs_f64(),
                rate
            ),
            Some((n, bytes, why)) => {
                failed = true;
                let file = format!("sat-fuzz-{}-{}-{n}.bin", out.name, o.seed);
                let _ = std::fs::write(&file, bytes);
                println!(
                    "{:<22} FAILED at input {n} (seed {}): {why}\n  input ({} bytes, in {file}): {}\n  \
                     replay: sat-fuzz --target {} --seed {} --replay {n}",
                    out.name,
                    o.seed,
                    bytes.len(),
                    hex(&bytes[..bytes.len().min(256)]),
                    out.name,
                    o.seed
                );
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
