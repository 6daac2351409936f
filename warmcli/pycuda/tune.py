"""`autotune(configs=..., key=...)`: Triton's decorator over a PyCUDA-style launch function.

A hand-rolled loop that times each block size with events and keeps the fastest
becomes one decorator: every config (a dict of keyword arguments) is one candidate,
and calling the decorated function runs `rt.tune` on the bound runtime, so the pick
is measured once per key (warm-up, repeats, median, on a stream of its own), stored
in the bundle and served from it like any `Tunable`'s. `key` names the arguments
whose values (for arrays, their dtype and shape) key the tune; by default all of
them. The kernel each config launches is found by running the function once per
config with launches only recorded, not issued, so the function must do nothing
else (no allocation, no copies); a config's first kernel is its candidate, and any
further ones are queued with it under CompileOnly. An `Autotuned` owns the tunables
it made, one per distinct argument description.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from warmcli.execution.process_mode import ProcessMode, current_process_mode
from warmcli.forking import new_lock
from warmcli.kernel import Kernel
from warmcli.pycuda import context
from warmcli.pycuda.args import describe
from warmcli.pycuda.module import PyCudaError, recording
from warmcli.runtime.tune import Tunable

if TYPE_CHECKING:
    from warmcli.backends.base import Stream
    from warmcli.runtime.runtime import Runtime


class Config:
    """One candidate: the keyword arguments it passes to the launch function."""

    def __init__(self, kwargs: Mapping[str, Any] | None = None, **more: Any) -> None:
        self.kwargs = {**(kwargs or {}), **more}

    @property
    def name(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.kwargs.items()) or "default"

    def __repr__(self) -> str:
        return f"Config({self.kwargs!r})"


def _kernel_copy(kernel: Kernel) -> Kernel:
    """An equal kernel object of its own (two configs may launch the same kernel)."""
    return Kernel(
        kernel.source,
        kernel.entry,
        kernel.params,
        language=kernel.language,
        options=kernel.options,
        defines=dict(kernel.defines),
        name=kernel.name,
    )


class Autotuned:
    """A launch function tuned over configs; call it as the undecorated function."""

    def __init__(
        self,
        function: Callable[..., Any],
        configs: Sequence[Config | Mapping[str, Any]],
        key: Sequence[str] | None = None,
        *,
        name: str | None = None,
        warmup: int = 1,
        repeats: int = 5,
    ) -> None:
        self.function = function
        self.configs = [c if isinstance(c, Config) else Config(c) for c in configs]
        self.name = name or function.__name__
        if not self.configs:
            raise PyCudaError(f"autotune({self.name}): no configs")
        names = [c.name for c in self.configs]
        if len(set(names)) != len(names):
            raise PyCudaError(f"autotune({self.name}): two configs are alike: {names}")
        signature = inspect.signature(function)
        tuned = {k for c in self.configs for k in c.kwargs}
        self._inputs = [p for p in signature.parameters if p not in tuned]
        unknown = [k for k in key or () if k not in self._inputs]
        if unknown:
            raise PyCudaError(f"autotune({self.name}): key names no argument: {unknown}")
        self.key = list(key) if key is not None else None
        self.warmup, self.repeats = warmup, repeats
        # the caller passes the inputs alone: bound as if the configs' arguments were not there
        self._signature = signature.replace(
            parameters=[p for p in signature.parameters.values() if p.name not in tuned]
        )
        self._tunables: dict[tuple[Any, ...], tuple[Tunable, dict[int, Config]]] = {}
        self._lock = new_lock(self)  # new in a forked child (`warmcli.forking`)
        functools.update_wrapper(self, function)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        bound = self._signature.bind_partial(*args, **kwargs)
        bound.apply_defaults()
        missing = [p for p in self._inputs if p not in bound.arguments]
        if missing:
            raise TypeError(f"{self.name}() missing arguments: {', '.join(missing)}")
        return tuple(bound.arguments[p] for p in self._inputs)

    def _shape_key(self, *inputs: Any) -> str:
        named = dict(zip(self._inputs, inputs, strict=True))
        chosen = self.key if self.key is not None else self._inputs
        return " ".join(f"{k}={describe(named[k])}" for k in chosen)

    def _tunable(self, rt: Runtime, inputs: tuple[Any, ...]) -> tuple[Tunable, dict[int, Config]]:
        described = tuple(describe(v) for v in inputs)
        with self._lock:
            known = self._tunables.get(described)
        if known is not None:
            return known
        candidates: dict[str, Kernel] = {}
        by_kernel: dict[int, Config] = {}
        extra: list[Kernel] = []
        for config in self.configs:
            recording.kernels = []
            try:
                self._call(inputs, config)
                launched: list[Kernel] = recording.kernels
            finally:
                recording.kernels = None
            if not launched:
                raise PyCudaError(f"autotune({self.name}): config {config.name} launched no kernel")
            kernel = candidates[config.name] = _kernel_copy(launched[0])
            by_kernel[id(kernel)] = config
            extra += launched[1:]
        if current_process_mode() is ProcessMode.COMPILE_ONLY:
            for kernel in extra:
                rt.kernels.queue(kernel)
        tunable = Tunable(
            self.name,
            candidates,
            self._launch,
            key=self._shape_key,
            warmup=self.warmup,
            repeats=self.repeats,
        )
        with self._lock:
            return self._tunables.setdefault(described, (tunable, by_kernel))

    def _launch(self, rt: Runtime, kernel: Kernel, *inputs: Any, stream: Stream) -> None:
        _, by_kernel = self._tunables[tuple(describe(v) for v in inputs)]
        config = by_kernel[id(kernel)]
        with context.launch_stream(stream):
            self._call(inputs, config)

    def _call(self, inputs: tuple[Any, ...], config: Config) -> None:
        """The launch function on `inputs` (by name: a config's argument may sit between
        them) with `config`'s keyword arguments."""
        self.function(**dict(zip(self._inputs, inputs, strict=True)), **config.kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> str | None:
        """Launch with the picked config (measured first on a miss); returns its name."""
        inputs = self._bind(args, kwargs)
        rt = context.current_runtime()
        tunable, _ = self._tunable(rt, inputs)
        return rt.tune(tunable, *inputs)


def autotune(
    configs: Sequence[Config | Mapping[str, Any]],
    key: Sequence[str] | None = None,
    *,
    name: str | None = None,
    warmup: int = 1,
    repeats: int = 5,
) -> Callable[[Callable[..., Any]], Autotuned]:
    """Tune a launch function over `configs` (each a dict of its keyword arguments), keyed
    by the arguments named in `key`; see the module doc."""

    def decorate(function: Callable[..., Any]) -> Autotuned:
        return Autotuned(function, configs, key, name=name, warmup=warmup, repeats=repeats)

    return decorate
