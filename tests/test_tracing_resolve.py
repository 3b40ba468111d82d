"""Resolving qualified names and patching them, without running a program."""

import importlib
import os
import pickle
import sys

import pytest
from conftest import spans_now


def names(spans):
    return [s["name"] for s in spans]


def test_module_function_is_traced_and_restored(patcher):
    from sstargets import funcs

    original, code = funcs.add, funcs.add.__code__
    patcher.add(["sstargets.funcs.add"])
    assert funcs.add is original and not hasattr(funcs.add, "__wrapped__")  # nothing replaced
    assert funcs.add(1) == 6
    assert names(spans_now()) == ["sstargets.funcs.add"]
    patcher.remove()
    assert funcs.add is original and funcs.add.__code__ is code
    assert funcs.add(1) == 6 and spans_now() == []


def test_methods_static_class_and_nested(patcher):
    from sstargets.classes import Base, Outer

    patcher.add(["sstargets.classes.Base.forward", "sstargets.classes.Base.static", "sstargets.classes.Base.make",
                 "sstargets.classes.Outer.Inner.method"])
    assert Base().forward(1) == 2
    assert Base.static(2) == 20 and Base().static(2) == 20
    assert Base.make() == "Base"
    assert Outer.Inner().method() == "inner"
    assert names(spans_now()) == ["sstargets.classes.Base.forward", "sstargets.classes.Base.static",
                                  "sstargets.classes.Base.static", "sstargets.classes.Base.make",
                                  "sstargets.classes.Outer.Inner.method"]
    assert isinstance(Base.__dict__["static"], staticmethod) and isinstance(Base.__dict__["make"], classmethod)


def test_inherited_method_traced_on_the_subclass_only(patcher):
    from sstargets.classes import Base, Other, Sub, SubSub

    patcher.add(["sstargets.classes.Sub.forward"])
    assert "forward" not in Sub.__dict__ and Base.__dict__["forward"].__name__ == "forward"
    Sub().forward(1)
    SubSub().forward(1)
    Other().forward(1)
    Base().forward(1)
    assert names(spans_now()) == ["sstargets.classes.Sub.forward"] * 2
    patcher.remove()
    assert "forward" not in Sub.__dict__


def test_inherited_and_base_both_traced_make_one_span_per_call(patcher):
    from sstargets.classes import Base, Sub

    patcher.add(["sstargets.classes.Base.forward", "sstargets.classes.Sub.forward"])
    Sub().forward(1)
    Base().forward(1)
    assert names(spans_now()) == ["sstargets.classes.Sub.forward", "sstargets.classes.Base.forward"]


def test_glob_matches_names_defined_there(patcher):
    from sstargets import classes

    patcher.add(["sstargets.classes.Processor*.__call__"])
    assert sorted(patcher.resolved["sstargets.classes.Processor*.__call__"]) == [
        "sstargets.classes.Processor.__call__", "sstargets.classes.Processor2_0.__call__"]
    classes.Processor()(1)
    classes.Processor2_0()(1)
    assert names(spans_now()) == ["sstargets.classes.Processor.__call__", "sstargets.classes.Processor2_0.__call__"]


def test_glob_in_module_does_not_match_reexported_names(patcher):
    import sstargets.importer  # noqa: F401

    patcher.add(["sstargets.importer.*"])
    # importer defines call_alias/call_add; add/add_alias come from funcs and are not matched
    assert sorted(patcher.resolved["sstargets.importer.*"]) == ["sstargets.importer.call_add", "sstargets.importer.call_alias"]


def test_from_import_bindings_are_patched(patcher):
    from sstargets import funcs, importer

    patcher.add(["sstargets.funcs.add"])
    assert importer.add is funcs.add and importer.add_alias is funcs.add
    importer.call_alias()
    importer.call_add()
    assert names(spans_now()) == ["sstargets.funcs.add"] * 2
    patcher.remove()
    assert importer.add_alias is funcs.add and not hasattr(funcs.add, "__stepscope_span__")


def test_module_not_imported_early_and_patched_on_import(patcher):
    sys.modules.pop("sstargets.lazy", None)
    os.environ.pop("SSTARGETS_LAZY_IMPORTED", None)
    patcher.add(["sstargets.lazy.late"])
    assert "SSTARGETS_LAZY_IMPORTED" not in os.environ and "sstargets.lazy" not in sys.modules
    import sstargets.lazy as lazy

    assert lazy.late(1) == 101
    assert names(spans_now()) == ["sstargets.lazy.late"]
    assert lazy.__loader__.__class__.__name__ != "_NotifyingLoader"  # the real loader is restored
    assert patcher.unresolved == {}


@pytest.mark.parametrize("how", ["import", "by_hand", "lazy_loader"])
def test_watched_module_sees_its_own_spec_and_loader_and_no_frame_of_ours(patcher, how, tmp_path, monkeypatch):
    """A watched module executes as without the hook: its real loader on it and on its spec, a plain
    ModuleSpec afterwards, no frame of stepscope's on the stack as its code runs (on the import statement's
    path), and the patcher told once it executed, however it was executed (the import statement,
    module_from_spec + exec_module by hand, importlib.util.LazyLoader)."""
    import importlib.machinery
    import importlib.util

    pkg = tmp_path / "sshookpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        "import sys\n"
        "_f, FILES = sys._getframe(), []\n"
        "while _f is not None:\n    FILES.append(_f.f_code.co_filename)\n    _f = _f.f_back\n"
        "SEEN = (type(__loader__).__name__, type(__spec__.loader).__name__, type(__spec__).__name__, FILES)\n"
        "def late(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    patcher.add(["sshookpkg.mod.late"])
    if how == "import":
        import sshookpkg.mod as mod
    else:
        import sshookpkg  # noqa: F401

        spec = importlib.util.find_spec("sshookpkg.mod")
        if how == "lazy_loader":
            spec.loader = importlib.util.LazyLoader(spec.loader)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["sshookpkg.mod"] = mod
        spec.loader.exec_module(mod)
    try:
        assert mod.late(1) == 2  # (a lazy module executes here)
        assert names(spans_now()) == ["sshookpkg.mod.late"]
        loader_type, spec_loader_type, spec_type, files = mod.SEEN
        assert loader_type == spec_loader_type == "SourceFileLoader"
        assert spec_type == "ModuleSpec" and type(mod.__spec__) is importlib.machinery.ModuleSpec
        assert type(mod.__loader__) is importlib.machinery.SourceFileLoader
        if how == "import":
            assert not [f for f in files if "stepscope" in f], files
    finally:
        for name in ("sshookpkg.mod", "sshookpkg"):
            sys.modules.pop(name, None)


def test_module_failing_as_it_imports_is_not_reported_then_imports_again(patcher, tmp_path, monkeypatch):
    """A watched module that raises: the exception's traceback has no frame of stepscope's, the patcher is
    not told (the module was removed from sys.modules), and a later import that succeeds is traced."""
    import traceback

    pkg = tmp_path / "sshookfail"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("import os\nif os.environ.get('SSHOOK_FAIL'):\n    raise KeyError('at import')\n"
                                "def late(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SSHOOK_FAIL", "1")
    patcher.add(["sshookfail.mod.late"])
    try:
        with pytest.raises(KeyError) as e:
            import sshookfail.mod  # noqa: F401
        assert [f.filename for f in traceback.extract_tb(e.value.__traceback__)] == [__file__, str(pkg / "mod.py")]
        assert "sshookfail.mod" not in sys.modules and "sshookfail.mod.late" in patcher.unresolved
        monkeypatch.delenv("SSHOOK_FAIL")
        import sshookfail.mod as mod

        assert mod.late(1) == 2 and names(spans_now()) == ["sshookfail.mod.late"]
        assert patcher.unresolved == {}
    finally:
        for name in ("sshookfail.mod", "sshookfail"):
            sys.modules.pop(name, None)


def test_unresolvable_names_say_which_part(patcher):
    from sstargets import classes  # noqa: F401

    patcher.add(["sstargets.classes.Nope.forward", "sstargets.classes.Base.nope", "sstargets.classes.Base.prop",
                 "nosuchpackage.mod.f", "sstargets.nosuchmodule.f"])
    why = patcher.unresolved
    assert why["sstargets.classes.Nope.forward"] == "sstargets.classes has no attribute 'Nope'"
    assert why["sstargets.classes.Base.nope"] == "sstargets.classes.Base has no attribute 'nope'"
    assert "property" in why["sstargets.classes.Base.prop"]
    assert why["nosuchpackage.mod.f"] == "module 'nosuchpackage' was never imported"
    assert why["sstargets.nosuchmodule.f"] == "sstargets has no attribute or submodule 'nosuchmodule'"


def test_sentry_form_and_bad_entries():
    from stepscope.record.tracing.resolve import normalize_targets

    assert normalize_targets([{"qualified_name": "a.b"}, "c.d", "a.b"]) == ["a.b", "c.d"]
    with pytest.raises(ValueError, match=r"functions_to_trace\[1\]"):
        normalize_targets(["a.b", {"name": "x"}])


def test_functions_still_pickle_by_reference(patcher):
    from sstargets import funcs

    patcher.add(["sstargets.funcs.add"])
    assert pickle.loads(pickle.dumps(funcs.add)) is funcs.add


def test_glob_matches_methods_through_the_mro_each_under_its_class(patcher):
    from sstargets.classes import Base, Other, Sub, SubSub

    patcher.add(["sstargets.classes.*.forward"])
    assert sorted(patcher.resolved["sstargets.classes.*.forward"]) == [
        "sstargets.classes.Base.forward", "sstargets.classes.Other.forward", "sstargets.classes.Sub.forward",
        "sstargets.classes.SubSub.forward"]
    assert "forward" not in vars(Sub)  # nothing set on the subclasses
    Sub().forward(1)
    SubSub().forward(1)
    Other().forward(1)
    Base().forward(1)
    assert names(spans_now()) == ["sstargets.classes.Sub.forward", "sstargets.classes.SubSub.forward",
                                  "sstargets.classes.Other.forward", "sstargets.classes.Base.forward"]


# -- node graphs: decorator-made subclasses, overridden base methods, globs over packages (issue 27) ---------------

NODEGRAPH = os.path.join(os.path.dirname(__file__), "programs", "nodegraph")


def _forget_nodegraph():
    for m in [m for m in sys.modules if m.partition(".")[0] in ("minigraph", "fakenn")]:
        del sys.modules[m]


@pytest.fixture
def nodegraph():
    """tests/programs/nodegraph importable, its modules not imported yet (and forgotten afterwards)."""
    _forget_nodegraph()
    sys.path.insert(0, NODEGRAPH)
    yield
    sys.path.remove(NODEGRAPH)
    _forget_nodegraph()


def _run_nodes(*types_, **fields):
    from minigraph.invocations.baseinvocation import REGISTRY

    context = []
    return [REGISTRY[t](**fields).invoke_internal(context) for t in types_]


def test_glob_over_a_package_traces_decorator_made_nodes_and_later_modules(patcher, nodegraph):
    patcher.add(["minigraph.invocations.*.*.invoke"])  # before the program imports anything of it
    import minigraph.invocations  # noqa: F401
    from minigraph.invocations.basic import AddInvocation

    assert "invoke" not in vars(AddInvocation)  # the decorator's subclass: invoke is on the user's class
    assert sorted(patcher.resolved["minigraph.invocations.*.*.invoke"]) == [
        "minigraph.invocations.baseinvocation.BaseInvocation.invoke",
        "minigraph.invocations.basic.AddInvocation.invoke", "minigraph.invocations.basic.PassInvocation.invoke",
        "minigraph.invocations.text.UpperInvocation.invoke"]
    assert _run_nodes("add", "pass", "upper", a=1, b=2, text="x") == [{"sum": 3}, {"a": 1, "b": 2, "text": "x"},
                                                                      {"text": "X"}]
    assert names(spans_now()) == ["minigraph.invocations.basic.AddInvocation.invoke",
                                  "minigraph.invocations.basic.PassInvocation.invoke",  # the base's, under its class
                                  "minigraph.invocations.text.UpperInvocation.invoke"]
    import minigraph.invocations.late  # a node module imported after the glob was resolved

    assert "minigraph.invocations.late.LateInvocation.invoke" in patcher.resolved["minigraph.invocations.*.*.invoke"]
    _run_nodes("late", "add", a=1, b=1)
    assert names(spans_now()) == ["minigraph.invocations.late.LateInvocation.invoke",
                                  "minigraph.invocations.basic.AddInvocation.invoke"]
    importlib.reload(minigraph.invocations.basic)  # new classes, new functions, the same names
    assert minigraph.invocations.basic.AddInvocation is not AddInvocation
    _run_nodes("add", a=1, b=1)
    assert names(spans_now()) == ["minigraph.invocations.basic.AddInvocation.invoke"]
    assert patcher.unresolved == {}
    assert len(patcher.resolved["minigraph.invocations.*.*.invoke"]) == 5


def test_glob_in_one_module_finds_inherited_invoke(patcher, nodegraph):
    import minigraph.invocations  # noqa: F401
    from minigraph.invocations.baseinvocation import BaseInvocation

    patcher.add(["minigraph.invocations.basic.*.invoke"])
    assert sorted(patcher.resolved["minigraph.invocations.basic.*.invoke"]) == [
        "minigraph.invocations.basic.AddInvocation.invoke", "minigraph.invocations.basic.PassInvocation.invoke"]
    _run_nodes("add", "pass", "upper", a=1, b=2)
    BaseInvocation().invoke([])  # the base's invoke on another class: not what was named
    assert names(spans_now()) == ["minigraph.invocations.basic.AddInvocation.invoke",
                                  "minigraph.invocations.basic.PassInvocation.invoke"]


def test_glob_leaves_out_what_a_class_inherits_from_another_package(patcher, nodegraph):
    from minigraph.models import Net

    patcher.add(["minigraph.models.*.*", "minigraph.models.*.to", "minigraph.models.Net.train"])
    assert sorted(patcher.resolved["minigraph.models.*.*"]) == ["minigraph.models.Net.__init__",
                                                               "minigraph.models.Net.forward"]
    net = Net(2).to("cpu").train(False)
    assert net(3) == 6 and net.parameters() == [False, 2]
    assert names(spans_now()) == ["minigraph.models.Net.__init__", "minigraph.models.Net.train",  # named in full
                                  "minigraph.models.Net.forward"]
    assert patcher.unresolved == {"minigraph.models.*.to": (
        "no functions match '*.to' in minigraph.models: 1 class seen (Net), none defines or inherits to (a glob leaves"
        " out what a class inherits from another package's class: Net.to is fakenn.Module.to; name it in full to"
        " trace it)")}


def test_base_method_name_traces_its_overrides_now_and_later(patcher, nodegraph):
    from stepscope.record.tracing.patch import is_note

    import minigraph.invocations  # noqa: F401
    from minigraph.invocations.baseinvocation import BaseInvocation

    base = "minigraph.invocations.baseinvocation.BaseInvocation.invoke"
    patcher.add([base])
    assert patcher.resolved[base] == [base, "minigraph.invocations.basic.AddInvocation.invoke",
                                      "minigraph.invocations.text.UpperInvocation.invoke"]
    import minigraph.invocations.late  # noqa: F401  (a subclass defined after the trace was set up)

    assert patcher.resolved[base][-1] == "minigraph.invocations.late.LateInvocation.invoke"
    assert _run_nodes("add", "pass", "upper", "late", a=1, b=2) == [{"sum": 3}, {"a": 1, "b": 2}, {"text": ""},
                                                                    {"late": 4}]
    assert names(spans_now()) == ["minigraph.invocations.basic.AddInvocation.invoke",
                                  base,  # PassInvocation runs the base's own invoke
                                  "minigraph.invocations.text.UpperInvocation.invoke",
                                  "minigraph.invocations.late.LateInvocation.invoke"]
    note = patcher.unresolved[base]
    assert is_note(note) and note == (
        "overridden in 3 subclasses: each override traced as a span of its own class"
        " (minigraph.invocations.basic.AddInvocation.invoke, minigraph.invocations.text.UpperInvocation.invoke,"
        " minigraph.invocations.late.LateInvocation.invoke)")
    patcher.remove()
    _run_nodes("add", "pass", a=1, b=2)
    BaseInvocation().invoke([])
    assert spans_now() == []


def test_glob_that_matches_nothing_says_what_it_saw(patcher, nodegraph):
    patcher.add(["minigraph.invocations.*.*.invok", "minigraph.invocations.*.nothing_*",
                 "minigraph.invocations.*.*.invok_*"])
    import minigraph.invocations  # noqa: F401

    assert patcher.unresolved == {
        "minigraph.invocations.*.*.invok": "no functions match '*.*.invok' in minigraph.invocations: 4 classes seen"
        " (BaseInvocation, AddInvocation, PassInvocation, UpperInvocation), none defines or inherits invok",
        "minigraph.invocations.*.nothing_*": "no functions match '*.nothing_*' in minigraph.invocations: 3 modules"
        " seen (baseinvocation, basic, text), none defines a function or class matching 'nothing_*'",
        "minigraph.invocations.*.*.invok_*": "no functions match '*.*.invok_*' in minigraph.invocations: 4 classes"
        " seen (BaseInvocation, AddInvocation, PassInvocation, UpperInvocation), none defines or inherits a method"
        " matching 'invok_*'"}
    _run_nodes("add", a=1, b=2)
    assert spans_now() == []
