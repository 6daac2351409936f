"""What a clean removes (`warmcli.ops.clean`): each `Removal`, and the `CleanPlan` that
counts them all by reason and kind, keeping the first `LISTED` whole (to show) and, when
it is to be applied, every key to remove. Nothing here reads a bundle or prints.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from warmcli.printable import LISTED

OTHER_REASONS = "other reasons"  # where removals go once `LISTED` reasons are counted


@dataclass(frozen=True)
class Removal:
    """One entry a clean removes, and why."""

    kind: str  # "kernel" or "tune"
    key: str
    label: str  # as `warm stats` names it
    where: str
    reason: str
    bytes: int = 0  # what removing a kernel frees: its binary, if no kernel kept shares it
    by_rowid: bool = False  # a row no listing reads: removed by its rowid, not by `key`


@dataclass
class CleanPlan:
    removals: list[Removal] = field(default_factory=list)  # the first `LISTED`
    kept_unjudged: list[str] = field(default_factory=list)
    binary_bytes_before: int = 0
    binary_bytes_after: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)  # every removal
    future: Counter[str] = field(default_factory=Counter)  # kept, used after the clean's time
    removed: Counter[str] = field(default_factory=Counter)  # by kind
    keys: dict[str, list[str]] | None = None  # by kind, every key to remove (when applied)

    def remove(self, removal: Removal) -> None:
        """Count one removal; keep it whole if it is among the first, its key if applied."""
        reason = removal.reason
        if reason not in self.by_reason and len(self.by_reason) >= LISTED:
            reason = OTHER_REASONS
        self.by_reason[reason] += 1
        self.removed[removal.kind] += 1
        if len(self.removals) < LISTED:
            self.removals.append(removal)
        if self.keys is not None and not removal.by_rowid:
            self.keys.setdefault(removal.kind, []).append(removal.key)
