"""The CUDA backend: NVRTC or nvcc compiles, cubins and PTX are checked, PyCUDA runs them.

`warmcli.cuda.nvrtc` compiles many kernels in one NVRTC program in process;
`warmcli.cuda.nvcc` finds nvcc and compiles them in one translation unit;
`warmcli.cuda.choose` picks one of the two and says why; `warmcli.cuda.cubin`
reads the ELF that comes out, `warmcli.cuda.ptx` the PTX kept beside it;
`warmcli.cuda.arch` is the GPU-less compile-only device (`--arch sm_90`);
`warmcli.cuda.device` is the real
device on PyCUDA, which it imports only when a device is opened. Importing this
package imports nothing heavy and needs neither a driver nor a toolkit.
"""
