"""Publish-subscribe and signals with Python callbacks, over real processes."""


def test_pending_notifications_merge_into_the_last_version(satrun, provider):
    """N releases while the subscriber's role thread runs no callback: `run_handlers` on the role's
    thread (refused on another, and in a callback) runs the callback once, with the last version
    and its data, and nothing is left for after the role function."""
    out = satrun(
        """
        import threading
        import sat

        N = 200
        seen = []
        refused = []

        def publisher(client):
            chain = client.malloc(40, 8)
            client.barrier(1, 2)                   # the subscriber has subscribed
            for v in range(1, N + 1):
                with chain.write() as view:
                    view[:] = v.to_bytes(8, "little")
            client.barrier(2, 2)

        def subscriber(client):
            chain = client.lookup(40)
            role_thread = threading.get_ident()

            def on_release(event):
                assert isinstance(event, sat.ChunkEvent) and event.chunk == 40
                seen.append((event.version, int.from_bytes(event.data, "little"),
                             threading.get_ident() == role_thread))
                try:
                    client.run_handlers()
                    refused.append("callback: ran")
                except sat.UsageError:
                    refused.append("callback")
                if event.version == N:
                    client.unsubscribe(chain)

            client.subscribe(chain, on_release, with_data=True)
            client.barrier(1, 2)

            # Callbacks run on the role's thread, in its waits on other processes and after
            # the role function. Waiting for the publisher in another thread lets every
            # notification arrive, and wait, while none runs.
            def wait_for_publisher():
                client.barrier(2, 2)
                # A process is told of a version no later than it reads it: on one host by
                # the read itself, through the servers by the home before it answers.
                assert client.get(chain) == N.to_bytes(8, "little")

            t = threading.Thread(target=wait_for_publisher)
            t.start()
            t.join()
            assert seen == [], seen

            def elsewhere():
                try:
                    client.run_handlers()
                    refused.append("thread: ran")
                except sat.UsageError:
                    refused.append("thread")

            t = threading.Thread(target=elsewhere)
            t.start()
            t.join()
            assert client.run_handlers() == 1
            assert client.run_handlers() == 0
            assert refused == ["thread", "callback"], refused

        sat.run({1: publisher, 2: subscriber})
        if seen:
            print("callbacks (version, value, on the role thread):", seen)
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["callbacks (version, value, on the role thread): [(200, 200, True)]"]


def test_callbacks_run_during_a_wait_and_use_the_client(satrun, provider):
    out = satrun(
        """
        import threading
        import sat

        def publisher(client):
            chain = client.malloc(41, 8)
            client.barrier(1, 2)
            client.put(chain, (7).to_bytes(8, "little"))
            client.raise_signal(9)

        def subscriber(client):
            chain = client.lookup(41)
            role_thread = threading.get_ident()

            def on_release(event):
                value = int.from_bytes(client.get(chain), "little")
                print("chunk callback: chunk", event.chunk, "version", event.version,
                      "data", event.data, "read", value,
                      "role thread", threading.get_ident() == role_thread)
                client.unsubscribe(chain)
                client.wakeup(3)           # ends the rendezvous this callback runs in

            def on_signal(signal):
                print("signal callback:", signal, "role thread", threading.get_ident() == role_thread)
                client.unsubscribe_signal(signal)
                client.wakeup(4)

            client.subscribe(chain, on_release)
            client.subscribe_signal(9, on_signal)
            client.barrier(1, 2)
            client.rendezvous(3)
            print("rendezvous 3 returned")
            client.rendezvous(4)
            print("rendezvous 4 returned")

        sat.run({1: publisher, 2: subscriber})
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.lines(2)
    chunk = "chunk callback: chunk 41 version 1 data None read 7 role thread True"
    # The signal's callback may run in either rendezvous; each rendezvous returns only after
    # the wakeup its callback sends.
    assert [l for l in lines if not l.startswith("signal")] == [
        chunk, "rendezvous 3 returned", "rendezvous 4 returned"]
    assert lines.index("signal callback: 9 role thread True") < lines.index("rendezvous 4 returned")


def test_callback_exceptions_are_raised(satrun):
    """Out of the blocking call that ran the callback; after the role function, out of sat.run
    as the cause of RoleError."""
    out = satrun(
        """
        import sat

        def publisher(client):
            a, b = client.malloc(50, 8), client.malloc(51, 8)
            client.barrier(1, 2)
            client.put(a, bytes(8))
            client.barrier(2, 2)
            client.put(b, bytes(8))

        def subscriber(client):
            a, b = client.lookup(50), client.lookup(51)

            def fail_in_wait(event):
                raise ValueError("callback failed during the wait")

            def fail_after(event):
                raise KeyError("callback failed after the role")

            client.subscribe(a, fail_in_wait)
            client.subscribe(b, fail_after)
            client.barrier(1, 2)
            try:
                client.rendezvous(3)   # nobody wakes it: only the callback's exception ends it
            except ValueError as e:
                print("rendezvous raised:", e, "|", e.__notes__)
            client.unsubscribe(a)
            client.barrier(2, 2)

        try:
            sat.run({1: publisher, 2: subscriber})
        except sat.RoleError as e:
            print("run raised:", e, "| cause:", repr(e.__cause__), "|", e.__cause__.__notes__)
            raise SystemExit(3)
        """,
    )
    assert out.returncode != 0, out.stdout + out.stderr
    assert out.lines(2) == [
        "rendezvous raised: callback failed during the wait | ['raised by the callback of the chain "
        "of chunk 50 (1 chunk), which SAT ran while this process waited in a blocking call; that "
        "call was abandoned']",
        "run raised: role 2 failed: the handler of the chain of chunk 51 (1 chunk) failed: KeyError: "
        "'callback failed after the role' | cause: KeyError('callback failed after the role') | "
        "['raised by the callback of the chain of chunk 51 (1 chunk), which SAT ran after the role "
        "function had returned']",
    ]
    # The callback that failed after the role is printed as a failing role function is.
    assert "Traceback" in out.stderr and "in fail_after" in out.stderr


def test_a_chain_subscription_hears_every_chunk_of_the_chain(satrun, provider):
    """A release of the chain's second chunk alone runs the chain's callback, with that chunk, its
    version and (with_data) its bytes."""
    out = satrun(
        """
        import sat

        seen = []

        def publisher(client):
            client.malloc_lst([60, 61, 62], [8])
            client.barrier(1, 2)                   # the subscriber has subscribed
            second = client.malloc_lst([61], [8])  # chunk 61 alone, never 60 or 62
            with second.write() as view:
                view[:] = (61).to_bytes(8, "little")

        def subscriber(client):
            chain = client.lookup_lst([60, 61, 62])

            def on_release(event):
                with chain.read() as view:
                    values = [int.from_bytes(view[i:i + 8], "little") for i in range(0, 24, 8)]
                seen.append((event.chunk, event.version, int.from_bytes(event.data, "little"),
                             values))
                client.unsubscribe(chain)

            client.subscribe(chain, on_release, with_data=True)
            client.barrier(1, 2)

        sat.run({1: publisher, 2: subscriber})
        print("callbacks (chunk, version, data, the chain read):", seen)
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["callbacks (chunk, version, data, the chain read): [(61, 1, 61, [0, 61, 0])]"]



def test_chains_that_start_at_one_chunk_are_subscriptions_of_their_own(satrun, provider):
    """Two chains of one process that start at chunk 70 each have their callback, run by releases
    of their own chunks; a third, subscribed and unsubscribed, takes nothing from the others."""
    out = satrun(
        """
        import sat

        seen = {}
        # Each expected callback wakes the subscriber's role, which waits for it before the
        # publisher's next release: releases are handled one at a time, none merges.
        WAKES = {("a", 71): 10, ("b", 73): 11, ("a", 70): 12, ("b", 70): 13}

        def publisher(client):
            client.malloc_lst([70, 71, 72, 73], [8])
            for step, chunk in enumerate((71, 73, 70)):
                client.barrier(1 + step, 2)
                alone = client.malloc_lst([chunk], [8])
                with alone.write() as view:
                    view[:] = chunk.to_bytes(8, "little")

        def subscriber(client):
            a = client.lookup_lst([70, 71, 72])
            b = client.lookup_lst([70, 73])
            c = client.lookup_lst([70])

            def on(name):
                def callback(event):
                    seen.setdefault(name, []).append((event.chunk, event.version, event.data))
                    if (name, event.chunk) in WAKES:
                        client.wakeup(WAKES[name, event.chunk])
                return callback

            client.subscribe(a, on("a"))
            client.subscribe(b, on("b"))
            client.subscribe(c, on("c"))
            client.unsubscribe(c)
            try:
                client.subscribe(b, on("b"))
            except sat.UsageError as e:
                print("twice:", e)
            client.barrier(1, 2)
            client.rendezvous(10)
            client.barrier(2, 2)
            client.rendezvous(11)
            client.barrier(3, 2)
            client.rendezvous(12)
            client.rendezvous(13)
            client.unsubscribe(a)
            client.unsubscribe(b)

        sat.run({1: publisher, 2: subscriber})
        for name in sorted(seen):
            print(name, seen[name])
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == [
        "twice: invalid use of the SAT API: SUBSCRIBE to the chain of chunk 70 (2 chunks): this "
        "process is already subscribed; UNSUBSCRIBE first",
        "a [(71, 1, None), (70, 1, None)]",
        "b [(73, 1, None), (70, 1, None)]",
    ]
