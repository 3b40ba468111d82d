from sstargets import funcs

print(funcs.add(1))
