"""Two clients exchange bytes through a chain, over shm and tcp."""


def test_write_scope_then_read_after_barrier(satrun, provider):
    out = satrun(
        """
        import sat

        def writer(client):
            chain = client.malloc(42, 11)
            assert (chain.base, chain.size, chain.nbchunks) == (42, 11, 1)
            with chain.write() as buf:
                assert isinstance(buf, memoryview) and len(buf) == 11 and not buf.readonly
                buf[:] = b"hello world"
            client.barrier(1, 2)
            client.barrier(2, 2)
            print("writer read back", client.get(chain))

        def reader(client):
            client.barrier(1, 2)
            chain = client.lookup(42, timeout=10)
            with chain.read() as data:
                assert isinstance(data, memoryview) and data.readonly
                print("reader got", bytes(data))
            with chain.readwrite() as buf:
                buf[0:5] = b"HELLO"
            client.barrier(2, 2)

        sat.run({1: writer, 2: reader})
        """,
        provider=provider,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["reader got b'hello world'"]
    assert out.lines(1) == ["writer read back b'HELLO world'"]


def test_put_get_symbols_rendezvous(satrun, provider):
    out = satrun(
        """
        import sat

        def first(client):
            assert client.role == 1 and client.size == 3 and client.client_count == 2
            chain = client.malloc(7, 3000)      # more than one chunk with SAT_CHUNK_SIZE=1024
            assert chain.nbchunks == 3
            client.put(chain, bytes(range(256)) * 11 + bytes(184))
            client.write_symbol("ready", memoryview(b"chain 7"))
            client.rendezvous(5)
            print("first woken")

        def second(client):
            assert client.read_symbol("ready", timeout=10) == b"chain 7"
            chain = client.lookup(7, nbchunks=3)
            data = client.get(chain)
            assert data == bytes(range(256)) * 11 + bytes(184), data[:16]
            print("second got", len(data), "bytes")
            client.wakeup(5)

        sat.run({1: first, 2: second})
        """,
        provider=provider,
        env={"SAT_CHUNK_SIZE": "1024"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["second got 3000 bytes"]
    assert out.lines(1) == ["first woken"]
