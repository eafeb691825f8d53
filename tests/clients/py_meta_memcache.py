"""meta-memcache (meta protocol): the scripted scenario, with invalidation (stale items), the
win/recache herd control and leases. Usage: py_meta_memcache.py HOST:PORT

Two clients (`a`, `b`) stand for two application servers racing on one key."""

from common import BIG, address, step
from meta_memcache import (
    CacheClient,
    LeasePolicy,
    RecachePolicy,
    ServerAddress,
    SetMode,
    StalePolicy,
    connection_pool_factory_builder,
)


def client():
    host, port = address()
    return CacheClient.cache_client_from_servers(
        servers=[ServerAddress(host=host, port=port)],
        connection_pool_factory_fn=connection_pool_factory_builder(connection_timeout=5, recv_timeout=5),
    )


a, b = client(), client()
big = BIG.decode("latin-1")  # the serializer keeps str as text, bytes pickled: compare both ways

step("basic miss", lambda: a.get("miss"))
step("basic set", lambda: a.set("k1", "v1", ttl=0))
step("basic get", lambda: a.get("k1"))
step("basic get-other-client", lambda: b.get("k1"))
step("basic set-bytes", lambda: a.set("bytes", b"\x00\x01", ttl=0))
step("basic get-bytes", lambda: a.get("bytes"))
step("basic set-int", lambda: a.set("int", 42, ttl=0))
step("basic get-int", lambda: a.get("int"))
step("basic set-dict", lambda: a.set("obj", {"a": [1, 2]}, ttl=0))
step("basic get-dict", lambda: a.get("obj"))
step("basic add-existing", lambda: a.set("k1", "x", ttl=0, set_mode=SetMode.ADD))
step("basic add-new", lambda: a.set("k2", "v2", ttl=0, set_mode=SetMode.ADD))
step("basic replace-missing", lambda: a.set("nope", "x", ttl=0, set_mode=SetMode.REPLACE))
step("basic refill-existing", lambda: a.refill("k2", "v2x", ttl=0))
step("basic multi-get", lambda: {k.key: v for k, v in a.multi_get(["k1", "k2", "miss"]).items()})

value, token = a.get_cas("k1")
step("cas get-cas", lambda: value)
step("cas ok", lambda: a.set("k1", "v1b", ttl=0, cas_token=token))
step("cas stale", lambda: a.set("k1", "v1c", ttl=0, cas_token=token))
step("cas get", lambda: a.get("k1"))
step("cas set-cas-returns-token", lambda: a.set_cas("k3", "v3", ttl=0) is not None)

step("counter init", lambda: a.delta_initialize_and_get("n", 1, initial_value=10, initial_ttl=0))
step("counter incr", lambda: a.delta_and_get("n", 5))
step("counter decr", lambda: a.delta_and_get("n", -20))
step("counter delta", lambda: a.delta("n", 3))
step("counter get", lambda: a.get("n"))
step("counter missing", lambda: a.delta_and_get("nonum", 1))
step("counter non-numeric", lambda: a.delta_and_get("k1", 1))

step("concat append", lambda: a.set("k1", "+a", ttl=0, set_mode=SetMode.APPEND))
step("concat prepend", lambda: a.set("k1", "p-", ttl=0, set_mode=SetMode.PREPEND))
step("concat get", lambda: a.get("k1"))
step("concat append-missing", lambda: a.set("nope", "x", ttl=0, set_mode=SetMode.APPEND))

step("touch existing", lambda: a.touch("k2", 100))
step("touch missing", lambda: a.touch("nope", 100))
step("touch get-and-touch", lambda: a.get("k2", touch_ttl=200))

step("delete existing", lambda: a.delete("k1"))
step("delete again", lambda: a.delete("k1"))
step("delete get", lambda: a.get("k1"))
step("delete invalidate-missing", lambda: a.invalidate("k1"))

step("large set", lambda: a.set("big", big, ttl=0))
step("large get", lambda: a.get("big"))
step("large set-bytes", lambda: a.set("bigb", BIG, ttl=0))
step("large get-bytes", lambda: a.get("bigb"))

# Invalidation: the item stays, marked stale (md I T30). The first reader wins the right to
# recache it (W: it sees a miss), the others read the stale value (X Z) until the winner writes.
stale = StalePolicy(mark_stale_on_deletion_ttl=30)
step("stale set", lambda: a.set("st", "old", ttl=0))
step("stale invalidate", lambda: a.delete("st", stale_policy=stale))
step("stale read-winner", lambda: a.get("st"))
step("stale read-loser", lambda: b.get("st"))
step("stale read-loser-again", lambda: b.get("st"))
step("stale recache", lambda: a.set("st", "new", ttl=0))
step("stale read-after-recache", lambda: b.get("st"))
# A write with an old cas token after invalidation is kept as stale (I on ms) rather than lost.
_, st_token = a.get_cas("st")
step("stale invalidate-2", lambda: a.delete("st", stale_policy=stale))
on_mismatch = StalePolicy(mark_stale_on_cas_mismatch=True)
step("stale cas-mismatch-write", lambda: a.set("st", "late", ttl=0, cas_token=st_token, stale_policy=on_mismatch))
step("stale read-after-mismatch", lambda: b.get("st"))

# Recache herd control: an item whose remaining TTL is under the policy's recache TTL makes
# one reader win (a miss, it refreshes the value) while the others keep reading it.
recache = RecachePolicy(ttl=300)
step("recache set", lambda: a.set("rc", "value", ttl=100))
step("recache read-winner", lambda: a.get("rc", recache_policy=recache))
step("recache read-loser", lambda: b.get("rc", recache_policy=recache))
step("recache refresh", lambda: a.set("rc", "fresh", ttl=1000))
step("recache read-after", lambda: b.get("rc", recache_policy=recache))

# Leases: on a miss the first reader gets the lease (N vivify: a miss, it must fill); the second
# waits for the fill and after its retries sees a miss too; after the fill both read the value.
waits = []
lease = LeasePolicy(ttl=30, miss_retries=2, miss_retry_wait=0.01, miss_max_retry_wait=0.01)
step("lease winner", lambda: a.get_or_lease("ls", lease))
step("lease loser", lambda: b.get_or_lease("ls", lease, lease_wait_fn=waits.append))
step("lease loser-waited", lambda: len(waits))
step("lease fill", lambda: a.set("ls", "filled", ttl=0))
step("lease read-after-fill", lambda: b.get_or_lease("ls", lease))
step("lease get-cas-after-fill", lambda: b.get_or_lease_cas("ls", lease)[0])
