"""The shared objects this process has loaded, by the file names glibc's loader matches a
needed name against before it searches any folder.

A `DT_NEEDED` name that an object already loaded answers to is that object: the loader
searches no folder for it (`warmcli.backends.host.needed`, whose search covers only the
folders). Every warm process imports Python's own libraries and numpy's, which a wheel
keeps in a folder of its own (`numpy.libs`) that no search path names; a blob needing one
of them loads in production. `loaded_names` gives the file names (no folder) of the
objects this process has mapped executable (`/proc/self/maps`), read on each call: a name
a production process of the same Python has loaded too. It owns no state, loads nothing
and never prints.
"""

from __future__ import annotations

import os


def loaded_names() -> frozenset[str]:
    """The file names of the shared objects this process has loaded (an executable mapping
    of a file still there), decoded as `needed` decodes a needed name; none where
    `/proc/self/maps` cannot be read (another OS)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return frozenset()
    names = set()
    for line in lines:
        fields = line.split(maxsplit=5)
        path = fields[5] if len(fields) == 6 and b"x" in fields[1] else b""
        if path.startswith(b"/") and not path.endswith(b" (deleted)"):
            names.add(os.path.basename(path).decode(errors="surrogateescape"))
    return frozenset(names)
