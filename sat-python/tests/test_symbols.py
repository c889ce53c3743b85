"""client.symbols: a mapping of names to bytes or numpy arrays (dtype and shape kept)."""

import pytest

from _service import service  # noqa: F401 (fixture)


def test_symbols_keep_bytes_and_arrays(satrun, provider):
    out = satrun(
        """
        import io
        import numpy as np
        import sat

        ARRAYS = {
            "grid": np.arange(12, dtype=np.int16).reshape(3, 4),
            "fortran": np.asfortranarray(np.arange(6, dtype=">f8").reshape(2, 3)),
            "points": np.array([(1, 2.5), (3, 4.5)], dtype=[("id", "<u4"), ("x", "<f4")]),
            "scalar": np.array(3.25),
            "empty": np.zeros((0, 5), dtype=np.complex64),
        }

        def writer(client):
            s = client.symbols
            s["raw"] = b"\\x00 plain bytes"
            s["mutable"] = bytearray(b"from a bytearray")
            s["view"] = memoryview(b"xxfrom a memoryview")[2:]
            for name, value in ARRAYS.items():
                s[name] = value
            client.barrier(1, 2)
            client.rendezvous(1)          # the reader has checked that "late" is not there
            s["late"] = np.ones(3)

        def reader(client):
            s = client.symbols
            client.barrier(1, 2)
            assert s["raw"] == b"\\x00 plain bytes" and type(s["raw"]) is bytes
            assert s["mutable"] == b"from a bytearray" and s["view"] == b"from a memoryview"
            for name, value in ARRAYS.items():
                got = s[name]
                assert isinstance(got, np.ndarray), (name, got)
                assert got.dtype == value.dtype and got.shape == value.shape, (name, got)
                assert (got == value).all() and got.flags.writeable, name
            assert s["fortran"].flags.f_contiguous
            # The stored bytes are a .npy file: any .npy reader reads them.
            raw = client.read_symbol("grid")
            assert (np.load(io.BytesIO(raw)) == ARRAYS["grid"]).all()
            assert "raw" in s and "grid" in s and "late" not in s
            assert s.get("late") is None and s.get("late", b"none yet") == b"none yet"
            client.wakeup(1)
            late = s["late"]                  # waits for the writer
            print("late:", late.tolist(), "now in:", "late" in s)

        sat.run({1: writer, 2: reader})
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["late: [1.0, 1.0, 1.0] now in: True"]


def test_symbols_refuse_what_they_cannot_keep(satrun):
    out = satrun(
        """
        import numpy as np
        import sat

        def attempt(exc, f):
            try:
                f()
            except exc as e:
                assert type(e) is exc, (type(e), e)
                print(exc.__name__ + ":", e)
            else:
                raise AssertionError("accepted")

        def role(client):
            s = client.symbols

            def store(value):
                s["x"] = value

            attempt(TypeError, lambda: store(np.array([object(), 1])))
            attempt(ValueError, lambda: store(np.arange(10)[::2]))
            attempt(TypeError, lambda: store("text"))
            attempt(TypeError, lambda: store(12))
            attempt(sat.UsageError, lambda: store(b"\\x93NUMPY then anything"))
            s.timeout = 0.1
            attempt(sat.TimeoutError, lambda: s["never written"])
            def negative():
                s.timeout = -1
            attempt(ValueError, negative)
            def infinite():
                s.timeout = float("inf")
            attempt(ValueError, infinite)
            attempt(ValueError, lambda: s.get("x", timeout=float("inf")))
            attempt(ValueError, lambda: client.lookup(1, timeout=float("inf")))
            def delete():
                del s["x"]
            attempt(sat.UsageError, delete)
            assert s.timeout == 0.1 and "x" not in s

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "TypeError: symbols['x'] = an array of dtype object, which holds Python objects: SAT stores "
        "raw bytes only (objects would need pickle); store numbers or bytes",
        "ValueError: symbols['x'] = an array that is not contiguous in memory (a strided view or "
        "slice): store a contiguous copy, numpy.ascontiguousarray(value)",
        "TypeError: symbols['x'] = a str: give bytes (value.encode()), a bytes-like object or a "
        "numpy array",
        "TypeError: symbols['x'] = a value of type int: give bytes, a bytes-like object or a numpy "
        "array",
        "UsageError: symbols['x'] = bytes that start like a numpy .npy file, which reading the symbol "
        "back would turn into an array: store them with client.write_symbol and read them with "
        "client.read_symbol, which take bytes as they are",
        "TimeoutError: timed out: read_symbol(\"never written\"): no process wrote this "
        "symbol within 100ms; write it with write_symbol somewhere, or read with a longer timeout",
        "ValueError: timeout -1 s: give a number of seconds >= 0",
    ] + [
        "ValueError: timeout inf s: a timeout must be finite; give a number of seconds >= 0 "
        "(a large one to wait long)"
    ] * 3 + [
        "UsageError: invalid use of the SAT API: del symbols[\"x\"]: a symbol cannot be deleted "
        "(the S-DSM has no FREE); write the name again to replace its value",
    ]


# The three symbol reads that wait: each must run subscription callbacks while it waits.
READS = {
    "read_symbol": "a.read_symbol(name, timeout=20)",
    "symbols.get": "a.symbols.get(name, timeout=20)",
    "symbols[name]": "a.symbols[name]",
}


@pytest.mark.parametrize("read", list(READS))
def test_a_symbol_read_runs_a_callback_whose_notification_came_before_it(service, read):
    # Client a's read of the chain (a GET) finds version n before a is told of it, which queues
    # its event: pending when the symbol read starts. The callback writes the name the read
    # waits for, so the read returns only if the callback ran during it.
    out = service.attach(
        f"""
        import os
        import sat

        a = sat.connect(os.environ["SAT_ADDRESS"])
        b = sat.connect(os.environ["SAT_ADDRESS"])
        a.symbols.timeout = 20
        chain = a.malloc(9200, 4)
        got = []

        def callback(event):
            got.append(event.version)
            b.write_symbol(f"before-{{event.version}}", b"ran")

        a.subscribe(chain, callback)
        other = b.lookup(9200)
        for n in (1, 2):
            b.put(other, b"abcd")
            assert a.get(chain) == b"abcd"      # version n, its event queued, not run
            ran_before = list(got)
            name = f"before-{{n}}"
            value = {READS[read]}
            print(n, ran_before, value, got, flush=True)
        a.unsubscribe(chain)
        a.detach(); b.detach()
        """
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["1 [] b'ran' [1]", "2 [1] b'ran' [1, 2]"], out.stdout + out.stderr


@pytest.mark.parametrize("read", list(READS))
def test_a_symbol_read_runs_callbacks_whose_notifications_come_while_it_waits(satrun, provider, read):
    # Role 1 says it is about to wait (the symbol "waiting"), role 2 then writes the chain and
    # raises a signal; role 1's callbacks run inside its read and write the name it waits for.
    out = satrun(
        f"""
        import sat

        def waiter(a):
            a.symbols.timeout = 20
            chain = a.malloc(9300, 4)
            got = []

            def both_ran():
                if len(got) == 2:
                    a.write_symbol("during", b"ran")

            def on_chunk(event):
                got.append(("chunk", event.version))
                both_ran()

            def on_signal(i):
                got.append(("signal", i))
                both_ran()

            a.subscribe(chain, on_chunk)
            a.subscribe_signal(5, on_signal)
            a.write_symbol("waiting", b"1")
            name = "during"
            value = {READS[read]}
            print(value, got, flush=True)
            a.unsubscribe(chain)
            a.unsubscribe_signal(5)

        def writer(b):
            b.read_symbol("waiting", timeout=20)
            b.put(b.lookup(9300, timeout=20), b"abcd")
            b.raise_signal(5)

        sat.run({{1: waiter, 2: writer}})
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) in (
        ["b'ran' [('chunk', 1), ('signal', 5)]"],
        ["b'ran' [('signal', 5), ('chunk', 1)]"],
    ), out.stdout + out.stderr


def test_symbols_are_read_by_name_and_cannot_be_listed(satrun):
    """The S-DSM cannot list the names written: `client.symbols` is no Mapping, and iterating it
    raises a TypeError that says so and how to read a symbol, not the error of `symbols[0]`."""
    out = satrun(
        """
        import collections.abc
        import sat

        def role(client):
            s = client.symbols
            s["a"] = b"1"
            assert not isinstance(s, collections.abc.Mapping)
            assert s["a"] == b"1" and "a" in s and s.get("a") == b"1"
            for f in (iter, list, dict, tuple, set, sorted, lambda x: [n for n in x]):
                try:
                    f(s)
                except TypeError as e:
                    print(e)
                else:
                    raise AssertionError(f"{f} listed the symbols")
            # A name that is not a str is refused with what to give.
            for f in (lambda: s[1], lambda: s.__setitem__(1, b"x"), lambda: 1 in s, lambda: s.get(1)):
                try:
                    f()
                except TypeError as e:
                    print("refused:", e)
                else:
                    raise AssertionError("a name that is not a str was taken")

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "the symbols cannot be listed: the S-DSM keeps no list of the names written; read a "
        "symbol by its name: symbols[name], symbols.get(name), name in symbols"
    ] * 7 + ["refused: symbol name 1: give a str, such as 'frame-size'"] * 4
