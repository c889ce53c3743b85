//! The dataflow of section 3.2: an input role produces frames, processing
//! roles run a 3x3 edge-detection stencil on them, an output role collects
//! the results. Channels are shared buffers; there is no explicit
//! synchronization in the user code: exclusive write scopes and
//! publish-subscribe notifications carry it.
//!
//! ```text
//! satrun -n 7 --topology sat-core/topologies/dataflow.xml -- target/release/examples/dataflow --frames 200
//! ```
//! For each processing task p, an input buffer `IN + p` and an output
//! buffer `OUT + p`. The input task writes a frame into a free input buffer;
//! that notifies task p, which takes the frame, computes, and writes its
//! output buffer; that notifies the output task, which records the result
//! and marks the buffer consumed; that notifies the input task, for which
//! task p is now free. Each side subscribes and then looks once, so no
//! notification sent before its subscription is missed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::{Client, HandlerResult};
use sat_core::protocol::Access;

const IN: u64 = 100;
const OUT: u64 = 200;
const SIDE: usize = 64;
const PIXELS: usize = SIDE * SIDE;
/// Buffer layout: [state: u64][frame id: u64][pixels].
const HEADER: usize = 16;
const SIZE: usize = HEADER + PIXELS;
/// The processing tasks are ranks 3 to 5 (dataflow.xml).
const FIRST_WORKER: u32 = 3;

// Input buffer states (0: never written).
const FULL: u64 = 1;
const TAKEN: u64 = 2;
const END: u64 = 3;
// Output buffer states (0: never written).
const READY: u64 = 1;
const CONSUMED: u64 = 2;

fn word(d: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(d[i * 8..i * 8 + 8].try_into().unwrap())
}

fn set_word(d: &mut [u8], i: usize, v: u64) {
    d[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
}

/// Frame `id` of the synthetic stream.
fn frame(id: u64) -> Vec<u8> {
    (0..PIXELS)
        .map(|i| {
            let (x, y) = ((i % SIDE) as u64, (i / SIDE) as u64);
            ((x * y + id * 7 + (x ^ y)) % 251) as u8
        })
        .collect()
}

/// 3x3 Laplacian edge detection, clamped to 0..=255; borders are 0.
fn edges(src: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; PIXELS];
    for y in 1..SIDE - 1 {
        for x in 1..SIDE - 1 {
            let p = |dx: isize, dy: isize| {
                src[((y as isize + dy) as usize) * SIDE + (x as isize + dx) as usize] as i32
            };
            let v = 8 * p(0, 0)
                - p(-1, -1)
                - p(0, -1)
                - p(1, -1)
                - p(-1, 0)
                - p(1, 0)
                - p(-1, 1)
                - p(0, 1)
                - p(1, 1);
            out[y * SIDE + x] = v.clamp(0, 255) as u8;
        }
    }
    out
}

fn allocate(c: &Client, workers: u64) -> Result<(), sat_core::SatError> {
    for p in 0..workers {
        c.malloc(IN + p, SIZE)?;
        c.malloc(OUT + p, SIZE)?;
    }
    Ok(())
}

fn workers(c: &Client) -> u64 {
    c.topology()
        .clients()
        .iter()
        .filter(|&&r| c.topology().role(r) == 2)
        .count() as u64
}

// ------------------------------------------------------------------ input

struct Input {
    next: u64,
    frames: u64,
    /// The frame each worker was last given and not yet seen consumed.
    given: Vec<Option<u64>>,
    consumed: u64,
}

/// Gives worker `p` the next frame, or the end marker once all are given.
fn give(c: &Client, st: &mut Input, p: u64) -> Result<(), sat_core::SatError> {
    let id = st.next;
    c.acquire(IN + p, Access::Write)?;
    c.with_data_mut(IN + p, |d| {
        if id < st.frames {
            set_word(d, 0, FULL);
            set_word(d, 1, id);
            d[HEADER..].copy_from_slice(&frame(id));
        } else {
            set_word(d, 0, END);
        }
    })?;
    c.release(IN + p)?;
    if id < st.frames {
        st.next += 1;
        st.given[p as usize] = Some(id);
    } else {
        st.given[p as usize] = None;
    }
    Ok(())
}

/// Output buffer `p` changed: once the output task consumed the frame `p`
/// was given, `p` is free for the next one.
fn input_check(c: &Client, st: &mut Input, p: u64) -> HandlerResult {
    let Some(id) = st.given[p as usize] else {
        return Ok(());
    };
    c.acquire(OUT + p, Access::Read)?;
    let (consumed, frame_id) = c.with_data(OUT + p, |d| (word(d, 0), word(d, 1)))?;
    c.release(OUT + p)?;
    if consumed == CONSUMED && frame_id == id {
        st.consumed += 1;
        give(c, st, p)?;
        if st.given.iter().all(Option::is_none) {
            for q in 0..st.given.len() as u64 {
                c.unsubscribe(OUT + q)?;
            }
            println!("input: {} frames given and consumed", st.consumed);
        }
    }
    Ok(())
}

fn input(c: &Client, frames: u64) -> RoleResult {
    let n = workers(c);
    allocate(c, n)?;
    let st = Arc::new(Mutex::new(Input {
        next: 0,
        frames,
        given: vec![None; n as usize],
        consumed: 0,
    }));
    for p in 0..n {
        let st = st.clone();
        c.subscribe(OUT + p, false, move |c, _| {
            input_check(c, &mut st.lock().unwrap(), p)
        })?;
    }
    let mut g = st.lock().unwrap();
    for p in 0..n {
        give(c, &mut g, p)?;
    }
    Ok(())
}

// ------------------------------------------------------------- processing

/// Input buffer `p` changed: take a new frame, compute, publish the result.
fn process(c: &Client, p: u64, done: &Mutex<u64>) -> HandlerResult {
    c.acquire(IN + p, Access::Read)?;
    let state = c.with_data(IN + p, |d| word(d, 0))?;
    c.release(IN + p)?;
    if state != FULL && state != END {
        return Ok(());
    }
    c.acquire(IN + p, Access::ReadWrite)?;
    let taken = c.with_data_mut(IN + p, |d| {
        let state = word(d, 0);
        if state == FULL {
            set_word(d, 0, TAKEN);
        }
        (state, word(d, 1), d[HEADER..].to_vec())
    })?;
    c.release(IN + p)?;
    let (state, id, pixels) = taken;
    if state == END {
        c.unsubscribe(IN + p)?;
        println!("worker {p}: processed {} frames", done.lock().unwrap());
        return Ok(());
    }
    if state != FULL {
        return Ok(());
    }
    let result = edges(&pixels);
    // The input gives this worker a frame only once its last result was
    // consumed, so the output buffer is free.
    c.acquire(OUT + p, Access::Write)?;
    c.with_data_mut(OUT + p, |d| {
        set_word(d, 0, READY);
        set_word(d, 1, id);
        d[HEADER..].copy_from_slice(&result);
    })?;
    c.release(OUT + p)?;
    *done.lock().unwrap() += 1;
    Ok(())
}

fn worker(c: &Client) -> RoleResult {
    let n = workers(c);
    allocate(c, n)?;
    let p = (c.rank() - FIRST_WORKER) as u64;
    let done = Arc::new(Mutex::new(0u64));
    let d = done.clone();
    c.subscribe(IN + p, false, move |c, _| process(c, p, &d))?;
    // Look once: a frame given before the subscription is not missed.
    process(c, p, &done).map_err(|e| e.to_string())?;
    Ok(())
}

// ----------------------------------------------------------------- output

struct Output {
    frames: u64,
    seen: BTreeSet<u64>,
}

/// Output buffer `p` changed: record a result not consumed yet, once.
fn collect(c: &Client, st: &mut Output, p: u64) -> HandlerResult {
    c.acquire(OUT + p, Access::Read)?;
    let (state, id) = c.with_data(OUT + p, |d| (word(d, 0), word(d, 1)))?;
    c.release(OUT + p)?;
    if state != READY || st.seen.len() as u64 == st.frames {
        return Ok(());
    }
    c.acquire(OUT + p, Access::ReadWrite)?;
    let got = c.with_data_mut(OUT + p, |d| {
        if word(d, 0) != READY {
            return None;
        }
        set_word(d, 0, CONSUMED);
        Some((word(d, 1), d[HEADER..].to_vec()))
    })?;
    c.release(OUT + p)?;
    let Some((id2, pixels)) = got else {
        return Ok(());
    };
    debug_assert_eq!(id, id2);
    if pixels != edges(&frame(id2)) {
        return Err(format!("frame {id2} came out wrong").into());
    }
    if !st.seen.insert(id2) {
        return Err(format!("frame {id2} came out twice").into());
    }
    if st.seen.len() as u64 == st.frames {
        let n = workers(c);
        for q in 0..n {
            c.unsubscribe(OUT + q)?;
        }
        let all = st.seen.iter().copied().eq(0..st.frames);
        println!(
            "output: {} frames, each exactly once and right: {all}",
            st.seen.len()
        );
    }
    Ok(())
}

fn output(c: &Client, frames: u64) -> RoleResult {
    let n = workers(c);
    allocate(c, n)?;
    let st = Arc::new(Mutex::new(Output {
        frames,
        seen: BTreeSet::new(),
    }));
    for p in 0..n {
        let st = st.clone();
        c.subscribe(OUT + p, false, move |c, _| {
            collect(c, &mut st.lock().unwrap(), p)
        })?;
    }
    for p in 0..n {
        collect(c, &mut st.lock().unwrap(), p).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let frames = args
        .iter()
        .position(|a| a == "--frames")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let roles = Roles::new()
        .role(1, move |c| input(c, frames))
        .role(2, worker)
        .role(3, move |c| output(c, frames));
    if let Err(e) = run(roles, args) {
        eprintln!("dataflow: {e}");
        std::process::exit(1);
    }
}
