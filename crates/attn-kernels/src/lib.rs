//! CUDA attention kernels: NVRTC build, registry of implementations, launch and timing.
