"""A hypothesis state machine: segcache.Cache (eviction off) against a dict model."""

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import segcache

KEYS = st.sampled_from([b"a", b"b", b"c", "d", "\u00e9t\u00e9", "\U0001f511", b"k" * 250, b"\x00\xff"])
VALUES = st.one_of(
    st.binary(max_size=300),
    st.integers(min_value=0, max_value=2**64 - 1).map(lambda n: str(n).encode()),
    st.binary(min_size=1, max_size=20).map(lambda b: b"x" + b),  # never numeric
)


def as_bytes(k):
    return k.encode() if isinstance(k, str) else k


def numeric(v):
    """The number incr reads from the value when it clearly has one, False when it clearly has
    none, None if unclear. memcached reads the value as a C string (strtoull), so a NUL ends
    the number: b"0\\0A" is 0."""
    head = v.split(b"\0", 1)[0]
    if head.isdigit() and 0 < len(head) <= 20 and int(head) < 2**64:
        return int(head)
    if any(c in b"abcdefghijklmnopqrstuvwxyz" for c in head.lower()):
        return False
    return None


class CacheModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.cache = segcache.Cache(heap_size="16MiB", segment_size="64KiB", eviction="none")
        self.model = {}

    def teardown(self):
        self.cache.close()

    @rule(k=KEYS, v=VALUES)
    def set(self, k, v):
        self.cache.set(k, v)
        self.model[as_bytes(k)] = v

    @rule(k=KEYS, v=VALUES)
    def setitem(self, k, v):
        self.cache[k] = bytearray(v)
        self.model[as_bytes(k)] = v

    @rule(k=KEYS)
    def get(self, k):
        assert self.cache.get(k) == self.model.get(as_bytes(k))

    @rule(k=KEYS)
    def contains(self, k):
        assert (k in self.cache) == (as_bytes(k) in self.model)

    @rule(k=KEYS, v=VALUES)
    def add(self, k, v):
        expect = as_bytes(k) not in self.model
        assert self.cache.add(k, v) is expect
        if expect:
            self.model[as_bytes(k)] = v

    @rule(k=KEYS, v=VALUES)
    def replace(self, k, v):
        expect = as_bytes(k) in self.model
        assert self.cache.replace(k, v) is expect
        if expect:
            self.model[as_bytes(k)] = v

    @rule(k=KEYS, v=st.binary(max_size=50), front=st.booleans())
    def concat(self, k, v, front):
        expect = as_bytes(k) in self.model
        op = self.cache.prepend if front else self.cache.append
        assert op(k, v) is expect
        if expect:
            old = self.model[as_bytes(k)]
            self.model[as_bytes(k)] = v + old if front else old + v

    @rule(k=KEYS, delta=st.integers(min_value=0, max_value=2**64 - 1), up=st.booleans())
    def arith(self, k, delta, up):
        bk = as_bytes(k)
        op = self.cache.incr if up else self.cache.decr
        if bk not in self.model:
            assert op(k, delta) is None
            return
        kind = numeric(self.model[bk])
        if kind is None:
            return
        if kind is False:
            try:
                op(k, delta)
            except segcache.NotNumeric:
                return
            raise AssertionError("expected NotNumeric")
        n = kind
        expect = (n + delta) % 2**64 if up else max(n - delta, 0)
        assert op(k, delta) == expect
        self.model[bk] = str(expect).encode()

    @rule(k=KEYS, v=VALUES, stale=st.booleans())
    def cas(self, k, v, stale):
        got = self.cache.gets(k)
        if got is None:
            assert as_bytes(k) not in self.model
            assert self.cache.cas(k, v, 12345) is None
            return
        value, token = got
        assert value == self.model[as_bytes(k)]
        if stale:
            self.cache.set(k, value)  # any write changes the CAS value
            assert self.cache.cas(k, v, token) is False
        else:
            assert self.cache.cas(k, v, token) is True
            self.model[as_bytes(k)] = v

    @rule(k=KEYS)
    def delete(self, k):
        assert self.cache.delete(k) is (as_bytes(k) in self.model)
        self.model.pop(as_bytes(k), None)

    @rule(keys=st.lists(KEYS, max_size=5))
    def get_many(self, keys):
        got = self.cache.get_many(keys)
        expect = {k: self.model[as_bytes(k)] for k in keys if as_bytes(k) in self.model}
        assert got == expect

    @precondition(lambda self: len(self.model) > 0)
    @rule()
    def flush(self):
        self.cache.flush()
        self.model.clear()

    @invariant()
    def length(self):
        assert len(self.cache) == len(self.model)


CacheModel.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestCacheModel = CacheModel.TestCase
