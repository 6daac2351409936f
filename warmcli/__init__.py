"""warm: make GPU processes start hot.

A workload run under `ProcessMode.CompileOnly`, then `CompileAndAutotune`,
gathers every kernel it compiles and every tune decision it reaches into an
environment bundle; a production process that loads the bundle
(`use_bundle(path)` or `WARM_BUNDLE`) compiles nothing and tunes nothing. This
package imports no GPU library: `pycuda` is loaded only when a CUDA device is
opened.
"""

from warmcli._version import __version__
from warmcli.autotune import Tunable, TuneFailure
from warmcli.bundle import Bundle, BundleError
from warmcli.device import Buffer, DeviceError, LaunchError
from warmcli.explain import MissExplanation, StrictMissError
from warmcli.kernel import Kernel
from warmcli.kernel_cache import KernelCompileError
from warmcli.launch_mode import LaunchMode, resolve_launch_mode
from warmcli.process_mode import OverrideError, ProcessMode, ProcessModeOverride
from warmcli.production import ProductionReport, report, runtime, use_bundle
from warmcli.runtime import DiscardedReadError, DiscardedReadWarning, Runtime
from warmcli.signing import SignatureError
from warmcli.statistics import (
    AutotuneStatistics,
    CompilationStatistics,
    ExecutionStatistics,
    StatisticsCollector,
    StatisticsReader,
)
from warmcli.stream_mode import Stream, StreamMode, StreamModeOverride

__all__ = [
    "AutotuneStatistics",
    "Buffer",
    "Bundle",
    "BundleError",
    "CompilationStatistics",
    "DeviceError",
    "DiscardedReadError",
    "DiscardedReadWarning",
    "ExecutionStatistics",
    "Kernel",
    "KernelCompileError",
    "LaunchError",
    "LaunchMode",
    "MissExplanation",
    "OverrideError",
    "ProcessMode",
    "ProcessModeOverride",
    "ProductionReport",
    "Runtime",
    "SignatureError",
    "StatisticsCollector",
    "StatisticsReader",
    "Stream",
    "StreamMode",
    "StreamModeOverride",
    "StrictMissError",
    "Tunable",
    "TuneFailure",
    "__version__",
    "report",
    "resolve_launch_mode",
    "runtime",
    "use_bundle",
]
