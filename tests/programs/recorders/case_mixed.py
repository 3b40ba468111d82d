import mixmod

print(mixmod.threaded())
