//! The C ABI's done-when: after `make install PREFIX="$P"` into a fresh empty
//! folder, the listings of Figures 4 to 10 (bindings-tests/figures.c) build
//! with `cc prog.c $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags
//! --libs sat)` and run correctly under the installed `satrun`, over shm and
//! tcp, with no LD_LIBRARY_PATH (sat.pc's rpath finds libsat.so).
//!
//! `make install` builds release; `make test` builds it before `cargo test`,
//! so here it is up to date and the build takes a second.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A run of the figures takes about a second; a hang fails the test.
const RUN_BOUND: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A fresh empty directory, removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sat-install-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A command with the environment of a user's shell rather than of
/// `cargo test` (its LD_LIBRARY_PATH holds target/debug/deps, where a
/// libsat.so lives) nor of an outer `make` (its jobserver).
fn clean(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        let cargo_own = k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR";
        if cargo_own
            || k.starts_with("SAT_")
            || matches!(
                &*k,
                "LD_LIBRARY_PATH" | "MAKEFLAGS" | "MFLAGS" | "MAKELEVEL" | "PKG_CONFIG_PATH"
            )
        {
            cmd.env_remove(&key);
        }
    }
    cmd.stdin(Stdio::null());
    cmd
}

struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` to its end, at most `bound`: past it, SIGTERM (satrun then
/// stops its ranks), and the test fails.
fn run(mut cmd: Command, bound: Duration) -> Output {
    let what = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (reader(Box::new(out)), reader(Box::new(err)));
    let status = match rx.recv_timeout(bound) {
        Ok(status) => status.expect("wait for the command"),
        Err(_) => {
            // SAFETY: kill(2) with a pid and a signal number touches no memory.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            panic!("{what} did not finish within {bound:?}: a hang");
        }
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    eprintln!(
        "--- {what}: {status} in {:.1?}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        start.elapsed()
    );
    Output {
        status,
        stdout,
        stderr,
    }
}

fn must(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        out.stderr
    );
    out
}

/// `sh -c script` with `$P` the prefix, in `dir`.
fn sh(script: &str, prefix: &Path, dir: &Path) -> Command {
    let mut cmd = clean("sh");
    cmd.args(["-c", script]).env("P", prefix).current_dir(dir);
    cmd
}

/// What the roles of figures.c print, by rank (three-tasks.xml: roles 1, 2
/// and 3 on ranks 2, 3 and 4), each line once.
const EXPECTED: &[&str] = &[
    "[2] role 1 on rank 2 of 5",
    "[3] role 2 on rank 3 of 5",
    "[4] role 3 on rank 4 of 5",
    "[2] figure 4: MALLOC, MALLOC_LST, LOOKUP, LOOKUP_LST ok",
    "[2] figure 5: WRITE, READWRITE, READ scopes done",
    "[2] figure 6: MAP, PUT, GET ok",
    "[2] figure 7: readSymbol(\"uuid-921b4274-84ad-4b04-ac75-f9738da84039\") = \"written by role 3\"",
    "[3] figure 8: role 2 displays \"A\"",
    "[4] figure 8: role 3 displays \"AB\"",
    "[3] figure 5: another process reads N - i: the READ scope's change was lost",
    "[3] figure 6: another process reads what PUT published",
    "[3] figure 7: another process reads symbol_name",
    "[2] figure 9: role 1 foo on chunk 90",
    "[3] figure 9: role 2 foo on chunk 90",
    "[3] figure 9: handler ran with params \"figure 9 params\"",
    "[2] role 1 done",
    "[3] role 2 done",
    "[4] role 3 done",
];

fn run_figures(prefix: &Path, prog: &Path, provider: &str) {
    let mut cmd = clean(prefix.join("bin/satrun"));
    cmd.current_dir(root())
        .args([
            "-n",
            "5",
            "--topology",
            "sat-core/topologies/three-tasks.xml",
        ])
        .args(["--provider", provider, "--"])
        .arg(prog);
    let out = run(cmd, RUN_BOUND);
    assert!(
        out.status.success(),
        "figures over {provider} failed ({}):\n{}{}",
        out.status,
        out.stdout,
        out.stderr
    );
    let lines: Vec<&str> = out.stdout.lines().collect();
    for want in EXPECTED {
        let n = lines.iter().filter(|l| l == &want).count();
        assert_eq!(
            n, 1,
            "over {provider}, {want:?} printed {n} times, not once"
        );
    }
    assert_eq!(
        lines.len(),
        EXPECTED.len(),
        "over {provider}, lines nobody expected: {lines:#?}"
    );
}

#[test]
fn installed_sat_builds_and_runs_the_figures() {
    let prefix = Scratch::new("prefix");
    let build = Scratch::new("build");
    let p = &prefix.0;

    let mut make = clean("make");
    make.current_dir(root())
        .arg("install")
        .arg(format!("PREFIX={}", p.display()))
        .arg("JOBS=2");
    must(run(make, Duration::from_secs(1800)), "make install");
    for file in [
        "lib/libsat.so",
        "lib/libsat.a",
        "include/sat.h",
        "include/sat_compat.h",
        "bin/satrun",
        "lib/pkgconfig/sat.pc",
    ] {
        assert!(p.join(file).is_file(), "make install wrote no {file}");
    }
    let version = must(
        run(
            sh(
                "PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --modversion sat",
                p,
                &build.0,
            ),
            RUN_BOUND,
        ),
        "pkg-config --modversion sat",
    );
    assert_eq!(version.stdout.trim(), env!("CARGO_PKG_VERSION"));

    // The done-when's command, as written; then strict flags, and libsat.a.
    let figures = root().join("bindings-tests/figures.c");
    let mut compile = sh(
        "cc \"$SRC\" $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --cflags --libs sat) -o figures",
        p,
        &build.0,
    );
    compile.env("SRC", &figures);
    must(run(compile, RUN_BOUND), "cc figures.c with pkg-config");
    let mut strict = sh(
        "cc -std=c99 -Wall -Wextra -Wpedantic -Werror \"$SRC\" \
         $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --cflags --libs sat) -o figures-strict",
        p,
        &build.0,
    );
    strict.env("SRC", &figures);
    must(
        run(strict, RUN_BOUND),
        "cc -Wall -Wextra -Wpedantic -Werror figures.c",
    );
    let mut static_link = sh(
        "cc \"$SRC\" $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --cflags sat) \"$P/lib/libsat.a\" \
         $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --static --libs-only-l sat | sed 's/-lsat //') \
         -o figures-static",
        p,
        &build.0,
    );
    static_link.env("SRC", &figures);
    must(run(static_link, RUN_BOUND), "cc figures.c with libsat.a");

    let prog = build.0.join("figures");
    run_figures(p, &prog, "shm");
    run_figures(p, &prog, "tcp");
    run_figures(p, &build.0.join("figures-static"), "shm");
}
