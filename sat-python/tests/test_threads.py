"""A blocking call releases the GIL: another Python thread runs meanwhile."""


def test_other_thread_runs_while_one_waits_in_barrier(satrun, provider):
    out = satrun(
        """
        import threading, time
        import sat

        def waiter(client):
            state = {"count": 0, "at_go": None, "barrier_done": False}

            def counter():
                end = time.monotonic() + 0.2
                while time.monotonic() < end:
                    state["count"] += 1
                state["at_go"] = (state["count"], state["barrier_done"])
                # Only now may the other client enter the barrier.
                client.write_symbol("go", b"1")

            entered = threading.Event()

            def blocked():
                entered.set()
                client.barrier(1, 2)
                state["barrier_done"] = True

            t1 = threading.Thread(target=blocked)
            t1.start()
            entered.wait()
            t2 = threading.Thread(target=counter)
            t2.start()
            t2.join()
            t1.join()
            count, barrier_done_at_go = state["at_go"]
            # The barrier cannot end before "go" is written, and the counter
            # writes it: had the blocked call kept the GIL, neither would run.
            # (How much it counts depends on the machine's load: not asserted.)
            assert not barrier_done_at_go, "the barrier ended before the other client entered it"
            assert count > 0, count
            print("counted while blocked:", "yes" if count > 0 else count)

        def late(client):
            client.read_symbol("go", timeout=20)
            client.barrier(1, 2)

        sat.run({1: waiter, 2: late})
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == ["counted while blocked: yes"]


def test_a_role_that_returns_while_threads_contend_for_a_chunk_ends(satrun):
    """The role function returns while three threads still take turns on one chunk: the end of
    the role waits for their calls in progress, which wait for each other's scopes, so the end of
    a scope must still go through then (the run hung for ever before). Their later calls raise
    UsageError, and the run ends."""
    out = satrun(
        """
        import threading
        import sat

        ended = []

        def role(client):
            chain = client.malloc(10, 64)
            turns = [0]
            many = threading.Event()

            def contend():
                try:
                    while True:
                        with chain.readwrite():
                            turns[0] += 1
                            if turns[0] >= 300:
                                many.set()
                except sat.UsageError:
                    ended.append(1)

            for _ in range(3):
                threading.Thread(target=contend).start()
            many.wait()

        sat.run({1: role})
        for t in threading.enumerate():
            if t is not threading.main_thread():
                t.join()
        print("threads ended:", len(ended))
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == ["threads ended: 3"]
