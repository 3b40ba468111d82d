import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TARGETS = HERE / "targets"
PROGRAMS = HERE / "programs"
sys.path.insert(0, str(TARGETS))


@pytest.fixture
def patcher():
    from stepscope.tracing import buffer
    from stepscope.tracing.patch import Patcher

    buffer.take()
    p = Patcher()
    yield p
    p.remove()
    buffer.take()


def spans_now():
    """Finished spans as dicts, oldest first."""
    from stepscope.tracing import buffer

    return [dict(zip(buffer.SPAN_FIELDS, s)) for s in buffer.take()]


def cli_env(store: Path) -> dict:
    env = dict(os.environ)
    env["STEPSCOPE_STORE"] = str(store)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TARGETS), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def run_cli(args, store: Path, cwd: Path | None = None, timeout: int = 300, **kw) -> subprocess.CompletedProcess:
    """Run the real CLI (``python -m stepscope ARGS``) with its own store."""
    return subprocess.run([sys.executable, "-m", "stepscope", *args], cwd=cwd or store.parent, env=cli_env(store),
                          capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "store"
