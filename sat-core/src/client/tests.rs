//! Allocation requests over the in-process transport: answers reach the
//! request they answer, and nothing else.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::transport::mem::{MemNetwork, MemTransport, Schedule};

const WAIT: Duration = Duration::from_secs(30);

/// One server (rank 0) and `clients` clients (ranks 1 and up) whose server
/// does not run until [`Run::serve`].
struct Run {
    topology: Arc<Topology>,
    server: MemTransport,
    clients: Vec<Client>,
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
        }
    }

    /// Runs the server while `f` runs on the clients, then ends the run
    /// (every client finishes) and returns what `f` returned.
    fn serve<T>(self, f: impl FnOnce(&[Client]) -> T) -> T {
        let Run {
            topology,
            mut server,
            clients,
        } = self;
        std::thread::scope(|s| {
            let topology = &topology;
            let server =
                s.spawn(move || crate::server::run(topology, &mut server, IdlePolicy::default()));
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&clients)));
            for c in &clients {
                c.finish(WAIT).unwrap();
            }
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
