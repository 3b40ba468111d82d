from .baseinvocation import BaseInvocation, invocation


@invocation("add")
class AddInvocation(BaseInvocation):
    """a + b."""

    def invoke(self, context):
        return {"sum": self.fields["a"] + self.fields["b"]}


@invocation("pass")
class PassInvocation(BaseInvocation):
    """The base's invoke: its fields, passed on."""
