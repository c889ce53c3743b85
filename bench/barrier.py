#!/usr/bin/env python3
"""Barriers of 2 and 8 processes: SAT against MPI_Barrier, in one run.

    python3 bench/barrier.py --target-dir target --mpi-bench bench/mpi/mpi_bench [--rounds 2000] [--json]

- SAT: ``sat-sync-bench --providers shm --sizes 2,8``: N clients of one server call barrier(id, N) in a
  loop; the first client's median interval between two returns (one full round). SAT runs N + 1
  processes (its server); on one host the barrier is a word in a host slot and sends no message.
- MPI: ``mpi_bench -b`` under ``mpirun -n N`` over shared memory (vader), timed the same way on rank 0.

Python 3 standard library only; ``bench/run.py`` takes these rows into its table.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import micro  # noqa: E402

SIZES = (2, 8)


def sat(bins, rounds, timeout=300):
    """{N: median us} of SAT's barrier of N clients over shm."""
    cmd = [str(bins / "sat-sync-bench"), "--providers", "shm", "--sizes",
           ",".join(str(n) for n in SIZES), "--iters", str(rounds)]
    got = {}
    for line in micro.run(cmd, timeout).splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == "shm" and f[1] == "barrier":
            got[int(f[2])] = micro.num(f[3])
    return got


def mpi(mpi_bench, rounds, timeout=300):
    """{N: median us} of MPI_Barrier over N ranks (vader)."""
    mpirun = shutil.which("mpirun")
    if not mpirun or not mpi_bench or not Path(mpi_bench).exists():
        raise micro.Failed("mpirun or mpi_bench not found (make -C bench/mpi)")
    got = {}
    for n in SIZES:
        cmd = [mpirun]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += ["-n", str(n), "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1"]
        cmd += micro.MPI_TRANSPORTS["shm"]
        cmd += [str(mpi_bench), "-b", "-n", str(rounds)]
        for line in micro.run(cmd, timeout).splitlines():
            f = line.split()
            if len(f) >= 4 and f[0] == "RESULT" and f[1] == "barrier":
                got[int(f[2])] = micro.num(f[3])
    return got


def rows(target_dir, mpi_bench, rounds=2000, log=lambda _: None):
    """The table rows of bench/run.py: one per size, SAT against MPI_Barrier."""
    bins = micro.bin_dir(target_dir)
    s = sat(bins, rounds)
    m = mpi(mpi_bench, rounds)
    out = []
    for n in SIZES:
        if n in s and n in m:
            log(f"barrier of {n}: SAT {s[n]:.2f} us, MPI_Barrier {m[n]:.2f} us")
            out.append({
                "what": f"barrier, {n} processes (SAT: + its server)",
                "transport": "shm",
                "sat": s[n],
                "peer": "MPI_Barrier (vader)",
                "peer_value": m[n],
                "unit": "us",
            })
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target-dir", default="target")
    p.add_argument("--mpi-bench", default=str(HERE / "mpi" / "mpi_bench"))
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    r = rows(a.target_dir, a.mpi_bench, a.rounds)
    if a.json:
        print(json.dumps(r, indent=1))
    else:
        for row in r:
            print(f"{row['what']}: SAT {row['sat']:.2f} us, {row['peer']} {row['peer_value']:.2f} us, "
                  f"SAT/MPI {row['sat'] / row['peer_value']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
