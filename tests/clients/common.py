"""Shared by the Python client scenarios (tests/clients/py_*.py): the scripted steps' data and
`step()`, which prints one line per step of what the client's user sees.

A scenario is run as `python py_<client>.py HOST:PORT`; test_clients.py runs it against memcached
and against segcache-server and compares the two outputs line by line. Each line is
`<section> <step>: <result>`; the section (the first word) lets the runner name which feature a
difference belongs to. Results are values, booleans, None or `error <Type>: <message>`; never raw
CAS numbers (a scenario prints whether a cas succeeded)."""

import hashlib
import sys

# The 500 KiB value: a deterministic pattern, printed as its length and a digest.
BIG = bytes((i * 31 + 7) % 251 for i in range(500 * 1024))


def address() -> tuple[str, int]:
    host, port = sys.argv[1].rsplit(":", 1)
    return host, int(port)


def show(value) -> str:
    """What the user sees, printed stably (bytes as text where they are text; big values by digest)."""
    if isinstance(value, (bytes, bytearray)) and len(value) > 64:
        return f"<{len(value)} bytes sha1 {hashlib.sha1(value).hexdigest()[:12]}>"
    if isinstance(value, (bytes, bytearray)):
        return "b" + repr(bytes(value).decode("latin-1"))
    if isinstance(value, str) and len(value) > 64:
        return show(value.encode("latin-1"))
    if isinstance(value, dict):
        return "{" + ", ".join(f"{show(k)}: {show(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return repr(value)


def step(name: str, fn):
    """Runs one step, prints its line and returns its result (None after an error)."""
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - what the user sees is the point
        print(f"{name}: error {type(e).__name__}: {e}", flush=True)
        return None
    print(f"{name}: {show(result)}", flush=True)
    return result


async def astep(name: str, fn):
    """`step` for a coroutine function."""
    try:
        result = await fn()
    except Exception as e:  # noqa: BLE001 - what the user sees is the point
        print(f"{name}: error {type(e).__name__}: {e}", flush=True)
        return None
    print(f"{name}: {show(result)}", flush=True)
    return result
