"""Steps for spans recorded elsewhere (the Sentry SDK, OTLP), by the step rules (``core.steprules``) read from span names."""

from __future__ import annotations

from ...core.steprules import kind_of_name


def steps_from_names(spans) -> dict:
    """``diffusion.step`` for spans recorded elsewhere (ingested from the Sentry SDK), by the same rules as
    the live hooks. ``spans``: ``(span id, parent id | None, name, start_ns, thread id)``. Returns span id
    -> step index for the scheduler steps and denoiser forwards.

    Differences forced by working after the fact: without a traced scheduler step in a scope, each
    outermost denoiser call is a new step (the live rule compares the ``timestep`` argument, which a
    span does not carry: right for batched classifier-free guidance); a denoiser nested in another
    gets the outer one's step, as it shares its timestep live.
    """
    spans = sorted(spans, key=lambda s: s[3])
    kind = {s[0]: _kind(s[2]) for s in spans}
    parent = {s[0]: s[1] for s in spans}

    def nearest(sid, want: str):
        p = parent.get(sid)
        while p is not None and p in kind:
            if kind[p] == want:
                return p
            p = parent.get(p)
        return None

    scopes: dict = {}
    for sid, _, _, _, tid in spans:
        if kind[sid] in ("marker", "scoped"):
            scopes.setdefault(nearest(sid, "scope") or ("thread", tid), []).append(sid)
    out: dict = {}
    for members in scopes.values():
        marked = any(kind[m] == "marker" for m in members)
        counter = 0
        for sid in members:  # in start order
            if kind[sid] == "marker":
                out[sid] = counter
                counter += 1
            elif marked:
                out[sid] = counter
            else:
                outer = nearest(sid, "scoped")
                if outer is not None:
                    out[sid] = out[outer]
                else:
                    out[sid] = counter
                    counter += 1
    return out


def _kind(name: str) -> str | None:
    """``kind_of_name`` with a loop read as a scope and its iterations' spans as markers (each is one step)."""
    k = kind_of_name(name)
    return "scope" if k == "loop" else "marker" if k == "step" else k
