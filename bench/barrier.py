#!/usr/bin/env python3
"""Barriers of 2 and 8 processes: SAT against MPI_Barrier, in one run.

    python3 bench/barrier.py [--target-dir target] [--mpi-bench target/bench/mpi_bench] [--rounds 2000] [--json]

- SAT: ``sat-sync-bench --providers shm --sizes 2,8``: N clients of one server call barrier(id, N) in a
  loop; the first client's median interval between two returns (one full round). SAT runs N + 1
  processes (its server); on one host the barrier is a word in a host slot and sends no message.
- MPI: ``mpi_bench -b`` under ``mpirun -n N`` over shared memory (vader), timed the same way on rank 0.

Times are in microseconds. ``--target-dir`` is cargo's target directory or its ``release`` directory
(default: $SAT_TARGET_DIR, else $CARGO_TARGET_DIR, else the repository's ``target``); ``mpi_bench`` is by
default in its ``bench`` directory, where ``make bench`` builds it. SAT must give a figure for every size,
and mpirun and mpi_bench must be there, or the script fails (exit status 1); a size for which MPI gives no
figure is said on stderr and keeps its row, the peer's cell empty (``peer_value`` null in the JSON).

Python 3 standard library only; ``bench/run.py`` takes these rows into its table.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import micro  # noqa: E402
from procs import default_target_dir, left_in_shm, shm_entries  # noqa: E402

SIZES = (2, 8)


def sat(bins, rounds, timeout=300):
    """{N: median us} of SAT's barrier of N clients over shm."""
    cmd = [str(bins / "sat-sync-bench"), "--providers", "shm", "--sizes",
           ",".join(str(n) for n in SIZES), "--iters", str(rounds)]
    got = {}
    for line in micro.run(cmd, timeout).splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == "shm" and f[1] == "barrier" and f[2].isdigit():
            v = micro.num(f[3])
            if v is not None:
                got[int(f[2])] = v
    return got


def mpi(mpi_bench, rounds, timeout=300, log=lambda _: None):
    """{N: median us} of MPI_Barrier over N ranks (vader); a size whose run fails or prints no
    figure is left out, and `log` says why. Raises micro.Failed without mpirun or mpi_bench."""
    mpirun = micro.mpi_missing(mpi_bench)
    got = {}
    for n in SIZES:
        cmd = [mpirun]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += ["-n", str(n), "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1"]
        cmd += micro.MPI_TRANSPORTS["shm"]
        cmd += [str(mpi_bench), "-b", "-n", str(rounds)]
        try:
            out = micro.run(cmd, timeout)
        except micro.Failed as e:
            log(f"barrier of {n}: MPI_Barrier gave no figure: {e}")
            continue
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 4 and f[0] == "RESULT" and f[1] == "barrier" and f[2].isdigit():
                v = micro.num(f[3])
                if v is not None:
                    got[int(f[2])] = v
        if n not in got:
            log(f"barrier of {n}: MPI_Barrier gave no figure (mpi_bench -b under mpirun -n {n} "
                "printed no RESULT barrier line for it): its cell stays empty")
    return got


def rows(target_dir, mpi_bench=None, rounds=2000, log=lambda _: None):
    """The table rows of bench/run.py: one per size, SAT against MPI_Barrier. Raises micro.Failed
    if SAT gives no figure for a size, or without mpirun or mpi_bench (default: where `make bench`
    builds it); a size without MPI's figure keeps its row with peer_value None."""
    micro.positive_counts(rounds=rounds)
    bins = micro.bin_dir(target_dir)
    if mpi_bench is None:
        mpi_bench = micro.default_mpi_bench(target_dir)
    micro.mpi_missing(mpi_bench)
    try:
        s = sat(bins, rounds)
    except micro.Failed as e:
        raise micro.Failed(f"SAT's barrier failed: {e}")
    lost = [n for n in SIZES if n not in s]
    if lost:
        raise micro.Failed("SAT's barrier gave no figure for "
                           + " and ".join(f"{n} clients" for n in lost)
                           + " (sat-sync-bench --sizes " + ",".join(map(str, SIZES)) + ")")
    m = mpi(mpi_bench, rounds, log=log)
    out = []
    for n in SIZES:
        peer = m.get(n)
        log(f"barrier of {n}: SAT {s[n]:.2f} us, MPI_Barrier "
            + (f"{peer:.2f} us" if peer is not None else "no figure"))
        out.append({
            "what": f"barrier, {n} processes (SAT: + its server)",
            "transport": "shm",
            "sat": s[n],
            "peer": "MPI_Barrier (vader)",
            "peer_value": peer,
            "unit": "us",
        })
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target-dir", default=default_target_dir(),
                   help="cargo's target directory or its release directory (default: %(default)s)")
    p.add_argument("--mpi-bench", help="the mpi_bench program (default: mpi_bench in the target "
                                       "directory's bench directory, where `make bench` builds it)")
    p.add_argument("--rounds", type=micro.positive_int, default=2000,
                   help="barrier rounds per size (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = p.parse_args(argv)
    before, started = shm_entries(), time.time()

    def log(text):
        print(f"# {text}", file=sys.stderr, flush=True)

    try:
        r = rows(a.target_dir, a.mpi_bench, a.rounds, log=log)
    except micro.Failed as e:
        print(f"barrier.py: error: {e}", file=sys.stderr)
        return 1
    finally:
        left = left_in_shm(before, started)
        if left:
            log(f"/dev/shm entries left by processes that have ended: {' '.join(left)}")
    if a.json:
        print(json.dumps(micro.finite(r), indent=1, allow_nan=False))
    else:
        for row in r:
            peer = row["peer_value"]
            print(f"{row['what']}: SAT {row['sat']:.2f} us, {row['peer']} "
                  + (f"{peer:.2f} us, SAT/MPI {row['sat'] / peer:.2f}" if peer else "-, SAT/MPI -"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
