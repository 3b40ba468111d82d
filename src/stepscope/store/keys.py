"""Project keys for the ingest endpoint: the ``sentry_key`` (public key) of a DSN
``http://<key>@host:port/<project id>``, one row per key, in the run store."""

from __future__ import annotations

import secrets
import sqlite3
import time
from dataclasses import dataclass

from .db import Store, StoreError
from .schema import KEYS as SCHEMA  # the layout lives in store/schema.py



@dataclass(slots=True)
class Key:
    """A project key: ``public_key`` (32 hex digits, Sentry's shape), ``project_id``, a label, and when it
    was made (ns since the epoch)."""

    public_key: str
    project_id: str
    label: str
    created_wall_ns: int

    def dsn(self, host: str = "127.0.0.1", port: int = 8969) -> str:
        """The DSN to give ``sentry_sdk.init(dsn=...)``: ``http://<key>@host:port/<project>``."""
        return f"http://{self.public_key}@{host}:{port}/{self.project_id}"


def ensure_schema(store: Store) -> None:
    """Create the keys table when missing."""
    store.conn.executescript(SCHEMA)


def add(store: Store, project_id: str = "1", label: str = "") -> Key:
    """Make a new key for ``project_id`` (digits, as Sentry's DSN parser requires). Raises ValueError."""
    if not project_id.isdigit():
        raise ValueError(f"project id {project_id!r} must be a number (it is the last part of the DSN)")
    ensure_schema(store)
    k = Key(secrets.token_hex(16), project_id, label, time.time_ns())
    store.conn.execute("INSERT INTO project_keys VALUES (?,?,?,?)", (k.public_key, k.project_id, k.label, k.created_wall_ns))
    return k


def list_keys(store: Store) -> list[Key]:
    """Every key, oldest first (creates the table when missing)."""
    ensure_schema(store)
    return [Key(*r) for r in store.conn.execute(
        "SELECT public_key, project_id, label, created_wall_ns FROM project_keys ORDER BY created_wall_ns")]


def remove(store: Store, ref: str) -> Key:
    """Delete the key ``ref`` (the key or a unique prefix of at least 4 digits). Raises StoreError."""
    ensure_schema(store)
    if len(ref) < 4:
        raise StoreError(f"key {ref!r}: give at least 4 characters")
    rows = [Key(*r) for r in store.conn.execute(
        "SELECT public_key, project_id, label, created_wall_ns FROM project_keys WHERE public_key LIKE ? || '%'", (ref,))]
    if len(rows) != 1:
        raise StoreError(f"no single key matches {ref!r} in store {store.path}" if not rows else f"key {ref!r} is ambiguous")
    store.conn.execute("DELETE FROM project_keys WHERE public_key = ?", (rows[0].public_key,))
    return rows[0]


def project_of(store: Store, public_key: str) -> str | None:
    """The project id of a key, or None for an unknown key."""
    try:  # no CREATE per request: this is on the ingest path
        row = store.conn.execute("SELECT project_id FROM project_keys WHERE public_key = ?", (public_key,)).fetchone()
    except sqlite3.OperationalError:  # no keys table yet
        return None
    return row[0] if row else None
