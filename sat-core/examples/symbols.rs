//! The table of symbols (Figure 7) and what it promises, over real processes.
//!
//! ```text
//! satrun -n 6 --topology sat-core/topologies/two-servers.xml -- target/debug/examples/symbols
//! ```
//! Four clients (ranks 2 to 5, on two servers) run, in order:
//! 1. Figure 7: `initSymbolicTable`, then one client writes `"symbol_name"`
//!    (1,000 ints) and another a symbol named by a UUID; every client reads
//!    both, whichever comes first, and checks the bytes.
//! 2. A read issued before the write: one client reads `"late"` (it is not
//!    there), tells the writer so with a message, and reads again, which
//!    waits; the writer writes only once the message has arrived.
//! 3. Every client writes 50 symbols at the same time; the 200 names fall
//!    into 8 buckets, so writers contend on each. Then everyone reads all
//!    200 and checks every byte: no entry may be lost.
//! 4. Overwrites: a value of another size, then of the same size, and all
//!    four clients writing one name at once (one whole value must win).
//! 5. A read of a name nobody writes times out; misused names are refused.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{symbol_bucket, Client, UserMessage, SYMBOL_TABLE_BASE};
use sat_core::SatError;

const WAIT: Duration = Duration::from_secs(30);
const UUID: &str = "uuid-921b4274-84ad-4b04-ac75-f9738da84039";
/// Figure 7's N.
const N: u32 = 1000;
const PER_CLIENT: usize = 50;
/// The buckets the names of step 3 are chosen in.
const SHARED_BUCKETS: u64 = 8;
/// The reader's word to the writer in step 2 (meetings use tags 1 to 9).
const TAG_READING: u32 = 100;

fn main() {
    let roles = Roles::new().role(1, symbols).role(2, symbols);
    if let Err(e) = run(roles, std::env::args()) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

/// The value client `writer` stores under `name`: `size` bytes that depend
/// on both, so a reader can tell whose value it got and that it is whole.
fn value(name: &str, writer: usize, size: usize) -> Vec<u8> {
    let seed = name.bytes().fold(writer as u64 + 1, |h, b| {
        h.wrapping_mul(131).wrapping_add(b as u64)
    });
    (0..size as u64)
        .map(|i| (seed.wrapping_add(i.wrapping_mul(2_654_435_761)) >> 7) as u8)
        .collect()
}

/// User messages by tag: a message that arrives while waiting for another
/// tag is kept for later.
struct Mail<'c> {
    c: &'c Client,
    kept: RefCell<Vec<UserMessage>>,
}

impl Mail<'_> {
    fn recv_tag(&self, tag: u32) -> Result<UserMessage, String> {
        let mut kept = self.kept.borrow_mut();
        if let Some(i) = kept.iter().position(|m| m.tag == tag) {
            return Ok(kept.remove(i));
        }
        loop {
            let m = self
                .c
                .recv_timeout(WAIT)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no message tagged {tag} within {WAIT:?}"))?;
            if m.tag == tag {
                return Ok(m);
            }
            kept.push(m);
        }
    }

    /// Every client waits here until all have arrived.
    fn meet(&self, round: u32) -> RoleResult {
        let clients = self.c.topology().clients();
        for &other in clients.iter().filter(|&&r| r != self.c.rank()) {
            self.c.send(other, round, b"")?;
        }
        for _ in 1..clients.len() {
            self.recv_tag(round)?;
        }
        Ok(())
    }
}

/// Reads `name` and checks it is `want`, byte for byte.
fn read_checked(c: &Client, name: &str, want: &[u8]) -> Result<(), String> {
    let got = c.read_symbol(name, WAIT).map_err(|e| e.to_string())?;
    if got != want {
        return Err(format!(
            "rank {}: {name:?} read {} bytes that differ from the {} written",
            c.rank(),
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

fn symbols(c: &Client) -> RoleResult {
    let clients = c.topology().clients();
    let me = c.rank();
    let idx = clients.iter().position(|&r| r == me).expect("a client");
    let mail = Mail {
        c,
        kept: RefCell::new(Vec::new()),
    };
    let start = Instant::now();

    // 1. Figure 7.
    c.init_symbol_table()?;
    let datawrite: Vec<u8> = (0..N).flat_map(|i| i.to_le_bytes()).collect();
    let uuid_value = value(UUID, 3, 4 * N as usize);
    match idx {
        0 => c.write_symbol("symbol_name", &datawrite)?,
        3 => c.write_symbol(UUID, &uuid_value)?,
        _ => {}
    }
    let dataread = c.read_symbol("symbol_name", WAIT)?;
    if dataread != datawrite {
        return Err(format!("rank {me}: \"symbol_name\" does not hold 0 to {}", N - 1).into());
    }
    println!(
        "rank {me}: readSymbol(\"symbol_name\") gave {} bytes, identical to the write of rank {}",
        dataread.len(),
        clients[0]
    );
    drop(dataread); // free(dataread)
    read_checked(c, UUID, &uuid_value)?;
    println!(
        "rank {me}: readSymbol(\"{UUID}\") gave {} bytes, identical to the write of rank {}",
        uuid_value.len(),
        clients[3]
    );

    // 2. A read issued before the write.
    let late = value("late", 2, 70_000);
    match idx {
        1 => {
            match c.read_symbol("late", Duration::ZERO) {
                Err(SatError::Timeout(_)) => {}
                other => return Err(format!("\"late\" before its write: {other:?}").into()),
            }
            c.send(clients[2], TAG_READING, b"reading")?;
            read_checked(c, "late", &late)?;
            println!(
                "rank {me}: \"late\" was missing when the read began; the read waited and got \
                 the {} bytes written after it",
                late.len()
            );
        }
        2 => {
            mail.recv_tag(TAG_READING)?;
            c.write_symbol("late", &late)?;
        }
        _ => {}
    }

    // 3. Concurrent writers, many sharing a bucket.
    let names: Vec<Vec<String>> = (0..clients.len())
        .map(|w| {
            (0..)
                .map(|i| format!("c{w}-symbol-{i}"))
                .filter(|n| symbol_bucket(n) - SYMBOL_TABLE_BASE < SHARED_BUCKETS)
                .take(PER_CLIENT)
                .collect()
        })
        .collect();
    // Sizes 0 (an empty value) to 1,960 bytes.
    let size_of = |i: usize| i * 40;
    for (i, name) in names[idx].iter().enumerate() {
        c.write_symbol(name, &value(name, idx, size_of(i)))?;
    }
    let over = "overwritten";
    if idx == 0 {
        c.write_symbol(over, &value(over, 0, 100))?;
    }
    mail.meet(1)?;
    for (w, list) in names.iter().enumerate() {
        for (i, name) in list.iter().enumerate() {
            read_checked(c, name, &value(name, w, size_of(i)))?;
        }
    }
    println!(
        "rank {me}: all {} symbols of the {} writers read back intact ({SHARED_BUCKETS} buckets \
         shared by all of them)",
        names.iter().map(Vec::len).sum::<usize>(),
        clients.len()
    );

    // 4. Overwrites.
    read_checked(c, over, &value(over, 0, 100))?;
    mail.meet(2)?;
    if idx == 3 {
        c.write_symbol(over, &value(over, 3, 3000))?;
    }
    // Everyone at once, each with a size of its own.
    let contested = "contested";
    c.write_symbol(contested, &value(contested, idx, 10 * (idx + 1)))?;
    mail.meet(3)?;
    read_checked(c, over, &value(over, 3, 3000))?;
    println!(
        "rank {me}: \"{over}\" holds the 3000 bytes rewritten by rank {} (it held 100)",
        clients[3]
    );
    mail.meet(4)?;
    if idx == 1 {
        c.write_symbol(over, &value(over, 1, 3000))?;
    }
    mail.meet(5)?;
    read_checked(c, over, &value(over, 1, 3000))?;
    println!(
        "rank {me}: \"{over}\" holds the 3000 bytes rewritten by rank {} (same size)",
        clients[1]
    );
    let got = c.read_symbol(contested, WAIT)?;
    let winner = got.len() / 10 - 1;
    if winner >= clients.len() || got != value(contested, winner, got.len()) {
        return Err(format!("rank {me}: \"{contested}\" holds no writer's whole value").into());
    }
    println!(
        "rank {me}: \"{contested}\" holds the whole value of rank {}",
        clients[winner]
    );

    // 5. A name nobody writes, and misuse.
    let e = c
        .read_symbol("nobody-writes-this", Duration::from_millis(300))
        .unwrap_err();
    println!("rank {me}: {e}");
    for bad in [String::new(), "x".repeat(300)] {
        let e = c.write_symbol(&bad, b"v").unwrap_err();
        println!("rank {me}: misuse: {e}");
    }
    mail.meet(6)?;
    println!(
        "rank {me}: done in {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
