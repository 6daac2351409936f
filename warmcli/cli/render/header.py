"""The head of `warm stats` (both as a listing and as a summary of a bundle too large to
list): the bundle's path, format and times, the shards it holds of a sharded run, where a
merged bundle came from (`warmcli.bundle.merged_from`: a few URLs, each at the version
merged), and every toolchain and device that wrote it. Pure presentation over the
manifest's text (untrusted: every cell escaped, `add_row`); it owns no state, never opens a
bundle and never prints.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from warmcli.bundle.location import shown as url_shown
from warmcli.bundle.merged_from import read
from warmcli.bundle.run_record import KEY as RUN_KEY
from warmcli.bundle.run_record import parse
from warmcli.cli.render import add_row, when

if TYPE_CHECKING:  # (Rich: imported when a table is built)
    from rich.table import Table


def manifest_grid(
    path: str,
    m: dict[str, Any],
    fingerprints: list[dict[str, Any]],
    fmt: int | None = None,
    copy: str | None = None,
) -> Table:
    """The bundle's path (its URL, then where its local `copy` is), format (`fmt`, the
    file's own, when known; the manifest's claim beside it where it differs) and times,
    the shards it holds of a sharded run, where a merged bundle came from (`merged_shown`),
    and every toolchain and device that wrote it."""
    from warmcli.cli.render.narrow import pairs

    head = pairs()
    add_row(head, "bundle", path)
    if copy is not None:
        add_row(head, "copy", copy)
    claimed = m.get("format_version")
    shown = claimed if fmt is None else fmt
    differs = "" if fmt is None or str(claimed) == str(fmt) else f"; the manifest says {claimed!r}"
    add_row(head, "format", f"{shown} (warm {m.get('warm_version')}{differs})")
    add_row(head, "created", when(m.get("created")))
    add_row(head, "updated", when(m.get("updated")))
    run = m.get(RUN_KEY)
    record = parse(json.dumps(run) if isinstance(run, dict) else run)
    if record is not None and record.count > 1:
        add_row(head, "shard", str(record))
    for said in merged_shown(m):
        add_row(head, "merged from", said)
    for fp in fingerprints:
        add_row(head, str(fp["kind"]), str(fp["identity"]).split(":", 1)[-1])
    return head


MERGED_SHOWN = 3  # URLs of a merged bundle's record shown (--json: every one)


def merged_shown(m: dict[str, Any]) -> list[str]:
    """Where a merged bundle came from (`warmcli.bundle.merged_from`): each URL (passwords
    and queries withheld, as `shown` says a URL) at the version merged, a few, then how many
    more; escaped as every cell is (`add_row`)."""
    origins = read({k: v for k, v in m.items() if isinstance(v, str)})
    said = [
        f"{url_shown(o.url)} ({o.etag or f'sha256 {o.sha256[:16]}'})"
        for o in origins[:MERGED_SHOWN]
    ]
    if len(origins) > MERGED_SHOWN:
        said.append(f"and {len(origins) - MERGED_SHOWN:,} more: warm stats --json lists every one")
    return said
