"""stepscope in notebooks and from Python: ``stepscope.profile`` (``handle``: a block recorded as a run, the run as an
object), the IPython magics (``magics``: ``%%stepscope``, ``%stepscope_diff``) and the run's columns (``columns``).
What a notebook displays is drawn by ``output.html.inline``."""
