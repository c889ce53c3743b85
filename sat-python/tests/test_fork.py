"""A fork() child must not use its parent's client: every Client and Chain method refuses."""

import pytest

from _service import service  # noqa: F401 (fixture)


def test_a_forked_child_is_refused_and_the_parent_goes_on(satrun):
    out = satrun(
        """
        import os
        import sat

        def role(client):
            chain = client.malloc(9, 4)
            client.put(chain, b"mine")
            scope = chain.read()            # made in the parent, entered in the child
            calls = {
                "client.rank": lambda: client.rank,
                "client.get": lambda: client.get(chain),
                "client.barrier": lambda: client.barrier(1, 1),
                "client.malloc": lambda: client.malloc(10, 4),
                "client.lookup": lambda: client.lookup(9),
                "client.symbols": lambda: client.symbols,
                "symbols[name]": lambda: symbols["x"],
                "symbols.timeout": lambda: symbols.timeout,
                "client.subscribe": lambda: client.subscribe(chain, print),
                "chain.size": lambda: chain.size,
                "chain.read": lambda: chain.read(),
                "chain.array": lambda: chain.array(),
                "scope.__enter__": lambda: scope.__enter__(),
            }
            symbols = client.symbols
            reader, writer = os.pipe()
            pid = os.fork()
            if pid == 0:
                # The child: report through the pipe and the exit status, never return
                # into SAT or the test's code.
                status = 0
                with os.fdopen(writer, "w") as report:
                    for name, call in calls.items():
                        try:
                            call()
                            report.write(f"{name}: accepted\\n")
                            status = 1
                        except sat.UsageError as e:
                            ok = "belongs to the parent process" in str(e) and "fork() child" in str(e)
                            report.write(f"{name}: {'refused' if ok else e}\\n")
                            status |= 0 if ok else 1
                os._exit(status)
            os.close(writer)
            with os.fdopen(reader) as report:
                lines = report.read().splitlines()
            _, status = os.waitpid(pid, 0)
            print("child exit status", os.waitstatus_to_exitcode(status))
            print(*lines, sep="\\n")
            # The parent's client is untouched.
            print("parent reads", client.get(chain), "rank", client.rank)

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.lines(1)
    assert lines[0] == "child exit status 0", lines
    assert lines[1:-1] == [
        f"{name}: refused"
        for name in [
            "client.rank", "client.get", "client.barrier", "client.malloc", "client.lookup",
            "client.symbols", "symbols[name]", "symbols.timeout", "client.subscribe",
            "chain.size", "chain.read", "chain.array", "scope.__enter__",
        ]
    ]
    assert lines[-1] == "parent reads b'mine' rank 1"


def test_the_fork_message_says_what_to_do(satrun):
    out = satrun(
        """
        import os
        import sat

        def role(client):
            reader, writer = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    client.rank
                except sat.UsageError as e:
                    os.write(writer, str(e).encode())
                os._exit(0)
            os.close(writer)
            with os.fdopen(reader) as r:
                message = r.read()
            os.waitpid(pid, 0)
            print(message.replace(str(pid), "CHILD").replace(str(os.getpid()), "PARENT"))

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "invalid use of the SAT API: this SAT client belongs to the parent process PARENT: this "
        "process (CHILD) is a fork() child of it and must not use the parent's endpoint; join SAT "
        "from the child itself (sat.run in a process started by satrun, or connect to a SAT "
        "service), or use SAT from the parent only"
    ]


# A fork() child of a service's client that ends without touching SAT (sys.exit, os._exit,
# SystemExit raised) must leave the parent's session alone: no detach, no message on the
# parent's endpoint, nothing printed at its exit (the atexit hook and the drop of the client
# do nothing in it).
@pytest.mark.parametrize("ending", ["sys.exit(0)", "os._exit(0)", "raise SystemExit(0)", "pass"])
def test_a_fork_child_that_ends_leaves_the_parents_session_alone(service, ending):
    out = service.attach(
        f"""
        import os, sys
        import sat

        client = sat.connect(os.environ["SAT_ADDRESS"])
        chain = client.malloc(9100, 4)
        client.put(chain, b"one!")
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            {ending}
        else:
            _, status = os.waitpid(pid, 0)
            print("child exit status", os.waitstatus_to_exitcode(status), flush=True)
            client.put(chain, b"two!")
            print("parent reads", client.get(chain), flush=True)
            client.symbols["fork-exit"] = b"ok"
            print("parent reads symbol", client.symbols["fork-exit"], flush=True)
            client.detach()
            print("parent detached", flush=True)
        """
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        "child exit status 0",
        "parent reads b'two!'",
        "parent reads symbol b'ok'",
        "parent detached",
    ], out.stdout + out.stderr
    # Neither process printed an exception, a panic or a warning.
    assert out.stderr == "", out.stderr
    assert "malformed" not in service.log() and "repeated" not in service.log(), service.log()
