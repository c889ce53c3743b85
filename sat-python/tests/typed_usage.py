"""A typed SAT program using the whole API (tests/test_typing.py).

`mypy --strict` checks it against the stubs, and it runs under satrun, where `same` checks
that every value has the type `assert_type` says the stubs give it: stubtest checks the
signatures of the compiled module, but cannot see what its functions return.
"""

from __future__ import annotations

import array as stdarray
import typing
from typing import Any, Literal, Optional, Union, assert_type

import numpy as np
import numpy.typing as npt

import sat


def same(value: object, kind: Union[type, tuple[type, ...]]) -> None:
    assert isinstance(value, kind), f"{value!r} is not a {kind}"


def topology(client: sat.Client) -> None:
    for value in (client.rank, client.role, client.size, client.client_count,
                  client.server_count, client.server, client.chunk_size):
        assert_type(value, int)
        same(value, int)
    for ranks in (client.servers, client.clients, client.roles):
        assert_type(ranks, list[int])
        same(ranks, list)
        assert all(isinstance(r, int) for r in ranks)
    client.chunk_size = client.chunk_size


def producer(client: sat.Client) -> None:
    topology(client)
    chain = client.malloc(42, 64)
    assert_type(chain, sat.Chain)
    same(chain, sat.Chain)
    for n in (chain.base, chain.size, chain.nbchunks, len(chain)):
        assert_type(n, int)
        same(n, int)
    assert_type(chain.ids, list[int])
    same(chain.ids, list)
    scope = chain.write()
    assert_type(scope, sat.Scope)
    same(scope, sat.Scope)
    with scope as view:
        assert_type(view, memoryview)
        same(view, memoryview)
        same(view.obj, sat.Buffer)
        np.frombuffer(view, dtype=np.int64)[:] = np.arange(8)
    array = chain.array(np.int64, (2, 4))
    assert_type(array, npt.NDArray[Any])
    same(array, np.ndarray)
    client.put(chain, bytes(64))
    client.put(chain, bytearray(64))
    client.put(chain, memoryview(bytes(64)))
    client.put(chain, stdarray.array("B", bytes(64)))  # any object with the buffer protocol
    client.acquire(chain, "readwrite")
    client.release(chain)
    assert_type(chain.protocol, Optional[Literal["mesi", "home-only", "mesi-e", "update", "hlrc", "learned", "adaptive"]])
    same(chain.protocol, str)

    home_only = client.malloc(44, 8, protocol="home-only")
    assert_type(home_only, sat.Chain)
    assert home_only.protocol == "home-only"
    listed = client.malloc_lst([45, 46], [8, 16], protocol="mesi")
    assert_type(listed, sat.Chain)
    same(listed, sat.Chain)
    for values in (listed.sizes, listed.offsets):
        assert_type(values, list[int])
        same(values, list)
        assert all(isinstance(v, int) for v in values)
    memory = np.zeros(4, dtype=np.int64)
    mapped = client.map(47, memory, protocol="mesi")
    assert_type(mapped, sat.Chain)
    same(mapped, sat.Chain)
    with mapped.write():
        memory[:] = 1
    client.put(mapped)              # publishes what the mapped memory holds
    same(client.map(48, bytearray(8)), sat.Chain)
    same(client.map(49, memoryview(bytearray(8))), sat.Chain)

    symbols = client.symbols
    assert_type(symbols, sat.Symbols)
    same(symbols, sat.Symbols)
    symbols["bytes"] = b"abc"
    symbols["buffer"] = stdarray.array("B", b"abc")
    symbols["array"] = np.arange(3)
    assert_type(symbols.timeout, float)
    symbols.timeout = 5.0
    client.write_symbol("raw", b"raw")
    client.barrier(1, 2)
    client.rendezvous(2)            # the consumer has subscribed to the chain
    client.put(chain, bytes(range(64)))
    client.raise_signal(3)


def consumer(client: sat.Client) -> None:
    topology(client)
    events: list[sat.ChunkEvent] = []
    signals: list[int] = []

    def on_signal(signal: int) -> None:
        signals.append(signal)
        client.unsubscribe_signal(signal)

    client.subscribe_signal(3, on_signal)
    client.barrier(1, 2)
    chain = client.lookup(42, nbchunks=1, timeout=5.0)
    assert_type(chain, sat.Chain)
    looked_up = client.lookup_lst([46, 45], timeout=5.0)
    assert_type(looked_up, sat.Chain)
    same(looked_up, sat.Chain)
    assert looked_up.protocol is None and looked_up.sizes == [16, 8]

    def on_release(event: sat.ChunkEvent) -> None:
        events.append(event)
        assert_type(event.chunk, int)
        assert_type(event.version, int)
        assert_type(event.data, Union[bytes, None])
        same(event.chunk, int)
        same(event.version, int)
        same(event.data, bytes)
        client.unsubscribe(chain)
        client.wakeup(4)

    client.subscribe(chain, on_release, with_data=True)
    client.wakeup(2)
    client.rendezvous(4)            # on_release runs meanwhile, and ends it
    assert len(events) == 1
    data = client.get(chain)
    assert_type(data, bytes)
    same(data, bytes)
    with chain.read() as view:
        assert_type(view, memoryview)
        same(view, memoryview)
    with chain.read(copy=False) as view:
        # The README's way: typeshed types memoryview.obj as any buffer.
        in_place = typing.cast(sat.Buffer, view.obj).in_place
        assert_type(in_place, bool)
        same(in_place, bool)
        same(view.obj, sat.Buffer)
    raw = client.read_symbol("raw", timeout=5.0)
    assert_type(raw, bytes)
    same(raw, bytes)

    symbols = client.symbols
    value = symbols["bytes"]
    assert_type(value, Union[bytes, npt.NDArray[Any]])
    same(value, bytes)
    same(symbols["array"], np.ndarray)
    present = "array" in symbols
    assert_type(present, bool)
    same(present, bool)
    missing = symbols.get("missing")
    assert_type(missing, Union[bytes, npt.NDArray[Any], None])
    assert missing is None
    fallback = symbols.get("missing", 0, timeout=0.0)
    assert_type(fallback, Union[bytes, npt.NDArray[Any], int])
    same(fallback, int)

    other = client.malloc(43, 8)    # a subscription by chunk id
    client.subscribe(other.base, lambda event: None)
    client.unsubscribe(other.base)
    print("typed usage ran")


try:
    sat.run({1: producer, 2: consumer})
except sat.SatError as e:
    same(e, sat.SatError)
    raise
