"""GitHub-flavoured Markdown of analysis results, for a CI job's summary (``$GITHUB_STEP_SUMMARY``) or a pull
request comment: pure functions from a result to a string.

- ``diff``: ``stepscope diff --format markdown`` (``analysis.diff.Diff``).
"""
