//! The client over the in-process transport: allocation requests (answers
//! reach the request they answer, and nothing else), waits on other
//! processes that a failing handler ends (barrier, rendezvous), and chain
//! subscriptions.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::sync::atomic::Ordering;

use super::*;
use crate::transport::mem::{MemNetwork, MemTransport, Schedule};

const WAIT: Duration = Duration::from_secs(30);

/// One server (rank 0) and `clients` clients (ranks 1 and up) whose server
/// does not run until [`Run::serve`].
struct Run {
    topology: Arc<Topology>,
    server: MemTransport,
    clients: Vec<Client>,
    /// Where the server keeps its versions (None: in its own memory).
    host: Option<crate::server::host::Backing>,
    /// Clients that take in messages only inside their own calls (no
    /// background progress): what they send waits for them.
    passive: Vec<usize>,
}

impl Run {
    fn new(clients: u32, schedule: Schedule) -> Run {
        let topology = Arc::new(Topology::default_for(clients + 1));
        let (_net, mut eps) = MemNetwork::new(clients + 1, schedule);
        let server = eps.remove(0);
        let clients = eps
            .into_iter()
            .map(|ep| Client::new(topology.clone(), Box::new(ep)))
            .collect();
        Run {
            topology,
            server,
            clients,
            host: None,
            passive: Vec::new(),
        }
    }

    /// As [`Run::new`], with the server keeping its versions in host slots
    /// (in this process's memory: its clients are threads here).
    fn on_one_host(clients: u32) -> Run {
        Run {
            host: Some(crate::server::host::Backing::Private),
            ..Run::new(clients, Schedule::Immediate)
        }
    }

    /// Runs the server while `f` runs on the clients, then ends the run
    /// (every client finishes) and returns what `f` returned.
    fn serve<T>(self, f: impl FnOnce(&[Client]) -> T) -> T {
        let Run {
            topology,
            mut server,
            clients,
            host,
            passive,
        } = self;
        if host.is_some() {
            for c in &clients {
                c.use_host_sync();
            }
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let topology = &topology;
            let server = s.spawn(move || {
                crate::server::run_on_host(topology, &mut server, IdlePolicy::default(), host)
            });
            // As in a run: each client answers the homes while its threads
            // do something else.
            for (i, c) in clients.iter().enumerate() {
                if passive.contains(&i) {
                    continue;
                }
                let stop = &stop;
                s.spawn(move || c.background_progress(stop));
            }
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&clients)));
            for c in &clients {
                c.finish(WAIT).unwrap();
            }
            stop.store(true, Ordering::Release);
            server.join().unwrap().unwrap();
            out.unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

/// A LOOKUP gives up before its answer comes; the answer, when it comes,
/// belongs to nobody: a later request of the same chunk gets its own.
#[test]
fn a_late_lookup_answer_is_not_taken_by_a_later_request() {
    let run = Run::new(2, Schedule::Immediate);
    // The server is not running yet: this LOOKUP cannot be answered in time.
    // Its home answers it (NotAllocated, it waits 0 ms) once it runs.
    let early = Message::Lookup {
        chunk: 7,
        client: run.clients[0].rank(),
        request: 0,
        wait_ms: 0,
    };
    let gave_up = run.clients[0].allocation(&[early], Some(Duration::from_millis(50)));
    assert!(matches!(gave_up, Err(SatError::Timeout(_))), "{gave_up:?}");
    let looked_up = run.serve(|clients| {
        // A LOOKUP that fails at once: when its answer is back, the home has
        // answered the early one too (it came first, and waited no longer).
        let nothing = clients[0].lookup(8, Duration::ZERO);
        assert!(matches!(nothing, Err(SatError::Timeout(_))), "{nothing:?}");
        clients[1].malloc(7, 8)?;
        clients[0].lookup(7, WAIT)
    });
    assert_eq!(looked_up.unwrap(), 8);
}

/// A MALLOC of a chain this process found by LOOKUP is checked against the
/// protocol its home allocated it with, as one it allocated itself is: the
/// answer to the LOOKUP said it.
#[test]
fn a_malloc_of_a_looked_up_chain_with_another_protocol_is_refused() {
    let run = Run::new(2, Schedule::Immediate);
    let refused = run.serve(|clients| {
        clients[1].malloc_with(ProtocolId::HomeOnly, 9, 8)?;
        clients[0].lookup(9, WAIT)?;
        let refused = clients[0].malloc_with(ProtocolId::HomeMesi, 9, 8);
        let joined = clients[0].malloc_with(ProtocolId::HomeOnly, 9, 8)?;
        assert_eq!(joined.first(), 9);
        Ok::<_, SatError>(refused)
    });
    let Err(SatError::Usage(why)) = refused.unwrap() else {
        panic!("a MALLOC with another protocol than the home's was taken");
    };
    assert!(why.contains("[Home-Only]"), "{why}");
}

/// Two threads of one process MALLOC one chunk with different sizes at the
/// same time: the first to reach the home creates it, the other gets a
/// size mismatch naming both sizes; each gets the answer to its own
/// request, so the chain returned has the home's size and opens a scope.
#[test]
fn two_threads_malloc_one_chunk_with_different_sizes() {
    // Answers are delayed at random, so both requests are usually in flight
    // together and either thread may take in both answers.
    let run = Run::new(
        2,
        Schedule::Random {
            seed: 11,
            max_delay_polls: 20,
        },
    );
    let outcome = run.serve(|clients| {
        let (c, other) = (&clients[0], &clients[1]);
        for chunk in 100..124u64 {
            let (small, large) = std::thread::scope(|s| {
                let small = s.spawn(|| c.malloc(chunk, 100));
                let large = s.spawn(|| c.malloc(chunk, 200));
                (small.join().unwrap(), large.join().unwrap())
            });
            let home = other.lookup(chunk, WAIT).map_err(|e| e.to_string())?;
            let (chain, refused, asked) = match (small, large) {
                (Ok(chain), Err(e)) => (chain, e, 200),
                (Err(e), Ok(chain)) => (chain, e, 100),
                (small, large) => {
                    return Err(format!(
                        "chunk {chunk}: one MALLOC must succeed and one fail: 100 bytes gave \
                         {:?}, 200 bytes gave {:?}",
                        small.map(|ch| ch.size()),
                        large.map(|ch| ch.size())
                    ))
                }
            };
            if chain.size() != home {
                return Err(format!(
                    "chunk {chunk}: MALLOC returned a chain of {} bytes, its home has {home}",
                    chain.size()
                ));
            }
            let refused = refused.to_string();
            if !refused.contains(&format!("with {asked} bytes"))
                || !refused.contains(&format!("exists with {home} bytes"))
            {
                return Err(format!(
                    "chunk {chunk}: the MALLOC of {asked} bytes failed with: {refused}"
                ));
            }
            c.acquire(chunk, Access::ReadWrite)
                .and_then(|()| c.release(chunk))
                .map_err(|e| format!("chunk {chunk}: {e}"))?;
        }
        Ok::<(), String>(())
    });
    outcome.unwrap();
}

fn raw_malloc(client: &Client, chunk: ChunkId, size: u64) -> Message {
    Message::Malloc {
        chunk,
        size,
        client: client.rank(),
        request: 0,
        protocol: ProtocolId::HomeMesi,
        label: NO_LABEL,
    }
}

/// MALLOCs of 0 bytes and of 2 GiB that got past the API's checks are
/// answered with a refusal, not left waiting.
#[test]
fn a_raw_malloc_of_a_size_out_of_range_is_refused() {
    let outcomes = Run::new(1, Schedule::Immediate).serve(|clients| {
        let c = &clients[0];
        let requests = [raw_malloc(c, 3, 0), raw_malloc(c, 4, 2 << 30)];
        c.allocation(&requests, Some(WAIT))
    });
    assert_eq!(
        outcomes.unwrap(),
        vec![AllocOutcome::Refused, AllocOutcome::Refused]
    );
}

/// A LOOKUP of a long chain whose end nobody allocated fails at the first
/// missing chunk: the requests beyond the window are never sent. (It used
/// to wait out the timeout once per window of 32 requests: about 5 minutes
/// for a chain of 1,024 missing chunks and a 10 s timeout.)
#[test]
fn a_lookup_of_a_chain_ends_at_its_first_missing_chunk() {
    let (result, sent) = Run::new(1, Schedule::Immediate).serve(|clients| {
        let c = &clients[0];
        c.malloc(1, 8).unwrap();
        let before = c.messages_sent();
        let result = c.lookup_chain(1, 1_000, Duration::from_millis(20));
        (result, c.messages_sent() - before)
    });
    let Err(SatError::Timeout(why)) = result else {
        panic!("{result:?}")
    };
    assert!(
        why.contains("LOOKUP of chunk 2: no process allocated it"),
        "{why}"
    );
    assert!(
        sent <= 40,
        "{sent} requests sent for a LOOKUP that failed at its second chunk"
    );
}

/// A MALLOC whose home never answers fails after its bound with an error
/// that says which server to look at.
#[test]
fn a_malloc_nobody_answers_times_out_naming_the_home() {
    // The server never runs.
    let run = Run::new(1, Schedule::Immediate);
    let c = &run.clients[0];
    let timed_out = c.allocation(&[raw_malloc(c, 5, 8)], Some(Duration::from_millis(50)));
    let Err(SatError::Timeout(why)) = timed_out else {
        panic!("{timed_out:?}")
    };
    assert!(
        why.contains("MALLOC of chunk 5: its home, server 0, did not answer within 50ms")
            && why.contains("check that server 0 is still running"),
        "{why}"
    );
}

/// A transport whose next coherence message fails to leave, once armed.
struct FailNext {
    inner: MemTransport,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl Sender for FailNext {
    fn send(
        &mut self,
        dest: Rank,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<(), crate::transport::TransportError> {
        if matches!(wire::decode(header), Ok(Message::Coherence { .. }))
            && self.armed.swap(false, Ordering::SeqCst)
        {
            return Err(crate::transport::TransportError::PeerLost {
                rank: dest,
                reason: "a send failure the test asked for".into(),
            });
        }
        self.inner.send(dest, header, payload)
    }
}

impl Transport for FailNext {
    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn poll(
        &mut self,
        on_message: &mut dyn FnMut(&mut dyn Sender, Received<'_>),
    ) -> Result<usize, crate::transport::TransportError> {
        self.inner.poll(on_message)
    }
    fn messages_sent(&self) -> u64 {
        self.inner.messages_sent()
    }
    fn sends_drained(&mut self) -> Result<bool, crate::transport::TransportError> {
        self.inner.sends_drained()
    }
}

/// Two clients of one server; the first one's sends can be made to fail.
fn failing_pair() -> (Run, Arc<std::sync::atomic::AtomicBool>) {
    let topology = Arc::new(Topology::default_for(3));
    let (_net, mut eps) = MemNetwork::new(3, Schedule::Immediate);
    let server = eps.remove(0);
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let first = FailNext {
        inner: eps.remove(0),
        armed: armed.clone(),
    };
    let clients = vec![
        Client::new(topology.clone(), Box::new(first)),
        Client::new(topology.clone(), Box::new(eps.remove(0))),
    ];
    (
        Run {
            topology,
            server,
            clients,
            host: None,
            passive: Vec::new(),
        },
        armed,
    )
}

fn word(c: &Client, chunk: ChunkId) -> u64 {
    let mut b = [0u8; 8];
    c.get(chunk, &mut b).unwrap();
    u64::from_le_bytes(b)
}

/// A thread acquiring what it holds gets a usage error, whatever the
/// accesses (a READ inside its READ was taken as a second scope, so that
/// its first RELEASE left the chunk held), and the scope it holds is the
/// same after: one RELEASE ends it, and a writer elsewhere then goes on.
#[test]
fn a_thread_acquiring_what_it_holds_is_refused_and_its_scope_unchanged() {
    Run::new(2, Schedule::Immediate).serve(|c| {
        c[0].malloc(41, 8).unwrap();
        c[1].malloc(41, 8).unwrap();
        c[1].put(41, &5u64.to_le_bytes()).unwrap();
        c[0].acquire(41, Access::Read).unwrap();
        for access in [Access::Read, Access::Write, Access::ReadWrite] {
            let again = c[0].acquire(41, access);
            assert!(
                matches!(&again, Err(SatError::Usage(m)) if m.to_lowercase().contains("release it")),
                "{access:?} again: {again:?}"
            );
        }
        let mut buf = [0u8; 8];
        let get = c[0].get(41, &mut buf);
        assert!(
            matches!(get, Err(SatError::Usage(_))),
            "GET inside: {get:?}"
        );
        let put = c[0].put(41, &6u64.to_le_bytes());
        assert!(
            matches!(put, Err(SatError::Usage(_))),
            "PUT inside: {put:?}"
        );
        assert_eq!(
            c[0].with_data(41, |d| d.to_vec()).unwrap(),
            5u64.to_le_bytes()
        );
        c[0].release(41).unwrap();
        let twice = c[0].release(41);
        assert!(matches!(twice, Err(SatError::Usage(_))), "{twice:?}");
        // Nothing left held: the other process writes, this one sees it.
        c[1].put(41, &9u64.to_le_bytes()).unwrap();
        assert_eq!(word(&c[0], 41), 9);
        // A write scope likewise.
        c[0].acquire(41, Access::Write).unwrap();
        let again = c[0].acquire(41, Access::Read);
        assert!(matches!(again, Err(SatError::Usage(_))), "{again:?}");
        c[0].with_data_mut(41, |d| d.copy_from_slice(&10u64.to_le_bytes()))
            .unwrap();
        c[0].release(41).unwrap();
        assert_eq!(word(&c[1], 41), 10);
    });
}

/// An acquire whose request cannot be sent changes nothing: the chunk is
/// not left waiting for an answer that will never come.
#[test]
fn an_acquire_whose_request_fails_leaves_no_trace() {
    let (run, armed) = failing_pair();
    run.serve(|c| {
        c[0].malloc(40, 8).unwrap();
        c[1].malloc(40, 8).unwrap();
        armed.store(true, Ordering::SeqCst);
        assert!(matches!(
            c[0].acquire(40, Access::Write),
            Err(SatError::Transport(_))
        ));
        c[0].acquire(40, Access::Write)
            .expect("a second acquire goes ahead");
        c[0].with_data_mut(40, |d| d.copy_from_slice(&7u64.to_le_bytes()))
            .unwrap();
        c[0].release(40).unwrap();
        assert_eq!(word(&c[1], 40), 7);
    });
}

/// A release whose message cannot be sent leaves the scope open, as it
/// was: the caller may retry or abort; the home never saw it end.
#[test]
fn a_release_that_fails_keeps_the_scope_open() {
    let (run, armed) = failing_pair();
    run.serve(|c| {
        c[0].malloc(41, 8).unwrap();
        c[1].malloc(41, 8).unwrap();
        c[0].put(41, &3u64.to_le_bytes()).unwrap();
        c[0].acquire(41, Access::Write).unwrap();
        c[0].with_data_mut(41, |d| d.copy_from_slice(&9u64.to_le_bytes()))
            .unwrap();
        armed.store(true, Ordering::SeqCst);
        assert!(c[0].release(41).is_err());
        c[0].with_data_mut(41, |d| assert_eq!(d, 9u64.to_le_bytes()))
            .expect("the write scope is still open");
        c[0].abort(41).unwrap();
        assert_eq!(word(&c[1], 41), 3, "an aborted scope publishes nothing");
        assert_eq!(word(&c[0], 41), 3, "and its writer sees the home's version");
    });
}

/// A WRITE on a chain that fails part way publishes nothing: the chunk it
/// was granted keeps the home's version (the review's reproduction).
#[test]
fn a_chain_write_that_fails_part_way_publishes_nothing() {
    let run = Run::new(2, Schedule::Immediate);
    run.serve(|c| {
        for x in c {
            x.malloc(3, 8).unwrap();
            x.malloc(5, 8).unwrap();
        }
        c[1].put(3, &7u64.to_le_bytes()).unwrap();
        c[0].acquire(5, Access::Read).unwrap();
        let pair = c[0].lookup_lst(&[3, 5], WAIT).unwrap();
        assert!(c[0].acquire_chain(&pair, Access::Write).is_err());
        c[0].release(5).unwrap();
        assert_eq!(word(&c[1], 3), 7);
        assert_eq!(word(&c[0], 3), 7);
    });
}

/// A second chain over a chunk inside another chain's READ scope reads the
/// published bytes, and a READWRITE through it builds on them (the
/// review's reproduction, with memory the caller owns as C's chains).
#[test]
fn a_second_chain_over_a_chunk_in_use_reads_the_published_bytes() {
    let run = Run::new(2, Schedule::Immediate);
    run.serve(|c| {
        for x in c {
            x.malloc(10, 8).unwrap();
            x.malloc(11, 8).unwrap();
        }
        c[1].put(10, &1111u64.to_le_bytes()).unwrap();
        c[0].acquire(10, Access::Read).unwrap();
        let chain = c[0]
            .lookup_lst_into(&[10, 11], WAIT, |size| {
                Some(Box::new(vec![0u8; size]) as Box<dyn LocalMemory>)
            })
            .unwrap();
        c[0].release(10).unwrap();
        let scope = c[0].read(&chain).unwrap();
        scope
            .data(|d| assert_eq!(d[..8], 1111u64.to_le_bytes()))
            .unwrap();
        scope.release().unwrap();
        let scope = c[0].readwrite(&chain).unwrap();
        scope
            .data_mut(|d| {
                let v = u64::from_le_bytes(d[..8].try_into().unwrap()) + 1;
                d[..8].copy_from_slice(&v.to_le_bytes());
            })
            .unwrap();
        scope.release().unwrap();
        assert_eq!(word(&c[1], 10), 1112);
    });
}

/// Writer starvation by one process's readers: once a writer waits for
/// this process's read scopes (an invalidation is owed), a thread that
/// holds none waits instead of joining them; the holder itself still
/// nests. Home-only readers beside others ask the home instead.
#[test]
fn readers_beside_open_read_scopes_wait_once_a_writer_waits() {
    use crate::protocol::{home_only, ClientSide, ToClient};
    let mut mesi = mesi::Cache::new(8);
    assert!(matches!(
        mesi.acquire(Access::Read),
        Ok(Acquire::Request(_))
    ));
    mesi.on_message(
        ToClient::ReadGrant {
            version: 0,
            with_data: true,
        },
        Some(&[0; 8]),
    )
    .unwrap();
    assert!(
        !must_wait(&mesi, Access::Read),
        "readers share a valid copy"
    );
    mesi.on_message(ToClient::Inval, None).unwrap();
    assert!(
        must_wait(&mesi, Access::Read),
        "a writer waits for these scopes: new readers must not extend them"
    );
    assert_eq!(
        mesi.acquire(Access::Read),
        Ok(Acquire::Hit),
        "nesting still hits"
    );
    let only = home_only::Client::new(8);
    assert_eq!(only.join(), Join::Ask);
}

/// A thread that reads again as soon as it released does not pass a thread
/// of its process that waits to write: its next READ waits for that write
/// and sees it. (It used to get the chunk first every time: a process whose
/// reader threads kept reading starved its writer for good.) On a home's
/// messages and on a host slot.
#[test]
fn a_reader_that_reads_again_does_not_pass_a_waiting_writer_of_its_process() {
    for run in [Run::new(1, Schedule::Immediate), Run::on_one_host(1)] {
        run.serve(|c| {
            let c = &c[0];
            c.malloc(43, 8).unwrap();
            c.acquire(43, Access::Read).unwrap();
            std::thread::scope(|s| {
                let writer = s.spawn(|| {
                    c.acquire(43, Access::ReadWrite)?;
                    c.with_data_mut(43, |d| d.copy_from_slice(&7u64.to_le_bytes()))?;
                    c.release(43)
                });
                // Until the writer waits for this thread's scope.
                while c.lock().store.get(43).map_or(0, |k| k.queued.len()) == 0 {
                    assert!(!writer.is_finished(), "the writer passed a read scope");
                    std::thread::yield_now();
                }
                c.release(43).unwrap();
                c.acquire(43, Access::Read).unwrap();
                let seen = c
                    .with_data(43, |d| u64::from_le_bytes(d.try_into().unwrap()))
                    .unwrap();
                c.release(43).unwrap();
                writer.join().unwrap().unwrap();
                assert_eq!(
                    seen, 7,
                    "the READ after the release came after the waiting write"
                );
            });
        });
    }
}

/// A RELEASE of a chain read in place (by another thread, say) is refused
/// saying so: only the READ in place's own end ends it, and "in no scope"
/// sent the caller looking for a scope that was open.
#[test]
fn a_release_of_a_chain_read_in_place_says_so() {
    Run::on_one_host(1).serve(|c| {
        let c = &c[0];
        let chain = c.malloc_lst(ProtocolId::HomeMesi, &[45], &[8]).unwrap();
        let view = c.read_in_place(45).unwrap();
        assert!(view.is_some(), "a chunk in a host slot is read in place");
        let e = c.release_chain(&chain).unwrap_err().to_string();
        assert!(e.contains("is read in place"), "{e}");
        drop(view);
        c.end_read_in_place(45).unwrap();
        let e = c.release_chain(&chain).unwrap_err().to_string();
        assert!(e.contains("is in no scope"), "{e}");
    });
}

// ------------------------------------ waits that a failing handler abandons

/// What a test's threads return: any error, with its message.
type Outcome = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// How long a test lets a process lag behind, so that another one would
/// get through early if it could.
const LAG: Duration = Duration::from_millis(300);

/// Long enough for a message to reach the coordinator in process, and well
/// under [`LAG`] (twice over).
const SETTLE: Duration = Duration::from_millis(50);

/// A write release of `chunk` (which notifies its subscribers).
fn release(client: &Client, chunk: ChunkId) -> SatResult<()> {
    client.acquire(chunk, Access::Write)?;
    client.release(chunk)
}

/// Checks that `r` is the failure of the handler of `chunk`.
fn handler_failed(r: SatResult<()>, chunk: ChunkId, call: &str) -> Outcome {
    match r {
        Err(SatError::Role(why))
            if why.contains(&format!("the handler of chunk {chunk} failed")) =>
        {
            Ok(())
        }
        other => Err(format!("{call}: expected the handler's failure, got {other:?}").into()),
    }
}

/// When a barrier's round closes, seen from the process whose handler
/// fails while it waits in the barrier.
#[derive(Debug, Clone, Copy)]
enum RoundCloses {
    /// After the handler failed: the answer comes to a call that gave up.
    AfterTheFailure,
    /// While the handler runs: the answer is there when the call gives up.
    WhileTheHandlerRuns,
}

/// Process A's handler fails while A waits in barrier 1 (round 1). Its
/// arrival still counts: B's round 1 goes through with it. A's next call
/// of barrier 1 is in round 2, and returns only once B has arrived in
/// round 2, not with the answer of the round it abandoned.
fn barrier_after_a_failed_handler(closes: RoundCloses) -> Outcome {
    Run::new(2, Schedule::Immediate).serve(|clients| {
        let (a, b) = (&clients[0], &clients[1]);
        let (to_b, from_a) = mpsc::channel::<()>();
        let (to_a, from_b) = mpsc::channel::<()>();
        let b_in_round_2 = AtomicBool::new(false);
        std::thread::scope(|s| {
            let b_side = s.spawn(|| -> Outcome {
                let from_a = from_a; // moved: a receiver is not shared
                from_a.recv_timeout(WAIT)?; // A has subscribed
                b.lookup(10, WAIT)?;
                release(b, 10)?; // runs A's handler inside A's barrier
                                 // A's barrier has failed, or A's handler runs.
                from_a.recv_timeout(WAIT)?;
                if let RoundCloses::WhileTheHandlerRuns = closes {
                    to_a.send(())?; // B arrives now, while A's handler runs
                }
                b.barrier(1, 2)?;
                std::thread::sleep(LAG);
                b_in_round_2.store(true, Ordering::SeqCst);
                b.barrier(1, 2)?;
                Ok(())
            });
            let a_side = || -> Outcome {
                a.enter_role();
                a.malloc(10, 8)?;
                let runs = AtomicUsize::new(0);
                let (running, from_b) = (to_b.clone(), Mutex::new(from_b));
                a.subscribe(10, false, move |_, _| {
                    if runs.fetch_add(1, Ordering::SeqCst) > 0 {
                        return Ok(());
                    }
                    if let RoundCloses::WhileTheHandlerRuns = closes {
                        // B's arrival closes round 1 while this runs.
                        running.send(())?;
                        from_b.lock().unwrap().recv_timeout(WAIT)?;
                        std::thread::sleep(SETTLE);
                    }
                    Err("the handler's first run fails".into())
                })?;
                to_b.send(())?;
                handler_failed(a.barrier(1, 2), 10, "barrier round 1")?;
                if let RoundCloses::AfterTheFailure = closes {
                    to_b.send(())?;
                }
                // Without B in round 2 yet, the round-1 call's answer must not
                // let this one through.
                std::thread::sleep(SETTLE);
                a.barrier(1, 2)?;
                if !b_in_round_2.load(Ordering::SeqCst) {
                    return Err("barrier 1 round 2 returned before B arrived in it".into());
                }
                a.unsubscribe(10)?;
                Ok(())
            };
            let a_out = a_side();
            let b_out = b_side.join().expect("B does not panic");
            a_out.and(b_out)
        })
    })
}

#[test]
fn a_barrier_whose_handler_failed_answers_after_the_failure_not_the_next_round() {
    barrier_after_a_failed_handler(RoundCloses::AfterTheFailure).unwrap();
}

#[test]
fn a_barrier_whose_handler_failed_answers_during_the_handler_not_the_next_round() {
    barrier_after_a_failed_handler(RoundCloses::WhileTheHandlerRuns).unwrap();
}

/// Wakeups that returned before a rendezvous was called count as one for
/// it, whatever order their messages and the rendezvous' take to the
/// coordinator (deliveries reordered across senders under many seeds): the
/// rendezvous consumes all of them, and the next one waits for a wakeup
/// sent after it. Before a wakeup waited for its coordinator, a rendezvous
/// could overtake the last wakeups, consume only the first, and let the
/// next rendezvous return on the others.
#[test]
fn wakeups_that_returned_before_a_rendezvous_count_as_one_in_any_delivery_order() {
    for seed in 0..24 {
        let schedule = Schedule::Random {
            seed,
            max_delay_polls: 4,
        };
        Run::new(2, schedule).serve(|c| {
            c[0].malloc(6, 8).unwrap();
            for _ in 0..3 {
                c[0].wakeup(5).unwrap();
            }
            c[1].rendezvous(5).unwrap();
            let consumed = c[1].lock().mail.sync.consumed.get(&5).copied();
            assert_eq!(
                consumed,
                Some(3),
                "seed {seed}: the rendezvous consumed all three"
            );
            // The next rendezvous waits for the wakeup sent after the flag.
            let fourth = AtomicBool::new(false);
            std::thread::scope(|s| {
                let waiter = s.spawn(|| {
                    c[1].rendezvous(5).unwrap();
                    fourth.load(Ordering::SeqCst)
                });
                // A round trip through the server before the flag: time for
                // a rendezvous that returned early to be seen doing so.
                c[0].put(6, &1u64.to_le_bytes()).unwrap();
                fourth.store(true, Ordering::SeqCst);
                c[0].wakeup(5).unwrap();
                assert!(
                    waiter.join().unwrap(),
                    "seed {seed}: the second rendezvous returned before the fourth wakeup"
                );
            });
        });
    }
}

/// The other way round: a rendezvous that waits returns on a wakeup sent
/// after it, and the wakeup's return means it was applied.
#[test]
fn a_rendezvous_that_waits_returns_on_the_next_wakeup() {
    Run::new(2, Schedule::Immediate).serve(|c| {
        std::thread::scope(|s| {
            let waiter = s.spawn(|| c[1].rendezvous(8));
            // The sleeper is at the coordinator once its Sleep is: a wakeup
            // before that is remembered, so either order returns.
            c[0].wakeup(8).unwrap();
            waiter.join().unwrap().unwrap();
        });
        assert_eq!(c[1].lock().mail.sync.consumed.get(&8).copied(), Some(1));
    });
}
/// When the wakeup comes, seen from the process whose rendezvous failed.
#[derive(Debug, Clone, Copy)]
enum WakeupComes {
    /// While the failing handler runs: before the next rendezvous.
    Before,
    /// Once the next rendezvous waits.
    After,
}

/// Process A's handler fails while A waits in rendezvous 3. The failed
/// rendezvous consumes no wakeup: A's next rendezvous returns with the one
/// wakeup B sends (before it or after it), and the one after that waits
/// for another wakeup.
fn rendezvous_after_a_failed_handler(comes: WakeupComes) -> Outcome {
    Run::new(2, Schedule::Immediate).serve(|clients| {
        let (a, b) = (&clients[0], &clients[1]);
        let (to_b, from_a) = mpsc::channel::<()>();
        let (to_a, from_b) = mpsc::channel::<()>();
        let woken = [AtomicBool::new(false), AtomicBool::new(false)];
        std::thread::scope(|s| {
            let b_side = s.spawn(|| -> Outcome {
                let from_a = from_a; // moved: a receiver is not shared
                from_a.recv_timeout(WAIT)?; // A has subscribed
                b.lookup(11, WAIT)?;
                release(b, 11)?; // runs A's handler inside A's rendezvous
                if let WakeupComes::Before = comes {
                    from_a.recv_timeout(WAIT)?; // A's handler runs
                    b.wakeup(3)?;
                    woken[0].store(true, Ordering::SeqCst);
                    to_a.send(())?; // A's handler may fail now
                } else {
                    from_a.recv_timeout(WAIT)?; // A's rendezvous has failed
                    std::thread::sleep(LAG);
                    woken[0].store(true, Ordering::SeqCst);
                    b.wakeup(3)?;
                }
                // A's next rendezvous has returned: the one after waits.
                let returned = from_a.recv_timeout(WAIT);
                std::thread::sleep(LAG);
                woken[1].store(true, Ordering::SeqCst);
                b.wakeup(3)?;
                returned?;
                Ok(())
            });
            let a_side = || -> Outcome {
                a.enter_role();
                a.malloc(11, 8)?;
                let runs = AtomicUsize::new(0);
                let (running, from_b) = (to_b.clone(), Mutex::new(from_b));
                a.subscribe(11, false, move |_, _| {
                    if runs.fetch_add(1, Ordering::SeqCst) > 0 {
                        return Ok(());
                    }
                    if let WakeupComes::Before = comes {
                        // B's wakeup is sent while this runs.
                        running.send(())?;
                        from_b.lock().unwrap().recv_timeout(WAIT)?;
                    }
                    Err("the handler's first run fails".into())
                })?;
                to_b.send(())?;
                handler_failed(a.rendezvous(3), 11, "the first rendezvous")?;
                if let WakeupComes::After = comes {
                    to_b.send(())?;
                }
                a.rendezvous(3)?;
                if !woken[0].load(Ordering::SeqCst) {
                    return Err("the second rendezvous returned before any wakeup".into());
                }
                to_b.send(())?;
                a.rendezvous(3)?;
                if !woken[1].load(Ordering::SeqCst) {
                    return Err("the third rendezvous returned before the second wakeup".into());
                }
                a.unsubscribe(11)?;
                Ok(())
            };
            let a_out = a_side();
            let b_out = b_side.join().expect("B does not panic");
            a_out.and(b_out)
        })
    })
}

#[test]
fn a_failed_rendezvous_leaves_a_wakeup_sent_meanwhile_to_the_next() {
    rendezvous_after_a_failed_handler(WakeupComes::Before).unwrap();
}

#[test]
fn a_failed_rendezvous_leaves_the_next_waiting_for_a_wakeup() {
    rendezvous_after_a_failed_handler(WakeupComes::After).unwrap();
}

// ---------------------------------------------------- chain subscriptions

/// A write release of `value` (8 bytes, little-endian) into `chunk` alone,
/// through a chain of its own.
fn publish(client: &Client, chunk: ChunkId, value: u64) -> SatResult<()> {
    client.malloc_lst(ProtocolId::HomeMesi, &[chunk], &[8])?;
    client.acquire(chunk, Access::Write)?;
    client.with_data_mut(chunk, |d| d.copy_from_slice(&value.to_le_bytes()))?;
    client.release(chunk)
}

/// UNSUBSCRIBE from another thread while the role's thread is inside the
/// subscription's handler returns only once that handler has ended ("will
/// not run again"). It used to return at once, the handler already under
/// way running on after it (after FREE, with the chain given back).
#[test]
fn an_unsubscribe_from_another_thread_waits_for_the_handler_under_way() {
    Run::new(2, Schedule::Immediate).serve(|c| {
        let (a, b) = (&c[0], &c[1]);
        a.malloc(44, 8).unwrap();
        a.enter_role();
        let (entered_tx, entered_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let handler_ended = Arc::new(AtomicBool::new(false));
        let ended = handler_ended.clone();
        a.subscribe(44, false, move |_, _| {
            entered_tx.send(()).ok();
            go_rx.lock().unwrap().recv().ok();
            ended.store(true, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        publish(b, 44, 1).unwrap();
        std::thread::scope(|s| {
            let handler_ended = &handler_ended;
            let unsubscriber = s.spawn(move || {
                entered_rx.recv_timeout(WAIT).expect("the handler ran");
                std::thread::scope(|s| {
                    let call = s.spawn(|| {
                        a.unsubscribe(44).unwrap();
                        handler_ended.load(Ordering::SeqCst)
                    });
                    // Time for the call to return early, if it does.
                    let until = std::time::Instant::now() + LAG;
                    while !call.is_finished() && std::time::Instant::now() < until {
                        std::thread::yield_now();
                    }
                    let early = call.is_finished();
                    go_tx.send(()).unwrap();
                    (early, call.join().unwrap())
                })
            });
            // The role's thread runs the handler, which waits for `go`.
            while a.run_handlers().unwrap() == 0 {
                std::thread::yield_now();
            }
            let (early, ended_first) = unsubscriber.join().unwrap();
            assert!(!early, "UNSUBSCRIBE returned while its handler still ran");
            assert!(ended_first, "UNSUBSCRIBE returned before its handler ended");
        });
    });
}

/// UNSUBSCRIBE from another thread while the handler runs, with another
/// event of the subscription waiting behind that run: the handler does not
/// run again. It did: the role's thread took the waiting event as the run
/// ended, before the unsubscribing thread saw the end.
#[test]
fn an_unsubscribe_while_the_handler_runs_drops_the_event_behind_it() {
    unsubscribe_while_the_handler_runs(false);
}

/// The same for a signal's handler, which used not to wait for the run.
#[test]
fn a_signal_unsubscribe_while_the_handler_runs_drops_the_raise_behind_it() {
    unsubscribe_while_the_handler_runs(true);
}

fn unsubscribe_while_the_handler_runs(signal: bool) {
    Run::new(2, Schedule::Immediate).serve(|c| {
        let (a, b) = (&c[0], &c[1]);
        a.malloc(44, 8).unwrap();
        a.enter_role();
        let (topic, trigger): (_, &(dyn Fn(u64) + Sync)) = if signal {
            (events::Topic::Signal(9), &|_| b.raise(9).unwrap())
        } else {
            (events::Topic::Chunk(44), &|v| publish(b, 44, v).unwrap())
        };
        let (entered_tx, entered_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = runs.clone();
        let handler = move |_: &Client, _: &Event| {
            // Only the first run waits: a second one (the bug) must not
            // hang the test, but show in the count.
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                entered_tx.send(()).ok();
                go_rx.lock().unwrap().recv().ok();
            }
            Ok(())
        };
        if signal {
            a.subscribe_signal(9, handler).unwrap();
        } else {
            a.subscribe(44, false, handler).unwrap();
        }
        trigger(1);
        std::thread::scope(|s| {
            let unsubscriber = s.spawn(move || {
                entered_rx.recv_timeout(WAIT).expect("the handler ran");
                trigger(2);
                let until = Instant::now() + WAIT;
                while !a.lock().mail.events.pending_for(topic) {
                    assert!(Instant::now() < until, "the second event never came");
                    std::thread::yield_now();
                }
                std::thread::scope(|s| {
                    let call = s.spawn(|| {
                        if signal {
                            a.unsubscribe_signal(9)
                        } else {
                            a.unsubscribe(44)
                        }
                    });
                    while !a.lock().mail.events.is_ending(topic) {
                        assert!(!call.is_finished(), "UNSUBSCRIBE did not wait for the run");
                        std::thread::yield_now();
                    }
                    go_tx.send(()).unwrap();
                    call.join().unwrap()
                })
            });
            while a.run_handlers().unwrap() == 0 {
                std::thread::yield_now();
            }
            unsubscriber.join().unwrap().unwrap();
        });
        assert_eq!(a.run_handlers().unwrap(), 0);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the handler ran after UNSUBSCRIBE"
        );
    });
}

/// What a test's handlers saw: (subscription, chunk, version, data).
type Seen = Arc<Mutex<Vec<(&'static str, u64, u64, Option<u64>)>>>;

fn recorder(
    seen: &Seen,
    name: &'static str,
) -> impl Fn(&Client, &Event) -> HandlerResult + Send + Sync + 'static {
    let seen = seen.clone();
    move |_, event| {
        if let Event::Chunk {
            chunk,
            version,
            data,
        } = event
        {
            let value = data
                .as_deref()
                .map(|d| u64::from_le_bytes(d[..8].try_into().unwrap()));
            seen.lock().unwrap().push((name, *chunk, *version, value));
        }
        Ok(())
    }
}

/// Takes in everything the publisher sent before its wakeup of `id`
/// (one server: its notifications come first), then runs the handlers.
/// The waiting thread is not the role's, so no handler runs before: the
/// events merge as they would behind a slow handler.
fn take_in(client: &Client, id: u32) -> SatResult<()> {
    client.rendezvous(id)?;
    client.run_pending_handlers().map(drop)
}

/// A release of any chunk of a subscribed chain runs the chain's handler,
/// with that chunk, its version and data; releases that arrive while the
/// handler waits merge into one event per chain, naming the latest.
#[test]
fn a_chain_subscription_hears_every_chunk_and_merges_per_chain() {
    let outcome = Run::new(2, Schedule::Immediate).serve(|clients| -> Outcome {
        let (a, b) = (&clients[0], &clients[1]);
        let chain = a.malloc_lst(ProtocolId::HomeMesi, &[20, 21, 22], &[8])?;
        let seen = Seen::default();
        a.subscribe_chain(&chain, true, recorder(&seen, "chain"))?;
        publish(b, 21, 121)?; // the chain's second chunk alone
        b.wakeup(1)?;
        take_in(a, 1)?;
        assert_eq!(*seen.lock().unwrap(), vec![("chain", 21, 1, Some(121))]);
        seen.lock().unwrap().clear();
        for (chunk, value) in [(22, 122), (20, 120), (21, 221)] {
            publish(b, chunk, value)?;
        }
        b.wakeup(1)?;
        take_in(a, 1)?;
        // Three releases, one run: the event tells of the latest.
        assert_eq!(*seen.lock().unwrap(), vec![("chain", 21, 2, Some(221))]);
        let read = a.read(&chain)?;
        let values = read.data(|d| {
            d.chunks(8)
                .map(|v| u64::from_le_bytes(v.try_into().unwrap()))
                .collect::<Vec<_>>()
        })?;
        drop(read);
        assert_eq!(values, vec![120, 221, 122]);
        a.unsubscribe_chain(&chain)?;
        Ok(())
    });
    outcome.unwrap();
}

/// Two chains of one process that start at chunk 30, and chunk 30's own
/// subscription, are three subscriptions: a release of chunk 30 runs the
/// three handlers, each with data only if it asked; unsubscribing one
/// leaves the others. The home records the process once per chunk: one
/// notification per release, however many subscriptions include it.
#[test]
fn chains_that_start_at_one_chunk_are_subscriptions_of_their_own() {
    let outcome = Run::new(2, Schedule::Immediate).serve(|clients| -> Outcome {
        let (a, b) = (&clients[0], &clients[1]);
        let x = a.malloc_lst(ProtocolId::HomeMesi, &[30, 31], &[8])?;
        let y = a.malloc_lst(ProtocolId::HomeMesi, &[30, 32], &[8])?;
        let seen = Seen::default();
        a.subscribe_chain(&x, false, recorder(&seen, "x"))?;
        a.subscribe_chain(&y, true, recorder(&seen, "y"))?;
        a.subscribe(30, false, recorder(&seen, "chunk 30"))?;
        let twice = a.subscribe_chain(&x, false, |_, _| Ok(()));
        assert!(
            matches!(&twice, Err(SatError::Usage(m)) if m
                == "SUBSCRIBE to the chain of chunk 30 (2 chunks): this process is already \
                    subscribed; UNSUBSCRIBE first"),
            "{twice:?}"
        );
        let received = |c: &Client| c.lock().mail.events.counters().1;
        // Releases by B, then what A received (notifications) and handled.
        let round = |releases: &[(ChunkId, u64)]| -> SatResult<_> {
            let before = received(a);
            for &(chunk, value) in releases {
                publish(b, chunk, value)?;
            }
            b.wakeup(2)?;
            take_in(a, 2)?;
            let mut got = std::mem::take(&mut *seen.lock().unwrap());
            got.sort();
            Ok((received(a) - before, got))
        };
        assert_eq!(
            round(&[(30, 1)])?,
            (
                1,
                vec![
                    ("chunk 30", 30, 1, None),
                    ("x", 30, 1, None),
                    ("y", 30, 1, Some(1)),
                ]
            )
        );
        a.unsubscribe_chain(&x)?;
        assert!(matches!(a.unsubscribe_chain(&x), Err(SatError::Usage(_))));
        // Chunk 31 is no longer subscribed at its home: no notification.
        // Y's two merge into one event, of the latest (chunk 32).
        assert_eq!(
            round(&[(31, 2), (30, 3), (32, 4)])?,
            (2, vec![("chunk 30", 30, 2, None), ("y", 32, 1, Some(4))])
        );
        a.unsubscribe_chain(&y)?;
        // The last subscription with data is gone: chunk 30's notifications
        // come without it, and chunk 32's no more.
        assert_eq!(
            round(&[(30, 5), (32, 6)])?,
            (1, vec![("chunk 30", 30, 3, None)])
        );
        a.unsubscribe(30)?;
        assert_eq!(round(&[(30, 7)])?, (0, vec![]));
        Ok(())
    });
    outcome.unwrap();
}

// ------------------------------------------- closures given a scope's bytes

/// Runs `f` on a thread of its own and returns what it returned; fails the
/// test if it has not returned within [`WAIT`] (a deadlock: the thread is
/// left behind, the test fails instead of hanging).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(WAIT) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: no answer within {WAIT:?}, deadlocked"),
    }
}

/// A closure given a scope's bytes runs without the client's lock, so it
/// may call the client: a GET of another chunk works, a nested read of the
/// chunk it writes and a RELEASE of it are refused with a usage error (they
/// would corrupt or deadlock), and nothing is left locked afterwards.
#[test]
fn a_closure_given_a_scopes_bytes_may_call_the_client() {
    let seen = within("a closure that calls the client", || {
        Run::new(1, Schedule::Immediate).serve(|clients| -> SatResult<(u64, u64)> {
            let c = &clients[0];
            c.malloc(1, 8)?;
            c.malloc(2, 8)?;
            c.put(2, &7u64.to_le_bytes())?;
            c.acquire(1, Access::Write)?;
            let inner = c.with_data_mut(1, |d| -> SatResult<u64> {
                let mut buf = [0u8; 8];
                c.get(2, &mut buf)?;
                d.copy_from_slice(&buf);
                let nested = c.with_data(1, |_| ());
                assert!(matches!(nested, Err(SatError::Usage(_))), "{nested:?}");
                let early = c.release(1);
                assert!(matches!(early, Err(SatError::Usage(_))), "{early:?}");
                Ok(u64::from_le_bytes(buf))
            })??;
            c.release(1)?;
            // Read scopes nest: a closure reading a chunk may read it again.
            c.acquire(1, Access::Read)?;
            let twice = c.with_data(1, |outer| c.with_data(1, |inner| outer == inner))??;
            assert!(twice);
            c.release(1)?;
            Ok((inner, word(c, 1)))
        })
    });
    assert_eq!(seen.unwrap(), (7, 7));
}

/// A long closure stops neither the homes nor the process's other threads:
/// while one thread's closure reads chunk 1, another process's write of
/// chunk 2 (which this process holds) completes, because this process still
/// answers the home's invalidation; another thread of this process reads
/// chunk 2 meanwhile; and a RELEASE of chunk 1 from that thread waits for
/// the closure to return.
#[test]
fn a_long_closure_stops_neither_the_homes_nor_other_threads() {
    let out = within("a long closure", || {
        Run::new(2, Schedule::Immediate).serve(|clients| -> SatResult<(u64, bool)> {
            let (a, b) = (&clients[0], &clients[1]);
            a.malloc(1, 8)?;
            publish(a, 2, 5)?;
            assert_eq!(word(a, 2), 5);
            b.lookup(2, WAIT)?;
            a.acquire(1, Access::Read)?;
            let (started_tx, started) = mpsc::channel();
            let (finish, finish_rx) = mpsc::channel::<()>();
            let released = &AtomicBool::new(false);
            std::thread::scope(|s| -> SatResult<(u64, bool)> {
                let reader = s.spawn(move || {
                    a.with_data(1, |_| {
                        started_tx.send(()).unwrap();
                        finish_rx.recv().unwrap();
                        // The scope is still open: no RELEASE ended it.
                        !released.load(Ordering::SeqCst)
                    })
                });
                started.recv().unwrap();
                // Chunk 2 is in `a`: this write completes only once `a`
                // answers its home, with the closure still running.
                publish(b, 2, 9)?;
                let now = word(a, 2);
                let releaser = s.spawn(move || {
                    let r = a.release(1);
                    released.store(true, Ordering::SeqCst);
                    r
                });
                finish.send(()).unwrap();
                let open_throughout = reader.join().unwrap()?;
                releaser.join().unwrap()?;
                Ok((now, open_throughout))
            })
        })
    });
    assert_eq!(out.unwrap(), (9, true));
}

/// A timeout of `Duration::MAX` means no deadline: LOOKUP, recv_timeout and
/// read_symbol wait as long as needed (they used to panic adding it to the
/// clock).
#[test]
fn a_timeout_of_duration_max_waits_without_a_deadline() {
    let got = Run::new(2, Schedule::Immediate).serve(|clients| -> SatResult<_> {
        let (a, b) = (&clients[0], &clients[1]);
        a.malloc(5, 8)?;
        let size = b.lookup(5, Duration::MAX)?;
        a.send(b.rank(), 1, b"hi")?;
        let m = b.recv_timeout(Duration::MAX)?.expect("a message");
        a.write_symbol("limitless", b"yes")?;
        let value = b.read_symbol("limitless", Duration::MAX)?;
        Ok((size, m.data, value))
    });
    assert_eq!(got.unwrap(), (8, b"hi".to_vec(), b"yes".to_vec()));
}

/// A RELEASE of a chain that was not acquired is refused and ends nothing,
/// even when one of its chunks is in a scope another chain opened (it used
/// to end that scope).
#[test]
fn releasing_a_chain_that_was_not_acquired_ends_nothing() {
    let run = Run::new(1, Schedule::Immediate);
    run.serve(|clients| {
        let c = &clients[0];
        let a = c.malloc(10, 8).unwrap();
        c.malloc(11, 8).unwrap();
        let b = c.lookup_lst(&[10, 11], WAIT).unwrap();
        c.acquire_chain(&a, Access::Read).unwrap();
        let wrong = c.release_chain(&b);
        assert!(matches!(wrong, Err(SatError::Usage(_))), "{wrong:?}");
        // The scope through the first chain is still open.
        c.with_chain(&a, |d| d.len()).expect("still in its scope");
        c.release_chain(&a).unwrap();
    });
}

/// Runs `f` on two clients, once on the message path and once on one host
/// (host slots): `f` gets whether it is the second.
fn on_both_paths(f: impl Fn(&[Client], bool)) {
    for host in [false, true] {
        let run = if host {
            Run::on_one_host(2)
        } else {
            Run::new(2, Schedule::Immediate)
        };
        run.serve(|clients| f(clients, host));
    }
}

/// A chain inside another chain's scope (LOOKUP of the middle of a chain
/// being written) cannot end part of that scope: its RELEASE and ABORT are
/// refused and end nothing, and the wider chain's RELEASE then publishes
/// the whole chain as one version. They used to publish the middle alone,
/// leaving the ends in a scope nobody could release, and another process
/// read a chain torn between two writes.
#[test]
fn a_chain_inside_another_chains_scope_cannot_end_part_of_it() {
    on_both_paths(|clients, host| {
        let (w, r) = (&clients[0], &clients[1]);
        let ids = [100, 101, 102, 103];
        let a = w.malloc_lst(ProtocolId::HomeMesi, &ids, &[8]).unwrap();
        let sub = w.lookup_lst(&[101, 102], WAIT).unwrap();
        w.acquire_chain(&a, Access::Write).unwrap();
        w.with_chain_mut(&a, |d| d.fill(3)).unwrap();
        for (what, ended) in [
            ("RELEASE", w.release_chain(&sub)),
            ("ABORT", w.abort_chain(&sub)),
        ] {
            let e = ended.expect_err(what).to_string();
            assert!(
                e.contains("chunk 101 is in a scope that another chain over it opened")
                    && e.contains("the chain of 4 chunk(s) that starts at chunk 100"),
                "{what}: {e}"
            );
        }
        w.with_chain_mut(&a, |d| d.fill(2))
            .expect("still in its scope");
        w.release_chain(&a).unwrap();
        let theirs = r.lookup_lst(&ids, WAIT).unwrap();
        r.acquire_chain(&theirs, Access::Read).unwrap();
        let seen = r.with_chain(&theirs, |d| d.to_vec()).unwrap();
        r.release_chain(&theirs).unwrap();
        assert_eq!(seen, vec![2u8; 32], "host slots: {host}");
    });
}

/// A freed chain's handle ends nothing: its RELEASE says it was given back,
/// and the scope of a chain looked up again over the same chunks stays
/// open (it used to publish that chain half-written).
#[test]
fn a_freed_chains_release_ends_nothing() {
    let run = Run::new(1, Schedule::Immediate);
    run.serve(|clients| {
        let c = &clients[0];
        let old = c
            .malloc_lst(ProtocolId::HomeMesi, &[110, 111], &[8])
            .unwrap();
        c.free(&old).unwrap();
        let new = c.lookup_lst(&[110, 111], WAIT).unwrap();
        c.acquire_chain(&new, Access::Write).unwrap();
        for ended in [c.release_chain(&old), c.abort_chain(&old)] {
            let e = ended.unwrap_err().to_string();
            assert!(e.contains("was given back"), "{e}");
        }
        c.with_chain_mut(&new, |d| d.fill(4))
            .expect("still in its scope");
        c.release_chain(&new).unwrap();
    });
}

/// Any thread of a process may end a scope of the process through the chain
/// that opened it, also while it reads the same chunks through another
/// chain itself: each RELEASE ends the scope of its own chain.
#[test]
fn a_thread_ends_another_threads_scope_through_its_chain() {
    on_both_paths(|clients, _| {
        let (c, w) = (&clients[0], &clients[1]);
        let outer = c
            .malloc_lst(ProtocolId::HomeMesi, &[120, 121, 122, 123], &[8])
            .unwrap();
        let inner = c.lookup_lst(&[121, 122], WAIT).unwrap();
        c.acquire_chain(&outer, Access::Read).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| c.acquire_chain(&inner, Access::Read).unwrap())
                .join()
                .unwrap();
        });
        // The other thread's scope, through the inner chain, ended here.
        c.release_chain(&inner).unwrap();
        c.release_chain(&outer).unwrap();
        for (what, again) in [
            ("inner", c.release_chain(&inner)),
            ("outer", c.release_chain(&outer)),
        ] {
            let e = again.unwrap_err().to_string();
            assert!(e.contains("is in no scope"), "{what}: {e}");
        }
        // Nothing holds the chunks: a writer of another process goes on.
        let theirs = w.lookup_lst(&[120, 121, 122, 123], WAIT).unwrap();
        w.acquire_chain(&theirs, Access::Write).unwrap();
        w.release_chain(&theirs).unwrap();
    });
}

/// On one host, scopes open on the home's slot: hand-offs of a chunk in
/// both directions, and reads that fetch each new version, cost no
/// message, and each read sees the last release.
#[test]
fn on_one_host_scopes_cost_no_message_and_see_the_last_release() {
    let outcome = Run::on_one_host(2).serve(|clients| -> Outcome {
        let (a, b) = (&clients[0], &clients[1]);
        a.malloc_lst(ProtocolId::HomeMesi, &[40], &[64])?;
        b.malloc_lst(ProtocolId::HomeOnly, &[41], &[64])?;
        b.lookup(40, WAIT)?;
        a.lookup(41, WAIT)?;
        let sent = (a.messages_sent(), b.messages_sent());
        for round in 1..=20u64 {
            let (writer, reader) = if round % 2 == 1 { (a, b) } else { (b, a) };
            for chunk in [40, 41] {
                writer.acquire(chunk, Access::ReadWrite)?;
                let before =
                    writer.with_data(chunk, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))?;
                assert_eq!(before, round - 1, "a READWRITE sees the last release");
                writer.with_data_mut(chunk, |d| d[..8].copy_from_slice(&round.to_le_bytes()))?;
                writer.release(chunk)?;
                let mut seen = [0u8; 64];
                reader.get(chunk, &mut seen)?;
                assert_eq!(u64::from_le_bytes(seen[..8].try_into().unwrap()), round);
            }
        }
        assert_eq!(
            (a.messages_sent(), b.messages_sent()),
            sent,
            "no message for a scope"
        );
        Ok(())
    });
    outcome.unwrap();
}

/// On one host, a writer of another thread waits for the open read scope,
/// and a reader that comes meanwhile waits behind the writer; the reader
/// then sees the writer's release.
#[test]
fn on_one_host_a_writer_waits_for_readers_and_keeps_new_ones_out() {
    let outcome = Run::on_one_host(2).serve(|clients| -> Outcome {
        let (a, b) = (&clients[0], &clients[1]);
        a.malloc_lst(ProtocolId::HomeMesi, &[42], &[8])?;
        b.lookup(42, WAIT)?;
        a.acquire(42, Access::Read)?;
        let (granted_tx, granted_rx) = mpsc::channel();
        std::thread::scope(|s| -> Outcome {
            let writer = s.spawn(move || -> SatResult<()> {
                b.acquire(42, Access::Write)?;
                granted_tx.send(()).unwrap();
                b.with_data_mut(42, |d| d.copy_from_slice(&7u64.to_le_bytes()))?;
                b.release(42)
            });
            // The writer cannot be granted while the read scope is open.
            assert!(granted_rx.recv_timeout(Duration::from_millis(50)).is_err());
            a.release(42)?;
            granted_rx
                .recv_timeout(WAIT)
                .expect("the writer is granted once the reader left");
            writer.join().unwrap()?;
            Ok(())
        })?;
        assert_eq!(word(a, 42), 7);
        Ok(())
    });
    outcome.unwrap();
}

/// On one host, a subscriber hears of a release made in the slot, with the
/// data when it asked for it; a release before any subscription tells the
/// home nothing.
#[test]
fn on_one_host_subscribers_hear_of_releases_with_their_data() {
    let outcome = Run::on_one_host(2).serve(|clients| -> Outcome {
        let (a, b) = (&clients[0], &clients[1]);
        publish(b, 43, 1)?;
        publish(b, 44, 1)?;
        let sent = b.messages_sent();
        publish(b, 43, 2)?;
        assert_eq!(
            b.messages_sent(),
            sent,
            "nobody subscribes: the home hears nothing"
        );
        a.malloc_lst(ProtocolId::HomeMesi, &[43], &[8])?;
        a.malloc_lst(ProtocolId::HomeMesi, &[44], &[8])?;
        let seen = Seen::default();
        a.subscribe(43, true, recorder(&seen, "with data"))?;
        a.subscribe(44, false, recorder(&seen, "without"))?;
        publish(b, 43, 3)?;
        publish(b, 44, 4)?;
        b.wakeup(2)?;
        take_in(a, 2)?;
        // The release of 44 has no subscriber that wants data: b tells a
        // itself, through a's inbox, and may overtake the home's
        // notification of 43 (different chunks come in no set order).
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(
            seen,
            vec![("with data", 43, 3, Some(3)), ("without", 44, 2, None)]
        );
        a.unsubscribe(43)?;
        a.unsubscribe(44)?;
        Ok(())
    });
    outcome.unwrap();
}

/// On one host a release whose subscribers want no data tells them itself,
/// through their inboxes: no message leaves the releaser, and each
/// subscriber's handler runs with the version, the releaser's own too. Both
/// ways round: the subscriber already waits for events when the release
/// comes, and the release comes before the subscriber looks.
#[test]
fn on_one_host_a_release_tells_its_subscribers_without_a_message() {
    for waiting_first in [true, false] {
        let outcome = Run::on_one_host(2).serve(|clients| -> Outcome {
            let (a, b) = (&clients[0], &clients[1]);
            a.malloc_lst(ProtocolId::HomeMesi, &[48], &[8])?;
            b.malloc_lst(ProtocolId::HomeMesi, &[48], &[8])?;
            let seen = Seen::default();
            let subscriber = recorder(&seen, "subscriber");
            a.subscribe(48, false, move |c, e| {
                subscriber(c, e)?;
                c.unsubscribe(48)?;
                Ok(())
            })?;
            b.subscribe(48, false, recorder(&seen, "releaser"))?;
            std::thread::scope(|s| -> Outcome {
                let idle_told = a.messages_sent();
                let serving = waiting_first.then(|| {
                    s.spawn(|| {
                        a.enter_role();
                        a.serve_subscriptions()
                    })
                });
                if waiting_first {
                    // The client loop tells its server it is idle, then waits.
                    let deadline = Instant::now() + WAIT;
                    while a.messages_sent() == idle_told {
                        assert!(Instant::now() < deadline, "the client loop never started");
                        std::thread::yield_now();
                    }
                }
                let sent = b.messages_sent();
                publish(b, 48, 7)?;
                assert_eq!(
                    b.messages_sent(),
                    sent,
                    "a release told through inboxes sends no message"
                );
                match serving {
                    Some(t) => t.join().unwrap()?,
                    None => {
                        a.enter_role();
                        a.serve_subscriptions()?;
                    }
                }
                b.run_pending_handlers()?;
                Ok(())
            })?;
            b.unsubscribe(48)?;
            let mut seen = seen.lock().unwrap().clone();
            seen.sort();
            assert_eq!(
                seen,
                vec![("releaser", 48, 1, None), ("subscriber", 48, 1, None)],
                "waiting first: {waiting_first}"
            );
            Ok(())
        });
        outcome.unwrap();
    }
}

/// On one host a read takes the slot's version without asking the home, so
/// nothing orders the home's notifications before it: a subscriber that
/// reads version N is told of N by its own read, and the notifications of N
/// and older that come later are discarded. Both ways round: the read
/// before any notification has come, and after every one has. Either way
/// the handler runs once, with the last version and its data.
#[test]
fn on_one_host_a_read_is_never_ahead_of_the_notifications() {
    const N: u64 = 100;
    for read_first in [true, false] {
        // The publisher takes in nothing while it publishes: past the first
        // 32, its releases wait, merged, to be told to the home.
        let run = Run {
            passive: vec![1],
            ..Run::on_one_host(2)
        };
        let outcome = run.serve(|clients| -> Outcome {
            let (a, b) = (&clients[0], &clients[1]);
            a.enter_role();
            a.malloc_lst(ProtocolId::HomeMesi, &[45], &[8])?;
            a.malloc_lst(ProtocolId::HomeMesi, &[46], &[8])?;
            let seen = Seen::default();
            a.subscribe(45, true, recorder(&seen, "data"))?;
            let marker = recorder(&seen, "marker");
            // With data, so that the home tells it too, after chunk 45's.
            a.subscribe(46, true, move |c, e| {
                marker(c, e)?;
                c.unsubscribe(45)?;
                c.unsubscribe(46)?;
                Ok(())
            })?;
            for v in 1..=N {
                publish(b, 45, v)?;
            }
            // The home hears of b's releases in order: once the marker's
            // notification is here, every one of chunk 45's is too.
            publish(b, 46, 1)?;
            let read = || -> SatResult<u64> {
                a.acquire(45, Access::Read)?;
                let v = a.with_data(45, |d| u64::from_le_bytes(d.try_into().unwrap()))?;
                a.release(45)?;
                Ok(v)
            };
            std::thread::scope(|s| -> Outcome {
                if read_first {
                    assert_eq!(read()?, N);
                }
                // b takes in its answers from now on, and tells the rest.
                let told = s.spawn(|| b.rendezvous(5));
                if !read_first {
                    let deadline = Instant::now() + WAIT;
                    while !a.lock().mail.events.pending_for(events::Topic::Chunk(46)) {
                        assert!(Instant::now() < deadline, "the marker never came");
                        std::thread::yield_now();
                    }
                    assert_eq!(read()?, N);
                }
                // Runs the handlers until the marker's unsubscribes both.
                a.serve_subscriptions()?;
                a.wakeup(5)?;
                told.join().unwrap()?;
                Ok(())
            })?;
            assert_eq!(
                *seen.lock().unwrap(),
                vec![("data", 45, N, Some(N)), ("marker", 46, 1, Some(1))],
                "read first: {read_first}"
            );
            Ok(())
        });
        outcome.unwrap();
    }
}

/// On one host, a read tells a subscription only of releases made after it
/// was in place: the version a late subscriber first reads was never
/// promised to it, the next release is.
#[test]
fn on_one_host_a_read_tells_nothing_made_before_the_subscription() {
    let outcome = Run::on_one_host(2).serve(|clients| -> Outcome {
        let (a, b) = (&clients[0], &clients[1]);
        a.enter_role();
        publish(b, 47, 1)?;
        a.malloc_lst(ProtocolId::HomeMesi, &[47], &[8])?;
        let seen = Seen::default();
        a.subscribe(47, true, recorder(&seen, "late"))?;
        assert_eq!(word(a, 47), 1);
        a.run_pending_handlers()?;
        assert_eq!(*seen.lock().unwrap(), vec![]);
        publish(b, 47, 2)?;
        assert_eq!(word(a, 47), 2);
        b.wakeup(3)?;
        take_in(a, 3)?;
        assert_eq!(*seen.lock().unwrap(), vec![("late", 47, 2, Some(2))]);
        a.unsubscribe(47)?;
        Ok(())
    });
    outcome.unwrap();
}

/// On one host, a barrier is a word in a host slot: no round opens before
/// every process arrived, and no message is sent (but the one that asks the
/// coordinator where a barrier lives, the first time). An arrival with
/// another count is refused: `segment/barrier.rs`'s tests.
#[test]
fn on_one_host_a_barrier_holds_every_round_and_sends_no_message() {
    let outcome = Run::on_one_host(2).serve(|clients| -> Outcome {
        let arrived = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for c in clients {
                s.spawn(move || {
                    c.barrier(6, 2).unwrap();
                    c.barrier(7, 2).unwrap();
                });
            }
        });
        let sent: Vec<u64> = clients.iter().map(|c| c.messages_sent()).collect();
        std::thread::scope(|s| {
            for c in clients {
                let arrived = &arrived;
                s.spawn(move || {
                    for round in 1..=200u64 {
                        arrived.fetch_add(1, Ordering::SeqCst);
                        c.barrier(6, 2).unwrap();
                        // Both arrivals of this round happened before either left.
                        assert!(arrived.load(Ordering::SeqCst) >= 2 * round);
                        c.barrier(7, 2).unwrap();
                    }
                });
            }
        });
        let now: Vec<u64> = clients.iter().map(|c| c.messages_sent()).collect();
        assert_eq!(now, sent, "a barrier on one host sends no message");
        Ok(())
    });
    outcome.unwrap();
}

/// A protocol id no process registered: the client refuses its MALLOC
/// before sending anything, and a home that gets one anyway (from a
/// process that registered protocols this one did not) refuses it.
#[test]
fn a_protocol_nobody_registered_is_refused_by_client_and_home() {
    let run = Run::new(1, Schedule::Immediate);
    let stranger = ProtocolId::User(crate::protocol::registry::MAX_USER_PROTOCOLS as u16);
    let refused = run.clients[0].malloc_with(stranger, 5, 8);
    let e = refused.expect_err("an unregistered protocol").to_string();
    assert!(e.contains("has not registered"), "{e}");
    let answers = run.serve(|clients| {
        let raw = Message::Malloc {
            chunk: 5,
            size: 8,
            client: clients[0].rank(),
            request: 0,
            protocol: stranger,
            label: NO_LABEL,
        };
        clients[0].allocation(&[raw], Some(WAIT))
    });
    assert_eq!(answers.unwrap(), vec![AllocOutcome::Refused]);
}

/// A chain's READ does not wait one round trip per chunk: when the request
/// of the chain's first chunk (the one the READ waits for first) leaves,
/// the requests of the others are on their way already. The grants, which
/// open no scope before the READ comes to their chunk, open one scope each
/// as usual: the chain holds every granted version, the READ sent one
/// request per chunk and nothing more, and its RELEASE sends nothing.
/// The home here is this test's thread, which answers MALLOCs and grants
/// reads of version 0.
#[test]
fn a_chain_read_asks_for_its_chunks_at_once() {
    const CHUNKS: [ChunkId; 4] = [40, 41, 42, 43];
    let bytes_of = |chunk: ChunkId| (chunk * 1000).to_le_bytes();
    let Run {
        mut server,
        clients,
        ..
    } = Run::new(1, Schedule::Immediate);
    let client = &clients[0];
    let mut asked: Vec<ChunkId> = Vec::new();
    // How many chunks had been asked for when the first chunk's request came.
    let mut with_the_first = None;
    let read = std::thread::scope(|s| {
        let reader = s.spawn(|| -> SatResult<(Vec<u8>, u64)> {
            let chain = client.malloc_lst(ProtocolId::HomeMesi, &CHUNKS, &[8; 4])?;
            let before = client.messages_sent();
            client.acquire_chain(&chain, Access::Read)?;
            let bytes = client.with_chain(&chain, |b| b.to_vec())?;
            client.release_chain(&chain)?;
            Ok((bytes, client.messages_sent() - before))
        });
        let mut header = [0u8; MAX_HEADER];
        while !reader.is_finished() {
            let polled = server
                .poll(&mut |out, m| {
                    let (to, reply, data) = match wire::decode(m.header) {
                        Ok(Message::Malloc {
                            chunk,
                            size,
                            client,
                            request,
                            protocol,
                            label,
                        }) => {
                            let outcome = AllocOutcome::Allocated {
                                size,
                                protocol,
                                label,
                            };
                            let reply = Message::AllocReply {
                                chunk,
                                client,
                                request,
                                outcome,
                                host: None,
                            };
                            (client, reply, None)
                        }
                        // The MALLOC's look for a clash first: nothing here yet.
                        Ok(Message::Lookup {
                            chunk,
                            client,
                            request,
                            ..
                        }) => {
                            let reply = Message::AllocReply {
                                chunk,
                                client,
                                request,
                                outcome: AllocOutcome::NotAllocated,
                                host: None,
                            };
                            (client, reply, None)
                        }
                        Ok(Message::Coherence {
                            chunk,
                            client,
                            op: CoherenceOp::ReadReq { .. },
                            ..
                        }) => {
                            asked.push(chunk);
                            if chunk == CHUNKS[0] {
                                with_the_first = Some(asked.len());
                            }
                            let op = CoherenceOp::ReadGrant {
                                version: 0,
                                with_data: true,
                            };
                            let grant = Message::Coherence {
                                chunk,
                                client,
                                op,
                                epoch: 0,
                                after_barrier: false,
                            };
                            (client, grant, Some(bytes_of(chunk)))
                        }
                        other => panic!("the READ sent {other:?}"),
                    };
                    let n = wire::encode(&reply, &mut header).unwrap();
                    let payload = data.as_ref().map_or(Payload::None, |d| Payload::Copy(d));
                    out.send(to, &header[..n], payload).unwrap();
                })
                .unwrap();
            if polled == 0 {
                std::thread::yield_now();
            }
        }
        reader.join().unwrap()
    });
    let (bytes, sent) = read.unwrap();
    assert_eq!(
        with_the_first,
        Some(CHUNKS.len()),
        "the requests in the order they came: {asked:?}"
    );
    let mut sorted = asked.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, CHUNKS, "one request per chunk: {asked:?}");
    assert_eq!(sent, CHUNKS.len() as u64, "the READ and RELEASE sent");
    let want: Vec<u8> = CHUNKS.iter().flat_map(|&c| bytes_of(c)).collect();
    assert_eq!(bytes, want, "the chain holds the granted versions");
}
