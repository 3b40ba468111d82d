class Base:
    def forward(self, x):
        return x + 1

    @staticmethod
    def static(x):
        return x * 10

    @classmethod
    def make(cls):
        return cls.__name__

    @property
    def prop(self):
        return 5


class Sub(Base):
    pass


class SubSub(Sub):
    pass


class Other(Base):
    pass


class Outer:
    class Inner:
        def method(self):
            return "inner"


class Processor:
    def __call__(self, x):
        return x


class Processor2_0:
    def __call__(self, x):
        return -x


def helper():
    return "helper"
