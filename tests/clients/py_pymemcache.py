"""pymemcache (text protocol): the scripted scenario. Usage: py_pymemcache.py HOST:PORT"""

import re

from common import BIG, address, step
from pymemcache.client.base import Client

# Counters whose meaning both servers share. Left out: total_items (memcached does an incr/decr
# that keeps the value's length in place and does not count it; segcache-server counts every one).
SHARED_STATS = {
    b"curr_items",
    b"get_hits",
    b"get_misses",
    b"cmd_get",
    b"cmd_set",
    b"cmd_touch",
    b"touch_hits",
    b"touch_misses",
    b"delete_hits",
    b"delete_misses",
    b"incr_hits",
    b"incr_misses",
    b"decr_hits",
    b"decr_misses",
    b"cas_hits",
    b"cas_misses",
    b"cas_badval",
    b"evictions",
}
c = Client(address(), timeout=5, connect_timeout=5, default_noreply=False)
step("basic flush", lambda: c.flush_all())
step("basic miss", lambda: c.get("miss"))
step("basic set", lambda: c.set("k1", b"v1"))
step("basic get", lambda: c.get("k1"))
step("basic add-existing", lambda: c.add("k1", b"x"))
step("basic add-new", lambda: c.add("k2", b"v2"))
step("basic replace-missing", lambda: c.replace("nope", b"x"))
step("basic replace", lambda: c.replace("k2", b"v2r"))
step("basic multi-get", lambda: c.get_many(["k1", "k2", "miss"]))
step("basic flags", lambda: c.raw_command(b"set fl 123456 0 1\r\nx", b"STORED"))
step("basic flags-get", lambda: c.raw_command(b"get fl", b"END"))

value, token = c.gets("k1")
step("cas gets", lambda: value)
step("cas ok", lambda: c.cas("k1", b"v1b", token))
step("cas stale", lambda: c.cas("k1", b"v1c", token))
step("cas missing", lambda: c.cas("nocas", b"x", token))
step("cas get", lambda: c.get("k1"))
step("cas gets-many", lambda: {k: v for k, (v, _) in c.gets_many(["k1", "miss"]).items()})

step("counter set", lambda: c.set("n", b"10"))
step("counter incr", lambda: c.incr("n", 5))
step("counter decr", lambda: c.decr("n", 20))
step("counter incr-big", lambda: c.incr("n", 18446744073709551615))
step("counter incr-wrap", lambda: c.incr("n", 2))
step("counter missing", lambda: c.incr("nonum", 1))
step("counter non-numeric", lambda: c.incr("k1", 1))
step("counter get", lambda: c.get("n").rstrip())  # memcached may pad an incr result in place

step("concat append", lambda: c.append("k1", b"+a"))
step("concat prepend", lambda: c.prepend("k1", b"p-"))
step("concat get", lambda: c.get("k1"))
step("concat append-missing", lambda: c.append("nope", b"x"))
step("concat prepend-missing", lambda: c.prepend("nope", b"x"))

step("touch existing", lambda: c.touch("k2", 100))
step("touch missing", lambda: c.touch("nope", 100))

step("delete existing", lambda: c.delete("k1"))
step("delete again", lambda: c.delete("k1"))
step("delete get", lambda: c.get("k1"))

step("large set", lambda: c.set("big", BIG))
step("large get", lambda: c.get("big"))
step("large multi-get", lambda: c.get_many(["big", "k2"]))
step("large too-big", lambda: c.set("huge", b"x" * (2 * 1024 * 1024)))
step("large too-big-get", lambda: c.get("huge"))

step("expiry negative-ttl", lambda: c.set("gone", b"x", expire=-1))
step("expiry negative-ttl-get", lambda: c.get("gone"))
step("expiry past-timestamp", lambda: c.set("gone2", b"x", expire=1_000_000_000))
step("expiry past-timestamp-get", lambda: c.get("gone2"))
step("expiry touch-negative", lambda: c.touch("k2", -1))
step("expiry touch-negative-get", lambda: c.get("k2"))
step("counter grow", lambda: (c.set("g", b"99"), c.incr("g", 1), c.get("g")))
step("counter shrink", lambda: (c.decr("g", 95), c.get("g").rstrip()))
step("values crlf-inside", lambda: (c.set("crlf", b"a\r\nEND\r\nb"), c.get("crlf")))
step("values empty", lambda: (c.set("empty", b""), c.get("empty")))
step("many set-many", lambda: c.set_many({f"m{i}": str(i).encode() for i in range(100)}))
step("many get-many", lambda: sum(int(v) for v in c.get_many([f"m{i}" for i in range(120)]).values()))
step("many delete-many", lambda: c.delete_many([f"m{i}" for i in range(100)]))
step("many get-after", lambda: c.get_many([f"m{i}" for i in range(100)]))
step("keys long", lambda: c.get("x" * 251))
step("keys max-length", lambda: (c.set("y" * 250, b"ok"), c.get("y" * 250)))
step("keys noreply-set", lambda: c.set("nr", b"1", noreply=True))
step("keys noreply-get", lambda: c.get("nr"))
step("misc version", lambda: re.fullmatch(rb"\d+\.\d+\.\d+\S*", c.version()) is not None)
step("misc stats", lambda: {k: v for k, v in c.stats().items() if k in SHARED_STATS})
step("misc cache-memlimit", lambda: c.cache_memlimit(64))
step("misc quit", lambda: c.quit())
step("misc reconnect-get", lambda: c.get("k2"))
c.close()
