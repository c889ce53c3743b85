"""SAT (Share Among Things) from Python: a software distributed shared memory.

A script started under ``satrun`` hands SAT its roles; every process of the run calls
``sat.run``, and each client process runs the function of its role with a ``Client``::

    import numpy as np
    import sat

    def producer(client: sat.Client) -> None:
        chain = client.malloc(42, 8 * 1024)          # MALLOC: 8 KiB from chunk 42 on
        with chain.write() as view:                  # WRITE ... RELEASE
            np.frombuffer(view, dtype=np.float64)[:] = np.arange(1024)
        client.symbols["shape"] = np.array([32, 32])  # a symbol: dtype and shape kept
        client.barrier(1, 2)

    def consumer(client: sat.Client) -> None:
        client.barrier(1, 2)
        chain = client.lookup(42)                    # LOOKUP
        with chain.read() as view:                   # READ ... RELEASE
            a = np.frombuffer(view, dtype=np.float64).reshape(client.symbols["shape"])
            print(a.sum())

    sat.run({1: producer, 2: consumer})

Scopes are zero-copy. ``with chain.read() as view`` (or ``write()``, ``readwrite()``) acquires
the chain and gives a ``memoryview`` of the chain's own local bytes: read-only in a READ scope,
writable in a WRITE or READWRITE scope, where what is written is published when the block ends;
a block that raises publishes nothing (each home keeps its version; a protected chain's scope is
released). ``numpy.frombuffer(view, dtype)`` and ``chain.array(dtype, shape)`` see
the same bytes, with no copy; the address never changes while the chain exists. A view (or array)
kept after its scope stays valid and readable, as C's ``chunk->data`` does, but it is only
current inside a scope, and what is written through it outside a write scope is never published
(and the next acquire that fetches data overwrites it). numpy is imported only by the calls that
need it (``Chain.array``, storing or reading an array symbol).

Chains have more ways in, as in C: ``client.malloc(base, size, protocol="home-only")`` chooses the
consistency protocol (``"mesi"``, home-based MESI, is the default; ``chain.protocol`` tells it),
``client.malloc_lst(ids, sizes)`` and ``client.lookup_lst(ids)`` lay chunks out in the order of
``ids`` (``chain.offsets``), and ``client.map(base, array)`` makes a writable, C-contiguous buffer
of the caller's (a numpy array, a bytearray) the chain's own bytes: written inside a write scope, it
is published at the release; a read scope fills it in place::

    a = np.zeros(1024)
    chain = client.map(7, a)
    with chain.write():
        a[:] = np.arange(1024)

``client.symbols`` is the table of symbols, read and written by name with a dict's syntax (not a
``Mapping``: the S-DSM keeps no list of names to iterate): ``symbols[name] = b"..."`` or a numpy
array (stored as .npy, so its dtype and shape come back), ``symbols[name]`` waits up to
``symbols.timeout`` seconds for a writer, ``name in symbols`` and ``symbols.get(name)`` do not
wait.

``client.subscribe(chain, callback, with_data=False)`` runs ``callback(event)`` after write
releases of any chunk of the chain (``event.chunk`` names it, ``event.data`` holds that chunk's
bytes with ``with_data``); each chain is a subscription of its own, even one that starts at the same
chunk as another. ``client.subscribe_signal(id, callback)`` and
``client.raise_signal(id)`` do the same without a chunk. Callbacks run on the role's thread
while it waits in ``barrier``, ``rendezvous`` or a symbol read, and after the role function
returns; notifications that wait for their callback merge into the newest (per chunk, and per
chain whichever chunk they are of). A chunk's events never go back to an older version, and a
process is told of a version no later than it reads it (a read that finds a version not yet
notified queues its event). An
exception in a callback propagates out of the blocking call that ran it, or, after the role
function, makes ``sat.run`` raise ``RoleError`` from it.

A process can also attach to a running service (``satrun --serve``) instead of joining a run, from
a notebook or any script, and detach when done; what it wrote stays for those that attach later::

    # satrun --serve --address-file /tmp/sat.address wrote its one line, sat://SECRET@host:port
    with sat.connect(open("/tmp/sat.address").read().strip()) as client:   # detaches at the end
        chain = client.malloc(100, a.nbytes)
        with chain.write():
            chain.array(a.dtype, a.shape)[:] = a

``client.detach()`` does the same without a block; a client still attached when the interpreter
exits is detached then.

Protected data (``sat.HAS_ABE``, docs/ENCRYPTION.md): ``client.malloc(base, size,
read_policy=..., write_policy=...)`` makes a chain whose bytes here are plaintext and whose chunks
the S-DSM keeps sealed; a LOOKUP of one gives a protected chain too. Each client's tenant key comes
from ``client.load_key(path)`` or, at its first protected call, ``SAT_ABE_KEY``: two clients of one
process may be two tenants. Another tenant's data raises ``AccessDenied``, a damaged or forged
version ``IntegrityError``.

Every call that can block releases the GIL. Errors are ``SatError`` subclasses. A ``Client``
or ``Chain`` used in a ``fork()`` child raises ``UsageError``: the child must join SAT itself.
"""

import os as _os

# libfabric's psm provider loads libinfinipath, whose constructor replaces the
# handlers of SIGINT, SIGTERM and the crash signals with its own, which print
# a backtrace and exit(1): Ctrl-C would end the interpreter instead of raising
# KeyboardInterrupt. These variables, read by that constructor when ``_sat``
# loads libfabric just below, keep the handlers the interpreter has (satrun
# sets them for its processes, as Open MPI does).
for _var in ("IPATH_NO_BACKTRACE", "HFI_NO_BACKTRACE"):
    _os.environ.setdefault(_var, "1")
del _var

from ._sat import (  # noqa: E402 (after the variables above)
    HAS_ABE,
    AbortedError,
    AccessDenied,
    BootstrapError,
    Buffer,
    Chain,
    ChunkError,
    ChunkEvent,
    Client,
    IntegrityError,
    ProcessLostError,
    RoleError,
    SatError,
    Scope,
    Symbols,
    TimeoutError,
    TopologyError,
    TransportError,
    UsageError,
    __version__,
    connect,
    run,
)


__all__ = [
    "HAS_ABE",
    "AbortedError",
    "AccessDenied",
    "BootstrapError",
    "Buffer",
    "Chain",
    "ChunkError",
    "ChunkEvent",
    "Client",
    "IntegrityError",
    "ProcessLostError",
    "RoleError",
    "SatError",
    "Scope",
    "Symbols",
    "TimeoutError",
    "TopologyError",
    "TransportError",
    "UsageError",
    "__version__",
    "connect",
    "run",
]
