//! The environment variables satrun reads itself (README, "Environment"):
//! `SAT_TOPOLOGY`, `SAT_RECOVERY` and the tuning variables it checks before
//! anything starts. Real satrun processes, with /bin/sh programs as ranks
//! (and the `exchange` example where a real run tells more).

mod common;
use common::example;
use common::launched::{satrun_under_test, Live, Output, Scratch};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The tuning variables, README "Environment".
const TUNING: [&str; 11] = [
    "SAT_CHUNK_SIZE",
    "SAT_PROGRESS",
    "SAT_SPIN_US",
    "SAT_SLEEP_MIN_NS",
    "SAT_SLEEP_MAX_NS",
    "SAT_HOST_SEGMENTS",
    "SAT_BALANCE",
    "SAT_STATS_MAX_EVENTS",
    "SAT_BOOTSTRAP_TIMEOUT",
    "SAT_RECOVERY",
    "SAT_LEASE_S",
];

/// satrun with none of the variables under test set.
fn satrun() -> Command {
    let mut cmd = Command::new(satrun_under_test());
    cmd.env_remove("SAT_PROVIDER")
        .env_remove("SAT_TOPOLOGY")
        .env_remove("SAT_SECRET");
    for var in TUNING {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn run(cmd: Command) -> Output {
    Live::start(cmd).finish()
}

fn topology(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("topologies")
        .join(name)
}

fn bad_topology(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/topology")
        .join(name)
}

/// satrun refused to start: status 2, a message, no process started (the
/// ranks would have created `marker`), nothing on stdout. Returns stderr.
fn assert_refused(o: &Output, marker: &Path) -> String {
    assert_eq!(o.status.code(), Some(2), "stderr: {}", o.stderr);
    assert!(!marker.exists(), "a rank was started: {}", o.stderr);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    assert!(o.stderr.starts_with("satrun: "), "{}", o.stderr);
    o.stderr.clone()
}

/// `satrun ARGS -- sh -c 'touch MARKER; SCRIPT'` with `env`.
fn sh_run(dir: &Scratch, args: &[&str], env: &[(&str, &str)], script: &str) -> (Output, PathBuf) {
    let marker = dir.path("marker");
    let _ = std::fs::remove_file(&marker);
    let mut cmd = satrun();
    cmd.args(args).args([
        "--",
        "sh",
        "-c",
        &format!("touch {}; {script}", marker.display()),
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    (run(cmd), marker)
}

fn lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_owned).collect();
    v.sort();
    v
}

// ---------------------------------------------------------------- SAT_TOPOLOGY

#[test]
fn sat_topology_is_the_topology_when_no_option_names_one() {
    let dir = Scratch::new("topology");
    let two = topology("two-servers.xml");
    let canonical = std::fs::canonicalize(&two).unwrap().display().to_string();
    let env = [("SAT_TOPOLOGY", two.to_str().unwrap())];

    // Sized against -n: the file's 6 entries are not 3 processes.
    let (o, marker) = sh_run(&dir, &["-n", "3"], &env, "true");
    let m = assert_refused(&o, &marker);
    assert!(
        m.contains("describes 6 processes") && m.contains("SAT_TOPOLOGY"),
        "{m}"
    );

    // With 6, the ranks get it, absolute.
    let (o, _) = sh_run(&dir, &["-n", "6"], &env, "echo $SAT_TOPOLOGY");
    assert!(o.status.success(), "{}", o.stderr);
    let want: Vec<String> = (0..6).map(|r| format!("[{r}] {canonical}")).collect();
    assert_eq!(lines(&o.stdout), want);

    // --topology, given to satrun or to the program, comes first.
    let fig = topology("figure11.xml");
    let fig = fig.to_str().unwrap();
    let (o, _) = sh_run(&dir, &["-n", "3", "--topology", fig], &env, "true");
    assert!(o.status.success(), "{}", o.stderr);
    let marker = dir.path("in-args");
    let mut cmd = satrun();
    cmd.env("SAT_TOPOLOGY", &two).args([
        "-n",
        "3",
        "sh",
        "-c",
        &format!("touch {}", marker.display()),
        "sh",
        &format!("--topology={fig}"),
    ]);
    let o = run(cmd);
    assert!(o.status.success(), "{}", o.stderr);
    assert!(marker.exists());

    // Empty is unset.
    let (o, _) = sh_run(&dir, &["-n", "2"], &[("SAT_TOPOLOGY", "")], "true");
    assert!(o.status.success(), "{}", o.stderr);
}

#[test]
fn a_bad_sat_topology_stops_satrun_before_anything_starts() {
    let dir = Scratch::new("bad-topology");
    let missing = dir.path("no-such-topology.xml");
    let malformed = bad_topology("malformed.xml");
    let duplicate = bad_topology("duplicate-id.xml");
    for (file, says) in [
        (missing.as_path(), "cannot read the topology file"),
        (malformed.as_path(), "malformed XML"),
        (duplicate.as_path(), "id 1 is used twice"),
    ] {
        let file = file.to_str().unwrap();
        let (o, marker) = sh_run(&dir, &["-n", "3"], &[("SAT_TOPOLOGY", file)], "true");
        let m = assert_refused(&o, &marker);
        assert!(
            m.contains(file) && m.contains(says) && m.contains("SAT_TOPOLOGY"),
            "{m}"
        );

        // A service takes it too, when neither --topology nor --servers
        // nor --slots is given.
        let address = dir.path("addr");
        let mut cmd = satrun();
        cmd.env("SAT_TOPOLOGY", file)
            .args(["--serve", "--address-file"])
            .arg(&address);
        let o = run(cmd);
        let m = assert_refused(&o, &address);
        assert!(m.contains(file) && m.contains("SAT_TOPOLOGY"), "{m}");
    }
}

/// The topology chooses the roles of a real run: with two-servers.xml,
/// rank 5 is a client of server 1 playing role 2 (the default topology
/// would make it a client of rank 0 playing role 1).
#[test]
fn a_real_run_takes_its_roles_from_sat_topology() {
    let mut cmd = satrun();
    cmd.env("SAT_TOPOLOGY", topology("two-servers.xml"))
        .args(["-n", "6", "--"])
        .arg(example("exchange"))
        .args(["--rounds", "1"]);
    let o = run(cmd);
    assert!(o.status.success(), "{}", o.stderr);
    assert!(
        o.stdout.contains("[5] rank 5 pid") && o.stdout.contains("ready, role 2, server 1"),
        "{}",
        o.stdout
    );
}

#[test]
fn a_service_takes_sat_topology_unless_sized_on_the_command_line() {
    let dir = Scratch::new("serve-topology");
    let address = dir.path("addr");
    for (args, says) in [
        (&[][..], "(2 servers, 4 client slots"),
        (
            &["--servers", "1", "--slots", "3"][..],
            "(1 server, 3 client slots",
        ),
    ] {
        let mut cmd = satrun();
        cmd.env("SAT_TOPOLOGY", topology("two-servers.xml"))
            .args(["--serve", "--address-file"])
            .arg(&address)
            .args(args);
        let live = Live::start(cmd);
        assert!(live.out.wait_for("\n"), "{}", live.err.all());
        live.signal(libc::SIGTERM);
        let o = live.finish();
        assert_eq!(o.status.code(), Some(0), "{}", o.stderr);
        assert!(o.stdout.contains(says), "{args:?}: {}", o.stdout);
        assert!(!address.exists());
    }
}

// ---------------------------------------------------------------- SAT_RECOVERY

#[test]
fn sat_recovery_is_read_and_checked() {
    let dir = Scratch::new("recovery");
    let show = "echo $SAT_RECOVERY";
    for (value, flag, want) in [
        (None, false, "off"),
        (Some("on"), false, "on"),
        (Some("1"), false, "on"),
        (Some("off"), false, "off"),
        (Some("0"), false, "off"),
        (Some(""), false, "off"),
        (None, true, "on"),
        (Some("on"), true, "on"),
        (Some(" 1 "), true, "on"),
    ] {
        let args: &[&str] = if flag {
            &["--enable-recovery", "-n", "1"]
        } else {
            &["-n", "1"]
        };
        let env: Vec<(&str, &str)> = value.map(|v| ("SAT_RECOVERY", v)).into_iter().collect();
        let (o, _) = sh_run(&dir, args, &env, show);
        assert!(o.status.success(), "{value:?} {flag}: {}", o.stderr);
        assert_eq!(o.stdout, format!("[0] {want}\n"), "{value:?} {flag}");
    }

    // A value that does not parse: named, with what it takes.
    let (o, marker) = sh_run(&dir, &["-n", "3"], &[("SAT_RECOVERY", "maybe")], show);
    let m = assert_refused(&o, &marker);
    assert!(
        m.contains("SAT_RECOVERY=\"maybe\" is neither 'on' (or 1) nor 'off' (or 0)"),
        "{m}"
    );

    // The flag against the variable.
    for off in ["off", "0"] {
        let (o, marker) = sh_run(
            &dir,
            &["--enable-recovery", "-n", "3"],
            &[("SAT_RECOVERY", off)],
            show,
        );
        let m = assert_refused(&o, &marker);
        assert!(
            m.contains("--enable-recovery") && m.contains(&format!("SAT_RECOVERY={off}")),
            "{m}"
        );
    }
}

/// SAT_RECOVERY=on makes satrun supervise as --enable-recovery does: a
/// client that fails is reported and the others go on.
/// A run with recovery outlives processes killed while they send, which
/// can freeze the shm provider: without a provider asked for, it runs over
/// tcp; asked for shm, satrun warns and takes it.
#[test]
fn a_run_with_recovery_defaults_to_tcp_and_warns_of_shm() {
    let dir = Scratch::new("recovery-provider");
    let show = "echo $SAT_PROVIDER";
    let (o, _) = sh_run(&dir, &["-n", "1"], &[], show);
    assert!(o.status.success(), "{}", o.stderr);
    assert_eq!(o.stdout, "[0] shm\n", "a run without recovery");
    for (args, env) in [
        (&["--enable-recovery", "-n", "1"][..], &[][..]),
        (&["-n", "1"][..], &[("SAT_RECOVERY", "on")][..]),
    ] {
        let (o, _) = sh_run(&dir, args, env, show);
        assert!(o.status.success(), "{args:?}: {}", o.stderr);
        assert_eq!(o.stdout, "[0] tcp\n", "{args:?} {env:?}");
        assert!(!o.stderr.contains("warning"), "{}", o.stderr);
    }
    let (o, _) = sh_run(
        &dir,
        &["--enable-recovery", "--provider", "shm", "-n", "1"],
        &[],
        show,
    );
    assert!(o.status.success(), "{}", o.stderr);
    assert_eq!(o.stdout, "[0] shm\n");
    assert!(
        o.stderr
            .contains("satrun: warning: a run with recovery over the shm provider"),
        "{}",
        o.stderr
    );
}

#[test]
fn sat_recovery_on_lets_the_run_outlive_a_client() {
    let dir = Scratch::new("recovery-run");
    let pid_file = dir.path("pid1");
    // Rank 1 (a client) fails with 3; the others wait until it is gone,
    // then say so and end well.
    let script = format!(
        "if [ $SAT_RANK = 1 ]; then echo $$ > {f}.tmp; mv {f}.tmp {f}; exit 3; fi; \
         while [ ! -s {f} ]; do sleep 0.02; done; \
         while kill -0 $(cat {f}) 2>/dev/null; do sleep 0.02; done; echo survived",
        f = pid_file.display()
    );
    let (o, _) = sh_run(&dir, &["-n", "3"], &[("SAT_RECOVERY", "on")], &script);
    assert_eq!(o.status.code(), Some(3), "{}", o.stderr);
    assert!(
        o.stderr.contains("the run goes on without it"),
        "{}",
        o.stderr
    );
    assert_eq!(lines(&o.stdout), ["[0] survived", "[2] survived"]);

    // Without it, rank 1's failure stops the others: here they would never
    // end by themselves (they wait for a file nobody writes), so the run
    // ending with rank 1's status is satrun stopping them. (They used to
    // wait for rank 1 to be gone, then print: a race with the stop.)
    let never = dir.path("never");
    let script = format!(
        "if [ $SAT_RANK = 1 ]; then exit 3; fi; \
         while [ ! -e {n} ]; do sleep 0.02; done; echo survived",
        n = never.display()
    );
    let (o, _) = sh_run(&dir, &["-n", "3"], &[("SAT_RECOVERY", "off")], &script);
    assert_eq!(o.status.code(), Some(3), "{}", o.stderr);
    assert!(o.stderr.contains("stopping the 2 other"), "{}", o.stderr);
    assert!(!o.stdout.contains("survived"), "{}", o.stdout);
}

// ------------------------------------------------------- the tuning variables

/// Each malformed tuning variable, as the processes would see it (and the
/// protocol advice's, and an output folder that is a file).
const BAD: [(&str, &str, &str); 9] = [
    (
        "SAT_ADAPTIVE",
        "maybe",
        "SAT_ADAPTIVE=\"maybe\": give 1 or on",
    ),
    (
        "SAT_ADVICE",
        "/nonexistent/advice.json",
        "SAT_ADVICE=/nonexistent/advice.json: cannot be read",
    ),
    (
        "SAT_STATS",
        "/dev/null",
        "SAT_STATS=\"/dev/null\" is a file, not a folder",
    ),
    (
        "SAT_LEASE_S",
        "1",
        "SAT_LEASE_S=\"1\" is not a number of seconds from 2 to 3600",
    ),
    (
        "SAT_HOST_SEGMENTS",
        "yes",
        "SAT_HOST_SEGMENTS=\"yes\" is neither 'on' nor 'off'",
    ),
    (
        "SAT_PROGRESS",
        "fast",
        "SAT_PROGRESS=\"fast\" is neither 'sleep' nor 'busy'",
    ),
    (
        "SAT_CHUNK_SIZE",
        "64k",
        "SAT_CHUNK_SIZE=\"64k\" is not a size in bytes",
    ),
    ("SAT_BOOTSTRAP_TIMEOUT", "0", "SAT_BOOTSTRAP_TIMEOUT=\"0\""),
    (
        "SAT_STATS_MAX_EVENTS",
        "-1",
        "SAT_STATS_MAX_EVENTS=\"-1\" is not a count",
    ),
];

#[test]
fn a_service_with_a_bad_tuning_variable_never_says_it_listens() {
    let dir = Scratch::new("serve-bad-env");
    let address = dir.path("addr");
    for (var, value, says) in BAD {
        let mut cmd = satrun();
        cmd.env(var, value)
            .args(["--serve", "--address-file"])
            .arg(&address);
        let o = run(cmd);
        let m = assert_refused(&o, &address);
        assert!(m.contains(says), "{var}: {m}");
    }
}

#[test]
fn a_run_with_a_bad_tuning_variable_starts_no_process() {
    let dir = Scratch::new("run-bad-env");
    for (var, value, says) in BAD {
        let (o, marker) = sh_run(&dir, &["-n", "2"], &[(var, value)], "true");
        let m = assert_refused(&o, &marker);
        assert!(m.contains(says), "{var}: {m}");
    }
    // Several at once: every one is named.
    let (o, marker) = sh_run(
        &dir,
        &["-n", "2"],
        &[("SAT_BALANCE", "always"), ("SAT_SPIN_US", "-1")],
        "true",
    );
    let m = assert_refused(&o, &marker);
    assert!(
        m.contains("SAT_BALANCE") && m.contains("SAT_SPIN_US"),
        "{m}"
    );
}
