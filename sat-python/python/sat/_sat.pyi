"""Type stubs of the Rust extension ``sat._sat``."""

import builtins
import sys
from _typeshed import ReadableBuffer, WriteableBuffer
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Optional, TypeVar, Union, final, overload

import numpy
import numpy.typing

__all__ = [
    "HAS_ABE",
    "SatError",
    "UsageError",
    "ChunkError",
    "TopologyError",
    "TransportError",
    "BootstrapError",
    "AbortedError",
    "RoleError",
    "TimeoutError",
    "AccessDenied",
    "IntegrityError",
    "ProcessLostError",
    "Client",
    "Chain",
    "Scope",
    "Buffer",
    "Symbols",
    "ChunkEvent",
    "run",
    "connect",
    "__version__",
]

__version__: str
HAS_ABE: bool

class SatError(Exception): ...
class UsageError(SatError): ...
class ChunkError(SatError): ...
class TopologyError(SatError): ...
class TransportError(SatError): ...
class BootstrapError(SatError): ...
class AbortedError(SatError): ...
class RoleError(SatError): ...
class TimeoutError(SatError): ...
class AccessDenied(SatError): ...
class IntegrityError(SatError): ...
class ProcessLostError(SatError):
    """A run with recovery (``satrun --enable-recovery``) lost a process that a barrier round
    may count on; the call did not count: call it again with the count of the processes left.
    A rendezvous waiting at the loss, or the first after it, raises it too (its wakeup may have
    been the lost process's to send): call it again if another process will wake it.
    Also a call a lost server took with it, in a run with replicated homes: call it again (a
    release so failed may or may not have published: read the chunk to know; the release of a
    chain so failed publishes all its chunks or none, whatever servers their homes are on)."""

# Any object with the buffer protocol (bytes, bytearray, memoryview, array.array, mmap...).
_BytesLike = ReadableBuffer
_Protocol = Literal["mesi", "home-only", "mesi-e", "update", "hlrc", "learned", "adaptive"]
# What MAP takes: numpy's stubs declare ndarray.__buffer__ from Python 3.12 on only, so arrays are
# named besides buffers (read-only and non-contiguous ones are refused at run time).
_Mappable = Union[WriteableBuffer, numpy.typing.NDArray[Any]]
_T = TypeVar("_T")

@final
class Buffer:
    """The bytes of a chain as the buffer protocol exports them (``memoryview(buffer)``): the ``obj``
    of a scope's view. typeshed types ``memoryview.obj`` as any buffer, so a typed program reaches
    this one with ``typing.cast(sat.Buffer, view.obj)``."""

    @property
    def chain(self) -> Chain: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def in_place(self) -> bool:
        """True when the bytes are the home's version itself (``Chain.read(copy=False)``)."""
    def __len__(self) -> int: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class Scope:
    def __enter__(self) -> memoryview: ...
    def __exit__(
        self,
        exc_type: Optional[type[builtins.BaseException]],
        exc: Optional[builtins.BaseException],
        tb: Optional[TracebackType],
        /,
    ) -> bool: ...

@final
class Chain:
    @property
    def base(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def nbchunks(self) -> int: ...
    @property
    def ids(self) -> list[int]: ...
    @property
    def sizes(self) -> list[int]: ...
    @property
    def offsets(self) -> list[int]: ...
    @property
    def protocol(self) -> Optional[_Protocol]: ...
    @property
    def protected(self) -> bool: ...
    def __len__(self) -> int: ...
    def read(self, copy: bool = True) -> Scope:
        """A READ scope; with ``copy=False``, on a one-chunk chain whose version is in shared memory
        on this host, the view is that version itself (no copy into the chain's own bytes), released
        when the scope ends; elsewhere the usual READ. ``typing.cast(sat.Buffer, view.obj).in_place``
        tells which."""
    def write(self) -> Scope: ...
    def readwrite(self) -> Scope: ...
    def free(self) -> None:
        """FREE: gives the chain back in this process; the Chain is no longer valid (UsageError), its
        chunks stay in the S-DSM (``malloc`` or ``lookup`` them again for a new Chain). Its memory goes
        back to the system at once, or with the last array or view made from it."""
    def array(
        self,
        dtype: Optional[numpy.typing.DTypeLike] = None,
        shape: Union[int, Sequence[int], None] = None,
    ) -> numpy.typing.NDArray[Any]: ...

@final
class ChunkEvent:
    """A release told to a subscription: ``chunk`` is the chunk released (for a chain's
    subscription, the chain's chunk whose release this is, the latest when notifications merged),
    ``version`` that chunk's version, ``data`` that chunk's bytes with ``with_data``, else None."""

    @property
    def chunk(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def data(self) -> Optional[bytes]: ...

@final
class Symbols:
    """The table of symbols, read and written by name with a dict's syntax: ``symbols[name]``,
    ``symbols[name] = value``, ``name in symbols``, ``symbols.get(name)``; ``del symbols[name]``
    raises UsageError (the S-DSM has no FREE). Not a Mapping: the S-DSM keeps no list of the names
    written, so the symbols cannot be listed (iterating raises TypeError)."""

    timeout: float
    def __getitem__(self, name: str, /) -> Union[bytes, numpy.typing.NDArray[Any]]: ...
    def __setitem__(
        self, name: str, value: Union[_BytesLike, numpy.typing.NDArray[Any]], /
    ) -> None: ...
    def protect(
        self,
        name: str,
        value: Union[_BytesLike, numpy.typing.NDArray[Any]],
        *,
        read_policy: str,
        write_policy: str,
    ) -> None: ...
    def __contains__(self, name: str, /) -> bool: ...
    @overload
    def get(
        self, name: str, default: None = None, timeout: float = 0.0
    ) -> Union[bytes, numpy.typing.NDArray[Any], None]: ...
    @overload
    def get(
        self, name: str, default: _T, timeout: float = 0.0
    ) -> Union[bytes, numpy.typing.NDArray[Any], _T]: ...

@final
class Client:
    def detach(self) -> None: ...
    def __enter__(self) -> Client: ...
    def __exit__(
        self,
        exc_type: Optional[type[builtins.BaseException]],
        exc: Optional[builtins.BaseException],
        tb: Optional[TracebackType],
        /,
    ) -> bool: ...
    @property
    def rank(self) -> int: ...
    @property
    def role(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def client_count(self) -> int: ...
    @property
    def server_count(self) -> int: ...
    @property
    def server(self) -> int: ...
    @property
    def servers(self) -> list[int]: ...
    @property
    def clients(self) -> list[int]: ...
    @property
    def roles(self) -> list[int]: ...
    chunk_size: int
    @property
    def symbols(self) -> Symbols: ...
    def malloc(
        self,
        base: int,
        size: int,
        protocol: _Protocol = "mesi",
        *,
        read_policy: Optional[str] = None,
        write_policy: Optional[str] = None,
    ) -> Chain: ...
    def malloc_lst(
        self,
        ids: Sequence[int],
        sizes: Sequence[int],
        protocol: _Protocol = "mesi",
        *,
        read_policy: Optional[str] = None,
        write_policy: Optional[str] = None,
    ) -> Chain: ...
    def load_key(self, path: str) -> None:
        """Loads the tenant key file ``path`` for this client (else ``SAT_ABE_KEY`` at the first
        protected call). Loading again replaces the key and takes ``SAT_ABE_CRL`` again; what was
        decrypted before is checked again under the new key and list."""
    def new_epoch(self, chain: Chain, read_policy: Optional[str] = None) -> None: ...
    def map(self, base: int, buffer: _Mappable, protocol: _Protocol = "mesi") -> Chain: ...
    def lookup(self, base: int, nbchunks: int = 1, timeout: float = 10.0) -> Chain: ...
    def lookup_lst(self, ids: Sequence[int], timeout: float = 10.0) -> Chain: ...
    def acquire(self, chain: Chain, access: Literal["read", "write", "readwrite"]) -> None: ...
    def release(self, chain: Chain) -> None: ...
    def put(
        self, chain: Chain, data: Union[_BytesLike, numpy.typing.NDArray[Any], None] = None
    ) -> None:
        """A WRITE scope publishing ``data`` (the chain's size, read where it is): into the
        version's shared memory at once where the homes keep it on this host."""
    def get(self, chain: Chain) -> bytes: ...
    def barrier(self, id: int, count: int) -> None: ...
    def rendezvous(self, id: int) -> None: ...
    def wakeup(self, id: int) -> None: ...
    def write_symbol(
        self,
        name: str,
        data: _BytesLike,
        *,
        read_policy: Optional[str] = None,
        write_policy: Optional[str] = None,
    ) -> None: ...
    def read_symbol(self, name: str, timeout: float = 10.0) -> bytes: ...
    def subscribe(
        self,
        target: Union[Chain, int],
        callback: Callable[[ChunkEvent], object],
        with_data: bool = False,
    ) -> None:
        """Runs ``callback`` after every write release of the chunk id, or of any chunk of the
        chain; each chain (and each chunk id) is a subscription of its own. ``with_data`` on a
        protected chain, or a chunk of one, raises UsageError: its bytes are sealed; READ the chain
        in the callback instead."""
    def unsubscribe(self, target: Union[Chain, int]) -> None:
        """Ends the subscription of that chain (or chunk id), and only that one: its callback does not
        run again. Called from another thread while that callback runs, it returns once the run ended."""
    def subscribe_signal(self, id: int, callback: Callable[[int], object]) -> None: ...
    def unsubscribe_signal(self, id: int) -> None: ...
    def raise_signal(self, id: int) -> None: ...
    def run_handlers(self) -> int:
        """Runs, now, the callbacks of the notifications and signals that have arrived, and
        returns how many ran (0: none was waiting); never waits. Callbacks otherwise run only
        while this client waits (``barrier``, ``rendezvous``) and after a role returns. Only on
        the client's own thread, not from a callback: elsewhere UsageError. Callbacks run on the
        calling thread: call it outside scopes on what they read."""

def run(
    roles: Mapping[int, Callable[[Client], object]], args: Optional[Sequence[str]] = None
) -> None:
    """Bootstraps this process into the run and plays its role: ``roles`` maps each client role
    id (1 and above) to a function taking a ``Client``. A failing role function or callback makes
    it raise RoleError, whose ``__cause__`` is the Python exception. A process joins one run: a
    second call, or one from inside a role, raises UsageError."""
def connect(address: str) -> Client:
    """Attaches this process to the SAT service whose connection string is ``address``:
    ``"sat://SECRET@host:port"``, the one line of the address file ``satrun --serve`` writes, or
    ``"host:port"`` with the secret in ``SAT_SECRET``. Raises BootstrapError when the service cannot
    be reached, refuses the secret or has no free slot."""
