"""A program profiles itself with cProfile for 1.5 s while another thread of its own waits: on 3.12+ cProfile
(sys.monitoring) sees every thread's calls, so stepscope's recorder thread must make none meanwhile (it would
look at the other thread, read memory and write spans about 150 and 1.5 times in that window)."""
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
print("cprofile", sorted({s.code if isinstance(s.code, str) else s.code.co_name for s in pr.getstats()}))
