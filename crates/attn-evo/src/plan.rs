//! A search's definition beyond the space: which knob values to search, the constraint of a
//! `--src` kernel, the seeds of generation 0 from earlier bests, each candidate's input seed, and
//! the `gate` command that confirms a result.

use std::collections::BTreeMap;
use std::path::Path;

use attn_evidence::{
    EvoBest, EvoCandidate, ImplConfig, SearchImplementation, SearchSpec, IMPL_KNOB,
};

use crate::error::{EvoError, Result};
use crate::space::{Knobs, Space};

/// `K=V,K=V` in name order (the text of `attn_kernels::Config`).
pub fn format_knobs(knobs: &Knobs) -> String {
    knobs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The knobs of a registered target (`available`: name and domain of each) narrowed to the values
/// `declared` for them; a knob not declared keeps its whole domain.
pub fn narrow_domains<'a>(
    target: &str,
    available: impl IntoIterator<Item = (&'a str, &'a [i64])>,
    declared: &BTreeMap<String, Vec<i64>>,
) -> Result<BTreeMap<String, Vec<i64>>> {
    let mut knobs = BTreeMap::new();
    for (name, domain) in available {
        let values = match declared.get(name) {
            Some(values) => {
                if let Some(v) = values.iter().find(|v| !domain.contains(v)) {
                    return Err(EvoError::OutsideDomain {
                        knob: name.to_string(),
                        value: *v,
                        domain: domain.to_vec(),
                    });
                }
                values.clone()
            }
            None => domain.to_vec(),
        };
        knobs.insert(name.to_string(), values);
    }
    match declared.keys().find(|k| !knobs.contains_key(*k)) {
        Some(unknown) => Err(EvoError::UnknownKnob {
            knob: unknown.clone(),
            target: target.to_string(),
        }),
        None => Ok(knobs),
    }
}

/// A knob's name and its domain, as the registry lists them.
pub type KnobOf<'a> = (&'a str, &'a [i64]);

/// The knobs of several registered implementations (`available`: each one's name and its knobs'
/// domains; an implementation may have none), each narrowed to the values `declared` for it
/// (`--knob` applies to every implementation that has the knob). A knob none of them has, or a
/// value outside the domain of every implementation that has the knob, is an error; an
/// implementation keeps the declared values its domain holds.
///
/// ```
/// let available = vec![
///     ("hopper", vec![("BLOCK_M", &[64_i64, 128, 192][..])]),
///     ("cublas", vec![]),
///     ("mma", vec![("BLOCK_M", &[16_i64, 32, 64, 128, 256][..]), ("STAGES", &[1_i64, 2][..])]),
/// ];
/// let declared = [("BLOCK_M".to_string(), vec![128, 256])].into();
/// let narrowed = attn_evo::narrow_choice(available, &declared)?;
/// assert_eq!(narrowed[0].knobs["BLOCK_M"], [128]);
/// assert!(narrowed[1].knobs.is_empty());
/// assert_eq!(narrowed[2].knobs["BLOCK_M"], [128, 256]);
/// assert_eq!(narrowed[2].knobs["STAGES"], [1, 2]);
/// # Ok::<(), attn_evo::EvoError>(())
/// ```
pub fn narrow_choice<'a>(
    available: Vec<(&str, Vec<KnobOf<'a>>)>,
    declared: &BTreeMap<String, Vec<i64>>,
) -> Result<Vec<SearchImplementation>> {
    let names: Vec<&str> = available.iter().map(|(name, _)| *name).collect();
    for (knob, values) in declared {
        let domains: Vec<&[i64]> = available
            .iter()
            .flat_map(|(_, knobs)| knobs.iter().filter(|(k, _)| k == knob))
            .map(|(_, domain)| *domain)
            .collect();
        if domains.is_empty() {
            return Err(EvoError::UnknownKnob {
                knob: knob.clone(),
                target: names.join(","),
            });
        }
        if let Some(v) = values
            .iter()
            .find(|v| !domains.iter().any(|d| d.contains(v)))
        {
            let mut union: Vec<i64> = domains.concat();
            union.sort_unstable();
            union.dedup();
            return Err(EvoError::OutsideDomain {
                knob: knob.clone(),
                value: *v,
                domain: union,
            });
        }
    }
    let mut out = Vec::new();
    for (name, knobs) in &available {
        let mut narrowed = BTreeMap::new();
        for (knob, domain) in knobs {
            let values: Vec<i64> = match declared.get(*knob) {
                Some(values) => values
                    .iter()
                    .copied()
                    .filter(|v| domain.contains(v))
                    .collect(),
                None => domain.to_vec(),
            };
            if values.is_empty() {
                return Err(EvoError::OutsideDomain {
                    knob: format!("{knob} of {name}"),
                    value: declared[*knob][0],
                    domain: domain.to_vec(),
                });
            }
            narrowed.insert(knob.to_string(), values);
        }
        out.push(SearchImplementation {
            name: name.to_string(),
            knobs: narrowed,
        });
    }
    Ok(out)
}

/// A search config resolved once into what it runs: the implementation its [`IMPL_KNOB`] picks
/// in a search over several (else, or for an index outside them, the search's own: `None` for a
/// `--src` kernel) and its knobs without that choice. What crosses to the caller's
/// [`crate::Measurer`]; the choice's knob stays in this crate.
///
/// ```
/// # let spec: attn_evidence::SearchSpec = serde_json::from_value(serde_json::json!({
/// #     "target": "cublas,mma", "implementation": null, "src": null, "entry": null,
/// #     "implementations": [{"name": "cublas", "knobs": {}}, {"name": "mma", "knobs": {"STAGES": [1, 2]}}],
/// #     "defines": {}, "knobs": {}, "shape": {"batch": 2, "heads": 8, "seq_q": 1024,
/// #     "seq_kv": 1024, "head_dim": 64, "causal": false, "dtype": "fp16"},
/// #     "baseline": "sdpa", "seed": 1, "population": 4, "generations": 2,
/// # })).unwrap();
/// let knobs = [(attn_evo::IMPL_KNOB.to_string(), 1), ("STAGES".to_string(), 2)].into();
/// let config = attn_evo::resolve_config(&spec, &knobs);
/// assert_eq!(config.describe(), "mma STAGES=2");
/// ```
pub fn resolve_config(spec: &SearchSpec, knobs: &Knobs) -> ImplConfig {
    let mut knobs = knobs.clone();
    let chosen = knobs.remove(IMPL_KNOB).and_then(|i| {
        let i = usize::try_from(i).ok()?;
        spec.implementations.get(i).map(|imp| imp.name.clone())
    });
    ImplConfig {
        implementation: chosen.or_else(|| spec.implementation.clone()),
        knobs,
    }
}

/// A log row's config with its implementation: the row's own in a search over several, else
/// the search's.
pub fn split_row(spec: &SearchSpec, row: &EvoCandidate) -> ImplConfig {
    let chosen = row.config.implementation.clone();
    ImplConfig {
        implementation: chosen.or_else(|| spec.implementation.clone()),
        knobs: row.config.knobs.clone(),
    }
}

/// The constraint of a `--src` kernel's configs (its `defines` merged with the knobs): its block
/// ((`NUM_WARPS` + `PRODUCER_WARPS`) × 32 threads) and `SHARED_BYTES` must fit the device.
pub fn source_constraint(
    defines: BTreeMap<String, i64>,
    max_threads_per_block: u32,
    max_shared_per_block: u32,
) -> impl Fn(&Knobs) -> std::result::Result<(), String> + Send + Sync + 'static {
    move |knobs| {
        let get = |name: &str, default: i64| {
            knobs
                .get(name)
                .or_else(|| defines.get(name))
                .copied()
                .unwrap_or(default)
        };
        let (block_m, warps, shared) = (
            get("BLOCK_M", 64),
            get("NUM_WARPS", 4),
            get("SHARED_BYTES", 0),
        );
        let producers = get("PRODUCER_WARPS", 0);
        if block_m < 1
            || warps < 1
            || producers < 0
            || (warps + producers) * 32 > i64::from(max_threads_per_block)
            || !(0..=i64::from(max_shared_per_block)).contains(&shared)
        {
            Err(format!(
                "BLOCK_M={block_m}, NUM_WARPS={warps}, SHARED_BYTES={shared} do not fit the device"
            ))
        } else {
            Ok(())
        }
    }
}

/// A seed for a candidate's inputs from the run's seed and its config (FNV-1a of `K=V,...`): a
/// resumed run measures a candidate on the same inputs.
pub fn config_seed(seed: u64, knobs: &Knobs) -> u64 {
    format_knobs(knobs)
        .bytes()
        .fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Adds to `seeds` the best configs of earlier searches of `target` (`<evo_dir>/*/best.json`;
/// unreadable files are skipped); a search over several implementations also takes the best of
/// any earlier search whose winner is one of them.
pub fn seed_from_bests(
    seeds: &mut Vec<Knobs>,
    evo_dir: &Path,
    target: &str,
    space: &Space,
    fill: &Knobs,
) {
    for entry in std::fs::read_dir(evo_dir).into_iter().flatten().flatten() {
        let Ok(best) = EvoBest::read(&entry.path().join("best.json")) else {
            continue;
        };
        let knobs = best.config;
        let implementation = best.implementation.as_deref().unwrap_or(&best.target);
        match space.branch_index(implementation) {
            Some(index) => {
                let knobs = crate::space::join(index, knobs);
                push_projected(seeds, space, &knobs, fill);
            }
            None if best.target == target => push_projected(seeds, space, &knobs, fill),
            None => {}
        }
    }
}

fn push_projected(seeds: &mut Vec<Knobs>, space: &Space, partial: &Knobs, fill: &Knobs) {
    for k in space.projections(partial, fill) {
        if !seeds.contains(&k) {
            seeds.push(k);
        }
    }
}

/// The `cargo xtask gate` command that confirms `knobs` of `implementation` (the search's, or the
/// one a search over several chose) independently.
///
/// ```
/// use attn_evidence::{SearchSpec, ShapeSpec};
/// let spec = SearchSpec {
///     target: "hopper,cublas,mma".into(), implementation: None, implementations: vec![], src: None,
///     entry: None, defines: Default::default(), knobs: Default::default(),
///     shape: "2,8,1024,64".parse()?, decode: None, baseline: "sdpa".into(), sdpa_backend: None,
///     seed: 1, population: 8, generations: 8,
/// };
/// let knobs = [("BLOCK_M".to_string(), 128)].into();
/// assert_eq!(
///     attn_evo::gate_command(&spec, Some("mma"), &knobs),
///     "cargo xtask gate --impl mma --config BLOCK_M=128 --shape 2,8,1024,64 --dtype fp16 --baseline sdpa"
/// );
/// // A varlen batch (or grouped heads, a window) keeps its whole shape text.
/// let packed = SearchSpec {
///     shape: "varlen=512,0,3000 H=32/8 D=128 causal bf16".parse()?, baseline: "mma".into(), ..spec.clone()
/// };
/// assert_eq!(
///     attn_evo::gate_command(&packed, Some("hopper"), &Default::default()),
///     "cargo xtask gate --impl hopper --shape \"varlen=512,0,3000 H=32/8 D=128\" --causal --dtype bf16 --baseline mma"
/// );
/// // A `.py` source is a Triton kernel.
/// let triton = SearchSpec {
///     src: Some("k.py".into()), entry: Some("attn_fwd".into()), ..spec.clone()
/// };
/// let knobs = [("BLOCK_N".to_string(), 64)].into();
/// assert_eq!(
///     attn_evo::gate_command(&triton, None, &knobs),
///     "cargo xtask gate --triton k.py:attn_fwd --define BLOCK_N=64 --shape 2,8,1024,64 --dtype fp16 --baseline sdpa"
/// );
/// // A decode batch's text holds its dtype and mask; an SDPA backend other than the default is named.
/// let decode: attn_evidence::DecodeSpec = "decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16".parse()?;
/// let decoding = SearchSpec {
///     shape: attn_evidence::decode_shape(&decode), decode: Some(decode),
///     sdpa_backend: Some("flashinfer".into()), ..spec.clone()
/// };
/// let knobs = [("SPLITS".to_string(), 4)].into();
/// assert_eq!(
///     attn_evo::gate_command(&decoding, Some("decode-hopper"), &knobs),
///     "cargo xtask gate --impl decode-hopper --config SPLITS=4 --shape \"decode B=16 q=1 kv=8192 H=32/8 D=128 page=16 bf16\" --baseline sdpa --sdpa-backend flashinfer"
/// );
/// # Ok::<(), attn_evidence::EvidenceError>(())
/// ```
pub fn gate_command(spec: &SearchSpec, implementation: Option<&str>, knobs: &Knobs) -> String {
    let s = &spec.shape;
    // The shape's own text (grouped heads, a window, a varlen batch kept) without the mask and
    // dtype, which have their own options below; quoted when it is several words.
    let text = attn_evidence::ShapeSpec {
        causal: false,
        dtype: attn_evidence::DType::F16,
        ..s.clone()
    }
    .to_string();
    let shape = if text.contains(' ') {
        format!("\"{text}\"")
    } else {
        text
    };
    let mut cmd = String::from("cargo xtask gate ");
    match (implementation, &spec.src) {
        (Some(name), _) => {
            cmd.push_str(&format!("--impl {name}"));
            // An implementation without knobs (cublas) takes no --config.
            if !knobs.is_empty() {
                cmd.push_str(&format!(" --config {}", format_knobs(knobs)));
            }
        }
        (None, Some(src)) => {
            // A `.py` source is a Triton kernel (`evo --triton FILE.py:KERNEL`).
            if attn_evidence::is_triton_source(src) {
                let kernel = spec.entry.as_deref().unwrap_or("attn_fwd");
                cmd.push_str(&format!("--triton {}:{kernel}", src.display()));
            } else {
                cmd.push_str(&format!("--src {}", src.display()));
                if let Some(entry) = &spec.entry {
                    cmd.push_str(&format!(" --entry {entry}"));
                }
            }
            for (k, v) in spec.defines.iter().chain(knobs.iter()) {
                cmd.push_str(&format!(" --define {k}={v}"));
            }
        }
        (None, None) => cmd.push_str("(synthetic search: nothing to gate)"),
    }
    match &spec.decode {
        // The batch's own text holds its dtype and (always causal) mask.
        Some(decode) => cmd.push_str(&format!(" --shape \"{decode}\"")),
        None => {
            cmd.push_str(&format!(" --shape {shape}"));
            if s.causal {
                cmd.push_str(" --causal");
            }
            cmd.push_str(&format!(" --dtype {}", s.dtype));
        }
    }
    cmd.push_str(&format!(" --baseline {}", spec.baseline));
    match spec.sdpa_backend.as_deref() {
        Some(backend) if spec.baseline == "sdpa" && backend != "default" => {
            cmd.push_str(&format!(" --sdpa-backend {backend}"));
        }
        _ => {}
    }
    cmd
}
