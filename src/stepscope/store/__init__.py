"""The run store: one SQLite database (WAL) under ``.stepscope/`` plus a folder of files per run. ``db`` (``Store``:
connection, writes, named reads, a run's folder), ``schema`` (tables, version, migrations), ``reader`` (the one
reader of a run, as numpy columns), ``jobjoin`` (a job's processes read as one run), ``spanblock``,
``sampleblock``, ``profileblock`` (binary and JSON blocks of spans, samples, frames), ``listing``, ``keys``,
``bench`` (lists, project keys, benchmark results). SQL lives here and in the ingest writer only.
"""

from .db import Store, StoreError, default_store_path

__all__ = ["Store", "StoreError", "default_store_path"]
