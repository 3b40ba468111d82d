"""``stepscope keys add|list|rm``: the project keys the ingest endpoint accepts (a DSN's public key)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..store import keys as keystore
from .common import JsonOpt, StoreOpt, handles_errors, open_store, out, print_json

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Project keys for `stepscope serve` (the sentry_key in a DSN).")
HostOpt = typer.Option("127.0.0.1", "--host", help="Host to put in the printed DSN.")
PortOpt = typer.Option(8969, "--port", help="Port to put in the printed DSN.")


@app.command("add")
@handles_errors
def add(project: str = typer.Option("1", "--project", help="Project id (the DSN's last part)."),
        label: str = typer.Option("", "--label", help="A note for yourself."), host: str = HostOpt, port: int = PortOpt,
        store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Make a key; prints the DSN to give sentry_sdk.init()."""
    k = keystore.add(open_store(store, create=True), project, label)
    if as_json:
        print_json({**dataclasses.asdict(k), "dsn": k.dsn(host, port)})
    else:
        out.print(k.dsn(host, port), soft_wrap=True)


@app.command("list")
@handles_errors
def list_cmd(host: str = HostOpt, port: int = PortOpt, store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """The keys and their DSNs."""
    ks = keystore.list_keys(open_store(store, create=True))
    if as_json:
        print_json({"keys": [{**dataclasses.asdict(k), "dsn": k.dsn(host, port)} for k in ks]})
        return
    if not ks:
        out.print("No keys (`stepscope keys add` makes one).")
        return
    t = Table("project", "key", "label", "DSN")
    for k in ks:
        t.add_row(k.project_id, k.public_key, k.label, k.dsn(host, port))
    out.print(t)


@app.command("rm")
@handles_errors
def rm(key: str = typer.Argument(..., help="The key, or a unique prefix (4+ characters)."),
       store: Optional[Path] = StoreOpt, as_json: bool = JsonOpt) -> None:
    """Delete a key: envelopes sent with it get 401 from then on."""
    k = keystore.remove(open_store(store, create=True), key)
    if as_json:
        print_json({"deleted": k.public_key})
    else:
        out.print(f"deleted key {k.public_key} (project {k.project_id})")
