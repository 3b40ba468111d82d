"""What counts as this machine only: for binding (warn otherwise), ``Host`` headers (no DNS rebinding) and
``Origin`` headers (no cross-site writes in open mode). Stdlib only: the CLI imports it at start."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (``localhost``, or an IPv4/IPv6 address, brackets allowed) is this machine only."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def local_origin(origin: str | None) -> bool:
    """No ``Origin`` header (not a browser), or a loopback one."""
    if not origin:
        return True
    try:
        return is_loopback(urlsplit(origin).hostname)
    except ValueError:
        return False
