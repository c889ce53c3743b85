//! Two tenants on one S-DSM with the encryption layer, over real processes
//! and real providers: `examples/tenants.rs` holds the steps and their
//! checks (access denied across tenants, ciphertext at the homes, a reader
//! that may not write, a flipped byte, revocation by a new epoch, a
//! replayed version). Here: the keys, the runs, and that every step ran.
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

fn two_tenants(provider: &str) {
    let keys = Keys::new(provider);
    let out = run(Command::new(satrun())
        .args(["-n", "6", "--provider", provider, "--topology"])
        .arg(topology("two-servers.xml"))
        .arg("--")
        .arg(example("tenants"))
        .env("SAT_ABE_KEY", keys.pattern()));
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
        "A after contractor was dropped: access denied",
        "A after rita's write: integrity error",
        "A under rita's own epoch: integrity error",
        "A with a flipped byte: integrity error",
        "A rolled back: integrity error",
        "B by a tenant_a key: access denied",
        "A by a tenant_b key: access denied",
    ] {
        assert!(stdout.contains(line), "missing {line:?}:\n{stdout}");
    }
}

#[test]
fn two_tenants_over_shm() {
    two_tenants("shm");
}

#[test]
fn two_tenants_over_tcp() {
    two_tenants("tcp");
}
