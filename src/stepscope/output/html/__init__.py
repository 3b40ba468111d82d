"""The self-contained HTML report: a view model built from a run (``view.py``) and its renderer (``html.py``)."""
