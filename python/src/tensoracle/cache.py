"""The engine cache's folder, as ``tensoracle cache list|verify|prune|clear`` on the command line.

Every function takes ``cache_dir`` (default: the folder :func:`tensoracle.open_engine` uses,
``$XDG_CACHE_HOME/tensoracle`` or ``~/.cache/tensoracle``)::

    import tensoracle

    for entry in tensoracle.cache.list():
        print(entry.name, entry.graph_version, entry.identity, entry.device, entry.size,
              entry.created, entry.last_used)            # datetimes in UTC
    bad = [c for c in tensoracle.cache.verify() if c.health == "corrupt"]
    tensoracle.cache.prune(older_than_days=30)            # not used for 30 days
    tensoracle.cache.prune(max_size="20G")                # least recently used beyond 20 GiB
    tensoracle.cache.clear(name="linear")                 # or clear() for everything

The work is done by the C++ core (``tensoracle/cache.h``); this module only names it.
"""

from tensoracle._native import cache as _native
from tensoracle._native import default_cache_dir

Entry = _native.Entry
Check = _native.Check
list = _native.list  # noqa: A001 - the operation's name, as in `tensoracle cache list`
verify = _native.verify
prune = _native.prune
clear = _native.clear
parse_size = _native.parse_size
read_counts = _native.read_counts
default_dir = default_cache_dir

__all__ = ["Check", "Entry", "clear", "default_dir", "list", "parse_size", "prune", "read_counts", "verify"]
