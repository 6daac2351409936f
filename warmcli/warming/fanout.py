"""`warm run --dask SCHEDULER`: the shards of one run fanned out over a Dask cluster.

`fan_out` connects to the scheduler (Dask's `distributed`, the optional extra `dask`, imported
only here and only then), makes one shard per worker (`I/N`, `warmcli.runtime.shard`; per worker
holding a `GPU` resource, `dask worker --resources GPU=1`, when the run measures on GPUs and any
worker declares one), and runs each as `warm run ... --shard I/N` in a fresh process on its
worker (in the caller's folder where the worker has it, so `-m MODULE` is found as here), pinned
there (`workers=`, no stealing), so a worker that holds a GPU measures only its own shard there.
Each task carries its shard's seed (`warmcli.warming.seeds`: its part of the bundle the run goes
into, which the shard runs into, so it does only what is new) and the caller's values of the
variables `--dask-env` names. Each task returns the shard's bundle bytes and its `--json` report
(in a `warmcli.scratch.held_folder`: one a worker killed with its shard left is removed by the
next shard there); `fan_out` writes each shard's bundle into a folder the caller owns and
returns their paths (`FanOutReport.paths`): merging them into OUT (`warmcli.ops.merge`) and the
verify pass over the merged bundle (`warmcli.warming.passes.verify_pass`) are the caller's
(`warm run`'s). The workload must be reachable at the same path on every worker (a shared file
system, or the same image). A scheduler that does not answer within `CONNECT_TIMEOUT` (nor a
port that takes the connection and stays silent: `_handshake`), or a port where something else
answers, is a `FanOutError`; so are a cluster with no worker for `WARM_DASK_NO_WORKER_WAIT`
seconds (none joined yet, or none left while shards are unfinished: one with none at the first
look is given its shards once a look finds no worker more than the last), and a scheduler lost
(Dask's own loggers are silenced while `fan_out` runs: its error is the one line said). A shard
that raises on its worker (or whose workers keep dying: Dask's `KilledWorker`) is a failed
shard, named like one whose `warm run` failed.
What a shard's `--json` report says (its passes, summed into one run's; whether it finished)
is read in `warmcli.warming.shard_reports`. This module owns no state and never prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warmcli import config
from warmcli.backends.processes import exit_status_lost
from warmcli.errors import FanOutError
from warmcli.scratch import held_folder
from warmcli.warming.seeds import Seeds
from warmcli.warming.shard_reports import said_done

CONNECT_TIMEOUT = 5.0  # seconds before a scheduler that does not answer is unreachable
NO_WORKER_WAIT = 60.0  # seconds with no worker (none joined yet, or none left) before giving up
POLL = 1.0  # seconds between looks at the cluster while shards run


@dataclass
class ShardResult:
    """One shard's run on one worker: its `warm run --json` report and bundle."""

    shard: str
    worker: str
    report: dict[str, Any]
    seconds: float
    seed: int = 0  # the bytes of the bundle's part it was sent (`warmcli.warming.seeds`)


@dataclass
class FanOutReport:
    scheduler: str
    shards: list[ShardResult] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)  # the shards' bundles, sorted by name
    notes: list[str] = field(default_factory=list)  # a part of the bundle not sent, and why


def run_shard(
    argv: Sequence[str],
    shard: str,
    cwd: str | None = None,
    seed: bytes | None = None,
    passed: dict[str, str | None] | None = None,
) -> tuple[int, dict[str, Any], bytes, str]:
    """On a worker: `warm run ARGV --shard SHARD --json` into a temporary bundle (one
    holding `seed`, its part of the caller's bundle, where given: opened by that run as
    any bundle is, untrusted), in the folder `cwd` when the worker has it (where `-m
    MODULE` is looked for, as the caller's), with the caller's values of the variables
    `passed` names (None: unset there); its exit code, report, bundle bytes and last
    error line. Where this process ignores SIGCHLD (a daemon's worker: every child's exit
    status reads 0), a 0 is taken only with a report that says the run finished."""
    env = config.worker_environment(passed=passed)  # not the worker's launcher's shard
    with held_folder("warm-shard-") as held:  # (held by the shard's process too)
        bundle = Path(held.path) / "shard.warm"
        if seed:
            bundle.write_bytes(seed)
        command = [sys.executable, "-m", "warmcli", "run", *argv, "--shard", shard]
        proc = subprocess.run(
            [*command, "--bundle", str(bundle), "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd if cwd is not None and os.path.isdir(cwd) else None,
            pass_fds=held.fds,
        )
        try:
            report = json.loads(proc.stdout)
        except ValueError:
            report = {}
        data = bundle.read_bytes() if bundle.exists() else b""
    lines, code = proc.stderr.strip().splitlines(), proc.returncode
    if code == 0 and exit_status_lost() and not said_done(report):  # (its 0 says nothing)
        code = report.get("exit") if isinstance(report, dict) else None
        code = code if isinstance(code, int) and code > 0 else 1
        lines = lines or ["its exit status lost (SIGCHLD ignored here), no success reported"]
    return code, report, data, lines[-1] if lines else ""


def shard_workers(workers: dict[str, dict[str, Any]], gpu: bool) -> list[str]:
    """The workers that get one shard each: those holding a `GPU` resource when `gpu` and
    any does, else all of them; in address order, so the shards are numbered stably."""
    if gpu:
        holding = [w for w, info in workers.items() if (info.get("resources") or {}).get("GPU")]
        if holding:
            return sorted(holding)
    return sorted(workers)


@contextlib.contextmanager
def _dask_logs_quiet() -> Iterator[None]:
    """Dask's loggers (`distributed.*`, which Dask's configuration sends to stderr) silent
    while a fan-out runs: a lost scheduler's reconnects log their tracebacks there, where
    the fan-out's `FanOutError` says it in one line. Their levels are restored after."""
    import logging

    with contextlib.suppress(ImportError):  # (its import sets their levels: first)
        import distributed  # noqa: F401
    known = logging.root.manager.loggerDict
    loggers = [logging.getLogger(n) for n in known if n.split(".")[0] == "distributed"]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@_dask_logs_quiet()
def fan_out(
    scheduler: str,
    argv: Sequence[str],
    folder: Path,
    *,
    gpu: bool = False,
    on_shard: Callable[[ShardResult, int], None] | None = None,
    cwd: str | None = None,
    report: FanOutReport | None = None,
    seeds: Callable[[int], Seeds] | None = None,
    passed: dict[str, str | None] | None = None,
) -> FanOutReport:
    """Run one shard per worker of the cluster at `scheduler` (per GPU worker, given
    `gpu`; see `shard_workers`); each shard's bundle is written into `folder`.
    `on_shard(result, count)` hears of each shard as it finishes (count: how many
    there are); it is first called with `None` once the shards are submitted. Each shard
    runs in the folder `cwd` (the caller's) where its worker has it, into its seed
    (`seeds(count)`: its part of the bundle, sent to its worker alone), with the caller's
    values of the variables `passed` names."""
    try:
        from distributed import Client
    except ImportError:
        raise FanOutError("--dask needs Dask's distributed: pip install 'warmcli[dask]'") from None
    report = report or FanOutReport(scheduler)  # the caller's: what finished, when it fails
    limit = no_worker_wait()  # a bad value is refused before any shard is sent
    try:
        _handshake(scheduler)  # a listener that never answers: no wait for ever in Client
        client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT:g}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise FanOutError(f"dask scheduler {scheduler} unreachable: {_first_line(exc)}") from None
    except Exception as exc:  # something answered that speaks no Dask (say, an HTTP port)
        raise FanOutError(
            f"dask scheduler {scheduler} unreachable: what answers there is no Dask "
            f"scheduler ({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    with client:
        workers = _joined(client, scheduler, gpu, limit)
        count = len(workers)
        sown = seeds(count) if seeds is not None else Seeds([None] * count)
        report.notes += sown.notes
        sent = [_read(seed) for seed in sown.paths]
        with warnings.catch_warnings():  # a task that carries a seed is large: meant so
            warnings.filterwarnings("ignore", "(?i).*large graph", UserWarning)
            futures = _submit(client, argv, workers, sent, cwd, passed)
        if on_shard is not None:
            on_shard(None, count)
        failed: list[str] = []  # every shard is waited for: what the others built is kept
        for future in _finished(client, scheduler, list(futures), limit):
            shard, worker = futures[future]
            try:
                (code, doc, data, error), seconds = future.result()
            except Exception as exc:  # it raised on its worker, or its workers kept dying
                failed.append(f"shard {shard} on {worker} failed: {_first_line(exc)}")
                continue
            if code != 0 or not data:
                failed.append(f"shard {shard} on {worker} failed (exit {code}): {error}")
                continue
            path = folder / f"shard{shard.replace('/', '-of-')}.warm"
            path.write_bytes(data)
            report.paths.append(path)
            result = ShardResult(shard, worker, doc, seconds, sent[int(shard.split("/")[0])][1])
            report.shards.append(result)
            if on_shard is not None:
                on_shard(result, count)
        if failed:
            report.paths.sort()
            raise FanOutError(failed[0] + (f" (and {len(failed) - 1} more)" if failed[1:] else ""))
    report.shards.sort(key=lambda r: int(r.shard.split("/")[0]))
    report.paths.sort()
    return report


def _submit(
    client: Any,
    argv: Sequence[str],
    workers: Sequence[str],
    sent: Sequence[tuple[bytes | None, int]],
    cwd: str | None,
    passed: dict[str, str | None] | None,
) -> dict[Any, tuple[str, str]]:
    """One task per worker, pinned there (another runs it where it is lost): future ->
    (shard, worker). The keys are this fan-out's own: Dask runs a key once, so another
    caller's task of the same key (its process id, in another container) would be its."""
    count, token = len(workers), uuid.uuid4().hex
    return {
        client.submit(
            _timed,
            list(argv),
            f"{i}/{count}",
            cwd,
            sent[i][0],
            passed,
            key=f"warm-shard-{i}-of-{count}-{token}",
            workers=[worker],
            allow_other_workers=True,  # its worker lost: another runs it, never a hang
            pure=False,
        ): (f"{i}/{count}", worker)
        for i, worker in enumerate(workers)
    }


def _read(seed: Path | None) -> tuple[bytes | None, int]:
    """A shard's seed, as the bytes its task carries (not scattered to its worker: a task
    whose worker is lost runs on another, its seed with it), and their count."""
    data = None if seed is None else seed.read_bytes()
    return data, len(data or b"")


def _handshake(scheduler: str) -> None:
    """Connect to `scheduler` and read its handshake, within `CONNECT_TIMEOUT` in all, then
    hang up: Dask's connect reads the peer's handshake with no time limit (whatever
    `Client(timeout=)` says), so a port that takes the connection and never answers (Dask's
    dashboard, an HTTP server waiting for a request) would be waited on for ever. It
    connects as `Client` does, with the TLS settings of Dask's configuration (`tls://`)."""
    import asyncio

    from distributed.comm import connect
    from distributed.security import Security

    async def shake() -> None:
        args = Security().get_connection_args("client")
        comm = await connect(scheduler, timeout=CONNECT_TIMEOUT, **args)
        await comm.close()

    try:
        asyncio.run(asyncio.wait_for(shake(), CONNECT_TIMEOUT))
    except TimeoutError:  # the deadline (asyncio.wait_for), said as such
        raise TimeoutError(f"no answer within {CONNECT_TIMEOUT:g} s") from None


def _workers(client: Any) -> dict[str, dict[str, Any]]:
    """Every worker of the cluster, with its resources: all of them (a `distributed` that
    lists 5 by default is asked for all; one that knows no such argument lists all)."""
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:
        info = client.scheduler_info()
    if "workers" not in info:  # (Dask's answer once the scheduler is lost: {}, no KeyError)
        raise ConnectionError("it stopped answering")
    return info["workers"]  # type: ignore[no-any-return]


def _joined(client: Any, scheduler: str, gpu: bool, limit: float) -> list[str]:
    """The workers that get a shard (`shard_workers`); a cluster with none yet (workers
    started beside it: `NO_WORKER_WAIT`) is looked at every `POLL` for `limit` seconds
    (`no_worker_wait()`) until a look finds workers and no more than the look before."""
    deadline, seen = time.monotonic() + limit, None  # (None: the first look)
    while True:
        try:
            workers = shard_workers(_workers(client), gpu)
        except Exception as exc:  # the connection to the scheduler is gone
            raise FanOutError(f"dask scheduler {scheduler} lost: {_first_line(exc)}") from None
        left = deadline - time.monotonic()
        if left <= 0 or (workers and (seen is None or workers == seen)):
            break
        seen = workers
        time.sleep(min(POLL, left))
    if not workers:
        waited = f"none joined in {limit:g} s: WARM_DASK_NO_WORKER_WAIT"
        raise FanOutError(f"dask scheduler {scheduler}: no workers ({waited})")
    return workers


def _finished(client: Any, scheduler: str, futures: list[Any], limit: float) -> Iterator[Any]:
    """The `futures` as each finishes. While some are left, a cluster with no worker (all
    lost) for `limit` seconds (`no_worker_wait()`), or a scheduler that stops answering, is a
    `FanOutError` naming how many shards are unfinished: never a wait for ever."""
    from distributed import TimeoutError as WaitTimeout  # asyncio's: on 3.10 no TimeoutError
    from distributed import wait

    pending, alone_since = set(futures), None
    while pending:
        try:
            done, pending = wait(pending, timeout=POLL, return_when="FIRST_COMPLETED")
        except (TimeoutError, WaitTimeout):
            done = set()
        except Exception as exc:  # the connection to the scheduler is gone
            raise FanOutError(f"dask scheduler {scheduler} lost: {_first_line(exc)}") from None
        yield from (f for f in futures if f in done)  # in submission order
        if done or not pending:
            alone_since = None
            continue
        try:
            workers = client.nthreads()
        except Exception as exc:
            raise FanOutError(f"dask scheduler {scheduler} lost: {_first_line(exc)}") from None
        now = time.monotonic()
        alone_since = None if workers else (alone_since or now)
        if alone_since is not None and now - alone_since >= limit:
            raise FanOutError(
                f"dask scheduler {scheduler}: no worker for {limit:g} s "
                f"(WARM_DASK_NO_WORKER_WAIT), {len(pending)} shard(s) unfinished"
            )


def no_worker_wait() -> float:
    """`WARM_DASK_NO_WORKER_WAIT` seconds (default `NO_WORKER_WAIT`); a value that is no
    number of seconds above 0 is a `FanOutError`."""
    text = config.dask_no_worker_wait()
    try:
        return NO_WORKER_WAIT if text is None else config.parse_seconds(text)
    except ValueError as exc:
        raise FanOutError(f"WARM_DASK_NO_WORKER_WAIT: {exc}") from None


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _timed(
    argv: list[str],
    shard: str,
    cwd: str | None,
    seed: bytes | None = None,
    passed: dict[str, str | None] | None = None,
) -> tuple[tuple[int, dict[str, Any], bytes, str], float]:
    started = time.perf_counter()
    result = run_shard(argv, shard, cwd, seed, passed)
    return result, time.perf_counter() - started
