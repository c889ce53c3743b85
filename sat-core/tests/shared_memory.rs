//! Scope consistency over real processes: 4 clients on 2 servers increment
//! shared counters under READWRITE; no update may be lost, over shm and tcp.

mod common;

use std::process::Command;

use common::*;

#[test]
fn four_clients_two_servers_lose_no_increment() {
    for provider in ["shm", "tcp"] {
        let k = 60;
        let out = run(Command::new(satrun())
            .args(["-n", "6", "--topology"])
            .arg(topology("two-servers.xml"))
            .args(["--provider", provider, "--"])
            .arg(example("increment"))
            .args(["--k", &k.to_string()]));
        assert!(out.status.success(), "{provider}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        for rank in 2..=5 {
            for chunk in [7, 8] {
                let line = format!(
                    "[{rank}] rank {rank}: chunk {chunk} = {} = 4 clients x {k}",
                    4 * k
                );
                assert!(stdout.contains(&line), "{provider}: missing {line:?}");
            }
        }
    }
}
