"""What `stepscope run` hands the program's launcher, and what a followed process gets: two typed specs, each read and
written by one pair of functions on both ends (stdlib only: the launcher and the start-up hook read them).

- ``LaunchSpec`` travels in ``ENV_VAR`` (``STEPSCOPE_LAUNCH``) to ``python -m stepscope.record.launch``: written by
  ``program.run.run_program`` (the top program) and by ``processes`` (a new interpreter of the job, from its
  ``FollowSpec``); read, and removed from the environment, by ``launch.main``.
- ``FollowSpec`` travels in ``FOLLOW_VAR`` (``STEPSCOPE_FOLLOW``) to every Python process the program starts (the
  one variable of stepscope's that the program sees: its own children need it to be followed in turn); written by
  ``run_program``, read by ``processes``' start-up hook.

Both are JSON with the keys they always had (``LaunchSpec``: ``settings``, ``run_id``, ``command``, ``server_only``,
``signal_fd``, ``parent_run``, ``process``; ``FollowSpec``: ``run``, ``settings``, ``server_only`` when set), the
settings as ``Settings.to_dict`` writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .settings import Settings

#: the launcher's variable: a process that has it is being launched already
ENV_VAR = "STEPSCOPE_LAUNCH"
#: the environment variable that makes a Python process started below ``stepscope run`` record itself
FOLLOW_VAR = "STEPSCOPE_FOLLOW"


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """How the launcher runs the program. ``settings``: what to record (``store`` resolved); ``run_id``: the run that
    `stepscope run` created for it (None: the launcher makes one: ``stepscope.init``'s, or a process run with
    ``parent_run``); ``command``: the program's command line as the user gave it (None: ``sys.argv``);
    ``server_only``: record nothing, start the control server (`stepscope run --server`); ``signal_fd``: the write
    end of the pipe to `stepscope run` that the program's signal wakeup fd becomes (``launch._report_signals``);
    ``parent_run``: the job's top run, for a process that the program started (``processes``); ``process``: that
    process's facts (``core.procs.run_facts``)."""

    settings: Settings = field(default_factory=Settings)
    run_id: str | None = None
    command: tuple[str, ...] | None = None
    server_only: bool = False
    signal_fd: int | None = None
    parent_run: str | None = None
    process: dict[str, Any] = field(default_factory=dict)

    def to_env(self) -> str:
        """The value of ``ENV_VAR`` (JSON)."""
        return json.dumps({"run_id": self.run_id, "settings": self.settings.to_dict(),
                           "command": list(self.command) if self.command is not None else None,
                           "server_only": self.server_only, "signal_fd": self.signal_fd,
                           "parent_run": self.parent_run, "process": dict(self.process)})

    @classmethod
    def from_env(cls, raw: str | None) -> "LaunchSpec":
        """The spec in ``raw`` (``ENV_VAR``'s value; None or empty: the defaults, a program launched by hand).
        Raises ValueError for JSON that is not a spec, or settings out of their range."""
        d = json.loads(raw) if raw else {}
        if not isinstance(d, dict):
            raise ValueError(f"{ENV_VAR}: expected a JSON object")
        command = d.get("command")
        fd = d.get("signal_fd")
        return cls(Settings.from_dict(d.get("settings") or {}), d.get("run_id"),
                   tuple(command) if command else None, bool(d.get("server_only")),
                   int(fd) if fd is not None else None, d.get("parent_run"), dict(d.get("process") or {}))

    def followed(self) -> "FollowSpec":
        """What the processes that this program starts get (``FOLLOW_VAR``): its run and settings."""
        return FollowSpec(self.run_id or "", self.settings, self.server_only)


@dataclass(frozen=True, slots=True)
class FollowSpec:
    """What a Python process started below `stepscope run` records: ``run`` (the job's top run), ``settings``, and
    ``server_only`` (`stepscope run --server`: it records nothing and starts a control server of its own)."""

    run: str
    settings: Settings
    server_only: bool = False

    def to_env(self) -> str:
        """The value of ``FOLLOW_VAR`` (JSON)."""
        return json.dumps({"run": self.run, "settings": self.settings.to_dict(),
                           **({"server_only": True} if self.server_only else {})})

    @classmethod
    def from_env(cls, raw: str) -> "FollowSpec":
        """The spec in ``raw`` (``FOLLOW_VAR``'s value). Raises ValueError (or KeyError: no ``run``) for one that
        is not a spec."""
        d = json.loads(raw)
        if not isinstance(d, dict):
            raise ValueError(f"{FOLLOW_VAR}: expected a JSON object")
        return cls(d["run"], Settings.from_dict(d.get("settings") or {}), bool(d.get("server_only")))

    def launch(self, command: list[str], process: dict[str, Any]) -> LaunchSpec:
        """The launcher's spec for a process of the job running ``command`` (its ``sys.orig_argv``), with its facts
        ``process``: a process run of ``run`` (``parent_run``), or, with ``server_only``, a control server."""
        if self.server_only:
            return LaunchSpec(self.settings, command=tuple(command), server_only=True)
        return LaunchSpec(self.settings, command=tuple(command), parent_run=self.run, process=dict(process))
