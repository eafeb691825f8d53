"""aiomcache (asyncio, text protocol): the scripted scenario. Usage: py_aiomcache.py HOST:PORT"""

import asyncio
import re

import aiomcache
from common import BIG, address, astep


async def is_version(version) -> bool:
    """Versions differ by design: the user sees a dotted version string from both."""
    return bool(re.fullmatch(rb"\d+\.\d+\.\d+\S*", await version))


async def some_stats(stats) -> dict:
    """The counters whose meaning both servers share (the rest differ by design)."""
    names = [b"curr_items", b"get_hits", b"get_misses", b"cmd_get", b"cmd_set", b"cas_hits", b"cas_misses", b"cas_badval"]
    got = await stats
    return {n: got.get(n) for n in names}


async def main() -> None:
    host, port = address()
    c = aiomcache.Client(host, port, pool_size=2)
    await astep("basic flush", lambda: c.flush_all())
    await astep("basic miss", lambda: c.get(b"miss"))
    await astep("basic set", lambda: c.set(b"k1", b"v1"))
    await astep("basic get", lambda: c.get(b"k1"))
    await astep("basic add-existing", lambda: c.add(b"k1", b"x"))
    await astep("basic add-new", lambda: c.add(b"k2", b"v2"))
    await astep("basic replace-missing", lambda: c.replace(b"nope", b"x"))
    await astep("basic replace", lambda: c.replace(b"k2", b"v2r"))
    await astep("basic multi-get", lambda: c.multi_get(b"k1", b"k2", b"miss"))
    await astep("basic get-default", lambda: c.get(b"miss", b"dflt"))

    value, token = await c.gets(b"k1")
    await astep("cas gets", lambda: asyncio.sleep(0, value))
    await astep("cas ok", lambda: c.cas(b"k1", b"v1b", token))
    await astep("cas stale", lambda: c.cas(b"k1", b"v1c", token))
    await astep("cas missing", lambda: c.cas(b"nocas", b"x", token))
    await astep("cas get", lambda: c.get(b"k1"))

    await astep("counter set", lambda: c.set(b"n", b"10"))
    await astep("counter incr", lambda: c.incr(b"n", 5))
    await astep("counter decr", lambda: c.decr(b"n", 20))
    await astep("counter missing", lambda: c.incr(b"nonum", 1))
    await astep("counter non-numeric", lambda: c.incr(b"k1", 1))

    await astep("concat append", lambda: c.append(b"k1", b"+a"))
    await astep("concat prepend", lambda: c.prepend(b"k1", b"p-"))
    await astep("concat get", lambda: c.get(b"k1"))
    await astep("concat append-missing", lambda: c.append(b"nope", b"x"))

    await astep("touch existing", lambda: c.touch(b"k2", 100))
    await astep("touch missing", lambda: c.touch(b"nope", 100))

    await astep("delete existing", lambda: c.delete(b"k1"))
    await astep("delete again", lambda: c.delete(b"k1"))
    await astep("delete get", lambda: c.get(b"k1"))

    await astep("large set", lambda: c.set(b"big", BIG))
    await astep("large get", lambda: c.get(b"big"))
    await astep("large multi-get", lambda: c.multi_get(b"big", b"k2"))
    await astep("large too-big", lambda: c.set(b"huge", b"x" * (2 * 1024 * 1024)))
    # 300 requests in flight at once over the pool's two connections.
    async def burst():
        await asyncio.gather(*(c.set(f"p{i}".encode(), f"v{i}".encode()) for i in range(300)))
        got = await asyncio.gather(*(c.get(f"p{i}".encode()) for i in range(310)))
        return sum(v == f"v{i}".encode() for i, v in enumerate(got))

    await astep("pipeline burst", burst)
    await astep("misc version", lambda: is_version(c.version()))
    await astep("misc stats", lambda: some_stats(c.stats()))
    await c.close()


asyncio.run(main())
