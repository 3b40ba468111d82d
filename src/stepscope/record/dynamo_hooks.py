"""torch.compile (Dynamo) and the recording side: when ``torch._dynamo`` is imported, make the traced code's
compile-time branch visible to it (3.11 mechanism), note traced functions it compiles, let it run the span wrappers as
they are, and mark every code object of the recording side "never convert this frame" (``skip_code``)."""

from __future__ import annotations

import sys
import types

from .memory import history as _memory
from .tracing.patch import Patcher


def own_codes(modules) -> list:
    """Every code object of the functions and methods defined in ``modules`` (nested code included)."""
    out: list = []
    seen: set = set()

    def add(code) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        out.append(code)
        for k in code.co_consts:
            if isinstance(k, types.CodeType):
                add(k)

    for mod in modules:
        for obj in list(vars(mod).values()):
            objs = [obj]
            if isinstance(obj, type) and obj.__module__ == mod.__name__:
                objs = list(vars(obj).values())
            for o in objs:
                o = getattr(o, "__func__", o)  # classmethod / staticmethod
                code = getattr(o, "__code__", None)
                if isinstance(code, types.CodeType) and getattr(o, "__module__", None) == mod.__name__:
                    add(code)
    return out


def skip_own_code(skip) -> None:
    """Mark the recording side's code as "never convert this frame" for Dynamo (``skip(code)``:
    ``torch._dynamo.eval_frame.skip_code``). ``probes.compiled`` stays visible: Dynamo calls it through
    ``assume_constant_result`` while it traces a traced function's compile-time branch."""
    from .sampling import sampler as _sampler, signals as _signals
    from .spans import buffer as _buffer
    from .tracing import probes as _probes

    keep = {_probes.compiled.__code__, _probes.note_compiled.__code__}
    mods = [_probes, _buffer, _sampler, _signals, _memory]
    mon = sys.modules.get("stepscope.record.tracing.monitoring")
    if mon is not None:
        mods.append(mon)
    for code in own_codes(mods):
        if code not in keep:
            try:
                skip(code)
            except Exception:
                pass


def dynamo_loaded(patcher: Patcher):
    """When torch.compile (Dynamo) is imported: make the traced code's compile-time branch visible to it
    (3.11 mechanism: the original body, no probe, no graph break), note traced functions that it compiles
    (they run as part of a graph: "inside a compiled region"), and let it run the remaining span wrappers
    (builtins, ``stepscope.trace``) as they are."""

    def on_import(dynamo) -> None:
        import torch
        from torch._dynamo import trace_rules

        from .tracing import codeswap, probes

        for module in ("stepscope.record.tracing.wrappers", "stepscope.record.steps.hooks", "stepscope.record.tracing.syncs",
                       "stepscope.record.tracing.mirror", "stepscope.record.api"):
            trace_rules.add(module)
        # ``is_dynamo_compiling`` (a function that returns False, which Dynamo folds to True while it traces) costs
        # the traced call half of ``is_compiling`` (which also calls ``torch.jit.is_scripting``): ~40 ns a call
        is_compiling = getattr(torch.compiler, "is_dynamo_compiling", None) or torch.compiler.is_compiling
        codeswap.dynamo_loaded(is_compiling, torch._dynamo.assume_constant_result(probes.compiled))
        # stepscope's own frames are run as they are, never converted into a graph: the timer-signal handler
        # (between any two bytecodes, also while Dynamo's frame hook is set), and the probes, which run as a
        # frame of their own when Dynamo skips the traced code's frame (``nn.Module._wrapped_call_impl``,
        # an inherited ``__call__`` traced through a subclass) and would otherwise be the frame it converts
        skip = getattr(getattr(torch._dynamo, "eval_frame", None), "skip_code", None)
        if skip is not None:
            skip_own_code(skip)
        monitor = getattr(patcher.mechanism, "_monitor", None)
        register = getattr(getattr(dynamo, "convert_frame", None), "register_bytecode_hook", None)
        if monitor is not None and register is not None:  # 3.12+: compiled frames emit no events
            def on_bytecode(code, new_code):
                p = monitor.probes.get(code)
                if p is not None:
                    probes.note_compiled(p.name or p.by_class[0][1])
                return None

            register(on_bytecode)

    return on_import
