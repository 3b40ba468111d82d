from sstargets.funcs import add as add_alias
from sstargets.funcs import add


def call_alias():
    return add_alias(1)


def call_add():
    return add(1)
