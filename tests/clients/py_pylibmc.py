"""pylibmc (libmemcached), text or binary protocol: the scripted scenario.
Usage: py_pylibmc.py HOST:PORT text|binary"""

import sys

import pylibmc
from common import BIG, address, step

host, port = address()
binary = sys.argv[2] == "binary"
behaviors = {
    "tcp_nodelay": True,
    "cas": True,
    "connect_timeout": 2000,
    "receive_timeout": 5_000_000,
    "send_timeout": 5_000_000,
}
c = pylibmc.Client([f"{host}:{port}"], binary=binary, behaviors=behaviors)
step("basic flush", lambda: c.flush_all())
step("basic miss", lambda: c.get("miss"))
step("basic set", lambda: c.set("k1", b"v1"))
step("basic get", lambda: c.get("k1"))
step("basic add-existing", lambda: c.add("k1", b"x"))
step("basic add-new", lambda: c.add("k2", b"v2"))
step("basic replace-missing", lambda: c.replace("nope", b"x"))
step("basic replace", lambda: c.replace("k2", b"v2r"))
step("basic multi-get", lambda: c.get_multi(["k1", "k2", "miss"]))
step("basic set-multi", lambda: c.set_multi({"m1": b"a", "m2": b"b"}))
step("basic get-multi-2", lambda: c.get_multi(["m1", "m2"]))
step("basic str-value", lambda: (c.set("s", "text"), c.get("s")))
step("basic int-value", lambda: (c.set("i", 42), c.get("i")))

value, token = c.gets("k1")
step("cas gets", lambda: value)
step("cas ok", lambda: c.cas("k1", b"v1b", token))
step("cas stale", lambda: c.cas("k1", b"v1c", token))
step("cas missing", lambda: c.cas("nocas", b"x", token))
step("cas get", lambda: c.get("k1"))

step("counter set", lambda: c.set("n", b"10"))
step("counter incr", lambda: c.incr("n", 5))
step("counter decr", lambda: c.decr("n", 20))
step("counter missing", lambda: c.incr("nonum", 1))
if not binary:  # libmemcached's binary mode marks the server dead after this reply
    step("counter non-numeric", lambda: c.incr("k1", 1))
step("counter get", lambda: c.get("n").rstrip())  # memcached may pad an incr result in place

step("concat append", lambda: c.append("k1", b"+a"))
step("concat prepend", lambda: c.prepend("k1", b"p-"))
step("concat get", lambda: c.get("k1"))
step("concat append-missing", lambda: c.append("nope", b"x"))

step("touch existing", lambda: c.touch("k2", 100))
step("touch missing", lambda: c.touch("nope", 100))
step("touch get", lambda: c.get("k2"))

step("delete existing", lambda: c.delete("k1"))
step("delete again", lambda: c.delete("k1"))
step("delete get", lambda: c.get("k1"))
step("delete multi", lambda: c.delete_multi(["m1", "m2", "nope"]))

step("large set", lambda: c.set("big", BIG))
step("large get", lambda: c.get("big"))
step("large multi-get", lambda: c.get_multi(["big", "k2"]))
step("large too-big", lambda: c.set("huge", b"x" * (2 * 1024 * 1024)))
# 500 KiB + 600 KiB is past the 1 MiB item limit: not stored, the item unchanged.
step("large append-past-limit", lambda: c.append("big", b"x" * (600 * 1024)))
step("large prepend-past-limit", lambda: c.prepend("big", b"x" * (600 * 1024)))
step("large get-after-append", lambda: c.get("big"))
step("misc stats", lambda: len(c.get_stats()))

# noreply, buffered (text only: libmemcached's binary noreply stores nothing even on memcached):
# libmemcached pipelines the writes without waiting for replies.
if binary:
    sys.exit(0)
pipelined = {**behaviors, "no_block": True, "buffer_requests": True, "_noreply": True}
q = pylibmc.Client([f"{host}:{port}"], binary=binary, behaviors=pipelined)
step("noreply set-multi", lambda: q.set_multi({f"q{i}": str(i).encode() for i in range(50)}))
step("noreply delete", lambda: q.delete("q7"))
step("noreply incr", lambda: q.incr("q8", 100))
step("noreply append", lambda: q.append("q9", b"x"))
q.disconnect_all()
step("noreply get-multi", lambda: c.get_multi([f"q{i}" for i in range(6, 11)]))
c.disconnect_all()
