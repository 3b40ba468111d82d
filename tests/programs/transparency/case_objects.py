import tpmod
p = tpmod.Point3(-2)
print(isinstance(p, tpmod.Point), issubclass(tpmod.Point3, tpmod.Point), p.norm(), type(tpmod.Point).__name__)
print(tpmod.Color.RED.describe(), isinstance(tpmod.Color.RED, tpmod.Color), tpmod.Color(1))
print(tpmod.adder(1), type(tpmod.adder).__name__, callable(tpmod.adder))
print(tpmod.cached(4), tpmod.cached(4), tpmod.cached.cache_info())
tpmod.cached.cache_clear()
print(tpmod.double.func.__name__, tpmod.double.args, tpmod.double.keywords, tpmod.double(5))
print(tpmod.Sub().step())
tpmod.Base.step = lambda self: "faster"
print(tpmod.Sub().step())
g = tpmod.gen(3)
print(next(g), g.send("x"), list(g))
import asyncio
async def main():
    return await tpmod.coro(2), [i async for i in tpmod.agen(3)]
print(asyncio.run(main()))
