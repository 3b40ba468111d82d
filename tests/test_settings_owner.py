"""One owner per option (issue 43 item 3): ``Settings`` declares each field once with its rule and help, the CLI's
options read them from there; the launch spec is typed on both ends; a run's capture, job and auto-trace facts are
read in one place (``Run.meta``), with the stored JSON as it always was."""

import json

import pytest

from stepscope.cli.run import run as run_cmd
from stepscope.core.model import AutoTrace, Capture, Run, RunMeta
from stepscope.record.launchspec import FollowSpec, LaunchSpec
from stepscope.record.settings import Settings, check_field, check_flags, field_info

#: the stored settings' keys, in order (the store's JSON as it was before the fields were declared with their rules)
STORED_KEYS = ["functions_to_trace", "profiles_hz", "max_stack_depth", "flush_interval_s", "transaction", "store",
               "device_trace", "device_stacks", "device_steps", "compile_report", "sampler", "memory", "cuda_peaks",
               "memory_history", "children", "step_functions", "labels", "app", "overhead_budget", "loop_rules", "extra"]


def test_stored_settings_keep_their_keys():
    assert list(Settings().to_dict()) == STORED_KEYS


def test_one_rule_under_the_field_or_the_flag():
    with pytest.raises(ValueError, match=r"^profiles_hz: must be 0 \(off\) or between 0.01 and 10000, got 99999$"):
        Settings(profiles_hz=99999)
    with pytest.raises(ValueError, match=r"^--hz: must be 0 \(off\) or between 0.01 and 10000, got 99999$"):
        check_flags(profiles_hz=99999)
    with pytest.raises(ValueError, match=r"^--cuda-peaks: must be safe or reset, got 'x'$"):
        check_flags(sampler="auto", cuda_peaks="x")
    with pytest.raises(ValueError, match=r"^device_steps: must be an integer between 1 and 1000000, got 0$"):
        check_field("device_steps", 0)
    assert check_flags(profiles_hz=None, device_steps=3, labels=["a.b={x}"]) == {"device_steps": 3,
                                                                                   "labels": {"a.b": "{x}"}}
    assert Settings(device_steps=2).device_trace  # (device_steps implies the device trace)


def _decls(opt) -> tuple[str, ...]:
    """A click option's declarations as ``Settings`` spells them (``--memory/--no-memory``, ``--trace``, ``-t``)."""
    if opt.secondary_opts:
        return tuple(f"{a}/{b}" for a, b in zip(opt.opts, opt.secondary_opts))
    return tuple(opt.opts)


def test_the_run_options_read_their_help_and_flags_from_settings():
    params = {p.name: p for p in run_cmd.params}
    for param, name in [("device_trace", "device_trace"), ("sampler", "sampler"), ("cuda_peaks", "cuda_peaks"),
                        ("memory", "memory"), ("children", "children"), ("step", "step_functions"),
                        ("label", "labels"), ("app", "app"), ("syncs", "syncs"), ("trace", "functions_to_trace")]:
        opt, info = params[param], field_info(name)
        assert opt.help == info.help and _decls(opt) == info.flags, param
    assert params["hz"].help.startswith(field_info("profiles_hz").help)
    # the field's type and default: flags, --x/--no-x pairs, numbers, repeatables
    assert params["memory"].is_flag and params["memory"].default is True and params["device_trace"].default is False
    assert params["device_steps"].type.name == "integer" and params["hz"].type.name == "float"
    assert params["hz"].default is None and params["sampler"].default == "auto" and params["cuda_peaks"].default == "safe"
    assert params["trace"].multiple and params["label"].multiple and not params["sampler"].multiple


def test_launch_spec_round_trips_with_its_keys():
    s = Settings(functions_to_trace=("a.b",), store="/x", device_trace=True, labels={"a.b": "{x}"})
    spec = LaunchSpec(s, run_id="r1", command=("python", "p.py"), signal_fd=7)
    doc = json.loads(spec.to_env())
    assert set(doc) == {"run_id", "settings", "command", "server_only", "signal_fd", "parent_run", "process"}
    assert doc["settings"] == s.to_dict() and doc["command"] == ["python", "p.py"]
    assert LaunchSpec.from_env(spec.to_env()) == spec
    assert LaunchSpec.from_env(None) == LaunchSpec()
    follow = spec.followed()
    assert json.loads(follow.to_env()) == {"run": "r1", "settings": s.to_dict()}
    assert FollowSpec.from_env(follow.to_env()) == follow
    child = follow.launch(["python", "w.py"], {"how": "exec"})
    assert (child.parent_run, child.command, child.process, child.run_id) == ("r1", ("python", "w.py"), {"how": "exec"},
                                                                              None)
    server = FollowSpec("r1", s, server_only=True)
    assert json.loads(server.to_env())["server_only"] is True
    assert server.launch(["python", "w.py"], {}).server_only and server.launch(["python"], {}).parent_run is None


@pytest.mark.parametrize("extra", [
    {"capture": {"pid": 12, "span": "U.forward", "steps": 3, "duration_s": None}},
    {"capture": {"pid": 12, "method": "py-spy"}},
    {"job": "j1"},
    {"auto_trace": {"pass": 1}},
    {"auto_trace": {"pass": 1, "second_run": "r2", "added": ["a.b"]}},
    {"auto_trace": {"pass": 2, "first_run": "r1", "added": []}},
])
def test_run_facts_read_and_written_as_stored(extra):
    meta = Run(id="r", command=[], settings={"profiles_hz": 101.0, "extra": extra}).meta
    assert meta.to_extra() == extra and json.dumps(meta.to_extra()) == json.dumps(extra)


def test_run_facts_of_runs_without_them():
    for settings in ({}, {"extra": {}}, {"extra": None}, {"extra": []}, None, []):
        assert RunMeta.of(settings) == RunMeta()
    assert Run(id="r", command=[]).meta.capture is None
    meta = RunMeta(capture=Capture(1, "s", 2, None), job="j", auto_trace=AutoTrace(2, first_run="a", added=["x"]))
    assert RunMeta.of({"extra": meta.to_extra()}) == meta
    kept = RunMeta(auto_trace=AutoTrace(1, second_run="b")).into({"profiles_hz": 1, "extra": {"job": "j"}})
    assert kept == {"profiles_hz": 1, "extra": {"job": "j", "auto_trace": {"pass": 1, "second_run": "b"}}}
