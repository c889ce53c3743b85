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
