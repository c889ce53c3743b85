//! A 64 MiB MALLOC over real processes: one chain of 1,024 chunks whose data
//! is one contiguous buffer (section 2.2), written by one client with plain
//! slice arithmetic across chunk boundaries and read by another that LOOKUPs
//! it; then a chunk that sits in two local chains of one process, kept
//! consistent between them and with the other process.
//!
//! ```text
//! satrun -n 3 --topology sat-core/topologies/figure11.xml -- target/release/examples/chains
//! ```

use std::time::{Duration, Instant};

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Chain, Client};
use sat_core::protocol::ProtocolId;

const BASE: u64 = 1 << 20;
const SIZE: usize = 64 << 20;
const WRITER: u32 = 1;
const READER: u32 = 2;

/// The word at every 4-byte offset: its index, so any misplaced chunk or
/// byte shows.
fn check_pattern(d: &[u8]) -> Result<(), String> {
    for (i, w) in d.chunks_exact(4).enumerate() {
        if u32::from_le_bytes(w.try_into().unwrap()) != i as u32 {
            return Err(format!("word {i} of the chain is wrong"));
        }
    }
    Ok(())
}

/// Every chunk's own data starts at its offset in the chain's buffer.
fn check_contiguous(c: &Client, chain: &Chain) -> Result<usize, String> {
    let base = c
        .with_chain(chain, |d| d.as_ptr() as usize)
        .map_err(|e| e.to_string())?;
    for (i, id) in chain.ids().enumerate() {
        let at = c
            .with_data(id, |d| d.as_ptr() as usize)
            .map_err(|e| e.to_string())?;
        if at != base + chain.layout().range(i).start {
            return Err(format!(
                "chunk {id} is not at its offset of the chain's buffer"
            ));
        }
    }
    Ok(chain.len())
}

fn writer(c: &Client) -> RoleResult {
    let start = Instant::now();
    let chain = c.malloc(BASE, SIZE)?;
    let again = c.malloc(BASE, SIZE)?;
    if again != chain {
        return Err("allocating the same chain again returned another one".into());
    }
    println!(
        "writer: MALLOC of {SIZE} bytes made a chain of {} chunks of {} bytes",
        chain.len(),
        chain.layout().chunks()[0].1
    );
    let scope = c.write(&chain)?;
    // One pass over the whole buffer: pointer arithmetic across chunks.
    scope.data_mut(|d| {
        for (i, w) in d.chunks_exact_mut(4).enumerate() {
            w.copy_from_slice(&(i as u32).to_le_bytes());
        }
    })?;
    let n = check_contiguous(c, &chain)?;
    println!("writer: {n} chunks, each at its offset of one contiguous buffer");
    scope.release()?;
    println!("writer: wrote and released 64 MiB in {:?}", start.elapsed());
    c.send(READER, 0, b"written")?;

    // The reader rewrote chunks 1 and 2 through another chain of its own.
    c.recv()?;
    let scope = c.read(&chain)?;
    let seen = scope.data(|d| {
        let k = chain.layout().range(1).start..chain.layout().range(2).end;
        d[k].iter().all(|&b| b == 0xAB)
            && check_pattern(&d[..chain.layout().range(1).start]).is_ok()
    })?;
    scope.release()?;
    if !seen {
        return Err("the reader's write through its second chain did not reach the writer".into());
    }
    println!("writer: sees the reader's write of chunks 1 and 2");
    Ok(())
}

fn reader(c: &Client) -> RoleResult {
    c.recv()?;
    let chain = c.lookup_chain(
        BASE,
        (SIZE / c.chunk_size()) as u64,
        Duration::from_secs(30),
    )?;
    let scope = c.read(&chain)?;
    scope.data(check_pattern)??;
    let n = check_contiguous(c, &chain)?;
    scope.release()?;
    println!(
        "reader: LOOKUP found {} bytes in {n} contiguous chunks, every word right",
        chain.size()
    );

    // Chunks 1 and 2 again, in a second chain of this process: a second
    // local instance of each, starting from the valid bytes of the first.
    let ids = [BASE + 1, BASE + 2];
    let pair = c.malloc_lst(ProtocolId::HomeMesi, &ids, &[c.chunk_size()])?;
    let first = chain.layout().range(1).start;
    let scope = c.readwrite(&pair)?;
    let copied = scope.data(|d| {
        d.chunks_exact(4)
            .enumerate()
            .all(|(i, w)| u32::from_le_bytes(w.try_into().unwrap()) == (first / 4 + i) as u32)
    })?;
    if !copied {
        return Err("a second instance of a chunk did not start with its valid bytes".into());
    }
    scope.data_mut(|d| d.fill(0xAB))?;
    scope.release()?;
    // The first instance shows the write, with no message to the home.
    let before = c.messages_sent();
    let scope = c.read(&chain)?;
    let consistent = scope.data(|d| {
        d[first..chain.layout().range(2).end]
            .iter()
            .all(|&b| b == 0xAB)
    })?;
    scope.release()?;
    if !consistent || c.messages_sent() != before {
        return Err("the two local instances of chunks 1 and 2 differ".into());
    }
    println!("reader: a write through one local chain shows in the other, with no message");
    c.send(WRITER, 0, b"rewrote chunks 1 and 2")?;
    Ok(())
}

fn main() {
    let roles = Roles::new().role(1, writer).role(2, reader);
    if let Err(e) = run(roles, std::env::args().collect::<Vec<_>>()) {
        eprintln!("chains: {e}");
        std::process::exit(1);
    }
}
