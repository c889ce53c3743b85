//! Helpers of the C programs' tests (c_programs.rs, c_abe.rs): where libsat,
//! sat.h and satrun are, compiling a C program in each link and sanitizer
//! variant, and running satrun with checks that every process ended and
//! left no /dev/shm file behind.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A run takes one to three seconds; a hang fails the test instead.
pub const RUN_BOUND: Duration = Duration::from_secs(120);
pub const PROVIDERS: [&str; 2] = ["shm", "tcp"];
pub const STRICT: [&str; 4] = ["-Wall", "-Wextra", "-Wpedantic", "-Werror"];
/// What libsat.a needs besides itself, as printed by
/// `cargo rustc -p sat-capi --crate-type staticlib -- --print native-static-libs`.
pub const NATIVE_STATIC_LIBS: [&str; 8] = [
    "-lfabric",
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];
pub const SANITIZE: [&str; 3] = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
];

// ------------------------------------------------------------ the workspace

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// What the C programs are built with and run under.
pub struct Artifacts {
    /// Where libsat.so and libsat.a are (target/<profile>, or its deps/).
    pub lib: PathBuf,
    pub include: PathBuf,
    /// target/<profile>/satrun.
    pub satrun: PathBuf,
    /// Where the C programs go.
    pub build: PathBuf,
}

impl Artifacts {
    /// The artifacts with libsat.so and libsat.a in `lib` (`lib_hint`: how
    /// to build them), satrun in `target/<profile>`, C programs going to
    /// `build`: each checked, a missing one failing with what to build.
    pub fn locate(lib: PathBuf, lib_hint: &str, build: PathBuf) -> Artifacts {
        let profile = profile_dir();
        let include = root().join("include");
        for (path, what) in [
            (lib.join("libsat.so"), lib_hint),
            (lib.join("libsat.a"), lib_hint),
            (
                profile.join("satrun"),
                "cargo build -p sat-core --bin satrun",
            ),
            (include.join("sat.h"), "make header"),
            (
                include.join("sat_compat.h"),
                "git checkout include/sat_compat.h",
            ),
        ] {
            assert!(
                path.exists(),
                "{} is missing: the C programs need it; run `{what}` (`make test` builds \
                 everything first)",
                path.display()
            );
        }
        // Programs linked with -lsat load libsat.so by its soname:
        // sat-capi/build.rs links it in target/<profile>, this does in any
        // other folder (deps/, where `cargo test --features abe` leaves
        // the library with the feature).
        let soname = lib.join(concat!("libsat.so.", env!("CARGO_PKG_VERSION_MAJOR")));
        if std::fs::read_link(&soname).is_err() {
            let _ = std::fs::remove_file(&soname);
            match std::os::unix::fs::symlink("libsat.so", &soname) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => panic!("link {} to libsat.so: {e}", soname.display()),
            }
        }
        std::fs::create_dir_all(&build)
            .unwrap_or_else(|e| panic!("create {}: {e}", build.display()));
        Artifacts {
            satrun: profile.join("satrun"),
            lib,
            include,
            build,
        }
    }
}

/// target/<profile>, from the test binary's path (target/<profile>/deps/...).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// A command with a user's environment rather than `cargo test`'s: no
/// LD_LIBRARY_PATH (it holds target/<profile>/deps, where another libsat.so
/// lives), no outer make's jobserver, no SAT_ or launcher variables.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        let cargo_own = k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR";
        if cargo_own
            || k.starts_with("SAT_")
            || k.starts_with("OMPI_")
            || k.starts_with("PMI_")
            || k.starts_with("PMIX_")
            || k.starts_with("SLURM_")
            || k.starts_with("ASAN_")
            || k.starts_with("LSAN_")
            || k.starts_with("UBSAN_")
            || matches!(
                &*k,
                "LD_LIBRARY_PATH"
                    | "LD_PRELOAD"
                    | "MAKEFLAGS"
                    | "MFLAGS"
                    | "MAKELEVEL"
                    | "PKG_CONFIG_PATH"
            )
        {
            cmd.env_remove(&key);
        }
    }
    cmd.stdin(Stdio::null());
    cmd
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs a command to its end, at most RUN_BOUND.
pub fn run_bounded(cmd: &mut Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(RUN_BOUND) {
        Ok(out) => out.expect("wait for the command"),
        Err(_) => {
            // satrun stops its ranks on SIGTERM; SIGKILL if it does not end.
            // SAFETY: kill(2) with a pid and a signal touches no memory.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            if rx.recv_timeout(Duration::from_secs(10)).is_err() {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!("{cmd:?} did not finish within {RUN_BOUND:?}: a hang");
        }
    }
}

/// Runs the compiler (or make); a failure shows its diagnostics.
pub fn build(cmd: &mut Command) {
    let out = run_bounded(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

// ------------------------------------------------------ the bindings tests

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Shared,
    Static,
    SharedAsan,
    StaticAsan,
}

pub use Variant::*;

pub const VARIANTS: [Variant; 4] = [Shared, Static, SharedAsan, StaticAsan];

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Shared => "shared",
            Static => "static",
            SharedAsan => "shared-asan",
            StaticAsan => "static-asan",
        }
    }

    pub fn sanitized(self) -> bool {
        matches!(self, SharedAsan | StaticAsan)
    }

    /// cc for `sources` into `exe`, in this variant.
    pub fn cc(self, a: &Artifacts, sources: &[PathBuf], exe: &Path) -> Command {
        let mut cmd = command("cc");
        cmd.args(["-std=c11", "-g", "-O1"]).args(STRICT);
        if self.sanitized() {
            cmd.args(SANITIZE);
        }
        cmd.arg("-I")
            .arg(&a.include)
            .args(sources)
            .arg("-o")
            .arg(exe);
        match self {
            Shared | SharedAsan => {
                cmd.arg("-L")
                    .arg(&a.lib)
                    .arg(format!("-Wl,-rpath,{}", a.lib.display()))
                    .arg("-lsat");
            }
            Static | StaticAsan => {
                cmd.arg(a.lib.join("libsat.a")).args(NATIVE_STATIC_LIBS);
            }
        }
        cmd.arg("-lpthread");
        cmd
    }
}

/// The environment of a sanitized run: leak detection on, with libfabric's
/// own allocations suppressed (bindings-tests/lsan.supp says why).
pub fn sanitizer_env(cmd: &mut Command) {
    cmd.env("ASAN_OPTIONS", "detect_leaks=1:halt_on_error=1")
        .env(
            "LSAN_OPTIONS",
            format!(
                "suppressions={}:print_suppressions=0",
                root().join("bindings-tests/lsan.supp").display()
            ),
        )
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1");
}

// ------------------------------------------------------------------- runs

/// A finished run of satrun.
pub struct Run {
    pub what: String,
    pub out: Output,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn context(&self) -> String {
        format!(
            "{}\n--- stdout\n{}--- stderr\n{}",
            self.what, self.stdout, self.stderr
        )
    }

    pub fn succeeded(&self) -> &Self {
        assert!(
            self.out.status.success(),
            "the run failed ({}):\n{}",
            self.out.status,
            self.context()
        );
        for bad in [
            "ERROR: AddressSanitizer",
            "ERROR: LeakSanitizer",
            "runtime error:",
            "FAIL",
        ] {
            assert!(
                !self.stdout.contains(bad) && !self.stderr.contains(bad),
                "{bad:?} in the run:\n{}",
                self.context()
            );
        }
        self
    }

    /// Each of `lines` is (part of) a line of stdout.
    pub fn has(&self, lines: &[&str]) -> &Self {
        for l in lines {
            assert!(
                self.stdout.lines().any(|x| x.contains(l)),
                "no line {l:?} in the run:\n{}",
                self.context()
            );
        }
        self
    }

    /// `lines` appear in stdout in this order.
    pub fn in_order(&self, lines: &[&str]) -> &Self {
        let mut at = 0;
        for l in lines {
            match self.stdout[at..].find(l) {
                Some(i) => at += i + l.len(),
                None => panic!("{l:?} missing or out of order:\n{}", self.context()),
            }
        }
        self
    }

    /// The numbers after `prefix` on lines holding it.
    pub fn numbers_after(&self, prefix: &str) -> Vec<u64> {
        self.stdout
            .lines()
            .filter_map(|l| l.split(prefix).nth(1))
            .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
            .collect()
    }
}

/// Runs `a`'s satrun with `args` in `dir` (of the workspace) with `env`;
/// checks that every one of the `np` processes has ended and left no
/// /dev/shm file behind.
pub fn satrun(
    a: &Artifacts,
    np: usize,
    dir: &str,
    args: &[&str],
    env: &[(&str, &str)],
    sanitized: bool,
) -> Run {
    let mut cmd = command(&a.satrun);
    cmd.args(args)
        .current_dir(root().join(dir))
        // The bootstrap's debug line names each process's pid.
        .env("SAT_LOG", "sat_core::bootstrap=debug");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if sanitized {
        sanitizer_env(&mut cmd);
    }
    let out = run_bounded(&mut cmd);
    let run = Run {
        what: format!("(in {dir}) satrun {}", args.join(" ")),
        stdout: text(&out.stdout),
        stderr: text(&out.stderr),
        out,
    };
    let pids: Vec<u32> = run
        .stdout
        .lines()
        .chain(run.stderr.lines())
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
    if run.out.status.success() {
        assert_eq!(pids.len(), np, "pids of the run:\n{}", run.context());
    }
    for pid in pids {
        assert!(
            !alive(pid),
            "process {pid} outlived the run:\n{}",
            run.context()
        );
        let left = shm_files_of(pid);
        assert!(left.is_empty(), "/dev/shm files of {pid} left: {left:?}");
    }
    run
}

pub fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; look at its state too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// The /dev/shm entries libfabric's shm provider made for `pid`.
pub fn shm_files_of(pid: u32) -> Vec<String> {
    let p = pid.to_string();
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.split(|c: char| !c.is_ascii_digit()).any(|part| part == p))
                .collect()
        })
        .unwrap_or_default()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}
