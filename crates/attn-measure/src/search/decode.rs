//! A decode search's measurements: [`DecodeWorker`] checks a decode implementation's config on
//! fresh inputs through the block table (the gate's decode checks, every row against the f64
//! oracle) and times it as bench does ([`DecodeSide`] on input sets the L2 cannot hold), against a
//! registered decode implementation or SDPA's and FlashInfer's decode through the helper
//! ([`SdpaDecodeSide`]).

use attn_kernels::decode::PreparedDecode;
use attn_kernels::{Config, Gpu, TimingOptions};
use attn_oracle::DecodeSpec;

use super::worker::Measured;
use crate::decode::{
    decode_set_count, run_decode_checks, DecodeBaseline, DecodeSide, SdpaDecodeSide,
};
use crate::sdpa::{Backend, Sdpa};
use crate::timing::TimedSide;
use crate::{check, Result};

/// One decode batch on one GPU, timed as a search times (graph mode, `warmup` then `samples`).
pub struct DecodeWorker {
    gpu: Gpu,
    spec: DecodeSpec,
    timing: TimingOptions,
    sets: usize,
}

impl std::fmt::Debug for DecodeWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeWorker")
            .field("spec", &self.spec.to_string())
            .field("sets", &self.sets)
            .finish_non_exhaustive()
    }
}

impl DecodeWorker {
    /// Opens GPU `device` for `spec`, its input sets sized by the GPU's L2 and memory.
    pub fn open(
        spec: DecodeSpec,
        device: usize,
        warmup: usize,
        samples: usize,
    ) -> Result<DecodeWorker> {
        let timing = super::worker::search_timing(warmup, samples);
        let gpu = Gpu::open(device)?;
        let info = gpu.info();
        let sets = decode_set_count(&spec, info.l2_bytes as usize, info.total_memory);
        Ok(DecodeWorker {
            gpu,
            spec,
            timing,
            sets,
        })
    }

    /// The baseline `name` (a decode implementation at its defaults, or `sdpa` with
    /// `sdpa_backend`, FlashInfer among them): its samples, µs.
    pub fn baseline(&self, name: &str, sdpa_backend: Backend, seed: u64) -> Result<Vec<f64>> {
        let baseline = DecodeBaseline::from_args(name, sdpa_backend)?;
        baseline.check_supports(&self.spec)?;
        let (gpu, spec) = (&self.gpu, &self.spec);
        let timings = match baseline {
            DecodeBaseline::Registered(name) => {
                let (dtype, d) = (spec.dtype(), spec.head_dim());
                let prepared = PreparedDecode::new(gpu, &name, &Config::default(), dtype, d)?;
                DecodeSide::new(gpu, &prepared, spec, self.sets, seed, false)?
                    .block(&self.timing)?
            }
            DecodeBaseline::Sdpa(backend) => {
                let sdpa = Sdpa::detect()?;
                SdpaDecodeSide::new(gpu, &sdpa, backend, spec, self.sets, seed)
                    .block(&self.timing)?
            }
        };
        Ok(timings.samples_us)
    }

    /// Decode implementation `name` with `config` checked on `checks` fresh inputs (every
    /// block-table policy the layout allows), then timed; a wrong result is a measurement (`Err`
    /// samples), not an error.
    pub fn candidate(
        &self,
        name: &str,
        config: &Config,
        seed: u64,
        checks: usize,
    ) -> Result<Measured> {
        let started = std::time::Instant::now();
        let (gpu, spec) = (&self.gpu, &self.spec);
        let prepared = PreparedDecode::new(gpu, name, config, spec.dtype(), spec.head_dim())?;
        let prepare_s = Some(started.elapsed().as_secs_f64());
        let checks = run_decode_checks(gpu, &prepared, spec, seed, checks, None)?;
        if let Some(reason) = check::first_failed_check(&checks) {
            let samples_us = Err(format!("wrong result ({reason})"));
            return Ok(Measured {
                samples_us,
                prepare_s,
            });
        }
        let mut side = DecodeSide::new(gpu, &prepared, spec, self.sets, seed ^ 0x5eed, false)?;
        let samples_us = Ok(side.block(&self.timing)?.samples_us);
        Ok(Measured {
            samples_us,
            prepare_s,
        })
    }
}
