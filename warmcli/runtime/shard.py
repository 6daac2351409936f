"""Sharded warming: which part of a workload's work one of N processes does.

A `Shard` (`I/N`, 0 <= I < N) owns a deterministic part of the work, decided by
key alone so that every process agrees without talking to the others: a tune by
its operation, shape key and candidate checksum (not the device, so identical
GPUs on different machines split the same way), a kernel by its content hash
(so every architecture of one kernel is one compile group, built by one shard).
A shard measures only its own tunes and compiles their candidates (whoever owns
those kernels), and queues and compiles only the launched kernels it owns; the
union of N shards' bundles is what one unsharded run stores.

The shard comes from `--shard I/N`, else from the launcher's variables:
`WARM_SHARD` (`I/N`), Kubernetes indexed jobs' `JOB_COMPLETION_INDEX` with
`WARM_SHARD_COUNT` (the job's `completions`; Kubernetes sets no count itself),
Slurm arrays' `SLURM_ARRAY_TASK_ID`/`SLURM_ARRAY_TASK_COUNT` (counted from
`SLURM_ARRAY_TASK_MIN` by `SLURM_ARRAY_TASK_STEP`), torchrun's `RANK`/`WORLD_SIZE` (read
by `warmcli.config`).
A tunable with an unkeyed candidate (`warmcli.unkeyed`) has a checksum of its process's
own: its tunes are told their shard by its candidates' names and kernels instead
(`shard_checksum`), so that some shard measures them and builds what their launch
function launches beside the candidate. Its state: a bounded memo of those; it never
prints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from warmcli import config
from warmcli.config import LAUNCHERS
from warmcli.errors import ShardError
from warmcli.records import Record

if TYPE_CHECKING:
    from warmcli.runtime.tune import Tunable


class Shard(Record):
    """Shard `index` of `count`."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ShardError(f"shard {self.index}/{self.count}: need 0 <= I < N")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, token: str) -> bool:
        """Whether the work named by `token` (a kernel's content hash, a tune's `tune_token`)
        is this shard's."""
        digest = hashlib.sha256(token.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index


_STABLE: dict[str, str] = {}  # a tunable's checksum -> what tells its tunes' shard
_MAX_STABLE = 4096


def shard_checksum(tunable: Tunable) -> str:
    """The checksum that tells the shard of `tunable`'s tunes: its own, or where it is this
    process's own (a candidate unkeyed) a digest of its candidates' names and kernels."""
    stable = _STABLE.get(checksum := tunable.checksum)
    if stable is None:
        from warmcli.runtime.built import tune_unkeyed_reason  # (a sharded warming pass)

        named = sorted((n, k.content_hash) for n, k in tunable.candidates.items())
        unkeyed = json.dumps(["unkeyed", named]).encode()
        stable = hashlib.sha256(unkeyed).hexdigest() if tune_unkeyed_reason(tunable) else checksum
        if len(_STABLE) >= _MAX_STABLE:
            _STABLE.clear()
        _STABLE[checksum] = stable
    return stable


def tune_token(operation: str, shape_key: str, checksum: str) -> str:
    """What decides a tune's shard: everything in its key but the device."""
    return f"tune\0{operation}\0{shape_key}\0{checksum}"


def parse_shard(text: str, named: str = "shard") -> Shard:
    """`I/N` as a `Shard`; `ShardError` for anything else, naming it as `named` (`shard`,
    for `--shard`; `WARM_SHARD`, for the variable)."""
    index, sep, count = text.strip().partition("/")
    if not sep or not _whole(index) or not _whole(count):
        raise ShardError(
            f"{named} {text[:40]!r} is not I/N (such as 0/4; at most {MAX_DIGITS} digits each)"
        )
    if int(count) < 1:
        raise ShardError(f"{named} {text!r}: N must be at least 1")
    return Shard(int(index), int(count))


def shard_from_environment(env: Mapping[str, str] | None = None) -> Shard | None:
    """The shard a launcher's variables give (see the module doc); None when none is set
    or the count is 1."""
    env = config.shard_variables() if env is None else env
    if env.get("WARM_SHARD", "").strip():  # (blank: none, as every variable's blank is)
        return _single(parse_shard(env["WARM_SHARD"], "WARM_SHARD"))
    for index_var, count_var, offset_var, step_var in LAUNCHERS:
        if index_var not in env:
            continue
        if count_var not in env:
            raise ShardError(f"{index_var} is set but {count_var} is not: set it to the count")
        values = [env[index_var], env[count_var], env.get(offset_var or "", "0") or "0"]
        values.append(env.get(step_var or "", "1") or "1")
        names = (index_var, count_var, offset_var, step_var)
        bad = [f"{n}={v[:40]!r}" for n, v in zip(names, values, strict=True) if not _whole(v)]
        if bad:
            raise ShardError(f"{' '.join(bad)}: not a whole number of at most {MAX_DIGITS} digits")
        index, count, offset, step = (int(v) for v in values)
        if count < 1:
            raise ShardError(f"{count_var}={count}: must be at least 1")
        step = 1 if count == 1 and step == 0 else step  # one task has no step to speak of
        if step < 1 or (index - offset) % step:
            raise ShardError(f"{index_var}={index} is not {offset} plus a multiple of {step_var}")
        if not 0 <= (index - offset) // step < count:
            last = offset + (count - 1) * step
            raise ShardError(f"{index_var}={index} is outside {offset}..{last}")
        return _single(Shard((index - offset) // step, count))
    named = env.get("WARM_SHARD_COUNT", "").strip()
    if named and named != "1":  # a count no index goes with: every job would do all the work
        raise ShardError(
            f"WARM_SHARD_COUNT={named[:40]!r} is set but JOB_COMPLETION_INDEX is not (a "
            "Kubernetes Indexed Job sets it): give the shard with --shard I/N or WARM_SHARD"
        )
    return None


MAX_DIGITS = 18  # far above any shard count, far below the 4,300 digits `int(str)` reads


def _whole(text: str) -> bool:
    """Whether `text` is a whole number in at most `MAX_DIGITS` ASCII digits, leading zeros
    counted as `int` counts them (`str.isdigit` also takes `²`, which `int` refuses, as it
    refuses 5,000 digits, zeros or not)."""
    text = text.strip()
    return text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS


def _single(shard: Shard) -> Shard | None:
    return None if shard.count == 1 else shard


def resolve_shard(given: str | None, env: Mapping[str, str] | None = None) -> Shard | None:
    """`--shard` when given (a count of 1 is no sharding), else the environment's."""
    if given is not None:
        return _single(parse_shard(given))
    return shard_from_environment(env)
