//! `sat-abe`, the authority's command: files, modes, refusals and errors.
#![cfg(feature = "abe")]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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

    fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sat-abe"));
        c.current_dir(&self.0);
        c
    }

    fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.command().args(args).output().expect("run sat-abe")
    }

    fn json(&self, name: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.path(name)).unwrap()).unwrap()
    }

    /// An edited key file, kept private as its owner would (a secret key
    /// file readable by others is refused before anything else is checked).
    fn write_json(&self, name: &str, v: &serde_json::Value) {
        std::fs::write(self.path(name), v.to_string()).unwrap();
        std::fs::set_permissions(self.path(name), std::fs::Permissions::from_mode(0o600)).unwrap();
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

fn ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// Exit 2 and one line on stderr, `sat-abe: ...` containing `want`.
fn failed(out: &Output, want: &str) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("sat-abe: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(want), "expected {want:?} in {err:?}");
    err
}

fn setup(d: &Dir) {
    ok(&d.run(&["setup", "--out", "auth"]));
}

fn keygen(d: &Dir, tenant: &str, attrs: &str) {
    ok(&d.run(&[
        "keygen",
        "--authority",
        "auth/authority.key",
        "--tenant",
        tenant,
        "--attrs",
        attrs,
    ]));
}

/// Windows of a secret hex field's random part: none may appear in output.
fn secret_windows(hex: &str) -> Vec<&str> {
    let n = hex.len();
    assert!(n >= 64, "{hex}");
    vec![&hex[..32], &hex[n / 2 - 16..n / 2 + 16], &hex[n - 32..]]
}

#[test]
fn setup_writes_both_files_and_never_overwrites_them() {
    let d = Dir::new("setup");
    setup(&d);
    assert_eq!(mode(&d.path("auth/authority.key")), 0o600);
    assert_eq!(mode(&d.path("auth/public.key")), 0o644);
    let before = std::fs::read(d.path("auth/authority.key")).unwrap();
    let public = std::fs::read(d.path("auth/public.key")).unwrap();
    let err = failed(&d.run(&["setup", "--out", "auth"]), "already exists");
    assert!(err.contains("remove it or choose another --out"), "{err}");
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
    // The current folder by default; a missing folder is created.
    ok(&d.run(&["setup"]));
    assert!(d.path("authority.key").exists() && d.path("public.key").exists());
    ok(&d.run(&["setup", "--out=new/deeper"]));
    assert_eq!(mode(&d.path("new/deeper/authority.key")), 0o600);
    // --out naming a file, or nothing.
    failed(
        &d.run(&["setup", "--out", "auth/public.key"]),
        "not a folder",
    );
    failed(&d.run(&["setup", "--out="]), "--out needs a value");
    failed(&d.run(&["setup", "--out"]), "--out needs a value");
    failed(&d.run(&["setup", "extra"]), "unexpected argument");
}

#[test]
fn keygen_writes_a_private_tenant_file_with_its_attributes() {
    let d = Dir::new("keygen");
    setup(&d);
    // Commas and spaces separate attributes, and --attrs may be repeated.
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
    ok(&out);
    let file = d.path("alice.key");
    assert_eq!(mode(&file), 0o600);
    let key = TenantKey::load(&file).unwrap();
    assert_eq!(key.attributes(), ["tenant_a", "analyst-1", "x.y"]);
    assert_eq!(key.certificate().tenant, "alice");
    // --out, and a space-separated list in one argument.
    ok(&d.run(&[
        "keygen",
        "--authority=auth/authority.key",
        "--tenant=bob",
        "--attrs",
        "tenant_b analyst-1",
        "--out",
        "keys-bob.key",
    ]));
    let key = TenantKey::load(&d.path("keys-bob.key")).unwrap();
    assert_eq!(key.attributes(), ["tenant_b", "analyst-1"]);
    assert!(!d.path("bob.key").exists());
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
    ok(&keygen("auth/authority.key", "tenant_b", "bob.key"));
    // A tenant key or the public file in place of the authority's.
    failed(&keygen("bob.key", "x", "b2.key"), "holds a tenant's key");
    failed(
        &keygen("auth/public.key", "x", "b2.key"),
        "holds the authority's public keys",
    );
    // Damaged authority files: cut short, a non-ASCII hex field, keys that
    // do not match; and a missing one.
    std::fs::write(d.path("broken.key"), b"{\"sat_abe\": \"author").unwrap();
    failed(&keygen("broken.key", "x", "b2.key"), "not a SAT key file");
    let mut json = d.json("auth/authority.key");
    json["signing"] = format!("a\u{e9}a{}", "0".repeat(60)).into();
    d.write_json("accent.key", &json);
    failed(&keygen("accent.key", "x", "b2.key"), "signing: bad hex");
    let mut json = d.json("auth/authority.key");
    json["verifying"] = "00".repeat(32).into();
    d.write_json("mismatch.key", &json);
    failed(&keygen("mismatch.key", "x", "b2.key"), "do not match");
    failed(&keygen("missing.key", "x", "b2.key"), "missing.key");
    // Attributes: an empty one, one given twice, characters not allowed, a
    // keyword of the policies.
    let attrs = |a: &str| keygen("auth/authority.key", a, "b2.key");
    failed(&attrs("a,"), "empty attribute");
    failed(&attrs("tenant a,"), "empty attribute");
    failed(&attrs("a,,b"), "empty attribute");
    failed(&attrs("a, b a"), "attribute \"a\" is given twice");
    failed(&attrs("a$b"), "attribute \"a$b\"");
    failed(&attrs("caf\u{e9}"), "attribute \"caf\u{e9}\"");
    failed(&attrs("x,AND"), "attribute \"AND\"");
    // Tenant names.
    for bad in ["a/b", "a b", &"t".repeat(65)] {
        failed(
            &d.run(&[
                "keygen",
                "--authority",
                "auth/authority.key",
                "--tenant",
                bad,
                "--attrs",
                "x",
            ]),
            "tenant name",
        );
    }
    // Never over an existing file.
    let before = std::fs::read(d.path("bob.key")).unwrap();
    let err = failed(
        &keygen("auth/authority.key", "x", "bob.key"),
        "bob.key already exists",
    );
    assert!(err.contains("choose another --out"), "{err}");
    assert_eq!(std::fs::read(d.path("bob.key")).unwrap(), before);
    assert!(!d.path("b2.key").exists(), "a refused keygen wrote a file");
    // Missing options or values, unknown ones.
    let k = ["keygen", "--authority", "auth/authority.key"];
    failed(
        &d.run(&[&k[..], &["--tenant", "c"]].concat()),
        "--attrs is missing",
    );
    failed(
        &d.run(&[&k[..], &["--attrs", "x"]].concat()),
        "--tenant is missing",
    );
    failed(
        &d.run(&["keygen", "--tenant", "c", "--attrs", "x"]),
        "--authority is missing",
    );
    failed(
        &d.run(&[&k[..], &["--tenant", "--attrs", "x"]].concat()),
        "--tenant needs a value",
    );
    failed(
        &d.run(&[&k[..], &["--tenant", "c", "--tenant", "d", "--attrs", "x"]].concat()),
        "--tenant given twice",
    );
    failed(
        &d.run(&["keygen", "--colour", "red"]),
        "unknown option --colour",
    );
    assert!(!d.path("c.key").exists() && !d.path("d.key").exists());
}

#[test]
fn show_prints_what_a_file_holds_and_none_of_its_secrets() {
    let d = Dir::new("show");
    setup(&d);
    keygen(&d, "alice", "tenant_a,analyst-1,x.y");
    let authority = d.json("auth/authority.key");
    let verifying = authority["verifying"].as_str().unwrap();

    let shown = ok(&d.run(&["show", "alice.key"]));
    assert!(shown.contains("kind: tenant key"), "{shown}");
    assert!(shown.contains("tenant: alice"), "{shown}");
    assert!(
        shown.contains("attributes: tenant_a analyst-1 x.y"),
        "{shown}"
    );
    let id = TenantKey::load(&d.path("alice.key"))
        .unwrap()
        .certificate()
        .id();
    let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
    assert!(shown.contains(&format!("certificate: {id}")), "{shown}");
    assert!(shown.contains("certificate verifies"), "{shown}");
    assert!(shown.contains(verifying), "{shown}");
    let tenant = d.json("alice.key");
    for field in ["signing", "abe_key"] {
        for w in secret_windows(tenant[field].as_str().unwrap()) {
            assert!(!shown.contains(w), "show printed the tenant's {field}");
        }
    }

    for (file, kind) in [
        ("auth/authority.key", "kind: authority (secret"),
        ("auth/public.key", "kind: authority public keys"),
    ] {
        let shown = ok(&d.run(&["show", file]));
        assert!(shown.contains(kind), "{shown}");
        assert!(
            shown.contains(&format!("authority key: {verifying}")),
            "{shown}"
        );
        for field in ["signing", "abe_master"] {
            for w in secret_windows(authority[field].as_str().unwrap()) {
                assert!(!shown.contains(w), "show printed the authority's {field}");
            }
        }
    }
}

#[test]
fn show_tells_a_forged_or_damaged_file_from_a_good_one() {
    let d = Dir::new("forged");
    setup(&d);
    keygen(&d, "bob", "tenant_b");
    // The tenant gave itself `admin`: shown, with the certificate refused.
    let mut json = d.json("bob.key");
    json["certificate"]["attributes"] = serde_json::json!(["tenant_b", "admin"]);
    d.write_json("forged.key", &json);
    let out = d.run(&["show", "forged.key"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("attributes: tenant_b admin"), "{shown}");
    assert!(shown.contains("certificate does NOT verify"), "{shown}");
    failed(&out, "not signed by this authority");
    // A damaged authority file is said to be damaged, not of another kind.
    let mut json = d.json("auth/authority.key");
    json["verifying"] = "00".repeat(32).into();
    d.write_json("mismatch.key", &json);
    let err = failed(&d.run(&["show", "mismatch.key"]), "do not match");
    assert!(!err.contains("give a tenant's key"), "{err}");
    // Unknown kinds, bad hex, not JSON, not there, a folder.
    let mut json = d.json("bob.key");
    json["sat_abe"] = "other".into();
    d.write_json("other.key", &json);
    failed(&d.run(&["show", "other.key"]), "unknown kind of key");
    let mut json = d.json("bob.key");
    json["abe_key"] = "\u{e9}\u{e9}".into();
    d.write_json("accent.key", &json);
    failed(&d.run(&["show", "accent.key"]), "bad hex");
    std::fs::write(d.path("junk.key"), b"\xff\xfe junk").unwrap();
    failed(&d.run(&["show", "junk.key"]), "not a SAT key file");
    failed(&d.run(&["show", "missing.key"]), "missing.key");
    failed(&d.run(&["show", "auth"]), "auth");
    failed(&d.run(&["show"]), "show needs one key file");
    failed(&d.run(&["show", "a", "b"]), "show needs one key file");
}

#[test]
fn check_exits_0_when_satisfied_1_when_not_2_on_bad_input() {
    let d = Dir::new("check");
    setup(&d);
    keygen(&d, "alice", "tenant_a,analyst-1,x.y");
    let check = |p: &str| d.run(&["check", "alice.key", "--policy", p]);
    let out = check("tenant_a and (x.y or admin)");
    assert!(ok(&out).contains("satisfies"));
    let out = check("TENANT_A and analyst-1");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let out = check("tenant_b or admin");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("does not satisfy"));
    // Malformed policies say where.
    failed(&check("tenant_a and"), "at character 12");
    failed(&check("tenant_a & x.y"), "at character 9");
    failed(&check("(tenant_a"), "a ')' is missing");
    failed(&check(""), "--policy needs a value");
    failed(&d.run(&["check", "alice.key"]), "--policy is missing");
    failed(
        &d.run(&["check", "--policy", "tenant_a"]),
        "check needs one tenant key file",
    );
    // Not a tenant's key; a forged one.
    failed(
        &d.run(&["check", "auth/public.key", "--policy", "x"]),
        "holds the authority's public keys",
    );
    let mut json = d.json("alice.key");
    json["certificate"]["attributes"] = serde_json::json!(["admin"]);
    d.write_json("forged.key", &json);
    failed(
        &d.run(&["check", "forged.key", "--policy", "admin"]),
        "have the authority issue a new one",
    );
    // A tenant key others may read is refused, saying how to fix it.
    std::fs::set_permissions(d.path("alice.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    failed(&check("tenant_a"), "chmod 600");
}

/// `show` prints a key's serial and expiry; `revoke` writes the signed,
/// numbered, cumulative revocation list a process takes from SAT_ABE_CRL;
/// `keygen --days` sets the validity.
#[test]
fn revoke_writes_a_numbered_list_of_serials() {
    let d = Dir::new("revoke");
    setup(&d);
    keygen(&d, "alice", "tenant_a");
    let shown = ok(&d.run(&["show", "alice.key"]));
    let serial = shown
        .lines()
        .find_map(|l| l.strip_prefix("serial: "))
        .expect("show prints the serial")
        .to_owned();
    assert!(shown.contains("valid until: "), "{shown}");
    let revoke = |s: &str| {
        d.run(&[
            "revoke",
            "--authority",
            "auth/authority.key",
            "--serial",
            s,
            "--crl",
            "revoked.crl",
        ])
    };
    assert!(ok(&revoke(&serial)).contains("revocation list 1 (1 certificates revoked)"));
    assert!(ok(&revoke("00000000000000ff")).contains("revocation list 2 (2 certificates revoked)"));
    let list = d.json("revoked.crl");
    assert_eq!(list["sequence"], 2);
    assert_eq!(
        list["revoked"][0],
        u64::from_str_radix(&serial, 16).unwrap()
    );
    failed(&revoke("not-hex"), "16 hex digits");
    // A serial copied without its leading digits would revoke another
    // certificate, or none.
    failed(&revoke(&serial[2..]), "16 hex digits");
    failed(&revoke("ff"), "16 hex digits");
    assert_eq!(
        d.json("revoked.crl")["sequence"],
        2,
        "a refused serial wrote a list"
    );
    // `show` reads the list, and says whether the authority signed it.
    let shown = ok(&d.run(&["show", "revoked.crl"]));
    assert!(shown.contains("kind: revocation list"), "{shown}");
    assert!(shown.contains("sequence: 2"), "{shown}");
    assert!(
        shown.contains(&format!("revoked serials (2): {serial} 00000000000000ff")),
        "{shown}"
    );
    assert!(shown.contains("signature not checked"), "{shown}");
    let checked = ok(&d.run(&["show", "revoked.crl", "--authority", "alice.key"]));
    assert!(checked.contains("signed by the authority"), "{checked}");
    let other = Dir::new("revoke-other");
    setup(&other);
    let foreign = other.path("auth/authority.key");
    let out = d.run(&[
        "show",
        "revoked.crl",
        "--authority",
        foreign.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("NOT signed"),
        "{}",
        text(&out.stdout)
    );
    failed(
        &d.run(&[
            "revoke",
            "--authority",
            "auth/authority.key",
            "--crl",
            "x.crl",
        ]),
        "--serial is missing",
    );
    failed(
        &d.run(&[
            "keygen",
            "--authority",
            "auth/authority.key",
            "--tenant",
            "z",
            "--attrs",
            "a",
            "--days",
            "0",
        ]),
        "from 1 to 36500",
    );
}

#[test]
fn help_and_unknown_commands() {
    let d = Dir::new("help");
    for args in [
        &[][..],
        &["help"],
        &["--help"],
        &["-h"],
        &["keygen", "--help"],
    ] {
        let usage = ok(&d.run(args));
        for part in [
            "sat-abe setup",
            "sat-abe keygen",
            "sat-abe show",
            "--policy",
        ] {
            assert!(usage.contains(part), "{args:?}: {usage}");
        }
    }
    failed(&d.run(&["frobnicate"]), "unknown command");
    failed(&d.run(&["--out", "x"]), "unknown command");
    failed(&d.run(&["show", "--policy", "x", "f"]), "unknown option");
}

#[test]
fn odd_arguments_and_a_closed_stdout_are_not_panics() {
    let d = Dir::new("odd");
    // An argument that is not UTF-8.
    let out = d.run(&[OsStr::new("show"), OsStr::from_bytes(b"\xffkey")]);
    failed(&out, "not valid UTF-8");
    // Output into a pipe nobody reads.
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    unsafe { libc::close(fds[0]) };
    let write_end: std::fs::File = unsafe {
        use std::os::unix::io::FromRawFd;
        std::fs::File::from_raw_fd(fds[1])
    };
    let out = d
        .command()
        .arg("help")
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}
