//! What a service killed with SIGKILL leaves: its servers die with satrun and
//! nobody removes their `/dev/shm` regions or their spill folders then, so the
//! next satrun does. A test binary of its own: every satrun sweeps as it
//! starts, and one started by a test running beside this one would take them
//! before the satrun this test starts.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::service::{attach, Service};
use common::{alive, satrun, shm_files_of, text};

struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two servers that keep one version each in memory (the others go to
/// their spill folders), a slot each.
const TOPOLOGY: &str = r#"<?xml version="1.0"?>
<SAT><topologies>
  <topology id="0" role="0"><memory capacity="1"/><clients><intlist>2</intlist></clients></topology>
  <topology id="1" role="0"><memory capacity="1"/><clients><intlist>3</intlist></clients></topology>
  <topology id="2" role="1"><memory capacity="0"/><servers><intlist>0</intlist></servers></topology>
  <topology id="3" role="1"><memory capacity="0"/><servers><intlist>1</intlist></servers></topology>
</topologies></SAT>"#;

#[test]
fn the_next_satrun_removes_what_a_killed_service_left() {
    let dir = std::env::temp_dir().join(format!("sat-leftovers-test-{}", std::process::id()));
    let _removed = Removed(dir.clone());
    let spill = dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let topology = dir.join("topology.xml");
    std::fs::write(&topology, TOPOLOGY).unwrap();
    let spill_env = ("SAT_SPILL_DIR", spill.to_str().unwrap());
    let mut service = Service::start_with_env(
        "shm",
        &["--topology", topology.to_str().unwrap()],
        &[spill_env],
    );
    // Two chunks homed on each server: one of each goes to its folder.
    let a = service.address.clone();
    for chunk in ["3", "4", "5", "6"] {
        let (ok, _, err) = attach(&["write", a.as_str(), "--chunk", chunk, "--bytes", "64"]);
        assert!(ok, "{err}\n{}", service.log());
    }
    let servers = service.servers();
    assert_eq!(servers.len(), 2, "{}", service.log());
    let regions: Vec<(u32, Vec<String>)> = servers
        .iter()
        .map(|&pid| (pid, shm_files_of(pid)))
        .collect();
    assert!(
        regions.iter().all(|(_, files)| !files.is_empty()),
        "every server has its region: {regions:?}"
    );
    let folders = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&spill)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let spilled = folders();
    assert_eq!(spilled.len(), 2, "a spill folder per server: {spilled:?}");

    service.kill_hard();
    let deadline = Instant::now() + Duration::from_secs(30);
    while servers.iter().any(|&pid| alive(pid)) {
        assert!(Instant::now() < deadline, "the servers outlived satrun");
        std::thread::sleep(Duration::from_millis(20));
    }
    for (pid, files) in &regions {
        assert_eq!(
            &shm_files_of(*pid),
            files,
            "a killed server's region is left behind (nobody else removed it)"
        );
    }
    assert_eq!(folders(), spilled, "the killed servers' folders are left");

    // Any run sweeps, also one whose program never calls SAT.
    let out = common::run(
        Command::new(satrun())
            .args(["-n", "1", "true"])
            .env(spill_env.0, spill_env.1),
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    for (pid, _) in &regions {
        assert!(
            shm_files_of(*pid).is_empty(),
            "server {pid}'s region stayed: {:?}\n{err}",
            shm_files_of(*pid)
        );
    }
    assert_eq!(folders(), Vec::<String>::new(), "{err}");
    let pids: Vec<String> = servers.iter().map(u32::to_string).collect();
    for said in [
        "shared-memory file(s) in /dev/shm left by processes that no longer run",
        "removed 2 spill folder(s) left by servers that no longer run",
    ] {
        let line = err.lines().find(|l| l.contains(said));
        assert!(
            line.is_some_and(|l| pids.iter().all(|p| l.contains(p.as_str()))),
            "satrun says what it removed ({said}): {err}"
        );
    }
}
