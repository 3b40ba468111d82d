import sys, tpmod
seen = []
def prof(frame, event, arg):
    if event in ("call", "c_call"):
        seen.append(frame.f_code.co_name if event == "call" else getattr(arg, "__name__", "?"))
sys.setprofile(prof)
tpmod.handle(1)
sys.setprofile(None)
print("profile", seen)
lines = []
def tr(frame, event, arg):
    lines.append((event, frame.f_code.co_name, frame.f_lineno))
    return tr
sys.settrace(tr)
tpmod.handle(2)
tpmod.fail(0)
sys.settrace(None)
print("trace", lines)
import cProfile, pstats, io
pr = cProfile.Profile()
pr.enable()
tpmod.handle(3)
pr.disable()
print("cprofile", sorted({s.code if isinstance(s.code, str) else s.code.co_name for s in pr.getstats()}))
