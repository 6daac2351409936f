"""`SourceModule` and its functions, launching through the bound warm runtime.

`SourceModule(source, ...)` takes PyCUDA's arguments, meaning the same (its `extern "C"` wrap:
`warmcli.pycuda.source`); it compiles nothing itself. `get_function(name)` gives a `Function` whose
calls (`f(*args, block=, grid=, shared=, stream=)`, `prepare` then `prepared_call`, `_async_call`,
`_timed_call`) become warm `Kernel`s launched through the bound runtime (`warmcli.pycuda.context`):
each resolves its `LaunchMode` there as any launch (queued under CompileOnly, compiled and
discarded under CompileAndAutotune, executed otherwise, served from the bundle); a timed call's
kernel is built or loaded before its clock starts, as PyCUDA builds at `SourceModule`.
`drv.In`/`Out`/`InOut` arrays are copied as PyCUDA's when the launch executes; under a discarding
launch the copy back is a discarded buffer's read (the runtime's policy), the array left as it was.
`get_global` is served from the cubin of the module's one kernel; refused: texture and surface
references (gone in CUDA 12), a `Function`'s CUfunction attributes and settings (`num_regs`),
`prepare`'s pre-2011 `block=`/`shared=`, what PyCUDA's launch refuses (sizes:
`launch.pycuda_sizes`; arguments: `args`). A module owns its functions and kernels; this one's
state: `recording`, what `autotune` records.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from warmcli.backends.c_linkage import unrenamed_c_names
from warmcli.backends.cuda.cubin import cubin_globals
from warmcli.backends.option_macros import MACRO_FLAGS, macros_named
from warmcli.errors import PyCudaError
from warmcli.execution.base import LaunchMode, resolve_launch_mode
from warmcli.execution.process_mode import current_process_mode
from warmcli.kernel import Kernel
from warmcli.pycuda import context
from warmcli.pycuda.args import (
    WARM_LETTER,
    StandInAllocation,
    call_args,
    call_letter,
    check_letter,
    convert,
    prepare_letters,
    same_bytes,
)
from warmcli.pycuda.includes import default_options, list_arguments, own_include_dirs
from warmcli.pycuda.launch import pycuda_sizes, run_staged, warm_stream
from warmcli.pycuda.source import (
    ALONE_NOTE,
    device_only_names,
    isolated_source,
    kernel_signatures,
    mangled_global,
    mangled_refusal,
    no_references,
    wrap_source,
)

if TYPE_CHECKING:
    from warmcli.runtime.runtime import Runtime

_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
recording = threading.local()  # set by `autotune` while it finds a config's kernels


# Macros the headers nvcc and NVRTC include before the source read (`NDEBUG`: `assert`;
# names reserved to the implementation; CUDA's own): set by a `#define` in the source,
# they would come too late, so such a `-D` stays on the command line.
_READ_BY_HEADERS = re.compile(r"__|_[A-Z]|NDEBUG$|NOMINMAX$|CUDA|CU_|NV_")


def _split_defines(options: Sequence[str], source: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """`-DNAME=value` options as warm defines (set around the kernel's own section, so
    variants share one compiler process), unless the source (or `-include`) includes a
    header, which must see them as nvcc's command line sets them. A macro the implicitly
    included headers read (`_READ_BY_HEADERS`: `-DNDEBUG` turns `assert` off only there)
    stays on the command line, and so does one that another `-D` or `-U` also names, with
    all its options, where nvcc reads them in their order (`-DX=1 -UX` leaves X undefined;
    `-DX=1 -DX=2` makes it 2)."""
    pre_includes = any(o.startswith(("-include", "--pre-include")) for o in options)
    if pre_includes or re.search(r"^\s*#\s*include", source, re.MULTILINE):
        return tuple(options), {}
    named = macros_named(options)
    rest: list[str] = []
    defines: dict[str, str] = {}
    for before, option in zip(("", *options), options, strict=False):
        m = re.fullmatch(r"-D([A-Za-z_]\w*)(?:=(.*))?", option)
        if (
            m is None
            or before in MACRO_FLAGS
            or named.count(m.group(1)) > 1
            or _READ_BY_HEADERS.match(m.group(1))
        ):
            rest.append(option)
        else:
            defines[m.group(1)] = m.group(2) if m.group(2) is not None else "1"
    return tuple(rest), defines


class SourceModule:
    """PyCUDA's `SourceModule`, built and served by warm; see the module doc."""

    def __init__(
        self,
        source: str,
        nvcc: str = "nvcc",
        options: Sequence[str] | None = None,
        keep: bool = False,
        no_extern_c: bool = False,
        arch: str | None = None,
        code: str | None = None,
        cache_dir: str | bool | None = None,
        include_dirs: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(source, str):
            raise PyCudaError(f"SourceModule(source=...): text, not a {type(source).__name__}")
        if nvcc != "nvcc":
            raise PyCudaError(
                f"SourceModule(nvcc={nvcc!r}): warm compiles with its device's nvcc "
                "(--nvcc or WARM_NVCC)"
            )
        options, include_dirs = list_arguments(options, include_dirs)  # (a generator: read once)
        if options is None:  # PyCUDA's DEFAULT_NVCC_FLAGS
            options = default_options()
        self.source = source
        self.no_extern_c = no_extern_c
        self.arch = arch
        self.code = code
        self.keep = keep  # PyCUDA keeps its build folder; warm keeps the cubin in the bundle
        include_dirs = [*include_dirs, *own_include_dirs(source, include_dirs)]
        self.options, self.defines = _split_defines(
            (*options, *(f"-I{d}" for d in include_dirs)), source
        )
        self.signatures = kernel_signatures(source)
        self.partial_signatures = kernel_signatures(source, partial=True)  # `_`: not read
        self._functions: dict[str, Function] = {}
        self._sources: dict[str, tuple[str, dict[str, str]]] = {}

    def get_function(self, name: str) -> Function:
        """The kernel `name` of this module (compiled on its first launch, not now)."""
        function = self._functions.get(name)
        if function is None:
            # in the text or a -D option's value, or maybe pasted by a macro (`k_##n`)
            text = "\n".join((self.source, *self.options, *self.defines.values()))
            in_text = re.search(rf"\b{re.escape(name)}\b", text)
            if name.startswith("_Z") and not in_text:
                raise PyCudaError(mangled_refusal(name))
            written = "##" in self.source or in_text
            if not _IDENTIFIER.match(name) or not written:
                raise PyCudaError(f"SourceModule.get_function({name!r}): no such kernel in it")
            if name in device_only_names(self.source):
                raise PyCudaError(
                    f"SourceModule.get_function({name!r}): {name} is not a __global__ "
                    "function of it (declared __device__ or __constant__): no kernel to launch"
                )
            function = self._functions[name] = Function(self, name)
        return function

    def kernel_source(self, entry: str) -> tuple[str, dict[str, str]]:
        """The source nvcc sees for kernel `entry`, and the names renamed in it (`ALONE_NOTE`
        after it where a global of C linkage is left as written: built alone)."""
        found = self._sources.get(entry)
        if found is None:
            defined = tuple(f"-D{name}={value}" for name, value in self.defines.items())
            body, renames = isolated_source(  # (its names then differ from another -D's)
                self.source, entry, (*self.options, *defined), self.no_extern_c, self.defines
            )
            wrapped = wrap_source(body, self.no_extern_c)
            if unrenamed_c_names(wrapped, entry):  # keyed apart from a bundle's shared cubin
                wrapped += ALONE_NOTE  # (one that warm built before it told such a module)
            found = self._sources[entry] = (wrapped, renames)
        return found

    def check_target(self, runtime: Runtime) -> None:
        """`arch=`/`code=` must name the device's own architecture: warm builds cubins for it
        (`arch="compute_90", code="sm_90"` too: nvcc's cubin of that is sm_90's). A `code=`
        beside a real `-arch` (`arch=`, else the device's, which PyCUDA passes) is refused
        as nvcc refuses it."""
        virtual = "compute_" + runtime.arch.removeprefix("sm_")
        for what, value in (("arch", self.arch), ("code", self.code)):
            if what == "arch" and value == virtual and self.code == runtime.arch:
                continue
            if value is not None and value != runtime.arch:
                raise PyCudaError(
                    f"SourceModule({what}={value!r}): warm builds cubins for the device's "
                    f"architecture, {runtime.arch} on {runtime.device.id}: drop {what}="
                )
        if self.code is not None and self.arch != virtual:
            raise PyCudaError(
                f"SourceModule(arch={self.arch!r}, code={self.code!r}): PyCUDA's nvcc fails it "
                f"(-arch {self.arch or runtime.arch} -code {self.code}: the value of -arch "
                f"must be a virtual code architecture): pass arch={virtual!r} with code=, "
                "or drop code="
            )

    def get_global(self, name: str) -> tuple[Any, int]:
        """(device pointer, size) of a `__device__`/`__constant__` variable, from the cubin
        of the module's one kernel (compiled or loaded now if it was not yet)."""
        call = f"SourceModule.get_global({name!r})"
        kernels = sorted(self.signatures)
        if len(kernels) != 1:
            raise PyCudaError(
                f"{call}: the module holds {len(kernels)} kernels ({', '.join(kernels) or '-'}); "
                "warm builds each kernel with a copy of its own of the module's globals (in a "
                "cubin shared with other kernels, or alone), so one global cannot be served for "
                "them all: give a global to one kernel per module, or pass it as an argument"
            )
        function = self.get_function(kernels[0])
        letters = function.letters()
        if letters is None:
            raise PyCudaError(
                f"{call}: the parameters of {function.name} cannot be read from its "
                "declaration: prepare() it first"
            )
        rt = context.current_runtime()
        self.check_target(rt)
        kernel = function.kernel(letters)
        module, binary = rt.kernels.module(kernel)
        renamed = self.kernel_source(function.name)[1].get(name, name)
        symbols = cubin_globals(binary)
        symbol = mangled_global(symbols, renamed, rt.kernels.key(kernel))
        if symbol is None:
            raise PyCudaError(f"{call}: no such __device__ or __constant__ variable in the cubin")
        if isinstance(module, bytes | bytearray):  # a GPU-less device: nothing behind it
            return StandInAllocation(symbols[symbol]), symbols[symbol]
        with rt.device.active():  # type: ignore[attr-defined]
            pointer, size = module.get_global(symbol)
        return pointer, int(size)

    def get_texref(self, name: str) -> Any:
        raise PyCudaError(no_references("get_texref", name))

    def get_surfref(self, name: str) -> Any:
        raise PyCudaError(no_references("get_surfref", name))


# fmt: off
_FUNCTION_API = frozenset({  # PyCUDA's of a loaded CUfunction, which warm's is not
    "num_regs", "shared_size_bytes", "const_size_bytes", "local_size_bytes",
    "max_threads_per_block", "get_attribute", "set_attribute", "set_cache_config",
    "set_shared_config", "set_block_shape", "set_shared_size", "param_set", "launch_grid",
})
# fmt: on


class Function:
    """One kernel of a `SourceModule`, launched PyCUDA's ways through the bound runtime."""

    def __getattr__(self, name: str) -> Any:
        if name in _FUNCTION_API:
            raise PyCudaError(
                f"{self.name}.{name}: warm does not serve it: its function is a warm kernel, "
                "loaded from the bundle or compiled at its launch, not a CUfunction held here"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __init__(self, module: SourceModule, name: str) -> None:
        self.module = module
        self.name = name
        self.signature = module.signatures.get(name)  # PyCUDA letters from its declaration
        self.arg_format: str | None = None  # set by prepare()
        self._kernels: dict[str, Kernel] = {}

    def letters(self) -> str | None:
        return self.arg_format if self.arg_format is not None else self.signature

    def kernel(self, letters: str) -> Kernel:
        """The warm kernel this function is when called with `letters`."""
        kernel = self._kernels.get(letters)
        if kernel is None:
            source, _ = self.module.kernel_source(self.name)
            params = "".join(WARM_LETTER[c] for c in letters)
            kernel = Kernel(
                source,
                self.name,
                params,
                language="cuda",
                options=self.module.options,
                defines=self.module.defines,
            )
            self._kernels[letters] = kernel
        return kernel

    def prepare(
        self, arg_types: str | Sequence[Any], block: Any = None, shared: Any = None, texrefs=None
    ) -> Function:
        """Fix the parameters' letters, as PyCUDA's `prepare` (not its pre-2011 `block=`)."""
        if texrefs:
            raise PyCudaError(no_references("prepare(texrefs=...)", self.name))
        for keyword, value in (("block", block), ("shared", shared)):
            if value is not None:
                raise PyCudaError(
                    f"{self.name}.prepare({keyword}={value!r}): PyCUDA takes the block and the "
                    "shared size on each call since 2011.1, not in prepare(): "
                    "prepared_call(grid, block, *args, shared_size=...)"
                )
        letters = prepare_letters(arg_types, self.name)
        if self.signature is not None and len(letters) != len(self.signature):
            raise PyCudaError(
                f"{self.name}.prepare({arg_types!r}): it declares {len(self.signature)} "
                f"parameters, not {len(letters)}"
            )
        declared = self.module.partial_signatures.get(self.name)  # `_`: a type not read
        if declared is not None and len(declared) == len(letters):  # (a macro may be several)
            # prepare([np.intp, ...]): a pointer as a 64-bit integer;
            # `i` for an `unsigned int` (the same bytes, as PyCUDA packs it): the declared type
            pairs = zip(letters, declared, strict=True)
            letters = "".join(
                "P" if d == "P" and c in "lLqQ" else d if d != "_" and same_bytes(c, d) else c
                for c, d in pairs
            )
        self.arg_format = letters
        return self

    def __call__(
        self,
        *args: Any,
        grid: Sequence[int] | int = (1, 1),
        block: Sequence[int] | None = None,
        shared: int = 0,
        stream: Any = None,
        texrefs: Sequence[Any] | None = None,
        time_kernel: bool = False,
    ) -> float | None:
        if block is None:
            raise PyCudaError(f"{self.name}(...): must specify block size")
        if texrefs:
            raise PyCudaError(no_references(f"{self.name}(texrefs=...)", self.name))
        if time_kernel and stream is not None:  # PyCUDA's assertion
            raise PyCudaError(f"{self.name}(...): PyCUDA takes no time_kernel=True on a stream")
        grid = pycuda_sizes(f"{self.name}(...)", grid, block, shared)
        letters, args = self.signature, call_args(args)
        if letters is None:
            letters = "".join(call_letter(a, i) for i, a in enumerate(args, start=1))
        elif len(letters) == len(args):
            for position, (letter, arg) in enumerate(zip(letters, args, strict=True), start=1):
                check_letter(arg, letter, position, self.name)
        return self._launch(letters, args, grid, block, shared, stream, time_kernel)

    def _prepared(
        self, call: str, grid: Any, block: Any, shared: Any, shaped: bool = True
    ) -> tuple[str, Any]:
        if self.arg_format is None:  # (a block that is no tuple: PyCUDA's pre-2011 form)
            raise PyCudaError(f"{self.name}.{call}: prepare() the function first")
        return self.arg_format, pycuda_sizes(f"{self.name}.{call}", grid, block, shared, shaped)

    def prepared_call(self, grid: Any, block: Any, *args: Any, shared_size: int = 0) -> None:
        letters, grid = self._prepared("prepared_call", grid, block, shared_size)
        self._launch(letters, args, grid, block, shared_size, None, packed=True)

    def prepared_async_call(
        self, grid: Any, block: Any, stream: Any, *args: Any, shared_size: int = 0
    ) -> None:
        letters, grid = self._prepared("prepared_async_call", grid, block, shared_size)
        self._launch(letters, args, grid, block, shared_size, stream, packed=True)

    def prepared_timed_call(
        self, grid: Any, block: Any, *args: Any, shared_size: int = 0
    ) -> Callable[[], float]:
        # (PyCUDA's block goes to _launch_kernel as it is: up to three sizes, () one thread)
        letters, grid = self._prepared("prepared_timed_call", grid, block, shared_size, False)
        seconds = self._launch(letters, args, grid, block or (1,), shared_size, None, True, True)
        return lambda: seconds or 0.0

    def _launch(
        self,
        letters: str,
        args: Sequence[Any],
        grid: Any,
        block: Any,
        shared: int,
        stream: Any,
        timed: bool = False,
        packed: bool = False,
    ) -> float | None:
        kernel = self.kernel(letters)
        captured = getattr(recording, "kernels", None)
        if captured is not None:  # autotune finding which kernel a config launches
            captured.append(kernel)
            return 0.0 if timed else None
        rt = context.current_runtime()
        self.module.check_target(rt)
        on = warm_stream(rt, stream)
        values, handlers = convert(letters, args, rt.device.id, self.name, packed)
        executes = resolve_launch_mode(current_process_mode(), on.mode) is LaunchMode.EXECUTE
        if executes and timed and rt.retired is None:  # built or loaded before the clock starts,
            rt.kernels.get(kernel, values)  # as PyCUDA's SourceModule was: the launch's a hit

        def launch(values: list[Any] = values) -> None:
            rt.launch(kernel, *values, grid=grid, block=block, shared=shared, stream=on)

        if executes and handlers:
            return run_staged(rt, on, handlers, values, launch, timed)
        seconds = rt.device.time(on, launch) if executes and timed else launch()
        if not executes:
            for handler in handlers.values():
                if handler.copies_out:
                    rt.refuse_discarded_read(f"{handler.label} of {self.name}", stacklevel=3)
            if timed:  # an allowed read of a discarded launch's time: 0.0, as PyCUDA's a float
                rt.refuse_discarded_read(f"the time of {self.name}", stacklevel=3)
                return 0.0
        return seconds if timed else None
