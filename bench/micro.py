#!/usr/bin/env python3
"""SAT against its peers on one node: hand-off latency and 64 MiB PUT/GET.

Runs, one after another on this host:

1. SAT: ``sat-handoff-bench`` (two clients of one server: the 64 B hand-off,
   and a 64 MiB chain's PUT, GET and whole hand-off, once with SAT's default
   64 KiB chunks and once with 16 MiB chunks);
2. the raw SAT transport and libfabric's ``fi_pingpong`` (``-e rdm -m
   tagged``), both through ``sat-transport-bench`` at 64 B and 64 MiB, which
   alternates them so that they see the same load;
3. MPI: ``mpi_bench`` (bench/mpi/mpi_bench.c) under ``mpirun -n 2`` (Open MPI: over shared
   memory, ``btl vader`` and ``osc sm``; over tcp, ``btl tcp`` on loopback and
   ``osc pt2pt``);

and prints one table, a row per operation, size and transport, with each
peer's time and SAT's time divided by it. Every figure is a median. The 64 B
hand-off and MPI's 64 B point-to-point are measured once more in rounds that
alternate the two (``small_rounds``), and the 64 B rows give those rounds'
figures: on this VM small messages run in a fast or a slow mode for minutes
at a time, and only figures taken side by side can be divided. Without MPI
the rounds do not run (stderr says why), and the 64 B rows give SAT's own run.

    bench/micro.py [--target-dir target] [--mpi-bench target/bench/mpi_bench]
                   [--providers shm,tcp] [--small-iters 2000] [--large-iters 7]
                   [--reps 3] [--chunk-sizes 65536,16777216] [--json]

Units: the table gives 64 B rows in microseconds (us), 64 MiB rows in
milliseconds (ms) and GB/s (10^9 bytes per second) of the 64 MiB; the JSON
gives every time in microseconds (keys ending in _us), bandwidths in GB/s
(_gbps), sizes and chunk sizes in bytes; a ratio divides SAT's time by the
peer's (above 1: SAT is slower). A figure that could not be had is null in
the JSON and "-" in the table.

``--target-dir`` is cargo's target directory or its ``release`` directory
(default: $SAT_TARGET_DIR, else $CARGO_TARGET_DIR, else the repository's
``target``), holding ``satrun``, ``sat-handoff-bench`` and ``sat-transport-bench``;
``mpi_bench`` is by default in its ``bench`` directory, where ``make bench``
builds it (``make bench`` builds all of them).

SAT must give every figure: if it fails the script stops with an error (exit
status 1). A peer that fails only leaves its cells empty, and stderr says why:
without ``mpirun`` (or ``mpi_bench``) the MPI columns stay empty; without
``fi_pingpong`` (Debian: libfabric-bin) sat-transport-bench stops, and the
raw transport's column stays empty with fi_pingpong's.

As a module: ``run_all(target_dir, mpi_bench=...)`` returns the rows as
dicts (times in microseconds), for a driver that merges several tables.
Python 3 standard library only. Every process it starts runs in its own
process group, which is ended (SIGTERM, then SIGKILL) if it outlives its
time limit.
"""

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import (  # noqa: E402
    bench_build_dir, built_by, default_target_dir, kill_group, left_in_shm, missing_program,
    shm_entries,
)

SMALL = 64
LARGE = 64 << 20
DEFAULT_CHUNK = 64 << 10
BIG_CHUNK = 16 << 20
# How many rounds alternate SAT's 64 B hand-off with MPI's 64 B point-to-point.
SMALL_ROUNDS = 5

# What each cell measures, printed under the table.
NOTES = [
    "Every cell is a median time (64 MiB rows: ms and GB/s of the 64 MiB; 64 B rows: us); "
    f"in the 64 B hand-off rows, SAT's and MPI pt2pt's figures are the medians of {SMALL_ROUNDS} "
    "rounds that alternate the two (each round's figure a median), so that both see the "
    "machine's same spells of fast and slow small messages (JSON: sat_round_us, "
    "mpi_pt2pt_round_us); "
    "ratio columns divide SAT's time by the peer's (above 1: SAT is slower).",
    "SAT: two client processes of one server (satrun -n 3), default progress (spin, then "
    "sleep until a doorbell rings); every process is on one host, so the home keeps the "
    "versions in a host segment and scopes move no data in messages, over either provider "
    "(SAT_HOST_SEGMENTS=off measures the message path). hand-off 64 B: half a round of READWRITE-increment-RELEASE by one client "
    "and reads by the other until the new value shows (it yields its core every 16 reads). PUT: the writer's WRITE scope over "
    "the 64 MiB chain and its RELEASE, until the home holds the whole version (the writer's "
    "relayed message to itself comes back: the server forwards it only after applying every "
    "earlier message). PUT, release returns: the same scope until RELEASE returns (the data "
    "then sits in the send queue). GET: the reader's READ scope (acquire to release) of the "
    "version just written. hand-off 64 MiB: from the writer's acquire to the end of the "
    "reader's release; the reader, told once the writer holds its write scope, opens its "
    "READ scope at once and waits in it, as an MPI receiver posts its receive first.",
    "raw transport: SAT's bare libfabric transport between two processes, busy polling, "
    "half the median round trip (one message one way). fi_pingpong: -e rdm -m tagged, its "
    "mean time per transfer (one way; a mean, so a descheduled iteration weighs more than "
    "in a median). For raw transport, fi_pingpong and MPI pt2pt, one message from one "
    "process to the other is the whole of a PUT, a GET and a hand-off.",
    "MPI pt2pt: MPI_Send/MPI_Recv ping-pong, half the median round trip. MPI RMA: PUT = "
    "MPI_Win_lock(EXCLUSIVE)/MPI_Put/MPI_Win_unlock timed on the origin (the data is at the "
    "target when unlock returns); GET = the same with MPI_Get; hand-off = half a round in "
    "which each rank puts a stamped buffer into the other's window and then reads its own "
    "window under a shared lock on itself until the other's stamp shows (no extra "
    "message). MPI over shm: Open MPI, btl vader, osc sm; over tcp: btl tcp on loopback, "
    "osc pt2pt.",
    "On one host SAT copies a hand-off's data twice (the writer's chain -> the home's slot "
    "at RELEASE -> the reader's chain at READ), chunk by chunk, so the two copies of a "
    "64 MiB chain overlap on two cores; the peers copy once.",
]


def notes(rows):
    """NOTES as they hold for these rows (run_all's): the first says the 64 B figures come from
    alternated rounds only for the rows whose rounds ran."""
    small = [r for r in rows if r["size"] == SMALL and r["operation"] == "hand-off"]
    with_rounds = [r for r in small if r.get("rounds")]
    if small and len(with_rounds) == len(small) and all(
            r["rounds"] == SMALL_ROUNDS for r in with_rounds):
        return list(NOTES)
    first = "Every cell is a median time (64 MiB rows: ms and GB/s of the 64 MiB; 64 B rows: us); "
    if with_rounds:
        over = ", ".join(f"{r['transport']} ({r['rounds']} rounds)" for r in with_rounds)
        first += (
            f"in the 64 B hand-off rows over {over}, SAT's and MPI pt2pt's figures are the "
            "medians of rounds that alternate the two (each round's figure a median), so that "
            "both see the machine's same spells of fast and slow small messages (JSON: rounds, "
            "sat_round_us, mpi_pt2pt_round_us); the other 64 B rows give each program's own run, "
            "not alternated; "
        )
    else:
        first += (
            "no alternated rounds of SAT's and MPI's 64 B figures ran (stderr says why): the "
            "64 B rows give each program's own run, not alternated; "
        )
    first += "ratio columns divide SAT's time by the peer's (above 1: SAT is slower)."
    return [first] + NOTES[1:]


# ------------------------------------------------------------- processes


class Failed(Exception):
    pass


def run(cmd, timeout, env=None):
    """Runs cmd in its own process group and returns its standard output;
    ends the group when the time limit passes."""
    try:
        p = subprocess.Popen(
            [str(c) for c in cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            start_new_session=True,
        )
    except OSError as e:
        raise Failed(f"cannot run {cmd[0]}: {e.strerror or e}"
                     + (f" ({built_by(cmd[0])})" if isinstance(e, FileNotFoundError) else ""))
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        p.communicate()
        raise Failed(f"{Path(str(cmd[0])).name}: no result within {timeout} s")
    if p.returncode != 0:
        tail = "\n".join((out + err).strip().splitlines()[-8:])
        raise Failed(f"{Path(str(cmd[0])).name} exited with {p.returncode}:\n{tail}")
    return out


# ------------------------------------------------------------ the benches


def bin_dir(target_dir):
    d = Path(target_dir)
    for cand in (d, d / "release"):
        if (cand / "satrun").exists():
            return cand
    raise Failed(f"satrun not found in {d} or {d / 'release'}: {built_by('satrun')}")


def default_mpi_bench(target_dir):
    """Where `make bench` builds mpi_bench: the `bench` directory of cargo's target directory."""
    return Path(bench_build_dir(target_dir)) / "mpi_bench"


def positive_counts(**counts):
    """Raises Failed unless every count is a whole number of at least 1."""
    for name, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise Failed(f"{name} must be a whole number of at least 1, not {n!r}")


SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}


def num(s):
    """The number a program printed, or None where it printed none (or NaN, or infinity)."""
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def finite(obj):
    """obj with every NaN or infinite float replaced by None (for JSON, which has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def transport(bins, providers, size, iters, reps, timeout):
    """{provider: (SAT raw round trip, fi_pingpong round trip)} in us."""
    out = run(
        [
            bins / "sat-transport-bench",
            "--providers", ",".join(providers),
            "--sizes", str(size),
            "--iters", str(iters),
            "--reps", str(reps),
        ],
        timeout,
    )
    got = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+)\s+(\d+) (B|KiB|MiB)\s+(\S+)\s+(\S+)\s+\S+$", line)
        if m and int(m.group(2)) * SIZE_UNITS[m.group(3)] == size:
            got[m.group(1)] = (num(m.group(4)), num(m.group(5)))
    return got


def handoff(bins, providers, small_iters, large_iters, chunk, timeout, large=LARGE):
    """{(provider, key, size): {median, min, max, sends, min_sends, protocol,
    server_sends}}: sends and server_sends are measured (per operation),
    min_sends and protocol are home-based MESI's figures."""
    out = run(
        [
            bins / "sat-handoff-bench",
            "--providers", ",".join(providers),
            "--results",
            "--small-iters", str(small_iters),
            "--large-iters", str(large_iters),
            "--large", str(large),
            "--chunk-size", str(chunk),
        ],
        timeout,
    )
    got = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 10 and f[0] == "RESULT":
            got[(f[1], f[2], int(f[3]))] = {
                "median": num(f[4]),
                "min": num(f[5]),
                "max": num(f[6]),
                "sends": num(f[7]),
                "min_sends": int(f[8]),
                "protocol": int(f[9]),
                "server_sends": None,
            }
    # MESSAGES provider key size client_per_op server_per_op client server ops
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == "MESSAGES" and (f[1], f[2], int(f[3])) in got:
            got[(f[1], f[2], int(f[3]))]["server_sends"] = num(f[5])
    return got


MPI_TRANSPORTS = {
    "shm": ["--mca", "btl", "self,vader", "--mca", "osc", "sm"],
    "tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "osc", "pt2pt"],
}


def mpi(mpi_bench, provider, small_iters, large_iters, timeout, large=LARGE):
    """{(name, size): median us} of one mpi_bench run."""
    mpirun = mpi_missing(mpi_bench)
    cmd = [mpirun]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["-n", "2", "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1"]
    cmd += MPI_TRANSPORTS[provider]
    cmd += [mpi_bench, "-s", str(SMALL), "-l", str(large), "-n", str(small_iters), "-N", str(large_iters)]
    got = {}
    for line in run(cmd, timeout).splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == "RESULT":
            got[(f[1], int(f[2]))] = num(f[3])
    return got


def mpi_missing(mpi_bench):
    """mpirun's path; raises Failed, saying what is missing, without mpirun or mpi_bench."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise Failed("no mpirun (Open MPI): scripts/setup.sh --peers installs it")
    if not mpi_bench or not Path(mpi_bench).is_file():
        raise Failed(missing_program(mpi_bench or "mpi_bench"))
    return mpirun


def small_rounds(bins, mpi_bench, providers, small_iters, rounds, log):
    """{provider: (SAT's results, MPI's pt2pt medians)}, one of each per round:
    the 64 B hand-off and MPI's 64 B point-to-point, alternated round by round
    (the 64 MiB parts of both programs shrunk to a token size). This machine
    changes for minutes at a time between a fast and a slow mode for small
    messages (docs/PERFORMANCE.md): two figures taken minutes apart, one
    after the other's whole run, can fall in different modes, and their ratio
    then says nothing about SAT. Alternated, both see the same spells."""
    out = {p: ([], []) for p in providers}
    for r in range(rounds):
        for p in providers:
            try:
                got = handoff(bins, [p], small_iters, 1, DEFAULT_CHUNK, 120, large=DEFAULT_CHUNK)
                figure = got.get((p, "handoff", SMALL))
                if figure and None not in (figure["median"], figure["min"], figure["max"]):
                    out[p][0].append(figure)
                else:
                    log(f"64 B round {r + 1}, SAT over {p}: no figure")
            except Failed as e:
                log(f"64 B round {r + 1}, SAT over {p}: {e}")
            if p not in MPI_TRANSPORTS:
                continue
            try:
                m = mpi(mpi_bench, p, small_iters, 1, 120, large=4096)
                if m.get(("pt2pt.oneway", SMALL)) is not None:
                    out[p][1].append(m[("pt2pt.oneway", SMALL)])
                else:
                    log(f"64 B round {r + 1}, MPI over {p}: no figure")
            except Failed as e:
                log(f"64 B round {r + 1}, MPI over {p}: {e}")
    return out


# ----------------------------------------------------------------- table


def run_all(
    target_dir,
    mpi_bench=None,
    providers=("shm", "tcp"),
    small_iters=2000,
    large_iters=7,
    reps=3,
    chunks=(DEFAULT_CHUNK, BIG_CHUNK),
    log=None,
):
    """Runs every bench and returns the rows of the table as dicts; times in
    microseconds (None where a peer has no figure or could not run). A
    failing peer leaves its cells empty and is reported through `log`; SAT
    failing, or giving no figure for a row, raises Failed. `mpi_bench`
    defaults to where `make bench` builds it (default_mpi_bench)."""
    log = log or (lambda msg: None)
    providers = list(providers)
    chunks = tuple(chunks)
    if not providers or any(not p for p in providers):
        raise Failed("no provider given")
    if len(set(providers)) != len(providers):
        raise Failed(f"a provider is given twice: {','.join(providers)}")
    if not chunks:
        raise Failed("no chunk size given")
    positive_counts(small_iters=small_iters, large_iters=large_iters, reps=reps)
    positive_counts(**{f"chunk size {c!r}": c for c in chunks})
    bins = bin_dir(target_dir)
    if mpi_bench is None:
        mpi_bench = default_mpi_bench(target_dir)

    def attempt(what, f):
        t0 = time.monotonic()
        try:
            r = f()
        except Failed as e:
            log(f"{what}: {e}")
            return {}
        if not r:
            log(f"{what}: no figure ({time.monotonic() - t0:.1f} s): its cells stay empty")
        else:
            log(f"{what}: {time.monotonic() - t0:.1f} s")
        return r

    sat = {}
    for chunk in chunks:
        # The 64 B hand-off does not depend on the chunk size: measured once.
        small = small_iters if chunk == chunks[0] else 10
        what = f"SAT hand-off, {human(chunk)} chunks"
        t0 = time.monotonic()
        try:
            got = handoff(bins, providers, small, large_iters, chunk, 240)
        except Failed as e:
            raise Failed(f"SAT failed ({what}): {e}")
        # SAT is what the table measures: every one of its figures must be there.
        wanted = [(p, key, LARGE) for p in providers
                  for key in ("put", "put-release", "get", "handoff")]
        if chunk == chunks[0]:
            wanted = [(p, "handoff", SMALL) for p in providers] + wanted
        lost = [w for w in wanted if w not in got or got[w]["median"] is None]
        if lost:
            raise Failed(
                f"SAT failed ({what}): sat-handoff-bench gave no figure for "
                + ", ".join(f"{k} {human(n)} over {p}" for p, k, n in lost)
            )
        log(f"{what}: {time.monotonic() - t0:.1f} s")
        sat[chunk] = got
    raw_small = attempt(
        "raw transport and fi_pingpong, 64 B",
        lambda: transport(bins, providers, SMALL, small_iters, reps, 150),
    )
    raw_large = attempt(
        "raw transport and fi_pingpong, 64 MiB",
        lambda: transport(bins, providers, LARGE, large_iters, 1, 200),
    )
    mpis = {
        p: attempt(f"MPI ({p})", lambda p=p: mpi(mpi_bench, p, small_iters, large_iters, 150))
        for p in providers
        if p in MPI_TRANSPORTS
    }
    # The alternated 64 B rounds need MPI over at least one of the providers.
    why_not = None
    try:
        mpi_missing(mpi_bench)
    except Failed as e:
        why_not = str(e)
    if why_not is None and not any(p in MPI_TRANSPORTS for p in providers):
        why_not = f"mpi_bench runs over {' and '.join(MPI_TRANSPORTS)} only"
    if why_not is None:
        rounds = attempt(
            f"64 B, SAT and MPI alternated, {SMALL_ROUNDS} rounds",
            lambda: small_rounds(bins, mpi_bench, providers, small_iters, SMALL_ROUNDS, log),
        )
    else:
        rounds = {}
        log(f"64 B rounds alternating SAT and MPI skipped ({why_not}): the 64 B rows give "
            "SAT's and the peers' own runs")

    def half(d, p, i):
        v = d.get(p, (None, None))[i]
        return v / 2 if v is not None else None

    # (operation, size, SAT key, chunk size or None, MPI RMA figure)
    ops = [("hand-off", SMALL, "handoff", None, "rma.handoff")]
    for chunk in chunks:
        ops += [
            ("PUT", LARGE, "put", chunk, "rma.put"),
            ("PUT, release returns", LARGE, "put-release", chunk, None),
            ("GET", LARGE, "get", chunk, "rma.get"),
            ("hand-off", LARGE, "handoff", chunk, "rma.handoff"),
        ]
    rows = []
    for p in providers:
        for label, size, key, chunk, rma in ops:
            s = sat.get(chunk or chunks[0], {}).get((p, key, size))
            raw = raw_small if size == SMALL else raw_large
            peer_cells = key != "put-release"
            m = mpis.get(p, {})
            row = {
                "operation": label,
                "size": size,
                "transport": p,
                "chunk_size": chunk,
                "sat_us": s["median"] if s else None,
                "sat_min_us": s["min"] if s else None,
                "sat_max_us": s["max"] if s else None,
                "sat_client_sends": s["sends"] if s else None,
                "min_client_sends": s["min_sends"] if s else None,
                "protocol_msgs": s["protocol"] if s else None,
                "sat_server_sends": s["server_sends"] if s else None,
                "raw_us": half(raw, p, 0) if peer_cells else None,
                "fi_pingpong_us": half(raw, p, 1) if peer_cells else None,
                "mpi_pt2pt_us": m.get(("pt2pt.oneway", size)) if peer_cells else None,
                "mpi_rma_us": m.get((rma, size)) if rma else None,
            }
            sat_runs, mpi_runs = rounds.get(p, ([], []))
            if size == SMALL and why_not is None and p not in MPI_TRANSPORTS:
                log(f"64 B rounds over {p} skipped (mpi_bench runs over "
                    f"{' and '.join(MPI_TRANSPORTS)} only): the 64 B row gives SAT's and the "
                    "peers' own runs")
            elif size == SMALL and why_not is None and not (sat_runs and mpi_runs):
                log(f"64 B rounds over {p}: no round gave both SAT's and MPI's figure (above): "
                    "the 64 B row gives SAT's and the peers' own runs")
            if size == SMALL and sat_runs and mpi_runs:
                # The alternated rounds' figures (small_rounds): the medians
                # of their medians; min and max over every hand-off timed.
                row["sat_us"] = statistics.median([r["median"] for r in sat_runs])
                row["sat_min_us"] = min(r["min"] for r in sat_runs)
                row["sat_max_us"] = max(r["max"] for r in sat_runs)
                row["mpi_pt2pt_us"] = statistics.median(mpi_runs)
                row["rounds"] = len(sat_runs)
                row["sat_round_us"] = [r["median"] for r in sat_runs]
                row["mpi_pt2pt_round_us"] = list(mpi_runs)
            for peer in ("raw", "fi_pingpong", "mpi_pt2pt", "mpi_rma"):
                a, b = row["sat_us"], row[f"{peer}_us"]
                row[f"sat_over_{peer}"] = a / b if a and b else None
            if size >= 1 << 20:
                for k in ("sat", "raw", "fi_pingpong", "mpi_pt2pt", "mpi_rma"):
                    t = row[f"{k}_us"]
                    row[f"{k}_gbps"] = size / (t * 1e3) if t else None
            rows.append(row)
    return rows


def human(size):
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= n and size % n == 0:
            return f"{size // n} {unit}"
    return f"{size} B"


def cell(row, k):
    t = row.get(f"{k}_us")
    if t is None or t != t:
        return "-"
    if row["size"] >= 1 << 20:
        return f"{t / 1e3:.1f} ms {row[f'{k}_gbps']:.2f} GB/s"
    return f"{t:.2f} us"


def ratio(row, k):
    r = row.get(f"sat_over_{k}")
    return "-" if r is None or r != r else f"{r:.2f}"


def table(rows):
    head = [
        "operation", "size", "chunks", "transport", "SAT", "raw transport", "fi_pingpong",
        "MPI pt2pt", "MPI RMA", "SAT/raw", "SAT/fi_pingpong", "SAT/MPI pt2pt", "SAT/MPI RMA",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        peers = ("raw", "fi_pingpong", "mpi_pt2pt", "mpi_rma")
        lines.append(
            "| "
            + " | ".join(
                [r["operation"], human(r["size"]), human(r["chunk_size"]) if r["chunk_size"] else "-",
                 r["transport"], cell(r, "sat")]
                + [cell(r, k) for k in peers]
                + [ratio(r, k) for k in peers]
            )
            + " |"
        )
    counts = [
        "| operation | size | chunks | transport | SAT client sends | SAT server sends "
        "| minimum client sends | protocol msgs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["sat_client_sends"] is not None and r["operation"] != "PUT, release returns":
            server = "-" if r["sat_server_sends"] is None else f"{r['sat_server_sends']:.0f}"
            counts.append(
                f"| {r['operation']} | {human(r['size'])} | "
                f"{human(r['chunk_size']) if r['chunk_size'] else '-'} | {r['transport']} | "
                f"{r['sat_client_sends']:.0f} | {server} | {r['min_client_sends']} | "
                f"{r['protocol_msgs']} |"
            )
    return "\n".join(lines), "\n".join(counts)


def positive_int(text):
    """argparse type: a whole number of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text} is not at least 1")
    return n


def int_list(text):
    """argparse type: comma-separated whole numbers of at least 1, none twice."""
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError("an empty list")
    values = [positive_int(t) for t in items]
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} names a value twice")
    return values


def name_list(text):
    """argparse type: comma-separated names, none empty, none twice."""
    names = [t.strip() for t in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty name")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} names one twice")
    return names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target-dir", default=default_target_dir(),
                    help="where satrun and the bench programs are (cargo's target dir or its "
                         "release dir; default: %(default)s)")
    ap.add_argument("--mpi-bench", help="the mpi_bench program (default: mpi_bench in the target "
                                        "dir's bench directory, where `make bench` builds it)")
    ap.add_argument("--providers", type=name_list, default="shm,tcp",
                    help="libfabric providers, comma-separated (default: %(default)s)")
    ap.add_argument("--small-iters", type=positive_int, default=2000,
                    help="64 B hand-offs and round trips (default: %(default)s)")
    ap.add_argument("--large-iters", type=positive_int, default=7,
                    help="64 MiB operations, after one warm-up (default: %(default)s)")
    ap.add_argument("--reps", type=positive_int, default=3,
                    help="runs of the 64 B raw round trip and fi_pingpong (default: %(default)s)")
    ap.add_argument("--chunk-sizes", type=int_list, default=f"{DEFAULT_CHUNK},{BIG_CHUNK}",
                    help="chunk sizes in bytes of SAT's 64 MiB chain, one set of rows each "
                         "(default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args(argv)
    before = shm_entries()
    started = time.time()
    t0 = time.monotonic()
    log = lambda msg: print(f"# {msg}", file=sys.stderr, flush=True)
    try:
        rows = run_all(
            a.target_dir,
            mpi_bench=a.mpi_bench,
            providers=a.providers,
            small_iters=a.small_iters,
            large_iters=a.large_iters,
            reps=a.reps,
            chunks=tuple(a.chunk_sizes),
            log=log,
        )
    except Failed as e:
        print(f"micro.py: error: {e}", file=sys.stderr)
        left = left_in_shm(before, started)
        if left:
            log(f"/dev/shm entries left by processes that have ended: {' '.join(left)}")
        return 1
    seconds = time.monotonic() - t0
    left = left_in_shm(before, started)
    if a.json:
        print(json.dumps(finite(rows), indent=1, allow_nan=False))
    else:
        main_table, counts = table(rows)
        print(main_table)
        print()
        for n in notes(rows):
            print(f"- {n}")
        print()
        print("Messages per operation (SAT's two clients and their server, measured; the minimum "
              "and the protocol's total are home-based MESI's, per chunk times the chunks):")
        print()
        print(counts)
        print()
        print(f"The run took {seconds:.0f} s; load average at its end "
              f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores.")
    if left:
        log(f"/dev/shm entries left by processes that have ended: {' '.join(left)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
