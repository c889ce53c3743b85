//! The libfabric transport against the real providers: several endpoints in
//! this one process, polled in turn by the test thread.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sat_core::transport::fabric::{
    check_provider, remove_shm_leftovers, shm_files_of, FabricEndpoint, FabricOptions,
    FabricTransport, EAGER_LIMIT, PREFIX_LEN,
};
use sat_core::transport::{Payload, Provider, Rank, Sender, Transport, TransportError};

/// The tests share this process's /dev/shm files and its two cores: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Only a guard against a hang: every loop below ends by synchronisation.
const HANG_GUARD: Duration = Duration::from_secs(120);

const HEADER_LEN: usize = 16;
/// The largest payload that still travels in one eager packet with a
/// HEADER_LEN-byte header.
const EAGER: usize = EAGER_LIMIT - PREFIX_LEN - HEADER_LEN;

const SIZES: [usize; 10] = [
    0,
    1,
    64,
    4096,
    EAGER - 1,
    EAGER,
    EAGER + 1,
    65536,
    1 << 20,
    8 << 20,
];

#[derive(Debug, Clone, PartialEq, Eq)]
struct Msg {
    src: Rank,
    header: Vec<u8>,
    payload: Vec<u8>,
}

fn header(id: u32, len: usize) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&id.to_le_bytes());
    h[4..12].copy_from_slice(&(len as u64).to_le_bytes());
    h[12..16].copy_from_slice(b"SATh");
    h
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn open_all(provider: Provider, n: usize) -> Vec<FabricTransport> {
    let opts = FabricOptions::new(provider);
    let eps: Vec<FabricEndpoint> = (0..n)
        .map(|_| FabricEndpoint::open(&opts).expect("open endpoint"))
        .collect();
    let table: Vec<Vec<u8>> = eps.iter().map(|e| e.address().to_vec()).collect();
    eps.into_iter()
        .enumerate()
        .map(|(r, e)| e.connect(r as Rank, &table).expect("connect"))
        .collect()
}

/// Polls every endpoint in turn until endpoint `i` has received `want[i]`
/// messages and every send has completed. Endpoints listed in `echo` send
/// each message straight back to its sender from inside the callback.
fn pump(ts: &mut [FabricTransport], want: &[usize], echo: &[usize]) -> Vec<Vec<Msg>> {
    let mut inbox: Vec<Vec<Msg>> = vec![Vec::new(); ts.len()];
    let start = Instant::now();
    loop {
        let mut drained = true;
        for (i, t) in ts.iter_mut().enumerate() {
            let replies = echo.contains(&i);
            let inbox_i = &mut inbox[i];
            t.poll(&mut |s: &mut dyn Sender, m| {
                if replies {
                    let mut h = m.header.to_vec();
                    h.extend_from_slice(b"-re");
                    s.send(m.src, &h, Payload::Copy(m.payload)).expect("reply");
                }
                inbox_i.push(Msg {
                    src: m.src,
                    header: m.header.to_vec(),
                    payload: m.payload.to_vec(),
                });
            })
            .expect("poll");
            drained &= t.sends_drained().expect("sends_drained");
        }
        let done = inbox.iter().zip(want).all(|(got, &w)| got.len() >= w);
        if done && drained {
            for (i, got) in inbox.iter().enumerate() {
                assert_eq!(got.len(), want[i], "endpoint {i} got extra messages");
            }
            return inbox;
        }
        assert!(
            start.elapsed() < HANG_GUARD,
            "stuck: received {:?} of {want:?}",
            inbox.iter().map(Vec::len).collect::<Vec<_>>()
        );
    }
}

/// Sends every size as Copy then as Shared; returns what the receiver must
/// see, in order. The list interleaves eager and large messages.
fn send_sizes(t: &mut FabricTransport, dest: Rank, seed: u32) -> Vec<Msg> {
    let mut sent = Vec::new();
    for (k, &len) in SIZES.iter().enumerate() {
        for shared in [false, true] {
            let id = seed * 1000 + (k as u32) * 2 + u32::from(shared);
            let h = header(id, len);
            let bytes = pattern(id, len);
            if shared {
                let arc: Arc<[u8]> = Arc::from(bytes.clone());
                t.send(dest, &h, Payload::Shared(&arc))
                    .expect("send shared");
                // The transport keeps its own reference until completion.
                drop(arc);
            } else {
                t.send(dest, &h, Payload::Copy(&bytes)).expect("send copy");
            }
            sent.push(Msg {
                src: t.rank(),
                header: h.to_vec(),
                payload: bytes,
            });
        }
    }
    sent
}

fn assert_same(got: &[Msg], want: &[Msg]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.src, w.src, "message {i}: source");
        assert_eq!(g.header, w.header, "message {i}: header (order or content)");
        assert!(
            g.payload == w.payload,
            "message {i}: payload of {} bytes differs (expected {})",
            g.payload.len(),
            w.payload.len()
        );
    }
}

fn sizes_and_order(provider: Provider) {
    let _g = serial();
    let mut ts = open_all(provider, 2);
    // Both directions at once.
    let to_b = send_sizes(&mut ts[0], 1, 1);
    let to_a = send_sizes(&mut ts[1], 0, 2);
    let got = pump(&mut ts, &[to_a.len(), to_b.len()], &[]);
    assert_same(&got[1], &to_b);
    assert_same(&got[0], &to_a);
}

#[test]
fn sizes_and_order_shm() {
    sizes_and_order(Provider::Shm);
}

#[test]
fn sizes_and_order_tcp() {
    sizes_and_order(Provider::Tcp);
}

/// Two senders interleave small messages with large ones to one receiver;
/// each sender's messages arrive in its order, with the right source.
fn two_senders_interleaved(provider: Provider) {
    let _g = serial();
    let mut ts = open_all(provider, 3);
    let mut want_from = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..6u32 {
        for src in [0usize, 2] {
            let lens: [usize; 4] = match round % 3 {
                0 => [3 << 20, 10, 0, 200_000],
                1 => [5, EAGER + 1, 7, 1 << 20],
                _ => [EAGER, 64, 2 << 20, 1],
            };
            for (k, len) in lens.into_iter().enumerate() {
                let id = (src as u32) * 10_000 + round * 10 + k as u32;
                let h = header(id, len);
                let bytes = pattern(id, len);
                ts[src].send(1, &h, Payload::Copy(&bytes)).expect("send");
                want_from[src].push(Msg {
                    src: src as Rank,
                    header: h.to_vec(),
                    payload: bytes,
                });
            }
        }
    }
    let total = want_from[0].len() + want_from[2].len();
    let got = pump(&mut ts, &[0, total, 0], &[]);
    for src in [0usize, 2] {
        let from: Vec<Msg> = got[1]
            .iter()
            .filter(|m| m.src == src as Rank)
            .cloned()
            .collect();
        assert_same(&from, &want_from[src]);
    }
}

#[test]
fn two_senders_interleaved_shm() {
    two_senders_interleaved(Provider::Shm);
}

#[test]
fn two_senders_interleaved_tcp() {
    two_senders_interleaved(Provider::Tcp);
}

/// A handler answers from inside `poll` through the lent Sender, with the
/// payload it is still borrowing from the transport.
fn replies_from_the_callback(provider: Provider) {
    let _g = serial();
    let mut ts = open_all(provider, 2);
    let sent = send_sizes(&mut ts[0], 1, 3);
    let got = pump(&mut ts, &[sent.len(), sent.len()], &[1]);
    assert_same(&got[1], &sent);
    let replies: Vec<Msg> = sent
        .iter()
        .map(|m| {
            let mut h = m.header.clone();
            h.extend_from_slice(b"-re");
            Msg {
                src: 1,
                header: h,
                payload: m.payload.clone(),
            }
        })
        .collect();
    assert_same(&got[0], &replies);
}

#[test]
fn replies_from_the_callback_shm() {
    replies_from_the_callback(Provider::Shm);
}

#[test]
fn replies_from_the_callback_tcp() {
    replies_from_the_callback(Provider::Tcp);
}

#[test]
fn bad_destinations_and_headers_are_errors() {
    let _g = serial();
    let mut ts = open_all(Provider::Shm, 2);
    assert!(matches!(
        ts[0].send(2, b"x", Payload::None),
        Err(TransportError::UnknownRank { dest: 2, size: 2 })
    ));
    let big = vec![0u8; sat_core::transport::MAX_HEADER + 1];
    assert!(matches!(
        ts[0].send(1, &big, Payload::None),
        Err(TransportError::HeaderTooLarge { .. })
    ));
}

#[test]
fn connect_rejects_malformed_addresses() {
    let _g = serial();
    for provider in [Provider::Shm, Provider::Tcp] {
        let opts = FabricOptions::new(provider);
        let a = FabricEndpoint::open(&opts).unwrap();
        let good = a.address().to_vec();
        let table = vec![good, vec![1, 2, 3]];
        match a.connect(0, &table) {
            Err(TransportError::BadAddress { rank: 1, reason }) => {
                assert!(!reason.is_empty());
            }
            Err(e) => panic!("{provider}: wrong error {e}"),
            Ok(_) => panic!("{provider}: a 3-byte address was accepted"),
        }
    }
}

/// A joiner that gives another rank's endpoint as its own (a service's
/// client slot, `add_peer`), as it is or with its padding changed, is
/// refused, and that rank's packets stay its own. Before, the joiner's
/// entry took them, and its leaving made them "no rank's" for good.
#[test]
fn a_joiner_cannot_take_another_ranks_endpoint() {
    let _g = serial();
    for provider in [Provider::Shm, Provider::Tcp] {
        let opts = FabricOptions::new(provider);
        let eps: Vec<FabricEndpoint> = (0..2)
            .map(|_| FabricEndpoint::open(&opts).expect("open endpoint"))
            .collect();
        // Rank 2 is a free slot: no endpoint yet.
        let mut table: Vec<Vec<u8>> = eps.iter().map(|e| e.address().to_vec()).collect();
        table.push(Vec::new());
        let mut ts: Vec<FabricTransport> = eps
            .into_iter()
            .enumerate()
            .map(|(r, e)| e.connect(r as Rank, &table).expect("connect"))
            .collect();
        let mut spellings = vec![table[1].clone(), table[0].clone()];
        if provider == Provider::Tcp {
            let mut padded = table[1].clone();
            padded[12] ^= 0x5A; // sin_zero
            spellings.push(padded);
        }
        for address in &spellings {
            match ts[0].add_peer(2, address) {
                Err(TransportError::BadAddress { rank: 2, reason }) => {
                    assert!(reason.contains("endpoint of rank"), "{provider}: {reason}")
                }
                other => panic!("{provider}: another rank's endpoint taken: {other:?}"),
            }
        }
        // Rank 1's messages still reach rank 0 as rank 1's.
        let sent = send_sizes(&mut ts[1], 0, 7);
        let got = pump(&mut ts, &[sent.len(), 0], &[]);
        assert_same(&got[0], &sent);
    }
}

#[test]
fn verbs_without_a_device_is_unavailable() {
    let _g = serial();
    let check = |r: Result<(), TransportError>| match r {
        Err(TransportError::ProviderUnavailable {
            provider: Provider::Verbs,
            reason,
        }) => assert!(reason.contains("RDMA device"), "unhelpful reason: {reason}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(()) => {}
    };
    // Where a device exists both succeed; here there is none.
    let has_device = std::path::Path::new("/sys/class/infiniband").exists()
        && std::fs::read_dir("/sys/class/infiniband")
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
    let checked = check_provider(Provider::Verbs);
    let opened = FabricEndpoint::open(&FabricOptions::new(Provider::Verbs)).map(drop);
    if !has_device {
        assert!(checked.is_err() && opened.is_err());
    }
    check(checked);
    check(opened);
    check_provider(Provider::Shm).expect("shm is available");
    check_provider(Provider::Tcp).expect("tcp is available");
}

#[test]
fn dropping_endpoints_leaves_no_shm_file() {
    let _g = serial();
    let pid = std::process::id();
    let before = shm_files_of(pid).unwrap();
    {
        let mut ts = open_all(Provider::Shm, 3);
        let during = shm_files_of(pid).unwrap();
        assert_eq!(
            during.len(),
            before.len() + 3,
            "one region per endpoint: {during:?}"
        );
        ts[0].send(1, b"h", Payload::Copy(&[1; 100_000])).unwrap();
        ts[2].send(1, b"h", Payload::Copy(b"x")).unwrap();
        pump(&mut ts, &[0, 2, 0], &[]);
    }
    assert_eq!(shm_files_of(pid).unwrap(), before);
}

const CHILD_ENV: &str = "SAT_FABRIC_TEST_CHILD";

/// Not a test of its own: the body of the child process the two tests below
/// start. It opens an shm endpoint, says so, and waits for its stdin to close.
#[test]
fn child_holds_shm_endpoint() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    // No core file for the deaths the tests ask for (signals, an abort, a fault).
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit with a valid struct.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    let ep = FabricEndpoint::open(&FabricOptions::new(Provider::Shm)).unwrap();
    let addr = String::from_utf8_lossy(ep.address())
        .trim_end_matches('\0')
        .to_string();
    println!("READY {addr}");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    match line.trim() {
        // Dies as a process that calls abort() does.
        "abort" => std::process::abort(),
        // Exits with its endpoint open, as a C program that calls exit()
        // in its role does.
        "exit" => std::process::exit(3),
        // A fork() child of it exits (its exit handlers run): the region
        // is this process's, and stays; exits 0 if it did, 4 if not.
        "fork-exit" => {
            // SAFETY: fork, then only exit(3) in the child; waitpid on it.
            let kept = unsafe {
                let pid = libc::fork();
                assert!(pid >= 0, "fork");
                if pid == 0 {
                    libc::exit(0);
                }
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
                !shm_files_of(std::process::id()).unwrap().is_empty()
            };
            drop(ep);
            std::process::exit(if kept { 0 } else { 4 });
        }
        // Dies of a real fault: a write to a page that allows none.
        "fault" => {
            // SAFETY: a fresh anonymous mapping of one page; the write to
            // it faults (PROT_NONE), which is the point.
            unsafe {
                let page = libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(page, libc::MAP_FAILED);
                std::ptr::write_volatile(page.cast::<u8>(), 1);
            }
        }
        _ => {}
    }
    drop(ep);
}

/// Starts a child holding an shm endpoint; returns it once its region exists.
fn spawn_child() -> (std::process::Child, u32) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "child_holds_shm_endpoint",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
        // libtest prints "test <name> ... " in front of it on the same line.
        if line.contains("READY ") {
            break;
        }
    }
    assert!(
        !shm_files_of(pid).unwrap().is_empty(),
        "child has no shm region"
    );
    (child, pid)
}

#[test]
fn remove_shm_leftovers_of_a_killed_child() {
    let _g = serial();
    let (mut child, pid) = spawn_child();
    child.kill().unwrap(); // SIGKILL: no handler runs
    child.wait().unwrap();
    let left = shm_files_of(pid).unwrap();
    assert!(!left.is_empty(), "SIGKILL should leave the region behind");
    assert_eq!(remove_shm_leftovers(pid).unwrap(), left.len());
    assert!(shm_files_of(pid).unwrap().is_empty());
    assert_eq!(remove_shm_leftovers(pid).unwrap(), 0);
}

#[test]
fn sigterm_removes_the_shm_region() {
    use std::os::unix::process::ExitStatusExt;
    let _g = serial();
    let (mut child, pid) = spawn_child();
    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "dies of the signal: {status:?}"
    );
    let left = shm_files_of(pid).unwrap();
    remove_shm_leftovers(pid).unwrap();
    assert!(left.is_empty(), "SIGTERM left {left:?}");
}

/// A process that aborts or crashes outside satrun (nobody would remove its
/// region after it) leaves none either, and still fails as it would have.
#[test]
fn an_abort_or_a_crash_removes_the_shm_region() {
    use std::io::Write;
    use std::os::unix::process::ExitStatusExt;
    for (how, sig) in [
        ("abort", libc::SIGABRT),
        ("fault", libc::SIGSEGV),
        ("kill -ABRT", libc::SIGABRT),
    ] {
        let _g = serial();
        let (mut child, pid) = spawn_child();
        if how == "kill -ABRT" {
            let sent = Command::new("kill")
                .args(["-ABRT", &pid.to_string()])
                .status()
                .unwrap();
            assert!(sent.success());
        } else {
            let mut stdin = child.stdin.take().unwrap();
            writeln!(stdin, "{how}").unwrap();
        }
        let status = child.wait().unwrap();
        let left = shm_files_of(pid).unwrap();
        remove_shm_leftovers(pid).unwrap();
        // It dies of the signal, or exits with 1 where a library loaded
        // with libfabric's providers (libpsm2, libinfinipath) has its own
        // handler, which prints a backtrace and exits: either way it fails.
        assert!(
            status.signal() == Some(sig) || status.code() == Some(1),
            "{how}: dies of the signal: {status:?}"
        );
        assert!(left.is_empty(), "{how} left {left:?}");
    }
}

/// A process that exits with its endpoint open (a C program calling exit()
/// in its role, outside satrun: nobody would remove its region after it)
/// leaves no region either, and keeps its status.
#[test]
fn an_exit_with_the_endpoint_open_removes_the_shm_region() {
    use std::io::Write;
    let _g = serial();
    let (mut child, pid) = spawn_child();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "exit").unwrap();
    let status = child.wait().unwrap();
    let left = shm_files_of(pid).unwrap();
    remove_shm_leftovers(pid).unwrap();
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert!(left.is_empty(), "exit() left {left:?}");
}

/// The exit of a `fork()` child, which holds a copy of the process's
/// cleanup, leaves the parent's region alone.
#[test]
fn a_fork_child_s_exit_leaves_the_parent_s_shm_region() {
    use std::io::Write;
    let _g = serial();
    let (mut child, pid) = spawn_child();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "fork-exit").unwrap();
    let status = child.wait().unwrap();
    remove_shm_leftovers(pid).unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the child's exit removed the region: {status:?}"
    );
}

/// A rank may send to itself (a server that is also the home of a chunk).
fn send_to_self(provider: Provider) {
    let _g = serial();
    let mut ts = open_all(provider, 2);
    let small = pattern(5, 100);
    let large = pattern(6, 1 << 20);
    ts[0].send(0, b"self-small", Payload::Copy(&small)).unwrap();
    ts[0].send(0, b"self-large", Payload::Copy(&large)).unwrap();
    let got = pump(&mut ts, &[2, 0], &[]);
    assert_eq!(got[0][0].header, b"self-small");
    assert!(got[0][0].payload == small && got[0][0].src == 0);
    assert_eq!(got[0][1].header, b"self-large");
    assert!(got[0][1].payload == large && got[0][1].src == 0);
}

#[test]
fn send_to_self_shm() {
    send_to_self(Provider::Shm);
}

#[test]
fn send_to_self_tcp() {
    send_to_self(Provider::Tcp);
}

/// A burst far larger than the provider's queues, sent before the receiver
/// polls once: refused sends queue up in order and nothing is lost.
fn burst_without_polling(provider: Provider) {
    let _g = serial();
    let mut ts = open_all(provider, 2);
    let lens = [8usize, 4096, 9000, EAGER + 1, 70_000];
    let mut sent = Vec::new();
    for i in 0..2500u32 {
        let len = lens[i as usize % lens.len()];
        let h = header(i, len);
        let bytes = pattern(i, len);
        ts[0].send(1, &h, Payload::Copy(&bytes)).expect("send");
        sent.push(Msg {
            src: 0,
            header: h.to_vec(),
            payload: bytes,
        });
    }
    let got = pump(&mut ts, &[0, sent.len()], &[]);
    assert_same(&got[1], &sent);
}

#[test]
fn burst_without_polling_shm() {
    burst_without_polling(Provider::Shm);
}

#[test]
fn burst_without_polling_tcp() {
    burst_without_polling(Provider::Tcp);
}

/// Around shm's 4096-byte inject size (a packet with its prefix on either
/// side of it) every header length and size must arrive intact and in
/// order.
#[test]
fn packets_around_the_inject_size() {
    let _g = serial();
    for provider in [Provider::Shm, Provider::Tcp] {
        let mut ts = open_all(provider, 2);
        let mut sent = Vec::new();
        let mut id = 0u32;
        for hlen in [0usize, 1, 16, 200, sat_core::transport::MAX_HEADER] {
            for total in [4060usize, 4071, 4072, 4073, 4095, 4096, 4097, 4121] {
                let Some(plen) = total.checked_sub(hlen) else {
                    continue;
                };
                let h: Vec<u8> = pattern(id + 7777, hlen);
                let bytes = pattern(id, plen);
                ts[0].send(1, &h, Payload::Copy(&bytes)).expect("send");
                sent.push(Msg {
                    src: 0,
                    header: h,
                    payload: bytes,
                });
                id += 1;
            }
        }
        let got = pump(&mut ts, &[0, sent.len()], &[]);
        assert_same(&got[1], &sent);
    }
}

/// A burst of large messages to a receiver that is busy (does not poll)
/// while they are sent: every one arrives, in order. The receiver bounds
/// the announced payloads it waits for from one sender (past the bound it
/// takes announces for a hostile sender's and drops them), so the sender
/// must hold its announces back to stay under it: before it did, the
/// messages past the bound were lost and whoever waited for them waited
/// for ever.
fn a_burst_of_large_messages_to_a_busy_receiver(provider: Provider) {
    let _guard = serial();
    let mut ts = open_all(provider, 2);
    const COUNT: usize = 200;
    const LEN: usize = 64 << 10;
    let mut want = Vec::new();
    for id in 0..COUNT as u32 {
        let h = header(id, LEN);
        let bytes = pattern(id, LEN);
        ts[0].send(1, &h, Payload::Copy(&bytes)).expect("send");
        want.push(Msg {
            src: 0,
            header: h.to_vec(),
            payload: bytes,
        });
    }
    let got = pump(&mut ts, &[0, COUNT], &[]);
    assert_same(&got[1], &want);
}

#[test]
fn a_burst_of_large_messages_to_a_busy_receiver_shm() {
    a_burst_of_large_messages_to_a_busy_receiver(Provider::Shm);
}

#[test]
fn a_burst_of_large_messages_to_a_busy_receiver_tcp() {
    a_burst_of_large_messages_to_a_busy_receiver(Provider::Tcp);
}
