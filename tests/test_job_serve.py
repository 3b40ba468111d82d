"""Two `stepscope run`s of one job (`--job`), each recorded in its own store (as on two machines) and sent with
`--export otlp=URL` to one `stepscope serve`: joined there into one run, each run a process of it, every span kept."""

import json
import sys
import textwrap
import urllib.parse

import pytest
from conftest import run_cli
from serve_helpers import Server

from stepscope.store.db import Store
from stepscope.store.reader import load_run

pytest.importorskip("opentelemetry.sdk")

PROG = textwrap.dedent("""\
    import sys, time

    def step(i):
        time.sleep(0.002)

    for i in range(int(sys.argv[1])):
        step(i)
    print("done", sys.argv[1])
""")


def test_two_runs_of_one_job_are_one_run_in_serve(tmp_path, monkeypatch):
    served = tmp_path / "served"
    r = run_cli(["keys", "add", "--json"], served)
    assert r.returncode == 0, r.stderr
    key = json.loads(r.stdout)["public_key"]
    prog = tmp_path / "work.py"
    prog.write_text(PROG)
    srv = Server(served)
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS",
                           "x-sentry-auth=" + urllib.parse.quote(f"Sentry sentry_key={key}, sentry_version=7"))
        for n, host in ((3, "a"), (5, "b")):
            r = run_cli(["run", "--job", "job-42", "--export", f"otlp={srv.url}", "-t", "__main__.step", "--",
                         sys.executable, str(prog), str(n)], tmp_path / f"host-{host}", cwd=tmp_path)
            assert r.returncode == 0 and f"done {n}" in r.stdout, r.stderr
            assert "--export" not in r.stderr, r.stderr  # sent: no failure line
    finally:
        srv.stop()
    st = Store(served)
    try:
        listed = st.list_runs()
        assert len(listed) == 1, [x.id for x in listed]  # one job: its runs are processes of it
        data = load_run(st, listed[0].id)
    finally:
        st.close()
    assert len(data.processes) == 2
    steps = [s for s in data.spans if s.name == "__main__.step"]
    assert len(steps) == 8 and all(s.end_ns - s.start_ns >= 2_000_000 for s in steps)
    r = run_cli(["run", "--job", "", "--", sys.executable, str(prog), "1"], tmp_path / "x", cwd=tmp_path)
    assert r.returncode == 2 and "--job" in r.stderr and "Traceback" not in r.stderr
