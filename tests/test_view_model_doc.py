"""docs/report-view-model.md is the report's view model as ``output.html.view.build_view`` builds it: for each table of
the page (a section's table, or the one after a line "A Name ..."), the keys it lists are exactly the keys of that
object in the views of real runs: a run with repeats, memory, an out-of-memory end and three processes, two of them
ranks (and the same run aggregated, and a zoomed window of it); a run with every device file (``device_run``); a
node-graph app's run (``--app comfyui``). A key marked *optional* may be missing."""

import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from conftest import PROGRAMS, run_cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "report-view-model.md"
COMFY = PROGRAMS / "comfy_standin"

#: repeats of ``step`` (every 4th slow), two rank processes that repeat ``train_step``, then a MemoryError in a
#: traced function (the run's status: oom)
PROGRAM = '''\
import os
import subprocess
import sys
import time

RANK = "import time\\ndef train_step(i):\\n    time.sleep(0.01)\\nfor i in range(4):\\n    train_step(i)\\n"


def costly():
    time.sleep(0.1)


def step(i):
    time.sleep(0.02)
    if i % 4 == 3:
        costly()


def give_up():
    raise MemoryError("out of memory (raised for a test)")


def main():
    ranks = [subprocess.Popen([sys.executable, "-c", RANK], env=dict(os.environ, RANK=str(k), WORLD_SIZE="2"))
             for k in range(2)]
    for p in ranks:
        p.wait()
    for i in range(12):
        step(i)
    give_up()


main()
'''

CELL = re.compile(r"(?<!\\)\|")


def doc_tables(text: str) -> dict[str, tuple[set[str], set[str]]]:
    """name -> (the keys its table lists, those marked *optional*), for every ``| key | ...`` table of the page.
    A table's name: the paragraph just before it when that starts "A Name" or "An Name" (a capitalised word), else
    its section's heading."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    heading, para, blank = None, [], True  # para: the last paragraph since the heading or the last table
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"#{1,6} +(.*?) *$", line)
        if m:
            heading, para = m.group(1), []
        elif line.startswith("| key |"):
            m = re.match(r"An? ([A-Z]\w*)", para[0]) if para else None
            name = m.group(1) if m else heading
            assert name not in out, f"two tables named {name!r}"
            keys, optional = set(), set()
            i += 2  # the header's separator row
            while i < len(lines) and lines[i].startswith("|"):
                cells = CELL.split(lines[i])[1:-1]
                got = set(re.findall(r"`([^`]+)`", cells[0]))
                assert got, f"{name}: a row names no key: {lines[i]}"
                keys |= got
                if "*optional*" in lines[i]:
                    optional |= got
                i += 1
            out[name] = (keys, optional)
            para = []
            continue
        elif line.strip():
            para = [line] if blank else para + [line]
        blank = not line.strip()
        i += 1
    return out


def _tree(node) -> list:
    return [node] + [n for c in node["children"] for n in _tree(c)]


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    from device_run_helpers import device_run

    from stepscope.core.spantable import as_table
    from stepscope.device.view import device_view
    from stepscope.output.html import view as viewmod
    from stepscope.store.db import Store
    from stepscope.store.reader import load_run

    base = tmp_path_factory.mktemp("viewdoc")
    prog = base / "prog.py"
    prog.write_text(PROGRAM)
    main, dev, nodes = base / "main", base / "dev", base / "nodes"
    traces = [a for f in ("step", "costly", "give_up", "train_step") for a in ("-t", f"__main__.{f}")]
    r = run_cli(["run", "-q", "--hz", "499", *traces, "--", sys.executable, str(prog)], main, cwd=base)
    assert r.returncode == 1 and "MemoryError" in r.stderr, r.stderr
    device_run(dev)
    r = run_cli(["run", "-q", "--app", "comfyui", "--", sys.executable, "main.py"], nodes, cwd=COMFY)
    assert r.returncode == 0, r.stderr
    out = {}
    for key, path in (("main", main), ("dev", dev), ("nodes", nodes)):
        st = Store(path)
        try:
            data = load_run(st)
            dv = device_view(st, data.run.id, data) if key == "dev" else None
            out[key] = viewmod.build_view(data, device=dv)
            if key == "main":
                first = viewmod.FIRST_PER_NAME
                viewmod.FIRST_PER_NAME = 2  # an aggregated view with density rows, from a small run
                try:
                    out["agg"] = viewmod.build_view(data, max_spans=5)
                finally:
                    viewmod.FIRST_PER_NAME = first
                t = as_table(data.spans)
                out["window"] = viewmod.window_spans(t, viewmod.table_depths(t), data.run.start_ns, 0.0,
                                                     (data.run.end_ns - data.run.start_ns) / 1e3)
        finally:
            st.close()
    return out


def instances(v: dict) -> dict[str, list[dict]]:
    """Each documented object's instances in the views ``v``."""
    full = [v["main"], v["dev"], v["nodes"]]
    summ = [x["summary"] for x in full]
    steps = [s["steps"] for s in summ if s["steps"] is not None]
    rows = [r for s in steps for r in s["rows"]]
    mems = [s["memory"] for s in summ if s["memory"] is not None]
    stages = [g for m in mems for g in m["stages"] + ([m["largest"]] if m["largest"] else [])]
    expl = [x["explain"] for x in full if x["explain"] is not None]
    dev = v["dev"]["device"]
    xla = dev["xla"]
    nodes = v["nodes"]["summary"]["nodes"]
    return {
        "Top level": full,
        "run": [x["run"] for x in full],
        "Thread": [t for x in full for t in x["threads"]],
        "spans": [x["spans"] for x in full],
        "aggregated": [v["agg"]["aggregated"]],
        "density": [v["agg"]["density"]],
        "DensityRow": v["agg"]["density"]["rows"],
        "profile": [x["profile"] for x in full],
        "phases": [x["phases"] for x in full if x["phases"] is not None],
        "summary": summ,
        "SpanStat": [s for x in summ for s in x["spans"]],
        "FunctionTime": [f for x in summ for f in x["top_self"] + x["top_total"]],
        "Process": [p for x in summ for p in x["processes"]],
        "summary.nodes": [nodes],
        "NodeRow": nodes["nodes"] + nodes["types"],
        "PromptRow": nodes["prompts"],
        "summary.ranks": [x["ranks"] for x in summ if x["ranks"] is not None],
        "summary.steps": steps,
        "StepRow": rows,
        "WindowMemory": [r["memory"] for r in rows if r["memory"]] + [w for g in stages for w in (g["rss"], g["cuda"])
                                                                      if w is not None],
        "summary.memory": mems,
        "NameMemory": [n for m in mems for n in m["spans"]],
        "Stage": stages,
        "OOM": [m["oom"] for m in mems if m["oom"] is not None],
        "explain": expl,
        "Cause": [c for e in expl for c in e["causes"] + ([e["entry"]] if e["entry"] else [])],
        "Repeat": [r for e in expl for r in e["repeats"]],
        "DiffNode": [n for e in expl if e["tree"] is not None for n in _tree(e["tree"])],
        "device": [dev],
        "Lane": dev["lanes"],
        "Gap": dev["gaps"],
        "Sync": dev["syncs"],
        "StreamIdle": dev["streams"],
        "OpStat": dev["top_ops"] + dev["top_kernels"],
        "SpanDevice": dev["spans"],
        "Probe": [dev["peak"]],
        "CompileReport": [dev["compile"]],
        "CompileSite": dev["compile"]["graph_breaks"] + dev["compile"]["recompiles"],
        "XlaSummary": [xla],
        "Figures": [xla["total"]] + [s["figures"] for s in xla["steps"] + xla["spans"]],
        "XlaStep": xla["steps"],
        "XlaSpan": xla["spans"],
        "XlaTransfer": xla["transfers"],
        "XlaLane": xla["lanes"],
        "XlaGap": xla["gaps"],
        "memory lane": [x["memory"] for x in full if x["memory"] is not None],
        "fixes": [x["fixes"] for x in full],
        "Window": [v["window"]],
        "WindowSpans": [v["window"]["spans"]],
    }


def not_produced() -> dict[str, set[str]]:
    """Documented objects these runs do not produce (no torch here): their keys, from the dataclass the view writes
    as it is (``view.plain``)."""
    from stepscope.device.runview import SyncSiteStat

    return {"SyncSite": {f.name for f in fields(SyncSiteStat)}}


def test_the_page_lists_exactly_the_keys_build_view_produces(views):
    tables = doc_tables(DOC.read_text())
    got = instances(views)
    assert set(got) | set(not_produced()) == set(tables), "objects checked here but not on the page, or the reverse"
    bad = []
    for name, objs in got.items():
        keys, optional = tables[name]
        if not objs:
            bad.append(f"{name}: no instance in these runs")
        for o in objs:
            assert isinstance(o, dict), (name, o)
            extra, missing = set(o) - keys, keys - optional - set(o)
            if extra or missing:
                bad.append(f"{name}: not on the page {sorted(extra)}, on the page but not built {sorted(missing)}")
                break
    for name, keys in not_produced().items():
        if tables[name][0] != keys:
            bad.append(f"{name}: the page lists {sorted(tables[name][0])}, the code has {sorted(keys)}")
    assert not bad, "\n".join(bad)
