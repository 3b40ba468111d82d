"""Request bodies: ``Content-Encoding`` gzip, deflate (zlib or raw) and br, decoded with a hard limit on
the output so that a decompression bomb costs at most ``limit`` bytes of memory (RFC 9110 §8.4)."""

from __future__ import annotations

import zlib

CHUNK = 64 * 1024


class BodyTooLarge(Exception):
    """The body, or what it decompresses to, is over its limit (HTTP 413). Message names the limit."""


class BadEncoding(Exception):
    """The body does not decode with its ``Content-Encoding`` (HTTP 400). Message names the encoding."""


def _inflate(d, data: bytes, out: bytearray, limit: int, name: str) -> None:
    """Feed ``data`` to the zlib decompressor ``d``, appending to ``out`` never past ``limit + 1`` bytes.
    Raises BadEncoding (corrupt or truncated stream) or BodyTooLarge."""
    try:
        out += d.decompress(data, limit + 1 - len(out))
        while d.unconsumed_tail and len(out) <= limit:
            out += d.decompress(d.unconsumed_tail, limit + 1 - len(out))
        if len(out) <= limit and not d.eof:
            out += d.flush()
    except zlib.error as e:
        raise BadEncoding(f"body is not valid {name}: {e}") from None
    if len(out) > limit:
        raise BodyTooLarge(f"body decompresses to more than {limit} bytes")
    if not d.eof:
        raise BadEncoding(f"body is not valid {name}: truncated stream")


def _zlib(data: bytes, wbits: int, limit: int, name: str) -> bytes:
    out = bytearray()
    _inflate(zlib.decompressobj(wbits), data, out, limit, name)
    return bytes(out)


def _gzip(data: bytes, limit: int) -> bytes:
    # a gzip body may hold several members (RFC 1952 §2.2); decode each in turn
    out = bytearray()
    rest = data
    while True:
        d = zlib.decompressobj(31)
        _inflate(d, rest, out, limit, "gzip")
        rest = d.unused_data
        if not rest.strip(b"\0"):
            return bytes(out)


def _deflate(data: bytes, limit: int) -> bytes:
    # "deflate" is zlib-wrapped per RFC 9110, but some clients send raw deflate: accept both
    try:
        return _zlib(data, 15, limit, "deflate")
    except BadEncoding:
        return _zlib(data, -15, limit, "deflate")


def _brotli(data: bytes, limit: int) -> bytes:
    try:
        import brotli
    except ImportError:  # pragma: no cover - brotli is a dependency
        raise BadEncoding("br bodies need the brotli package") from None
    d = brotli.Decompressor()
    out = bytearray()
    try:
        for i in range(0, max(len(data), 1), CHUNK):
            out += d.process(data[i:i + CHUNK], output_buffer_limit=limit + 1 - len(out))
            while len(out) <= limit and not d.can_accept_more_data():
                out += d.process(b"", output_buffer_limit=limit + 1 - len(out))
            if len(out) > limit:
                raise BodyTooLarge(f"body decompresses to more than {limit} bytes")
    except brotli.error as e:
        raise BadEncoding(f"body is not valid br: {e}") from None
    if not d.is_finished():
        raise BadEncoding("body is not valid br: truncated stream")
    return bytes(out)


def decode_body(data: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body after undoing ``content_encoding`` (e.g. ``"gzip"``, ``"br"``, ``"gzip, br"``: applied in
    the order listed, so undone from the last). ``limit``: most bytes any decoded stage may hold.

    Raises BadEncoding (unknown encoding, corrupt or truncated stream) or BodyTooLarge.
    """
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    for coding in reversed(codings):
        if coding in ("identity", ""):
            continue
        if coding in ("gzip", "x-gzip"):
            data = _gzip(data, limit)
        elif coding == "deflate":
            data = _deflate(data, limit)
        elif coding == "br":
            data = _brotli(data, limit)
        else:
            raise BadEncoding(f"unsupported Content-Encoding {coding!r} (gzip, deflate, br or identity)")
    if len(data) > limit:
        raise BodyTooLarge(f"body is more than {limit} bytes")
    return data
