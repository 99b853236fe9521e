//! Prepared candidates, compiled once per candidate, dtype and head dim, and the typed key that
//! tells two candidates apart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use attn_kernels::compile::sha256_hex;
use attn_kernels::{Candidate, Config, Gpu, Prepared};
use attn_oracle::DType;

use crate::Result;

/// What tells two candidates apart: the implementation (or the user's file and the hash of its
/// text), the knobs, and for a revision its text and headers. Knobs alone would let `mma` and
/// `hopper`, both with their defaults, share one compiled kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CandidateKey {
    /// A registered implementation with its overrides.
    Registered {
        /// The implementation's name.
        implementation: &'static str,
        /// The knobs overridden.
        overrides: Config,
    },
    /// A user's kernel file.
    Source {
        /// The file.
        path: PathBuf,
        /// Its entry point.
        entry: String,
        /// The SHA-256 of its text.
        source_sha256: String,
        /// The defines passed to NVRTC.
        defines: Config,
    },
    /// A user's Triton kernel.
    Triton {
        /// The `.py` file.
        path: PathBuf,
        /// The `@triton.jit` function.
        kernel: String,
        /// The SHA-256 of its text.
        source_sha256: String,
        /// Its constexprs and Triton options.
        defines: Config,
    },
    /// A candidate at a revision (a ratchet's baseline): another kernel than the candidate today.
    Revision {
        /// The candidate as built today.
        of: Box<CandidateKey>,
        /// The SHA-256 of the kernel's text at the revision.
        source_sha256: String,
        /// The revision's headers (the folder is named by their hash).
        include_dir: PathBuf,
    },
}

impl CandidateKey {
    /// The key of `candidate`.
    pub fn of(candidate: &Candidate) -> CandidateKey {
        match candidate {
            Candidate::Registered {
                implementation,
                overrides,
            } => CandidateKey::Registered {
                implementation: implementation.name,
                overrides: overrides.clone(),
            },
            Candidate::Source {
                path,
                source,
                entry,
                defines,
            } => CandidateKey::Source {
                path: path.clone(),
                entry: entry.clone(),
                source_sha256: sha256_hex(source.as_bytes()),
                defines: defines.clone(),
            },
            Candidate::Triton {
                path,
                source,
                kernel,
                defines,
            } => CandidateKey::Triton {
                path: path.clone(),
                kernel: kernel.clone(),
                source_sha256: sha256_hex(source.as_bytes()),
                defines: defines.clone(),
            },
            Candidate::Revision {
                of,
                source,
                include_dir,
                ..
            } => CandidateKey::Revision {
                of: Box::new(CandidateKey::of(of)),
                source_sha256: sha256_hex(source.as_bytes()),
                include_dir: include_dir.clone(),
            },
        }
    }
}

/// One entry of a [`PreparedCache`]: a candidate compiled for a dtype and head dim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreparedKey {
    /// The candidate.
    pub candidate: CandidateKey,
    /// The element type.
    pub dtype: DType,
    /// The head dim.
    pub head_dim: usize,
}

/// Prepared candidates, compiled once per [`PreparedKey`].
#[derive(Default)]
pub struct PreparedCache {
    prepared: HashMap<PreparedKey, Rc<Prepared>>,
}

impl std::fmt::Debug for PreparedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedCache")
            .field("entries", &self.prepared.len())
            .finish()
    }
}

impl PreparedCache {
    /// `candidate` prepared for `dtype` and `head_dim` (compiled on first use).
    pub fn get(
        &mut self,
        gpu: &Gpu,
        candidate: &Candidate,
        dtype: DType,
        head_dim: usize,
    ) -> Result<Rc<Prepared>> {
        let key = PreparedKey {
            candidate: CandidateKey::of(candidate),
            dtype,
            head_dim,
        };
        if let Some(prepared) = self.prepared.get(&key) {
            return Ok(Rc::clone(prepared));
        }
        let prepared = Rc::new(Prepared::new(gpu, candidate, dtype, head_dim)?);
        self.prepared.insert(key, Rc::clone(&prepared));
        Ok(prepared)
    }
}

#[cfg(test)]
mod tests {
    use super::CandidateKey;
    use attn_kernels::{Candidate, Config};

    #[test]
    fn implementations_with_the_same_knobs_have_their_own_cache_entries() {
        let mma = Candidate::registered("mma", Config::default()).unwrap();
        let hopper = Candidate::registered("hopper", Config::default()).unwrap();
        let tiled = Candidate::registered("tiled", "BLOCK_M=64".parse().unwrap()).unwrap();
        let tiled_default = Candidate::registered("tiled", Config::default()).unwrap();
        let keys = [&mma, &hopper, &tiled, &tiled_default].map(CandidateKey::of);
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(CandidateKey::of(&mma), CandidateKey::of(&mma.clone()));
        // The candidate and itself at a revision (a ratchet) never share a kernel.
        let at = Candidate::Revision {
            of: Box::new(mma.clone()),
            source: "// mma at an earlier revision".into(),
            include_dir: std::env::temp_dir(),
            revision: "0123456".into(),
        };
        assert_ne!(CandidateKey::of(&at), CandidateKey::of(&mma));
    }
}
