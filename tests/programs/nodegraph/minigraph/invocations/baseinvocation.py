"""``BaseInvocation`` and ``@invocation``, which returns a subclass of the class it is given with the same
name, qualname and module (as node-graph apps do to add fields and validation)."""
from __future__ import annotations

REGISTRY: dict[str, type] = {}


class BaseInvocation:
    """A node: ``invoke(context)`` returns its outputs (a dict); the default passes its fields on."""

    type_name = "base"

    def __init__(self, **fields):
        self.fields = fields

    def invoke(self, context) -> dict:
        return dict(self.fields)

    def invoke_internal(self, context) -> dict:
        context.append(self.type_name)
        return self.invoke(context)


def invocation(type_name: str):
    def wrap(cls):
        made = type(cls.__name__, (cls,), {"type_name": type_name, "__module__": cls.__module__,
                                           "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
        REGISTRY[type_name] = made
        return made

    return wrap
