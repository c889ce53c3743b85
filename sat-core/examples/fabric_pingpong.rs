//! Round trip between two endpoints of this process, polled in turn by one
//! thread, over shm and tcp (loopback): a check that the transport's eager
//! and large paths cost about what the provider does.
//!
//! Rank 0 sends a `Payload::Shared` buffer; rank 1 answers from inside its
//! callback, either with a `Payload::Shared` buffer of the same size (the
//! transport's own cost, comparable to a raw libfabric ping-pong) or with the
//! bytes it is lent (`Payload::Copy`: what a server forwarding a payload pays,
//! one extra copy of a large payload). Prints the median and 90th percentile
//! of the round trip in microseconds.
//!
//! Run with `cargo run --release --example fabric_pingpong [iterations [shm|tcp [bytes]]]`;
//! the optional provider and size restrict the run (for profiling one case).

use std::sync::Arc;
use std::time::Instant;

use sat_core::transport::fabric::{FabricEndpoint, FabricOptions, FabricTransport};
use sat_core::transport::{Payload, Provider, Rank, Sender, Transport};

const SIZES: [(usize, &str); 4] = [
    (64, "64 B"),
    (4 << 10, "4 KiB"),
    (64 << 10, "64 KiB"),
    (1 << 20, "1 MiB"),
];

fn pair(provider: Provider) -> Result<(FabricTransport, FabricTransport), String> {
    let opts = FabricOptions::new(provider);
    let a = FabricEndpoint::open(&opts).map_err(|e| e.to_string())?;
    let b = FabricEndpoint::open(&opts).map_err(|e| e.to_string())?;
    let table = vec![a.address().to_vec(), b.address().to_vec()];
    let a = a.connect(0, &table).map_err(|e| e.to_string())?;
    let b = b.connect(1, &table).map_err(|e| e.to_string())?;
    Ok((a, b))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Reply {
    Shared,
    CopyLent,
}

fn round_trip(a: &mut FabricTransport, b: &mut FabricTransport, payload: &Arc<[u8]>, reply: Reply) {
    a.send(1, b"ping", Payload::Shared(payload)).expect("send");
    let mut back = false;
    while !back {
        b.poll(&mut |s: &mut dyn Sender, m| {
            let answer = match reply {
                Reply::Shared => Payload::Shared(payload),
                Reply::CopyLent => Payload::Copy(m.payload),
            };
            s.send(m.src as Rank, b"pong", answer).expect("reply");
        })
        .expect("poll");
        a.poll(&mut |_, m| {
            assert_eq!(m.payload.len(), payload.len());
            back = true;
        })
        .expect("poll");
    }
}

fn measure(
    provider: Provider,
    len: usize,
    iterations: usize,
    reply: Reply,
) -> Result<(f64, f64), String> {
    let (mut a, mut b) = pair(provider)?;
    let payload: Arc<[u8]> = (0..len).map(|i| i as u8).collect();
    // Connection set-up, buffer pools and page faults stay out of the timing.
    for _ in 0..iterations / 10 + 10 {
        round_trip(&mut a, &mut b, &payload, reply);
    }
    let mut times: Vec<f64> = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        round_trip(&mut a, &mut b, &payload, reply);
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], times[times.len() * 9 / 10]))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5000);
    let only_provider = args.get(2).map(|s| Provider::parse(s).expect("provider"));
    let only_size: Option<usize> = args.get(3).and_then(|s| s.parse().ok());
    println!("round trip between two endpoints of one process, one polling thread");
    println!("(microseconds; median / 90th percentile)");
    println!();
    println!("| size | shm | shm, echo copies | tcp (loopback) | tcp, echo copies |");
    println!("|---|---|---|---|---|");
    for (len, name) in SIZES {
        if only_size.is_some_and(|s| s != len) {
            continue;
        }
        // Fewer round trips for the large sizes keep the run short.
        let iterations = (base * 4096 / len.max(4096)).max(200);
        let cell = |provider, reply| {
            if only_provider.is_some_and(|p| p != provider) {
                return "-".to_string();
            }
            match measure(provider, len, iterations, reply) {
                Ok((median, p90)) => format!("{median:.2} / {p90:.2}"),
                Err(e) => format!("unavailable: {e}"),
            }
        };
        println!(
            "| {name} | {} | {} | {} | {} |",
            cell(Provider::Shm, Reply::Shared),
            cell(Provider::Shm, Reply::CopyLent),
            cell(Provider::Tcp, Reply::Shared),
            cell(Provider::Tcp, Reply::CopyLent)
        );
    }
}
