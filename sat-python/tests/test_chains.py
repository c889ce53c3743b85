"""Chains beyond MALLOC and LOOKUP: a choice of protocol, MALLOC_LST and LOOKUP_LST, and MAP of a
caller's buffer. Every run is a real one under satrun, over shm and tcp."""


def test_home_only_chains_see_each_others_writes_and_keep_their_protocol(satrun, provider):
    out = satrun(
        """
        import sat

        ROUNDS = 5

        def check(exc, f, *args, **kw):
            try:
                f(*args, **kw)
            except exc as e:
                assert type(e) is exc, (type(e), e)
                print(exc.__name__, "|", e)
            else:
                raise AssertionError(f"{f.__name__} raised no {exc.__name__}")

        def first(client):
            chain = client.malloc(60, 8, protocol="home-only")
            assert chain.protocol == "home-only", chain.protocol
            assert client.malloc(61, 8).protocol == "mesi"            # the default
            assert client.malloc(62, 8, protocol="mesi").protocol == "mesi"
            assert client.malloc(60, 8, protocol="home-only") is chain
            check(ValueError, client.malloc, 63, 8, protocol="MESI")
            check(sat.UsageError, client.malloc, 60, 8, protocol="mesi")
            print(repr(chain))
            client.barrier(1, 2)
            # Ping-pong: each side adds one in a READWRITE scope, then hands over; every
            # increment must see the other's release.
            for _ in range(ROUNDS):
                with chain.readwrite() as view:
                    view[:] = (int.from_bytes(view, "little") + 1).to_bytes(8, "little")
                client.wakeup(1)
                client.rendezvous(2)
            with chain.read() as view:
                print("first reads", int.from_bytes(view, "little"))

        def second(client):
            client.barrier(1, 2)
            # Another process allocating the chain with the other protocol: the home refuses.
            check(sat.UsageError, client.malloc, 60, 8)
            chain = client.malloc(60, 8, protocol="home-only")        # the same protocol joins it
            assert chain.protocol == "home-only"
            looked = client.lookup(61)
            assert looked.protocol is None                            # the core does not tell it
            # A MALLOC of a looked-up chain is checked against the protocol the home has.
            check(sat.UsageError, client.malloc, 61, 8, protocol="home-only")
            assert client.malloc(61, 8) is looked
            for _ in range(ROUNDS):
                client.rendezvous(1)
                with chain.readwrite() as view:
                    view[:] = (int.from_bytes(view, "little") + 1).to_bytes(8, "little")
                client.wakeup(2)
            print("second reads", int.from_bytes(client.get(chain), "little"))

        sat.run({1: first, 2: second})
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "ValueError | protocol \"MESI\": give 'mesi' (home-based MESI, the default), 'home-only' "
        "(every scope served by the home, no cached copies), 'mesi-e' (MESI with its E state: the only "
        "holder writes again with no message), 'update' (MESI whose releases update the copies they "
        "invalidated), 'hlrc' (multiple writers, each publishing the bytes it changed), 'learned' "
        "(MESI whose readers are sent, as a barrier ends, what they read after it last time) or "
        "'adaptive' (starts as MESI; its home moves it to the protocol its pattern calls for)",
        "UsageError | invalid use of the SAT API: MALLOC of chunk 60 with 8 bytes (protocol 'mesi'): "
        "this process already has that chain with 8 bytes (protocol 'home-only'); allocate it with the "
        "same sizes and protocol, or LOOKUP it",
        "<sat.Chain base 60 of 1 chunks, 8 bytes, home-only>",
        "first reads 10",
    ]
    assert out.lines(2) == [
        "UsageError | invalid use of the SAT API: MALLOC of chunk 60 with 8 bytes [Home-Based MESI]: it "
        "already exists with 8 bytes [Home-Only]; allocate it with the same size and protocol, or LOOKUP it",
        "UsageError | invalid use of the SAT API: MALLOC of chunk 61 with 8 bytes [Home-Only]: it "
        "already exists with 8 bytes [Home-Based MESI]; allocate it with the same size and protocol, or LOOKUP it",
        "second reads 10",
    ]


def test_the_core_runs_the_protocol_chosen(satrun, provider):
    """The core's debug stream names each chunk's protocol: a home-only chunk asks its home for
    every READ, a MESI chunk only for the first one (later ones hit its valid copy). This is the
    message path: on one host the homes would keep their versions in host segments, where every
    scope takes the slot's lock instead."""
    out = satrun(
        """
        import sat

        def writer(client):
            client.put(client.malloc(70, 8, protocol="home-only"), b"homeonly")
            client.put(client.malloc(71, 8), b"mesi....")
            client.barrier(1, 2)
            client.barrier(2, 2)

        def reader(client):
            client.barrier(1, 2)
            for base, expected in [(70, b"homeonly"), (71, b"mesi....")]:
                chain = client.lookup(base)
                for _ in range(3):
                    with chain.read() as view:
                        assert bytes(view) == expected, bytes(view)
            client.barrier(2, 2)

        sat.run({1: writer, 2: reader})
        """,
        provider=provider,
        env={"SAT_LOG": "sat_core::client=debug", "SAT_HOST_SEGMENTS": "off"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    reads = [l for l in out.log_lines(2) if " READ chunk 7" in l and ": miss" in l]
    assert [l.split(":")[0] for l in reads] == ["[Home-Only] READ chunk 70"] * 3 + [
        "[Home-Based MESI] READ chunk 71"
    ], out.stderr


def test_the_e_state_and_update_protocols_by_name(satrun, provider):
    """'mesi-e': the process holding the only copy writes again with no request (the debug
    stream shows one miss for five write scopes); 'update': the consumer reads every version the
    producer released. The message path, as in the test above."""
    out = satrun(
        """
        import sat

        def producer(client):
            owned = client.malloc(80, 8, protocol="mesi-e")
            pushed = client.malloc(81, 8, protocol="update")
            assert (owned.protocol, pushed.protocol) == ("mesi-e", "update")
            for i in range(5):
                with owned.readwrite() as view:
                    view[:] = (int.from_bytes(view, "little") + 1).to_bytes(8, "little")
            client.barrier(1, 2)
            for i in range(1, 6):
                with pushed.write() as view:
                    view[:] = i.to_bytes(8, "little")
                client.barrier(2, 2)
                client.barrier(3, 2)

        def consumer(client):
            client.barrier(1, 2)
            with client.lookup(80).read() as view:
                print("owned", int.from_bytes(view, "little"))
            pushed = client.lookup(81)
            for i in range(1, 6):
                client.barrier(2, 2)
                with pushed.read() as view:
                    print("pushed", int.from_bytes(view, "little"))
                client.barrier(3, 2)

        sat.run({1: producer, 2: consumer})
        """,
        provider=provider,
        env={"SAT_LOG": "sat_core::client=debug", "SAT_HOST_SEGMENTS": "off"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["owned 5"] + [f"pushed {i}" for i in range(1, 6)]
    misses = [l.split(":")[0] for l in out.log_lines(1) if " chunk 80" in l and ": miss" in l]
    assert misses == ["[Home-Based MESI with E] READWRITE chunk 80"], out.stderr


def test_an_adaptive_chain_moves_to_the_e_state_and_keeps_every_write(satrun, provider):
    """'adaptive': a chunk only its producer writes starts on MESI, and after 8 write requests its
    home moves it to MESI with E; the reader sees the last write after it. The debug stream shows
    the 8 misses under MESI, then the switch, then one request under E (the first write after
    it), and every later write opens with no message. That one request is either a miss under E
    (the switch reached the producer between two writes) or its 9th MESI request asked again
    under E (the request crossed the switch, and the home held it)."""
    out = satrun(
        """
        import sat

        def producer(client):
            chain = client.malloc(95, 8, protocol="adaptive")
            assert chain.protocol == "adaptive"
            for i in range(1, 21):
                with chain.readwrite() as view:
                    view[:] = i.to_bytes(8, "little")
            client.barrier(1, 2)

        def reader(client):
            client.barrier(1, 2)
            with client.lookup(95).read() as view:
                print("read", int.from_bytes(view, "little"))

        sat.run({1: producer, 2: reader})
        """,
        provider=provider,
        env={"SAT_LOG": "sat_core::client=debug", "SAT_HOST_SEGMENTS": "off"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["read 20"]
    log = out.log_lines(1)
    misses = [l.split(":")[0] for l in log if " chunk 95" in l and ": miss" in l]
    mesi, with_e = "[Home-Based MESI] READWRITE chunk 95", "[Home-Based MESI with E] READWRITE chunk 95"
    switched = [l for l in log if "chunk 95: mesi -> mesi-e (epoch 1)" in l]
    assert len(switched) == 1, out.stderr
    if "asking again" in switched[0]:
        assert misses == [mesi] * 9, out.stderr
    else:
        assert misses == [mesi] * 8 + [with_e], out.stderr


def test_multiple_writers_each_publish_their_own_bytes(satrun, provider):
    """'hlrc': two processes write their own halves of one chunk at the same time, ROUNDS times
    each, and both halves keep every write (a READWRITE of the whole chunk by the other would
    have overwritten them under MESI's rules only if it published stale bytes: here it
    publishes only what it changed)."""
    out = satrun(
        """
        import sat

        ROUNDS = 20

        def writer(client):
            chain = client.malloc(90, 16, protocol="hlrc")
            assert chain.protocol == "hlrc"
            half = (client.rank - 1) * 8        # ranks 1 and 2
            client.barrier(1, 2)
            for i in range(ROUNDS):
                with chain.readwrite() as view:
                    n = int.from_bytes(view[half:half + 8], "little")
                    view[half:half + 8] = (n + 1).to_bytes(8, "little")
            client.barrier(2, 2)
            with chain.read() as view:
                print("halves", int.from_bytes(view[:8], "little"), int.from_bytes(view[8:], "little"))

        sat.run({1: writer, 2: writer})
        """,
        provider=provider,
        env={"SAT_HOST_SEGMENTS": "off"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == ["halves 20 20"] and out.lines(2) == ["halves 20 20"], out.stdout


def test_malloc_lst_and_lookup_lst_lay_chunks_out_in_the_order_of_ids(satrun, provider):
    out = satrun(
        """
        import sat

        def fill(chain, view):
            # Chunk `id` holds the byte `id` in every position, found at the chain's offsets.
            for id, offset, size in zip(chain.ids, chain.offsets, chain.sizes):
                view[offset:offset + size] = bytes([id]) * size

        def check(chain, data, add=0):
            for id, offset, size in zip(chain.ids, chain.offsets, chain.sizes):
                assert data[offset:offset + size] == bytes([id + add]) * size, (id, bytes(data))

        def producer(client):
            # Sizes round-robin: 30 gets 8 bytes, 10 gets 16, 20 gets 8 again.
            chain = client.malloc_lst([30, 10, 20], [8, 16], protocol="mesi")
            assert (chain.ids, chain.sizes, chain.offsets) == ([30, 10, 20], [8, 16, 8], [0, 8, 24])
            assert (chain.size, chain.nbchunks, chain.base, chain.protocol) == (32, 3, 30, "mesi")
            assert client.malloc_lst([30, 10, 20], [8, 16, 8]) is chain     # the same chain
            with chain.write() as view:
                fill(chain, view)
            home_only = client.malloc_lst([40, 41], [4], protocol="home-only")
            assert (home_only.protocol, home_only.sizes) == ("home-only", [4, 4])
            client.barrier(1, 2)
            client.barrier(2, 2)        # the consumer added 100 to chunk 20 through its own chain
            with chain.read() as view:
                assert view[24:32] == bytes([120]) * 8, bytes(view)
                assert view[:24] == bytes([30]) * 8 + bytes([10]) * 16, bytes(view)
            print("producer sees chunk 20 at offset 24:", view[24])

        def consumer(client):
            client.barrier(1, 2)
            chain = client.lookup_lst([20, 30, 10], timeout=5.0)
            assert (chain.ids, chain.sizes, chain.offsets) == ([20, 30, 10], [8, 8, 16], [0, 8, 16])
            assert chain.protocol is None
            with chain.read() as view:
                check(chain, view)
            single = client.lookup_lst([10])
            assert client.lookup(10) is single and single.size == 16
            assert client.get(single) == bytes([10]) * 16
            assert client.lookup_lst([20, 30, 10]) is chain
            with chain.readwrite() as view:
                view[0:8] = bytes([120]) * 8      # chunk 20, first in this chain
            client.barrier(2, 2)
            print("consumer layout", chain.ids, chain.offsets)

        sat.run({1: producer, 2: consumer})
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == ["producer sees chunk 20 at offset 24: 120"]
    assert out.lines(2) == ["consumer layout [20, 30, 10] [0, 8, 16]"]


def test_malloc_lst_and_lookup_lst_refuse_what_is_malformed(satrun):
    out = satrun(
        """
        import sat

        def check(exc, f, *args, **kw):
            try:
                f(*args, **kw)
            except exc as e:
                assert type(e) is exc, (type(e), e)
                print(exc.__name__, "|", e)
            else:
                raise AssertionError(f"{f.__name__} raised no {exc.__name__}")

        def role(client):
            chain = client.malloc_lst([5, 6], [8])
            check(sat.ChunkError, client.malloc_lst, [], [8])
            check(sat.ChunkError, client.malloc_lst, [1], [])
            check(sat.ChunkError, client.malloc_lst, [1, 2, 1], [8])
            check(sat.ChunkError, client.malloc_lst, [1, 2], [8, 0])
            check(sat.ChunkError, client.malloc_lst, [1, 2], [8, (1 << 30) + 1])
            check(sat.UsageError, client.malloc_lst, [5, 6], [4, 12])
            check(ValueError, client.malloc_lst, [1], [8], protocol="home_only")
            check(TypeError, client.malloc_lst, "12", [8])
            check(ValueError, client.lookup_lst, [1, -1])
            check(sat.ChunkError, client.lookup_lst, [])
            check(sat.ChunkError, client.lookup_lst, [5, 5])
            check(sat.TimeoutError, client.lookup_lst, [5, 999], timeout=0.2)
            assert client.lookup_lst([5, 6]) is chain
            check(ValueError, client.malloc, 1, -1)
            check(ValueError, client.malloc, -1, 8)
            check(TypeError, client.malloc, 1, "8")
            def zero_chunk_size():
                client.chunk_size = 0
            check(sat.ChunkError, zero_chunk_size)

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.lines(1)
    assert lines[:5] == [
        "ChunkError | the list of chunk ids is empty: give at least one id",
        "ChunkError | the list of sizes is empty: give at least one size (it is used round-robin)",
        "ChunkError | chunk 1 appears twice in one chain: a chain holds each chunk once",
        "ChunkError | a chunk of 0 bytes cannot be allocated: give a size of at least 1",
        "ChunkError | a chunk of 1073741825 bytes is over the 1073741824-byte limit: MALLOC a chain of "
        "smaller chunks",
    ]
    assert lines[5] == (
        "UsageError | invalid use of the SAT API: MALLOC_LST of chunk 5 with 16 bytes in chunks of [4, 12] "
        "(protocol 'mesi'): this process already has that chain with 16 bytes in chunks of [8, 8] (protocol "
        "'mesi'); allocate it with the same sizes and protocol, or LOOKUP it"
    )
    assert lines[6].startswith("ValueError | protocol \"home_only\": give 'mesi'"), lines[6]
    ids_hint = "ids: give a sequence of ints >= 0, such as [30, 10, 20]"
    assert lines[7] == f"TypeError | {ids_hint} (TypeError: Can't extract `str` to `Vec`)"
    assert lines[8].startswith(f"ValueError | {ids_hint} (OverflowError: "), lines[8]
    assert lines[9:11] == [
        "ChunkError | the list of chunk ids is empty: give at least one id",
        "ChunkError | chunk 5 appears twice in one chain: a chain holds each chunk once",
    ]
    assert lines[11] == (
        "TimeoutError | timed out: LOOKUP of chunk 999: no process allocated it within 200ms; MALLOC it "
        "somewhere, or LOOKUP with a longer wait"
    )
    assert lines[12:] == [
        "ValueError | size -1: give an int >= 0 that fits in 64 bits",
        "ValueError | base -1: give an int >= 0 that fits in 64 bits",
        "TypeError | size: give an int >= 0 ('str' object cannot be interpreted as an integer)",
        "ChunkError | the chunk size must be at least 1 byte",
    ]


def test_a_mapped_numpy_array_is_the_chains_memory(satrun, provider):
    """MAP: the array itself is the chain's local bytes, split into chunks; what is written
    through it in a write scope reaches another process, and a READ scope fills it in place."""
    out = satrun(
        """
        import numpy as np
        import sat

        N = 500  # 4000 bytes: 4 chunks of 1024 (SAT_CHUNK_SIZE)

        def address(a):
            return a.__array_interface__["data"][0]

        def owner(client):
            a = np.zeros(N, dtype=np.float64)
            chain = client.map(50, a)
            assert (chain.nbchunks, chain.sizes, chain.size) == (4, [1024, 1024, 1024, 928], a.nbytes)
            assert chain.protocol == "mesi" and client.map(50, a) is chain
            assert client.malloc(50, a.nbytes) is chain          # the same chunks: this chain
            with chain.write() as view:
                a[:] = np.arange(N) * 0.5                        # through the array, no view
                assert address(np.frombuffer(view, dtype=np.float64)) == address(a)
                assert len(view) == a.nbytes
            assert address(chain.array(np.float64)) == address(a)
            print(repr(chain))
            client.barrier(1, 2)
            client.barrier(2, 2)        # the other process negated the chain
            assert (a == np.arange(N) * 0.5).all()               # nothing changes outside a scope...
            with chain.read():                                   # ...a READ scope fills the array
                assert (a == -np.arange(N)).all(), a[:4]
            a[:] = 7.0                  # written outside a scope, then published as it is (PUT)
            client.put(chain)
            h = np.zeros(16, dtype=np.uint8)
            home_only = client.map(80, h, protocol="home-only")
            assert home_only.protocol == "home-only"
            with home_only.write():
                h[:] = np.arange(16)
            client.barrier(3, 2)
            print("owner's array after the other's read:", a[:2].tolist())

        def other(client):
            client.barrier(1, 2)
            chain = client.lookup(50, nbchunks=4)
            with chain.read() as view:
                b = np.frombuffer(view, dtype=np.float64)
                assert (b == np.arange(N) * 0.5).all(), b[:4]
            with chain.readwrite() as view:
                np.frombuffer(view, dtype=np.float64)[:] *= -2.0
            client.barrier(2, 2)
            client.barrier(3, 2)
            assert client.get(chain) == np.full(N, 7.0).tobytes()
            print("home-only chunk:", list(client.get(client.lookup(80))))

        sat.run({1: owner, 2: other})
        """,
        provider=provider,
        env={"SAT_CHUNK_SIZE": "1024"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "<sat.Chain base 50 of 4 chunks, 4000 bytes, mesi, mapped>",
        "owner's array after the other's read: [7.0, 7.0]",
    ]
    assert out.lines(2) == ["home-only chunk: " + str(list(range(16)))]


def test_map_holds_the_buffer_and_refuses_what_it_cannot_map(satrun):
    out = satrun(
        """
        import array, gc, mmap, weakref
        import numpy as np
        import sat

        def check(exc, f, *args, **kw):
            try:
                f(*args, **kw)
            except exc as e:
                assert type(e) is exc, (type(e), e)
                print(exc.__name__, "|", e)
            else:
                raise AssertionError(f"{f.__name__} raised no {exc.__name__}")

        def role(client):
            # The chain holds the exporting object: the array outlives the caller's reference,
            # and a bytearray cannot be resized under the chain.
            a = np.arange(4, dtype=np.int64)
            alive = weakref.ref(a)
            chain = client.map(10, a)
            del a
            gc.collect()
            assert alive() is not None, "the mapped array was freed"
            with chain.readwrite():
                assert chain.array(np.int64).tolist() == [0, 0, 0, 0]   # filled from the home
                alive()[:] = [1, 2, 3, 4]
            assert client.get(chain) == np.array([1, 2, 3, 4], dtype=np.int64).tobytes()
            raw = bytearray(b"abcd")
            mapped = client.map(20, raw)
            with mapped.write():
                raw[:] = b"wxyz"
            check(BufferError, raw.extend, b"!")
            assert client.get(mapped) == b"wxyz"
            view = memoryview(bytearray(8))[2:6]                # a writable, contiguous slice
            assert client.map(30, view).size == 4
            doubles = array.array("d", [1.5] * 4)
            with client.map(31, doubles).write():
                doubles[3] = 2.5
            assert client.get(client.lookup(31)) == array.array("d", [1.5] * 3 + [2.5]).tobytes()
            anonymous = mmap.mmap(-1, 64)
            assert client.map(32, anonymous).size == 64
            check(BufferError, anonymous.close)                 # exported to the chain

            readonly = np.zeros(8)
            readonly.setflags(write=False)
            check(TypeError, client.map, 40, readonly)
            check(TypeError, client.map, 40, b"bytes")
            check(ValueError, client.map, 40, np.zeros(8)[::2])
            check(ValueError, client.map, 40, np.zeros((4, 4), order="F"))
            check(TypeError, client.map, 40, [1, 2, 3])
            check(sat.ChunkError, client.map, 40, bytearray())
            check(ValueError, client.map, 40, bytearray(4), protocol="msi")
            # One memory, one chain: not the same array at other chunks, nor a chain's own bytes.
            check(sat.UsageError, client.map, 41, alive())
            other = client.malloc(50, 8)
            with other.write() as bytes_of_other:
                check(sat.UsageError, client.map, 42, bytes_of_other)
            check(sat.UsageError, client.map, 50, bytearray(8))
            check(sat.UsageError, client.map, 10, np.zeros(4, dtype=np.int64))
            print("kept", bytes(alive().tobytes()[:1]))

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.lines(1)
    assert lines[0].startswith("BufferError | "), lines
    assert lines[1] == "BufferError | cannot close exported pointers exist", lines
    assert lines[2:] == [
        "TypeError | MAP of chunk 40: the buffer of this 'ndarray' object is read-only, and SAT writes the "
        "chunks' data into the memory it maps: give a writable buffer (a numpy array whose flags.writeable "
        "is True, such as a.copy(); a bytearray rather than bytes)",
        "TypeError | MAP of chunk 40: the buffer of this 'bytes' object is read-only, and SAT writes the "
        "chunks' data into the memory it maps: give a writable buffer (a numpy array whose flags.writeable "
        "is True, such as a.copy(); a bytearray rather than bytes)",
    ] + [
        "ValueError | MAP of chunk 40: the buffer of this 'ndarray' object is not C-contiguous, and a "
        "chain's bytes are one contiguous block: give a C-contiguous buffer (numpy.ascontiguousarray(a) is "
        "one, a copy to map in its place)",
    ] * 2 + [
        "TypeError | MAP of chunk 40: a 'list' object has no buffer to map (TypeError: a bytes-like object "
        "is required, not 'list'): give a writable, C-contiguous buffer, such as a numpy array, a bytearray "
        "or a memoryview of one",
        "ChunkError | a chunk of 0 bytes cannot be allocated: give a size of at least 1",
        "ValueError | protocol \"msi\": give 'mesi' (home-based MESI, the default), 'home-only' "
        "(every scope served by the home, no cached copies), 'mesi-e' (MESI with its E state: the only "
        "holder writes again with no message), 'update' (MESI whose releases update the copies they "
        "invalidated), 'hlrc' (multiple writers, each publishing the bytes it changed), 'learned' "
        "(MESI whose readers are sent, as a barrier ends, what they read after it last time) or "
        "'adaptive' (starts as MESI; its home moves it to the protocol its pattern calls for)",
        "UsageError | invalid use of the SAT API: MAP of chunk 41: this memory is already the local memory "
        "of the chain at chunk 10; two chains in one memory would overwrite each other's data: give each "
        "chain its own buffer",
        "UsageError | invalid use of the SAT API: MAP of chunk 42: this memory is already the local memory "
        "of the chain at chunk 50; two chains in one memory would overwrite each other's data: give each "
        "chain its own buffer",
        "UsageError | invalid use of the SAT API: MAP of chunk 50 with 8 bytes (protocol 'mesi'): this "
        "process already has that chain with 8 bytes (protocol 'mesi'), in memory of SAT; a chain lives in "
        "one memory per process: use that Chain, or MAP other chunks",
        "UsageError | invalid use of the SAT API: MAP of chunk 10 with 32 bytes (protocol 'mesi'): this "
        "process already has that chain with 32 bytes (protocol 'mesi'), in another mapped buffer; a chain "
        "lives in one memory per process: use that Chain, or MAP other chunks",
        "kept b'\\x01'",
    ]


def test_a_0_d_array_maps_as_the_same_array_of_shape_1_does(satrun):
    """A 0-d numpy array (np.array(1.0): writable, C-contiguous, 8 bytes) is a buffer as the docs
    describe, whose buffer has no shape: MAP takes it, as PUT and Chain.array do, and the chain's
    bytes are the array's own."""
    out = satrun(
        """
        import numpy as np
        import sat

        def role(client):
            a = np.array(1.0)
            chain = client.map(60, a)
            assert (chain.size, chain.nbchunks) == (8, 1), chain
            assert client.map(60, a) is chain
            with chain.write():
                a[()] = 2.5                       # through the array itself
            assert client.get(chain) == np.float64(2.5).tobytes()
            client.put(chain, np.array(-4.0))
            with chain.read():
                print("0-d:", float(a), chain.array(np.float64, ()).shape)
            readonly = np.array(1.0)
            readonly.setflags(write=False)
            try:
                client.map(61, readonly)
            except TypeError as e:
                print("read-only:", str(e).split(",")[0])
            b = np.array(7, dtype=np.int16)
            with client.map(62, b).readwrite() as view:
                print("int16 0-d:", len(view), view.obj.chain.size)

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == [
        "0-d: -4.0 ()",
        "read-only: MAP of chunk 61: the buffer of this 'ndarray' object is read-only",
        "int16 0-d: 2 2",
    ]


def test_free_gives_the_chain_back_and_its_chunks_stay(satrun):
    """Chain.free (the report's FREE) gives the chain back in this process: the Chain is no longer
    valid (a scope or an array of it raises UsageError), an array made before keeps its memory,
    allocating the chain again makes a new Chain that reads what was written, and a free inside a
    scope changes nothing."""
    out = satrun(
        """
        import numpy as np
        import sat

        def role(client):
            chain = client.malloc(70, 1 << 17)            # two chunks of 64 KiB
            kept = chain.array(np.int64)
            with chain.write():
                kept[:] = np.arange(len(kept))
            with chain.read():
                try:
                    chain.free()
                except sat.UsageError as e:
                    print("in a scope:", "inside a scope" in str(e))
            chain.free()
            for what, call in [("read", lambda: chain.read().__enter__()),
                               ("array", lambda: chain.array()),
                               ("free", chain.free)]:
                try:
                    call()
                except sat.UsageError as e:
                    print(what, "after free:", "given back" in str(e) or "no longer" in str(e))
            print("kept array:", int(kept[-1]))
            again = client.malloc(70, 1 << 17)
            assert again is not chain
            with again.read():
                print("again:", int(again.array(np.int64)[-1]))

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    last = (1 << 17) // 8 - 1
    assert out.lines(1) == [
        "in a scope: True",
        "read after free: True",
        "array after free: True",
        "free after free: True",
        f"kept array: {last}",
        f"again: {last}",
    ]


def test_free_returns_the_chains_memory_at_once(satrun):
    """Chain.free gives the chain's memory back to the system then, not when the Chain object is
    collected (the Chain held it: 64 MiB stayed until ``del`` and ``gc.collect()``)."""
    out = satrun(
        """
        import sat

        def anon_mib():
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) // 1024

        def role(client):
            chain = client.malloc(90, 64 << 20)
            client.put(chain, b"\\x09" * (64 << 20))
            before = anon_mib()
            chain.free()
            after = anon_mib()
            print("returned:", before - after >= 32, before, after)

        sat.run({1: role})
        """,
        n=2,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1)[0].startswith("returned: True"), out.lines(1)
