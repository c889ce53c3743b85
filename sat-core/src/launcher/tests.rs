use super::*;

fn run_args(args: &[&str]) -> LaunchArgs {
    match parse_args(args.iter().copied()) {
        Ok(Invocation::Run(a)) => a,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn usage_error(args: &[&str]) -> String {
    match parse_args(args.iter().copied()) {
        Err(e @ LaunchError::Usage(_)) => e.to_string(),
        other => panic!("{args:?} accepted: {other:?}"),
    }
}

fn provider_env(name: &str) -> LaunchEnv {
    LaunchEnv {
        provider: Some(name.into()),
        ..LaunchEnv::default()
    }
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

#[test]
fn spmd() {
    let a = run_args(&["-n", "3", "--", "sh", "-c", "echo $SAT_RANK", "-n", "5"]);
    assert_eq!(
        a.apps,
        vec![AppContext {
            count: 3,
            program: "sh".into(),
            args: os(&["-c", "echo $SAT_RANK", "-n", "5"]),
        }]
    );
    assert_eq!(a.topology, None);
    assert_eq!(a.provider, None);
}

#[test]
fn options_in_any_order_and_forms() {
    let a = run_args(&[
        "--provider=tcp",
        "--topology",
        "t.xml",
        "-n4",
        "./prog",
        "--flag",
    ]);
    assert_eq!(a.provider.as_deref(), Some("tcp"));
    assert_eq!(a.topology, Some(PathBuf::from("t.xml")));
    assert_eq!(a.apps[0].count, 4);
    assert_eq!(a.apps[0].program, "./prog");
    assert_eq!(a.apps[0].args, os(&["--flag"]));

    let a = run_args(&["-np", "2", "--topology=x.xml", "--provider", "shm", "prog"]);
    assert_eq!(a.apps[0].count, 2);
    assert_eq!(a.topology, Some(PathBuf::from("x.xml")));
}

/// An option of the whole run given inside a later program's context is
/// refused (it would read as that program's alone); after a program it is
/// the program's argument.
#[test]
fn options_of_the_whole_run_come_before_the_first_program() {
    for option in [
        &["--provider", "tcp"][..],
        &["--provider=tcp"],
        &["--topology", "t.xml"],
        &["--enable-recovery"],
    ] {
        let args = [&["-n", "1", "a", ":"][..], option, &["-n", "1", "b"]].concat();
        let e = usage_error(&args);
        assert!(e.contains("an option of the whole run"), "{args:?}: {e}");
    }
    let a = run_args(&["--provider", "tcp", "-n", "1", "a", "--provider", "x"]);
    assert_eq!(a.provider.as_deref(), Some("tcp"));
    assert_eq!(a.apps[0].args, os(&["--provider", "x"]));
}

#[test]
fn mpmd_as_in_figure_12() {
    let a = run_args(&[
        "--topology",
        "t.xml",
        "-n",
        "2",
        "videostream",
        "--topology",
        "v.xml",
        ":",
        "-n",
        "1",
        "pthread",
        ":",
        "-n",
        "2",
        "--",
        "opencv",
        "camera",
        "window",
    ]);
    let got: Vec<(u32, &str, Vec<OsString>)> = a
        .apps
        .iter()
        .map(|c| (c.count, c.program.to_str().unwrap(), c.args.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (2, "videostream", os(&["--topology", "v.xml"])),
            (1, "pthread", vec![]),
            (2, "opencv", os(&["camera", "window"])),
        ]
    );
}

#[test]
fn help() {
    assert_eq!(parse_args(["--help"]).unwrap(), Invocation::Help);
    assert_eq!(parse_args(["-n", "2", "-h"]).unwrap(), Invocation::Help);
    assert!(USAGE.contains("Usage:"));
}

#[test]
fn bad_usage() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "no program"),
        (&["-n"], "-n needs a value"),
        (&["-n", "x", "prog"], "not 'x'"),
        (&["-n", "0", "prog"], "-n 0"),
        (&["prog"], "write -n N before it"),
        (&["-n", "1", "-n", "2", "prog"], "twice"),
        (&["-n", "1", "--bogus", "prog"], "unknown option '--bogus'"),
        (&["-n", "1", "--"], "'--' must be followed"),
        (&["-n", "1", "prog", ":"], "nothing after ':'"),
        (&[":", "-n", "1", "prog"], "':' must follow a program"),
        (
            &["-n", "1", "prog", ":", "-n", "2"],
            "followed by the program",
        ),
        (
            &["-n", "1", "prog", ":", "prog2"],
            "how many processes run prog2",
        ),
        (
            &["--topology", "a.xml", "--topology", "b.xml", "-n", "1", "p"],
            "--topology is given twice",
        ),
        (&["--provider"], "--provider needs a value"),
        (
            &["--topology", "-n", "2", "prog"],
            "--topology needs a value, and got the option -n",
        ),
        (
            &["-n", "--provider", "shm", "prog"],
            "-n needs a value, and got the option --provider",
        ),
        (
            &["--serve", "--topology", "--slots", "2"],
            "--topology needs a value, and got the option --slots",
        ),
    ];
    for (args, want) in cases {
        let m = usage_error(args);
        assert!(m.contains(want), "{args:?}: {m:?} lacks {want:?}");
        assert!(m.contains("satrun --help"), "{m}");
    }
}

#[test]
fn topology_in_the_programs_arguments() {
    assert_eq!(
        topology_in_program_args(&os(&["--input", "a", "--topology", "t.xml"])),
        Some(PathBuf::from("t.xml"))
    );
    assert_eq!(
        topology_in_program_args(&os(&["--topology=u.xml"])),
        Some(PathBuf::from("u.xml"))
    );
    assert_eq!(topology_in_program_args(&os(&["--topology"])), None);
    assert_eq!(topology_in_program_args(&os(&["-t", "x"])), None);
}

fn figure11() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/figure11.xml")
}

#[test]
fn plan_numbers_ranks_across_programs() {
    let a = run_args(&["-n", "1", "/bin/sh", ":", "-n", "2", "/bin/echo", "hi"]);
    let p = plan(&a, &LaunchEnv::default()).unwrap();
    assert_eq!(p.size(), 3);
    assert_eq!(p.ranks[0].program, "/bin/sh");
    assert_eq!(p.ranks[2].rank, 2);
    assert_eq!(p.ranks[2].args, os(&["hi"]));
    assert_eq!(p.provider, Provider::Shm);
    assert_eq!(p.topology, Topology::default_for(3));
    assert_eq!(p.topology_file, None);
}

#[test]
fn plan_reads_the_topology() {
    let t = figure11();
    let a = run_args(&["-n", "3", "--topology", t.to_str().unwrap(), "/bin/true"]);
    let p = plan(&a, &LaunchEnv::default()).unwrap();
    assert_eq!(p.topology.role(2), 2);
    assert_eq!(
        p.topology_file.as_deref(),
        Some(t.canonicalize().unwrap().as_path())
    );

    // Found in the program's arguments, as in Figure 12.
    let arg = format!("--topology={}", t.display());
    let a = run_args(&["-n", "3", "/bin/true", &arg]);
    assert!(plan(&a, &LaunchEnv::default())
        .unwrap()
        .topology_file
        .is_some());

    // Named without its file: an error, not the default topology.
    let a = run_args(&["-n", "3", "/bin/true", "--topology"]);
    let m = plan(&a, &LaunchEnv::default()).unwrap_err().to_string();
    assert!(m.contains("end with --topology and no file"), "{m}");

    // Sized against -n.
    let a = run_args(&["-n", "2", "--topology", t.to_str().unwrap(), "/bin/true"]);
    match plan(&a, &LaunchEnv::default()) {
        Err(LaunchError::Topology(TopologyError::SizeMismatch {
            entries: 3,
            ranks: 2,
            ..
        })) => {}
        other => panic!("{other:?}"),
    }

    // Two different files.
    let two = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/two-servers.xml");
    let a = run_args(&[
        "-n",
        "3",
        "--topology",
        t.to_str().unwrap(),
        "/bin/true",
        "--topology",
        two.to_str().unwrap(),
    ]);
    assert!(matches!(
        plan(&a, &LaunchEnv::default()),
        Err(LaunchError::Usage(_))
    ));
}

#[test]
fn plan_chooses_the_provider() {
    let a = run_args(&["-n", "1", "/bin/true"]);
    assert_eq!(
        plan(&a, &provider_env("tcp")).unwrap().provider,
        Provider::Tcp
    );
    assert_eq!(plan(&a, &provider_env("")).unwrap().provider, Provider::Shm);
    let m = plan(&a, &provider_env("carrier-pigeon"))
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("SAT_PROVIDER") && m.contains("carrier-pigeon"),
        "{m}"
    );

    let a = run_args(&["--provider", "shm", "-n", "1", "/bin/true"]);
    assert_eq!(
        plan(&a, &provider_env("tcp")).unwrap().provider,
        Provider::Shm
    );
    let a = run_args(&["--provider", "ib", "-n", "1", "/bin/true"]);
    assert!(matches!(
        plan(&a, &LaunchEnv::default()),
        Err(LaunchError::UnknownProvider(_))
    ));
}

#[test]
fn plan_checks_the_programs() {
    let a = run_args(&[
        "-n",
        "1",
        "/bin/true",
        ":",
        "-n",
        "2",
        "no-such-program-xyz",
    ]);
    let m = plan(&a, &LaunchEnv::default()).unwrap_err().to_string();
    assert!(
        m.contains("no-such-program-xyz") && m.contains("ranks 1 to 2"),
        "{m}"
    );
    let data = std::env::temp_dir().join(format!("satrun-not-executable-{}", std::process::id()));
    std::fs::write(&data, "data").unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644)).unwrap();
    let a = run_args(&["-n", "1", data.to_str().unwrap()]);
    let m = plan(&a, &LaunchEnv::default()).unwrap_err().to_string();
    std::fs::remove_file(&data).unwrap();
    assert!(m.contains("not executable"), "{m}");
    let a = run_args(&["-n", "1", "/"]);
    assert!(plan(&a, &LaunchEnv::default())
        .unwrap_err()
        .to_string()
        .contains("not a file"));
    let a = run_args(&["-n", "1", "sh"]);
    assert!(plan(&a, &LaunchEnv::default()).is_ok());
}

#[test]
fn descriptions() {
    assert_eq!(
        describe(ExitStatus::from_raw(3 << 8)),
        "exited with status 3"
    );
    assert_eq!(
        describe(ExitStatus::from_raw(9)),
        "was killed by signal SIGKILL (9)"
    );
    assert_eq!(sys::signal_name(15), "SIGTERM");
    assert_eq!(sys::signal_name(77), "signal 77");
}

#[test]
fn at_most_max_processes() {
    assert_eq!(run_args(&["-n", "256", "sh"]).apps[0].count, MAX_PROCESSES);
    assert!(usage_error(&["-n", "257", "sh"]).contains("at most 256"));
    assert!(usage_error(&["-n", "128", "a", ":", "-n", "129", "b"]).contains("at most 256"));
    match parse_args(["--serve", "--servers", "256"]) {
        Ok(Invocation::Serve(s)) => assert!(s.servers == 256 && s.sized),
        other => panic!("{other:?}"),
    }
    assert!(usage_error(&["--serve", "--servers", "257"]).contains("at most 256"));
    match parse_args(["--serve", "--slots", "65536"]) {
        Ok(Invocation::Serve(s)) => assert_eq!(s.slots, MAX_SLOTS),
        other => panic!("{other:?}"),
    }
    assert!(usage_error(&["--serve", "--slots", "4000000000"]).contains("at most 65536"));
}

#[test]
fn recovery_from_the_flag_and_the_environment() {
    let env = |v: &str| LaunchEnv {
        recovery: Some(v.into()),
        ..LaunchEnv::default()
    };
    let plain = run_args(&["-n", "1", "/bin/true"]);
    let flag = run_args(&["--enable-recovery", "-n", "1", "/bin/true"]);
    assert!(!plan(&plain, &LaunchEnv::default()).unwrap().recovery);
    assert!(plan(&plain, &env("on")).unwrap().recovery);
    assert!(!plan(&plain, &env("0")).unwrap().recovery);
    assert!(plan(&flag, &env("")).unwrap().recovery);
    assert!(plan(&flag, &env("1")).unwrap().recovery);
    let m = plan(&flag, &env("off")).unwrap_err().to_string();
    assert!(
        m.contains("--enable-recovery") && m.contains("SAT_RECOVERY=off"),
        "{m}"
    );
    let m = plan(&plain, &env("yes")).unwrap_err().to_string();
    assert!(m.contains("SAT_RECOVERY=\"yes\""), "{m}");
}
