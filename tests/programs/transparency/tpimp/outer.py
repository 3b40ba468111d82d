from . import good
from . import broken  # noqa: F401  (fails: nested)
