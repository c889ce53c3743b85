//! Keeping a host's cores busy: a process about to sleep on a core brings
//! over one of the run's processes that share another core.
//!
//! **Why.** On one host a run's processes hand work to each other: in the
//! video pipeline (section 3.2) the input makes a frame while two tasks
//! compute, so three processes are often runnable on two cores. The kernel
//! places a process on a core when it wakes; when, a moment later, the
//! process on the other core goes to sleep, the kernel's load balancer does
//! not move one of the two sharing a core onto the one going idle at once:
//! a process that ran in the last half millisecond counts as cache-hot, and
//! a core that was idle only briefly does not look for work. The kernel
//! tick (4 ms here) then balances. A trace of the pipeline (`perf sched`,
//! docs/PERFORMANCE.md) found a core idle while the other held two of the
//! run's runnable processes for about a sixth of the two cores' time.
//!
//! **How.** Each process of a run on one host has a card in its doorbell's
//! segment (`segment/card.rs`): the role's thread, whether it sleeps in a
//! SAT wait, and the core it was last seen on. A role's thread about to
//! sleep on core `c` reads its peers' cards, and moves to `c` a peer whose
//! doorbell rang since it went to sleep (woken, it waits for a core), or
//! else, when another core holds two of them that run, the one that woke
//! last: it sets that thread's affinity to `c` alone and at once back to the
//! cores its card gives (its mask when its role began), which moves the
//! thread now without pinning it. The kernel keeps its say everywhere else:
//! a thread whose card leaves `c` out, or whose mask is not its card's (the
//! application set it, or another process is moving it this instant), is
//! left alone, and a peer of another user (`EPERM`) ends the balancing for
//! this process.
//!
//! One thread of each process takes part: a client's role thread (the one
//! that runs the application and its handlers), a server's loop. The
//! background progress thread and threads the application starts do not. A card may be stale: a
//! peer that computes without SAT calls may have been moved by the kernel
//! since it was last seen, and a wrong move costs one migration.
//! It sees only its own run's processes: on a host shared with other work,
//! a core this process leaves may not go idle, and the kernel balances
//! against that work as before. `SAT_BALANCE=off` turns it off.
//!
//! This changes where processes run, not what they read or write: nothing of
//! the protocols depends on it, and the whole-stack simulator's clock never
//! sleeps (`crate::progress::Clock::Simulated`), so it never balances.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::segment::card::{Card, CardView};
use crate::transport::doorbell::Doorbell;

/// More host processes than this and a sleep would read too many cards.
const MAX_PEERS: usize = 256;

struct Board {
    own: Card,
    /// The other processes of the host: their doorbells and cards.
    peers: Vec<(Doorbell, Card)>,
    /// Set when moving a peer was refused for want of permission.
    refused: AtomicBool,
    /// How many times this process brought a peer to its core.
    brought: AtomicU64,
}

static BOARD: OnceLock<Board> = OnceLock::new();

thread_local! {
    /// This thread is the one its process's card speaks for.
    static CARDED: Cell<bool> = const { Cell::new(false) };
}

/// Takes part with `own` among `peers` (the doorbells of the run's other
/// processes, all on this host), if `SAT_BALANCE` allows.
pub(crate) fn install(own: &Doorbell, peers: &[Doorbell]) {
    if !crate::settings::get().balance || peers.is_empty() || peers.len() > MAX_PEERS {
        return;
    }
    let _ = BOARD.set(Board {
        own: own.card(),
        peers: peers.iter().map(|b| (b.clone(), b.card())).collect(),
        refused: AtomicBool::new(false),
        brought: AtomicU64::new(0),
    });
}

/// The calling thread is the role's (a client's role thread, a server's
/// loop): its process's card speaks for it.
pub(crate) fn enter_role() {
    if let Some(b) = BOARD.get() {
        b.own.claim(gettid(), current_cpu(), own_cores());
        CARDED.with(|c| c.set(true));
    }
}

/// The role is over: the card speaks for no thread any more. The debug
/// stream says how many times this process brought a peer to its core.
pub(crate) fn leave_role() {
    if CARDED.with(|c| c.replace(false)) {
        if let Some(b) = BOARD.get() {
            b.own.claim(0, current_cpu(), 0);
            tracing::debug!(
                "balance: brought a peer to this process's core {} times",
                b.brought.load(Ordering::Relaxed)
            );
        }
    }
}

/// The calling thread is about to sleep on its doorbell until its ring
/// count moves past `rung`: say so, and bring a peer that shares another
/// core over to this one.
pub(crate) fn before_sleep(rung: u32) {
    if !CARDED.with(Cell::get) {
        return;
    }
    let Some(b) = BOARD.get() else { return };
    let cpu = current_cpu();
    b.own.sleeps(cpu, rung);
    if b.refused.load(Ordering::Relaxed) {
        return;
    }
    let peers: Vec<Peer> = b
        .peers
        .iter()
        .map(|(bell, card)| {
            let card = card.view();
            Peer {
                woken: card.asleep && bell.rung() != card.rung,
                card,
            }
        })
        .collect();
    let Some(i) = to_bring(cpu, &peers) else {
        return;
    };
    let (bell, card) = &b.peers[i];
    let pid = bell.pid();
    match bring(pid, &peers[i].card, cpu) {
        Ok(true) => {
            card.moved_to(cpu);
            b.brought.fetch_add(1, Ordering::Relaxed);
        }
        Ok(false) => {}
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            tracing::debug!("balance: moving process {pid} was refused ({e}); not trying again");
            b.refused.store(true, Ordering::Relaxed);
        }
        Err(e) => tracing::trace!("balance: moving process {pid}: {e}"),
    }
}

/// The calling thread woke from its sleep.
pub(crate) fn after_sleep() {
    if !CARDED.with(Cell::get) {
        return;
    }
    if let Some(b) = BOARD.get() {
        b.own.woke(current_cpu(), now_ns());
    }
}

/// What the caller knows of a peer when it is about to sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Peer {
    card: CardView,
    /// Its doorbell rang since it went to sleep: it is woken, and waits for
    /// a core to run on (its card says so only once it runs).
    woken: bool,
}

/// Which peer to bring to core `cpu`, which the caller is leaving: a peer
/// woken and not yet running, if there is one (it waits for a core, and
/// where the kernel queued it is unknown: its card names the core it slept
/// on; a no-op if it was queued here); else, of the peers that run on
/// another core with a second one, the one that woke last.
///
/// Whether a peer that runs is on `cpu` already does not count: cards go
/// stale (the kernel moves a computing process without telling), and
/// trusting them that way left cores idle more often (measured: about 445
/// against 470 frames/s on the pipeline) than the needless moves it saved.
fn to_bring(cpu: u32, peers: &[Peer]) -> Option<usize> {
    if let Some(i) = peers.iter().position(|p| p.card.tid > 0 && p.woken) {
        return Some(i);
    }
    let running = |p: &Peer| p.card.tid > 0 && !p.card.asleep;
    let sharing = |p: &Peer| {
        peers
            .iter()
            .filter(|q| running(q) && q.card.cpu == p.card.cpu)
            .count()
            >= 2
    };
    peers
        .iter()
        .enumerate()
        .filter(|(_, p)| running(p) && p.card.cpu != cpu && sharing(p))
        .max_by_key(|(_, p)| p.card.woke_ns)
        .map(|(i, _)| i)
}

/// Moves the thread `card` speaks for, of process `pid`, to `cpu` now,
/// then lets it run on the cores its card gives again; false when `cpu` is
/// not among them, the thread is gone, or its affinity is not what its card
/// says (another process is moving it this instant, or the application set
/// it since: either way it is left alone).
fn bring(pid: u32, card: &CardView, cpu: u32) -> std::io::Result<bool> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if cpu >= 64 || card.cores & (1 << cpu) == 0 || card.cores.count_ones() < 2 {
        return Ok(false);
    }
    // SAFETY: tgkill with signal 0 sends nothing; it checks that the thread
    // is still one of `pid`'s (a card outlives a process that crashed, and
    // its thread id may have been reused by another process).
    if unsafe { libc::syscall(libc::SYS_tgkill, pid as libc::pid_t, card.tid, 0) } != 0 {
        return Ok(false);
    }
    let allowed = cpu_set(card.cores);
    // SAFETY: cpu_set_t is plain bits; the calls get and set the affinity of
    // the thread through pointers to local sets of the size given.
    unsafe {
        let mut now: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(card.tid, size, &mut now) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if !libc::CPU_EQUAL(&now, &allowed) {
            return Ok(false);
        }
        if libc::sched_setaffinity(card.tid, size, &cpu_set(1 << cpu)) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::sched_setaffinity(card.tid, size, &allowed) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(true)
}

/// The set of the cores whose bits `cores` holds.
fn cpu_set(cores: u64) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain bits.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for n in (0..64).filter(|n| cores & (1 << n) != 0) {
        // SAFETY: n is below the set's 1024 bits.
        unsafe { libc::CPU_SET(n, &mut set) };
    }
    set
}

/// The cores the calling thread may run on, as bits; 0 (not to be moved)
/// when any of them is past core 63 or the mask cannot be read.
fn own_cores() -> u64 {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: reads this thread's mask into a local set of the size given.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return 0;
    }
    // SAFETY: every n is below the set's 8 * size bits.
    let has = |n: usize| unsafe { libc::CPU_ISSET(n, &set) };
    if (64..8 * size).any(has) {
        return 0;
    }
    (0..64).filter(|&n| has(n)).fold(0, |bits, n| bits | 1 << n)
}

fn gettid() -> i32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::gettid() }
}

fn current_cpu() -> u32 {
    // SAFETY: no arguments; -1 (no rseq, old kernel) maps to no core.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(u32::MAX)
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the monotonic clock into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(tid: i32, asleep: bool, cpu: u32, woke_ns: u64) -> Peer {
        Peer {
            card: CardView {
                tid,
                asleep,
                cpu,
                rung: 0,
                woke_ns,
                cores: 0b11,
            },
            woken: false,
        }
    }

    #[test]
    fn the_last_woken_of_two_sharing_a_core_is_brought_over() {
        let peers = [
            peer(10, false, 1, 100),
            peer(11, true, 0, 300),
            peer(12, false, 1, 200),
        ];
        assert_eq!(to_bring(0, &peers), Some(2));
    }

    #[test]
    fn a_peer_woken_but_not_yet_running_goes_first() {
        // 12 sleeps by its card, but its doorbell rang: it waits for core 1,
        // where 10 runs.
        let mut woken = peer(12, true, 1, 50);
        woken.woken = true;
        let peers = [peer(10, false, 1, 100), peer(11, true, 0, 300), woken];
        assert_eq!(to_bring(0, &peers), Some(2));
        let mut unrung = peers;
        unrung[2].woken = false;
        assert_eq!(to_bring(0, &unrung), None, "10 alone on core 1");
        // Woken after sleeping on this very core: brought all the same (the
        // kernel may have queued it on the busy one).
        let mut here = peers;
        here[2].card.cpu = 0;
        assert_eq!(to_bring(0, &here), Some(2));
    }

    #[test]
    fn nobody_moves_when_no_other_core_is_shared() {
        // One running peer per core: nothing to gain.
        let spread = [peer(10, false, 1, 100), peer(11, false, 2, 200)];
        assert_eq!(to_bring(0, &spread), None);
        // Two share this very core (by their cards): moving one here gains
        // nothing.
        let here = [peer(10, false, 0, 100), peer(11, false, 0, 200)];
        assert_eq!(to_bring(0, &here), None);
        // Sleeping peers and cards that speak for no thread do not count.
        let idle = [
            peer(10, true, 1, 100),
            peer(11, false, 1, 200),
            peer(0, false, 1, 300),
        ];
        assert_eq!(to_bring(0, &idle), None);
        // A card that says a peer runs here does not stop the move: it may
        // be stale.
        let stale = [
            peer(10, false, 1, 100),
            peer(11, false, 1, 200),
            peer(12, false, 0, 300),
        ];
        assert_eq!(to_bring(0, &stale), Some(1));
    }

    /// The move itself, on a real thread that spins and says where it runs:
    /// not to a core its card leaves out, not while its mask differs from
    /// its card's; else it runs on the core asked, with its mask as before.
    #[test]
    fn bring_moves_a_thread_now_and_leaves_its_affinity_alone() {
        // SAFETY: reads the number of online cores.
        if unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } < 2 {
            eprintln!("one core: nothing to move between");
            return;
        }
        use std::sync::atomic::{AtomicI32, AtomicU32};
        use std::sync::Arc;
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let tid = Arc::new(AtomicI32::new(0));
        let seen = Arc::new(AtomicU32::new(u32::MAX));
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let (tid, seen, stop) = (tid.clone(), seen.clone(), stop.clone());
            std::thread::spawn(move || {
                // SAFETY: sets this thread's own mask from a local set.
                assert_eq!(
                    unsafe { libc::sched_setaffinity(0, size, &cpu_set(0b10)) },
                    0
                );
                tid.store(gettid(), Ordering::SeqCst);
                while !stop.load(Ordering::SeqCst) {
                    seen.store(current_cpu(), Ordering::SeqCst);
                    std::hint::spin_loop();
                }
            })
        };
        // Polls what the worker says; a bounded wait, so a thread the kernel
        // never runs there fails the test instead of hanging it.
        let wait_for = |cpu: u32| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while seen.load(Ordering::SeqCst) != cpu {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the worker never ran on core {cpu}"
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        wait_for(1);
        let pid = std::process::id();
        let mut card = CardView {
            tid: tid.load(Ordering::SeqCst),
            cores: 0b10,
            ..CardView::default()
        };
        assert!(
            !bring(pid, &card, 0).unwrap(),
            "core 0 is not among its cores"
        );
        card.cores = 0b11;
        assert!(
            !bring(pid, &card, 0).unwrap(),
            "its mask (core 1) is not its card's (cores 0 and 1): left alone"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        // SAFETY: sets the worker's mask from a local set.
        assert_eq!(
            unsafe { libc::sched_setaffinity(card.tid, size, &cpu_set(0b11)) },
            0
        );
        assert!(bring(pid, &card, 0).unwrap(), "moved");
        wait_for(0);
        // SAFETY: reads the worker's mask into a local set.
        let mut now = cpu_set(0);
        assert_eq!(
            unsafe { libc::sched_getaffinity(card.tid, size, &mut now) },
            0
        );
        // SAFETY: compares two plain bit sets.
        let same = unsafe { libc::CPU_EQUAL(&cpu_set(0b11), &now) };
        assert!(same, "its mask is as it was");
        assert!(
            !bring(pid + 4_000_000, &card, 0).unwrap(),
            "not a thread of that process: left alone"
        );
        stop.store(true, Ordering::SeqCst);
        worker.join().unwrap();
    }
}
