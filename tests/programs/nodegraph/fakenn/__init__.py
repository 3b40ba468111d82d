"""A stand-in for ``torch.nn``: a base class of another package whose methods are plumbing to the app."""


class Module:
    def __init__(self):
        self.training = True
        self.device = "cpu"

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def to(self, device):
        self.device = device
        return self

    def parameters(self):
        return [v for v in vars(self).values() if isinstance(v, (int, float))]

    def train(self, mode=True):
        self.training = mode
        return self
