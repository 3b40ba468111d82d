"""The step hooks' frame reads for the outermost denoiser call (steps/hooks.py: ``_outer_denoiser``, ``_denoiser_args``)
in C (``_native.outer_denoiser``, ``_native.frame_args``) against the Python walk and ``f_locals``, on stand-in modules
named as diffusers' denoisers (no diffusers, no torch): the same frames and arguments, nested or not, with a cell
variable among the arguments and a keyword-only ``timestep``."""

import sys
import types

import pytest

from stepscope.record import native
from stepscope.record.steps import hooks

SOURCE = '''
import sys

class Unet:
    def forward(self, sample, timestep, encoder_hidden_states=None, *, extra=None):
        return self.inner.forward(sample, timestep) if self.inner is not None else probe(sys._getframe())

class Block:
    def forward(self, x, t):
        captured = lambda: x  # x is a cell variable: the frame holds its cell
        return probe(sys._getframe())

class Kw:
    def forward(self, sample, *, timestep):
        return probe(sys._getframe())
'''


def _both(monkeypatch, frame) -> dict:
    """What the C reads and the Python fallback (``f_back``, ``f_locals``) find from ``frame`` (a live frame: read
    while it runs), each ``(outer frame, its arguments, the arguments of frame)``."""
    out = {}
    for how in ("c", "python"):
        with monkeypatch.context() as m:
            m.setattr(hooks, "_is_denoiser", {})
            m.setattr(hooks, "_arg_plan", {})
            if how == "python":
                m.setattr(hooks, "_outer_c", None)
                m.setattr(hooks, "_frame_args", None)
            outer = hooks._outer_denoiser(frame)
            out[how] = (outer, hooks._denoiser_args(outer) if outer is not None else None, hooks._denoiser_args(frame))
    return out


@pytest.fixture
def denoisers(monkeypatch):
    mods = {}
    for name in ("diffusers.models.unets.stepscope_test", "diffusers.models.transformers.stepscope_test"):
        m = types.ModuleType(name)
        m.probe = lambda frame: (frame, frame.f_back, _both(monkeypatch, frame))
        exec(compile(SOURCE, name.replace(".", "/") + ".py", "exec"), m.__dict__)
        monkeypatch.setitem(sys.modules, name, m)
        mods[name.split(".")[2]] = m
    return mods


def test_the_outermost_denoiser_and_its_arguments_as_the_python_walk_finds_them(denoisers, monkeypatch):
    if getattr(native.ext, "outer_denoiser", None) is None:
        pytest.skip(f"no C stack walk here ({native.load_error or 'this interpreter'})")
    unets, xf = denoisers["unets"], denoisers["transformers"]
    sample, t, t2 = object(), object(), object()

    outer = unets.Unet()
    outer.inner = xf.Block()
    leaf, back, got = outer.forward(sample, t)  # the Block's frame, called inside an (untraced) Unet forward
    assert back.f_code is unets.Unet.forward.__code__
    assert got["c"] == got["python"] == (back, (outer, sample, t), (outer.inner, sample, t))  # (x: a cell's content)

    alone = unets.Unet()
    alone.inner = None
    top, _, got = alone.forward(sample, t2, extra=1)
    assert got["c"] == got["python"] == (top, (alone, sample, t2), (alone, sample, t2))

    kw = xf.Kw()
    frame, _, got = kw.forward(sample, timestep=t)
    assert got["c"] == got["python"] == (frame, (kw, sample, t), (kw, sample, t))

    def not_a_denoiser():
        return _both(monkeypatch, sys._getframe())

    got = not_a_denoiser()
    assert got["c"][0] is None and got["python"][0] is None
