"""The CUDA backend: nvcc compiles, cubins are checked, PyCUDA runs them.

`warmcli.cuda.nvcc` finds nvcc and compiles many kernels in one translation unit;
`warmcli.cuda.cubin` reads the ELF that comes out; `warmcli.cuda.arch` is the
GPU-less compile-only device (`--arch sm_90`); `warmcli.cuda.device` is the real
device on PyCUDA, which it imports only when a device is opened. Importing this
package imports nothing heavy and needs neither a driver nor a toolkit.
"""
