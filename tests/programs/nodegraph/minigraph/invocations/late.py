"""A node module that the program imports after its first graphs ran."""
from .baseinvocation import BaseInvocation, invocation


@invocation("late")
class LateInvocation(BaseInvocation):
    def invoke(self, context):
        return {"late": len(context)}
