from ..transformers.transformer_2d import Transformer2DModel


class CrossAttnDownBlock2D:
    def __init__(self):
        self.attentions = [Transformer2DModel(), Transformer2DModel()]

    def forward(self, x):
        for a in self.attentions:
            x = a.forward(x)
        try:
            self.attentions[0].forward(x, fail=True)
        except ValueError:
            pass
        return x
