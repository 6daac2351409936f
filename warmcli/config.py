"""Every setting warm takes from the environment, read in this one place.

Each setting is a function read at call time (a test or a launcher may set the variable after
import), taking the environment to read as an argument where a caller has its own (`environ`, else
the process's). Besides the `WARM_*` variables (`VARIABLES`, which `warm --help` lists) it reads
other tools' variables: `CUDA_HOME`/`CUDA_PATH`, `PATH` (to find compilers), what nvcc reads from
`NVCC_PREPEND_FLAGS`/`NVCC_APPEND_FLAGS`/`NVCC_CCBIN`, the launchers' shard variables
(`LAUNCHERS`), PyCUDA's `PYCUDA_DEFAULT_NVCC_FLAGS` and `CUDA_DEVICE`, `XDG_CACHE_HOME`, `HOME`
and Android's `ANDROID_DATA`/`ANDROID_ROOT` (as platformdirs reads them), `COLUMNS`, and the
include folders the host C compiler reads (`CPATH`, `C_INCLUDE_PATH`; nvcc's host compiler
`CPLUS_INCLUDE_PATH` too), its linker's `LIBRARY_PATH`, where it finds its programs
(`GCC_EXEC_PREFIX`, `COMPILER_PATH`), the loader's `LD_LIBRARY_PATH`, and the variables a C
compiler that is a wrapper script names (`named_variables`), and SQLite's `SQLITE_TMPDIR` and
`TMPDIR` (`sqlite_temp_dir`: where it keeps its temporary files). The functions return the values
as set (a flag as a bool, a list of paths split; `WARM_BUNDLE`'s and `WARM_HOME`'s leading `~`
expanded, as no shell did where an ENV line set it); what a value means is decided by the module
that uses it (`parse_size` reads a size, as `--max-size` and `WARM_REMOTE_MAX_SIZE` take it). Its
one state: a compile unit's environment, read in `read_in` (a context variable); it writes the
environment only to make a relative bundle or home the caller's (`pin_relative`) and to start each
warming pass in the first's (`restore_environment`)."""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from warmcli.include_options import absolute_include_paths
from warmcli.printable import Pattern
from warmcli.records import Record

Environ = Mapping[str, str]


class Variable(Record):
    """A `WARM_*` variable: its name, the values it takes, what it sets."""

    name: str
    help: str
    value: str = ""  # the values it takes, when they are few ("1", "1|warn")
    production: bool = False  # read by production processes only (the others by the commands too)


# Every WARM_* variable, in the order `warm --help` lists them (README: "Environment variables").
VARIABLES: tuple[Variable, ...] = (
    Variable("WARM_BUNDLE", "bundle path"),
    Variable(
        "WARM_HOME",
        "warm's home: the default bundle, the remembered compiler versions, the host library cache",
    ),
    Variable("WARM_CUDA_COMPILER", "nvrtc, nvcc or auto; auto: nvrtc where installed"),
    Variable("WARM_NVCC", "nvcc to use"),
    Variable("WARM_CC", "C compiler for the host backend"),
    Variable("WARM_SHARD", "warm run's shard, I/N"),
    Variable(
        "WARM_DASK_NO_WORKER_WAIT",
        "seconds warm run --dask waits with no worker left (default 60)",
    ),
    Variable("WARM_SHARD_COUNT", "the shard count beside JOB_COMPLETION_INDEX"),
    Variable("WARM_TRUSTED_KEYS", "Ed25519 public key files: use only entries they signed"),
    Variable("WARM_REMOTE_MAX_SIZE", "the most a URL's bundle may download (default 4G)"),
    Variable("WARM_REMOTE_DEADLINE", "seconds a URL's bundle may take to download (default 300)"),
    Variable("WARM_REPORT", "print at exit what the bundle lacked", "1", production=True),
    Variable("WARM_BUNDLE_WRITE", "write the misses back", "1", production=True),
    Variable("WARM_EXPLAIN", "log why each miss missed", "1", production=True),
    Variable("WARM_STRICT", "refuse or log a miss", "1|warn", production=True),
)

TRUSTED_KEYS_ENV = "WARM_TRUSTED_KEYS"

# (index variable, count variable, offset variable, step variable) per launcher, in the
# order read: the shard is (index - offset) / step (`sbatch --array=0-12:4`: 0, 4, 8, 12).
LAUNCHERS: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("JOB_COMPLETION_INDEX", "WARM_SHARD_COUNT", None, None),
    ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
     "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP"),
    ("RANK", "WORLD_SIZE", None, None),
)  # fmt: skip
# Every variable that picks a process's shard.
SHARD_VARIABLES = ("WARM_SHARD", *(v for group in LAUNCHERS for v in group if v))
# Never a fan-out worker's (`worker_environment`), so `--dask-env` refuses to pass them.
NOT_PASSED = (*SHARD_VARIABLES, TRUSTED_KEYS_ENV)

# Where a CUDA toolkit may be installed, in the order looked at.
CUDA_HOMES = ("CUDA_HOME", "CUDA_PATH")
# What nvcc reads from the environment: options it adds, the host compiler it preprocesses with.
NVCC_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")
_READ_IN: ContextVar[Environ | None] = ContextVar("warm_read_in", default=None)  # (`read_in`)
Pairs = tuple[tuple[str, str], ...]  # an environment as a compile unit keeps it (`environment`)
Held = Mapping[Any, Any]  # as this process holds it (bytes on POSIX: `held_environment`)


def _env(environ: Environ | None) -> Environ:
    return (_READ_IN.get() or os.environ) if environ is None else environ


def environment(held: Held | None = None, last: Held | None = None, like: Pairs = ()) -> Pairs:
    """This process's environment as a compile unit queued now keeps it, decoded from one copy
    read at once (`held`: no KeyError where a thread unsets one), each pair of `like` (decoded from
    `last`) kept where its value is the same object (a 1 MB `PATH` 10,000 units hold: one)."""
    env, held, last = os.environ, dict(held_environment()) if held is None else held, last or {}
    key, value = getattr(env, "decodekey", str), getattr(env, "decodevalue", str)
    old = dict(zip(last, like, strict=True)) if len(last) == len(like) else {}
    pairs = ((k, v, old.get(k)) for k, v in held.items())
    return tuple(p if p and last[k] is v else (key(k), value(v)) for k, v, p in pairs)


def held_environment() -> Held:  # as this process holds it: to compare, to copy
    return getattr(os.environ, "_data", os.environ)  # (os.environ's own: no copy, no decoding)


def restore_environment(made: Pairs) -> None:
    """Make the environment `made` again (each pass starts in the first's: `one_pass`)."""
    wanted, now = dict(made), dict(environment())
    for name in now.keys() - wanted.keys():
        with contextlib.suppress(KeyError):
            del os.environ[name]
    os.environ.update({k: v for k, v in wanted.items() if now.get(k) != v})


@contextlib.contextmanager
def read_in(environ: Environ | None) -> Iterator[None]:
    """Settings read here as `environ` gives them (a compile unit's, as its key read them)."""
    token = _READ_IN.set(environ)
    try:
        yield
    finally:
        _READ_IN.reset(token)


# What turns a `1` flag off, as `WARM_STRICT` reads it too (any case, spaces stripped).
OFF_WORDS = ("", "0", "off", "false", "no")


def _flag(name: str, environ: Environ | None) -> bool:
    """A `1` flag: set to anything but one of `OFF_WORDS` (`WARM_BUNDLE_WRITE=false`: off)."""
    return _env(environ).get(name, "").strip().lower() not in OFF_WORDS


def pin_relative(folder: str) -> None:
    """A relative `WARM_BUNDLE` (no URL) and `WARM_HOME` absolute in `folder` (blank: none)."""
    for name, value in ((n, os.environ.get(n, "")) for n in ("WARM_BUNDLE", "WARM_HOME")):
        if value.strip() and not (name == "WARM_BUNDLE" and "://" in value):
            os.environ[name] = os.path.join(folder, _expanded(value))  # (absolute: as it was)


def _expanded(path: str | None) -> str | None:
    """`path`, a leading `~` its home, as a shell expands it (set by a Dockerfile's ENV: none)."""
    return os.path.expanduser(path) if path and path[0] == "~" else path


def home(environ: Environ | None = None) -> str | None:
    """`WARM_HOME` (warmcli.home), `~` expanded: None unset, empty or blank (no folder " ")."""
    return _expanded(named) if (named := _env(environ).get("WARM_HOME", "")).strip() else None


def xdg_cache_home(environ: Environ | None = None) -> str | None:
    """`XDG_CACHE_HOME`, which the user cache directory follows (warmcli.home)."""
    return _env(environ).get("XDG_CACHE_HOME")


def user_home(environ: Environ | None = None) -> str | None:
    """`HOME`, which the user cache directory follows where `XDG_CACHE_HOME` is unset."""
    return _env(environ).get("HOME")


def tmpdir(environ: Environ | None = None) -> str | None:
    """`TMPDIR`, where a uid with no home keeps warm's home (warmcli.home)."""
    return _env(environ).get("TMPDIR")


def android_app(environ: Environ | None = None) -> bool:
    """Whether the environment is an Android app's (platformdirs' test of it)."""
    env = _env(environ)
    return env.get("ANDROID_DATA") == "/data" and env.get("ANDROID_ROOT") == "/system"


def bundle(environ: Environ | None = None) -> str | None:
    """`WARM_BUNDLE`, the one rule the commands and production share: None when unset;
    `""` when set and empty or blank (production serves no bundle, a command its default
    bundle, as for `WARM_TRUSTED_KEYS`: never a file named by spaces); else a bundle's path
    or an `https://` or `s3://` URL (a path's leading `~` expanded)."""
    named = _env(environ).get("WARM_BUNDLE")
    return "" if named is not None and not named.strip() else _expanded(named)


def bundle_write(environ: Environ | None = None) -> bool:
    """`WARM_BUNDLE_WRITE=1`: production writes its misses back at exit."""
    return _flag("WARM_BUNDLE_WRITE", environ)


def report(environ: Environ | None = None) -> bool:
    """`WARM_REPORT=1`: production prints at exit what the bundle lacked."""
    return _flag("WARM_REPORT", environ)


def explain(environ: Environ | None = None) -> bool:
    """`WARM_EXPLAIN`: log each miss (anything but one of `OFF_WORDS`)."""
    return _flag("WARM_EXPLAIN", environ)


def strict(environ: Environ | None = None) -> str | None:
    """`WARM_STRICT` as set (`warmcli.runtime.misses.Strictness` parses it)."""
    return _env(environ).get("WARM_STRICT")


def trusted_keys(environ: Environ | None = None) -> list[str] | None:
    """`WARM_TRUSTED_KEYS`: key files or folders, split at `os.pathsep`; None: unset, blank."""
    text = _env(environ).get(TRUSTED_KEYS_ENV, "").strip()
    return [p for p in text.split(os.pathsep) if p.strip()] if text else None  # (" ": none)


def remote_max_size(environ: Environ | None = None) -> str | None:
    """`WARM_REMOTE_MAX_SIZE` stripped: None when unset or blank."""
    return _env(environ).get("WARM_REMOTE_MAX_SIZE", "").strip() or None


def remote_deadline(environ: Environ | None = None) -> str | None:
    """`WARM_REMOTE_DEADLINE` stripped: None when unset or blank."""
    return _env(environ).get("WARM_REMOTE_DEADLINE", "").strip() or None


_SIZE = Pattern(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)  # on first use
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def dask_no_worker_wait(environ: Environ | None = None) -> str | None:
    """`WARM_DASK_NO_WORKER_WAIT` stripped: None when unset or blank."""
    return _env(environ).get("WARM_DASK_NO_WORKER_WAIT", "").strip() or None


def parse_seconds(text: str) -> float:
    """Seconds from `text`, a number above 0 and finite (`ValueError` naming it otherwise)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"not a number of seconds above 0: {str(text)[:40]!r}")
    return seconds


def parse_size(text: str) -> int:
    """Bytes from `123`, `500K`, `10M`, `1.5G` (powers of 1024; a trailing `B`/`iB` is fine);
    `ValueError` naming it for anything else, a number past what a float holds too."""
    match = _SIZE.match(text)
    size = float(match.group(1)) * _UNITS[match.group(2).upper()] if match else math.nan
    if not math.isfinite(size):  # 400 digits read as a float are infinite
        raise ValueError(f"not a size: {text[:40]!r} (use bytes, or a number with K, M, G or T)")
    return int(size)


def cc(environ: Environ | None = None) -> str | None:
    """`WARM_CC`, the host backend's C compiler: None when unset or empty."""
    return _env(environ).get("WARM_CC") or None


def nvcc(environ: Environ | None = None) -> str | None:
    """`WARM_NVCC`, the nvcc to use: None when unset or empty."""
    return _env(environ).get("WARM_NVCC") or None


def cuda_compiler(environ: Environ | None = None) -> str:
    """`WARM_CUDA_COMPILER` stripped (`nvrtc`, `nvcc`, `auto`); `""` when unset."""
    return _env(environ).get("WARM_CUDA_COMPILER", "").strip()


def nvcc_flags(environ: Environ | None = None) -> dict[str, str]:
    """`NVCC_PREPEND_FLAGS`, `NVCC_APPEND_FLAGS` (its options), `NVCC_CCBIN`, where not empty."""
    env = _env(environ)
    return {name: env[name] for name in NVCC_FLAGS if env.get(name)}


def cuda_homes(environ: Environ | None = None) -> dict[str, str | None]:
    """`CUDA_HOME` and `CUDA_PATH` (in that order), each None when unset or empty."""
    env = _env(environ)
    return {name: env.get(name) or None for name in CUDA_HOMES}


def path(environ: Environ | None = None) -> str:
    """`PATH`, where compilers are searched (`os.defpath` when unset)."""
    return _env(environ).get("PATH", os.defpath)


def loader_path(environ: Environ | None = None) -> str:
    """`LD_LIBRARY_PATH`, where the dynamic loader looks for the libraries a binary needs."""
    return _env(environ).get("LD_LIBRARY_PATH", "")


def columns(environ: Environ | None = None) -> str | None:
    """`COLUMNS`, the terminal width the CLI's output follows off a terminal."""
    return _env(environ).get("COLUMNS")


def rich_environment(environ: Environ | None = None) -> dict[str, str]:
    """The environment for Rich's consoles, less a `COLUMNS` or `LINES` that is no number
    `int` reads (`²`, which `str.isdigit` takes, or 5,000 digits): Rich would raise on it."""
    sizes, env = ("COLUMNS", "LINES"), _env(environ)  # (`int` reads at most 4,300 digits)
    read = {k for k in sizes if (v := env.get(k, "")).isascii() and v.isdigit() and len(v) <= 4000}
    return {k: v for k, v in env.items() if k not in sizes or k in read}


def compiler_environment(  # (a unit's `environ` and `folder`: `CompileUnit.queued`)
    usable_tmp: str, environ: Environ | None = None, scratch: bool = False,
    c_locale: bool = False, folder: str = "",
) -> dict[str, str] | None:  # fmt: skip
    """The environment a compiler warm runs gets: `environ` (a unit's, a copy; None: this process's,
    and None where nothing changes), with `TMPDIR` `usable_tmp` where it names another (Python's
    `tempfile` fell back from a missing or read-only one, or made a relative one absolute) or
    that is the compiler's own `scratch` folder; `CPATH`'s and its kin's relative or empty entries
    `folder`'s, else the working folder's (`include_options.absolute_include_paths`). `c_locale`:
    `LC_ALL=C`, no `LANGUAGE` (gettext's), for an answer warm parses or keys builds by."""
    env = _env(environ)
    named = env.get("TMPDIR")
    folders = absolute_include_paths(env, folder)
    if environ is None and not (scratch or c_locale or folders) and named in (None, "", usable_tmp):
        return None
    made = {**env, **folders}
    if scratch or (named and named != usable_tmp):
        made["TMPDIR"] = usable_tmp
    if c_locale:
        made.pop("LANGUAGE", None)
        made["LC_ALL"] = "C"
    return made


def pycuda_nvcc_flags(environ: Environ | None = None) -> list[str]:
    """`PYCUDA_DEFAULT_NVCC_FLAGS`, PyCUDA's default compiler options, split at spaces."""
    return _env(environ).get("PYCUDA_DEFAULT_NVCC_FLAGS", "").split()


def shard_variables(environ: Environ | None = None) -> dict[str, str]:
    """The shard variables that are set (`SHARD_VARIABLES`: `warmcli.runtime.shard` reads them)."""
    env = _env(environ)
    return {name: env[name] for name in SHARD_VARIABLES if name in env}


def worker_environment(
    environ: Environ | None = None, passed: Mapping[str, str | None] | None = None
) -> dict[str, str]:
    """A copy of the environment for a fan-out worker's `warm run`, with the caller's values of
    the variables `passed` names (`--dask-env`; None: unset there, as for the caller), less the
    shard variables (the task says its shard) and `WARM_TRUSTED_KEYS` (the caller judges it all)."""
    env = dict(_env(environ))
    for name, value in (passed or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return {k: v for k, v in env.items() if k not in NOT_PASSED}


def caller_values(names: Sequence[str], environ: Environ | None = None) -> dict[str, str | None]:
    """This process's values of the variables `names` (None: unset), for `--dask-env`."""
    env = _env(environ)
    return {name: env.get(name) for name in names}


def compiler_include_paths(environ: Environ | None = None, cxx: bool = False) -> tuple[str, str]:
    """`CPATH` and `C_INCLUDE_PATH` (`cxx`: `CPLUS_INCLUDE_PATH`, nvcc's gcc's), "" unset."""
    env = _env(environ)
    return env.get("CPATH", ""), env.get("CPLUS_INCLUDE_PATH" if cxx else "C_INCLUDE_PATH", "")


def library_path(environ: Environ | None = None) -> str:
    """`LIBRARY_PATH`, where cc's linker looks for a `-l` library after `-L` ("" unset)."""
    return _env(environ).get("LIBRARY_PATH", "")


# What makes gcc run compiler programs (`cc1`, `as`, `ld`) from a folder it names.
COMPILER_PROGRAMS = ("GCC_EXEC_PREFIX", "COMPILER_PATH")


def compiler_programs(environ: Environ | None = None) -> dict[str, str]:
    """`GCC_EXEC_PREFIX` and `COMPILER_PATH` where set and not empty (cc runs programs there)."""
    env = _env(environ)
    return {name: env[name] for name in COMPILER_PROGRAMS if env.get(name)}


def named_variables(names: Iterable[str], environ: Environ | None = None) -> dict[str, str]:
    """The variables among `names` that are set (a C compiler wrapper script's: `$CFLAGS`)."""
    env = _env(environ)
    return {name: env[name] for name in names if name in env}


def sqlite_temp_dir() -> tuple[str, str]:
    """The folder SQLite keeps its temporary files in, as its Unix build picks it: the first of
    SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, /tmp and "." this process may write and enter,
    and the variable that moves it (not `tempfile`'s list: TEMP, TMP, /tmp before /var/tmp)."""
    named = [os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR")]
    found = "."
    for folder in [*named, "/var/tmp", "/usr/tmp", "/tmp"]:
        if folder and os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
            found = folder
            break
    return found, "SQLITE_TMPDIR" if named[0] else "TMPDIR"
