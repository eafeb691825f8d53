"""Django's cache framework over its `PyLibMCCache` backend (pylibmc, text protocol): the scripted
scenario. Usage: py_django.py HOST:PORT

Django's timeouts are not memcached's: `timeout=0` means "do not keep it" and `None` "keep it
until evicted". The backend sends 0 as an exptime of -1 and a negative timeout as itself, and
libmemcached writes them unsigned (`set key 16 4294967295 ...`): memcached reads that exptime as
a negative 32-bit number, so the item is expired at once and the following get misses."""

import django
from django.conf import settings

from common import address, step

host, port = address()
settings.configure(
    CACHES={
        "default": {
            "BACKEND": "django.core.cache.backends.memcached.PyLibMCCache",
            "LOCATION": f"{host}:{port}",
            "TIMEOUT": 300,
            "OPTIONS": {
                "binary": False,
                "behaviors": {
                    "tcp_nodelay": True,
                    "connect_timeout": 2000,
                    "receive_timeout": 5_000_000,
                    "send_timeout": 5_000_000,
                },
            },
        }
    },
)
django.setup()

from django.core.cache import cache  # noqa: E402 - needs the settings above

step("basic clear", lambda: cache.clear())
step("basic miss", lambda: cache.get("k1"))
step("basic miss-default", lambda: cache.get("k1", "dflt"))
step("basic set", lambda: cache.set("k1", "v1"))
step("basic get", lambda: cache.get("k1"))
step("basic has-key", lambda: cache.has_key("k1"))
step("basic add-existing", lambda: cache.add("k1", "x"))
step("basic add-new", lambda: cache.add("k2", {"a": [1, 2]}))
step("basic get-object", lambda: cache.get("k2"))
step("basic set-int", lambda: (cache.set("i", 42), cache.get("i")))
step("basic set-bytes", lambda: (cache.set("b", b"\x00\xff"), cache.get("b")))
step("basic delete", lambda: cache.delete("k1"))
step("basic delete-again", lambda: cache.delete("k1"))
step("basic get-deleted", lambda: cache.get("k1"))
step("basic get-or-set", lambda: (cache.get_or_set("gos", "first"), cache.get_or_set("gos", "second")))
step("basic versioned", lambda: (cache.set("ver", "v2", version=2), cache.get("ver"), cache.get("ver", version=2)))

# timeout=0 and negative timeouts: not kept (exptime 2^32 - 1 and 2^32 - 5 on the wire).
step("expiry zero-set", lambda: cache.set("t0", "gone", timeout=0))
step("expiry zero-get", lambda: cache.get("t0"))
step("expiry zero-has-key", lambda: cache.has_key("t0"))
step("expiry negative-set", lambda: cache.set("tneg", "gone", timeout=-5))
step("expiry negative-get", lambda: cache.get("tneg"))
step("expiry zero-over-existing", lambda: (cache.set("tx", "kept"), cache.set("tx", "gone", timeout=0), cache.get("tx")))
step("expiry zero-add", lambda: (cache.add("tadd", "gone", timeout=0), cache.get("tadd")))
step("expiry zero-set-many", lambda: (cache.set_many({"z1": 1, "z2": 2}, timeout=0), cache.get_many(["z1", "z2"])))
step("expiry none-set", lambda: cache.set("tnone", "kept", timeout=None))
step("expiry none-get", lambda: cache.get("tnone"))
step("expiry long-set", lambda: cache.set("tlong", "kept", timeout=3600))
step("expiry long-get", lambda: cache.get("tlong"))
step("expiry touch-none", lambda: (cache.touch("tlong", None), cache.get("tlong")))
step("expiry touch-zero", lambda: (cache.touch("tlong", 0), cache.get("tlong")))
step("expiry touch-missing", lambda: cache.touch("nope", 100))

step("many set-many", lambda: cache.set_many({"m1": "a", "m2": 2, "m3": [3]}))
step("many get-many", lambda: cache.get_many(["m1", "m2", "m3", "missing"]))
step("many delete-many", lambda: cache.delete_many(["m1", "missing"]))
step("many get-many-after", lambda: cache.get_many(["m1", "m2", "m3"]))

step("counter set", lambda: cache.set("n", 10))
step("counter incr", lambda: cache.incr("n"))
step("counter incr-by", lambda: cache.incr("n", 5))
step("counter decr", lambda: cache.decr("n", 20))
step("counter get", lambda: cache.get("n"))
step("counter incr-missing", lambda: cache.incr("nonum"))
step("counter incr-version", lambda: (cache.incr_version("n"), cache.get("n"), cache.get("n", version=2)))
cache.close()
