//! Nsight Compute as a library: run ncu, parse its CSV, explain and score kernels.
