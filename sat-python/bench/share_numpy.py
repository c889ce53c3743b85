"""Shares a numpy array between two processes through SAT and through its peers, in one run.

    make bench-python                     # set-up included
    .venv/bin/python sat-python/bench/share_numpy.py [--mb 100] [--repeat 7] [--provider shm|tcp|verbs]
                                          [--only sat,sat-scopes,shared_memory,redis,ray]

One hand-off, timed in the writer: publish the array (the writer's bytes into the medium), tell the reader,
the reader takes the array and reads every byte of it (a checksum, which the writer checks), the reader
answers. The same reader work is done for every system; the first hand-off of each is a warm-up and is not
counted. Printed: the median, the spread, the bandwidth, and the ratio to multiprocessing.shared_memory
(one host's floor: the reader maps the writer's pages) and SAT's ratio to each peer.

Units: --mb is the array's size in MB (10^6 bytes); the table gives each system's median and its min-max
in milliseconds (ms) per hand-off, the bandwidth in GB/s (10^9 bytes per second: the array's bytes over the
median), "x shared_memory" as the system's median over shared_memory's, and "sat / system" as sat's median
over the system's (below 1: sat is faster). A ratio whose system was not measured shows "-".

--only takes a comma-separated list (none twice) of these names, the table's row labels, measured in its
order (the default: all five):

- sat: a service (`satrun --serve`, one server: the default, and what one host needs) with the writer and
  the reader attached; the array lives in a chain of one chunk; the writer publishes it with
  `client.put(chain, array)` (as `ray.put`), which copies it once into the version the home keeps in
  shared memory on this host, and the reader reads that version in place (`chain.read(copy=False)`, as
  `ray.get` maps the object): one copy in all.
- sat-scopes: the same service, the array in a chain of 16 MiB chunks written in a write scope and read in
  a read scope through views of the chain's own bytes (what `sat` measured before PUT and reads in place
  went straight to the version): the release copies the chain into the version, the read copies it out.
- shared_memory: one SharedMemory block both map; the writer copies the array in, the reader reads in place.
- redis: a local redis-server; SET from the writer, GET in the reader (redis-py).
- ray: a local Ray instance; ray.put in the writer (the driver), ray.get in an actor (another process),
  which gets a read-only view on the object store. The tell/answer is the actor call itself.

A system that cannot be measured (redis-server or Ray not installed, the SAT service not starting, ...)
does not stop the others: the table shows every system measured, and the script then says on stderr which
were not, and why, and exits with status 1. SAT_TARGET_DIR is cargo's target directory (satrun in its
release directory; default: the repository's target).
"""

import argparse
import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def wait_until(ready, process: subprocess.Popen, what: str, seconds: float = 30) -> None:
    """Polls `ready()` until it holds; raises RuntimeError once `process` (what serves it) has
    exited, or after `seconds`."""
    deadline = time.monotonic() + seconds
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} was not ready within {seconds:g} s")
        time.sleep(0.02)


def checksum(buf) -> int:
    """Reads every byte: the sum of the array as 64-bit words (the tail bytes are added one by one)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    n = a.size // 8 * 8
    return (int(a[:n].view(np.uint64).sum(dtype=np.uint64)) + int(a[n:].sum())) % (1 << 64)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ readers (another process)

def sat_reader(conn, address: str, base: int, nbchunks: int, copy: bool) -> None:
    import sat

    client = sat.connect(address)
    chain = client.lookup(base, nbchunks)
    while conn.recv() is not None:
        with chain.read(copy=copy) as view:
            if not copy and not view.obj.in_place:
                raise AssertionError("sat: the read was not in place")
            conn.send(checksum(view))
    client.detach()


def shm_reader(conn, name: str, nbytes: int) -> None:
    from multiprocessing import shared_memory

    block = shared_memory.SharedMemory(name=name)
    while conn.recv() is not None:
        conn.send(checksum(block.buf[:nbytes]))
    block.close()


def redis_reader(conn, port: int) -> None:
    import redis

    r = redis.Redis(port=port)
    while conn.recv() is not None:
        conn.send(checksum(r.get("array")))


# ------------------------------------------------------------------ the systems, writer side

class Sat:
    name = "sat"
    # One chunk: a read in place is one block of shared memory.
    scopes = False

    def __init__(self, nbytes: int, provider: str, tmp: Path) -> None:
        import sat

        satrun = Path(os.environ.get("SAT_TARGET_DIR", REPO / "target")) / "release" / "satrun"
        address_file = tmp / "sat.address"
        if not satrun.is_file():
            raise RuntimeError(f"no {satrun}: make bench-python builds it "
                               "(cargo build --release -p sat-core --bin satrun)")
        self.service = subprocess.Popen(
            [str(satrun), "--serve", "--servers", "1", "--slots", "4", "--provider", provider,
             "--address-file", str(address_file)],
            stdout=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            wait_until(address_file.exists, self.service,
                       f"the SAT service (satrun --serve --provider {provider})")
            address = address_file.read_text().strip()
            self.client = sat.connect(address)
            self.client.chunk_size = 16 << 20 if self.scopes else max(nbytes, 1)
            self.chain = self.client.malloc(1, nbytes)
        except BaseException:
            # The service runs in a session of its own: nothing else would stop it.
            self.stop_service()
            raise
        self.reader_args = (sat_reader, (address, 1, self.chain.nbchunks, self.scopes))

    def stop_service(self) -> None:
        if self.service.poll() is None:
            self.service.send_signal(signal.SIGTERM)
            try:
                self.service.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.service.pid, signal.SIGKILL)
                self.service.wait()

    def publish(self, data: np.ndarray) -> None:
        if self.scopes:
            with self.chain.write() as view:
                np.frombuffer(view, dtype=np.uint8)[:] = data
        else:
            self.client.put(self.chain, data)

    def close(self) -> None:
        try:
            self.client.detach()
        finally:
            self.stop_service()


class SatScopes(Sat):
    name = "sat-scopes"
    scopes = True


class SharedMemory:
    name = "shared_memory"

    def __init__(self, nbytes: int, provider: str, tmp: Path) -> None:
        from multiprocessing import shared_memory

        self.block = shared_memory.SharedMemory(create=True, size=nbytes)
        self.view = np.frombuffer(self.block.buf, dtype=np.uint8, count=nbytes)
        self.reader_args = (shm_reader, (self.block.name, nbytes))

    def publish(self, data: np.ndarray) -> None:
        self.view[:] = data

    def close(self) -> None:
        del self.view
        self.block.close()
        self.block.unlink()


class Redis:
    name = "redis"

    def __init__(self, nbytes: int, provider: str, tmp: Path) -> None:
        try:
            import redis
        except ImportError as e:
            raise RuntimeError(f"redis-py is not installed ({e}): make bench-python installs it")

        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed: make bench-python installs it "
                               "(scripts/setup.sh --bench)")
        port = free_port()
        self.server = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(tmp)],
            stdout=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            self.r = redis.Redis(port=port)
            def answers() -> bool:
                try:
                    return bool(self.r.ping())
                except redis.exceptions.ConnectionError:
                    return False
            wait_until(answers, self.server, "redis-server")
        except BaseException:
            self.close()
            raise
        self.reader_args = (redis_reader, (port,))

    def publish(self, data: np.ndarray) -> None:
        self.r.set("array", memoryview(data))

    def close(self) -> None:
        if self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()


def measure_pipe(system, data: np.ndarray, sums: "list[int]", repeat: int) -> "list[float]":
    """Hand-offs to a reader process over a pipe; returns the seconds of each counted one."""
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    target, args = system.reader_args
    reader = ctx.Process(target=target, args=(theirs, *args))
    reader.start()
    times = []
    try:
        for i in range(repeat + 1):
            data[:8] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint8)
            t0 = time.perf_counter()
            system.publish(data)
            ours.send(i)
            got = ours.recv()
            elapsed = time.perf_counter() - t0
            if got != sums[i]:
                raise AssertionError(f"{system.name}: the reader saw other bytes in hand-off {i}")
            if i > 0:
                times.append(elapsed)
        ours.send(None)
        reader.join(timeout=60)
    finally:
        if reader.is_alive():
            reader.kill()
    return times


def measure_ray(data: np.ndarray, sums: "list[int]", repeat: int) -> "list[float]":
    try:
        import ray
    except ImportError as e:
        raise RuntimeError(f"Ray is not installed ({e}): make bench-python installs it "
                           "(scripts/setup.sh --bench)")

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             object_store_memory=max(4 * data.nbytes, 300 << 20))

    @ray.remote
    class Reader:
        def consume(self, refs):
            return checksum(ray.get(refs[0]))

    reader = Reader.remote()
    ray.get(reader.consume.remote([ray.put(np.zeros(8, dtype=np.uint8))]))    # the actor is up
    times = []
    try:
        for i in range(repeat + 1):
            data[:8] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint8)
            t0 = time.perf_counter()
            ref = ray.put(data)
            got = ray.get(reader.consume.remote([ref]))
            elapsed = time.perf_counter() - t0
            del ref
            if got != sums[i]:
                raise AssertionError(f"ray: the reader saw other bytes in hand-off {i}")
            if i > 0:
                times.append(elapsed)
    finally:
        ray.shutdown()
    return times


SYSTEMS = {"sat": Sat, "sat-scopes": SatScopes, "shared_memory": SharedMemory, "redis": Redis,
           "ray": None}


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text} is not at least 1")
    return n


def system_list(text: str) -> "list[str]":
    """argparse type: --only's names, comma-separated, each known, none twice."""
    names = [t.strip() for t in text.split(",")]
    if not any(names):
        raise argparse.ArgumentTypeError(f"no system given; known: {', '.join(SYSTEMS)}")
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown system(s) {', '.join(repr(n) for n in unknown)}; known: {', '.join(SYSTEMS)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{', '.join(twice)} named twice")
    return names


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if isinstance(e, RuntimeError) else f"{type(e).__name__}: {text}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=positive_int, default=100,
                   help="the array's size in MB (10^6 bytes; default: %(default)s)")
    p.add_argument("--repeat", type=positive_int, default=7,
                   help="hand-offs counted per system, after one warm-up (default: %(default)s)")
    p.add_argument("--provider", default="shm", choices=("shm", "tcp", "verbs"),
                   help="SAT's libfabric provider (default: %(default)s)")
    p.add_argument("--only", type=system_list, default=",".join(SYSTEMS),
                   help="systems to measure, comma-separated, of: " + ", ".join(SYSTEMS)
                        + " (default: all)")
    o = p.parse_args()
    nbytes = o.mb * 1000 * 1000
    data = np.frombuffer(np.random.default_rng(7).bytes(nbytes), dtype=np.uint8).copy()
    sums = []
    for i in range(o.repeat + 1):
        data[:8] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint8)
        sums.append(checksum(data))
    results = {}
    failed = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in o.only:
            print(f"measuring {name} ...", file=sys.stderr, flush=True)
            try:
                if name == "ray":
                    results[name] = measure_ray(data, sums, o.repeat)
                    continue
                system = SYSTEMS[name](nbytes, o.provider, Path(tmp))
                try:
                    results[name] = measure_pipe(system, data, sums, o.repeat)
                finally:
                    system.close()
            except Exception as e:  # noqa: BLE001 - said below; the other systems still run
                failed[name] = one_line(e)
                print(f"share_numpy.py: {name} not measured: {failed[name]}", file=sys.stderr,
                      flush=True)
    floor = statistics.median(results["shared_memory"]) if "shared_memory" in results else None
    ours = statistics.median(results["sat"]) if "sat" in results else None
    print(f"\n{o.mb} MB numpy array, writer process -> reader process, {o.repeat} hand-offs each "
          f"(medians of one run; SAT over {o.provider})\n")
    print(f"| system | median ms | min-max ms | GB/s | x shared_memory | sat / system |")
    print(f"|---|---|---|---|---|---|")
    for name, times in results.items():
        med = statistics.median(times)
        vs_floor = f"{med / floor:.2f}" if floor else "-"
        vs_sat = f"{ours / med:.2f}" if ours else "-"
        print(f"| {name} | {med * 1e3:.1f} | {min(times) * 1e3:.1f}-{max(times) * 1e3:.1f} | "
              f"{nbytes / med / 1e9:.2f} | {vs_floor} | {vs_sat} |", flush=True)
    if failed:
        print(f"share_numpy.py: error: not measured: {', '.join(failed)} (why: above)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
