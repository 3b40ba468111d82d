"""A package some of whose modules fail as they import (the import-errors transparency case)."""
