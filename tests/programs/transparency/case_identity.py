import tpmod
print(tpmod.HANDLERS[tpmod.handle], tpmod.handle in tpmod.KNOWN, tpmod.ORIGINAL is tpmod.handle, tpmod.handle(1))
print(tpmod.deep(900))
def me():
    return tpmod.caller_name(), tpmod.stack_caller()
print(me())
tpmod.warn()
import traceback, logging
logging.basicConfig(format="%(levelname)s %(message)s")
try:
    tpmod.fail(3)
except ValueError:
    print(traceback.format_exc())
    logging.exception("failed")
import pickle
print(len(pickle.dumps(tpmod.handle)) > 0, pickle.loads(pickle.dumps(tpmod.Sub.step)) is tpmod.Sub.step)
