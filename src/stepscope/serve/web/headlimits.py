"""Bounds on a request's head (request line and header fields) for ``stepscope serve``, with either HTTP/1.1 parser
uvicorn runs: httptools (llhttp, uvicorn's choice when installed) or h11.

As uvicorn serves them neither is bounded: httptools takes any size and any number of fields, and h11's
``max_incomplete_event_size`` covers only a head not complete yet (a complete 1 MiB head in the buffer passes),
answered 400. Here, as common servers do (Apache: ``LimitRequestFields`` 100; nginx: 4 x 8 KiB header buffers;
Node.js: 16 KiB; Go's net/http: 1 MiB), a head is at most ``MAX_HEAD_BYTES`` (64 KiB) of request line and header
fields, and at most ``MAX_HEADER_FIELDS`` (100) fields; past either the request is answered
``431 Request Header Fields Too Large`` (RFC 6585, section 5) with ``Connection: close`` before the app sees it.

Counted as the head arrives, never after it: bytes of a head still open when a read ends (the read's every byte:
one read, up to 256 KiB, may be buffered past the bound: httptools' ``data_received``, h11's incomplete event); a head
that ends within a read by what the parser gives (the target + 16 for the method, version and separators; each
field's name and value + 4 for ": " and CRLF; httptools' ``on_url``/``on_header``, h11's ``Request``), so a slow
client crossing the bound a byte at a time and a fast one sending 1 MiB at once are refused alike. Nothing is added
once the head is complete (the body and the app run as uvicorn runs them).

After the 431 the server half-closes and reads and drops what the client still sends, for at most ``LINGER_S``
(as Apache's and nginx's "lingering close"): a close with unread data would send a reset, and the client, still
writing its oversized head, would see "connection reset" rather than the answer.
"""

from __future__ import annotations

import asyncio

import h11
import httptools
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Request line and header fields of one request, at most (bytes, counted as the module doc says).
MAX_HEAD_BYTES = 64 * 1024
#: Header fields of one request, at most.
MAX_HEADER_FIELDS = 100
#: After a 431: how long (s) what the client still sends is read and dropped before the connection is closed.
LINGER_S = 2.0
#: The request line's bytes besides its target ("POST " and " HTTP/1.1\r\n").
REQUEST_LINE_BYTES = 16

_REASON = (f"request line and header fields over {MAX_HEAD_BYTES} bytes or over {MAX_HEADER_FIELDS} fields\n").encode()


class HeadTooLarge(Exception):
    """A request's head past ``MAX_HEAD_BYTES`` or ``MAX_HEADER_FIELDS``."""


def refuse(proto) -> None:
    """Answer 431 on ``proto``'s connection, half-close it, drop what comes for ``LINGER_S``, then close it;
    ``proto._refused`` makes its ``data_received`` drop everything from now on."""
    proto._refused = True
    t: asyncio.Transport = proto.transport
    head = [b"HTTP/1.1 431 Request Header Fields Too Large\r\n"]
    for name, value in proto.server_state.default_headers:  # (uvicorn's: date, server when enabled)
        head += [name, b": ", value, b"\r\n"]
    head.append(b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                % len(_REASON))
    t.write(b"".join(head) + _REASON)
    if t.can_write_eof():
        t.write_eof()
        t.resume_reading()  # (when flow control paused it: unread data would make the close a reset)
        proto.loop.call_later(LINGER_S, t.close)  # (the client's own close ends it sooner: eof_received)
    else:  # (TLS: no half-close)
        t.close()


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head bounded (module doc)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_open = False  # a request's head has begun and not ended
        self._head_read = 0  # its bytes in reads that ended before it did
        self._head_size = 0  # its bytes as the parser gave them (module doc)
        self._head_fields = 0
        self._over = False  # a parser callback found the head over a bound (and stopped the parser)
        self._refused = False

    def data_received(self, data: bytes) -> None:
        # uvicorn's, with the parser's error for a head over a bound answered 431, and the bytes of an open head counted
        if self._refused:
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._over:
                return refuse(self)
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._head_open:
            self._head_read += len(data)
            if self._head_read > MAX_HEAD_BYTES:
                refuse(self)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open = True
        self._head_read = 0
        self._head_size = REQUEST_LINE_BYTES
        self._head_fields = 0

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        if self._head_size > MAX_HEAD_BYTES:
            self._over = True
            raise HeadTooLarge  # (the parser stops: HttpParserCallbackError from feed_data)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        self._head_fields += 1
        if self._head_size > MAX_HEAD_BYTES or self._head_fields > MAX_HEADER_FIELDS:
            self._over = True
            raise HeadTooLarge
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_open = False
        super().on_headers_complete()


class _BoundedConnection(h11.Connection):
    """h11's server side, raising HeadTooLarge for a request whose complete head is over a bound and for an
    incomplete head past ``MAX_HEAD_BYTES`` (h11's own check, which hints 431)."""

    def __init__(self) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)

    def next_event(self):
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as e:
            if e.error_status_hint == 431:  # (h11: "Receive buffer too long")
                raise HeadTooLarge from None
            raise
        if type(event) is h11.Request:
            fields = event.headers
            if len(fields) > MAX_HEADER_FIELDS or (len(event.target) + REQUEST_LINE_BYTES + 4 * len(fields)
                                                   + sum(len(n) + len(v) for n, v in fields)) > MAX_HEAD_BYTES:
                raise HeadTooLarge
        return event


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the head bounded (module doc)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _BoundedConnection()
        self._refused = False

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def handle_events(self) -> None:
        try:
            super().handle_events()
        except HeadTooLarge:  # (before the app was started for it)
            refuse(self)

    def shutdown(self) -> None:
        if self._refused:  # (h11 never sent the 431: its state refuses a ConnectionClosed)
            self.transport.close()
        else:
            super().shutdown()


PROTOCOLS = {"httptools": BoundedHttpToolsProtocol, "h11": BoundedH11Protocol}


def protocol(kind: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's ``http=`` for ``kind``: "httptools", "h11", or "auto" (httptools, uvicorn's own choice when it is
    installed: a dependency of stepscope). Raises ValueError naming the choices for another."""
    kind = (kind or "auto").strip().lower()
    if kind == "auto":
        kind = "httptools"
    if kind not in PROTOCOLS:
        raise ValueError(f"STEPSCOPE_HTTP: expected auto, httptools or h11, got {kind!r}")
    return PROTOCOLS[kind]
