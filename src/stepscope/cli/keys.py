"""``stepscope keys add|list|rm``: the project keys the ingest endpoint accepts (a DSN's public key)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import click

from .common import Group, JsonOpt, StoreOpt, argument, handles_errors, open_store, out, print_json

keys = Group("keys", no_args_is_help=True, help="Project keys for `stepscope serve` (the sentry_key in a DSN).")
HostOpt = click.option("--host", default="127.0.0.1", help="Host to put in the printed DSN.")
PortOpt = click.option("--port", type=int, default=8969, help="Port to put in the printed DSN.")


@keys.command("add")
@click.option("--project", default="1", help="Project id (the DSN's last part).")
@click.option("--label", default="", show_default=False, help="A note for yourself.")
@HostOpt
@PortOpt
@StoreOpt
@JsonOpt
@handles_errors
def add(project: str, label: str, host: str, port: int, store: Optional[Path], as_json: bool) -> None:
    """Make a key; prints the DSN to give sentry_sdk.init()."""
    from ..store import keys as keystore

    k = keystore.add(open_store(store, create=True), project, label)
    if as_json:
        print_json({**dataclasses.asdict(k), "dsn": k.dsn(host, port)})
    else:
        out.print(k.dsn(host, port), soft_wrap=True)


@keys.command("list")
@HostOpt
@PortOpt
@StoreOpt
@JsonOpt
@handles_errors
def list_cmd(host: str, port: int, store: Optional[Path], as_json: bool) -> None:
    """The keys and their DSNs."""
    from ..store import keys as keystore

    ks = keystore.list_keys(open_store(store, create=True))
    if as_json:
        print_json({"keys": [{**dataclasses.asdict(k), "dsn": k.dsn(host, port)} for k in ks]})
        return
    if not ks:
        out.print("No keys (`stepscope keys add` makes one).")
        return
    from rich.table import Table

    t = Table("project", "key", "label", "DSN")
    for k in ks:
        t.add_row(k.project_id, k.public_key, k.label, k.dsn(host, port))
    out.print(t)


@keys.command("rm")
@argument("key", help="The key, or a unique prefix (4+ characters).")
@StoreOpt
@JsonOpt
@handles_errors
def rm(key: str, store: Optional[Path], as_json: bool) -> None:
    """Delete a key: envelopes sent with it get 401 from then on."""
    from ..store import keys as keystore

    k = keystore.remove(open_store(store, create=True), key)
    if as_json:
        print_json({"deleted": k.public_key})
    else:
        out.print(f"deleted key {k.public_key} (project {k.project_id})")
