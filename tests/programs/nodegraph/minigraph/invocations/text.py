from .baseinvocation import BaseInvocation, invocation


@invocation("upper")
class UpperInvocation(BaseInvocation):
    def invoke(self, context):
        return {"text": str(self.fields.get("text", "")).upper()}


def helper(x):
    return x
