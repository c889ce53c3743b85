#!/usr/bin/env python3
"""The video pipeline of section 3.2 of the SAT report (Figure 16) measured
three ways: SAT (examples-c/videostream), MPI (bench/pipeline/videostream_mpi,
Open MPI) and ZeroMQ (bench/pipeline/videostream_zmq, libzmq), with the same
frames, roles, scheduling, processing code and number of application
processes: 1 input, W processing tasks and 1 output (plus the SAT server).

    python3 bench/pipeline.py [--systems sat-shm,mpi] [--runs 5] [--json]
        [--satrun target/release/satrun] [--sat-prog target/bench/videostream]
        [--mpi-prog target/bench/videostream_mpi]
        [--zmq-prog target/bench/videostream_zmq]

The programs' defaults are where `make bench` builds them: satrun in cargo's
release directory, the three videostreams in its `bench` directory
(`make bench-videostream` builds videostream alone), cargo's target directory
being $SAT_TARGET_DIR, else $CARGO_TARGET_DIR, else the repository's `target`.

Each run prints what the output role measured ("output: N frames in S s:
F frames/s", from the input starting to produce frame 0 to the output holding
the last result, S printed to the millisecond; the output does not recompute
frames: --no-check); the script takes N / S as the run's frames/s. The
systems run interleaved (run 1 of each, then run 2 of each, ...), so that a
slow spell of the machine hits all of them; it prints the median frames/s of
each, the range, and the ratios of SAT's medians to MPI's, ZeroMQ's and (when
measured) polling MPI's, all from this one invocation (JSON: "ratios", for
each SAT system a dict keyed "mpi", "zmq" and "mpi-poll", each peer measured).

Each round also runs the sequential reference once (`videostream --reference`
with the same frames: one plain process makes and processes every frame, no
S-DSM, and prints its rate). The pipeline spreads that same work over the
machine's cores, so no system can beat the **compute bound**: the usable
CPUs times the reference's median rate. The table shows each system's share
of it ("of bound"); the JSON has "reference", "compute_bound" and each
system's "of_bound".

Systems (--systems, comma-separated, none twice; the default is the first five):
  sat-shm        SAT over libfabric's shm provider
  sat-tcp        SAT over libfabric's tcp provider
  sat-shm-stats  sat-shm with SAT_STATS=<a temporary folder>: the cost of the
                 statistics stream (the folder is removed afterwards)
  mpi            Open MPI, shared-memory BTL vader (`--mca pml ob1 --mca btl
                 self,vader`) with `--mca mpi_yield_when_idle 1`
  zmq            ZeroMQ over ipc:// endpoints (Unix domain sockets)
  mpi-poll       Open MPI as `mpi` but polling while it waits
                 (`--mca mpi_yield_when_idle 0`, its default when it has a
                 core per rank), to compare: on a machine with fewer cores
                 than processes the polling input and output take CPU time
                 from the processing tasks (the table's SAT/MPI-poll
                 column, the JSON's ratios[...]["mpi-poll"])

The number of processing tasks W is the number of role-2 entries of the SAT
topology (--topology, default bench/pipeline/sat-1server.xml: 1 server, 1
input, 2 tasks, 1 output); MPI gets W + 2 ranks, ZeroMQ --workers W.

The machine must be otherwise idle for the numbers to mean much. Each run
also records the share of the machine's CPU time that went elsewhere while
it ran: stolen by the hypervisor (on a virtual machine) and used by other
processes (/proc/stat, less the run's own CPU time); the table shows their
medians, the JSON every sample. Ratios taken from one invocation, the
systems interleaved, hold better than absolute rates across such spells.

Every run must end within --timeout seconds (its whole process group is
killed otherwise), must succeed, must report every frame exactly once (the
output's summary line, the input's, and the tasks' counts adding up), and
must leave nothing behind in /dev/shm; the script fails loudly otherwise.

Python 3 standard library only. `run_all(...)` is the measurement as a
function returning the dict `--json` prints.
"""

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import (  # noqa: E402
    bench_build_dir, default_target_dir, is_program, kill_group, left_in_shm, missing_program,
    shm_entries,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Where `make bench` builds the programs (the Makefile's TARGET_DIR and BENCH_BUILD).
TARGET_DIR = default_target_dir()
BENCH_BUILD = bench_build_dir(TARGET_DIR)
DEFAULT_SATRUN = os.path.join(TARGET_DIR, "release", "satrun")
DEFAULT_SAT_PROG = os.path.join(BENCH_BUILD, "videostream")
DEFAULT_MPI_PROG = os.path.join(BENCH_BUILD, "videostream_mpi")
DEFAULT_ZMQ_PROG = os.path.join(BENCH_BUILD, "videostream_zmq")
DEFAULT_TOPOLOGY = os.path.join(HERE, "pipeline", "sat-1server.xml")
DEFAULT_SYSTEMS = ["sat-shm", "sat-tcp", "sat-shm-stats", "mpi", "zmq"]
ALL_SYSTEMS = DEFAULT_SYSTEMS + ["mpi-poll"]
SAT_SYSTEMS = ["sat-shm", "sat-tcp", "sat-shm-stats"]
# The peers each SAT system's median is divided by (result["ratios"][sat][peer]).
RATIO_PEERS = ["mpi", "zmq", "mpi-poll"]
# Open MPI on one node: its shared-memory BTL only (and self); ob1 picks
# vader by itself, naming it keeps any other transport out. vader's
# single-copy mechanism (CMA) measured the same as none; the tcp BTL no
# faster.
MPI_TRANSPORT = ["--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
# With 4 ranks on 2 cores, Open MPI's polling input and output keep both
# cores busy (6.2 s of CPU for a 3.2 s run of 400 frames, 115 to 135
# frames/s); yielding while idle leaves the processing tasks the CPU (3.8 s
# of CPU in 2 s, 180 to 250 frames/s). mpirun already yields by itself when
# it sees more ranks than cores (as here, with --oversubscribe); `mpi` says
# so explicitly, as the faster, and `mpi-poll` forces polling, to compare.
MPI_YIELD = ["--mca", "mpi_yield_when_idle", "1"]
MPI_POLL = ["--mca", "mpi_yield_when_idle", "0"]

# 640x480 (VGA) frames, 400 of them, through 2 processing tasks: on an idle
# 2-core machine a run takes about 1.7 to 2 s with MPI or ZeroMQ (200 to 250
# frames/s), 3.5 s with SAT over shm and 5 s over tcp; enough frames that
# the start of a run (the first frames, while the roles still set up) counts
# little, few enough that 5 interleaved runs of the 5 systems take under 2
# minutes. One processing task per core: more tasks than cores would only
# time-share them.
DEFAULT_FRAMES = 400
DEFAULT_WIDTH = 640
DEFAULT_HEIGHT = 480
DEFAULT_TIMEOUT = 120.0

RATE = re.compile(r"output: (\d+) frames in ([0-9.]+) s: ([0-9.]+) frames/s")
SUMMARY = re.compile(r"output: (\d+) frames, each exactly once")
GIVEN = re.compile(r"input: (\d+) frames given and consumed")
PROCESSED = re.compile(r"worker (\d+): processed (\d+) frames")
REFERENCE = re.compile(r"reference: (\d+) frames in ([0-9.]+) s: ([0-9.]+) frames/s")


class BenchError(Exception):
    """A run that failed, timed out, miscounted or left files behind."""


def workers_of(topology):
    """The number of processing tasks (role 2) and of processes of a topology. Raises
    BenchError if the file cannot be read or is not XML."""
    try:
        root = ET.parse(topology).getroot()
    except OSError as e:
        raise BenchError(f"topology {topology}: {e.strerror or e}")
    except ET.ParseError as e:
        raise BenchError(f"topology {topology}: not well-formed XML ({e})")
    entries = root.iter("topology")
    roles = [e.get("role") for e in entries]
    return roles.count("2"), len(roles)


def cpu_times():
    """The machine's CPU time so far (/proc/stat, all CPUs), in clock ticks:
    (busy, stolen, total). Stolen is time the hypervisor of a virtual
    machine gave to someone else while this one wanted to run."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    fields += [0] * (8 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    busy = user + nice + system + irq + softirq
    return busy, steal, busy + steal + idle + iowait


def children_cpu():
    """CPU seconds of this process's ended (and waited for) descendants."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def disturbance(cpu_before, cpu_after, ours_seconds):
    """What else happened on the machine during a run, as shares of its CPU
    time: `steal` (taken by the hypervisor) and `others` (busy with
    processes not of the run)."""
    if cpu_before is None or cpu_after is None:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy, steal, total = (a - b for a, b in zip(cpu_after, cpu_before))
    if total <= 0:
        return None
    others = max(0.0, busy / hz - ours_seconds) * hz
    return {"steal": steal / total, "others": others / total}


def run_once(name, cmd, env, timeout, frames, workers):
    """Runs one command (its own session and process group) and returns
    the frames/s and seconds its output role reported, and the disturbance
    of the run (or None where /proc/stat is missing)."""
    before = shm_entries()
    started = time.time()
    cpu_before, ours_before = cpu_times(), children_cpu()
    try:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as e:
        raise BenchError(f"{name}: cannot run {cmd[0]}: {e.strerror or e}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        raise BenchError(
            f"{name}: no end after {timeout:g} s, stopped\n$ {' '.join(cmd)}\n{tail(out, err)}"
        )
    except BaseException:
        kill_group(proc)
        proc.communicate()
        raise
    noise = disturbance(cpu_before, cpu_times(), children_cpu() - ours_before)
    # Whatever the run started must have ended with it.
    try:
        os.killpg(proc.pid, 0)
        kill_group(proc)
        stray = True
    except ProcessLookupError:
        stray = False

    def fail(why):
        return BenchError(f"{name}: {why}\n$ {' '.join(cmd)}\n{tail(out, err)}")

    if proc.returncode != 0:
        raise fail(f"exit status {proc.returncode}")
    if stray:
        raise fail("processes of the run outlived it (now killed)")
    time.sleep(0.05)
    left = left_in_shm(before, started)
    if left:
        raise fail(f"files left in /dev/shm: {', '.join(left)}")
    rates = RATE.findall(out)
    if len(rates) != 1:
        raise fail(f"{len(rates)} frames/s lines, not 1")
    n, seconds = int(rates[0][0]), float(rates[0][1])
    if n != frames or seconds <= 0:
        raise fail(f"the output role timed {n} frames in {seconds} s, not {frames}")
    summary = [int(x) for x in SUMMARY.findall(out)]
    if summary != [frames]:
        raise fail(f"the output role did not report {frames} frames, each exactly once")
    given = [int(x) for x in GIVEN.findall(out)]
    if given != [frames]:
        raise fail(f"the input did not report {frames} frames given and consumed")
    done = {int(p): int(k) for p, k in PROCESSED.findall(out)}
    if sorted(done) != list(range(workers)) or sum(done.values()) != frames:
        raise fail(f"the tasks processed {done}, not {frames} frames among {workers}")
    return n / seconds, seconds, noise


def tail(out, err, lines=15):
    def last(s):
        return "\n".join((s or "").rstrip().splitlines()[-lines:])

    return f"--- stdout (end)\n{last(out)}\n--- stderr (end)\n{last(err)}"


def run_reference(prog, prog_args, timeout, frames):
    """Runs the sequential reference (`videostream --reference`: one plain
    process makes and processes every frame, no S-DSM) and returns the
    frames/s it reports. Times the same frames and code as the pipelines."""
    cmd = [prog, "--reference"] + prog_args
    try:
        out = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"reference: no end after {timeout:g} s\n$ {' '.join(cmd)}")
    except OSError as e:
        raise BenchError(f"reference: cannot run {prog}: {e.strerror or e}")
    rates = REFERENCE.findall(out.stdout)
    if out.returncode != 0 or len(rates) != 1 or int(rates[0][0]) != frames:
        raise BenchError(
            f"reference: exit status {out.returncode}, {len(rates)} rate lines\n$ "
            f"{' '.join(cmd)}\n{tail(out.stdout, out.stderr)}"
        )
    n, seconds = int(rates[0][0]), float(rates[0][1])
    if seconds <= 0:
        raise BenchError(f"reference: {n} frames in {seconds} s\n$ {' '.join(cmd)}")
    return n / seconds


def usable_cpus():
    """The CPUs this process (and so each run) may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def frame_args(frames, width, height, check):
    """The options every program gets (the sequential reference too)."""
    prog_args = ["--frames", str(frames), "--width", str(width), "--height", str(height)]
    if not check:
        prog_args.append("--no-check")
    return prog_args


def commands(args, workers, nprocs, stats_dir):
    """The command line and environment of each system."""
    prog_args = frame_args(args["frames"], args["width"], args["height"], args["check"])
    env = dict(os.environ)
    env.pop("SAT_STATS", None)

    def sat(provider):
        return [
            args["satrun"],
            "-n",
            str(nprocs),
            "--topology",
            args["topology"],
            "--provider",
            provider,
            "--",
            args["sat_prog"],
        ] + prog_args

    def mpi(yield_when_idle):
        cmd = [args["mpirun"]]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += ["--oversubscribe"] + MPI_TRANSPORT
        cmd += MPI_YIELD if yield_when_idle else MPI_POLL
        return cmd + ["-n", str(workers + 2), args["mpi_prog"]] + prog_args

    stats_env = dict(env, SAT_STATS=stats_dir)
    return {
        "sat-shm": (sat("shm"), env),
        "sat-tcp": (sat("tcp"), env),
        "sat-shm-stats": (sat("shm"), stats_env),
        "mpi": (mpi(True), env),
        "mpi-poll": (mpi(False), env),
        "zmq": ([args["zmq_prog"], "--workers", str(workers)] + prog_args, env),
    }


def run_all(
    satrun,
    sat_prog,
    mpi_prog,
    zmq_prog,
    runs=5,
    frames=DEFAULT_FRAMES,
    width=DEFAULT_WIDTH,
    height=DEFAULT_HEIGHT,
    systems=None,
    topology=DEFAULT_TOPOLOGY,
    mpirun="mpirun",
    timeout=DEFAULT_TIMEOUT,
    check=False,
    log=None,
):
    """Measures the systems, interleaved, `runs` times each. Returns a dict:
    the parameters, and for each system its samples (frames/s, seconds),
    median, min and max, its command line, and for each SAT system the
    ratios of its median to MPI's, ZeroMQ's and polling MPI's (each peer
    measured; keys "mpi", "zmq", "mpi-poll"). `systems` None is
    DEFAULT_SYSTEMS; an empty list, an unknown system or one named twice
    raises BenchError. `log(text)`
    is told of each run. Raises BenchError on any bad run."""
    systems = list(DEFAULT_SYSTEMS if systems is None else systems)
    if not systems:
        raise BenchError(f"no system to measure; known: {', '.join(ALL_SYSTEMS)}")
    unknown = [s for s in systems if s not in ALL_SYSTEMS]
    if unknown:
        raise BenchError(f"unknown systems {unknown}; known: {', '.join(ALL_SYSTEMS)}")
    twice = sorted({s for s in systems if systems.count(s) > 1})
    if twice:
        raise BenchError(f"systems named twice: {', '.join(twice)} (--runs sets the runs of each)")
    if runs < 1 or frames < 1:
        raise BenchError("--runs and --frames must be at least 1")
    if width < 1 or height < 1:
        raise BenchError("--width and --height must be at least 1")
    if not timeout > 0:
        raise BenchError("--timeout must be above 0")
    workers, nprocs = workers_of(topology)
    if workers < 1:
        raise BenchError(f"{topology}: no processing task (role 2)")
    progs = {"sat": [satrun, sat_prog], "mpi": [mpi_prog], "zmq": [zmq_prog]}
    for s in systems:
        for p in progs[s.split("-")[0]]:
            if not is_program(p):
                raise BenchError(f"{s}: {missing_program(p)}")
    if any(s.startswith("mpi") for s in systems) and shutil.which(mpirun) is None:
        raise BenchError(f"no {mpirun}: run scripts/setup.sh --peers")

    load_before = os.getloadavg()
    stats_dir = tempfile.mkdtemp(prefix="sat-pipeline-stats-")
    try:
        cmds = commands(
            {
                "satrun": satrun,
                "sat_prog": sat_prog,
                "mpi_prog": mpi_prog,
                "zmq_prog": zmq_prog,
                "topology": topology,
                "mpirun": mpirun,
                "frames": frames,
                "width": width,
                "height": height,
                "check": check,
            },
            workers,
            nprocs,
            stats_dir,
        )
        samples = {s: [] for s in systems}
        seconds = {s: [] for s in systems}
        noises = {s: [] for s in systems}
        # The sequential reference is videostream's own mode; without that
        # program there is no compute bound to show.
        reference = sat_prog and os.path.isfile(sat_prog) and os.access(sat_prog, os.X_OK)
        reference_samples = []
        for r in range(runs):
            if reference:
                fps = run_reference(sat_prog, frame_args(frames, width, height, check), timeout, frames)
                reference_samples.append(fps)
                if log:
                    log(f"run {r + 1}/{runs} reference (sequential): {fps:.1f} frames/s")
            for s in systems:
                cmd, env = cmds[s]
                fps, secs, noise = run_once(s, cmd, env, timeout, frames, workers)
                samples[s].append(fps)
                seconds[s].append(secs)
                noises[s].append(noise)
                if log:
                    extra = (
                        f"; CPU stolen {noise['steal']:.0%}, others {noise['others']:.0%}"
                        if noise
                        else ""
                    )
                    log(f"run {r + 1}/{runs} {s}: {fps:.1f} frames/s ({secs:.3f} s{extra})")
        stats_files = len(os.listdir(stats_dir))
    finally:
        shutil.rmtree(stats_dir, ignore_errors=True)

    result = {
        "frames": frames,
        "width": width,
        "height": height,
        "workers": workers,
        "processes": {"sat": nprocs, "mpi": workers + 2, "zmq": workers + 2},
        "runs": runs,
        "check": check,
        "cpus": os.cpu_count(),
        # The machine's load averages (1, 5, 15 min) before and after: other
        # work on it shows here, and in the spread of the samples.
        "loadavg": {"before": list(load_before), "after": list(os.getloadavg())},
        "topology": os.path.abspath(topology),
        "systems": {},
        "ratios": {},
        # The sequential reference's frames/s in each round, and the bound
        # they give: no pipeline of these frames on `usable_cpus` cores can
        # run faster than that many times the sequential rate (every frame
        # is made once and processed once; a perfect pipeline only spreads
        # that work over the cores). None without the program.
        "reference": None,
        "compute_bound": None,
    }
    if reference_samples:
        cpus = usable_cpus()
        median = statistics.median(reference_samples)
        result["reference"] = {
            "median": median,
            "min": min(reference_samples),
            "max": max(reference_samples),
            "samples": reference_samples,
            "cpus": cpus,
            "command": [sat_prog, "--reference"] + frame_args(frames, width, height, check),
        }
        result["compute_bound"] = cpus * median
    for s in systems:
        v = samples[s]
        result["systems"][s] = {
            "median": statistics.median(v),
            "min": min(v),
            "max": max(v),
            "samples": v,
            "seconds": seconds[s],
            # Per run, the shares of the machine's CPU time the hypervisor
            # stole and other processes used (None: unknown).
            "steal": [n["steal"] if n else None for n in noises[s]],
            "others": [n["others"] if n else None for n in noises[s]],
            "command": cmds[s][0],
        }
        if result["compute_bound"]:
            # The share of the compute bound this system's median reached.
            result["systems"][s]["of_bound"] = statistics.median(v) / result["compute_bound"]
    if "sat-shm-stats" in systems:
        result["systems"]["sat-shm-stats"]["stats_files"] = stats_files
    for s in systems:
        if s not in SAT_SYSTEMS:
            continue
        ratios = {}
        for peer in RATIO_PEERS:
            if peer in systems:
                ratios[peer] = result["systems"][s]["median"] / result["systems"][peer]["median"]
        result["ratios"][s] = ratios
    return result


def table(result):
    """The result as a text table."""
    # The SAT/MPI-poll column only when polling MPI was measured.
    poll = "mpi-poll" in result["systems"]
    lines = [
        f"video pipeline: {result['frames']} frames of {result['width']}x{result['height']}, "
        f"1 input, {result['workers']} processing tasks, 1 output "
        f"(SAT: + {result['processes']['sat'] - result['workers'] - 2} server); "
        f"median of {result['runs']} runs, interleaved; {result['cpus']} CPUs, load average "
        f"{result['loadavg']['before'][0]:.2f} before, {result['loadavg']['after'][0]:.2f} after",
        "",
        f"{'system':<15} {'median f/s':>10} {'min-max f/s':>15} {'SAT/MPI':>8} {'SAT/ZeroMQ':>10}"
        + (f" {'SAT/MPI-poll':>12}" if poll else "")
        + f" {'of bound':>8} {'stolen':>7} {'others':>7}",
    ]

    def share(values):
        known = [v for v in values if v is not None]
        return f"{statistics.median(known):.0%}" if known else "?"

    for s, d in result["systems"].items():
        r = result["ratios"].get(s, {})
        mpi = f"{r['mpi']:.2f}" if "mpi" in r else ""
        zmq = f"{r['zmq']:.2f}" if "zmq" in r else ""
        mpi_poll = f"{r['mpi-poll']:.2f}" if "mpi-poll" in r else ""
        span = f"{d['min']:.1f}-{d['max']:.1f}"
        bound = f"{d['of_bound']:.0%}" if "of_bound" in d else ""
        lines.append(
            f"{s:<15} {d['median']:>10.1f} {span:>15} {mpi:>8} {zmq:>10}"
            + (f" {mpi_poll:>12}" if poll else "")
            + f" {bound:>8} {share(d['steal']):>7} {share(d['others']):>7}"
        )
    ref = result.get("reference")
    if ref:
        span = f"{ref['min']:.1f}-{ref['max']:.1f}"
        lines.append(f"{'sequential':<15} {ref['median']:>10.1f} {span:>15}")
        lines.append("")
        lines.append(
            f"compute bound: {ref['cpus']} CPUs x the sequential reference's {ref['median']:.1f}"
            f" f/s = {result['compute_bound']:.1f} f/s (no pipeline of these frames runs faster;"
            f" 'of bound' is each median's share of it)"
        )
    lines.append("")
    lines.append(
        "stolen, others: the median share of the machine's CPU time, during the runs, that the"
        " hypervisor gave elsewhere and that processes outside the runs used"
    )
    if "sat-shm-stats" in result["systems"]:
        n = result["systems"]["sat-shm-stats"].get("stats_files", 0)
        lines.append("")
        lines.append(
            f"sat-shm-stats: SAT_STATS wrote {n} file(s)"
            + ("" if n else " (the statistics stream is not there: the variable was ignored)")
        )
    return "\n".join(lines)


def system_list(text):
    """argparse type: the --systems list, comma-separated, not empty, each known, none twice."""
    systems = [t.strip() for t in text.split(",")]
    if not any(systems):
        raise argparse.ArgumentTypeError(f"no system given; known: {', '.join(ALL_SYSTEMS)}")
    if not all(systems):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty name")
    unknown = [s for s in systems if s not in ALL_SYSTEMS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown system(s) {', '.join(unknown)}; known: {', '.join(ALL_SYSTEMS)}")
    twice = sorted({s for s in systems if systems.count(s) > 1})
    if twice:
        raise argparse.ArgumentTypeError(
            f"{', '.join(twice)} named twice (--runs sets the runs of each)")
    return systems


def positive(kind):
    """argparse type: a number of `kind` (int or float) above 0."""
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number")
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return v
    return parse


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--satrun", default=DEFAULT_SATRUN, help="default: %(default)s")
    p.add_argument("--sat-prog", default=DEFAULT_SAT_PROG,
                   help="SAT's videostream (default: %(default)s)")
    p.add_argument("--mpi-prog", default=DEFAULT_MPI_PROG, help="default: %(default)s")
    p.add_argument("--zmq-prog", default=DEFAULT_ZMQ_PROG, help="default: %(default)s")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--topology", default=DEFAULT_TOPOLOGY, help="the SAT topology (and W)")
    p.add_argument("--runs", type=positive(int), default=5)
    p.add_argument("--frames", type=positive(int), default=DEFAULT_FRAMES)
    p.add_argument("--width", type=positive(int), default=DEFAULT_WIDTH)
    p.add_argument("--height", type=positive(int), default=DEFAULT_HEIGHT)
    p.add_argument("--systems", type=system_list, default=",".join(DEFAULT_SYSTEMS),
                   help="comma-separated, none twice (default: %(default)s)")
    p.add_argument("--timeout", type=positive(float), default=DEFAULT_TIMEOUT,
                   help="seconds per run")
    p.add_argument(
        "--check",
        action="store_true",
        help="the output role recomputes and checks every frame (slower; not for the figures)",
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the table"
    )
    p.add_argument("--quiet", action="store_true", help="no line per run on stderr")
    a = p.parse_args(argv)

    def log(text):
        if not a.quiet:
            print(text, file=sys.stderr, flush=True)

    try:
        result = run_all(
            a.satrun,
            a.sat_prog,
            a.mpi_prog,
            a.zmq_prog,
            runs=a.runs,
            frames=a.frames,
            width=a.width,
            height=a.height,
            systems=a.systems,
            topology=a.topology,
            mpirun=a.mpirun,
            timeout=a.timeout,
            check=a.check,
            log=log,
        )
    except BenchError as e:
        print(f"pipeline.py: FAILED: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
