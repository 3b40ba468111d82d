"""Entry point of the ingest writer's process (``stepscope.ingest.writer``): ``python -m
stepscope.ingest.writer_process STORE FD_IN FD_OUT MAX_BATCH``."""

import sys

from stepscope.ingest.writer import _child

if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
