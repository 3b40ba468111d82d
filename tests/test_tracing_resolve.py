"""Resolving qualified names and patching them, without running a program."""

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
    from stepscope.tracing.patch import normalize_targets

    assert normalize_targets([{"qualified_name": "a.b"}, "c.d", "a.b"]) == ["a.b", "c.d"]
    with pytest.raises(ValueError, match=r"functions_to_trace\[1\]"):
        normalize_targets(["a.b", {"name": "x"}])


def test_functions_still_pickle_by_reference(patcher):
    from sstargets import funcs

    patcher.add(["sstargets.funcs.add"])
    assert pickle.loads(pickle.dumps(funcs.add)) is funcs.add


def test_glob_matches_methods_defined_there_not_inherited(patcher):
    from sstargets.classes import Base, Sub

    patcher.add(["sstargets.classes.*.forward"])
    assert "sstargets.classes.Sub.forward" not in patcher.resolved["sstargets.classes.*.forward"]
    assert "sstargets.classes.Base.forward" in patcher.resolved["sstargets.classes.*.forward"]
    Sub().forward(1)
    assert names(spans_now()) == ["sstargets.classes.Base.forward"]  # one span, under the defining class
