def work(x):
    return x * 2
