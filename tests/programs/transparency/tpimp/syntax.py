def work(x):
    return x +
