//! Two tenants on one S-DSM with the encryption layer, over real processes
//! and real providers: `examples/tenants.rs` holds the steps and their
//! checks (access denied across tenants, ciphertext at the homes, a reader
//! that may not write, a flipped byte, revocation by a new epoch, a
//! replayed version). Here: the keys, the runs, that every step ran, and
//! what the servers kept of the protected chunks (read at the homes).
#![cfg(feature = "abe")]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use sat_core::abe::keys::AuthorityKeys;

struct Keys(PathBuf);

impl Keys {
    /// One authority; one key file per client rank (2 to 5).
    fn new(tag: &str) -> Keys {
        let dir = std::env::temp_dir().join(format!("sat-tenants-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let auth = AuthorityKeys::setup().unwrap();
        for (rank, name, attrs) in [
            (2, "alice", &["tenant_a", "writer", "dept-1"][..]),
            (3, "bob", &["tenant_b", "writer"]),
            (4, "rita", &["tenant_a"]),
            (5, "carl", &["contractor"]),
        ] {
            let key = auth.issue(name, attrs).unwrap();
            key.save(&dir.join(format!("tenant-{rank}.key"))).unwrap();
        }
        // mallory may write tenant_a's data, but the authority revoked her.
        let mallory = auth.issue("mallory", &["tenant_a", "writer"]).unwrap();
        mallory.save(&dir.join("revoked.key")).unwrap();
        // wanda may write C but not read it (C's read policy needs dept-1).
        let wanda = auth.issue("wanda", &["tenant_a", "writer"]).unwrap();
        wanda.save(&dir.join("write-only.key")).unwrap();
        auth.revoke(None, &[mallory.certificate().serial])
            .save(&dir.join("revoked.crl"))
            .unwrap();
        Keys(dir)
    }

    fn pattern(&self) -> String {
        self.0.join("tenant-{rank}.key").display().to_string()
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The example's data: what must never be found at a home.
fn pattern(tag: u8, size: usize) -> Vec<u8> {
    (0..size).map(|i| (i as u8).wrapping_mul(7) ^ tag).collect()
}

/// What the homes kept of the protected chunks (`SAT_HOME_DUMP`): sealed
/// versions, with no 16-byte run of any plaintext the tenants wrote.
fn check_homes(dump: &std::path::Path) {
    let mut seen = 0;
    let plaintexts: Vec<Vec<u8>> = [0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8]
        .iter()
        .map(|&t| pattern(t, 1000))
        .chain([
            pattern(0xB0, 500),
            pattern(0xC0, 64),
            pattern(0xC1, 64),
            pattern(0xC2, 64),
        ])
        .collect();
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dump), 0o700, "the dump folder is the user's alone");
    for entry in std::fs::read_dir(dump).expect("the servers dumped their homes") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.starts_with('.'), "a temporary file left: {name}");
        assert_eq!(
            mode(&path),
            0o600,
            "{name}: the run's data, the user's alone"
        );
        let chunk = u64::from_str_radix(name.rsplit('.').next().unwrap(), 16).unwrap();
        if ![100, 101, 102, 200, 201, 300].contains(&chunk) {
            continue;
        }
        seen += 1;
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], b"SATe", "{name} is not a sealed version");
        for p in &plaintexts {
            for w in p.chunks(16).filter(|w| w.len() == 16) {
                assert!(!bytes.windows(16).any(|b| b == w), "{name} holds plaintext");
            }
        }
    }
    assert_eq!(seen, 6, "the homes of the 6 protected chunks");
}

fn two_tenants(provider: &str) {
    let keys = Keys::new(provider);
    let dump = keys.0.join("homes");
    let out = run(Command::new(satrun())
        .args(["-n", "6", "--provider", provider, "--topology"])
        .arg(topology("two-servers.xml"))
        .arg("--")
        .arg(example("tenants"))
        .env("SAT_ABE_KEY", keys.pattern())
        .env("SAT_ABE_CRL", keys.0.join("revoked.crl"))
        .env("TENANTS_REVOKED_KEY", keys.0.join("revoked.key"))
        .env("TENANTS_WRITE_ONLY_KEY", keys.0.join("write-only.key"))
        .env("SAT_HOME_DUMP", &dump));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "the tenants run failed over {provider}:\n{stdout}\n{}",
        text(&out.stderr)
    );
    for rank in 2..=5 {
        assert!(
            stdout.contains(&format!("rank {rank}: all steps passed")),
            "rank {rank} did not finish:\n{stdout}"
        );
    }
    for line in [
        "rank 5: step 3 done: the homes hold ciphertext only",
        "rank 4: step 7 done",
        "rank 3: step 8 done",
        "A after contractor was dropped: access denied",
        "a write by a reader: access denied",
        "rank 2: A unchanged after rita's refused write",
        "A under rita's own epoch: integrity error",
        "A with a flipped byte: integrity error",
        "A rolled back: integrity error",
        "A with a zeroed chunk: integrity error",
        "A written under a revoked certificate: integrity error",
        "A written by a revoked tenant that holds the list: access denied",
        "rank 2: step 10 done",
        "rank 4: step 10 done",
        "A rolled back, to a reader that never saw A: integrity error",
        "A written after carl's rollback: access denied",
        "rank 2: step 11 done",
        "rank 4: step 11 done",
        "C written after wanda's write, read by wanda: access denied",
        "rank 5: step 12 done",
        "rank 2: step 9 done",
        "rank 4: step 9 done",
        "B by a tenant_a key: access denied",
        "a-fresh put back, read by rank 4: integrity error",
        "a-fresh put back, read by rank 5: integrity error",
        "rank 4: step 14 done",
        "A by a tenant_b key: access denied",
    ] {
        assert!(stdout.contains(line), "missing {line:?}:\n{stdout}");
    }
    // Step 13: wanda's MALLOC of D joins alice's chain, and is told that
    // alice's read policy, not hers, decides who reads it.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "[5] WARN: MALLOC of protected chunk 400: the chain exists, created by another tenant"
        ),
        "{stderr}"
    );
    check_homes(&dump);
}

#[test]
fn two_tenants_over_shm() {
    two_tenants("shm");
}

#[test]
fn two_tenants_over_tcp() {
    two_tenants("tcp");
}
