//! Fuzzing every decoder and parser that sees bytes from elsewhere
//! (feature `fuzz`, `sat-fuzz`, `make fuzz`).
//!
//! The stable toolchain has no libFuzzer instrumentation, so this is
//! property-based fuzzing with arbitrary inputs: each target starts from a
//! corpus of valid encodings, and each input is a seeded mutation of one
//! (bit flips, random and boundary bytes, insertions, deletions, repeated
//! and spliced ranges, length fields set to extremes) or, one input in
//! sixteen, random bytes of random length. A target checks its property on
//! every input (never a panic; where it accepts, what it accepts holds
//! together), and a failure names the target, the seed and the input, which
//! `sat-fuzz --target T --seed S --replay N` runs again.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// One decoder or parser and its property.
pub struct Target {
    pub name: &'static str,
    /// Valid encodings to mutate.
    pub corpus: fn() -> Vec<Vec<u8>>,
    /// Panics when the property does not hold for the input.
    pub check: fn(&[u8]),
}

/// Every target this build has (the encryption layer's with feature `abe`).
pub fn targets() -> Vec<Target> {
    // Only the encryption layer's targets are pushed onto it.
    #[cfg_attr(not(feature = "abe"), allow(unused_mut))]
    let mut t = vec![
        Target {
            name: "wire-header",
            corpus: wire_corpus,
            check: wire_header,
        },
        Target {
            name: "packet-prefix",
            corpus: crate::transport::fabric::fuzzing::corpus,
            check: crate::transport::fabric::fuzzing::input,
        },
        Target {
            name: "seed-frame",
            corpus: crate::bootstrap::seed::fuzzing::corpus,
            check: crate::bootstrap::seed::fuzzing::input,
        },
        Target {
            name: "desk-frame",
            corpus: crate::service::desk::fuzzing::corpus,
            check: crate::service::desk::fuzzing::input,
        },
        Target {
            name: "topology-xml",
            corpus: topology_corpus,
            check: topology_xml,
        },
        Target {
            name: "connection-string",
            corpus: address_corpus,
            check: connection_string,
        },
        Target {
            name: "home-epoch-line",
            corpus: crate::server::epochs::fuzzing::corpus,
            check: crate::server::epochs::fuzzing::input,
        },
    ];
    #[cfg(feature = "abe")]
    {
        use crate::abe::fuzzing as abe;
        t.extend([
            Target {
                name: "abe-policy",
                corpus: abe::policy_corpus,
                check: abe::policy,
            },
            Target {
                name: "abe-certificate",
                corpus: abe::certificate_corpus,
                check: abe::certificate,
            },
            Target {
                name: "abe-epoch-record",
                corpus: abe::epoch_corpus,
                check: abe::epoch,
            },
            Target {
                name: "abe-sealed-version",
                corpus: abe::sealed_corpus,
                check: abe::sealed,
            },
            Target {
                name: "abe-tenant-key-file",
                corpus: abe::tenant_file_corpus,
                check: abe::tenant_file,
            },
        ]);
    }
    t
}

fn wire_corpus() -> Vec<Vec<u8>> {
    use crate::wire::{encode, Message};
    let mut header = [0u8; crate::transport::MAX_HEADER];
    [
        Message::Shutdown,
        Message::ClientLost { client: 5 },
        Message::Relay {
            from: 2,
            to: 3,
            tag: 9,
        },
        Message::ClientIdle,
        Message::ClientDone {
            published: 7,
            received: 8,
        },
        Message::Probe { wave: 3 },
    ]
    .iter()
    .map(|m| {
        let n = encode(m, &mut header).expect("a small message");
        header[..n].to_vec()
    })
    .collect()
}

/// A message header from any peer: what decodes encodes back to itself.
fn wire_header(bytes: &[u8]) {
    use crate::wire::{decode, encode};
    if let Ok(msg) = decode(bytes) {
        let mut header = [0u8; crate::transport::MAX_HEADER];
        let n = encode(&msg, &mut header)
            .unwrap_or_else(|e| panic!("a decoded {msg:?} does not encode: {e}"));
        assert_eq!(
            decode(&header[..n]).expect("its own encoding decodes"),
            msg,
            "decode(encode(m)) is not m"
        );
    }
}

fn topology_corpus() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "xml"))
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

/// A topology file from a user: parsed, and what parses validates or says
/// why not.
fn topology_xml(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(t) = crate::topology::Topology::parse(&text, "fuzz.xml") {
        let _ = t.validate();
    }
}

fn address_corpus() -> Vec<Vec<u8>> {
    [
        "sat://0123456789abcdef0123456789abcdef@127.0.0.1:7070",
        "10.0.0.1:80",
        "sat://s3cr3t-s3cr3t-s3@[::1]:9",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// A connection string a user pastes: parsed or refused, and the secret it
/// holds never shows in the refusal.
fn connection_string(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    match crate::auth::ServiceAddress::parse_with(&text, |_| None) {
        Ok(a) => {
            let again = a.connection_string();
            assert!(
                crate::auth::ServiceAddress::parse_with(&again, |_| None).is_ok(),
                "a parsed address does not parse again: {again:?}"
            );
        }
        Err(e) => {
            if let Some((secret, _)) = text
                .strip_prefix("sat://")
                .and_then(|rest| rest.split_once('@'))
            {
                if secret.len() >= 16 {
                    assert!(!e.to_string().contains(secret), "the secret in an error");
                }
            }
        }
    }
}

/// The seeded generator that picks mutations (the in-process transport's).
struct Rng(crate::transport::mem::SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(crate::transport::mem::SplitMix64::new(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

/// Boundary values mutations write over a place: lengths and counts at the
/// edges of their types are where decoders break.
const INTERESTING: [&[u8]; 10] = [
    &[0],
    &[0xff],
    &[0x7f],
    &[0x80],
    &[0xfb, 0xff, 0xff],
    &[0xfc, 0xff, 0xff, 0xff, 0xff],
    &[0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff],
    &[0, 0, 0, 0x80],
    &[0xff; 8],
];

/// Input number `n` of a run seeded with `seed` for a target whose corpus
/// is `corpus`: the same three give the same input.
pub fn input(corpus: &[Vec<u8>], seed: u64, n: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ n.wrapping_mul(0xd134_2543_de82_ef95));
    if corpus.is_empty() || rng.below(16) == 0 {
        let most = if rng.below(4) == 0 { 4096 } else { 64 };
        let len = rng.below(most);
        return (0..len).map(|_| rng.next() as u8).collect();
    }
    let mut data = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(8) {
        mutate(&mut data, corpus, &mut rng);
    }
    data
}

fn mutate(data: &mut Vec<u8>, corpus: &[Vec<u8>], rng: &mut Rng) {
    let len = data.len();
    match rng.below(9) {
        0 if len > 0 => {
            let at = rng.below(len);
            data[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            data[at] = rng.next() as u8;
        }
        2 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            data.splice(at..at, bytes);
        }
        3 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(32));
            data.drain(at..at + n);
        }
        4 if len > 0 => {
            // A range repeated: nested structures, repeated fields.
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            let copy = data[at..at + n].to_vec();
            let to = rng.below(len + 1);
            data.splice(to..to, copy);
        }
        5 => {
            let value = INTERESTING[rng.below(INTERESTING.len())];
            let at = rng.below(len + 1);
            let end = (at + value.len()).min(len);
            data.splice(at..end, value.iter().copied());
        }
        6 if len > 0 => data.truncate(rng.below(len)),
        7 => {
            // Splice another corpus entry's tail after this one's head.
            let other = &corpus[rng.below(corpus.len())];
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        _ if len > 0 => {
            // A run of one byte (a flood of '(' or of 0xff).
            let at = rng.below(len);
            let n = 1 + rng.below(256);
            let b = data[at];
            data.splice(at..at, std::iter::repeat_n(b, n));
        }
        _ => data.push(rng.next() as u8),
    }
}

/// What one target's run did.
pub struct Outcome {
    pub name: &'static str,
    pub inputs: u64,
    pub elapsed: Duration,
    /// The first input whose check failed: its number and the panic.
    pub failure: Option<(u64, Vec<u8>, String)>,
}

/// Runs `target` on inputs `0..inputs` of seed `seed`, stopping at the
/// first failure.
pub fn run(target: &Target, seed: u64, inputs: u64) -> Outcome {
    let corpus = (target.corpus)();
    // The corpus itself first: every valid encoding must pass too.
    let start = Instant::now();
    let mut failure = None;
    let mut done = 0;
    for n in 0..inputs {
        let bytes = match corpus.get(n as usize) {
            Some(valid) => valid.clone(),
            None => input(&corpus, seed, n),
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (target.check)(&bytes))) {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            failure = Some((n, bytes, why));
            done = n + 1;
            break;
        }
        done = n + 1;
    }
    Outcome {
        name: target.name,
        inputs: done,
        elapsed: start.elapsed(),
        failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_reproducible_and_varied() {
        let corpus = wire_corpus();
        assert_eq!(input(&corpus, 1, 17), input(&corpus, 1, 17));
        let distinct: std::collections::HashSet<Vec<u8>> =
            (0..1000).map(|n| input(&corpus, 1, n)).collect();
        assert!(distinct.len() > 700, "{} distinct inputs", distinct.len());
    }

    #[test]
    fn a_failing_property_is_caught_with_its_input() {
        let target = Target {
            name: "fails-on-zero-byte",
            corpus: || vec![vec![1, 2, 3]],
            check: |b| assert!(!b.contains(&0), "a zero byte"),
        };
        let out = run(&target, 7, 100_000);
        let (n, bytes, why) = out.failure.expect("found");
        assert!(bytes.contains(&0) && why.contains("a zero byte"));
        assert_eq!(input(&[vec![1, 2, 3]], 7, n), bytes);
    }

    #[test]
    fn every_target_passes_a_short_run() {
        for t in targets() {
            let out = run(&t, 1, 2_000);
            assert!(out.failure.is_none(), "{}: {:?}", t.name, out.failure);
        }
    }
}
