"""How deep decoded JSON (or TOML) nests, measured without recursion; the one message for input nested too deeply.

The parsers stepscope uses stop at different depths: orjson at 1,024 levels (its ``JSONDecodeError`` says "depth
limit exceeded"); msgspec, the standard library's ``json`` and ``tomllib`` (pure Python) at Python's recursion limit
(1,000 frames less the stack in use; ``tomllib`` takes several frames a level) with a ``RecursionError``. A value that
parsed can still be too deep for what comes after it: ``str()``/``repr()`` and ``json`` recurse in C up to the same
limit, ``orjson.dumps`` refuses past 255 levels (the report's page, ``--json``, the exports). So readers of files and
envelopes turn ``RecursionError`` into one line naming the input (``TOO_DEEP``), and keep values of user input only
when ``within`` a bound far below these limits (``KEPT_DEPTH``). Stdlib only.
"""

from __future__ import annotations

#: How many levels of lists/objects a value kept from user input may nest (a trace event's ``args`` object with its
#: input shapes, a Sentry span's ``data``: 2 to 4 levels in practice; Sentry's SDK trims its data to 5:
#: ``sentry_sdk.serializer.MAX_DATABAG_DEPTH``). Far below orjson's 255 and Python's ~1,000.
KEPT_DEPTH = 16

#: The message (after the input's name) for input that a parser or a later step could not go through for its depth.
TOO_DEEP = "nested too deeply to read (lists/objects inside each other past Python's recursion limit)"


def within(value, limit: int = KEPT_DEPTH) -> bool:
    """Whether ``value`` (decoded JSON or TOML: dicts, lists, scalars) nests at most ``limit`` lists/objects deep (a
    scalar is 0 levels, ``[]`` 1, ``{"a": [1]}`` 2). Level by level, without recursion: any depth is measured, and the
    walk stops at the first level past ``limit``."""
    t = type(value)
    if t is not list and t is not dict:
        return True
    level = [value]
    depth = 1
    while level:
        if depth > limit:
            return False
        nxt = []
        for x in level:
            for y in (x.values() if type(x) is dict else x):
                t = type(y)
                if t is list or t is dict:
                    nxt.append(y)
        level = nxt
        depth += 1
    return True


def small_json(text: str | bytes, what: str):
    """``json.loads(text)`` of a small document that stepscope wrote next to a run (``device_probe.json``,
    ``compile_report.json``, ``xla_metrics.json``) but which anything may have changed since. Raises ValueError with
    one line that starts with ``what`` (the file): not JSON, or nested past ``KEPT_DEPTH``."""
    import json

    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError(f"{what}: {TOO_DEEP}") from None
    except ValueError as e:
        raise ValueError(f"{what}: not JSON ({e})") from None
    if not within(doc):
        raise ValueError(f"{what}: nested more than {KEPT_DEPTH} levels deep")
    return doc
