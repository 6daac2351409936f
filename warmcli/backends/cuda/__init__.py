"""The CUDA backend: NVRTC or nvcc compiles, cubins and PTX are checked, PyCUDA runs them.

`warmcli.backends.cuda.nvrtc` compiles many kernels in one NVRTC program in process;
`warmcli.backends.cuda.nvcc` finds nvcc and compiles them in one translation unit;
`warmcli.backends.cuda.choose` picks one of the two and says why; `warmcli.backends.cuda.cubin`
reads the ELF that comes out, `warmcli.backends.cuda.ptx` the PTX kept beside it;
`warmcli.backends.cuda.arch` is the GPU-less compile-only device (`--arch sm_90`);
`warmcli.backends.cuda.device` is the real
device on PyCUDA, which it imports only when a device is opened. Importing this
package imports nothing heavy and needs neither a driver nor a toolkit.
"""
