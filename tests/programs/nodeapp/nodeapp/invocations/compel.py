import torch

from .baseinvocation import BaseInvocation, invocation


@invocation("compel")
class CompelInvocation(BaseInvocation):
    """Prompt -> conditioning (and the empty prompt's, for classifier-free guidance)."""

    def invoke(self, context):
        pipe = context.model
        out = []
        for text in ("", self.fields.get("prompt", "")):
            ids = pipe.tokenizer(text, padding="max_length", max_length=pipe.tokenizer.model_max_length,
                                 truncation=True, return_tensors="pt").input_ids
            with torch.no_grad():
                out.append(pipe.text_encoder(ids)[0])
        return {"conditioning": torch.cat(out)}
