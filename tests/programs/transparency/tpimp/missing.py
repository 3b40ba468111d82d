from .good import nothing_of_that_name  # noqa: F401  (an ImportError: every importlib frame trimmed)
