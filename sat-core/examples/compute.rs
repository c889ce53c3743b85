//! A reader holds a shared copy and computes, making no SAT call, while a
//! writer acquires the chunk: the writer must not wait for the reader's next
//! call (the client's background progress answers the invalidation).
//!
//! ```text
//! satrun -n 3 --topology sat-core/topologies/figure11.xml -- target/release/examples/compute --marker /tmp/written
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::Access;

const CHUNK: u64 = 5;

fn reader(c: &Client, marker: &Path) -> RoleResult {
    c.malloc(CHUNK, 64)?;
    let mut copy = [0u8; 64];
    let before = c.messages_sent();
    c.get(CHUNK, &mut copy)?;
    println!(
        "reader: a read miss sent {} message(s)",
        c.messages_sent() - before
    );
    // The copy is valid and nobody writes yet: 1,000 read scopes are hits.
    let before = c.messages_sent();
    for _ in 0..1000 {
        c.acquire(CHUNK, Access::Read)?;
        c.with_data(CHUNK, |d| copy.copy_from_slice(d))?;
        c.release(CHUNK)?;
    }
    println!(
        "reader: 1000 read hits sent {} message(s)",
        c.messages_sent() - before
    );
    c.send(2, 0, b"I hold a copy")?;
    // "Compute": no SAT call until the writer says, out of band, that its
    // write scope opened and closed.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        if Instant::now() > deadline {
            return Err("the writer never got its write scope while the reader computed".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("reader: the writer finished while I computed");
    Ok(())
}

fn writer(c: &Client, marker: &Path) -> RoleResult {
    c.malloc(CHUNK, 64)?;
    c.recv()?;
    c.acquire(CHUNK, Access::ReadWrite)?;
    c.with_data_mut(CHUNK, |d| d[0] = 1)?;
    c.release(CHUNK)?;
    std::fs::write(marker, b"written")?;
    println!("writer: wrote while the reader computed");
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let marker: PathBuf = args
        .iter()
        .position(|a| a == "--marker")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("sat-compute-marker"));
    let m1 = marker.clone();
    let roles = Roles::new()
        .role(1, move |c| reader(c, &m1))
        .role(2, move |c| writer(c, &marker));
    if let Err(e) = run(roles, args) {
        eprintln!("compute: {e}");
        std::process::exit(1);
    }
}
