"""Sentry envelopes (https://develop.sentry.dev/sdk/data-model/envelopes/): a JSON header line, then
items, each a JSON header line (``type`` required, ``length`` optional) and a payload of ``length``
bytes, or up to the next newline when ``length`` is absent."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

MAX_ITEMS = 10_000


class EnvelopeError(Exception):
    """A malformed envelope (HTTP 400). The message says where: header, item N, field."""


@dataclass(slots=True)
class Item:
    """One item: its header (``type``, ``length``, ...) and raw payload bytes."""

    headers: dict
    payload: bytes

    @property
    def type(self) -> str:
        """The item type (``transaction``, ``profile``, ``profile_chunk``, ``attachment``...)."""
        return self.headers["type"]

    def json(self, what: str) -> dict:
        """The payload as a JSON object; ``what`` names the item in the error."""
        try:
            doc = orjson.loads(self.payload)
        except orjson.JSONDecodeError as e:
            raise EnvelopeError(f"{what}: payload is not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise EnvelopeError(f"{what}: payload is not a JSON object")
        return doc


@dataclass(slots=True)
class Envelope:
    """Envelope headers (``event_id``, ``dsn``, ``sent_at``, ``trace``, ...) and its items in order."""

    headers: dict
    items: list[Item]


def _line(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.find(b"\n", pos)
    if end < 0:
        return data[pos:], len(data)
    return data[pos:end], end + 1


def _header(line: bytes, what: str) -> dict:
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise EnvelopeError(f"{what}: header is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise EnvelopeError(f"{what}: header is not a JSON object")
    return doc


def parse(data: bytes) -> Envelope:
    """Split an envelope. Raises EnvelopeError naming the part that is malformed."""
    if not data.strip():
        raise EnvelopeError("empty envelope")
    line, pos = _line(data, 0)
    headers = _header(line, "envelope")
    items: list[Item] = []
    n = len(data)
    while pos < n:
        line, nxt = _line(data, pos)
        if not line.strip():  # blank lines between or after items
            pos = nxt
            continue
        what = f"item {len(items) + 1}"
        h = _header(line, what)
        t = h.get("type")
        if not isinstance(t, str) or not t:
            raise EnvelopeError(f"{what}: header has no 'type'")
        what = f"item {len(items) + 1} ({t})"
        length = h.get("length")
        if length is not None:
            if not isinstance(length, int) or isinstance(length, bool) or length < 0:
                raise EnvelopeError(f"{what}: 'length' is not a non-negative integer")
            if nxt + length > n:
                raise EnvelopeError(f"{what}: length {length} runs past the end of the envelope "
                                    f"({n - nxt} bytes left)")
            payload = data[nxt:nxt + length]
            pos = nxt + length
            if pos < n and data[pos:pos + 1] == b"\n":
                pos += 1
        else:
            payload, pos = _line(data, nxt)
            if nxt >= n:
                payload = b""
        items.append(Item(h, payload))
        if len(items) > MAX_ITEMS:
            raise EnvelopeError(f"more than {MAX_ITEMS} items")
    return Envelope(headers, items)
