"""The exceptions segcache raises. Each derives from `segcache.Error` and, where one fits, from the
builtin a caller would already catch (`ValueError` for bad keys and values, `OSError` for the
persistence file)."""

from __future__ import annotations


class Error(Exception):
    """Base class of every segcache error."""


class Closed(Error, ValueError):
    """The cache was closed (like I/O on a closed file)."""


class NotFound(Error, KeyError):
    """The key is absent, expired or flushed."""


class Exists(Error):
    """`cas` saw another CAS value: the item changed since it was read."""


class NotStored(Error):
    """`add` on a present key, or `replace`/`append`/`prepend` on an absent one."""


class TooLarge(Error, ValueError):
    """The item (key, value and header) does not fit in one segment."""


class KeyTooLong(Error, ValueError):
    """Keys are 1 to 250 bytes (as UTF-8 for str keys)."""


class EmptyKey(Error, ValueError):
    """The key is empty."""


class NoMemory(Error, MemoryError):
    """The heap is full and eviction is off (`eviction="none"`)."""


class NotNumeric(Error, ValueError):
    """`incr`/`decr` on a value that is not a decimal number below 2**64."""


class InvalidConfig(Error, ValueError):
    """A `Cache(...)` setting is out of range; the message names it."""


class PersistenceError(Error, OSError):
    """The persistence file could not be opened, sized, mapped or flushed."""


class BadFile(PersistenceError):
    """The persistence file is truncated, corrupt, foreign or of another configuration.
    Pass `reset_bad_file=True` to start empty over it."""


class Locked(PersistenceError):
    """Another cache (in this or another process) holds the persistence file."""


class NoSpace(PersistenceError):
    """The filesystem of the persistence file has no room for the whole heap: its blocks are
    reserved when the cache opens, so a full disk or tmpfs is this error then, never a crash
    later. The message names the path, the bytes needed and the bytes free."""


class MapError(Error, MemoryError):
    """Anonymous memory for the heap could not be mapped."""


class ForkedError(Error, RuntimeError):
    """The cache was opened in another process and inherited across `os.fork()`: every method
    raises this in the child, reads included (a child writing to its parent's cache would share
    a file's mapping without its locks, or write to a private copy nobody else sees). Open a new
    `Cache` in the child instead; dropping or closing the inherited one there leaves the
    parent's cache and file alone. A cache opened with `multi_process=True` never raises this:
    the child joins it."""


__all__ = [
    "Error", "Closed", "NotFound", "Exists", "NotStored", "TooLarge", "KeyTooLong", "EmptyKey",
    "NoMemory", "NotNumeric", "InvalidConfig", "PersistenceError", "BadFile", "Locked", "NoSpace", "MapError",
    "ForkedError",
]
