//! include/sat.h is what the pinned cbindgen makes of sat-capi/src today,
//! its version macros are Cargo.toml's, and both headers compile cleanly as
//! C (twice included) and C++.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The cbindgen that writes include/sat.h; scripts/setup.sh installs it.
const CBINDGEN_VERSION: &str = "0.29.4";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn committed_header() -> String {
    std::fs::read_to_string(root().join("include/sat.h")).expect("read include/sat.h")
}

/// A scratch directory removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sat-header-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// cbindgen from PATH, else from cargo's bin folder (where setup installs it).
fn cbindgen() -> PathBuf {
    let in_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("cbindgen"))
            .find(|p| p.is_file())
    });
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let in_cargo = cargo_home
        .map(|h| h.join("bin/cbindgen"))
        .filter(|p| p.is_file());
    in_path.or(in_cargo).unwrap_or_else(|| {
        panic!(
            "cbindgen {CBINDGEN_VERSION} is missing (not in PATH nor in cargo's bin folder): \
             run scripts/setup.sh (make test does), or \
             cargo install cbindgen --version {CBINDGEN_VERSION} --locked"
        )
    })
}

#[test]
fn the_pin_is_the_one_setup_installs() {
    let setup = std::fs::read_to_string(root().join("scripts/setup.sh")).unwrap();
    assert!(
        setup.contains(&format!("CBINDGEN_VERSION={CBINDGEN_VERSION}\n")),
        "scripts/setup.sh must pin cbindgen {CBINDGEN_VERSION}, as this test does"
    );
    assert!(
        committed_header().contains(&format!("Generated with cbindgen:{CBINDGEN_VERSION}")),
        "include/sat.h was not written by cbindgen {CBINDGEN_VERSION}: run make header"
    );
}

#[test]
fn sat_h_is_what_cbindgen_generates() {
    let exe = cbindgen();
    let version = run(Command::new(&exe).arg("--version"));
    let version = text(&version.stdout);
    assert_eq!(
        version.split_whitespace().nth(1),
        Some(CBINDGEN_VERSION),
        "{} is {}; the header needs cbindgen {CBINDGEN_VERSION}: run scripts/setup.sh",
        exe.display(),
        version.trim()
    );
    let scratch = Scratch::new("generate");
    let fresh = scratch.0.join("sat.h");
    run(Command::new(&exe)
        .current_dir(root())
        .args([
            "--quiet",
            "--config",
            "sat-capi/cbindgen.toml",
            "--crate",
            "sat-capi",
            "--output",
        ])
        .arg(&fresh));
    let fresh = std::fs::read_to_string(&fresh).unwrap();
    let committed = committed_header();
    if fresh != committed {
        let line = fresh
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| fresh.lines().count().min(committed.lines().count()));
        panic!(
            "include/sat.h is not what sat-capi/src generates (first difference at line {}):\n\
             generated: {:?}\ncommitted: {:?}\nrun `make header` and commit include/sat.h",
            line + 1,
            fresh.lines().nth(line).unwrap_or("<end of file>"),
            committed.lines().nth(line).unwrap_or("<end of file>"),
        );
    }
}

/// The value of `#define NAME value` in the header.
fn define(header: &str, name: &str) -> String {
    header
        .lines()
        .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
        .unwrap_or_else(|| panic!("include/sat.h defines no {name}"))
        .trim()
        .to_string()
}

#[test]
fn version_macros_and_sat_version_are_cargo_tomls() {
    let header = committed_header();
    for (name, cargo) in [
        ("SAT_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("SAT_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("SAT_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        assert_eq!(define(&header, name), cargo, "{name} in include/sat.h");
    }
    // SAT_VERSION, as a C compiler sees it, and sat_version() at run time.
    let scratch = Scratch::new("version");
    let c = scratch.0.join("version.c");
    std::fs::write(
        &c,
        "#include <stdio.h>\n#include \"sat.h\"\nint main(void) { puts(SAT_VERSION); return 0; }\n",
    )
    .unwrap();
    let exe = scratch.0.join("version");
    run(Command::new("cc")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-I",
        ])
        .arg(root().join("include"))
        .arg(&c)
        .arg("-o")
        .arg(&exe));
    let printed = run(&mut Command::new(&exe));
    assert_eq!(text(&printed.stdout).trim(), env!("CARGO_PKG_VERSION"));
    // SAFETY: sat_version returns a static NUL-terminated string.
    let lib = unsafe { std::ffi::CStr::from_ptr(sat::library::sat_version()) };
    assert_eq!(lib.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn headers_compile_as_strict_c_twice_included_and_as_cpp() {
    let scratch = Scratch::new("compile");
    let c = scratch.0.join("both.c");
    // Every declaration used, so that the compiler checks the types.
    std::fs::write(
        &c,
        r#"#include "sat.h"
#include "sat_compat.h"
#include "sat.h"
#include "sat_compat.h"
static void role(_SAT_Bootstrap_t *b) { (void)b; }
static void handler(Chunk_t *c, void *p) { (void)c; (void)p; }
int use(int argc, char **argv);
int use(int argc, char **argv) {
    Consistency_t *consistency = newHomeBaseMESI();
    UnsignedLongList_t *ids = SAT_LIST(1, 2, 3);
    Chunk_t *chunk = MALLOC(consistency, 1, 10);
    void *data = 0;
    size_t size = 0;
    _SAT_Roles_t roles[2] = {0, role};
    chunk = MALLOC(1, 10);
    chunk = MALLOC_LST(consistency, ids, SAT_LIST(8));
    chunk = LOOKUP(consistency, 1, 1);
    chunk = LOOKUP(1);
    chunk = LOOKUP_LST(consistency, ids);
    chunk->data[0] = 'x';
    MAP(chunk, consistency, 100, sizeof size, &size);
    return READ(chunk) + WRITE(chunk) + READWRITE(chunk) + RELEASE(chunk) + PUT(chunk) + GET(chunk)
        + initSymbolicTable(sdsm) + writeSymbol(sdsm, "s", "v", 2)
        + readSymbol(sdsm, "s", &data, &size) + SUBSCRIBE(chunk, handler, 0) + UNSUBSCRIBE(chunk)
        + rendezvous(1) + wakeup(1) + barrier(1, (unsigned)clientGetClientNr())
        + _SAT_BOOTSTRAP(roles, 0, argc, argv) + SAT_OK;
}
"#,
    )
    .unwrap();
    let include = root().join("include");
    for std in ["-std=c99", "-std=c11", "-std=gnu17"] {
        run(Command::new("cc")
            .args([
                std,
                "-Wall",
                "-Wextra",
                "-Wpedantic",
                "-Werror",
                "-fsyntax-only",
                "-I",
            ])
            .arg(&include)
            .arg(&c));
    }
    // sat.h alone is C++ too (sat_compat.h's list literals are C only).
    let cpp = scratch.0.join("sat.cpp");
    std::fs::write(
        &cpp,
        "#include \"sat.h\"\n#include \"sat.h\"\nint main() { return sat_malloc(nullptr, 1, 1) != nullptr; }\n",
    )
    .unwrap();
    run(Command::new("c++")
        .args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(&include)
        .arg(&cpp));
}

#[test]
fn bootstrap_rejects_a_pointer_for_the_roles_array() {
    let scratch = Scratch::new("pointer");
    let c = scratch.0.join("pointer.c");
    std::fs::write(
        &c,
        "#include \"sat_compat.h\"\nint f(_SAT_Roles_t *roles, int argc, char **argv);\n\
         int f(_SAT_Roles_t *roles, int argc, char **argv) {\n\
         return _SAT_BOOTSTRAP(roles, 0, argc, argv); }\n",
    )
    .unwrap();
    let out = Command::new("cc")
        .args(["-std=c99", "-fsyntax-only", "-I"])
        .arg(root().join("include"))
        .arg(&c)
        .output()
        .expect("run cc");
    assert!(
        !out.status.success(),
        "_SAT_BOOTSTRAP must not count the roles of a pointer"
    );
}

/// The encryption layer's calls and macros are declared with SAT_ABE
/// defined (strict C, and sat.h as C++), and not at all without it, so a
/// program built against a libsat without feature `abe` cannot call them.
#[test]
fn protected_calls_are_declared_only_with_sat_abe() {
    let scratch = Scratch::new("abe");
    let c = scratch.0.join("abe.c");
    std::fs::write(
        &c,
        r#"#include "sat.h"
#include "sat_compat.h"
#include "sat.h"
#include "sat_compat.h"
int use(void);
int use(void) {
    Chunk_t *chunk = sat_malloc_protected(sat_home_based_mesi(), 1, 10, "a", "a and w");
    chunk = MALLOC_PROTECTED(newHomeBaseMESI(), 1, 10, "a", "a and w");
    chunk = MALLOC_PROTECTED(1, 10, "a", "a and w");
    return sat_abe_load_key("k") + sat_abe_new_epoch(chunk, 0) + sat_abe_new_epoch(chunk, "a")
        + sat_write_symbol_protected("s", "v", 2, "a", "a and w")
        + writeSymbolProtected(sdsm, "s", "v", 2, "a", "a and w") + SAT_ERR_ACCESS_DENIED
        + SAT_ERR_INTEGRITY;
}
"#,
    )
    .unwrap();
    let include = root().join("include");
    let strict = ["-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only"];
    for std in ["-std=c99", "-std=c11"] {
        run(Command::new("cc")
            .args([std, "-DSAT_ABE"])
            .args(strict)
            .arg("-I")
            .arg(&include)
            .arg(&c));
        let out = Command::new("cc")
            .arg(std)
            .args(strict)
            .arg("-I")
            .arg(&include)
            .arg(&c)
            .output()
            .expect("run cc");
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("sat_malloc_protected"),
            "{std} without SAT_ABE: the protected calls must be undeclared:\n{stderr}"
        );
    }
    let cpp = scratch.0.join("abe.cpp");
    std::fs::write(
        &cpp,
        "#include \"sat.h\"\n#include \"sat.h\"\nint main() {\n\
         sat_chunk_t *c = sat_malloc_protected(nullptr, 1, 1, \"a\", \"a\");\n\
         return sat_abe_new_epoch(c, nullptr) + sat_abe_load_key(\"k\")\n\
         + sat_write_symbol_protected(\"s\", \"v\", 2, \"a\", \"a\"); }\n",
    )
    .unwrap();
    run(Command::new("c++")
        .args(["-std=c++11", "-DSAT_ABE"])
        .args(strict)
        .arg("-I")
        .arg(&include)
        .arg(&cpp));
}

/// Every call that returns a status or a chunk handle says, in its comment
/// in sat.h, which statuses it returns (a "Returns:" paragraph), and every
/// status-returning call is declared with the `sat_status` type, except the
/// four that return a number or a negative status.
#[test]
fn every_status_call_lists_its_statuses() {
    let header = committed_header();
    let numbers = [
        "sat_client_count",
        "sat_rank",
        "sat_role",
        "sat_server_count",
    ];
    let mut doc = String::new();
    let mut checked = 0;
    for line in header.lines() {
        if line.starts_with("/**") {
            doc.clear();
        }
        if line.starts_with(" *") || line.starts_with("/**") {
            doc.push_str(line);
            doc.push('\n');
            continue;
        }
        let Some(open) = line
            .find("sat_")
            .filter(|_| !line.starts_with(['#', ' ', '}', 't']))
        else {
            continue;
        };
        let Some(paren) = line[open..].find('(') else {
            continue;
        };
        let start = line[..open + paren]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &line[start..open + paren];
        let returns = line[..start].trim();
        if returns.starts_with("int32_t") {
            assert!(
                numbers.contains(&name),
                "{name} returns int32_t: a status call returns sat_status"
            );
            continue;
        }
        if returns.starts_with("enum sat_status") || returns.starts_with("struct sat_chunk_t") {
            assert!(
                doc.contains("Returns:") || name == "sat_last_status",
                "{name}: its comment in sat.h lists no statuses (\"Returns:\"):\n{doc}"
            );
            checked += 1;
        }
    }
    assert!(
        checked > 25,
        "only {checked} calls checked: is the header's layout as expected?"
    );
}
