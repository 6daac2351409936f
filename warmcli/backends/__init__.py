"""How a device plugs in: the `Device` protocol and its handles (`base`), the compiler
protocol and batch compiler, toolchain identity, launch-argument and signature checks,
the serving rule, the machine inventory, and one folder per backend (`host/`, `cuda/`).

Nothing here imports a layer above it (execution, runtime, bundle, warming, ops, cli);
a backend never reads or writes a bundle and never decides a process mode.
"""
