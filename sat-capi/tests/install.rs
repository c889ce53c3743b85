//! SAT as a system library: after `make install PREFIX="$P"` into a fresh
//! empty folder, the listings of Figures 4 to 10 (bindings-tests/figures.c)
//! build with `cc prog.c $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config
//! --cflags --libs sat)`, with `pkg-config --static ... sat-static` (libsat.a)
//! and as a CMake project (`find_package(sat)`), and run correctly under the
//! installed `satrun`, over shm and tcp. The data integrity tests
//! (bindings-tests/integrity.c) build and run the same way. The installed
//! library has its soname and exports only the functions of sat.h; `make
//! install` never calls sudo; `make uninstall` leaves the prefix empty.
//!
//! `make install` builds release; `make test` builds it before `cargo test`,
//! so here it is up to date and the build takes a second. It runs once for
//! every test of this file.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
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

/// The prefix `make install` writes to: a fresh folder of this test
/// process, removed when the process exits.
fn prefix_dir() -> PathBuf {
    std::env::temp_dir().join(format!("sat-install-{}-prefix", std::process::id()))
}

extern "C" fn remove_prefix() {
    let _ = std::fs::remove_dir_all(prefix_dir());
}

/// The soname's file and the installed library's real name.
const SONAME: &str = concat!("libsat.so.", env!("CARGO_PKG_VERSION_MAJOR"));
const REAL_NAME: &str = concat!("libsat.so.", env!("CARGO_PKG_VERSION"));

/// `make <target> PREFIX=<p> <extra>` with a `sudo` first in PATH that
/// records being called and fails: make install must never call it.
fn make(target: &str, p: &Path, extra: &[&str]) -> Output {
    let guard = Scratch::new(&format!("no-sudo-{target}"));
    let called = guard.0.join("sudo-was-called");
    let sudo = guard.0.join("sudo");
    std::fs::write(
        &sudo,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", called.display()),
    )
    .unwrap();
    std::fs::set_permissions(&sudo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        guard.0.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut make = clean("make");
    make.current_dir(root())
        .env("PATH", path)
        .arg(target)
        .arg(format!("PREFIX={}", p.display()))
        .arg("JOBS=2")
        .args(extra);
    let out = must(
        run(make, Duration::from_secs(1800)),
        &format!("make {target}"),
    );
    assert!(!called.exists(), "make {target} called sudo");
    out
}

/// SAT installed with `make install PREFIX=<a fresh empty folder>`, once for
/// every test of this file (the first to ask installs; the others wait).
fn installed() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let p = prefix_dir();
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create the prefix");
        assert_eq!(std::fs::read_dir(&p).unwrap().count(), 0);
        // The tests share the prefix, so none of them may remove it: the
        // process does, when it exits (failed tests included).
        // SAFETY: registers a function that takes nothing and unwinds never.
        unsafe { libc::atexit(remove_prefix) };

        make("install", &p, &[]);
        for file in [
            &format!("lib/{REAL_NAME}"),
            "lib/libsat.a",
            "include/sat.h",
            "include/sat_compat.h",
            "bin/satrun",
            "lib/pkgconfig/sat.pc",
            "lib/pkgconfig/sat-static.pc",
            "lib/cmake/sat/satConfig.cmake",
            "lib/cmake/sat/satConfigVersion.cmake",
        ] {
            assert!(p.join(file).is_file(), "make install wrote no {file}");
        }
        // The links a system library has: the soname's, then the linker's.
        for (link, to) in [(SONAME, REAL_NAME), ("libsat.so", SONAME)] {
            let target = std::fs::read_link(p.join("lib").join(link))
                .unwrap_or_else(|e| panic!("lib/{link} is not a link: {e}"));
            assert_eq!(target, Path::new(to), "lib/{link}");
        }
        let scratch = Scratch::new("version");
        let version = must(
            run(
                sh(
                    "PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --modversion sat",
                    &p,
                    &scratch.0,
                ),
                RUN_BOUND,
            ),
            "pkg-config --modversion sat",
        );
        assert_eq!(version.stdout.trim(), env!("CARGO_PKG_VERSION"));
        p
    })
}

/// Builds bindings-tests/`name`.c against the installed SAT into `dir`:
/// `name` with pkg-config's flags (and the run path a user who does not
/// run ldconfig adds: sat.pc has none), `name-strict` with every warning
/// an error in C `std`, `name-static` with `pkg-config --static
/// sat-static`, which links libsat.a: it needs no libsat at run time.
fn build_installed(p: &Path, dir: &Path, name: &str, std: &str) {
    let src = root().join(format!("bindings-tests/{name}.c"));
    let mut compile = sh(
        "cc \"$SRC\" $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --cflags --libs sat) \
         -Wl,-rpath,\"$P/lib\" -o \"$OUT\"",
        p,
        dir,
    );
    compile.env("SRC", &src).env("OUT", name);
    must(
        run(compile, RUN_BOUND),
        &format!("cc {name}.c with pkg-config"),
    );
    let mut strict = sh(
        "cc -std=\"$STD\" -Wall -Wextra -Wpedantic -Werror \"$SRC\" \
         $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --cflags --libs sat) -Wl,-rpath,\"$P/lib\" \
         -o \"$OUT-strict\"",
        p,
        dir,
    );
    strict.env("SRC", &src).env("OUT", name).env("STD", std);
    must(
        run(strict, RUN_BOUND),
        &format!("cc -std={std} -Wall -Wextra -Wpedantic -Werror {name}.c"),
    );
    let mut static_link = sh(
        "cc \"$SRC\" $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --static --cflags --libs sat-static) \
         -o \"$OUT-static\"",
        p,
        dir,
    );
    static_link.env("SRC", &src).env("OUT", name);
    must(
        run(static_link, RUN_BOUND),
        &format!("cc {name}.c with pkg-config --static sat-static"),
    );
    assert_eq!(
        needed_libsat(&dir.join(format!("{name}-static"))),
        None,
        "{name}-static needs a shared libsat"
    );
    assert_eq!(
        needed_libsat(&dir.join(name)).as_deref(),
        Some(SONAME),
        "{name} does not load libsat by its soname"
    );
}

/// The libsat a program loads (its NEEDED entry), if any.
fn needed_libsat(program: &Path) -> Option<String> {
    let mut cmd = clean("objdump");
    cmd.arg("-p").arg(program);
    let out = must(run(cmd, RUN_BOUND), "objdump -p");
    out.stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("NEEDED"))
        .map(str::trim)
        .find(|lib| lib.starts_with("libsat"))
        .map(str::to_owned)
}

#[test]
fn installed_sat_builds_and_runs_the_figures() {
    let p = installed();
    let build = Scratch::new("build-figures");
    // The done-when's command, as written; then strict flags, and libsat.a.
    build_installed(p, &build.0, "figures", "c99");

    let prog = build.0.join("figures");
    run_figures(p, &prog, "shm");
    run_figures(p, &prog, "tcp");
    run_figures(p, &build.0.join("figures-static"), "shm");
}

/// integrity.c under the installed satrun: every client's PASS line, no
/// FAIL, every process ended and no /dev/shm file of theirs left. What went
/// wrong, with the run's output, as the error.
fn run_integrity(prefix: &Path, prog: &Path, provider: &str) -> Result<(), String> {
    let mut cmd = clean(prefix.join("bin/satrun"));
    cmd.current_dir(root())
        .args([
            "-n",
            "5",
            "--topology",
            "bindings-tests/integrity_topology.xml",
        ])
        .args(["--provider", provider, "--"])
        .arg(prog)
        // The bootstrap's debug line names each process's pid.
        .env("SAT_LOG", "sat_core::bootstrap=debug");
    let out = run(cmd, RUN_BOUND);
    let pids: Vec<u32> = out
        .stdout
        .lines()
        .chain(out.stderr.lines())
        .filter(|l| l.contains("Bootstrap SAT"))
        .filter_map(|l| {
            l.split("with pid ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    let mut wrong = Vec::new();
    for &pid in &pids {
        if common::alive(pid) {
            wrong.push(format!("process {pid} outlived the run"));
        }
        let left = common::shm_files_of(pid);
        if !left.is_empty() {
            wrong.push(format!("/dev/shm files of {pid} left: {left:?}"));
        }
    }
    if !out.status.success() {
        wrong.push(format!("satrun ended with {}", out.status));
    }
    // The FAIL lines: each failed check, where and why.
    wrong.extend(
        out.stdout
            .lines()
            .chain(out.stderr.lines())
            .filter(|l| l.contains("FAIL"))
            .map(str::to_owned),
    );
    if out.status.success() && pids.len() != 5 {
        wrong.push(format!(
            "{} pids in the bootstrap's lines, not 5",
            pids.len()
        ));
    }
    for rank in 2..=4 {
        let want = format!("[{rank}] PASS integrity: ");
        if !out.stdout.lines().any(|l| l.starts_with(&want)) {
            wrong.push(format!("no line {want:?}"));
        }
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(format!(
        "integrity over {provider} ({}):\n{}\n--- stdout\n{}--- stderr\n{}",
        prog.display(),
        wrong.join("\n"),
        out.stdout,
        out.stderr
    ))
}

/// Data integrity through the installed library: a second chain over a
/// chunk in use, a WRITE that fails half way, writes inside a READ scope
/// (bindings-tests/integrity.c says what each checks). Every run goes to its
/// end before the test fails, so that one failure shows every provider's.
#[test]
fn installed_sat_keeps_data_intact() {
    let p = installed();
    let build = Scratch::new("build-integrity");
    // testing.h's per-thread counters are C11.
    build_installed(p, &build.0, "integrity", "c11");

    let prog = build.0.join("integrity");
    let failures: Vec<String> = [
        run_integrity(p, &prog, "shm"),
        run_integrity(p, &prog, "tcp"),
        run_integrity(p, &build.0.join("integrity-static"), "shm"),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The functions sat.h declares for a libsat without the encryption layer
/// (what `make install` builds): declarations start a line; the
/// `#if defined(SAT_ABE)` blocks are left out.
fn declared_functions() -> Vec<String> {
    let header = std::fs::read_to_string(root().join("include/sat.h")).expect("read sat.h");
    let mut names = Vec::new();
    let mut in_abe = false;
    for line in header.lines() {
        if line.starts_with("#if defined(SAT_ABE)") {
            in_abe = true;
        } else if line.starts_with("#endif") {
            in_abe = false;
        }
        let declaration = line.starts_with(|c: char| c.is_ascii_alphabetic())
            && !line.starts_with("typedef")
            && !line.starts_with("extern");
        if in_abe || !declaration {
            continue;
        }
        // The declared name: the `sat_` identifier right before the `(`.
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let Some(open) = line.find('(') else {
            continue;
        };
        let head = &line[..open];
        let start = head.trim_end_matches(ident).len();
        let name = head[start..].to_string();
        if !name.starts_with("sat_") {
            continue;
        }
        names.push(name);
    }
    names.sort();
    names.dedup();
    names
}

/// The installed library: named by its soname, and exporting exactly the
/// functions sat.h declares (no Rust standard library symbol, no sat-core
/// one); libsat.a's global symbols are the same.
#[test]
fn installed_library_has_its_soname_and_exports_only_sat_h() {
    let p = installed();
    let lib = p.join("lib").join(REAL_NAME);

    let mut objdump = clean("objdump");
    objdump.arg("-p").arg(&lib);
    let out = must(run(objdump, RUN_BOUND), "objdump -p");
    let soname: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("SONAME"))
        .map(str::trim)
        .collect();
    assert_eq!(soname, [SONAME], "objdump -p {}", lib.display());

    let mut nm = clean("nm");
    nm.args(["-D", "--defined-only"]).arg(&lib);
    let out = must(run(nm, RUN_BOUND), "nm -D --defined-only");
    let mut exported: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_owned)
        .collect();
    exported.sort();
    let others: Vec<&String> = exported.iter().filter(|s| !s.starts_with("sat_")).collect();
    assert!(others.is_empty(), "exported besides sat_*: {others:?}");
    let declared = declared_functions();
    assert!(declared.len() > 30, "sat.h's functions: {declared:?}");
    assert_eq!(exported, declared, "exported (left) against sat.h (right)");

    // libsat.a too: its global symbols are the same, none of Rust's.
    let mut nm = clean("nm");
    nm.args(["-g", "--defined-only"])
        .arg(p.join("lib/libsat.a"));
    let out = must(run(nm, RUN_BOUND), "nm -g --defined-only libsat.a");
    let mut archived: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_owned)
        .collect();
    archived.sort();
    assert_eq!(
        archived, declared,
        "libsat.a's globals (left) against sat.h (right)"
    );
}

/// The installed libsat.a links beside another Rust static library, in
/// either order, and that library's panics still unwind: Rust's standard
/// library inside libsat.a is local to it, and so is the COMDAT group of its
/// personality routine (shared under Rust's name, the linker kept libsat's
/// and dropped the other's: a PIE link failed, a non-PIE one crashed).
#[test]
fn installed_libsat_a_links_beside_another_rust_static_library() {
    let p = installed();
    let dir = Scratch::new("two-rust-libs");
    std::fs::write(
        dir.0.join("other.rs"),
        "#[no_mangle]\npub extern \"C\" fn other_sum(n: u64) -> u64 {\n    \
         match std::panic::catch_unwind(|| if n > 5 { panic!(\"boom\") } else { n }) {\n        \
         Ok(v) => v,\n        Err(_) => 999,\n    }\n}\n",
    )
    .unwrap();
    std::fs::write(
        dir.0.join("both.c"),
        "#include <sat.h>\n#include <stdint.h>\n#include <stdio.h>\nuint64_t other_sum(uint64_t);\n\
         int main(void) {\n    printf(\"%s %llu\\n\", sat_version(), (unsigned long long)other_sum(10));\n    \
         return 0;\n}\n",
    )
    .unwrap();
    let mut rustc = clean("rustc");
    rustc
        .args([
            "-O",
            "--crate-type",
            "staticlib",
            "other.rs",
            "-o",
            "libother.a",
        ])
        .current_dir(&dir.0);
    must(
        run(rustc, RUN_BOUND),
        "rustc --crate-type staticlib other.rs",
    );
    for (name, order) in [
        ("sat-first", "$(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --static --cflags --libs sat-static) libother.a"),
        ("other-first", "libother.a $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --static --cflags --libs sat-static)"),
    ] {
        let link = sh(&format!("cc both.c {order} -o {name}"), p, &dir.0);
        must(run(link, RUN_BOUND), &format!("cc both.c, {name}"));
        let out = must(run(clean(dir.0.join(name)), RUN_BOUND), name);
        assert_eq!(
            out.stdout.trim(),
            format!("{} 999", env!("CARGO_PKG_VERSION")),
            "{name}: {}",
            out.stderr
        );
    }
}

/// A CMake project that finds the installed package (`find_package(sat
/// REQUIRED)`, the prefix in CMAKE_PREFIX_PATH) builds the Figure 10
/// program with `sat::sat` and with `sat::sat_static`; both run under the
/// installed satrun.
#[test]
fn a_cmake_project_finds_sat_and_runs_figure_10() {
    let p = installed();
    let project = Scratch::new("cmake-project");
    std::fs::write(
        project.0.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.16)\n\
             project(figures C)\n\
             find_package(sat {} REQUIRED)\n\
             add_executable(figures {src})\n\
             target_link_libraries(figures PRIVATE sat::sat)\n\
             add_executable(figures-static {src})\n\
             target_link_libraries(figures-static PRIVATE sat::sat_static)\n",
            env!("CARGO_PKG_VERSION"),
            src = root().join("bindings-tests/figures.c").display()
        ),
    )
    .unwrap();
    let build = project.0.join("build");
    let mut configure = clean("cmake");
    configure
        .arg("-S")
        .arg(&project.0)
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", p.display()));
    let configured = run(configure, RUN_BOUND);
    assert!(
        configured.status.success(),
        "cmake could not configure a project with find_package(sat) (scripts/setup.sh --test \
         installs cmake):\n{}{}",
        configured.stdout,
        configured.stderr
    );
    let mut compile = clean("cmake");
    compile.arg("--build").arg(&build).args(["-j", "2"]);
    must(run(compile, RUN_BOUND), "cmake --build");

    let prog = build.join("figures");
    assert_eq!(needed_libsat(&prog).as_deref(), Some(SONAME));
    assert_eq!(needed_libsat(&build.join("figures-static")), None);
    run_figures(p, &prog, "shm");
    run_figures(p, &prog, "tcp");
    run_figures(p, &build.join("figures-static"), "shm");
}

/// `make install RPATH=1` writes the run path into sat.pc (the default
/// does not); `make uninstall` then removes every file and folder it wrote,
/// leaving the prefix empty (and removing it, and its parents, where
/// install made them), and says so when nothing is installed.
#[test]
fn rpath_on_request_and_uninstall_leaves_the_prefix_empty() {
    let default_pc = std::fs::read_to_string(installed().join("lib/pkgconfig/sat.pc")).unwrap();
    assert!(!default_pc.contains("rpath"), "sat.pc:\n{default_pc}");
    assert!(
        default_pc.contains("Requires.private: libfabric"),
        "sat.pc:\n{default_pc}"
    );

    let p = Scratch::new("uninstall");
    make("install", &p.0, &["RPATH=1"]);
    let pc = std::fs::read_to_string(p.0.join("lib/pkgconfig/sat.pc")).unwrap();
    assert!(
        pc.contains("-Wl,-rpath,${libdir}"),
        "sat.pc with RPATH=1:\n{pc}"
    );
    // With the run path from sat.pc alone, the program finds libsat.
    let build = Scratch::new("rpath-build");
    let mut compile = sh(
        "cc \"$SRC\" $(PKG_CONFIG_PATH=\"$P/lib/pkgconfig\" pkg-config --cflags --libs sat) -o figures",
        &p.0,
        &build.0,
    );
    compile.env("SRC", root().join("bindings-tests/figures.c"));
    must(
        run(compile, RUN_BOUND),
        "cc figures.c with RPATH=1's sat.pc",
    );
    let mut ldd = clean("ldd");
    ldd.arg(build.0.join("figures"));
    let loaded = must(run(ldd, RUN_BOUND), "ldd");
    let want = format!("{SONAME} => {}", p.0.join("lib").join(SONAME).display());
    assert!(loaded.stdout.contains(&want), "ldd:\n{}", loaded.stdout);

    make("uninstall", &p.0, &[]);
    let left: Vec<_> = walk(&p.0);
    assert!(left.is_empty(), "make uninstall left {left:?}");
    assert!(p.0.is_dir(), "a prefix that was there before install stays");

    // A prefix install made, with its parent: uninstall removes both, and
    // the folder above them that was there before stays.
    let made = p.0.join("made/prefix");
    make("install", &made, &[]);
    make("uninstall", &made, &[]);
    assert!(
        !p.0.join("made").exists() && p.0.is_dir(),
        "make uninstall left {:?}",
        walk(&p.0)
    );

    // Nothing installed: a clear error, and still nothing there.
    let mut again = clean("make");
    again
        .current_dir(root())
        .arg("uninstall")
        .arg(format!("PREFIX={}", p.0.display()));
    let out = run(again, RUN_BOUND);
    assert!(
        !out.status.success() && out.stderr.contains("nothing of SAT's is installed"),
        "make uninstall of nothing:\n{}",
        out.stderr
    );
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}
