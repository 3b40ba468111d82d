"""A program profiles itself with cProfile for 1.5 s while another thread of its own waits: on 3.12+ cProfile
(sys.monitoring) sees every thread's calls, so stepscope's recorder thread must make none meanwhile (it would
look at the other thread, read memory and write spans about 150 and 1.5 times in that window). The second line
counts the calls of everything but the program's own functions (a plain run: none)."""
import cProfile, threading, time, tpmod
done = threading.Event()
th = threading.Thread(target=done.wait)
th.start()
pr = cProfile.Profile()
pr.enable()
end = time.monotonic() + 1.5
while time.monotonic() < end:
    tpmod.handle(1)
    time.sleep(0.004)
pr.disable()
done.set()
th.join()
stats = pr.getstats()
name = lambda s: s.code if isinstance(s.code, str) else s.code.co_name
print("cprofile", sorted({name(s) for s in stats}))
own = {"<built-in method time.monotonic>", "<built-in method time.sleep>", "<method 'disable' of '_lsprof.Profiler' objects>",
       "handle"}
others = {}
for s in stats:
    if name(s) not in own:
        others[name(s)] = others.get(name(s), 0) + s.callcount
print("others", sorted(others.items()))
