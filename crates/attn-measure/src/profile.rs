//! What Nsight Compute profiles (`cargo xtask ncu --impl`): the kernel to filter on, and the
//! target-mode program that launches only the candidate.

use attn_evidence::ShapeSpec;
use attn_kernels::registry::Engine;
use attn_kernels::{Candidate, Gpu, Prepared};

use crate::timing::InputSets;
use crate::{Problem, Result};

/// The kernel name ncu is filtered to for `candidate` (the cuBLAS path launches several).
pub fn profiled_entry(candidate: &Candidate) -> &'static str {
    match candidate {
        Candidate::Registered { implementation, .. } => match implementation.engine {
            Engine::Kernel { .. } => "attn_fwd",
            Engine::Cublas => ".*",
        },
        Candidate::Source { .. } => "attn_fwd",
        Candidate::Revision { of, .. } => profiled_entry(of),
    }
}

/// One warm-up launch and `launches` profiled ones of `candidate` on `spec`, nothing else.
pub fn launch_for_profiler(spec: ShapeSpec, candidate: &Candidate, launches: u32) -> Result<()> {
    let problem = Problem::new(spec)?;
    let (shape, dtype, params) = (problem.shape, problem.dtype, problem.params);
    let gpu = Gpu::open(0)?;
    let candidate = candidate.for_shape(&shape);
    let prepared = Prepared::new(&gpu, &candidate, dtype, shape.head_dim)?;
    let mut sets = InputSets::new(&gpu, &problem, 1, 1)?;
    let (q, k, v) = (&sets.q[0], &sets.k[0], &sets.v[0]);
    for _ in 0..=launches {
        prepared.launch(&gpu, q, k, v, &mut sets.o[0], &params)?;
    }
    gpu.synchronize()?;
    Ok(())
}
