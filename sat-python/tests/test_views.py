"""Scopes show a chain's own bytes with no copy: memoryviews, numpy arrays, Chain.array."""

import subprocess
import sys

import pytest


def test_numpy_writes_in_a_write_scope_reach_another_process(satrun, provider):
    out = satrun(
        """
        import numpy as np
        import sat

        N = 500  # 4000 bytes: 4 chunks of 1024 (SAT_CHUNK_SIZE), one contiguous view

        def writer(client):
            chain = client.malloc(42, 8 * N)
            assert chain.nbchunks == 4
            with chain.write() as view:
                a = np.frombuffer(view, dtype=np.float64)
                assert a.flags.writeable and a.shape == (N,)
                a[:] = np.arange(N) * 0.5
            client.barrier(1, 2)
            client.barrier(2, 2)
            with chain.read() as view:
                b = np.frombuffer(view, dtype=np.float64)
                assert (b == -np.arange(N)).all(), b[:4]
            print("writer saw the reader's negation")

        def reader(client):
            client.barrier(1, 2)
            chain = client.lookup(42, nbchunks=4)
            with chain.read() as view:
                a = np.frombuffer(view, dtype=np.float64)
                assert not a.flags.writeable, "a READ scope exported a writable buffer"
                try:
                    a[0] = 1.0
                except ValueError as e:
                    print("read-only:", "read-only" in str(e))
                assert (a == np.arange(N) * 0.5).all(), a[:4]
                print("reader got", a[:3].tolist(), "...", a[-1])
            with chain.readwrite() as view:
                a = np.frombuffer(view, dtype=np.float64)
                a *= -2.0
            client.barrier(2, 2)

        sat.run({1: writer, 2: reader})
        """,
        provider=provider,
        env={"SAT_CHUNK_SIZE": "1024"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["read-only: True", "reader got [0.0, 0.5, 1.0] ... 249.5"]
    assert out.lines(1) == ["writer saw the reader's negation"]


def test_views_are_the_chains_memory(satrun):
    """One address for every scope and Chain.array; a view kept from an earlier scope sees what
    a later READ scope fetched, because it is the same memory."""
    out = satrun(
        """
        import numpy as np
        import sat

        def address(a):
            return a.__array_interface__["data"][0]

        def first(client):
            chain = client.malloc(7, 64)
            with chain.write() as view:
                kept = np.frombuffer(view, dtype=np.int64)
                kept[:] = 1
                written_at = address(kept)
            with chain.read() as view:
                read_at = address(np.frombuffer(view, dtype=np.int64))
            array = chain.array(np.int64, (2, 4))
            assert array.shape == (2, 4) and array.flags.writeable
            assert written_at == read_at == address(array), (written_at, read_at, address(array))
            assert written_at % 64 == 0, written_at
            assert view.obj.chain is chain and client.malloc(7, 64) is chain
            client.barrier(1, 2)
            client.barrier(2, 2)        # the other process has written 2s
            assert (kept == 1).all()    # nothing changes the bytes outside a scope...
            with chain.read():          # ...a READ scope fetches the new version into them
                pass
            print("kept view after a later read:", kept.tolist())
            print("array too:", array[1].tolist())

        def second(client):
            client.barrier(1, 2)
            chain = client.lookup(7)
            with chain.write() as view:
                np.frombuffer(view, dtype=np.int64)[:] = 2
            client.barrier(2, 2)

        sat.run({1: first, 2: second})
        """,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == ["kept view after a later read: [2, 2, 2, 2, 2, 2, 2, 2]", "array too: [2, 2, 2, 2]"]


def test_a_view_kept_after_its_scope(satrun):
    """Readable after the scope and after the run; what is written through it outside a write
    scope is not published."""
    out = satrun(
        """
        import sat

        kept = []

        def writer(client):
            chain = client.malloc(3, 4)
            with chain.write() as view:
                view[:] = b"in  "
            view[:] = b"out "              # outside any scope: local only
            kept.append(view)
            client.barrier(1, 2)
            client.barrier(2, 2)

        def reader(client):
            client.barrier(1, 2)
            print("reader sees", client.get(client.lookup(3)))
            client.barrier(2, 2)

        sat.run({1: writer, 2: reader})
        if kept:
            print("after the run the view still reads", bytes(kept[0]))
        """,
        n=3,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["reader sees b'in  '"]
    assert out.lines(1) == ["after the run the view still reads b'out '"]


@pytest.mark.parametrize("host_segments", ["on", "off"])
def test_bytes_written_outside_a_scope_give_way_to_the_version_in_this_process(satrun, host_segments):
    """A view kept from a write scope and written outside any scope changes only local bytes:
    this process's next READ and READWRITE scopes see the version the home holds, whether
    the home keeps it in a host slot (each reading scope copies it in again) or in its own
    memory (the local bytes are checked against the version's digest)."""
    out = satrun(
        """
        import numpy as np
        import sat

        def role(client):
            chain = client.malloc(6, 1 << 16)
            with chain.write() as view:
                view[:] = bytes(range(256)) * 256
            kept = chain.array()
            kept[:] = 9                        # outside any scope: local only
            with chain.read() as view:
                print("read sees", bytes(view[:4]), bytes(view[-2:]))
            kept[:4] = 7                       # again, then a READWRITE publishes on the version
            with chain.readwrite() as view:
                print("readwrite sees", bytes(view[:4]))
                view[0] = 100
            kept[1] = 8                        # and after a READWRITE
            with chain.read() as view:
                print("read after readwrite sees", bytes(view[:4]))

        sat.run({1: role})
        """,
        n=2,
        env={"SAT_HOST_SEGMENTS": host_segments},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "read sees b'\\x00\\x01\\x02\\x03' b'\\xfe\\xff'",
        "readwrite sees b'\\x00\\x01\\x02\\x03'",
        "read after readwrite sees b'd\\x01\\x02\\x03'",
    ]


def test_chain_array_checks_its_shape(satrun):
    out = satrun(
        """
        import numpy as np
        import sat

        def role(client):
            chain = client.malloc(5, 10)
            assert chain.array().dtype == np.uint8 and chain.array().shape == (10,)
            assert chain.array("i2", 5).shape == (5,)
            assert chain.array(np.float32, (2,)).shape == (2,)   # a prefix of the chain
            for dtype, shape in [(np.float64, None), (np.int16, (2, 3)), ("u1", "x"), ("u1", -1)]:
                try:
                    chain.array(dtype, shape)
                except (ValueError, TypeError) as e:
                    print(type(e).__name__, e)

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "ValueError the chain's 10 bytes are not a whole number of float64 items (8 bytes each): "
        "give a shape that fits, or another dtype",
        "ValueError an array of shape (2, 3) of int16 needs more than the chain's 10 bytes: give a "
        "smaller shape",
        "TypeError shape x: give an int or a sequence of ints >= 0",
        "ValueError shape -1: give an int or a sequence of ints >= 0",
    ]


def test_numpy_stays_optional():
    """Importing sat imports no numpy."""
    code = "import sys, sat; assert 'numpy' not in sys.modules, 'import sat imported numpy'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_without_numpy(satrun):
    """With numpy unimportable, scopes and byte symbols work, and what needs numpy says so."""
    out = satrun(
        """
        import sys
        sys.modules["numpy"] = None  # `import numpy` now raises ImportError
        import sat

        def role(client):
            chain = client.malloc(5, 4)
            with chain.write() as view:
                view[:] = b"abcd"
            assert client.get(chain) == b"abcd"
            client.symbols["raw"] = b"bytes"
            assert client.symbols["raw"] == b"bytes"
            # An array symbol as another process (with numpy) would have stored it.
            client.write_symbol("array", b"\\x93NUMPY\\x01\\x00")
            for f in (chain.array, lambda: client.symbols["array"]):
                try:
                    f()
                except ImportError as e:
                    print(str(e).split(" (")[0], "|", str(e).split("): ")[1])

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "Chain.array needs numpy, which cannot be imported | install numpy; without it, use the "
        "memoryview a scope gives",
        "symbol 'array' holds a numpy array | install numpy, or read the raw bytes with "
        "client.read_symbol('array')",
    ]
