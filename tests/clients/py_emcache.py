"""emcache (asyncio, text protocol): the scripted scenario. Usage: py_emcache.py HOST:PORT"""

import asyncio
import re

import emcache
from common import BIG, address, astep


async def is_version(version) -> bool:
    """Versions differ by design: the user sees a dotted version string from both."""
    return bool(re.fullmatch(r"\d+\.\d+\.\d+\S*", await version))


async def main() -> None:
    host, port = address()
    node = emcache.MemcachedHostAddress(host, port)
    c = await emcache.create_client([node], timeout=5.0)

    async def value(key: bytes):
        item = await c.get(key)
        return item.value if item else None

    await astep("basic flush", lambda: c.flush_all(node))
    await astep("basic miss", lambda: c.get(b"miss"))
    await astep("basic set", lambda: c.set(b"k1", b"v1"))
    await astep("basic get", lambda: value(b"k1"))
    await astep("basic add-existing", lambda: c.add(b"k1", b"x"))
    await astep("basic add-new", lambda: c.add(b"k2", b"v2"))
    await astep("basic replace-missing", lambda: c.replace(b"nope", b"x"))
    await astep("basic replace", lambda: c.replace(b"k2", b"v2r"))

    async def values(items):
        return {k: (v.value, v.flags) for k, v in (await items).items()}

    async def many(keys):
        return {k: v.value for k, v in (await c.get_many(keys)).items()}

    await astep("basic multi-get", lambda: many([b"k1", b"k2", b"miss"]))
    await astep("basic flags", lambda: c.set(b"fl", b"x", flags=12345))
    await astep("basic flags-get", lambda: c.get(b"fl", return_flags=True))

    item = await c.gets(b"k1")
    await astep("cas gets", lambda: asyncio.sleep(0, item.value))
    await astep("cas ok", lambda: c.cas(b"k1", b"v1b", item.cas))
    await astep("cas stale", lambda: c.cas(b"k1", b"v1c", item.cas))
    await astep("cas missing", lambda: c.cas(b"nocas", b"x", item.cas))
    await astep("cas get", lambda: value(b"k1"))

    await astep("counter set", lambda: c.set(b"n", b"10"))
    await astep("counter incr", lambda: c.increment(b"n", 5))
    await astep("counter decr", lambda: c.decrement(b"n", 20))
    await astep("counter missing", lambda: c.increment(b"nonum", 1))
    await astep("counter non-numeric", lambda: c.increment(b"k1", 1))

    await astep("concat append", lambda: c.append(b"k1", b"+a"))
    await astep("concat prepend", lambda: c.prepend(b"k1", b"p-"))
    await astep("concat get", lambda: value(b"k1"))
    await astep("concat append-missing", lambda: c.append(b"nope", b"x"))

    await astep("touch existing", lambda: c.touch(b"k2", 100))
    await astep("touch missing", lambda: c.touch(b"nope", 100))
    await astep("touch gat", lambda: c.gat(200, b"k2"))
    await astep("touch gats-many", lambda: values(c.gats_many(300, [b"k2", b"miss"])))

    await astep("delete existing", lambda: c.delete(b"k1"))
    await astep("delete again", lambda: c.delete(b"k1"))
    await astep("delete get", lambda: c.get(b"k1"))

    await astep("large set", lambda: c.set(b"big", BIG))
    await astep("large get", lambda: value(b"big"))
    await astep("large too-big", lambda: c.set(b"huge", b"x" * (2 * 1024 * 1024)))
    await astep("misc version", lambda: is_version(c.version(node)))
    await astep("misc verbosity", lambda: c.verbosity(node, 1))
    await astep("misc cache-memlimit", lambda: c.cache_memlimit(node, 64))
    await c.close()


asyncio.run(main())
