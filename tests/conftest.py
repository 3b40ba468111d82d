import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TARGETS = HERE / "targets"
PROGRAMS = HERE / "programs"
sys.path.insert(0, str(TARGETS))


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: the test compares timings of runs it records, so it runs with the "
                            "other pytest-xdist worker held between tests (see ``_alone``)")


@pytest.fixture(autouse=True)
def _alone(request, tmp_path_factory):
    """Under pytest-xdist, a test marked ``alone`` has the machine to itself: it waits for the other worker's test in
    flight to end, and the other worker starts no test until it is done. Two runs of the same program differ by
    more than their steps' noise when a memory-bound test runs on the other core during one of them (a CI run once
    saw 1.27x with the CPU wait unchanged), which is the machine's doing, not the diff's.

    Two ``flock`` locks in the workers' shared temporary folder, always taken gate first: every test passes through
    the gate (shared, at once released) and holds the main lock shared while it runs; an ``alone`` test holds the
    gate exclusive, so no new test starts, then the main lock exclusive, once the test in flight has ended."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    root = tmp_path_factory.getbasetemp().parent
    alone = request.node.get_closest_marker("alone") is not None
    with open(root / "alone.gate", "a") as gate, open(root / "alone.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture
def patcher():
    from stepscope.record.spans import buffer
    from stepscope.record.tracing.patch import Patcher

    buffer.take()
    p = Patcher()
    yield p
    p.remove()
    buffer.take()


def spans_now():
    """Finished spans as dicts, oldest first."""
    from stepscope.record.spans import buffer

    return [dict(zip(buffer.SPAN_FIELDS, s)) for s in buffer.take()]


def span_objects(st, run_id: str) -> list:
    """Run ``run_id``'s spans as ``Span`` objects in ``(start_ns, span_id)`` order, read by
    ``store.spanblock.iter_spans`` (the stdlib reader of rows and blocks, a tuple a span): the reference that the
    store's column reader (``store.reader.load_run``) and the analyses on its columns are checked against."""
    from stepscope.core.model import Span
    from stepscope.store import spanblock

    rows = sorted(spanblock.iter_spans(st.conn, run_id), key=lambda r: (r[4], r[0]))
    return [Span(r[0], r[1], r[2], r[3] or "function", r[4], r[5], r[6] or 0, "error" if r[7] else "ok", r[7],
                 r[8] or {}) for r in rows]


def with_span_objects(st, data):
    """``data`` (a ``load_run`` result) with its spans as a list of ``Span`` objects (``span_objects``) in place of
    the columns: what an analysis gives on objects, to compare with what it gives on the columns."""
    data.spans = span_objects(st, data.run.id)
    return data


def wait_until(cond, timeout: float, what, *, interval: float = 0.05, ignore: tuple = ()):
    """Poll ``cond()`` until it returns something truthy and return that value; once ``timeout`` s pass first,
    fail the test saying that ``what`` did not happen (a string, or a callable giving one then, to say how far
    it got) and the last value or exception seen. For a test that waits for something asynchronous (a flush, a
    writer, a process, a window closing): a condition with a deadline, never a fixed sleep. Exceptions of the
    types in ``ignore`` (a store or a file that does not exist yet) count as "not yet"; any other goes up at
    once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = cond()
        except ignore as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            if callable(what):
                try:
                    what = what()
                except Exception as e:  # (how far it got could not be read: say why)
                    what = f"<{e!r}>"
            pytest.fail(f"timed out after {timeout:g} s waiting for {what} (last seen: {last!r:.500})", pytrace=False)
        time.sleep(interval)


def process_ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie, not reaped yet, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def default_signals() -> None:
    """``preexec_fn`` for a test that signals the process it starts: SIGINT, SIGQUIT and SIGHUP back to their
    default action. A shell starts a background job with SIGINT and SIGQUIT ignored (and ``nohup`` SIGHUP), and
    an ignored signal stays ignored across exec: a suite run that way would test a program that ignores them."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


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


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def browser_or_skip():
    """Playwright's sync API when Debian's chromium is installed; skip (or fail under
    STEPSCOPE_REQUIRE_BROWSER) otherwise. Never a browser download."""
    import shutil

    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        if os.environ.get("STEPSCOPE_REQUIRE_BROWSER"):
            pytest.fail("STEPSCOPE_REQUIRE_BROWSER is set but /usr/bin/chromium is missing")
        pytest.skip("Debian chromium not installed (apt-get install chromium)")
    return pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser_page():
    """One headless Chromium page per test module; ``page.errors`` collects the page's JS errors."""
    pw = browser_or_skip()
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.errors = errors
        yield pg
        browser.close()
