"""The run store: one SQLite database (WAL) under ``.stepscope/`` plus a folder of files per run."""

from .db import Store, StoreError, default_store_path

__all__ = ["Store", "StoreError", "default_store_path"]
