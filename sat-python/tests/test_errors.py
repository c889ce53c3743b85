"""Errors raise sat.SatError subclasses carrying the core's message."""

import types

import pytest

import sat


def test_exception_classes():
    for name in ["UsageError", "ChunkError", "TopologyError", "TransportError", "BootstrapError",
                 "AbortedError", "RoleError", "TimeoutError"]:
        cls = getattr(sat, name)
        assert issubclass(cls, sat.SatError), name
        assert cls.__module__ == "sat"
    assert issubclass(sat.SatError, Exception)


def test_run_checks_roles_before_joining():
    with pytest.raises(sat.UsageError, match="role 0 is the S-DSM server"):
        sat.run({0: print})
    # Any mapping, as the stubs say.
    with pytest.raises(sat.UsageError, match="role 0 is the S-DSM server"):
        sat.run(types.MappingProxyType({0: print}))
    with pytest.raises(TypeError, match="not callable"):
        sat.run({1: 3})
    with pytest.raises(TypeError, match=r"give a dict of role ids to functions"):
        sat.run([print])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"role id -1: give an int >= 0 that fits in 32 bits"):
        sat.run({-1: print})
    with pytest.raises(TypeError, match=r"role id: give an int >= 0"):
        sat.run({"a": print})  # type: ignore[dict-item]


def test_a_process_runs_once(satrun):
    """sat.run from inside a role, or after the run, raises UsageError saying so (it used to fail
    on the spent launcher environment, blaming rank 0)."""
    out = satrun(
        """
        import sat

        def role(client):
            try:
                sat.run({1: lambda c: None})
            except sat.UsageError as e:
                print("inside:", e)

        sat.run({1: role})
        try:
            sat.run({1: role})
        except sat.UsageError as e:
            print("after:", e)
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    inside = [l for l in out.lines(1) if l.startswith("inside:")]
    assert len(inside) == 1 and "already in a run" in inside[0], out.stdout + out.stderr
    for rank in (0, 1):
        after = [l for l in out.lines(rank) if l.startswith("after:")]
        assert len(after) == 1 and "called sat.run before" in after[0], out.stdout + out.stderr


def test_misuse_raises_the_right_error(satrun):
    out = satrun(
        """
        import sat

        def check(exc, fragment, f, *args, **kw):
            try:
                f(*args, **kw)
            except exc as e:
                assert type(e) is exc, (type(e), e)
                assert fragment in str(e), str(e)
                print("ok", exc.__name__, "|", fragment)
            else:
                raise AssertionError(f"{f.__name__} raised no {exc.__name__}")

        def role(client):
            chain = client.malloc(10, 8)
            check(sat.TimeoutError, "chunk 999", client.lookup, 999, timeout=0.2)
            check(sat.ChunkError, "", client.malloc, 11, 0)
            check(sat.UsageError, "PUT of the chain at chunk 10 with 3 bytes: the chain has 8",
                  client.put, chain, b"abc")
            check(sat.UsageError, "chunk 10", client.release, chain)
            # Bytes-like only: a list of small ints is not bytes a program means to publish.
            for not_bytes in (list(range(8)), tuple(range(8)), dict.fromkeys(range(8)), "12345678"):
                check(TypeError, f"not {type(not_bytes).__name__}", client.put, chain, not_bytes)
            check(TypeError, "not list", client.write_symbol, "s", [1, 2])
            import array
            client.put(chain, array.array("B", range(8)))   # any object with the buffer protocol
            check(ValueError, "give 'read', 'write' or 'readwrite'", client.acquire, chain, "rw")
            scope = chain.write()
            with scope as buf:
                buf[:] = b"12345678"
            check(sat.UsageError, "already entered", scope.__enter__)
            check(sat.UsageError, "this scope is not open", chain.read().__exit__, None, None, None)
            with chain.read() as view:
                check(TypeError, "read-only", view.__setitem__, 0, 65)
            check(sat.UsageError, "already has that chain with 8 bytes", client.malloc, 10, 9)
            assert client.malloc(10, 8) is chain and client.lookup(10) is chain
            check(sat.UsageError, "reserved for the symbol table", client.malloc, 0xFFFF_FF00_0000_0000, 8)
            check(TypeError, "not callable", client.subscribe, chain, 3)
            check(sat.UsageError, "unknown to this process", client.subscribe, 999, print)
            check(sat.UsageError, "not subscribed", client.unsubscribe, chain)
            assert client.get(chain) == b"12345678"
            client.acquire(chain, "read")
            client.release(chain)
            kept.append(client)

        kept = []
        sat.run({1: role})
        if kept:  # the client, not the server (rank 0)
            try:
                kept[0].rank
            except sat.UsageError as e:
                assert "its role function has returned" in str(e)
                print("ok closed")
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "ok TimeoutError | chunk 999",
        "ok ChunkError | ",
        "ok UsageError | PUT of the chain at chunk 10 with 3 bytes: the chain has 8",
        "ok UsageError | chunk 10",
        "ok TypeError | not list",
        "ok TypeError | not tuple",
        "ok TypeError | not dict",
        "ok TypeError | not str",
        "ok TypeError | not list",
        "ok ValueError | give 'read', 'write' or 'readwrite'",
        "ok UsageError | already entered",
        "ok UsageError | this scope is not open",
        "ok TypeError | read-only",
        "ok UsageError | already has that chain with 8 bytes",
        "ok UsageError | reserved for the symbol table",
        "ok TypeError | not callable",
        "ok UsageError | unknown to this process",
        "ok UsageError | not subscribed",
        "ok closed",
    ]


def test_python_exception_fails_the_role(satrun):
    out = satrun(
        """
        import sat

        def role(client):
            raise ValueError("boom in role")

        try:
            sat.run({1: role})
        except sat.RoleError as e:
            print("caught:", e)
            raise SystemExit(3)
        """,
        n=2,
    )
    assert out.returncode != 0
    assert "caught: role 1 failed: ValueError: boom in role" in out.stdout
    assert "Traceback" in out.stderr and "boom in role" in out.stderr


def test_int_arguments_out_of_range_or_of_the_wrong_type_say_what_to_give(satrun):
    """Every int argument (a chunk id, a count, a size, a barrier, rendezvous or signal id) that is
    negative or too large raises a ValueError naming it and its range, and one of the wrong type a
    TypeError naming it and what to give: not pyo3's OverflowError, which names neither."""
    out = satrun(
        """
        import sat

        def check(exc, f, *args, **kw):
            try:
                f(*args, **kw)
            except Exception as e:
                assert type(e) is exc, (type(e), e)
                print(exc.__name__, "|", e)
            else:
                raise AssertionError(f"{f.__name__}{args} raised no {exc.__name__}")

        def role(client):
            def set_chunk_size(value):
                client.chunk_size = value

            chain = client.malloc(1, 8)
            check(ValueError, client.lookup, -1)
            check(ValueError, client.lookup, 1, nbchunks=-1)
            check(ValueError, client.lookup, 2**64)
            check(TypeError, client.lookup, "1")
            check(TypeError, client.lookup, 1, nbchunks=1.5)
            check(TypeError, client.lookup, 1, None)
            check(ValueError, client.map, -1, bytearray(8))
            check(TypeError, client.map, "1", bytearray(8))
            check(ValueError, client.barrier, -1, 2)
            check(ValueError, client.barrier, 1, -2)
            check(ValueError, client.barrier, 2**32, 2)
            check(TypeError, client.barrier, 1, "2")
            check(ValueError, client.rendezvous, -1)
            check(ValueError, client.wakeup, 2**70)
            check(ValueError, client.raise_signal, -1)
            check(ValueError, client.subscribe_signal, -1, print)
            check(ValueError, client.unsubscribe_signal, 2**32)
            check(TypeError, client.raise_signal, None)
            check(ValueError, set_chunk_size, -1)
            check(TypeError, set_chunk_size, "4096")
            check(ValueError, client.subscribe, -1, print)
            check(TypeError, client.subscribe, "x", print)
            check(ValueError, client.unsubscribe, 2**64)
            check(TypeError, client.unsubscribe, 1.0)
            check(ValueError, chain.array, "u1", (2, -1))
            check(TypeError, chain.array, "u1", "x")
            # The ranges are the ones said: the largest id of each kind is taken.
            client.raise_signal(2**32 - 1)
            check(sat.UsageError, client.unsubscribe, 2**64 - 1)
            assert client.lookup(1, nbchunks=1) is chain

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    u64 = "give an int >= 0 that fits in 64 bits"
    u32 = "give an int >= 0 that fits in 32 bits (at most 4294967295)"
    not_an_int = "object cannot be interpreted as an integer"
    target = "give a Chain or a chunk id"
    shape = "give an int or a sequence of ints >= 0"
    assert out.lines(1) == [
        f"ValueError | base -1: {u64}",
        f"ValueError | nbchunks -1: {u64}",
        f"ValueError | base 18446744073709551616: {u64}",
        f"TypeError | base: give an int >= 0 ('str' {not_an_int})",
        f"TypeError | nbchunks: give an int >= 0 ('float' {not_an_int})",
        f"TypeError | nbchunks: give an int >= 0 ('NoneType' {not_an_int})",
        f"ValueError | base -1: {u64}",
        f"TypeError | base: give an int >= 0 ('str' {not_an_int})",
        f"ValueError | id -1: {u32}",
        f"ValueError | count -2: {u32}",
        f"ValueError | id 4294967296: {u32}",
        f"TypeError | count: give an int >= 0 ('str' {not_an_int})",
        f"ValueError | id -1: {u32}",
        f"ValueError | id 1180591620717411303424: {u32}",
        f"ValueError | id -1: {u32}",
        f"ValueError | id -1: {u32}",
        f"ValueError | id 4294967296: {u32}",
        f"TypeError | id: give an int >= 0 ('NoneType' {not_an_int})",
        f"ValueError | chunk_size -1: {u64}",
        f"TypeError | chunk_size: give an int >= 0 ('str' {not_an_int})",
        f"ValueError | target -1: {target} (an int >= 0 that fits in 64 bits)",
        f"TypeError | target 'x': {target} (int), not a str",
        f"ValueError | target 18446744073709551616: {target} (an int >= 0 that fits in 64 bits)",
        f"TypeError | target 1.0: {target} (int), not a float",
        f"ValueError | shape (2, -1): {shape}",
        f"TypeError | shape x: {shape}",
        "UsageError | invalid use of the SAT API: UNSUBSCRIBE from chunk 18446744073709551615: this "
        "process is not subscribed to it",
    ]
