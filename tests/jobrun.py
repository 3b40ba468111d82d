"""The two-process run of tests/programs/otlp_job.py that the OTLP and Sentry export tests send."""
import sys

from conftest import PROGRAMS, run_cli

from stepscope.store.db import Store

JOB = str(PROGRAMS / "otlp_job.py")
TRACE = ["-t", "__main__.work", "-t", "__main__.leaf", "-t", "__main__.boom"]


def record_job(store) -> str:
    """Record otlp_job.py starting itself again as a child (sampled at 499 Hz) in ``store``; its run id."""
    r = run_cli(["run", "-q", "--hz", "499", *TRACE, "--", sys.executable, JOB, "child"], store)
    assert r.returncode == 0, r.stderr
    st = Store(store)
    try:
        rid = st.resolve_id(None)
        assert len(st.process_runs(rid)) == 1, "the child process is a process run of the job"
    finally:
        st.close()
    return rid
