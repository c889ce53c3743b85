//! The statistics stream (section 3.1, Figure 15) over real processes: the
//! files a run writes hold the events of that run, counted exactly.
//!
//! `examples/stats_workload.rs` does a known amount of work (see its
//! documentation): 7 chunks allocated and written (a 3-chunk chain 5 times,
//! 4 single chunks once) by the writer on server 0; 7 chunks looked up and
//! read (the chain 4 times, each single once) by the reader on server 1,
//! whose memory of 4 chunks drops the chain when the singles arrive.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

const WRITER: u64 = 2;
const READER: u64 = 3;
const COMPUTE_MS: u64 = 150;

/// A fresh folder for one run's files, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Folder {
        let dir = std::env::temp_dir().join(format!("sat-stats-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Folder(dir)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run_workload(provider: &str, stats: &Path) -> String {
    // The message path, whose releases carry their bytes to the home: on
    // one host, homes would keep their versions in host segments.
    let out = run(Command::new(satrun())
        .env("SAT_HOST_SEGMENTS", "off")
        .args(["-n", "4", "--provider", provider, "--topology"])
        .arg(topology("stats.xml"))
        .arg("--")
        .arg(example("stats_workload"))
        .args(["--compute-ms", &COMPUTE_MS.to_string()])
        .env("SAT_STATS", stats));
    assert!(out.status.success(), "the workload failed over {provider}");
    text(&out.stdout)
}

/// The files of a run, by rank; every file must be a complete stream.
fn files_by_rank(dir: &Path) -> BTreeMap<u64, Value> {
    let mut by_rank = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("the statistics folder exists") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("sat-stats.") && name.ends_with(".json"),
            "unexpected file {name} in the statistics folder"
        );
        let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
        assert_eq!(v["format"], "sat-stats 1", "{name}");
        let rank = v["rank"].as_u64().unwrap();
        assert!(
            by_rank.insert(rank, v).is_none(),
            "two files for rank {rank}"
        );
    }
    by_rank
}

/// "messages sent N", as the example prints it for `who`.
fn printed_messages(stdout: &str, who: &str) -> u64 {
    let prefix = format!("{who}: messages sent ");
    stdout
        .lines()
        .find_map(|l| {
            l.split_once(&prefix)
                .map(|(_, n)| n.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no '{prefix}' line in:\n{stdout}"))
}

fn counter(v: &Value, name: &str) -> u64 {
    v["counters"][name].as_u64().unwrap()
}

fn sent_to(v: &Value) -> BTreeMap<u64, (u64, u64)> {
    v["sent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["to"].as_u64().unwrap(),
                (
                    s["messages"].as_u64().unwrap(),
                    s["bytes"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

fn times(v: &Value) -> [u64; 4] {
    let t = &v["time_ns"];
    ["user", "sdsm", "message_passing", "sleep"].map(|k| t[k].as_u64().unwrap())
}

fn chunks_of(events: &[Value], kind: &str) -> BTreeSet<u64> {
    events
        .iter()
        .filter(|e| e["event"] == kind)
        .map(|e| e["chunk"].as_u64().unwrap())
        .collect()
}

fn check_run(provider: &str) {
    let folder = Folder::new(provider);
    let stdout = run_workload(provider, &folder.0);
    let files = files_by_rank(&folder.0);
    assert_eq!(files.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    for (rank, kind, role, server) in [
        (0, "server", 0, 0),
        (1, "server", 0, 1),
        (2, "client", 1, 0),
        (3, "client", 2, 1),
    ] {
        let f = &files[&rank];
        assert_eq!(
            (f["kind"].as_str().unwrap(), f["role"].as_u64().unwrap()),
            (kind, role),
            "rank {rank}"
        );
        assert_eq!(f["server"].as_u64().unwrap(), server, "rank {rank}");
        assert_eq!(f["truncated"], false);
        // The decomposition covers the process's whole life, exactly.
        let [user, sdsm, mp, sleep] = times(f);
        assert_eq!(
            user + sdsm + mp + sleep,
            f["duration_ns"].as_u64().unwrap(),
            "rank {rank}: {:?}",
            f["time_ns"]
        );
        assert!(sdsm > 0 && mp > 0, "rank {rank}: {:?}", f["time_ns"]);
        if kind == "server" {
            assert_eq!(
                user,
                f["sat_start_ns"].as_u64().unwrap(),
                "a server runs its program's own code before SAT starts only"
            );
        }
    }

    // The writer: what it allocated and wrote.
    let w = &files[&WRITER];
    let w_events = w["chunk_events"].as_array().unwrap();
    let all: BTreeSet<u64> = [100, 101, 102, 200, 201, 202, 203].into();
    assert_eq!(counter(w, "alloc"), 7);
    assert_eq!(chunks_of(w_events, "alloc"), all);
    assert_eq!((counter(w, "lookup"), counter(w, "free")), (0, 0));
    assert_eq!(w_events.len(), 7);
    assert_eq!(
        w_events.last().unwrap()["chunks"].as_u64(),
        Some(7),
        "the writer knows 7 chunks"
    );
    let writes = counter(w, "write_hit") + counter(w, "write_miss");
    assert_eq!(writes, 3 * 5 + 4, "one scope per chunk and write");
    assert!(
        counter(w, "write_miss") >= 7,
        "each chunk's first write asks its home"
    );
    assert_eq!(counter(w, "read_hit") + counter(w, "read_miss"), 0);
    let w_accesses = w["accesses"].as_array().unwrap();
    assert_eq!(w_accesses.len() as u64, writes);
    for a in w_accesses {
        assert_eq!(a["access"], "write");
        assert!(a["end_ns"].as_u64() >= a["start_ns"].as_u64());
    }
    // Its own code: the computation the statistics must not count as SAT's.
    assert!(
        times(w)[0] >= COMPUTE_MS * 1_000_000,
        "the writer computed {COMPUTE_MS} ms in its own code: {:?}",
        w["time_ns"]
    );

    // The reader: looked up everything, LRU dropped the chain.
    let r = &files[&READER];
    let r_events = r["chunk_events"].as_array().unwrap();
    assert_eq!(counter(r, "lookup"), 7);
    assert_eq!(chunks_of(r_events, "lookup"), all);
    assert_eq!(counter(r, "free"), 3);
    assert_eq!(chunks_of(r_events, "free"), [100, 101, 102].into());
    assert_eq!(counter(r, "alloc"), 0);
    let last = r_events.last().unwrap();
    assert_eq!(
        (last["chunks"].as_u64(), last["footprint"].as_u64()),
        (Some(7), Some(4)),
        "7 chunks known, the 4 singles in memory"
    );
    let reads = counter(r, "read_hit") + counter(r, "read_miss");
    assert_eq!(reads, 3 * 4 + 4);
    assert!(
        counter(r, "read_miss") >= 7,
        "each chunk's first read asks its home"
    );
    assert_eq!(r["accesses"].as_array().unwrap().len() as u64, reads);
    // Both passed barrier START, then WRITTEN (examples/stats_workload.rs),
    // in that order and after the writer's scopes ended.
    for (who, f) in [("writer", w), ("reader", r)] {
        let ids: Vec<u64> = f["barriers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [1, 2], "the {who}'s barrier passes (START, WRITTEN)");
    }
    let written = w["barriers"][1]["t_ns"].as_u64().unwrap();
    assert!(w_accesses
        .iter()
        .all(|a| a["end_ns"].as_u64().unwrap() <= written));
    // It waited in a barrier while the writer computed: SAT's time, not its own.
    let [_, sdsm, mp, sleep] = times(r);
    assert!(
        sdsm + mp + sleep >= COMPUTE_MS * 1_000_000,
        "the reader waited at least {COMPUTE_MS} ms in a barrier: {:?}",
        r["time_ns"]
    );

    // Messages: a client talks to its server only; the count is what the
    // client saw itself send, plus the end-of-run message after it printed.
    for (client, server, who) in [(WRITER, 0, "writer"), (READER, 1, "reader")] {
        let sent = sent_to(&files[&client]);
        assert_eq!(sent.keys().copied().collect::<Vec<_>>(), [server], "{who}");
        assert_eq!(sent[&server].0, printed_messages(&stdout, who) + 1, "{who}");
    }
    // The writer's releases carried the data: 5 x 12 KiB and 4 x 64 B.
    assert!(sent_to(w)[&0].1 >= 5 * 3 * 4096 + 4 * 64);
    // Servers talk to each other and to their own clients only.
    for (server, other, own) in [(0, 1, WRITER), (1, 0, READER)] {
        let sent = sent_to(&files[&server]);
        assert_eq!(
            sent.keys().copied().collect::<BTreeSet<_>>(),
            [other, own].into(),
            "server {server}"
        );
    }
}

#[test]
fn a_runs_statistics_files_count_what_it_did_over_shm() {
    check_run("shm");
}

#[test]
fn a_runs_statistics_files_count_what_it_did_over_tcp() {
    check_run("tcp");
}

/// A folder that cannot be created costs the statistics, not the run.
#[test]
fn an_unwritable_statistics_folder_is_reported_and_the_run_succeeds() {
    let blocker = Folder::new("blocker");
    std::fs::write(&blocker.0, b"a file, not a folder").unwrap();
    let out = run(Command::new(satrun())
        .args(["-n", "4", "--provider", "shm", "--topology"])
        .arg(topology("stats.xml"))
        .arg("--")
        .arg(example("stats_workload"))
        .args(["--compute-ms", "0"])
        .env("SAT_STATS", blocker.0.join("stats")));
    let _ = std::fs::remove_file(&blocker.0);
    assert!(out.status.success());
    let all = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(
        all.matches("could not write the statistics of rank")
            .count(),
        4,
        "each process says it could not write its file:\n{all}"
    );
}

/// The marker each rank's shell writes before it becomes the workload: the
/// wall clock (ns) at a moment the process had started and SAT had not.
fn markers(dir: &Path) -> BTreeMap<u64, u64> {
    (0..4)
        .map(|rank| {
            let path = dir.join(format!("mark.{rank}"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (rank, text.trim().parse().unwrap())
        })
        .collect()
}

/// Runs the workload with each rank started as a shell that first writes
/// its marker, then becomes the workload (`exec` keeps the process), so
/// that the process's life begins before SAT's.
fn run_behind_a_shell(stats: &Path, marks: &Path, extra_env: &[(&str, &str)]) -> Output {
    std::fs::create_dir_all(marks).unwrap();
    let mut cmd = Command::new(satrun());
    cmd.env("SAT_HOST_SEGMENTS", "off")
        .args(["-n", "4", "--provider", "shm", "--topology"])
        .arg(topology("stats.xml"))
        .args(["--", "/bin/sh", "-c"])
        .arg("date +%s%N > \"$SAT_TEST_MARKS/mark.$SAT_RANK\" && exec \"$0\" \"$@\"")
        .arg(example("stats_workload"))
        .args(["--compute-ms", "0"])
        .env("SAT_STATS", stats)
        .env("SAT_TEST_MARKS", marks);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    run(&mut cmd)
}

/// A file's clock starts with its process, not with SAT: the time before
/// the bootstrap is the program's own, the bootstrap is SAT's, and the
/// decomposition still adds up to the duration (docs/STATISTICS.md).
#[test]
fn a_files_clock_starts_when_its_process_started() {
    let folder = Folder::new("process-start");
    let marks = folder.0.join("marks");
    let out = run_behind_a_shell(&folder.0.join("stats"), &marks, &[]);
    assert!(out.status.success(), "the workload failed");
    let files = files_by_rank(&folder.0.join("stats"));
    let marks = markers(&marks);
    assert_eq!(files.len(), 4);
    for (rank, f) in &files {
        let start = f["start_unix_ns"].as_u64().unwrap();
        let mark = marks[rank];
        // The process was running when its shell wrote the marker, and SAT
        // started after the shell became the workload.
        assert!(
            start <= mark,
            "rank {rank}: the file starts at {start}, after the process wrote {mark}"
        );
        let sat_start = f["sat_start_ns"]
            .as_u64()
            .unwrap_or_else(|| panic!("rank {rank}: no sat_start_ns in {f}"));
        assert!(
            start + sat_start >= mark,
            "rank {rank}: SAT started at {}, before the shell wrote {mark}",
            start + sat_start
        );
        let [user, sdsm, mp, sleep] = times(f);
        let duration = f["duration_ns"].as_u64().unwrap();
        assert_eq!(user + sdsm + mp + sleep, duration, "rank {rank}");
        // The shell's time is the application's own.
        assert!(
            user >= mark - start,
            "rank {rank}: user {user} ns, but the shell ran {} ns before SAT",
            mark - start
        );
        // The bootstrap is SAT's time, inside its sdsm.
        let bootstrap = f["bootstrap_ns"].as_u64().unwrap();
        assert!(bootstrap > 0 && bootstrap <= sdsm, "rank {rank}: {f}");
        if f["kind"] == "server" {
            assert_eq!(
                user, sat_start,
                "a server's own time is its time before SAT"
            );
        }
    }
}

/// Every file of a run names the run, with an id the seed made for it:
/// the same in every file of the run, another in the next run's.
#[test]
fn the_files_of_a_run_share_its_id_and_two_runs_differ() {
    let mut ids = Vec::new();
    for name in ["run-id-a", "run-id-b"] {
        let folder = Folder::new(name);
        run_workload("shm", &folder.0);
        let files = files_by_rank(&folder.0);
        let run: BTreeSet<&str> = files
            .values()
            .map(|f| {
                f["run_id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no run_id in {f}"))
            })
            .collect();
        assert_eq!(run.len(), 1, "one run, one id: {run:?}");
        let id = run.into_iter().next().unwrap().to_string();
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "128 bits in hex: {id}"
        );
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1], "two runs, two ids");
}

/// A server stopped by SIGTERM (what satrun sends when a rank fails) while
/// it writes its statistics file finishes the file, renamed, then dies of
/// the signal as it would have: no `.partial` is left behind.
#[test]
fn a_server_told_to_stop_while_it_writes_its_statistics_finishes_the_file() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: the hook that sends the signal exists in debug builds only");
        return;
    }
    let folder = Folder::new("sigterm-while-writing");
    let stats = folder.0.join("stats");
    // Debug builds: rank 0 sends itself SIGTERM between writing its file
    // and renaming it (sat-core/src/stats/signals.rs).
    let out = run_behind_a_shell(
        &stats,
        &folder.0.join("marks"),
        &[("SAT_STATS_TEST_SIGTERM_BEFORE_RENAME", "0")],
    );
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        all.lines()
            .any(|l| l.contains("rank 0 (") && l.contains("was killed by signal SIGTERM")),
        "the signal still ends the server:\n{all}"
    );
    let names: Vec<String> = std::fs::read_dir(&stats)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.ends_with(".partial")),
        "a file left unfinished: {names:?}"
    );
    let server = names
        .iter()
        .find(|n| n.starts_with("sat-stats.0."))
        .unwrap_or_else(|| panic!("no file of server 0: {names:?}"));
    let v: Value = serde_json::from_slice(&std::fs::read(stats.join(server)).unwrap()).unwrap();
    assert_eq!(
        (v["rank"].as_u64(), v["kind"].as_str()),
        (Some(0), Some("server"))
    );
    // Its signal handler still removed its shared memory.
    let pid = v["pid"].as_u64().unwrap() as u32;
    assert_eq!(
        shm_files_of(pid),
        Vec::<String>::new(),
        "rank 0's /dev/shm files"
    );
}
