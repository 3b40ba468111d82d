"""Profile blocks: a run's frames or stacks, many in one SQLite row (store schema 5; stdlib only).

Why: an ingested Sentry profile brings ~60 frames and ~40 stacks; as rows of ``frames`` and ``stacks`` (a B-tree
entry each, keyed by the run id's text) they took ~0.24 ms of the ingest writer's ~0.9 ms an envelope; as two rows
of ``profile_blocks`` ~0.03 ms. The recorder of ``stepscope run`` still writes rows (a few new frames per flush),
and readers read both (``frames``, ``stacks``), ordered by index.

A row: ``(run_id, kind, first_idx, body)``; ``kind`` is ``"frames"`` or ``"stacks"``, ``first_idx`` the index of
the block's first item (the items after it follow in order), ``body`` JSON text (UTF-8) of a list: frames as
``[function, module, file, line]``, stacks as the ``stacks.frames`` text (frame indices root first, joined by
commas).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Callable


class BlockError(ValueError):
    """A block body that is not a JSON list of this layout (the message says what is wrong)."""


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def insert(conn: sqlite3.Connection, run_id: str, kind: str, first_idx: int, items: list,
           dumps: Callable[[object], str | bytes] = _dumps) -> None:
    """One block of ``items`` (frames as ``(function, module, file, line)``, or stack texts) of ``kind``
    (``"frames"``/``"stacks"``) from index ``first_idx``. ``dumps``: any function giving JSON (orjson's too)."""
    if items:
        body = dumps(items)
        conn.execute("INSERT INTO profile_blocks VALUES (?,?,?,?)",
                     (run_id, kind, first_idx, body.encode() if isinstance(body, str) else body))


def _blocks(conn: sqlite3.Connection, run_id: str, kind: str) -> list[tuple[int, list]]:
    out = []
    for first, body in conn.execute("SELECT first_idx, body FROM profile_blocks WHERE run_id = ? AND kind = ? "
                                    "ORDER BY first_idx", (run_id, kind)):
        try:
            items = json.loads(body)
        except (ValueError, TypeError) as e:
            raise BlockError(f"a {kind} block is not JSON ({e})") from None
        if not isinstance(items, list):
            raise BlockError(f"a {kind} block is not a list")
        out.append((first, items))
    return out


def frames(conn: sqlite3.Connection, run_id: str) -> list[tuple]:
    """A run's frames as ``(function, module, file, line)`` in index order, from rows and blocks."""
    rows = [(r[0], tuple(r[1:])) for r in conn.execute(
        "SELECT idx, function, module, file, line FROM frames WHERE run_id = ? ORDER BY idx", (run_id,))]
    blocks = _blocks(conn, run_id, "frames")
    if not blocks:
        return [r[1] for r in rows]
    for first, items in blocks:
        for k, f in enumerate(items):
            if not isinstance(f, list) or len(f) != 4:
                raise BlockError("a frames block holds an item that is not [function, module, file, line]")
            rows.append((first + k, tuple(f)))
    rows.sort(key=lambda r: r[0])
    return [r[1] for r in rows]


def stacks(conn: sqlite3.Connection, run_id: str) -> list[str]:
    """A run's stacks as their text (frame indices root first, joined by commas) in index order, from rows and
    blocks."""
    rows = [(r[0], r[1]) for r in conn.execute("SELECT idx, frames FROM stacks WHERE run_id = ? ORDER BY idx",
                                               (run_id,))]
    blocks = _blocks(conn, run_id, "stacks")
    if not blocks:
        return [r[1] for r in rows]
    for first, items in blocks:
        if not all(isinstance(s, str) for s in items):
            raise BlockError("a stacks block holds an item that is not a stack's text")
        rows.extend((first + k, s) for k, s in enumerate(items))
    rows.sort(key=lambda r: r[0])
    return [r[1] for r in rows]


def parse_stack(text: str | None) -> tuple[int, ...]:
    """A stack's text -> frame indices, root first."""
    return tuple(int(x) for x in text.split(",")) if text else ()
