"""CUDA's allocator snapshot (``torch.cuda.memory._snapshot()``, what ``--memory-history`` writes as
``memory_snapshot.pickle`` and memory_viz reads) summarised for the out-of-memory record: the largest live
blocks with the Python stacks that allocated them, and the last allocator events before the error.

The documented shape (``torch/cuda/memory.py``, ``_snapshot``; PyTorch's "Understanding CUDA Memory Usage"):
``{"segments": [{"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
"stream", "segment_type", "blocks": [{"address", "size", "requested_size", "state": "active_allocated" |
"active_pending_free" | "inactive", "frames": [{"filename", "line", "name"}]}]}], "device_traces": [[{"action":
"alloc" | "free_requested" | "free_completed" | "segment_alloc" | "segment_free" | "oom" | "snapshot", "addr",
"size", "stream", "time_us", "frames", "device_free" (oom only)}]]}``, frames innermost first. Blocks carry
frames only while the history records (``_record_memory_history``). Stdlib only: the recording process
summarises the snapshot it wrote.
"""

from __future__ import annotations

import os

#: Frames of these files are the library's, not the program's: the "where" of a block is the innermost other one.
_LIBRARY_MARKS = ("site-packages", "dist-packages", "/torch/", "<frozen", "/lib/python")


def _frame_text(f: dict) -> str:
    return f"{os.path.basename(str(f.get('filename', '?')))}:{f.get('line', '?')} {f.get('name', '?')}"


def _own(f: dict) -> bool:
    name = str(f.get("filename", ""))
    return bool(name) and not any(m in name for m in _LIBRARY_MARKS)


def _where(frames: list) -> str | None:
    """The innermost frame of the program's own code (else the innermost frame), as ``file:line name``."""
    if not frames:
        return None
    own = next((f for f in frames if isinstance(f, dict) and _own(f)), None)
    return _frame_text(own if own is not None else frames[0])


def summarize(snapshot: dict, top: int = 10, events: int = 20) -> dict:
    """``{"active_blocks", "active_bytes", "reserved_bytes", "largest": [{"size", "requested", "state", "stream",
    "where", "frames": [innermost first, "file:line name"]}], "oom": {"size", "device_free", "where"} | None,
    "events": the last ``events`` allocator events [{"action", "size", "time_us", "where"}]}`` (bytes).
    Tolerates missing keys (an older torch's snapshot)."""
    blocks = []
    reserved = 0
    for seg in snapshot.get("segments") or []:
        reserved += int(seg.get("total_size") or 0)
        for b in seg.get("blocks") or []:
            if b.get("state") in ("active_allocated", "active_pending_free"):
                blocks.append((b, seg))
    blocks.sort(key=lambda bs: -int(bs[0].get("size") or 0))
    largest = []
    for b, seg in blocks[:top]:
        frames = [f for f in (b.get("frames") or []) if isinstance(f, dict)]
        largest.append({"size": int(b.get("size") or 0), "requested": int(b.get("requested_size") or 0),
                        "state": b.get("state"), "stream": seg.get("stream"), "where": _where(frames),
                        "frames": [_frame_text(f) for f in frames[:16]]})
    trace = []
    for dev in snapshot.get("device_traces") or []:
        trace.extend(e for e in dev or [] if isinstance(e, dict))
    trace.sort(key=lambda e: e.get("time_us") or 0)
    oom = None
    for e in reversed(trace):
        if e.get("action") == "oom":
            oom = {"size": int(e.get("size") or 0), "device_free": e.get("device_free"),
                   "where": _where([f for f in (e.get("frames") or []) if isinstance(f, dict)])}
            break
    last = [{"action": e.get("action"), "size": int(e.get("size") or 0), "time_us": e.get("time_us"),
             "where": _where([f for f in (e.get("frames") or []) if isinstance(f, dict)])} for e in trace[-events:]]
    return {"active_blocks": len(blocks), "active_bytes": sum(int(b.get("size") or 0) for b, _ in blocks),
            "reserved_bytes": reserved, "largest": largest, "oom": oom, "events": last}
