//! A run that loses a client inside a write scope and goes on (a run with
//! recovery: `satrun --enable-recovery`, or `SAT_RECOVERY=on` under another
//! launcher).
//!
//! ```text
//! satrun --enable-recovery -n 4 -- target/release/examples/recovery --k 200 --victim 2 --after 5
//! ```
//! Every client adds 1 to a shared counter `--k` times, each in its own
//! READWRITE scope. The victim (`--victim RANK`) stops after `--after`
//! increments: inside its next write scope it writes a value nobody may
//! see, then kills itself with SIGKILL (`--how kill`, the default) or stops
//! itself with SIGSTOP (`--how stop`: the run declares it lost after its
//! lease). The others then wait until the run tells them a process was lost
//! (a rendezvous only the victim would wake, and a barrier of every client,
//! which can no longer complete, each fail once with `ProcessLost`), pass a
//! barrier of the clients left, and check that the
//! counter holds exactly their increments plus the victim's released ones:
//! its unreleased write never shows, and nobody waits for it.
//!
//! A stopped victim that is continued later (`kill -CONT`) finds its run
//! gone on without it: its next call fails, and it prints why.
//!
//! `--how cut`: the victim increments until a call fails, printing each
//! increment, for a test that cuts its network link while data flows; the
//! survivors then print the victim's share of the counter (its released
//! increments that reached the home), which the test compares with the
//! victim's last line. `--bytes N` makes the counter N bytes (default 8),
//! every 8-byte word holding the count, so that a torn version shows.

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::Access;
use sat_core::SatError;

const COUNTER: u64 = 7;
/// A rendezvous only the victim would wake.
const VICTIMS_WAKEUP: u32 = 9;
/// What the victim writes and never releases.
const NEVER: u64 = 0xdead_beef_dead_beef;

struct Options {
    k: u64,
    victim: u32,
    after: u64,
    how: How,
    bytes: usize,
}

#[derive(PartialEq, Eq)]
enum How {
    Kill,
    Stop,
    /// Run until cut off.
    Cut,
}

/// The count every word of the counter holds; an error for a version whose
/// words differ (torn: bytes of two versions).
fn value(c: &Client) -> Result<u64, SatError> {
    c.with_data(COUNTER, |d| {
        let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap());
        let v = word(&d[..8]);
        match d.chunks_exact(8).position(|w| word(w) != v) {
            None => Ok(v),
            Some(i) => Err(SatError::Usage(format!(
                "the counter is torn: word 0 holds {v}, word {i} {}",
                word(&d[i * 8..i * 8 + 8])
            ))),
        }
    })?
}

fn fill(d: &mut [u8], v: u64) {
    for w in d.chunks_exact_mut(8) {
        w.copy_from_slice(&v.to_le_bytes());
    }
}

fn increment(c: &Client) -> Result<u64, SatError> {
    c.acquire(COUNTER, Access::ReadWrite)?;
    let v = value(c)?;
    if v == NEVER {
        return Err(SatError::Usage(
            "the counter shows the victim's unreleased write".into(),
        ));
    }
    c.with_data_mut(COUNTER, |d| fill(d, v + 1))?;
    c.release(COUNTER)?;
    Ok(v + 1)
}

/// The victim of `--how cut`: increments until a call fails.
fn cut_off(c: &Client) -> RoleResult {
    let mut done = 0u64;
    loop {
        match increment(c) {
            Ok(_) => {
                done += 1;
                println!("rank {} increments {done}", c.rank());
            }
            Err(e) => {
                println!("rank {} cut off after {done} increments: {e}", c.rank());
                return Err(e.into());
            }
        }
    }
}

fn victim(c: &Client, o: &Options) -> RoleResult {
    if o.how == How::Cut {
        return cut_off(c);
    }
    for _ in 0..o.after {
        increment(c)?;
    }
    c.acquire(COUNTER, Access::ReadWrite)?;
    c.with_data_mut(COUNTER, |d| fill(d, NEVER))?;
    let stop = o.how == How::Stop;
    println!(
        "rank {} pid {} inside its write scope after {} increments: {}",
        c.rank(),
        std::process::id(),
        o.after,
        if stop { "stopping" } else { "dying" }
    );
    let sig = if stop { libc::SIGSTOP } else { libc::SIGKILL };
    // SAFETY: raise(3) with a signal number.
    unsafe {
        libc::raise(sig);
    }
    // Continued after a stop: the run went on without this process.
    match c.release(COUNTER).and_then(|()| increment(c).map(|_| ())) {
        Ok(()) => Err("the run took this process back after declaring it lost".into()),
        Err(e) => {
            println!("rank {} continued, and was told: {e}", c.rank());
            Err(e.into())
        }
    }
}

/// Passes barrier `id` with `count` arrivals, calling again while the call
/// reports a loss it had not been told of.
fn barrier_of(c: &Client, id: u32, count: u32) -> Result<(), SatError> {
    loop {
        match c.barrier(id, count) {
            Err(SatError::ProcessLost(_)) => continue,
            other => return other,
        }
    }
}

fn survivor(c: &Client, o: &Options) -> RoleResult {
    let clients = c.client_count();
    for _ in 0..o.k {
        increment(c)?;
    }
    // The victim never wakes it: it ends only when the run has lost the
    // victim, whether it waited at the loss or came after it.
    match c.rendezvous(VICTIMS_WAKEUP) {
        Err(SatError::ProcessLost(_)) => println!("rank {} told at its rendezvous", c.rank()),
        Ok(()) => return Err("a rendezvous only the lost victim would wake returned".into()),
        Err(e) => return Err(e.into()),
    }
    // A barrier of every client: the victim never comes, so it ends only
    // when the run has lost it.
    match c.barrier(1, clients) {
        Err(SatError::ProcessLost(why)) => println!("rank {} told: {why}", c.rank()),
        Ok(()) => return Err("a barrier counting the lost victim completed".into()),
        Err(e) => return Err(e.into()),
    }
    barrier_of(c, 2, clients - 1)?;
    c.acquire(COUNTER, Access::Read)?;
    let v = value(c)?;
    c.release(COUNTER)?;
    let theirs = u64::from(clients - 1) * o.k;
    if o.how == How::Cut {
        // What the victim released before the cut is not known here: the
        // test compares this share with the victim's own count.
        println!(
            "rank {}: counter {v}, the victim's share {}",
            c.rank(),
            v.checked_sub(theirs)
                .ok_or_else(|| format!("the counter holds {v}, below the survivors' {theirs}"))?
        );
        barrier_of(c, 3, clients - 1)?;
        return Ok(());
    }
    let expected = theirs + o.after;
    println!(
        "rank {}: counter {v}, expected {expected} ({} survivors x {} + {} of the victim)",
        c.rank(),
        clients - 1,
        o.k,
        o.after
    );
    if v != expected {
        return Err(format!("the counter holds {v}, not {expected}").into());
    }
    // Everyone has read before anyone leaves.
    barrier_of(c, 3, clients - 1)?;
    Ok(())
}

fn role(c: &Client, o: &Options) -> RoleResult {
    c.malloc(COUNTER, o.bytes)?;
    println!("rank {} started", c.rank());
    if c.rank() == o.victim {
        victim(c, o)
    } else {
        survivor(c, o)
    }
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
    let how = args
        .iter()
        .position(|a| a == "--how")
        .and_then(|i| args.get(i + 1))
        .map_or("kill", String::as_str);
    let o = std::sync::Arc::new(Options {
        k: number("--k", 100),
        victim: number("--victim", 2) as u32,
        after: number("--after", 5),
        how: match how {
            "stop" => How::Stop,
            "cut" => How::Cut,
            _ => How::Kill,
        },
        bytes: (number("--bytes", 8) as usize).max(8) / 8 * 8,
    });
    let mut roles = Roles::new();
    for id in 1..=8 {
        let o = o.clone();
        roles = roles.role(id, move |c| role(c, &o));
    }
    if let Err(e) = run(roles, args) {
        eprintln!("recovery: {e}");
        std::process::exit(1);
    }
}
