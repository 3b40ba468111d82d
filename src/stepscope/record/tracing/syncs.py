"""Host-device sync sites: spans around the tensor calls that make the host wait for the device.

``SYNC_TARGETS`` are traced (op ``"sync"``) when a run records its device timeline (or asks for
``--syncs``): ``Tensor.item``, ``Tensor.tolist``, ``Tensor.nonzero``, ``torch.nonzero``,
``Tensor.cpu``, ``Tensor.numpy`` and ``Tensor.__bool__`` (``if tensor:``). On a GPU each of these waits for the device; on a CPU they cost
nothing extra, but the inventory tells where a GPU would stall. Each span carries its *call site*, the
first caller frame outside torch and stepscope, as OpenTelemetry's code attributes (``code.filepath``,
``code.lineno``, ``code.function``): the Python line behind the sync. Only these rare calls pay for the
frame walk.
"""

from __future__ import annotations

import os
import sys

SYNC_TARGETS = ["torch.Tensor.item", "torch.Tensor.tolist", "torch.Tensor.nonzero", "torch.nonzero",
                "torch.Tensor.cpu", "torch.Tensor.numpy", "torch.Tensor.__bool__"]

_SKIP = (os.sep + "torch" + os.sep, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class SyncSite:
    """Hooks for a sync target: span op "sync" and the call site as attributes."""

    __slots__ = ("kind",)
    op = "sync"

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def enter(self, args: tuple, kwargs: dict) -> dict:
        f = sys._getframe(2)
        while f is not None and any(s in f.f_code.co_filename for s in _SKIP):
            f = f.f_back
        attrs = {"sync": self.kind}
        if f is not None:
            attrs["code.filepath"] = f.f_code.co_filename
            attrs["code.lineno"] = f.f_lineno
            attrs["code.function"] = getattr(f.f_code, "co_qualname", f.f_code.co_name)
        t = args[0] if args else None
        dev = getattr(t, "device", None)
        if dev is not None:
            attrs["device"] = str(dev)
        return attrs

    def exit(self) -> None:
        return None


def hooks_for(owner: object, attr: str) -> SyncSite | None:
    """SyncSite hooks for ``torch.Tensor.<attr>`` / ``torch.nonzero``, else None (torch is not imported here)."""
    name = getattr(owner, "__name__", "")
    if isinstance(owner, type) and name == "Tensor" and owner.__module__ in ("torch", "torch._tensor") and attr in (
            "item", "tolist", "nonzero", "cpu", "numpy", "__bool__"):
        return SyncSite(f".{attr}()")
    if not isinstance(owner, type) and name == "torch" and attr == "nonzero":
        return SyncSite("torch.nonzero")
    return None
