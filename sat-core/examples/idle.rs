//! Two processes wait, each for 10 s: the first in `recv` until the second
//! sends, the second in a plain sleep of its role (its client's background
//! progress waits meanwhile). Each prints the CPU time it used while it
//! waited, from `getrusage` (all its threads), and the wall time.
//!
//! ```text
//! satrun -n 3 --topology sat-core/topologies/figure11.xml -- target/release/examples/idle [--seconds 10]
//! ```

use std::time::{Duration, Instant};

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;

/// User plus system time of this process so far.
fn cpu_time() -> Duration {
    let mut r = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the rusage it is given.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, r.as_mut_ptr()) } == 0;
    assert!(ok, "getrusage failed");
    // SAFETY: getrusage succeeded.
    let r = unsafe { r.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(r.ru_utime) + tv(r.ru_stime)
}

fn report(who: &str, cpu0: Duration, wall0: Instant) {
    let (cpu, wall) = (cpu_time() - cpu0, wall0.elapsed());
    println!(
        "{who}: waited {} us, used {} us of CPU",
        wall.as_micros(),
        cpu.as_micros()
    );
}

fn waiter(c: &Client) -> RoleResult {
    c.send(2, 0, b"waiting")?;
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    c.recv()?;
    report("waiter", cpu0, wall0);
    Ok(())
}

fn sleeper(c: &Client, idle: Duration) -> RoleResult {
    c.recv()?;
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    std::thread::sleep(idle);
    report("sleeper", cpu0, wall0);
    c.send(1, 0, b"done")?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let roles = Roles::new()
        .role(1, waiter)
        .role(2, move |c| sleeper(c, Duration::from_secs(seconds)));
    if let Err(e) = run(roles, args) {
        eprintln!("idle: {e}");
        std::process::exit(1);
    }
}
