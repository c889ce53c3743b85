#!/usr/bin/env python3
"""The soak: 16 processes under a steady mixed load for an hour, memory watched.

Starts ``satrun -n 16 --topology sat-core/topologies/soak.xml --
examples/soak --seconds S`` (two servers, fourteen clients; the program's
doc comment says what each client does and checks), and every ``--every``
seconds reads each process's resident size (``VmRSS``) from /proc. At the
end it prints, per process, the resident size once the load has settled
(the first sample after a tenth of the run, at least a minute in when the
run is long enough) and the largest of the last tenth, and fails when any
process grew by more than a fifth plus 16 MiB: a leak of one allocation per
operation, at the rate this load goes, grows far past that within the hour.
It also fails when the run fails (a check in the program, or a process
that died) or leaves files in /dev/shm.

    bench/soak.py --target-dir target [--seconds 3600] [--every 10] [--json]

``make soak`` builds what it needs and runs it for an hour (``SOAK_S`` to
change that). Python 3 standard library only.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCESSES = 16
GROWTH_FACTOR = 1.2
GROWTH_SLACK_KIB = 16 << 10


def release_dir(target_dir):
    d = os.path.abspath(target_dir)
    return d if os.path.basename(d) == "release" else os.path.join(d, "release")


def descendants(root):
    """The pids of every process below `root` (satrun's ranks)."""
    children = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(pid))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def rank_and_rss(pid):
    """(rank, VmRSS in KiB) of a SAT process, or None for anything else."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(
                kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv
            )
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except OSError:
        return None
    rank = env.get(b"SAT_RANK")
    m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    if rank is None or m is None:
        return None
    return int(rank), int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target-dir", default="target")
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rel = release_dir(a.target_dir)
    cmd = [
        os.path.join(rel, "satrun"),
        "-n",
        str(PROCESSES),
        "--topology",
        os.path.join(ROOT, "sat-core/topologies/soak.xml"),
        "--",
        os.path.join(rel, "examples/soak"),
        "--seconds",
        str(a.seconds),
    ]
    shm_before, started = procs.shm_entries(), time.time()
    t0 = time.monotonic()
    run = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    samples = []  # (seconds since start, {rank: rss KiB})
    output = []
    reader = threading.Thread(target=lambda: output.extend(run.stdout), daemon=True)
    reader.start()
    # The program stops at its next 10-epoch barrier after --seconds; a run
    # still going well past that hangs.
    bound = a.seconds + 300
    try:
        while run.poll() is None:
            if time.monotonic() - t0 > bound:
                raise SystemExit(f"soak: the run still goes {bound} s after it started: a hang")
            sample = {}
            for pid in descendants(run.pid):
                got = rank_and_rss(pid)
                if got is not None:
                    sample[got[0]] = got[1]
            if sample:
                samples.append((time.monotonic() - t0, sample))
            time.sleep(a.every)
    finally:
        procs.kill_group(run)
    reader.join(timeout=10)
    text = "".join(output)
    elapsed = time.monotonic() - t0
    failures = []
    if run.returncode != 0:
        failures.append(f"satrun exited with status {run.returncode}")
    finals = re.findall(r"rank (\d+): (\d+) epochs in \d+ s, (\d+) MiB checked", text)
    if len(finals) != PROCESSES - 2:
        failures.append(f"{len(finals)} of {PROCESSES - 2} clients finished their checks")
    left = procs.left_in_shm(shm_before, started)
    if left:
        failures.append(f"files left in /dev/shm: {sorted(left)}")
    settle_at = min(max(elapsed / 10, 60.0), elapsed / 2)
    tail_from = elapsed * 0.9
    rows = []
    for rank in range(PROCESSES):
        series = [(t, s[rank]) for t, s in samples if rank in s]
        if not series:
            failures.append(f"rank {rank} was never sampled")
            continue
        settled = next((r for t, r in series if t >= settle_at), series[-1][1])
        tail = [r for t, r in series if t >= tail_from] or [series[-1][1]]
        end = max(tail)
        peak = max(r for _, r in series)
        bound_kib = settled * GROWTH_FACTOR + GROWTH_SLACK_KIB
        rows.append(
            {
                "rank": rank,
                "role": "server" if rank < 2 else "client",
                "settled_kib": settled,
                "end_kib": end,
                "peak_kib": peak,
                "growth_kib": end - settled,
            }
        )
        if end > bound_kib:
            failures.append(
                f"rank {rank} grew from {settled} KiB to {end} KiB (bound {bound_kib:.0f} KiB)"
            )
    epochs = int(finals[0][1]) if finals else 0
    checked_mib = sum(int(f[2]) for f in finals)
    result = {
        "seconds": round(elapsed),
        "processes": PROCESSES,
        "samples": len(samples),
        "epochs_per_client": epochs,
        "mib_checked": checked_mib,
        "ranks": rows,
        "failures": failures,
    }
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"soak: {PROCESSES} processes for {elapsed:.0f} s, {epochs} epochs per client, "
            f"{checked_mib} MiB read and checked, {len(samples)} samples of every resident size"
        )
        print(f"{'rank':>4} {'role':<7} {'settled KiB':>12} {'end KiB':>10} {'peak KiB':>10} {'growth KiB':>11}")
        for r in rows:
            print(
                f"{r['rank']:>4} {r['role']:<7} {r['settled_kib']:>12} {r['end_kib']:>10} "
                f"{r['peak_kib']:>10} {r['growth_kib']:>11}"
            )
        for f in failures:
            print(f"soak: FAILED: {f}")
    if failures:
        sys.stderr.write(text[-4000:])
        sys.exit(1)


if __name__ == "__main__":
    main()
