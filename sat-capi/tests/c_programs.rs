//! The C programs against the C ABI, built with `cc` and run under `satrun`
//! over shm and tcp:
//!
//! - `bindings-tests/`: the C ABI's own tests, compiled with
//!   `-Wall -Wextra -Wpedantic -Werror` in four variants: linked with the
//!   shared library and with the static one (`libsat.a` and its native
//!   libraries), each also under AddressSanitizer and UBSan.
//! - `examples-c/`: the report's figures and the video stream of section
//!   3.2, built by their own Makefile through pkg-config (a `sat.pc` made
//!   here for the workspace's `include/` and libsat), as an outside project
//!   builds them after `make install`.
//!
//! Each program is compiled once per variant, into
//! `target/<profile>/c-programs/`, and the binary serves both providers.
//! `make test` builds libsat and `satrun` before the tests run; a missing one
//! fails the test with what to build.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use common::*;

// ------------------------------------------------------------ the workspace

/// libsat, satrun and the headers, from target/<profile> and include/.
fn artifacts() -> &'static Artifacts {
    static A: OnceLock<Artifacts> = OnceLock::new();
    A.get_or_init(|| {
        let profile = profile_dir();
        Artifacts::locate(
            profile.clone(),
            "cargo build -p sat-capi",
            profile.join("c-programs"),
        )
    })
}

// ------------------------------------------------------ the bindings tests

const BINDINGS: [&str; 15] = [
    "api",
    "capacity",
    "chain_subscribe",
    "errors",
    "figures",
    "integrity",
    "lifetimes",
    "logging",
    "outside",
    "protocols",
    "recovery",
    "role_end",
    "service",
    "signals",
    "user_protocol",
];

/// The bindings tests of `variant`, built once: their directory.
fn bindings(variant: Variant) -> &'static Path {
    static BUILT: [OnceLock<PathBuf>; 4] = [const { OnceLock::new() }; 4];
    let slot = VARIANTS
        .iter()
        .position(|&v| v == variant)
        .expect("a variant");
    BUILT[slot].get_or_init(|| {
        let a = artifacts();
        let dir = a.build.join(variant.name());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the variant's directory");
        let src = root().join("bindings-tests");
        // The compilers run side by side; each is checked.
        let children: Vec<_> = BINDINGS
            .iter()
            .map(|p| {
                let mut cmd = variant.cc(a, &[src.join(format!("{p}.c"))], &dir.join(p));
                let child = cmd
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("start cc");
                (cmd, child)
            })
            .collect();
        for (cmd, child) in children {
            let out = child.wait_with_output().expect("wait for cc");
            assert!(
                out.status.success(),
                "{cmd:?} failed:\n{}",
                text(&out.stderr)
            );
        }
        dir
    })
}

// ------------------------------------------------------------------- runs

/// satrun in `dir` (see [`common::satrun`]).
fn satrun(np: usize, dir: &str, args: &[&str], env: &[(&str, &str)], sanitized: bool) -> Run {
    common::satrun(artifacts(), np, dir, args, env, sanitized)
}

/// `exe args...` as 3 processes with no topology (rank 0 the server, ranks 1
/// and 2 clients of role 1) over `provider`.
fn three_processes(
    exe: &Path,
    provider: &str,
    args: &[&str],
    env: &[(&str, &str)],
    sanitized: bool,
) -> Run {
    let mut all = vec!["-n", "3", "--provider", provider, "--", path_str(exe)];
    all.extend_from_slice(args);
    satrun(3, ".", &all, env, sanitized)
}

// --------------------------------------------------- bindings-tests: tests

/// sat.h and sat_compat.h, each included twice, compile with every warning
/// an error in C99 and C11 (and as C++17 and C++20 when a C++ compiler is
/// here), followed by headers that call a `barrier(` of their own.
#[test]
fn headers_included_twice_compile_cleanly() {
    let a = artifacts();
    let dir = a.build.join("headers");
    std::fs::create_dir_all(&dir).unwrap();
    let src = root().join("bindings-tests/header_twice.c");
    let mut compilers = vec![("cc", "c99"), ("cc", "c11")];
    if command("c++").arg("--version").output().is_ok() {
        compilers.push(("c++", "c++17"));
        // With <barrier>, which a `barrier` macro would break.
        compilers.push(("c++", "c++20"));
    } else {
        eprintln!("no c++ here: the header is not tried as C++");
    }
    for (compiler, std) in compilers {
        let exe = dir.join(format!("header_twice-{std}"));
        let mut cmd = command(compiler);
        if compiler == "c++" {
            cmd.args(["-x", "c++"]);
        }
        cmd.arg(format!("-std={std}"))
            .args(STRICT)
            .arg("-I")
            .arg(&a.include)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(&a.lib)
            .arg(format!("-Wl,-rpath,{}", a.lib.display()))
            .arg("-lsat");
        build(&mut cmd);
        let out = run_bounded(&mut command(&exe));
        assert!(
            out.status.success() && text(&out.stdout).contains("PASS header_twice"),
            "{std}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

/// Outside a run every call fails with a status or NULL and a message
/// saying there is no run; NULL arguments are argument errors; a bootstrap
/// with no launcher says how to start the program.
fn outside(variant: Variant) {
    let exe = bindings(variant).join("outside");
    let mut cmd = command(&exe);
    if variant.sanitized() {
        sanitizer_env(&mut cmd);
    }
    let out = run_bounded(&mut cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("PASS outside: ") && !stderr.contains("Sanitizer"),
        "{}: outside:\n{stdout}{stderr}",
        variant.name()
    );
}

/// Runs bindings-tests program `name` as 5 processes under `topology`, over
/// each provider, and checks that it succeeded and printed `expected`.
fn five_processes(variant: Variant, name: &str, topology: &str, expected: &[&str]) {
    five_processes_with(variant, name, topology, &[], expected);
}

/// [`five_processes`] with `env` set for every process.
fn five_processes_with(
    variant: Variant,
    name: &str,
    topology: &str,
    env: &[(&str, &str)],
    expected: &[&str],
) {
    let exe = bindings(variant).join(name);
    for provider in PROVIDERS {
        let run = satrun(
            5,
            ".",
            &[
                "-n",
                "5",
                "--topology",
                topology,
                "--provider",
                provider,
                "--",
                path_str(&exe),
            ],
            env,
            variant.sanitized(),
        );
        run.succeeded().has(expected);
    }
}

/// The ABI at work: 5 processes (2 servers, 3 clients), each client
/// checking its own results, then its handlers' once the bootstrap returns.
fn api(variant: Variant) {
    five_processes(
        variant,
        "api",
        "bindings-tests/topology.xml",
        &[
            "[2] PASS api role (rank 2): ",
            "[3] PASS api role (rank 3): ",
            "[4] PASS api role (rank 4): ",
            "[2] PASS api handlers (client 0): ",
            "[3] PASS api handlers (client 1): ",
            "[4] PASS api handlers (client 2): ",
        ],
    );
}

/// Misuse in a run: errors with messages, then the API still works.
fn errors(variant: Variant) {
    let exe = bindings(variant).join("errors");
    for provider in PROVIDERS {
        let run = three_processes(
            &exe,
            provider,
            &[],
            &[("SAT_LOOKUP_TIMEOUT", "1")],
            variant.sanitized(),
        );
        run.succeeded()
            .has(&["[1] PASS errors (rank 1): ", "[2] PASS errors (rank 2): "]);
    }
}

/// Data integrity: a second chain over a chunk in use, a WRITE that fails
/// half way, writes inside a READ scope (integrity.c says what each checks).
/// `sat-capi/tests/install.rs` runs it against the installed library too.
fn integrity(variant: Variant) {
    five_processes(
        variant,
        "integrity",
        "bindings-tests/integrity_topology.xml",
        &[
            "[2] PASS integrity: ",
            "[3] PASS integrity: ",
            "[4] PASS integrity: ",
        ],
    );
}

/// SUBSCRIBE on chains of several chunks (chain_subscribe.c): releases of a
/// chain's second and third chunks run its handler, two more handles whose
/// chains start at the same chunk are subscriptions of their own, and the
/// run ends by itself while the subscribers still wait.
fn chain_subscribe(variant: Variant) {
    chain_subscribe_with(variant, &[]);
}

/// [`chain_subscribe`] with `env` set for every process.
fn chain_subscribe_with(variant: Variant, env: &[(&str, &str)]) {
    five_processes_with(
        variant,
        "chain_subscribe",
        "bindings-tests/topology.xml",
        env,
        &[
            "[2] PASS chain_subscribe role (client 0): ",
            "[3] PASS chain_subscribe role (client 1): ",
            "[4] PASS chain_subscribe role (client 2): ",
            "[3] PASS chain_subscribe handlers (client 1): ",
            "[4] PASS chain_subscribe handlers (client 2): ",
        ],
    );
}

/// The same through the protocols' messages, as across hosts: there the
/// data of a notification comes from the home, never from shared memory.
#[test]
fn chain_subscribe_through_messages() {
    chain_subscribe_with(Shared, &[("SAT_HOST_SEGMENTS", "off")]);
}

/// Every built-in protocol (protocols.c: a migratory counter, a
/// producer and its consumers, counters written again and again by their
/// owners), over each provider, through host slots and with
/// `SAT_HOST_SEGMENTS=off` (the protocols' own messages, as across hosts).
fn protocols(variant: Variant, host_segments: &[&str]) {
    three_clients_pass("protocols", variant, host_segments);
}

/// Runs bindings test `program` as three clients and two servers of
/// bindings-tests/topology.xml, over each provider and each
/// `SAT_HOST_SEGMENTS` setting, and checks that every client passes.
fn three_clients_pass(program: &str, variant: Variant, host_segments: &[&str]) {
    let exe = bindings(variant).join(program);
    for provider in PROVIDERS {
        for &segments in host_segments {
            let run = satrun(
                5,
                ".",
                &[
                    "-n",
                    "5",
                    "--topology",
                    "bindings-tests/topology.xml",
                    "--provider",
                    provider,
                    "--",
                    path_str(&exe),
                ],
                &[("SAT_HOST_SEGMENTS", segments)],
                variant.sanitized(),
            );
            let passed: Vec<String> = (2..5)
                .map(|r| format!("[{r}] PASS {program} (rank {r}): "))
                .collect();
            let passed: Vec<&str> = passed.iter().map(String::as_str).collect();
            run.succeeded().has(&passed);
        }
    }
}

#[test]
fn protocols_shared_library() {
    protocols(Shared, &["off", "on"]);
}

#[test]
fn protocols_static_library_sanitized() {
    protocols(StaticAsan, &["off"]);
}

/// A protocol defined in C and registered at run time (user_protocol.c:
/// its routines serialize every scope at the home; a counter from two
/// threads of three processes, a producer and its consumers), over each
/// provider; with host slots off its routines carry every scope, with them
/// on every protocol reaches the slots the same way.
fn user_protocol(variant: Variant, host_segments: &[&str]) {
    three_clients_pass("user_protocol", variant, host_segments);
}

#[test]
fn a_protocol_defined_in_c_runs_several_processes() {
    user_protocol(Shared, &["off", "on"]);
}

#[test]
fn a_protocol_defined_in_c_runs_sanitized() {
    user_protocol(StaticAsan, &["off"]);
}

/// Lifetimes (lifetimes.c): a handle after the run, after FREE and one that
/// never came from SAT are refused; FREE returns a 64 MiB chain's memory
/// (RssAnon) and LOOKUP finds its data again; a fork() child's calls are
/// refused; two threads that MALLOC or LOOKUP one chain get one handle; a
/// LOOKUP of UINT32_MAX chunks is refused without allocating.
fn lifetimes(variant: Variant) {
    let exe = bindings(variant).join("lifetimes");
    for provider in PROVIDERS {
        let run = three_processes(&exe, provider, &[], &[], variant.sanitized());
        // The fork child's exit() is not its parent leaving its role.
        assert!(
            !run.stderr.contains("this process exited"),
            "{}",
            run.context()
        );
        run.succeeded().has(&[
            "[1] PASS lifetimes role (rank 1): ",
            "[2] PASS lifetimes role (rank 2): ",
            "[1] PASS lifetimes after the run: ",
            "[2] PASS lifetimes after the run: ",
        ]);
    }
}

#[test]
fn lifetimes_shared_library() {
    lifetimes(Shared);
}

#[test]
fn lifetimes_static_library_sanitized() {
    lifetimes(StaticAsan);
}

/// role_end.c: a thread exits inside two write scopes; once the role has
/// returned and SAT refuses new calls, another thread ABORTs one and
/// RELEASEs the other. The end of the role waits for those scopes (sat.h,
/// Threads), so both calls succeed, and the other client sees the release
/// and not the abort. (The end of the role used to release them itself, and
/// refuse the thread's calls: an ABORT published.)
fn role_end(variant: Variant) {
    let exe = bindings(variant).join("role_end");
    for provider in PROVIDERS {
        let run = three_processes(&exe, provider, &[], &[], variant.sanitized());
        run.succeeded().has(&[
            "[1] PASS role_end role (rank 1): ",
            "[2] PASS role_end role (rank 2): ",
            "[1] PASS role_end after the role: ",
        ]);
    }
}

#[test]
fn role_end_shared_library() {
    role_end(Shared);
}

#[test]
fn role_end_static_library_sanitized() {
    role_end(StaticAsan);
}

/// signals.c: a SIGTERM handler the program installed before its first SAT
/// call still gets SIGTERM, in the role and after the run, and a 2 ms
/// interval timer running in every process from before the bootstrap to
/// the end delays nothing for good: the bootstrap, a barrier and a read
/// complete (`SAT_BOOTSTRAP_TIMEOUT` bounds the wait where they would
/// not).
#[test]
fn a_programs_signal_handlers_and_timers_outlive_the_bootstrap() {
    let exe = bindings(Shared).join("signals");
    for provider in PROVIDERS {
        let run = three_processes(
            &exe,
            provider,
            &[],
            &[("SAT_BOOTSTRAP_TIMEOUT", "30")],
            false,
        );
        run.succeeded().has(&[
            "[1] PASS signals role: ",
            "[2] PASS signals role: ",
            "[0] PASS signals after the run: ",
            "[1] PASS signals after the run: ",
            "[2] PASS signals after the run: ",
        ]);
    }
}

/// capacity.c: C chains count against `<memory capacity>` (16 MiB on rank
/// 1): writing 64 MiB of chains grows the process by far less (RssAnon),
/// each chain comes back intact at the same address, chains in a scope are
/// never evicted, and another process reads them all.
#[test]
fn c_chains_count_against_the_capacity_and_are_evicted_in_place() {
    for (variant, provider) in [(Shared, "shm"), (Shared, "tcp"), (SharedAsan, "shm")] {
        let exe = bindings(variant).join("capacity");
        let run = satrun(
            3,
            ".",
            &[
                "-n",
                "3",
                "--topology",
                "bindings-tests/capacity_topology.xml",
                "--provider",
                provider,
                "--",
                path_str(&exe),
            ],
            &[],
            variant.sanitized(),
        );
        run.succeeded().has(&[
            "[1] PASS capacity (rank 1): ",
            "[2] PASS capacity (rank 2): ",
        ]);
    }
}

/// A C role that calls sat_role_failed: its sat_bootstrap returns
/// SAT_ERR_ROLE with the reason, its open scope publishes nothing, and
/// satrun exits non-zero, over shm and tcp.
#[test]
fn a_c_role_that_fails_fails_the_run() {
    let exe = bindings(Shared).join("lifetimes");
    for provider in PROVIDERS {
        let run = three_processes(&exe, provider, &["--fail"], &[], false);
        assert!(
            !run.out.status.success(),
            "satrun succeeded:
{}",
            run.context()
        );
        run.has(&[
            "[2] lifetimes: sat_bootstrap gave -9 (a role or handler failed): role 1 failed: \
             the frame was damaged",
        ]);
        assert!(
            run.stderr.contains("rank 2 (") && run.stderr.contains("exited with status 3"),
            "satrun does not report rank 2's failure:\n{}",
            run.context()
        );
    }
}

/// `satrun --enable-recovery` with a C program: a client killed inside its
/// write scope (rank 3) is lost, the survivors' barrier of every client
/// fails with SAT_ERR_PROCESS_LOST instead of waiting for it, and the counter
/// holds their increments and the victim's released ones, over shm and tcp,
/// through host slots and messages, and sanitized.
fn recovery(variant: Variant) {
    let exe = bindings(variant).join("recovery");
    for provider in PROVIDERS {
        for segments in ["on", "off"] {
            let run = satrun(
                5,
                ".",
                &[
                    "--enable-recovery",
                    "-n",
                    "5",
                    "--topology",
                    "bindings-tests/topology.xml",
                    "--provider",
                    provider,
                    "--",
                    path_str(&exe),
                ],
                &[("SAT_HOST_SEGMENTS", segments)],
                variant.sanitized(),
            );
            assert!(!run.out.status.success(), "{}", run.context());
            run.has(&[
                "[3] rank 3 dies inside its write scope",
                "[2] rank 2: counter 244, expected 244",
                "[4] rank 4: counter 244, expected 244",
                "[2] PASS recovery (rank 2): ",
                "[4] PASS recovery (rank 4): ",
            ]);
            assert!(
                run.stderr
                    .contains("was killed by signal SIGKILL (9); the run goes on"),
                "{}",
                run.context()
            );
        }
    }
}

#[test]
fn a_c_client_killed_in_its_write_scope_leaves_the_others_going() {
    recovery(Shared);
}

#[test]
fn a_c_client_killed_in_its_write_scope_sanitized() {
    recovery(StaticAsan);
}

/// "1" when the libsat under test exports the encryption layer's calls
/// (it was built with feature `abe`), else "0": what sat_has_encryption()
/// must say.
fn library_has_encryption() -> &'static str {
    let out = command("nm")
        .args(["-D", "--defined-only"])
        .arg(artifacts().lib.join("libsat.so"))
        .output()
        .expect("nm (binutils) lists libsat's symbols");
    assert!(
        out.status.success(),
        "nm -D libsat.so: {}",
        text(&out.stderr)
    );
    if text(&out.stdout).contains(" sat_abe_load_key") {
        "1"
    } else {
        "0"
    }
}

/// logging.c: the library's log lines (here the bootstrap's debug line of
/// each process) never reach stdout: they go to stderr, or to the handler
/// an application installs with sat_set_log_handler, with their level and
/// the application's pointer. sat_abi_version and sat_has_encryption
/// describe the libsat loaded.
#[test]
fn log_lines_go_to_stderr_or_to_the_applications_handler() {
    let exe = bindings(Shared).join("logging");
    let env = [("SAT_EXPECT_ENCRYPTION", library_has_encryption())];
    for provider in PROVIDERS {
        let run = three_processes(&exe, provider, &["stderr"], &env, false);
        run.succeeded().has(&[
            "[1] PASS logging role (rank 1): ",
            "[2] PASS logging role (rank 2): ",
        ]);
        let bootstrap = |s: &str| s.lines().filter(|l| l.contains("Bootstrap SAT")).count();
        assert_eq!(
            bootstrap(&run.stdout),
            0,
            "log lines on stdout:\n{}",
            run.context()
        );
        assert_eq!(bootstrap(&run.stderr), 3, "stderr:\n{}", run.context());

        let run = three_processes(&exe, provider, &["handler"], &env, false);
        run.succeeded().has(&[
            "[1] PASS logging role (rank 1): ",
            "[2] PASS logging role (rank 2): ",
        ]);
        let handled = run
            .stdout
            .lines()
            .filter(|l| l.contains("handler 4: ") && l.contains("Bootstrap SAT"))
            .count();
        assert_eq!(handled, 3, "the handler's lines:\n{}", run.context());
        assert_eq!(
            run.stdout.matches("Bootstrap SAT").count(),
            3,
            "a line the handler did not print:\n{}",
            run.context()
        );
        assert_eq!(bootstrap(&run.stderr), 0, "stderr:\n{}", run.context());
    }
}

#[test]
fn calls_outside_a_run_fail_with_a_message() {
    for v in VARIANTS {
        outside(v);
    }
}

#[test]
fn api_shared_library() {
    api(Shared);
}

#[test]
fn api_static_library() {
    api(Static);
}

#[test]
fn api_shared_library_sanitized() {
    api(SharedAsan);
}

#[test]
fn api_static_library_sanitized() {
    api(StaticAsan);
}

#[test]
fn integrity_shared_library() {
    integrity(Shared);
}

#[test]
fn integrity_static_library() {
    integrity(Static);
}

#[test]
fn integrity_shared_library_sanitized() {
    integrity(SharedAsan);
}

#[test]
fn integrity_static_library_sanitized() {
    integrity(StaticAsan);
}

#[test]
fn chain_subscribe_shared_library() {
    chain_subscribe(Shared);
}

#[test]
fn chain_subscribe_static_library() {
    chain_subscribe(Static);
}

#[test]
fn chain_subscribe_shared_library_sanitized() {
    chain_subscribe(SharedAsan);
}

#[test]
fn chain_subscribe_static_library_sanitized() {
    chain_subscribe(StaticAsan);
}

#[test]
fn errors_shared_library() {
    errors(Shared);
}

#[test]
fn errors_static_library() {
    errors(Static);
}

#[test]
fn errors_shared_library_sanitized() {
    errors(SharedAsan);
}

#[test]
fn errors_static_library_sanitized() {
    errors(StaticAsan);
}

// ---------------------------------------------------------- examples-c

/// examples-c built by its Makefile, through pkg-config, as after
/// `make install`: the directory of the programs.
fn examples() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build_examples("examples", ""))
}

/// examples-c built the same way under AddressSanitizer and UBSan.
fn examples_sanitized() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build_examples("examples-asan", &SANITIZE.join(" ")))
}

/// examples-c's Makefile run into `<build>/<name>`, with `extra` C flags.
fn build_examples(name: &str, extra: &str) -> PathBuf {
    let a = artifacts();
    let dir = a.build.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // sat.pc for the workspace's layout (make install writes the real one).
    let pc = format!(
        "Name: sat\nDescription: SAT from the workspace (c_programs.rs)\nVersion: {}\n\
         Cflags: -I{}\nLibs: -L{lib} -Wl,-rpath,{lib} -lsat\n",
        env!("CARGO_PKG_VERSION"),
        a.include.display(),
        lib = a.lib.display()
    );
    std::fs::write(dir.join("sat.pc"), pc).unwrap();
    assert!(
        command("pkg-config").arg("--version").output().is_ok(),
        "pkg-config is missing: the examples build with it (scripts/setup.sh installs it)"
    );
    build(
        command("make")
            .arg("-C")
            .arg(root().join("examples-c"))
            .arg("-j2")
            .arg(format!("BUILD={}", dir.display()))
            .arg(format!(
                "CFLAGS=-std=c11 -O2 -g -Wall -Wextra -Wpedantic -Werror {extra}"
            ))
            .env("PKG_CONFIG_PATH", &dir),
    );
    dir
}

fn example(name: &str) -> String {
    path_str(&examples().join(name)).to_owned()
}

/// A scratch directory for a test's files, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = artifacts().build.join("scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A 24-bit BMP with rows top first (negative height), as some tools write.
fn write_bmp_top_down(path: &Path, width: u32, height: u32, bgr: &[u8]) {
    let stride = (width as usize * 3).div_ceil(4) * 4;
    let mut f = Vec::new();
    f.extend_from_slice(b"BM");
    f.extend_from_slice(&((54 + stride * height as usize) as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&54u32.to_le_bytes());
    f.extend_from_slice(&40u32.to_le_bytes());
    f.extend_from_slice(&(width as i32).to_le_bytes());
    f.extend_from_slice(&(-(height as i32)).to_le_bytes());
    f.extend_from_slice(&1u16.to_le_bytes());
    f.extend_from_slice(&24u16.to_le_bytes());
    f.extend_from_slice(&[0; 24]);
    for row in bgr.chunks(width as usize * 3) {
        f.extend_from_slice(row);
        f.resize(f.len() + stride - row.len(), 0);
    }
    std::fs::write(path, f).unwrap();
}

/// A 24-bit BMP: (width, height, BGR rows top first).
fn read_bmp(path: &Path) -> (u32, u32, Vec<u8>) {
    let f = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let le32 = |i: usize| u32::from_le_bytes(f[i..i + 4].try_into().unwrap());
    assert_eq!(&f[..2], b"BM", "{}", path.display());
    assert_eq!(u16::from_le_bytes([f[28], f[29]]), 24, "{}", path.display());
    let (offset, w, h) = (le32(10) as usize, le32(18), le32(22) as i32);
    let (height, top_down) = (h.unsigned_abs(), h < 0);
    let stride = (w as usize * 3).div_ceil(4) * 4;
    assert!(
        f.len() >= offset + stride * height as usize,
        "{}",
        path.display()
    );
    let mut pixels = Vec::new();
    for y in 0..height as usize {
        let row = if top_down { y } else { height as usize - 1 - y };
        let at = offset + row * stride;
        pixels.extend_from_slice(&f[at..at + w as usize * 3]);
    }
    (w, height, pixels)
}

/// Figures 10 to 12: an image through the S-DSM, BMP in and BMP out. Over
/// shm, a 101x67 image (rows padded, top first) comes out with the same
/// pixels; over tcp, a 1024x768 test card (36 chunks) arrives intact.
#[test]
fn prodcons_moves_an_image_through_the_sdsm() {
    let exe = example("prodcons");
    let dir = scratch("prodcons");
    let (w, h) = (101u32, 67u32);
    let pixels: Vec<u8> = (0..w * h * 3)
        .map(|i| ((i * 7 + i / 301) % 256) as u8)
        .collect();
    let (input, output) = (dir.join("in.bmp"), dir.join("out.bmp"));
    write_bmp_top_down(&input, w, h, &pixels);
    let run = satrun(
        3,
        "examples-c",
        &[
            "-n",
            "3",
            "--provider",
            "shm",
            "--",
            &exe,
            "--input",
            path_str(&input),
            "--output",
            path_str(&output),
            "--topology",
            "prodcons/1server.xml",
        ],
        &[],
        false,
    );
    run.succeeded().has(&[
        "[1] producer (rank 1): wrote a 101x67 image, 20301 bytes in 1 chunks",
        "[2] consumer (rank 2): read a 101x67 image, 20301 bytes in 1 chunks",
        "(matches), wrote ",
    ]);
    assert_eq!(
        read_bmp(&output),
        (w, h, pixels),
        "out.bmp differs from in.bmp"
    );

    let run = satrun(
        3,
        "examples-c",
        &[
            "-n",
            "3",
            "--provider",
            "tcp",
            "--",
            &exe,
            "--width",
            "1024",
            "--height",
            "768",
            "--topology",
            "prodcons/1server.xml",
        ],
        &[],
        false,
    );
    run.succeeded().has(&[
        "[1] producer (rank 1): wrote a 1024x768 image, 2359296 bytes in 36 chunks from chunk 16",
        "[2] consumer (rank 2): read a 1024x768 image, 2359296 bytes in 36 chunks",
    ]);
    let sums: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.split("checksum ").nth(1)?.get(..8))
        .collect();
    assert!(
        sums.len() == 2 && sums[0] == sums[1],
        "checksums {sums:?}:\n{}",
        run.context()
    );
}

/// Figure 7: each role reads the symbol the other writes, whichever runs first.
#[test]
fn symbols_figure_7() {
    let exe = example("symbols");
    for provider in PROVIDERS {
        satrun(
            3,
            "examples-c",
            &[
                "-n",
                "3",
                "--topology",
                "symbols/topology.xml",
                "--provider",
                provider,
                "--",
                &exe,
            ],
            &[],
            false,
        )
        .succeeded()
        .has(&[
            "[1] role 1 (rank 1): wrote and read back \"symbol_name\" (1000 ints)",
            "[1] role 1 (rank 1): read uuid-921b4274-84ad-4b04-ac75-f9738da84039: \
             \"written by role 2 for role 1\"",
            "[2] role 2 (rank 2): wrote uuid-921b4274-84ad-4b04-ac75-f9738da84039",
            "[2] role 2 (rank 2): read \"symbol_name\" (1000 ints, as role 1 wrote them)",
        ]);
    }
}

/// Figure 8: B reads what A wrote, C what B wrote, each task in program order.
#[test]
fn sync_figure_8() {
    let exe = example("sync");
    for provider in PROVIDERS {
        let run = satrun(
            5,
            "examples-c",
            &[
                "-n",
                "5",
                "--topology",
                "sync/topology.xml",
                "--provider",
                provider,
                "--",
                &exe,
            ],
            &[],
            false,
        );
        run.succeeded()
            .in_order(&[
                "[2] A: wrote 100",
                "[2] A: woke rendezvous 2",
                "[2] A: through the barrier",
            ])
            .in_order(&[
                "[3] B: read 100",
                "[3] B: wrote 200",
                "[3] B: through the barrier",
            ])
            .has(&["[4] C: read 200"]);
    }
}

/// Figure 9: the handler sees the publication, answers, unsubscribes; the
/// publisher reads the answer; the run ends by itself.
#[test]
fn pubsub_figure_9() {
    let exe = example("pubsub");
    for provider in PROVIDERS {
        satrun(
            3,
            "examples-c",
            &[
                "-n",
                "3",
                "--topology",
                "pubsub/topology.xml",
                "--provider",
                provider,
                "--",
                &exe,
            ],
            &[],
            false,
        )
        .succeeded()
        .in_order(&[
            "[1] publisher: published 1",
            "[1] publisher: read 2: \"subscriber wrote 2\"",
        ])
        .in_order(&[
            "[2] subscriber: subscribed",
            "[2] handler: call 1, read 1: \"publisher wrote 1\"",
            "[2] subscriber: the handler ran 1 time(s)",
        ]);
    }
}

/// A binary PGM.
fn write_pgm(path: &Path, width: u32, height: u32, gray: &[u8]) {
    let mut f = format!("P5\n# c_programs.rs\n{width} {height}\n255\n").into_bytes();
    f.extend_from_slice(gray);
    std::fs::write(path, f).unwrap();
}

/// Section 3.2: every frame processed exactly once by one of three tasks,
/// right, and the drawn line found; over shm with result frames written as
/// BMP, over tcp as separate programs (MPMD, as in Figure 12), and from a
/// PGM sequence on disk.
/// The video pipeline under every built-in protocol (`--protocol`, which
/// `make bench-protocols` uses), over shm with `SAT_HOST_SEGMENTS=off` (the
/// protocols' own messages): every frame comes out once and right.
#[test]
fn videostream_under_every_protocol() {
    let exe = example("videostream");
    for protocol in ["home-only", "mesi", "mesi-e", "update", "hlrc", "learned"] {
        let run = satrun(
            7,
            "examples-c",
            &[
                "-n",
                "7",
                "--topology",
                "videostream/topology.xml",
                "--provider",
                "shm",
                "--",
                &exe,
                "--frames",
                "8",
                "--width",
                "160",
                "--height",
                "120",
                "--protocol",
                protocol,
            ],
            &[("SAT_HOST_SEGMENTS", "off")],
            false,
        );
        run.succeeded().has(&[
            "[2] input: 8 frames given and consumed",
            "[6] output: 8 frames, each exactly once, 8 right; the drawn line found in 8 of 8",
        ]);
    }
    let refused = satrun(
        7,
        "examples-c",
        &[
            "-n",
            "7",
            "--topology",
            "videostream/topology.xml",
            "--",
            &exe,
            "--protocol",
            "msi",
        ],
        &[],
        false,
    );
    assert!(
        !refused.out.status.success() && refused.stderr.contains("--protocol takes home-only"),
        "{}",
        refused.context()
    );
}

/// The pipeline over shm with the balancing of `sat-core/src/balance.rs`:
/// on a machine of 2 cores or more its three computing processes share the
/// cores, and the processes about to sleep bring one over (the debug stream
/// counts the moves); every frame still comes out once and right. With
/// `SAT_BALANCE=off` nobody balances.
#[test]
fn videostream_balances_the_host_cores() {
    let exe = example("videostream");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run_with = |balance: &str| {
        satrun(
            5,
            ".",
            &[
                "-n",
                "5",
                "--topology",
                "bench/pipeline/sat-1server.xml",
                "--provider",
                "shm",
                "--",
                &exe,
                "--frames",
                "100",
                "--width",
                "640",
                "--height",
                "480",
            ],
            &[
                (
                    "SAT_LOG",
                    "sat_core::bootstrap=debug,sat_core::balance=debug",
                ),
                ("SAT_BALANCE", balance),
            ],
            false,
        )
    };
    let moves = |run: &Run| -> Vec<u64> {
        run.stderr
            .lines()
            .filter_map(|l| {
                l.split("balance: brought a peer to this process's core ")
                    .nth(1)
            })
            .map(|rest| rest.trim_end_matches(" times").parse().unwrap())
            .collect()
    };
    let on = run_with("on");
    on.succeeded()
        .has(&["[4] output: 100 frames, each exactly once, 100 right"]);
    let counts = moves(&on);
    assert_eq!(
        counts.len(),
        5,
        "each client's role thread and the server's loop report: {}",
        on.context()
    );
    if cores >= 2 {
        assert!(
            counts.iter().sum::<u64>() > 0,
            "three computing processes on {cores} cores, and no move: {}",
            on.context()
        );
    }
    let off = run_with("off");
    off.succeeded()
        .has(&["[4] output: 100 frames, each exactly once, 100 right"]);
    assert!(moves(&off).is_empty(), "SAT_BALANCE=off: {}", off.context());
}

#[test]
fn videostream_section_3_2() {
    let exe = example("videostream");
    let dir = scratch("videostream");

    // shm: 12 synthetic frames, written out.
    let pattern = dir.join("frame%03d.bmp");
    let run = satrun(
        7,
        "examples-c",
        &[
            "-n",
            "7",
            "--topology",
            "videostream/topology.xml",
            "--provider",
            "shm",
            "--",
            &exe,
            "--frames",
            "12",
            "--output",
            path_str(&pattern),
        ],
        &[],
        false,
    );
    run.succeeded().has(&[
        "[2] input: 12 frames of 320x240 for 3 processing tasks",
        "[2] input: 12 frames given and consumed",
        "[6] output: 12 frames, each exactly once, 12 right; the drawn line found in 12 of 12",
    ]);
    let done = run.numbers_after(": processed ");
    assert!(
        done.len() == 3 && done.iter().sum::<u64>() == 12,
        "the tasks processed {done:?}:\n{}",
        run.context()
    );
    for i in 0..12 {
        let (w, h, px) = read_bmp(&dir.join(format!("frame{i:03}.bmp")));
        assert_eq!((w, h), (320, 240));
        let red = px.chunks(3).filter(|p| *p == [0, 0, 255]).count();
        assert!(red > 100, "frame {i}: {red} pixels of a detected line");
    }

    // tcp: the three roles as separate programs of one run (here the same one).
    let args = ["--frames", "8", "--width", "160", "--height", "120"];
    let mut mpmd = vec![
        "--topology",
        "videostream/topology.xml",
        "--provider",
        "tcp",
    ];
    for (k, n) in ["3", "3", "1"].into_iter().enumerate() {
        if k > 0 {
            mpmd.push(":");
        }
        mpmd.extend(["-n", n, exe.as_str()]);
        mpmd.extend(args);
    }
    satrun(7, "examples-c", &mpmd, &[], false)
        .succeeded()
        .has(&[
            "[2] input: 8 frames of 160x120 for 3 processing tasks",
            "[6] output: 8 frames, each exactly once, 8 right; the drawn line found in 8 of 8",
        ]);

    // shm: a PGM sequence of 5 frames (asking for up to 100).
    let (w, h) = (96u32, 64u32);
    for i in 0..5u32 {
        let gray: Vec<u8> = (0..w * h)
            .map(|p| {
                let (x, y) = (p % w, p / w);
                if (x as i32 - y as i32 - 10 * i as i32).abs() < 2 {
                    220
                } else {
                    40
                }
            })
            .collect();
        write_pgm(&dir.join(format!("in{i}.pgm")), w, h, &gray);
    }
    let (input, output) = (dir.join("in%d.pgm"), dir.join("out%02d.pgm"));
    satrun(
        7,
        "examples-c",
        &[
            "-n",
            "7",
            "--topology",
            "videostream/topology.xml",
            "--",
            &exe,
            "--frames",
            "100",
            "--input",
            path_str(&input),
            "--output",
            path_str(&output),
        ],
        &[],
        false,
    )
    .succeeded()
    .has(&[
        "[2] input: 5 frames of 96x64 for 3 processing tasks",
        "[6] output: 5 frames, each exactly once",
    ]);
    // The same sequence through the sequential reference: the same files.
    let reference = dir.join("ref%02d.pgm");
    let out = run_bounded(command(&exe).args([
        "--reference",
        "--frames",
        "100",
        "--input",
        path_str(&input),
        "--output",
        path_str(&reference),
    ]));
    assert!(
        out.status.success()
            && text(&out.stdout).contains("reference: 5 frames of 96x64, processed sequentially\n"),
        "the reference run:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    for i in 0..5 {
        let f = std::fs::read(dir.join(format!("out{i:02}.pgm"))).unwrap();
        let header = b"P5\n96 64\n255\n";
        assert!(f.starts_with(header) && f.len() == header.len() + 96 * 64);
        assert!(
            f == std::fs::read(dir.join(format!("ref{i:02}.pgm"))).unwrap(),
            "out{i:02}.pgm differs from the reference's ref{i:02}.pgm"
        );
    }
}

/// The size of a 24-bit BMP of 640x480 (rows of 1920 bytes, no padding).
const BMP_640X480: usize = 54 + 640 * 3 * 480;

/// The C ABI issue's video pipeline: 100 frames of 640x480 through 1 input,
/// 2 processing and 1 output roles (and 2 servers), over shm and over tcp;
/// every result frame the output role writes is byte-for-byte the one the
/// same program's sequential reference mode (`--reference`: one plain
/// process, no S-DSM, the same frames and processing) writes, and the output
/// role got each frame exactly once.
#[test]
fn videostream_640x480_100_frames_equal_the_sequential_reference() {
    const FRAMES: usize = 100;
    let exe = example("videostream");
    let size = ["--frames", "100", "--width", "640", "--height", "480"];

    // The reference, once for both providers.
    let ref_dir = scratch("videostream-reference");
    let started = std::time::Instant::now();
    let out = run_bounded(
        command(&exe)
            .arg("--reference")
            .args(size)
            .arg("--output")
            .arg(ref_dir.join("frame%03d.bmp")),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success()
            && stdout.contains(
                "reference: 100 frames of 640x480, processed sequentially; \
                 the drawn line found in 100 of 100\n"
            ),
        "the reference run:\n{stdout}{stderr}"
    );
    eprintln!("reference: {:?}", started.elapsed());
    let reference: Vec<Vec<u8>> = (0..FRAMES)
        .map(|i| {
            let path = ref_dir.join(format!("frame{i:03}.bmp"));
            let f = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(f.len(), BMP_640X480, "{}", path.display());
            // Not a blank frame: the lines found are drawn in red.
            let (w, h, px) = read_bmp(&path);
            assert_eq!((w, h), (640, 480));
            let red = px.chunks(3).filter(|p| *p == [0, 0, 255]).count();
            assert!(
                red > 200,
                "reference frame {i}: {red} pixels of a detected line"
            );
            f
        })
        .collect();
    assert_eq!(std::fs::read_dir(&ref_dir).unwrap().count(), FRAMES);

    for provider in PROVIDERS {
        let dir = scratch(&format!("videostream-{provider}"));
        let pattern = dir.join("frame%03d.bmp");
        let mut args = vec![
            "-n",
            "6",
            "--topology",
            "videostream/2workers.xml",
            "--provider",
            provider,
            "--",
            &exe,
        ];
        args.extend(size);
        args.extend(["--output", path_str(&pattern)]);
        let started = std::time::Instant::now();
        let run = satrun(6, "examples-c", &args, &[], false);
        eprintln!("{provider}: {:?}", started.elapsed());
        run.succeeded().has(&[
            "[2] input: 100 frames of 640x480 for 2 processing tasks",
            "[2] input: 100 frames given and consumed",
            "[5] output: 100 frames, each exactly once, 100 right; \
             the drawn line found in 100 of 100",
        ]);
        // Both processing tasks took part, 100 frames between them.
        let done = run.numbers_after(": processed ");
        assert!(
            done.len() == 2 && done.iter().all(|&n| n > 0) && done.iter().sum::<u64>() == 100,
            "{provider}: the tasks processed {done:?}:\n{}",
            run.context()
        );
        // The output role reported each frame exactly once, from task 0 or 1.
        let got: Vec<(usize, u64)> = run
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("[5] output: got frame "))
            .map(|rest| {
                let mut w = rest.split(" from task ");
                let id = w.next().and_then(|n| n.parse().ok());
                let task = w.next().and_then(|n| n.parse().ok());
                match (id, task) {
                    (Some(id), Some(task)) => (id, task),
                    _ => panic!("{provider}: a bad line {rest:?}:\n{}", run.context()),
                }
            })
            .collect();
        let mut ids: Vec<usize> = got.iter().map(|&(id, _)| id).collect();
        ids.sort_unstable();
        assert!(
            ids == (0..FRAMES).collect::<Vec<_>>() && got.iter().all(|&(_, t)| t < 2),
            "{provider}: the output role reported {got:?}:\n{}",
            run.context()
        );
        // Every result frame, and only those, equal to the reference's.
        for (i, want) in reference.iter().enumerate() {
            let path = dir.join(format!("frame{i:03}.bmp"));
            let f = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{provider}: {}: {e}", path.display()));
            assert!(
                f == *want,
                "{provider}: {} differs from the reference's frame{i:03}.bmp",
                path.display()
            );
        }
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            FRAMES,
            "{provider}: files in {}",
            dir.display()
        );
        // 92 MB a provider: not kept once checked.
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&ref_dir);
}

// ------------------------------------------------------ the service mode

/// `satrun --serve` on a free port, stopped with SIGTERM when dropped.
struct Service {
    child: std::process::Child,
    address: String,
    dir: PathBuf,
}

impl Service {
    fn start(provider: &str) -> Service {
        let dir = artifacts()
            .build
            .join(format!("service-{provider}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the service's directory");
        let address_file = dir.join("address");
        let _ = std::fs::remove_file(&address_file);
        let log = std::fs::File::create(dir.join("log")).expect("create the log");
        let mut child = command(&artifacts().satrun)
            .args(["--serve", "--servers", "2", "--provider", provider])
            .arg("--address-file")
            .arg(&address_file)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start satrun --serve");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let address = loop {
            if let Ok(a) = std::fs::read_to_string(&address_file) {
                break a.trim().to_owned();
            }
            let running = child.try_wait().expect("poll satrun").is_none();
            assert!(
                running && std::time::Instant::now() < deadline,
                "the service did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Service {
            child,
            address,
            dir,
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid and a signal touches no memory.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("wait for the service");
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&self.dir);
        if !std::thread::panicking() {
            assert_eq!(status.code(), Some(0), "the service's stop:\n{log}");
        }
    }
}

/// A C process attaches to a running service with `sat_connect` (no
/// satrun, no roles), writes a chain and a symbol, detaches and exits; a
/// C process started afterwards attaches and finds both.
#[test]
fn c_processes_attach_to_a_service_and_find_what_others_left() {
    for variant in [Shared, SharedAsan] {
        let exe = bindings(variant).join("service");
        for provider in PROVIDERS {
            let service = Service::start(provider);
            for mode in ["produce", "consume"] {
                let mut cmd = command(&exe);
                cmd.args([mode, service.address.as_str()]);
                if variant.sanitized() {
                    sanitizer_env(&mut cmd);
                }
                let out = run_bounded(&mut cmd);
                let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
                assert!(
                    out.status.success()
                        && stdout.contains(&format!("PASS {mode}: "))
                        && !stderr.contains("Sanitizer"),
                    "{} {provider} {mode}:\n{stdout}{stderr}",
                    variant.name()
                );
            }
        }
    }
}

/// A C role that calls `exit(0)` leaves a line on its own stderr saying so,
/// and satrun names that rank as the one that failed the run, not the
/// server that lost it (whose exit status is the first failure it sees
/// otherwise).
#[test]
fn a_c_process_that_exits_in_its_role_says_so() {
    let exe = bindings(Shared).join("signals");
    let run = three_processes(&exe, "shm", &["exit"], &[], false);
    let all = format!("{}{}", run.stdout, run.stderr);
    let named = all.lines().any(|l| {
        l.starts_with("satrun: rank 2 (")
            && l.ends_with(
                "exited with status 0 inside its role (exit() or a return from main while \
                 sat_bootstrap ran it)",
            )
    });
    assert!(
        !run.out.status.success() && named && !all.contains("satrun: rank 0"),
        "{}",
        run.context()
    );
    assert!(
        all.contains(
            "[2] SAT: this process exited (exit() or a return from main) while \
             sat_bootstrap ran its role"
        ),
        "{}",
        run.context()
    );
    assert!(
        !all.contains("[1] SAT: this process exited"),
        "{}",
        run.context()
    );
}

/// signals.c attached to a service: a SIGTERM handler the program set
/// before `sat_connect` gets SIGTERM, and a crash after it is a death by
/// SIGSEGV (where libfabric's psm provider is installed, its handler used
/// to print a backtrace and exit with status 1 instead).
#[test]
fn a_c_process_attached_to_a_service_keeps_its_signals() {
    use std::os::unix::process::ExitStatusExt;
    let exe = bindings(Shared).join("signals");
    for provider in PROVIDERS {
        let service = Service::start(provider);
        let out = run_bounded(command(&exe).args(["attached", service.address.as_str()]));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success() && stdout.contains("PASS signals attached: "),
            "{provider} attached:\n{stdout}{stderr}"
        );
        let out = run_bounded(command(&exe).args(["crash", service.address.as_str()]));
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSEGV),
            "{provider} crash: {:?}\n{}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

// ------------------------------------------- under the memory checkers

/// How a program is watched: AddressSanitizer and UBSan (built in), or
/// valgrind's memcheck (around a plain build).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Checker {
    Sanitizers,
    Memcheck,
}

/// A C program of the suite, as a run of satrun: its processes, where it
/// runs, satrun's options, the program's arguments, and lines it prints.
struct Checked {
    exe: PathBuf,
    np: usize,
    dir: &'static str,
    options: Vec<&'static str>,
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
    expected: Vec<&'static str>,
}

/// memcheck's options: any error fails the process with status 97, and
/// each process prints its ERROR SUMMARY and its blocks definitely lost
/// (checked below). Leaks are not counted as errors, for the sake of
/// lifetimes.c's fork() child: there, what the parent's other threads own
/// is reported lost. The child is silent, and its exit status still carries
/// any other error (97).
const MEMCHECK: [&str; 5] = [
    "--error-exitcode=97",
    "--leak-check=full",
    "--show-leak-kinds=definite",
    "--errors-for-leak-kinds=none",
    "--child-silent-after-fork=yes",
];

/// service.c under memcheck, attached to a service (no satrun around it):
/// no error, nothing definitely lost.
#[test]
fn a_c_process_attached_to_a_service_is_clean_under_memcheck() {
    assert!(
        command("valgrind").arg("--version").output().is_ok(),
        "valgrind is missing: scripts/setup.sh --test installs it"
    );
    let exe = bindings(Shared).join("service");
    let service = Service::start("shm");
    for mode in ["produce", "consume"] {
        let out = run_bounded(
            command("valgrind")
                .args(MEMCHECK)
                .arg(&exe)
                .args([mode, service.address.as_str()])
                .env("SAT_TEST_UNDER_MEMCHECK", "1"),
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success()
                && stdout.contains(&format!("PASS {mode}: "))
                && stderr.contains("ERROR SUMMARY: 0 errors")
                && !stderr
                    .lines()
                    .any(|l| l.contains("definitely lost: ") && !l.contains(" 0 bytes")),
            "{mode} under memcheck ({:?}):\n{stdout}{stderr}",
            out.status
        );
    }
}

fn run_checked(c: &Checked, checker: Checker, provider: &str) {
    let np = c.np.to_string();
    let mut args: Vec<String> = vec!["-n".into(), np];
    args.extend(c.options.iter().map(|s| s.to_string()));
    args.extend(["--provider".into(), provider.into(), "--".into()]);
    let mut env = c.env.clone();
    if checker == Checker::Memcheck {
        assert!(
            command("valgrind").arg("--version").output().is_ok(),
            "valgrind is missing: scripts/setup.sh --test installs it"
        );
        args.push("valgrind".into());
        args.extend(MEMCHECK.iter().map(|s| s.to_string()));
        env.push(("SAT_TEST_UNDER_MEMCHECK", "1"));
    }
    args.push(path_str(&c.exe).to_owned());
    args.extend(c.args.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = satrun(c.np, c.dir, &args, &env, checker == Checker::Sanitizers);
    run.succeeded().has(&c.expected);
    if checker == Checker::Memcheck {
        let output = format!("{}{}", run.stdout, run.stderr);
        let clean = output.matches("ERROR SUMMARY: 0 errors").count();
        let summaries = output.matches("ERROR SUMMARY: ").count();
        assert!(
            clean == c.np && summaries == c.np,
            "{} of {} processes clean under memcheck ({summaries} summaries):\n{}",
            clean,
            c.np,
            run.context()
        );
        let lost: Vec<&str> = output
            .lines()
            .filter(|l| l.contains("definitely lost: ") && !l.contains("definitely lost: 0 bytes"))
            .collect();
        assert!(lost.is_empty(), "memory lost: {lost:?}\n{}", run.context());
    }
}

/// The bindings tests, the paper's figures (figures.c: Figures 4 to 10) and
/// the examples of examples-c, built for `checker`.
fn suite(checker: Checker) -> Vec<Checked> {
    let variant = match checker {
        Checker::Sanitizers => SharedAsan,
        Checker::Memcheck => Shared,
    };
    let examples = match checker {
        Checker::Sanitizers => examples_sanitized(),
        Checker::Memcheck => examples(),
    };
    let bindings = bindings(variant);
    let bind = |name: &str, np, options: Vec<&'static str>, expected: Vec<&'static str>| Checked {
        exe: bindings.join(name),
        np,
        dir: ".",
        options,
        args: vec![],
        env: vec![],
        expected,
    };
    let example = |name: &str, np, topology: &'static str, args: &[&str], expected| Checked {
        exe: examples.join(name),
        np,
        dir: "examples-c",
        options: vec!["--topology", topology],
        args: args.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        expected,
    };
    let topology = vec!["--topology", "bindings-tests/topology.xml"];
    let mut errors = bind(
        "errors",
        3,
        vec![],
        vec!["[1] PASS errors (rank 1): ", "[2] PASS errors (rank 2): "],
    );
    errors.env.push(("SAT_LOOKUP_TIMEOUT", "1"));
    let mut logging = bind(
        "logging",
        3,
        vec![],
        vec![
            "[1] PASS logging role (rank 1): ",
            "[2] PASS logging role (rank 2): ",
        ],
    );
    logging.args.push("handler".into());
    logging
        .env
        .push(("SAT_EXPECT_ENCRYPTION", library_has_encryption()));
    vec![
        bind(
            "api",
            5,
            topology.clone(),
            vec![
                "[2] PASS api role (rank 2): ",
                "[4] PASS api handlers (client 2): ",
            ],
        ),
        errors,
        bind(
            "integrity",
            5,
            vec!["--topology", "bindings-tests/integrity_topology.xml"],
            vec!["[2] PASS integrity: ", "[4] PASS integrity: "],
        ),
        bind(
            "chain_subscribe",
            5,
            topology,
            vec!["[2] PASS chain_subscribe role (client 0): "],
        ),
        bind(
            "lifetimes",
            3,
            vec![],
            vec![
                "[1] PASS lifetimes role (rank 1): ",
                "[2] PASS lifetimes after the run: ",
            ],
        ),
        logging,
        bind(
            "figures",
            5,
            vec!["--topology", "sat-core/topologies/three-tasks.xml"],
            vec![
                "[2] figure 4: MALLOC, MALLOC_LST, LOOKUP, LOOKUP_LST ok",
                "[4] figure 8: role 3 displays \"AB\"",
                "[3] figure 9: handler ran with params \"figure 9 params\"",
                "[4] role 3 done",
            ],
        ),
        example(
            "symbols",
            3,
            "symbols/topology.xml",
            &[],
            vec!["[2] role 2 (rank 2): read \"symbol_name\" (1000 ints, as role 1 wrote them)"],
        ),
        example("sync", 5, "sync/topology.xml", &[], vec!["[4] C: read 200"]),
        example(
            "pubsub",
            3,
            "pubsub/topology.xml",
            &[],
            vec!["[2] subscriber: the handler ran 1 time(s)"],
        ),
        example(
            "prodcons",
            3,
            "prodcons/1server.xml",
            &["--width", "160", "--height", "120"],
            vec!["[2] consumer (rank 2): read a 160x120 image"],
        ),
        example(
            "videostream",
            7,
            "videostream/topology.xml",
            &["--frames", "4", "--width", "160", "--height", "120"],
            vec!["[6] output: 4 frames, each exactly once, 4 right"],
        ),
    ]
}

/// The C suite under AddressSanitizer and UBSan, over shm and tcp: no
/// error, no leak (bindings-tests/lsan.supp lists libfabric's own).
#[test]
fn c_tests_figures_and_examples_under_asan_and_ubsan() {
    for c in suite(Checker::Sanitizers) {
        for provider in PROVIDERS {
            run_checked(&c, Checker::Sanitizers, provider);
        }
    }
}

/// The C suite under valgrind's memcheck, over shm (tcp's paths in libsat
/// are the sanitizers' above; under memcheck each run is some 20 times
/// slower): every process reports zero errors and no block definitely lost.
#[test]
fn c_tests_figures_and_examples_under_valgrind_memcheck() {
    for c in suite(Checker::Memcheck) {
        run_checked(&c, Checker::Memcheck, "shm");
    }
}
