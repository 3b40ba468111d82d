"""The recorder's parts register with each other through functions of the module that owns the global (never by
assigning into another module's globals), and those functions do what they say."""

import ast
from pathlib import Path

from stepscope.record.spans import buffer
from stepscope.record.tracing import collectives, probes

RECORD = Path(__file__).resolve().parent.parent / "src" / "stepscope" / "record"


def test_no_module_of_record_assigns_into_another_ones_globals():
    bad = []
    for path in RECORD.rglob("*.py"):
        tree = ast.parse(path.read_text())
        own = set()  # names bound to stepscope's modules and their members by imports
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("stepscope")):
                own |= {a.asname or a.name for a in n.names}
            elif isinstance(n, ast.Import):
                own |= {a.asname or a.name.split(".")[0] for a in n.names if a.name.startswith("stepscope")}
        for n in ast.walk(tree):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
                n, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for x in ast.walk(t):
                    if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id in own:
                        bad.append(f"{path.relative_to(RECORD)}:{n.lineno}: {ast.unparse(t)}")
    assert bad == []


def test_span_memory_is_set_and_released_by_its_owner_only():
    before = probes.span_memory
    mine, later = object(), object()
    try:
        probes.set_span_memory(mine)
        assert probes.span_memory is mine
        probes.set_span_memory(later)  # a later session's
        probes.release_span_memory(mine)
        assert probes.span_memory is later
        probes.release_span_memory(None)
        assert probes.span_memory is later
        probes.release_span_memory(later)
        assert probes.span_memory is None
    finally:
        probes.set_span_memory(before)


def test_take_calls_the_sweep_first():
    before = buffer.sweep
    calls = []
    span = (buffer.next_span_id(), None, "swept", "function", 1, 2, 0, None, None)

    def sweep():
        calls.append(1)
        buffer.finished.append(span)

    try:
        buffer.take()
        buffer.set_sweep(sweep)
        assert span in buffer.take() and calls == [1]
        buffer.set_sweep(None)
        assert span not in buffer.take() and calls == [1]
    finally:
        buffer.set_sweep(before)


def test_destroyed_groups_are_held_once_asked(monkeypatch):
    monkeypatch.setattr(collectives, "hold_groups", False)  # (restored after the test)
    collectives.hold_destroyed_groups()
    assert collectives.hold_groups is True
