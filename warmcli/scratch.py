"""A compile's scratch folder, removed only by the process that made it.

A compile's scratch folder is `scratch_folder`'s, never `tempfile.TemporaryDirectory`'s,
whose exit-time finalizer a forked child inherits: a worker forked while another thread
compiled removed the folder at its own exit, under the parent's compiler (`warmcli.forking`
says what else a fork does to warm's state). A compiler runs in one, so the programs it finds
by a relative folder (`PATH=..:$PATH`) are found from there: `seen_from_scratch`. It owns no
state, never prints, and writes nothing but the folders.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def scratch_folder(prefix: str) -> Iterator[str]:
    """A new private temporary folder for the `with` block, removed at its end, only by the
    process that made it (a forked child, which has not the thread in the block, never)."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix)
    made_by = os.getpid()
    try:
        yield folder
    finally:
        if os.getpid() == made_by:
            shutil.rmtree(folder, ignore_errors=True)


def seen_from_scratch(folder: str) -> str | None:
    """The folder a compiler run in a scratch folder (a new one in the temporary folder) reads
    as `folder`: itself where absolute; a relative one (`PATH`'s "" is `.`) from there, so None
    where it stays inside (`.`, `bin`: a new folder holds no program), the temporary folder
    for `..` (`../bin`: a folder beside it), never from the folder warm was started in."""
    if os.path.isabs(folder):
        return folder
    relative = os.path.normpath(folder or os.curdir)
    if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
        return None
    import tempfile

    scratch = os.path.join(os.path.realpath(tempfile.gettempdir()), "scratch")
    return os.path.normpath(os.path.join(scratch, relative))
