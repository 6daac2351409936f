"""What the caches hand the bundle, and what the bundle hands back: plain records.

A `KernelRecord` is one compiled kernel (its key, where and by what it was
built, the symbol it has in its binary, the binary's sha256, the compile log and
time); the binary itself travels beside it, never inside it, so a bundle can be
opened without reading a single blob. A `TuneRecord` is one tune decision with
the evidence: every candidate's measurement, failed ones with their reason. These
are data only: JSON in and out, no behaviour, nothing executable; `tune_key` is
the one function, so the bundle can check a tune row's key against its fields (and
`where`, the one phrase naming a kernel's device and arch).
A `CompilerCommand` is one compiler process a pass ran (the device it built for, and
its argv), counted by the statistics collector and shown by `warm run -v`.
A `MissExplanation` is one miss a bundle could not serve, explained (its `line` is
escaped with `warmcli.printable`, as everything read from a bundle is).
Every record is a `Record`: a frozen dataclass's behaviour (fields from annotations,
equality, hash, repr; `dataclasses.fields`/`replace`/`asdict` work) without generating
code when the class is made, which a serving process would pay for at import; warm's
other plain records (statistics, fingerprints, compile units, ...) derive from it too,
with `factory` (a fresh default), `derived` (a field `__init__` does not take) and
`field_types` (the fields without `dataclasses`). This module owns no state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _quoted  # what `json.dumps` quotes with
from typing import Any, ClassVar, dataclass_transform  # the last: a record's `__init__`

from warmcli.printable import cut, printable


class _Factory:
    """A field's default made afresh for each record (`factory(dict)`)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def factory(make: Callable[[], Any]) -> Any:
    """The default of a field whose value is made afresh for each record, as `make()`."""
    return _Factory(make)


class _Derived:
    """A field `__init__` does not take: `default` until `__post_init__` sets it."""

    __slots__ = ("default",)

    def __init__(self, default: Any) -> None:
        self.default = default


def derived(default: Any) -> Any:
    """A field `__init__` does not take (`field(init=False, default=...)`)."""
    return _Derived(default)


class _DataclassFields:
    """`__dataclass_fields__` of a `Record` class, made on first use: `dataclasses.fields`,
    `replace` and `asdict` work on records, and a process that never calls them never
    pays for making them (nor imports `dataclasses`)."""

    def __get__(self, obj: object, cls: type[Record]) -> dict[str, Any]:
        import dataclasses

        namespace: dict[str, Any] = {"__annotations__": dict(cls._annotations)}
        for name, default in cls._defaults.items():
            namespace[name] = (
                dataclasses.field(default_factory=default.make)
                if isinstance(default, _Factory)
                else default
            )
        for name, default in cls._derived.items():
            namespace[name] = dataclasses.field(init=False, default=default)
        twin = dataclasses.dataclass(frozen=cls._frozen)(type(cls.__name__, (), namespace))
        fields: dict[str, Any] = twin.__dataclass_fields__
        type.__setattr__(cls, "__dataclass_fields__", fields)  # made once per class
        return fields


def field_types(record: Record | type[Record]) -> dict[str, str]:
    """A record's fields, in order, each with its annotation's text (`"float"`): what
    `dataclasses.fields` tells, without making the `Field`s."""
    return record._annotations


@dataclass_transform(frozen_default=True)
class Record:
    """The base of warm's plain records: a frozen dataclass's behaviour without its
    cost at import (no generated code). Fields are the class's annotations, in order,
    defaults its class attributes (`factory(make)` for one made afresh); `__init__`
    takes them positionally or by name (but a `derived(default)` one) and calls
    `__post_init__` if the class has one;
    equality, hash and repr are by field, as a dataclass's; `frozen=False` in the class
    header lets its fields be set."""

    _names: ClassVar[tuple[str, ...]] = ()
    _annotations: ClassVar[dict[str, str]] = {}
    _defaults: ClassVar[dict[str, Any]] = {}
    _derived: ClassVar[dict[str, Any]] = {}
    _init_names: ClassVar[tuple[str, ...]] = ()
    _frozen: ClassVar[bool] = True
    __dataclass_fields__: Any = _DataclassFields()

    def __init_subclass__(cls, frozen: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (inspect: slow)
        cls._annotations = {**cls._annotations, **own}
        cls._names = tuple(cls._annotations)
        defaults, derived = dict(cls._defaults), dict(cls._derived)
        for name in own:
            value = cls.__dict__.get(name, defaults)
            if isinstance(value, _Derived):
                derived[name] = value.default
                setattr(cls, name, value.default)
            elif value is not defaults:
                defaults[name] = value
                if isinstance(value, _Factory):
                    delattr(cls, name)
        cls._defaults, cls._derived = defaults, derived
        cls._init_names = tuple(n for n in cls._names if n not in derived)
        cls._frozen = frozen
        if not frozen:
            cls.__setattr__ = object.__setattr__  # type: ignore[method-assign, assignment]
            cls.__delattr__ = object.__delattr__  # type: ignore[method-assign, assignment]
            cls.__hash__ = None  # type: ignore[assignment]  # as a mutable dataclass's

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self._init_names
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}() takes {len(names)} arguments")
        values = self.__dict__
        for name, value in zip(names, args, strict=False):
            values[name] = value
        for name in names[len(args) :]:
            if name in kwargs:
                values[name] = kwargs.pop(name)
            elif name in self._defaults:
                default = self._defaults[name]
                values[name] = default.make() if isinstance(default, _Factory) else default
            else:
                raise TypeError(f"{type(self).__name__}() missing argument {name!r}")
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got unexpected arguments {sorted(kwargs)}")
        values.update(self._derived)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._names)
        return f"{type(self).__qualname__}({fields})"

    def as_fields(self) -> dict[str, Any]:
        """Every field by name, in order (a shallow `dataclasses.asdict`)."""
        return {name: getattr(self, name) for name in self._names}

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined, no-any-return]

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")


class KernelRecord(Record):
    key: str
    device: str
    backend: str
    arch: str
    entry: str
    label: str
    symbol: str
    sha256: str
    toolchain: str
    components: dict[str, str] = factory(dict)
    compile_log: str = ""
    seconds: float = 0.0
    size: int = 0

    def __init__(  # by hand: one is made for every kernel a bundle serves
        self,
        key: str,
        device: str,
        backend: str,
        arch: str,
        entry: str,
        label: str,
        symbol: str,
        sha256: str,
        toolchain: str,
        components: dict[str, str] | None = None,
        compile_log: str = "",
        seconds: float = 0.0,
        size: int = 0,
    ) -> None:
        fields = self.__dict__  # item by item: the fastest way to fill it
        fields["key"] = key
        fields["device"] = device
        fields["backend"] = backend
        fields["arch"] = arch
        fields["entry"] = entry
        fields["label"] = label
        fields["symbol"] = symbol
        fields["sha256"] = sha256
        fields["toolchain"] = toolchain
        fields["components"] = {} if components is None else components
        fields["compile_log"] = compile_log
        fields["seconds"] = seconds
        fields["size"] = size


def symbol_prefix(key: str) -> str:
    """What a kernel's entry is prefixed with in its binary, under `key`: `warm_<key[:16]>_`
    (written by `CompileUnit.symbol`, checked against its key by a bundle's reader)."""
    return f"warm_{key[:16]}_"


def where(device: str, arch: str) -> str:
    """A kernel's device and arch in one phrase (a compile-only device is named by its arch)."""
    return device if device == arch else f"{device} {arch}"


class CompilerCommand(Record):
    """One compiler process a compile ran: the device it built for, and its argv."""

    device_id: str
    argv: tuple[str, ...]


_set = object.__setattr__  # a frozen record's field, set where it is made
HELD_SAMPLES = 1024  # samples a served tune keeps (`TuneRecord.served`): 5 each of 200 candidates


class CandidateMeasurement(Record):
    """One candidate of a tune: its median time, every sample, or why it failed."""

    name: str
    kernel_key: str
    status: str  # "ok", "failed" or "pending"
    seconds: float | None = None
    samples: tuple[float, ...] = ()
    reason: str = ""

    def __init__(  # by hand: a bundle's reader makes one for every candidate of every tune
        self,
        name: str,
        kernel_key: str,
        status: str,
        seconds: float | None = None,
        samples: tuple[float, ...] = (),
        reason: str = "",
    ) -> None:
        # Set one by one, always in this order: CPython keeps such an object's fields inline
        # (136 bytes, not the 336 of a dict of its own, which `__dict__.update` makes), and
        # a tune may hold 246,000 of them (its packed document: `warmcli.bundle.candidates`)
        _set(self, "name", name)
        _set(self, "kernel_key", kernel_key)
        _set(self, "status", status)
        _set(self, "seconds", seconds)
        _set(self, "samples", samples)
        _set(self, "reason", reason)


class TuneRecord(Record):
    """One tune decision: key parts, the pick and all candidates' measurements."""

    key: str
    operation: str
    shape_key: str
    device: str
    checksum: str
    status: str  # "measured" or "pending"
    pick: str | None
    candidates: tuple[CandidateMeasurement, ...]
    seconds: float = 0.0
    measured_at: float = 0.0

    def __init__(  # by hand: a bundle's reader makes one for every tune it reads
        self,
        key: str,
        operation: str,
        shape_key: str,
        device: str,
        checksum: str,
        status: str,
        pick: str | None,
        candidates: tuple[CandidateMeasurement, ...],
        seconds: float = 0.0,
        measured_at: float = 0.0,
    ) -> None:
        self.__dict__.update(
            key=key,
            operation=operation,
            shape_key=shape_key,
            device=device,
            checksum=checksum,
            status=status,
            pick=pick,
            candidates=candidates,
            seconds=seconds,
            measured_at=measured_at,
        )

    def candidates_json(self) -> str:
        return json.dumps([c.as_fields() for c in self.candidates], separators=(",", ":"))

    def served(self) -> TuneRecord:
        """This record as a serving process holds it: without samples where over `HELD_SAMPLES`
        (a row of 7 KB may inflate to 500,000: 40 such tunes held 800 MB for its life)."""
        if sum(len(c.samples) for c in self.candidates) <= HELD_SAMPLES:
            return self  # (nearly every tune: made anew, a record costs ~15 us)
        held = (CandidateMeasurement(*c._values()[:4], (), c.reason) for c in self.candidates)
        return TuneRecord(*self._values()[:7], tuple(held), self.seconds, self.measured_at)

    @staticmethod
    def candidates_from(items: object) -> tuple[CandidateMeasurement, ...]:
        """The candidates of `candidates_json`'s output once parsed back from JSON."""
        if not isinstance(items, list):
            raise ValueError("candidates is not a list")
        out = []
        for item in items:
            if not isinstance(item, dict):
                raise ValueError("candidate is not an object")
            seconds = item.get("seconds")
            out.append(
                CandidateMeasurement(
                    str(item["name"]),
                    str(item.get("kernel_key", "")),
                    str(item["status"]),
                    None if seconds is None else float(seconds),
                    tuple(map(float, item.get("samples", ()))),
                    str(item.get("reason", "")),
                )
            )
        return tuple(out)


class MissExplanation(Record):
    """One miss: what was missed, the key component that differs, the two values, and
    the device it was missed on (`warmcli.runtime.explain` builds them; the miss policy
    names the device; statistics, checks and reports carry them)."""

    kind: str  # "kernel" or "tune"
    key: str
    label: str
    reason: str  # one of `warmcli.runtime.explain.REASONS`
    detail: str  # "bundle has X, this process wants Y"
    differs: tuple[str, ...] = ()  # every component the nearest entry differs in
    device: str = ""  # the device id it was missed on (set where it is counted: `on`)

    def on(self, device: str) -> MissExplanation:
        """This miss, on the device `device` (its id: `sm_90`, `host`)."""
        return MissExplanation(**{**self.as_fields(), "device": device})

    def line(self) -> str:
        """One line to print or log: the bundle's text in it has its control characters
        escaped, so it cannot forge a line or drive a terminal."""
        return printable(f"{self.kind} {cut(self.label)}: {self.reason}: {cut(self.detail, 4096)}")

    def as_dict(self) -> dict[str, object]:
        return {**self.as_fields(), "differs": list(self.differs)}


def tune_key(operation: str, shape_key: str, device_identity: str, checksum: str) -> str:
    """The key of one tune: operation, shape key, device fingerprint, candidate set (the
    sha256 of `json.dumps` of the four; texts quoted as `json.dumps` quotes them, without
    making its encoder: a bundle's reader checks the key of every tune it reads)."""
    if str is type(operation) is type(shape_key) is type(device_identity) is type(checksum):
        quoted = f"{_quoted(operation)}, {_quoted(shape_key)}, {_quoted(device_identity)}"
        return hashlib.sha256(f"[{quoted}, {_quoted(checksum)}]".encode()).hexdigest()
    payload = [operation, shape_key, device_identity, checksum]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()


class HeldElsewhere(Record):
    """Entries a bundle holds for a backend that are never served on this device: `count`
    kernels for `arch` that another toolchain (`by`) built (`kind` "kernel"), or tunes
    that another device (`by`, its fingerprint identity) measured (`kind` "tune"); `by` ""
    for those of every toolchain or device past the ones a bundle's reader counts alone."""

    kind: str
    by: str
    count: int
    arch: str = ""
