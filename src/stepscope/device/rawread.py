"""A trace file's bytes, gunzipped, with the standard library only: what ``stepscope device`` starts reading in a
thread of its own before it imports numpy and the analyses (zlib lets go of the GIL while it inflates, so the file
is read while the imports run), and what ``device.kineto.load`` parses."""

from __future__ import annotations

import gzip
import threading
import zlib
from pathlib import Path


class TraceError(ValueError):
    """A file that is not a readable Kineto/Chrome trace (the message names the file and what is wrong)."""


def read(path: str | Path) -> bytes:
    """A trace file's JSON bytes (gunzipped when gzipped). Raises TraceError (one line naming the file)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gunzip(raw)
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(f"{p}: cannot read ({e})") from None
    return raw


def gunzip(data: bytes) -> bytes:
    """The gzip file ``data`` decompressed into one buffer of its final size (its trailer's ISIZE, RFC 1952), not
    grown and copied: the peak is the output once. Several members, or a size past 4 GiB: ``gzip.decompress``."""
    size = int.from_bytes(data[-4:], "little")
    try:
        out = zlib.decompress(data, 31, max(size, 1))
    except zlib.error:
        return gzip.decompress(data)  # raises the usual errors
    if len(out) % (1 << 32) != size:
        return gzip.decompress(data)
    return out


class Prefetch:
    """``read(path)`` started now in a daemon thread; ``result()`` waits for it and returns the bytes, or raises
    what ``read`` raised (TraceError), in the caller's thread."""

    def __init__(self, path: Path) -> None:
        self._out: list = []
        self._thread = threading.Thread(target=self._run, args=(path,), name="stepscope-read", daemon=True)
        self._thread.start()

    def _run(self, path: Path) -> None:
        try:
            self._out.append(read(path))
        except BaseException as e:  # (handed to the caller)
            self._out.append(e)

    def result(self) -> bytes:
        self._thread.join()
        got = self._out.pop()
        if isinstance(got, BaseException):
            raise got
        return got
