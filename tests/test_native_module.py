"""The C recorder's extension as a module (stepscope/record/native): its one build recipe covers the folder's sources,
its stub names what it exposes, and its loader says why it is unavailable only when there is something to say."""

import ast
import importlib
import runpy
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "src" / "stepscope" / "record" / "native"


def _recipe() -> dict:
    return runpy.run_path(str(ROOT / "setup.py"), run_name="stepscope_setup")["native_sources"]()


def test_the_recipe_lists_every_source_and_header_of_the_folder_once():
    spec = _recipe()
    assert spec["name"] == "stepscope.record.native._native"
    sources = [ROOT / s for s in spec["sources"]]
    depends = [ROOT / d for d in spec["depends"]]
    assert len(set(sources)) == len(sources) and len(set(depends)) == len(depends)
    assert sorted(sources) == sorted(NATIVE.glob("*.c"))
    assert sorted(depends) == sorted(NATIVE.glob("*.h"))
    # every .c but the module's has its header: declarations there, bodies in the .c
    assert {p.stem for p in sources} - {"module"} <= {p.stem for p in depends}


def test_build_native_reads_the_recipe_of_setup_py():
    build = runpy.run_path(str(ROOT / "scripts" / "build_native.py"), run_name="build_native")
    assert build["recipe"]() == _recipe()
    assert build["target"]() == NATIVE / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))


def _stub_names(tree: ast.Module) -> dict[str, set[str] | None]:
    """Public top-level names of the stub -> the public names of a class's body (None for a non-class)."""
    out: dict[str, set[str] | None] = {}
    for n in tree.body:
        if isinstance(n, ast.ClassDef):
            out[n.name] = {m.name for m in n.body if isinstance(m, ast.FunctionDef) and not m.name.startswith("_")} | {
                m.target.id for m in n.body if isinstance(m, ast.AnnAssign)}
        elif isinstance(n, ast.FunctionDef):
            out[n.name] = None
        elif isinstance(n, ast.AnnAssign):
            out[n.target.id] = None
    return {k: v for k, v in out.items() if not k.startswith("_")}


def test_the_stub_names_everything_the_module_exposes():
    from stepscope.record import native

    if native.ext is None:
        pytest.skip(f"the extension is not built for this interpreter ({native.load_error})")
    stub = _stub_names(ast.parse((NATIVE / "_native.pyi").read_text()))
    public = {n for n in dir(native.ext) if not n.startswith("_")}
    assert set(stub) == public
    for name, members in stub.items():
        if members is not None:
            assert members == {m for m in dir(getattr(native.ext, name)) if not m.startswith("_")}, name
    for n in ast.walk(ast.parse((NATIVE / "_native.pyi").read_text())):  # every function says what it does
        if isinstance(n, ast.FunctionDef) and n.name != "__init__":
            assert ast.get_docstring(n), n.name


def _load_copy(tmp_path: Path, monkeypatch, name: str, so: bytes | None = None, recorder: str = ""):
    """The loader, copied into package ``name`` (with ``so`` as its extension's file), imported afresh."""
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text((NATIVE / "__init__.py").read_text())
    if so is not None:
        (pkg / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))).write_bytes(so)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("STEPSCOPE_RECORDER", recorder)
    try:
        return importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)


def test_an_extension_not_built_is_the_python_recorder_with_nothing_to_say(tmp_path, monkeypatch):
    loader = _load_copy(tmp_path, monkeypatch, "unbuilt_native")
    assert (loader.ext, loader.load_error, loader.RECORDER) == (None, None, "python")


def test_an_extension_that_cannot_load_is_one_line(tmp_path, monkeypatch):
    loader = _load_copy(tmp_path, monkeypatch, "broken_native", so=b"not an ELF file")
    assert loader.ext is None and loader.RECORDER == "python"
    assert loader.load_error.startswith("native recorder: cannot load broken_native._native: ImportError:")
    assert "\n" not in loader.load_error


def test_the_python_recorder_asked_for_loads_nothing(tmp_path, monkeypatch):
    loader = _load_copy(tmp_path, monkeypatch, "unwanted_native", so=b"not an ELF file", recorder=" Python ")
    assert (loader.ext, loader.load_error, loader.RECORDER) == (None, None, "python")


def test_the_loader_imports_nothing_of_stepscope():
    tree = ast.parse((NATIVE / "__init__.py").read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module != "__future__"]
    assert all(m.split(".")[0] in sys.stdlib_module_names for m in imported), imported


def _layout():
    return runpy.run_path(str(ROOT / "scripts" / "native_layout.py"), run_name="native_layout")


def test_the_layout_header_is_generated_from_the_python_tables():
    """native/layout.h is what scripts/native_layout.py writes now (run it after changing a table)."""
    assert (NATIVE / "layout.h").read_text() == _layout()["render"]()


def test_the_record_fields_are_one_table():
    from stepscope.record.spans import record

    consts = _layout()["constants"]()
    fields = {k: v for k, v in consts.items() if k.startswith("REC_")}
    assert fields == {f"REC_{f.upper()}": i for i, f in enumerate(record.FIELDS)} | {"REC_LEN": len(record.FIELDS)}


def test_the_extension_agrees_with_the_python_tables():
    from stepscope.record import native

    if native.ext is None:
        pytest.skip(f"the extension is not built for this interpreter ({native.load_error})")
    consts = _layout()["constants"]()
    assert consts and {k: getattr(native.ext, k, None) for k in consts} == consts


def test_every_unpacked_record_follows_the_fields():
    """``a, b, ... = rec`` of a whole open-span record (``REC_LEN`` names) in stepscope.record names the fields in
    ``record.FIELDS`` order (``sid`` for the id, ``_`` for one not used)."""
    from stepscope.record.spans.record import FIELDS

    seen = 0
    for path in (ROOT / "src" / "stepscope" / "record").rglob("*.py"):
        for n in ast.walk(ast.parse(path.read_text())):
            target = n.targets[0] if isinstance(n, ast.Assign) else None
            if (isinstance(target, ast.Tuple) and len(target.elts) == len(FIELDS)
                    and all(isinstance(e, ast.Name) for e in target.elts)):
                names = [e.id for e in n.targets[0].elts]
                ok = [x == f or x == "_" or (f, x) == ("id", "sid") for x, f in zip(names, FIELDS)]
                assert all(ok), f"{path.relative_to(ROOT)}:{n.lineno}: {names} is not {FIELDS}"
                seen += 1
    assert seen >= 2  # (tracing.monitoring's inlined return, Probe.exit)


def test_one_module_owns_the_span_block_format():
    """core.spanformat defines the block format's magic and NO_PARENT; the Python codec, the span tables and (through
    layout.h) the C writer take them from there, and nothing else states them."""
    from stepscope.core import spanformat, spantable
    from stepscope.store import spanblock

    assert spanblock.MAGIC is spanformat.MAGIC and spanblock.NO_PARENT is spanformat.NO_PARENT
    assert spantable.NO_PARENT is spanformat.NO_PARENT
    owner = ROOT / "src" / "stepscope" / "core" / "spanformat.py"
    stated = []
    for path in (ROOT / "src" / "stepscope").rglob("*.py"):
        if path == owner:
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NO_PARENT" for t in n.targets):
                stated.append(f"{path.relative_to(ROOT)}:{n.lineno}: NO_PARENT")
            elif isinstance(n, ast.Constant) and isinstance(n.value, bytes) and n.value.startswith(b"SSB"):
                stated.append(f"{path.relative_to(ROOT)}:{n.lineno}: {n.value!r}")
    for path in [*NATIVE.glob("*.c"), *NATIVE.glob("*.h")]:
        if path.name != "layout.h":
            text = path.read_text()
            stated += [f"{path.relative_to(ROOT)}: {s}" for s in ('"SSB', "INT64_MIN", "NO_PARENT =") if s in text]
    assert stated == []
