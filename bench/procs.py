"""What the benchmark scripts share about the processes they start: ending a run's whole process
group, finding the /dev/shm files a run left behind, and where `make bench` builds the programs
(and what to say when one is missing). Python 3 standard library only."""

import os
import signal
import time


def kill_group(proc):
    """Ends the process group `proc` leads (started with start_new_session=True): SIGTERM, then
    SIGKILL if it is still there after 3 s."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def shm_in_use():
    """The /dev/shm files some process has open or mapped."""
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        used.add(line[i + 9 :].split(" (deleted)")[0].strip())
        except OSError:
            pass
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    used.add(target[9:])
        except OSError:
            pass
    return used


def left_in_shm(before, started):
    """/dev/shm entries a run left: new since `before`, made after `started` (time.time()), and
    open or mapped by no process (other programs on the machine may make their own files
    meanwhile)."""
    new = []
    for name in sorted(shm_entries() - before):
        try:
            if os.stat(os.path.join("/dev/shm", name)).st_mtime >= started - 1:
                new.append(name)
        except FileNotFoundError:
            pass
    if not new:
        return []
    used = shm_in_use()
    return [name for name in new if name not in used]


# ------------------------------------------------------- where `make bench` builds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_target_dir():
    """cargo's target directory as the Makefile sees it: $SAT_TARGET_DIR, else $CARGO_TARGET_DIR,
    else the repository's `target`."""
    return (os.environ.get("SAT_TARGET_DIR") or os.environ.get("CARGO_TARGET_DIR")
            or os.path.join(ROOT, "target"))


def bench_build_dir(target_dir):
    """Where `make bench` puts the C programs (the Makefile's BENCH_BUILD, <target dir>/bench):
    videostream, videostream_mpi, videostream_zmq and mpi_bench. `target_dir` may also be its
    `release` directory (the one holding satrun)."""
    d = os.path.abspath(str(target_dir))
    if os.path.basename(d) == "release" and os.path.exists(os.path.join(d, "satrun")):
        d = os.path.dirname(d)
    return os.path.join(d, "bench")


# What builds each program of the benchmarks (`make bench` builds them all).
BUILT_BY = {
    "satrun": "`make bench` builds it (alone: cargo build --release -p sat-core --bin satrun)",
    "sat-handoff-bench": "`make bench` builds it (alone: cargo build --release -p sat-bench "
                         "--bin sat-handoff-bench)",
    "sat-transport-bench": "`make bench` builds it (alone: cargo build --release -p sat-bench "
                           "--bin sat-transport-bench)",
    "sat-sync-bench": "`make bench` builds it (alone: cargo build --release -p sat-bench "
                      "--bin sat-sync-bench)",
    "videostream": "`make bench-videostream` builds it (`make bench` runs that target)",
    "videostream_mpi": "`make bench` builds it (alone: make -C bench/pipeline BUILD=<target dir>/bench)",
    "videostream_zmq": "`make bench` builds it (alone: make -C bench/pipeline BUILD=<target dir>/bench)",
    "mpi_bench": "`make bench` builds it (alone: make -C bench/mpi OUT=<target dir>/bench/mpi_bench)",
}


def built_by(path):
    """What builds the program `path`, for a message about a missing program."""
    return BUILT_BY.get(os.path.basename(str(path)), "build it first")


def missing_program(path):
    """The message for a program that is not there (or not executable)."""
    return f"no program {path}: {built_by(path)}"


def is_program(path):
    return bool(path) and os.path.isfile(str(path)) and os.access(str(path), os.X_OK)
