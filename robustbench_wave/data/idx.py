"""The idx file format of (Fashion-)MNIST (LeCun et al.): parser and checked reader.

Two zero bytes, a dtype code, the number of dimensions, big-endian uint32 sizes, then the data. Files may
be gzipped; the sha256 is checked on the decompressed payload so re-compressed copies (as Debian ships
them) still verify.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from robustbench_wave.data.base import DataError
from robustbench_wave.data.download import verify_sha256

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_GZIP_MAGIC = b"\x1f\x8b"


def parse_idx(data: bytes, *, source: str = "idx data") -> np.ndarray:
    """Parse the idx format of (Fashion-)MNIST: 2 zero bytes, dtype code, ndim, big-endian uint32 dims, data.

    Raises :class:`DataError` naming ``source`` when the header is invalid or the size does not match it.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES or data[3] == 0:
        raise DataError(f"{source}: not an idx file (bad magic number {data[:4].hex() or 'empty'})")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{source}: idx header truncated ({len(data)} bytes, {ndim} dims announced)")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    expected = header + math.prod(dims) * dtype.itemsize
    if len(data) != expected:
        raise DataError(
            f"{source}: idx header announces shape {dims} ({expected} bytes) but the file holds "
            f"{len(data)} bytes; it is truncated or corrupt"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=False)


def read_idx(path: str | os.PathLike, *, sha256: str | None = None) -> np.ndarray:
    """Read a (possibly gzipped) idx file, checking the sha256 of the decompressed payload when given."""
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt gzip file ({exc}); delete it and fetch it again") from None
    if sha256 is not None:
        verify_sha256(raw, sha256, path)
    return parse_idx(raw, source=str(path))
