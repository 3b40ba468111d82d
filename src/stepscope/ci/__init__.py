"""stepscope in tests and CI: a pytest plugin, budgets, and the rule that fails a build on a slow-down.

- ``pytest_plugin``: the plugin that installing stepscope registers (``pytest11``); it does nothing unless asked
  (``--stepscope``, a ``@pytest.mark.stepscope`` marker): at module level it imports the standard library and pytest
  only;
- ``testrun``: one test's call recorded as a run, its budgets and its baseline checked;
- ``budgets``: budgets parsed and checked against a run (pure);
- ``gate``: the rule shared with ``stepscope diff --fail-if`` (pure).
"""
