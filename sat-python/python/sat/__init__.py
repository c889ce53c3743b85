"""SAT (Share Among Things) from Python: a software distributed shared memory.

A script started under ``satrun`` hands SAT its roles::

    import sat

    def producer(client: sat.Client) -> None:
        chain = client.malloc(42, 5)
        with chain.write() as buf:      # a bytearray, copied into the chain at exit
            buf[:] = b"hello"
        client.barrier(1, 2)

    def consumer(client: sat.Client) -> None:
        client.barrier(1, 2)
        chain = client.lookup(42)
        with chain.read() as data:      # a bytes copy of the chain's data
            assert data == b"hello"

    sat.run({1: producer, 2: consumer})

Every call that can block releases the GIL. Scopes copy the data in and out
in this version; zero-copy numpy views come later.
"""

from ._sat import (
    AbortedError,
    BootstrapError,
    Chain,
    ChunkError,
    Client,
    RoleError,
    SatError,
    Scope,
    TimeoutError,
    TopologyError,
    TransportError,
    UsageError,
    __version__,
    run,
)

__all__ = [
    "AbortedError",
    "BootstrapError",
    "Chain",
    "ChunkError",
    "Client",
    "RoleError",
    "SatError",
    "Scope",
    "TimeoutError",
    "TopologyError",
    "TransportError",
    "UsageError",
    "__version__",
    "run",
]
