class Transformer2DModel:
    def forward(self, x, fail=False):
        if fail:
            raise ValueError("bad shape")
        return x + 1
