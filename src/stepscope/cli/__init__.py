"""The command line: one module per subcommand (``run``, ``demo``, ``runs``/``rm``, ``report``, ``export``,
``explain``, ``suggest``, ``diff``, ``device``, ``capture``, ``serve``, ``keys``, ``bench``, ``try_``: ``try``);
``main.py`` is the click group that imports only the subcommand named (``--help``: none). ``common.py``: what every
subcommand shares (the store option, options made from ``Settings`` fields, one-line errors, JSON output);
``tracefile.py``: ``--trace-file`` (TOML or text). A subcommand parses its options and calls the analyses, the
store and the renderers, imported when it runs.
"""
