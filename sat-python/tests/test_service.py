"""The service mode from Python: processes attach to a running `satrun --serve` with sat.connect,
share numpy data, detach, and later processes find it. Every process is a real one."""

import hashlib
import os
import shutil
import sys
import subprocess
from pathlib import Path

import numpy as np
import pytest

from _service import REPO, run_bounded, service, shm_files_of  # noqa: F401 (fixture)

MB100 = 100 * 1000 * 1000


def expected_digest(seed: int, nbytes: int) -> str:
    return hashlib.sha256(np.random.default_rng(seed).bytes(nbytes)).hexdigest()


def test_a_100_mb_array_is_read_identically_by_a_process_that_attaches_later(service):
    writer = service.attach(
        """
        import os, sys
        import numpy as np
        import sat

        client = sat.connect(os.environ["SAT_ADDRESS"])
        client.chunk_size = 1 << 22              # 4 MiB chunks: 24 for 100 MB
        data = np.frombuffer(np.random.default_rng(2024).bytes(100_000_000), dtype=np.uint8)
        chain = client.malloc(1000, data.nbytes)
        with chain.write() as view:              # the chain's own bytes, no copy
            np.frombuffer(view, dtype=np.uint8)[:] = data
        client.symbols["array"] = np.array([1000, chain.nbchunks, data.nbytes], dtype=np.uint64)
        client.detach()
        print("written", chain.nbchunks)
        """
    )
    assert writer.returncode == 0, writer.stdout + writer.stderr
    # The writer has exited: only the service holds the data now.
    reader = service.attach(
        """
        import hashlib, os
        import numpy as np
        import sat

        with sat.connect(os.environ["SAT_ADDRESS"]) as client:
            base, nbchunks, nbytes = (int(v) for v in client.symbols["array"])
            chain = client.lookup(base, nbchunks)
            assert chain.size == nbytes, chain.size
            with chain.read() as view:
                print("digest", hashlib.sha256(view).hexdigest())
        """
    )
    assert reader.returncode == 0, reader.stdout + reader.stderr
    assert f"digest {expected_digest(2024, MB100)}" in reader.stdout.splitlines()


def test_a_mapped_array_is_published_and_received_into_another_processs_own_array(service):
    """MAP from a service's clients: the writer publishes its own array, detaches and exits; a
    later process maps its own array onto the same chunks and a READ scope fills it in place."""
    writer = service.attach(
        """
        import gc, os, weakref
        import numpy as np
        import sat

        client = sat.connect(os.environ["SAT_ADDRESS"])
        client.chunk_size = 1 << 16
        image = np.zeros((256, 256), dtype=np.float32)      # 256 KiB: 4 chunks
        alive = weakref.ref(image)
        chain = client.map(3000, image, protocol="home-only")
        with chain.write():
            image[:] = np.arange(image.size, dtype=np.float32).reshape(image.shape)
        client.symbols["image"] = np.array([3000, chain.nbchunks], dtype=np.uint64)
        client.detach()
        del image
        gc.collect()
        assert alive() is not None, "the chain let its array go while it exists"
        del chain
        gc.collect()
        assert alive() is None, "the array outlived its chain: the export was not released"
        print("pid", os.getpid())
        """
    )
    assert writer.returncode == 0, writer.stdout + writer.stderr
    assert shm_files_of(int(writer.stdout.split()[1])) == []
    reader = service.attach(
        """
        import os
        import numpy as np
        import sat

        with sat.connect(os.environ["SAT_ADDRESS"]) as client:
            client.chunk_size = 1 << 16
            base, nbchunks = (int(v) for v in client.symbols["image"])
            mine = np.full((256, 256), -1.0, dtype=np.float32)
            chain = client.map(base, mine, protocol="home-only")
            assert chain.nbchunks == nbchunks, chain
            with chain.read():
                pass
            expected = np.arange(mine.size, dtype=np.float32).reshape(mine.shape)
            print("received", np.array_equal(mine, expected))
        """
    )
    assert reader.returncode == 0, reader.stdout + reader.stderr
    assert reader.stdout.splitlines() == ["received True"]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


CYCLES = """
import ctypes, os, sys
import sat

def rss_kib():
    # What the allocator keeps of freed memory is not a leak: it gives it back first, so that
    # the figure is what the process still holds.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

def cycles(n):
    for _ in range(n):
        client = sat.connect(os.environ["SAT_ADDRESS"])
        chain = client.malloc(77, 8)
        with chain.readwrite() as view:
            view[:8] = (int.from_bytes(view[:8], "little") + 1).to_bytes(8, "little")
        client.detach()

cycles(60)                           # warm-up: allocator and libfabric pools
for _ in range(3):
    print("rss", rss_kib(), flush=True)
    sys.stdin.readline()             # the test reads the servers' memory meanwhile
    cycles(50)
print("rss", rss_kib(), flush=True)
with sat.connect(os.environ["SAT_ADDRESS"]) as client:
    print("counter", int.from_bytes(client.get(client.lookup(77)), "little"), flush=True)
"""


def test_a_client_attaches_and_detaches_210_times_with_bounded_memory(service, tmp_path):
    script = tmp_path / "cycles.py"
    script.write_text(CYCLES)
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=dict(os.environ, SAT_ADDRESS=service.address), start_new_session=True,
    )
    client, servers_rss = [], []
    try:
        for i in range(4):
            line = proc.stdout.readline()
            assert line.startswith("rss "), line + (proc.stderr.read() if i == 0 else "")
            client.append(int(line.split()[1]))
            if i == 0:
                # Only now: satrun writes the address file before it starts the servers, and a
                # detach returns once every server has forgotten the client, so both are running.
                servers = service.server_pids()
                assert len(servers) == 2, servers
            servers_rss.append(sum(rss_kib(p) for p in servers))
            if i < 3:
                proc.stdin.write("go\n")
                proc.stdin.flush()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert proc.returncode == 0, out + err
    assert out.splitlines()[-1] == "counter 210", out
    # Bounded: what attaches leak grows in every stretch of 50 cycles, while an allocator or a
    # provider settling in grows once (the tcp provider's pools were seen to take 35 MiB more
    # once, anywhere in the first 160 cycles, then nothing). So the smallest growth of three
    # stretches is what counts: 20 KiB leaked per attach would show as 1 MiB at the servers, a
    # leaked endpoint (its 16 MiB shm mapping, its tcp pools) as far more at the client.
    client_growth = min(b - a for a, b in zip(client, client[1:]))
    servers_growth = min(b - a for a, b in zip(servers_rss, servers_rss[1:]))
    assert client_growth < 8192, client
    assert servers_growth < 1024, servers_rss
    # The client's endpoints closed each time: nothing of it stays in /dev/shm.
    assert shm_files_of(proc.pid) == []
    assert service.stop() == 0
    for pid in servers:
        assert shm_files_of(pid) == [], pid


@pytest.mark.parametrize("ending", ["detach", "exit"])
def test_a_detach_ends_the_wait_of_another_thread(service, ending):
    """A thread's client waits in a barrier nobody else will reach; its subscription's callback, run
    inside that wait, says so. Then another thread detaches the client (or the interpreter exits,
    which detaches): the barrier call ends with UsageError rather than hold the detach for ever,
    and the slot comes back."""
    out = service.attach(
        f"""
        import os, sys, threading
        import sat

        address = os.environ["SAT_ADDRESS"]
        subscribed, waiting, ended = threading.Event(), threading.Event(), threading.Event()
        clients = []

        def waiter():
            client = sat.connect(address)     # this thread is the one its callbacks run on
            clients.append(client)
            client.subscribe(client.malloc(500, 8), lambda chunk: waiting.set())
            subscribed.set()
            try:
                client.barrier(31, 2)
                print("returned", flush=True)
            except sat.UsageError as e:
                print("ended:", "while this call waited" in str(e), flush=True)
            ended.set()

        thread = threading.Thread(target=waiter, daemon=True)
        thread.start()
        assert subscribed.wait(30)
        with sat.connect(address) as other:
            other.put(other.lookup(500), bytes(8))
        assert waiting.wait(30)               # the callback ran inside the barrier's wait
        if "{ending}" == "detach":
            clients[0].detach()
            assert ended.wait(30)
            print("detached", flush=True)
        """,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    if ending == "detach":
        assert lines == ["ended: True", "detached"], lines
    # The slot came back: the service's 4 slots all attach.
    again = service.attach(
        """
        import os
        import sat
        held = [sat.connect(os.environ["SAT_ADDRESS"]) for _ in range(4)]
        for c in held:
            c.detach()
        print("4 attached")
        """
    )
    assert again.stdout.splitlines() == ["4 attached"], again.stdout + again.stderr


def test_calls_after_detach_fail_and_a_full_service_says_what_to_do(service):
    out = service.attach(
        """
        import os
        import sat

        a = os.environ["SAT_ADDRESS"]
        client = sat.connect(a)
        chain = client.malloc(5, 16)
        client.detach()
        client.detach()                        # twice is harmless
        try:
            client.lookup(5)
        except sat.UsageError as e:
            print("after detach:", e)
        held = [sat.connect(a) for _ in range(4)]   # the 4 slots
        try:
            sat.connect(a)
        except sat.BootstrapError as e:
            print("full:", e)
        for c in held:
            c.detach()
        try:
            sat.connect("127.0.0.1:1")
        except sat.BootstrapError as e:
            print("nobody:", e)
        """
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "after detach:" in text and "detached" in text, text
    assert "full:" in text and "client slots of the service are taken" in text, text
    assert "nobody:" in text and "satrun --serve" in text, text


def test_a_service_admits_only_the_holders_of_its_secret(service):
    """The address file holds sat://SECRET@host:port (mode 0600); host:port alone, or a wrong secret, is
    refused with a clear error before a slot is taken; host:port with SAT_SECRET attaches."""
    assert service.address.startswith("sat://") and "@" in service.address, service.address
    mode = (service.tmp_path / "service.address").stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)
    secret, host_port = service.address[len("sat://"):].split("@", 1)
    out = service.attach(
        """
        import os
        import sat

        host_port = os.environ["HOST_PORT"]
        secret = os.environ.pop("SAT_SECRET")
        for address in (host_port, "sat://" + "0" * 64 + "@" + host_port):
            try:
                sat.connect(address)
            except sat.BootstrapError as e:
                print("refused:", e)
        try:
            sat.connect("sat://" + host_port)
        except sat.UsageError as e:
            print("malformed:", e)
        held = [sat.connect(os.environ["SAT_ADDRESS"]) for _ in range(4)]   # every slot is still free
        for c in held:
            c.detach()
        os.environ["SAT_SECRET"] = secret
        with sat.connect(host_port) as client:
            print("attached with SAT_SECRET in slot", client.rank)
        """,
        env={"HOST_PORT": host_port, "SAT_SECRET": secret},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "refused: " in text and "requires a secret" in text, text
    assert "is not the service of this connection string" in text, text
    assert "malformed:" in text and "sat://SECRET@host:port" in text, text
    assert "attached with SAT_SECRET in slot" in text, text
    assert "0" * 64 not in text and secret not in text + out.stderr, text
    assert secret not in service.log()


def c_producer(tmp_path: Path) -> Path:
    """bindings-tests/service.c built against the workspace's libsat."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler (cc) is needed: scripts/setup.sh installs gcc")
    lib = Path(os.environ.get("SAT_TARGET_DIR", REPO / "target")) / os.environ.get("SAT_PROFILE", "release")
    exe = tmp_path / "service"
    built = run_bounded(
        [cc, "-std=c11", "-Wall", "-Werror", "-I", str(REPO / "include"), str(REPO / "bindings-tests/service.c"),
         "-o", str(exe), "-L", str(lib), "-lsat", f"-Wl,-rpath,{lib}"],
        120,
    )
    assert built.returncode == 0, built.stderr
    return exe


def test_a_c_producer_and_a_python_consumer_share_chunks_and_symbols(service, tmp_path):
    produced = run_bounded([str(c_producer(tmp_path)), "produce", service.address], 120)
    assert produced.returncode == 0 and "PASS produce" in produced.stdout, produced.stdout + produced.stderr
    out = service.attach(
        """
        import os
        import numpy as np
        import sat

        with sat.connect(os.environ["SAT_ADDRESS"]) as client:
            first = client.lookup(500)
            nbchunks = -(-100_000 * 4 // first.size)
            chain = client.lookup(500, nbchunks)
            with chain.read():
                values = chain.array(np.int32)
                ok = np.array_equal(values, np.arange(100_000, dtype=np.int32) * 7 + 3)
            print("values", "match" if ok else "differ", len(values))
            print("symbol", client.read_symbol("c-producer"))
        """
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "values match 100000" in out.stdout.splitlines(), out.stdout
    assert "symbol b'written by a C process'" in out.stdout.splitlines(), out.stdout


def test_a_process_that_forgets_to_detach_is_detached_at_exit(service):
    writer = service.attach(
        """
        import os
        import sat

        client = sat.connect(os.environ["SAT_ADDRESS"])
        chain = client.malloc(321, 4)
        with chain.write() as view:
            view[:] = b"kept"
        del client, chain          # no detach: the interpreter's exit does it
        """
    )
    assert writer.returncode == 0, writer.stdout + writer.stderr
    reader = service.attach(
        """
        import os
        import sat

        with sat.connect(os.environ["SAT_ADDRESS"]) as client:
            print(client.get(client.lookup(321)))
        """
    )
    assert reader.returncode == 0, reader.stdout + reader.stderr
    assert reader.stdout.splitlines() == ["b'kept'"]


def test_a_client_whose_service_ended_first_exits_quietly(service):
    """The exit's detach has nothing to detach from when the service is gone: no traceback."""
    out = service.attach(
        """
        import os
        import signal
        import time
        import sat

        client = sat.connect(os.environ["SAT_ADDRESS"])
        chain = client.malloc(322, 4)
        client.put(chain, b"gone")
        os.kill(int(os.environ["SERVICE_PID"]), signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                client.get(chain)
            except sat.AbortedError:
                print("service gone")
                break
        """,
        env={"SERVICE_PID": str(service.proc.pid)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["service gone"]
    assert "Exception" not in out.stderr and "Error" not in out.stderr, out.stderr


def test_ctrl_c_raises_keyboard_interrupt_also_in_a_waiting_call(service):
    """SIGINT is the interpreter's after ``import sat`` (libfabric's psm provider used to replace its
    handler with one that exits), and ends a call that waits for other processes with
    KeyboardInterrupt; the client then detaches as usual."""
    out = service.attach(
        """
        import os
        import signal
        import sys
        import threading
        import time
        import sat

        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(60)
        except KeyboardInterrupt:
            print("interrupted after import")

        client = sat.connect(os.environ["SAT_ADDRESS"])
        main = threading.main_thread()

        def waiting():
            # Inside the barrier's wait: the main thread runs `wait_here` and sleeps in the kernel.
            frame = sys._current_frames().get(main.ident)
            with open(f"/proc/self/task/{main.native_id}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            return frame is not None and frame.f_code.co_name == "wait_here" and state == "S"

        def interrupt_when_waiting():
            while not waiting():
                time.sleep(0.005)
            os.kill(os.getpid(), signal.SIGINT)

        def wait_here():
            client.barrier(1, 2)       # nobody else comes

        threading.Thread(target=interrupt_when_waiting, daemon=True).start()
        try:
            wait_here()
            print("the barrier returned")
        except KeyboardInterrupt:
            print("interrupted in the barrier")
        client.detach()
        print("detached")
        """,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["interrupted after import", "interrupted in the barrier", "detached"]
    assert "without detaching" not in service.log(), service.log()


def test_a_scope_whose_block_raises_publishes_nothing_and_writes_outside_a_scope_are_lost(service):
    """A WRITE whose `with` block raises ends without publishing: the home keeps its version. Bytes
    written through a view kept from an earlier scope are not the chain's: the next READ sees the
    home's version, and a READWRITE builds on it."""
    run = service.attach(
        """
        import os
        import numpy as np
        import sat

        with sat.connect(os.environ["SAT_ADDRESS"]) as client:
            chain = client.malloc(4242, 8)
            with chain.write() as view:
                np.frombuffer(view, dtype=np.uint64)[0] = 7
            try:
                with chain.write() as view:
                    np.frombuffer(view, dtype=np.uint64)[0] = 99
                    raise RuntimeError("the block fails half way")
            except RuntimeError:
                pass
            with chain.read() as view:
                print("after the failed write", int(np.frombuffer(view, dtype=np.uint64)[0]))
            kept = chain.array(dtype=np.uint64)
            kept[0] = 1000                           # outside any write scope
            with chain.readwrite() as view:
                v = np.frombuffer(view, dtype=np.uint64)
                v[0] += 1
            with chain.read() as view:
                print("after the +1", int(np.frombuffer(view, dtype=np.uint64)[0]))
        """
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "after the failed write 7" in lines, run.stdout
    assert "after the +1 8" in lines, run.stdout


HOLD_A_SCOPE = """
import os
import sys
import numpy as np
import sat

client = sat.connect(os.environ["SAT_ADDRESS"])
client.chunk_size = 1 << 20
chain = client.malloc(880, 4 << 20)
with chain.write():
    chain.array(np.uint8)[:] = 1                 # released: version 1, all ones
kind = sys.argv[1]
scope = chain.write() if kind == "write" else chain.read()
scope.__enter__()
if kind == "write":
    chain.array(np.uint8)[:] = 9                 # never released
print("in a", kind, "scope", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("kind", ["write", "read"])
def test_a_notebook_killed_inside_a_scope_blocks_nobody(service, tmp_path, kind):
    """A process killed inside a scope of a chain (on one host its homes keep the versions in shared memory
    the clients map): the next process writes the chain and reads back its own bytes, and never the dead
    one's unreleased bytes."""
    script = tmp_path / "hold.py"
    script.write_text(HOLD_A_SCOPE)
    proc = subprocess.Popen(
        [sys.executable, str(script), kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, SAT_ADDRESS=service.address),
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("in a"), line + proc.stderr.read()
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    out = service.attach(
        """
        import os
        import numpy as np
        import sat

        with sat.connect(os.environ["SAT_ADDRESS"]) as client:
            client.chunk_size = 1 << 20
            chain = client.lookup(880, 4)
            with chain.read():
                before = set(np.unique(chain.array(np.uint8)).tolist())
            with chain.write():
                chain.array(np.uint8)[:] = 5
            with chain.read():
                after = set(np.unique(chain.array(np.uint8)).tolist())
            print("before", sorted(before), "after", sorted(after))
        """,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr + service.log()
    assert "before [1] after [5]" in out.stdout, out.stdout


def test_a_put_goes_into_the_version_and_a_read_in_place_sees_it_without_copying(service):
    """PUT publishes the caller's array straight into the version the homes keep on this host,
    and a later scope of the writer still sees it (the chain's own bytes were left stale). A
    read(copy=False) of a one-chunk chain is that version itself: the chain's own bytes stay
    as they were, the view is released with the scope, and a scope of the same thread on the
    chunk inside it is refused; a chain of several chunks gets the usual scope."""
    writer = service.attach(
        """
        import os
        import numpy as np
        import sat

        client = sat.connect(os.environ["SAT_ADDRESS"])
        client.chunk_size = 1 << 20
        one = client.malloc(1000, 1 << 20)
        many = client.malloc(2000, 3 << 20)
        assert (one.nbchunks, many.nbchunks) == (1, 3)
        for round, seed in enumerate((1, 2)):
            data = np.random.default_rng(seed).integers(0, 256, 1 << 20, dtype=np.uint8)
            client.put(one, data)
            # The chain's own bytes did not take the PUT: a READ brings the version in.
            with one.read() as view:
                assert bytes(view) == data.tobytes(), f"round {round}: the writer's READ is stale"
        client.put(many, np.full(3 << 20, 7, dtype=np.uint8))
        client.symbols["ready"] = b"1"
        client.detach()
        print("written")
        """
    )
    assert writer.returncode == 0, writer.stdout + writer.stderr
    reader = service.attach(
        """
        import os
        import numpy as np
        import sat

        client = sat.connect(os.environ["SAT_ADDRESS"])
        assert client.symbols["ready"] == b"1"
        one = client.lookup(1000, 1)
        many = client.lookup(2000, 3)
        want = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
        with one.read(copy=False) as view:
            assert view.obj.in_place and view.readonly, view.obj
            assert bytes(view) == want
            assert not one.array().any(), "a READ in place copied into the chain's own bytes"
            try:
                with one.read():
                    pass
                raise AssertionError("a scope nested in a READ in place of the same thread")
            except sat.UsageError as e:
                assert "reads it in place" in str(e), e
        try:
            view[0]
            raise AssertionError("the view outlived its scope")
        except ValueError:
            pass
        with one.read() as view:       # the usual scope copies the version in
            assert not view.obj.in_place and bytes(view) == want
        assert bytes(one.array()) == want
        with many.read(copy=False) as view:
            assert not view.obj.in_place
            assert bytes(view) == bytes([7]) * (3 << 20)
        client.detach()
        print("read")
        """
    )
    assert reader.returncode == 0, reader.stdout + reader.stderr
    assert "read" in reader.stdout.split()
