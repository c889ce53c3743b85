//! The `/dev/shm` regions of a service killed with SIGKILL: nobody is left to
//! remove them then, so the next satrun does. A test binary of its own: every
//! satrun sweeps as it starts, and one started by a test running beside this
//! one would take the regions before the satrun this test starts.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::service::{attach, Service};
use common::{alive, satrun, shm_files_of, text};

#[test]
fn the_next_satrun_removes_the_regions_of_a_killed_service() {
    let mut service = Service::start("shm", &["--servers", "2", "--slots", "2"]);
    // A client's write: both servers have opened their endpoints.
    let a = service.address.clone();
    let (ok, _, err) = attach(&["write", a.as_str(), "--chunk", "3", "--bytes", "64"]);
    assert!(ok, "{err}\n{}", service.log());
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

    // Any run sweeps, also one whose program never calls SAT.
    let out = common::run(Command::new(satrun()).args(["-n", "1", "true"]));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    for (pid, _) in &regions {
        assert!(
            shm_files_of(*pid).is_empty(),
            "server {pid}'s region stayed: {:?}\n{err}",
            shm_files_of(*pid)
        );
        assert!(
            err.contains("left by processes that no longer run") && err.contains(&pid.to_string()),
            "satrun says what it removed: {err}"
        );
    }
}
