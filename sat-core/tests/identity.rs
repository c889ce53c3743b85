//! Messages prove who sent them: a client of a run that opens an endpoint of
//! its own and speaks as the seed or as another client, or that sends under
//! its own rank what only servers send, is not heard, and the run it attacks
//! ends correctly (`examples/impostor`), over shm and tcp.

mod common;

use std::process::Command;

use common::{example, run, satrun, text, topology};

fn an_impostor_changes_nothing(provider: &str) {
    let k = 30;
    let out = run(Command::new(satrun())
        .args(["-n", "6", "--topology"])
        .arg(topology("two-servers.xml"))
        .args(["--provider", provider, "--"])
        .arg(example("impostor"))
        .args(["--k", &k.to_string()]));
    let stdout = text(&out.stdout);
    // satrun passes each rank's standard error on, prefixed with its rank;
    // the debug stream's warnings may reach either stream.
    let stderr = format!("{}{}", text(&out.stderr), stdout);
    assert!(
        out.status.success(),
        "{provider}: the attacked run failed: {stdout}\n{stderr}"
    );
    for claimed in [0, 5] {
        assert!(
            stdout.contains(&format!("as rank {claimed}")),
            "{provider}: the impostor did not speak as rank {claimed}: {stdout}"
        );
    }
    // A packet's sender is the rank whose endpoint sent it, and the
    // impostor's endpoint is no rank's: each of the 64 copies of both
    // identities is dropped on arrival, before it can take an order number.
    let dropped = stderr
        .lines()
        .filter(|l| {
            l.starts_with("[1] WARN: malformed packet dropped")
                && l.contains("sent from an endpoint that is no rank's")
        })
        .count();
    assert_eq!(dropped, 2 * 64, "{provider}: {stderr}");
    for kind in ["shutdown", "client_lost", "stop", "probe", "admit"] {
        assert!(
            stderr.contains(&format!(
                "[1] WARN: server 1: dropped {kind} from 4: not expected here"
            )),
            "{provider}: a client's {kind} was not refused: {stderr}"
        );
    }
    // Every client, the impostor included, saw every increment.
    for rank in 2..=5 {
        for chunk in [7, 8] {
            let line = format!("[{rank}] rank {rank}: chunk {chunk} = {}", 4 * k);
            assert!(stdout.contains(&line), "{provider}: missing {line:?}");
        }
    }
}

#[test]
fn an_impostor_changes_nothing_shm() {
    an_impostor_changes_nothing("shm");
}

#[test]
fn an_impostor_changes_nothing_tcp() {
    an_impostor_changes_nothing("tcp");
}
