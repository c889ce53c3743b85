//! `sat-abe`, the authority's command: files, modes, refusals and errors.
#![cfg(feature = "abe")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sat_core::abe::keys::TenantKey;

/// A fresh folder per test, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("sat-abe-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_sat-abe"))
            .args(args)
            .current_dir(&self.0)
            .output()
            .expect("run sat-abe")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn failed(out: &Output, want: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.starts_with("sat-abe: "), "{err}");
    assert!(err.contains(want), "expected {want:?} in {err:?}");
}

fn setup(d: &Dir) {
    let out = d.run(&["setup", "--out", "auth"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn setup_writes_both_files_and_never_overwrites_them() {
    let d = Dir::new("setup");
    setup(&d);
    assert_eq!(mode(&d.path("auth/authority.key")), 0o600);
    assert_eq!(mode(&d.path("auth/public.key")), 0o644);
    let before = std::fs::read(d.path("auth/authority.key")).unwrap();
    let public = std::fs::read(d.path("auth/public.key")).unwrap();
    failed(&d.run(&["setup", "--out", "auth"]), "already exists");
    assert_eq!(std::fs::read(d.path("auth/authority.key")).unwrap(), before);
    assert_eq!(std::fs::read(d.path("auth/public.key")).unwrap(), public);
    // Only the public file there: still refused, and no secret written.
    std::fs::create_dir_all(d.path("p")).unwrap();
    std::fs::copy(d.path("auth/public.key"), d.path("p/public.key")).unwrap();
    failed(
        &d.run(&["setup", "--out", "p"]),
        "public.key already exists",
    );
    assert!(!d.path("p/authority.key").exists());
}

#[test]
fn keygen_writes_a_private_tenant_file_with_its_attributes() {
    let d = Dir::new("keygen");
    setup(&d);
    let out = d.run(&[
        "keygen",
        "--authority",
        "auth/authority.key",
        "--tenant",
        "alice",
        "--attrs",
        "tenant_a, analyst-1",
        "--attrs",
        "x.y",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = d.path("alice.key");
    assert_eq!(mode(&file), 0o600);
    let key = TenantKey::load(&file).unwrap();
    assert_eq!(key.attributes(), ["tenant_a", "analyst-1", "x.y"]);
    assert_eq!(key.certificate().tenant, "alice");

    // `show` tells what the file holds and none of its secrets.
    let out = d.run(&["show", "alice.key"]);
    assert!(out.status.success());
    let shown = text(&out.stdout);
    assert!(shown.contains("tenant_a analyst-1 x.y"), "{shown}");
    assert!(shown.contains("certificate verifies"), "{shown}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    for secret in ["signing", "abe_key"] {
        let hex = json[secret].as_str().unwrap();
        assert!(!shown.contains(&hex[..32]), "show printed the {secret}");
    }

    // `check`: 0 when satisfied, 1 when not, 2 for a malformed policy.
    let check = |p: &str| d.run(&["check", "alice.key", "--policy", p]);
    assert_eq!(check("tenant_a and (x.y or admin)").status.code(), Some(0));
    assert_eq!(check("tenant_b or admin").status.code(), Some(1));
    failed(&check("tenant_a and"), "at character");
}

#[test]
fn keygen_refuses_wrong_files_and_bad_input_clearly() {
    let d = Dir::new("bad");
    setup(&d);
    let keygen = |authority: &str, attrs: &str, out: &str| {
        d.run(&[
            "keygen",
            "--authority",
            authority,
            "--tenant",
            "bob",
            "--attrs",
            attrs,
            "--out",
            out,
        ])
    };
    assert!(keygen("auth/authority.key", "tenant_b", "bob.key")
        .status
        .success());
    // A tenant key or the public file in place of the authority's.
    failed(&keygen("bob.key", "x", "b2.key"), "holds a tenant's key");
    failed(
        &keygen("auth/public.key", "x", "b2.key"),
        "holds the authority's public keys",
    );
    // A damaged authority file.
    std::fs::write(d.path("broken.key"), b"{\"sat_abe\": \"author").unwrap();
    failed(&keygen("broken.key", "x", "b2.key"), "not a SAT key file");
    failed(&keygen("missing.key", "x", "b2.key"), "missing.key");
    // Attributes: an empty one, one with a character not allowed.
    failed(
        &keygen("auth/authority.key", "a,", "b2.key"),
        "empty attribute",
    );
    failed(
        &keygen("auth/authority.key", "a$b", "b2.key"),
        "attribute \"a$b\"",
    );
    // Never over an existing file.
    failed(
        &keygen("auth/authority.key", "x", "bob.key"),
        "already exists",
    );
    assert!(!d.path("b2.key").exists(), "a refused keygen wrote a file");
    // Missing options, unknown ones.
    failed(
        &d.run(&[
            "keygen",
            "--authority",
            "auth/authority.key",
            "--tenant",
            "c",
        ]),
        "--attrs is missing",
    );
    failed(
        &d.run(&["keygen", "--colour", "red"]),
        "unknown option --colour",
    );
    failed(&d.run(&["frobnicate"]), "unknown command");
}
