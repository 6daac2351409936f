"""The seed's `execution` module: what a process does when a kernel is launched.

`base` (`LaunchMode`, the verdict decided once where a launch is issued),
`process_mode` (`ProcessMode` and its overrides), `stream_mode` (`StreamMode` and its
overrides) and `statistics` (what compiling and tuning cost, read by whoever asks).
It owns the process-wide modes and collectors; it never compiles, loads or stores.
"""
