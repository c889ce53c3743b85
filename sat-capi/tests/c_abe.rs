//! The encryption layer through the C ABI (feature `abe`):
//! `bindings-tests/abe_tenants.c`, compiled with `-DSAT_ABE` and the strict
//! flags of the other bindings tests, run under `satrun` over shm and tcp on
//! 2 servers and 4 clients: a tenant_a writer, a tenant_a reader that uses
//! the plain calls only (LOOKUP, READ, GET, readSymbol), a tenant_b process
//! that is denied, and a process with no key that loads one with
//! `sat_abe_load_key`. The keys are made here, one file per rank, and given
//! with `SAT_ABE_KEY=<dir>/tenant-{rank}.key`. The C program checks each
//! step; this test checks that every client passed, that every process
//! ended and that none left a /dev/shm file.
//!
//! Which libsat: `cargo test -p sat-capi --features abe` compiles libsat
//! with the feature as the library this test binary links, into
//! `target/<profile>/deps/` (next to this binary), and recompiles it there
//! whenever another build left it without the feature. `cargo test` does
//! not copy it up to `target/<profile>/` (only `cargo build` does, and that
//! one is the default build's), so the C program links
//! `target/<profile>/deps/libsat.so` (or `.a`), and this test first checks
//! that it has the feature. satrun is `target/<profile>/satrun` (`cargo
//! build -p sat-core --bin satrun`; `make abe-test` builds it).
#![cfg(feature = "abe")]

mod common;

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use common::*;
use sat_core::abe::keys::AuthorityKeys;

/// A symbol only a libsat with feature `abe` defines.
const ABE_SYMBOL: &[u8] = b"sat_malloc_protected\0";

/// libsat with the feature (next to this test binary), satrun, the headers.
fn artifacts() -> &'static Artifacts {
    static A: OnceLock<Artifacts> = OnceLock::new();
    A.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let deps = exe.parent().expect("target/<profile>/deps").to_path_buf();
        let hint = "cargo test -p sat-capi --features abe";
        let a = Artifacts::locate(deps, hint, profile_dir().join("c-abe"));
        for lib in ["libsat.so", "libsat.a"] {
            let path = a.lib.join(lib);
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                bytes.windows(ABE_SYMBOL.len()).any(|w| w == ABE_SYMBOL),
                "{} has no sat_malloc_protected: it was built without feature abe; run \
                 `{hint}` (it builds libsat with the feature next to this test)",
                path.display()
            );
        }
        a
    })
}

/// abe_tenants in `variant`, built once per variant: its path.
fn program(variant: Variant) -> PathBuf {
    static BUILT: Mutex<Vec<(Variant, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, exe)) = built.iter().find(|(v, _)| *v == variant) {
        return exe.clone();
    }
    let a = artifacts();
    let dir = a.build.join(variant.name());
    std::fs::create_dir_all(&dir).expect("create the variant's directory");
    let exe = dir.join("abe_tenants");
    let src = root().join("bindings-tests/abe_tenants.c");
    build(variant.cc(a, &[src], &exe).arg("-DSAT_ABE"));
    built.push((variant, exe.clone()));
    exe
}

/// One authority; tenant key files for ranks 2 (tenant_a writer), 3
/// (tenant_a) and 4 (tenant_b writer); the authority's own file and a
/// damaged one, which rank 5 must fail to load. Removed when dropped.
struct Keys(PathBuf);

impl Keys {
    fn new(tag: &str) -> Keys {
        let dir = std::env::temp_dir().join(format!("sat-c-abe-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let auth = AuthorityKeys::setup().unwrap();
        auth.save(&dir.join("authority.key")).unwrap();
        for (rank, name, attrs) in [
            (2, "alice", &["tenant_a", "writer"][..]),
            (3, "rita", &["tenant_a"]),
            (4, "bob", &["tenant_b", "writer"]),
        ] {
            let key = auth.issue(name, attrs).unwrap();
            key.save(&dir.join(format!("tenant-{rank}.key"))).unwrap();
        }
        // Two revocation lists of unused serials, the second newer.
        let first = auth.revoke(None, &[11]);
        first.save(&dir.join("revoked-1.crl")).unwrap();
        auth.revoke(Some(&first), &[12])
            .save(&dir.join("revoked-2.crl"))
            .unwrap();
        std::fs::write(
            dir.join("corrupt.key"),
            b"{\"sat_abe\": \"tenant\", \"format\": 1, ",
        )
        .unwrap();
        Keys(dir)
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The two tenants' run over `provider`: every client passes its checks.
fn tenants(variant: Variant, provider: &str) {
    let exe = program(variant);
    let keys = Keys::new(&format!("{}-{provider}", variant.name()));
    let pattern = keys.0.join("tenant-{rank}.key");
    let (exe, dir) = (path_str(&exe), path_str(&keys.0));
    let run = satrun(
        artifacts(),
        6,
        ".",
        &[
            "--topology",
            "bindings-tests/abe_topology.xml",
            "--provider",
            provider,
            "-n",
            "5",
            exe,
            dir,
            ":",
            "-n",
            "1",
            // Rank 5 runs with no key at all.
            "env",
            "-u",
            "SAT_ABE_KEY",
            exe,
            dir,
        ],
        &[
            ("SAT_ABE_KEY", path_str(&pattern)),
            ("SAT_CHUNK_SIZE", "400"),
        ],
        variant.sanitized(),
    );
    run.succeeded().has(&[
        "[2] PASS abe_tenants (rank 2): ",
        "[3] PASS abe_tenants (rank 3): ",
        "[4] PASS abe_tenants (rank 4): ",
        "[5] PASS abe_tenants (rank 5): ",
    ]);
}

#[test]
fn two_tenants_over_shm() {
    tenants(Shared, "shm");
}

#[test]
fn two_tenants_over_tcp() {
    tenants(Shared, "tcp");
}

#[test]
fn two_tenants_static_library_sanitized() {
    tenants(StaticAsan, "shm");
}
