"""How ``client.symbols`` stores a value: bytes as they are, a numpy array in the .npy format.

A symbol's value is bytes to SAT. An array is stored as numpy's own file format
(``\\x93NUMPY``, a header naming its dtype, order and shape, then its raw bytes), so any .npy
reader, in any language, reads it back: ``numpy.load(io.BytesIO(client.read_symbol(name)))``.
Bytes that start like a .npy file are refused, so that reading a value back never mistakes
bytes for an array. numpy is imported only when an array is stored or read.
"""

from __future__ import annotations

import io
import sys
from typing import Any, Union

from ._sat import UsageError

#: The first bytes of every .npy file (numpy.lib.format.MAGIC_PREFIX).
NPY_MAGIC = b"\x93NUMPY"


def encode(name: str, value: object) -> bytes:
    """The bytes stored for ``symbols[name] = value``."""
    np = sys.modules.get("numpy")
    # An ndarray exists only if numpy was imported: no need to import it here.
    if np is not None and isinstance(value, np.ndarray):
        return _encode_array(np, name, value)
    if isinstance(value, str):
        raise TypeError(
            f"symbols[{name!r}] = a str: give bytes (value.encode()), a bytes-like object or "
            "a numpy array"
        )
    try:
        # An int would be accepted by bytes() as a length: only buffers are taken.
        view = memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"symbols[{name!r}] = a value of type {type(value).__name__}: give bytes, a "
            "bytes-like object or a numpy array"
        ) from None
    data = view.tobytes()
    if data.startswith(NPY_MAGIC):
        raise UsageError(
            f"symbols[{name!r}] = bytes that start like a numpy .npy file, which reading the "
            "symbol back would turn into an array: store them with client.write_symbol and "
            "read them with client.read_symbol, which take bytes as they are"
        )
    return data


def _encode_array(np: Any, name: str, value: Any) -> bytes:
    if value.dtype.hasobject:
        raise TypeError(
            f"symbols[{name!r}] = an array of dtype {value.dtype}, which holds Python objects: "
            "SAT stores raw bytes only (objects would need pickle); store numbers or bytes"
        )
    if not (value.flags.c_contiguous or value.flags.f_contiguous):
        raise ValueError(
            f"symbols[{name!r}] = an array that is not contiguous in memory (a strided view "
            "or slice): store a contiguous copy, numpy.ascontiguousarray(value)"
        )
    out = io.BytesIO()
    np.lib.format.write_array(out, value, allow_pickle=False)
    return out.getvalue()


def decode(name: str, data: bytes) -> Union[bytes, Any]:
    """What ``symbols[name]`` returns for the stored bytes: an array for a .npy value."""
    if not data.startswith(NPY_MAGIC):
        return data
    try:
        import numpy as np
    except ImportError as e:
        raise ImportError(
            f"symbol {name!r} holds a numpy array (.npy format), and numpy cannot be "
            f"imported ({e}): install numpy, or read the raw bytes with "
            f"client.read_symbol({name!r})"
        ) from e
    try:
        # allow_pickle=False: a value from another process never runs code here.
        return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    except ValueError as e:
        raise ValueError(
            f"symbol {name!r} starts like a numpy .npy file but is not a valid one ({e}): "
            f"read its raw bytes with client.read_symbol({name!r})"
        ) from e
