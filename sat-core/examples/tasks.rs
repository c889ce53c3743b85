//! Figure 8: three tasks synchronized by a rendezvous and a barrier. Task A
//! writes a chunk and wakes B; B waits for the wakeup, reads what A wrote
//! and modifies it; C waits in the barrier for both and reads B's value.
//!
//! ```text
//! satrun -n 5 --topology sat-core/topologies/three-tasks.xml -- target/release/examples/tasks --order wakeup-first|sleep-first
//! ```
//! The order of A's wakeup and B's rendezvous at their coordinator is forced
//! both ways round, by synchronization, not by timing: `wakeup-first` has B
//! call rendezvous only after A says it woke it; `sleep-first` has B's
//! rendezvous request leave before B tells A to go on (both messages take
//! the same path to server 0, the rendezvous' coordinator, in order).

use std::time::Duration;

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::Access;

/// Home: server 1 (11 mod 2).
const CHUNK: u64 = 11;
/// Coordinated by server 0, the server of tasks A and B.
const RDV_ID: u32 = 2;
const BAR_ID: u32 = 7;
const A: u32 = 2;
const B: u32 = 3;

#[derive(Clone, Copy, PartialEq)]
enum Order {
    WakeupFirst,
    SleepFirst,
}

fn read_value(c: &Client) -> Result<u64, sat_core::SatError> {
    c.with_data(CHUNK, |d| u64::from_le_bytes(d[..8].try_into().unwrap()))
}

fn write_value(c: &Client, v: u64) -> Result<(), sat_core::SatError> {
    c.with_data_mut(CHUNK, |d| d[..8].copy_from_slice(&v.to_le_bytes()))
}

fn task_a(c: &Client, order: Order) -> RoleResult {
    c.malloc(CHUNK, 64)?;
    c.acquire(CHUNK, Access::Write)?;
    write_value(c, 100)?;
    c.release(CHUNK)?;
    println!("A: wrote 100");
    if order == Order::SleepFirst {
        c.recv_timeout(Duration::from_secs(60))?
            .ok_or("B never slept")?;
    }
    c.wakeup(RDV_ID)?;
    println!("A: woke rendezvous {RDV_ID}");
    if order == Order::WakeupFirst {
        c.send(B, 0, b"woke")?;
    }
    c.barrier(BAR_ID, c.client_count())?;
    println!("A: through the barrier");
    Ok(())
}

fn after_rendezvous(c: &Client) -> RoleResult {
    c.acquire(CHUNK, Access::ReadWrite)?;
    let v = read_value(c)?;
    println!("B: read {v}");
    write_value(c, v * 2)?;
    c.release(CHUNK)?;
    println!("B: wrote {}", v * 2);
    c.barrier(BAR_ID, c.client_count())?;
    println!("B: through the barrier");
    Ok(())
}

fn task_b(c: &Client, order: Order) -> RoleResult {
    c.malloc(CHUNK, 64)?;
    match order {
        Order::WakeupFirst => {
            c.recv_timeout(Duration::from_secs(60))?
                .ok_or("A never woke")?;
            c.rendezvous(RDV_ID)?;
            after_rendezvous(c)
        }
        Order::SleepFirst => std::thread::scope(|s| {
            // The rendezvous request is this process's next message: once
            // the count moves, it has left, ahead of the word to A.
            let before = c.messages_sent();
            let sleeper = s.spawn(|| -> RoleResult {
                c.rendezvous(RDV_ID)?;
                after_rendezvous(c)
            });
            while c.messages_sent() == before {
                std::thread::yield_now();
            }
            c.send(A, 0, b"asleep")?;
            sleeper.join().expect("no panic")
        }),
    }
}

fn task_c(c: &Client) -> RoleResult {
    c.malloc(CHUNK, 64)?;
    c.barrier(BAR_ID, c.client_count())?;
    c.acquire(CHUNK, Access::Read)?;
    let v = read_value(c)?;
    c.release(CHUNK)?;
    println!("C: read {v}");
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let order = match args
        .iter()
        .position(|a| a == "--order")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        Some("sleep-first") => Order::SleepFirst,
        Some("wakeup-first") | None => Order::WakeupFirst,
        Some(other) => {
            eprintln!("tasks: --order takes wakeup-first or sleep-first, not {other}");
            std::process::exit(2);
        }
    };
    let roles = Roles::new()
        .role(1, move |c| task_a(c, order))
        .role(2, move |c| task_b(c, order))
        .role(3, task_c);
    if let Err(e) = run(roles, args) {
        eprintln!("tasks: {e}");
        std::process::exit(1);
    }
}
