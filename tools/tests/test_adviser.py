"""tools/sat-stats --advise: a protocol and a home per chunk from a run's statistics files.

The workloads of `make bench-protocols` (sat-bench/src/bin/sat-protocols-bench.rs) run under MESI with
SAT_STATS set (`--stats`), and the adviser must name, from each workload's files alone, the protocol
that wins that workload in docs/PROTOCOLS.md's table. Then the rules one by one on synthetic files.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "sat-stats"
TARGET = Path(os.environ.get("SAT_TARGET_DIR", REPO / "target"))

# The winner of each workload in docs/PROTOCOLS.md ("Every protocol on the same workloads").
WINNERS = {
    "producer-consumer": "update",
    "migratory-counter": "home-only",
    "false-sharing": "mesi-e",
    "stencil": "learned",
}


def advise(folder: Path) -> dict:
    out = subprocess.run([sys.executable, str(TOOL), str(folder), "--advise", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def test_the_adviser_names_each_workloads_winner_from_its_mesi_runs_statistics(tmp_path):
    bench = TARGET / "debug" / "sat-protocols-bench"
    if not bench.exists():
        pytest.fail(f"{bench} is missing: `make test` builds it (cargo build --workspace --all-targets)")
    stats = tmp_path / "stats"
    run = subprocess.run(
        [str(bench), "--providers", "shm", "--iters", "20", "--protocols", "mesi", "--stats",
         str(stats), "--json"],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for workload, winner in WINNERS.items():
        advice = advise(stats / f"shm-{workload}")
        assert advice["run"] == winner, (workload, json.dumps(advice, indent=1))
        assert all(c["home"] == 0 for c in advice["chunks"]), advice  # one server
    # The stencil's blocks: each written by its owner, read by its two neighbours.
    stencil = advise(stats / "shm-stencil")["chunks"]
    assert len(stencil) == 4
    for block in stencil:
        assert len(block["writers"]) == 1 and len(block["readers"]) == 2, block

    # SAT_ADVICE: the same MESI programs run with the advice take the advised protocols. Their
    # messages per operation are those of the advised protocol's own run (the counts the protocols'
    # rules fix; false sharing's depend on timing under the E state, and are left out).
    for workload in WINNERS:
        advice = subprocess.run([sys.executable, str(TOOL), str(stats / f"shm-{workload}"), "--advise",
                                 "--json"], capture_output=True, text=True, timeout=120)
        (stats / f"shm-{workload}.json").write_text(advice.stdout)
    advised = subprocess.run(
        [str(bench), "--providers", "shm", "--iters", "20", "--workloads",
         "producer-consumer,migratory-counter,stencil", "--protocols", "mesi,update,home-only,learned",
         "--advice", str(stats), "--json"],
        capture_output=True, text=True, timeout=600,
    )
    assert advised.returncode == 0, advised.stdout + advised.stderr
    cells = {(c["workload"], c["protocol"]): c for c in json.loads(advised.stdout)}
    for workload in ("producer-consumer", "migratory-counter", "stencil"):
        mine = cells[(workload, "mesi+advice")]
        theirs = cells[(workload, WINNERS[workload])]
        mesi = cells[(workload, "mesi")]
        assert mine["check"] == "ok", mine
        assert abs(mine["messages_per_op"] - theirs["messages_per_op"]) < 0.1, (mine, theirs)
        assert mine["messages_per_op"] < mesi["messages_per_op"] - 0.5, (mine, mesi)


def test_a_malformed_advice_file_stops_the_run_and_says_why(tmp_path):
    satrun = TARGET / "debug" / "satrun"
    example = TARGET / "debug" / "examples" / "stats_workload"
    for path in (satrun, example):
        if not path.exists():
            pytest.fail(f"{path} is missing: `make test` builds it")
    bad = tmp_path / "advice.json"
    bad.write_text('{"chunks": [{"chunk": 3, "protocol": "msi"}]}')
    run = subprocess.run(
        [str(satrun), "-n", "4", "--provider", "shm", "--topology",
         str(REPO / "sat-core" / "topologies" / "stats.xml"), "--", str(example)],
        env=dict(os.environ, SAT_ADVICE=str(bad)), capture_output=True, text=True, timeout=120,
    )
    assert run.returncode != 0
    assert "SAT_ADVICE=" in run.stderr + run.stdout and "no built-in protocol is called \"msi\"" in (
        run.stderr + run.stdout), run.stdout + run.stderr
    # SAT_ADAPTIVE takes 1, on, 0, off or nothing: another value stops the run the same way.
    run = subprocess.run(
        [str(satrun), "-n", "4", "--provider", "shm", "--topology",
         str(REPO / "sat-core" / "topologies" / "stats.xml"), "--", str(example)],
        env=dict(os.environ, SAT_ADAPTIVE="yes"), capture_output=True, text=True, timeout=120,
    )
    assert run.returncode != 0
    assert 'SAT_ADAPTIVE="yes": give 1 or on' in run.stderr + run.stdout, run.stdout + run.stderr


# ----------------------------------------------------------- synthetic files


def write_run(folder: Path, scopes: dict, barriers: dict | None = None) -> Path:
    """A run of one server (rank 0) and clients 1.., each with the scopes given as
    (start_ns, end_ns, chunk, access, hit) and, if given, its barrier passes (t_ns)."""
    folder.mkdir()
    size = 1 + len(scopes)
    for rank, entries in scopes.items():
        doc = {
            "format": "sat-stats 1", "rank": rank, "kind": "client", "role": 1, "server": 0,
            "size": size, "servers": [0], "pid": 100 + rank, "host": "h",
            "start_unix_ns": 1_000_000, "duration_ns": 10_000_000,
            "time_ns": {"user": 10_000_000, "sdsm": 0, "message_passing": 0, "sleep": 0},
            "sent": [], "counters": {k: 0 for k in (
                "alloc", "lookup", "free", "read_hit", "read_miss", "write_hit", "write_miss",
                "readwrite_hit", "readwrite_miss")},
            "truncated": False, "chunk_events": [],
            "accesses": [{"start_ns": s, "end_ns": e, "chunk": c, "access": a, "hit": h}
                         for s, e, c, a, h in entries],
        }
        if barriers is not None:
            doc["barriers"] = [{"t_ns": t, "id": 1} for t in barriers.get(rank, [])]
        (folder / f"sat-stats.{rank}.{100 + rank}.json").write_text(json.dumps(doc))
    server = {
        "format": "sat-stats 1", "rank": 0, "kind": "server", "role": 0, "server": 0, "size": size,
        "servers": [0], "pid": 100, "host": "h", "start_unix_ns": 1_000_000, "duration_ns": 10_000_000,
        "time_ns": {"user": 0, "sdsm": 10_000_000, "message_passing": 0, "sleep": 0}, "sent": [],
        "counters": {k: 0 for k in ("alloc", "lookup", "free", "read_hit", "read_miss", "write_hit",
                                    "write_miss", "readwrite_hit", "readwrite_miss")},
        "truncated": False, "chunk_events": [], "accesses": [],
    }
    (folder / "sat-stats.0.100.json").write_text(json.dumps(server))
    return folder


def one_writer_two_readers(barriers_between: bool):
    writer, readers = [], {2: [], 3: []}
    passes = {1: [], 2: [], 3: []}
    for i in range(10):
        t = 1000 * i
        writer.append((t, t + 100, 5, "write", False))
        for r in readers:
            readers[r].append((t + 300, t + 400, 5, "read", False))
            if barriers_between:
                passes[r].append(t + 200)
    return {1: writer, **readers}, passes


def test_readers_that_miss_after_each_write_get_updates_or_learned_sets(tmp_path):
    scopes, passes = one_writer_two_readers(barriers_between=False)
    assert advise(write_run(tmp_path / "plain", scopes))["run"] == "update"
    scopes, passes = one_writer_two_readers(barriers_between=True)
    advice = advise(write_run(tmp_path / "barriers", scopes, passes))
    assert advice["run"] == "learned", advice
    assert advice["chunks"][0]["writers"] == [1] and advice["chunks"][0]["readers"] == [2, 3]


def test_a_single_reader_that_misses_after_each_write_gets_home_only(tmp_path):
    # A pipeline's stage: each version read once, by the next stage only.
    scopes, _ = one_writer_two_readers(barriers_between=False)
    del scopes[3]
    advice = advise(write_run(tmp_path / "stage", scopes))
    assert advice["run"] == "home-only", advice
    assert "one reader" in advice["chunks"][0]["why"]


def test_writers_in_turn_get_home_only_and_contending_writers_the_e_state(tmp_path):
    turns = {r: [(1000 * (3 * i + r), 1000 * (3 * i + r) + 100, 9, "readwrite", False)
                 for i in range(10)] for r in (1, 2, 3)}
    assert advise(write_run(tmp_path / "turns", turns))["run"] == "home-only"
    contend = {r: [(1000 * i, 1000 * i + 900, 9, "readwrite", False) for i in range(10)]
               for r in (1, 2, 3)}
    assert advise(write_run(tmp_path / "contend", contend))["run"] == "mesi-e"


def test_read_only_data_stays_mesi_and_a_lone_writer_gets_the_e_state(tmp_path):
    reads = {r: [(1000 * i, 1000 * i + 10, 4, "read", i > 0) for i in range(5)] for r in (1, 2)}
    assert advise(write_run(tmp_path / "reads", reads))["run"] == "mesi"
    alone = {1: [(1000 * i, 1000 * i + 10, 4, "write", i > 0) for i in range(5)]}
    advice = advise(write_run(tmp_path / "alone", alone))
    assert advice["run"] == "mesi-e" and "E state" in advice["chunks"][0]["why"]


def test_files_without_barriers_are_read_and_bad_ones_refused(tmp_path):
    scopes, _ = one_writer_two_readers(barriers_between=False)
    folder = write_run(tmp_path / "bad", scopes, {1: [5]})
    doc = json.loads((folder / "sat-stats.1.101.json").read_text())
    doc["barriers"] = [{"t_ns": -1, "id": 1}]
    (folder / "sat-stats.1.101.json").write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, str(TOOL), str(folder), "--advise"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "barriers[0]" in out.stderr, out.stderr
    empty = write_run(tmp_path / "empty", {1: []})
    out = subprocess.run([sys.executable, str(TOOL), str(empty), "--advise"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no client recorded a scope" in out.stderr, out.stderr
