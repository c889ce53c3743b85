#!/usr/bin/env python3
"""`make bench`: SAT against its peers, every figure measured in this one run, one table.

    python3 bench/run.py [--target-dir target] [--build target/bench] [--runs 5] [--json FILE]

1. The video pipeline of section 3.2 (bench/pipeline.py): SAT over shm and tcp, Open MPI over
   shared memory, ZeroMQ over ipc, the same frames, roles and application processes; frames per
   second, median of --runs interleaved runs.
2. Hand-off latency and 64 MiB PUT/GET (bench/micro.py): SAT against its own raw transport,
   libfabric's fi_pingpong and Open MPI (point-to-point and MPI-3 RMA).
3. Barriers of 2 and 8 processes (bench/barrier.py): SAT's against MPI_Barrier's.
4. The statistics stream's cost: the pipeline over shm with SAT_STATS set (from 1), and the 64 B
   hand-off with SAT_STATS set against without, alternated.

The table has one row per comparison: what is measured, the transport, SAT's figure, the peer,
the peer's figure, and SAT/peer. For frames per second a ratio above 1 is SAT ahead; for times a
ratio below 1 is; a peer without a figure shows "-". Python 3 standard library only; the programs
must be built (the Makefile's `bench` target builds them: cargo's release programs in --target-dir,
default $SAT_TARGET_DIR, else $CARGO_TARGET_DIR, else the repository's `target`; videostream, its MPI
and ZeroMQ versions and mpi_bench in --build, default the target directory's `bench`). Any failure
stops the run with a one-line error and exit status 1.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import barrier  # noqa: E402
import micro  # noqa: E402
import pipeline  # noqa: E402
from procs import bench_build_dir, default_target_dir  # noqa: E402


def pipeline_rows(result):
    rows = []
    systems = result["systems"]
    for sat, transport in (("sat-shm", "shm"), ("sat-tcp", "tcp")):
        if sat not in systems:
            continue
        for peer, name in (("mpi", "Open MPI (vader)"), ("zmq", "ZeroMQ (ipc)")):
            if peer not in systems:
                continue
            rows.append({
                "what": "video pipeline, frames/s",
                "transport": transport,
                "sat": systems[sat]["median"],
                "peer": name,
                "peer_value": systems[peer]["median"],
                "unit": "f/s",
            })
        if result.get("compute_bound"):
            # The most any pipeline of these frames can do on these cores.
            rows.append({
                "what": "video pipeline, frames/s",
                "transport": transport,
                "sat": systems[sat]["median"],
                "peer": f"compute bound ({result['reference']['cpus']} CPUs x sequential)",
                "peer_value": result["compute_bound"],
                "unit": "f/s",
            })
    return rows


def micro_rows(rows):
    out = []
    peers = (("raw", "SAT raw transport"), ("fi_pingpong", "fi_pingpong"),
             ("mpi_pt2pt", "MPI pt2pt"), ("mpi_rma", "MPI RMA"))
    for r in rows:
        if r["sat_us"] is None or r["operation"] == "PUT, release returns":
            continue
        chunks = f", {micro.human(r['chunk_size'])} chunks" if r["chunk_size"] else ""
        what = f"{r['operation']} {micro.human(r['size'])}{chunks}"
        for key, name in peers:
            v = r.get(f"{key}_us")
            if v is None:
                continue
            out.append({
                "what": what,
                "transport": r["transport"],
                "sat": r["sat_us"],
                "peer": name,
                "peer_value": v,
                "unit": "us",
            })
    return out


def stats_cost(bins, result, alternations, log):
    """Rows for the statistics stream's cost: the pipeline (from its run) and the 64 B hand-off
    with SAT_STATS set against without, alternated."""
    rows = []
    systems = result["systems"]
    if "sat-shm" in systems and "sat-shm-stats" in systems:
        rows.append({
            "what": "video pipeline, frames/s, SAT_STATS set",
            "transport": "shm",
            "sat": systems["sat-shm-stats"]["median"],
            "peer": "SAT, SAT_STATS unset",
            "peer_value": systems["sat-shm"]["median"],
            "unit": "f/s",
        })
    on, off = [], []
    with tempfile.TemporaryDirectory(prefix="sat-bench-stats-") as folder:
        for i in range(alternations):
            for samples, stats in ((off, None), (on, folder)):
                saved = os.environ.pop("SAT_STATS", None)
                if stats:
                    os.environ["SAT_STATS"] = stats
                try:
                    got = micro.handoff(bins, ["shm"], 2000, 1, micro.DEFAULT_CHUNK, 240)
                finally:
                    os.environ.pop("SAT_STATS", None)
                    if saved is not None:
                        os.environ["SAT_STATS"] = saved
                figure = got.get(("shm", "handoff", micro.SMALL), {}).get("median")
                if figure is None:
                    raise micro.Failed("the 64 B hand-off with SAT_STATS "
                                       f"{'set' if stats else 'unset'} gave no figure")
                samples.append(figure)
                log(f"hand-off 64 B, SAT_STATS {'set' if stats else 'unset'}: "
                    f"{samples[-1]:.2f} us")
        written = len(list(Path(folder).glob("sat-stats.*.json")))
    if written == 0:
        raise micro.Failed("SAT_STATS was set but no statistics file was written")
    rows.append({
        "what": f"hand-off 64 B, SAT_STATS set (median of {alternations} runs)",
        "transport": "shm",
        "sat": statistics.median(on),
        "peer": "SAT, SAT_STATS unset",
        "peer_value": statistics.median(off),
        "unit": "us",
    })
    return rows


def fmt(v, unit):
    if unit == "us" and v >= 1_000:
        return f"{v / 1000:.1f} ms"
    if unit == "us":
        return f"{v:.2f} us"
    return f"{v:.1f} {unit}"


def table(rows):
    head = "| measurement | transport | SAT | peer | peer's | SAT/peer |"
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        peer = r["peer_value"]
        ratio = f"{r['sat'] / peer:.2f}" if peer else "-"
        lines.append(
            f"| {r['what']} | {r['transport']} | {fmt(r['sat'], r['unit'])} | {r['peer']} | "
            f"{fmt(peer, r['unit']) if peer is not None else '-'} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target-dir", default=default_target_dir(),
                   help="cargo's target directory (default: %(default)s)")
    p.add_argument("--build",
                   help="where videostream, its MPI and ZeroMQ versions and mpi_bench are "
                        "(default: the target directory's bench directory, where `make bench` "
                        "builds them)")
    p.add_argument("--runs", type=micro.positive_int, default=5,
                   help="pipeline runs per system (default: %(default)s)")
    p.add_argument("--stats-runs", type=micro.positive_int, default=3,
                   help="hand-off alternations, SAT_STATS (default: %(default)s)")
    p.add_argument("--json", help="also write every figure to this file")
    a = p.parse_args(argv)
    try:
        return measure(a)
    except (pipeline.BenchError, micro.Failed) as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 1


def measure(a):
    """`make bench`'s run, from main's arguments; raises BenchError or Failed on a failure."""

    def log(text):
        print(text, file=sys.stderr, flush=True)

    started = time.monotonic()
    build = Path(a.build or bench_build_dir(a.target_dir))
    bins = micro.bin_dir(a.target_dir)
    log("== video pipeline (bench/pipeline.py)")
    pipe = pipeline.run_all(
        str(bins / "satrun"), str(build / "videostream"), str(build / "videostream_mpi"),
        str(build / "videostream_zmq"), runs=a.runs, log=log)
    log("== hand-off and 64 MiB PUT/GET (bench/micro.py)")
    micro_result = micro.run_all(a.target_dir, mpi_bench=str(build / "mpi_bench"), log=log)
    log("== barriers of 2 and 8 processes (bench/barrier.py)")
    barriers = barrier.rows(a.target_dir, str(build / "mpi_bench"), log=log)
    log("== the statistics stream's cost")
    cost = stats_cost(bins, pipe, a.stats_runs, log)

    rows = pipeline_rows(pipe) + micro_rows(micro_result) + barriers + cost
    print()
    print(pipeline.table(pipe))
    print()
    print(f"SAT against its peers, all measured in this run ({time.monotonic() - started:.0f} s, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}); "
          "frames/s: above 1 is SAT ahead; times: below 1 is SAT ahead")
    print()
    print(table(rows))
    print()
    for note in micro.notes(micro_result):
        print("- " + note)
    if a.json:
        Path(a.json).write_text(json.dumps(micro.finite(
            {"pipeline": pipe, "micro": micro_result, "barrier": barriers, "rows": rows}),
            indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
