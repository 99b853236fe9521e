//! A decode case's correctness checks: fresh seeded inputs from [`generate_decode`] over the
//! check distributions and every block-table policy the case's layout allows, the launch watched
//! as a prefill check's is, and the output compared on every row with [`reference_decode`].
//!
//! Q, K and V sit between NaN guards ([`GuardedTensor::upload_for_reads`]) and O between finite
//! ones, poisoned before each launch; Q, K and V are checksummed before and after, and the
//! lengths and block table read back after; the launch runs twice on the same inputs (the
//! second judges determinism); a wrong output is relaunched with the guards refilled (the read
//! probe of `check::reads`). The softmax scale is drawn per check like a prefill check's
//! ([`scale_factor`]: check 0 never at 1/√D), so a kernel ignoring its `scale` argument fails.
//! Unused pages hold NaN and unused slots a dominant finite logit
//! (attn-oracle's sentinels), so a kernel reading a page or slot it was not given is wrong.

use attn_evidence::{CheckFailure, CorrectnessCheck, LaunchGuards};
use attn_kernels::decode::{DecodeArgs, DeviceTable, LengthBuffers, PreparedDecode};
use attn_kernels::guard::GUARD_BYTES;
use attn_kernels::{Gpu, GuardedTensor, HarnessKernels};
use attn_oracle::{
    compare_decode, generate_decode, reference_decode_scaled, tolerance, DecodeCase, DecodeSpec,
    Distribution, HostTensor, KvLayout, PagePolicy, RowSelection,
};

use super::sets::{changed_inputs, GuardedDecodeSet, Guards};
use crate::check::reads::{probe_reads, read_outside_reason};
use crate::check::{failed, scale_factor, Watched};
use crate::Result;

/// The page policies a case's checks cycle through: its own first, then every other one its
/// layout allows (none for a contiguous cache, which has no table).
pub fn check_policies(spec: &DecodeSpec) -> Vec<KvLayout> {
    let KvLayout::Paged { page_size, policy } = spec.layout() else {
        return vec![KvLayout::Contiguous];
    };
    let mut policies = vec![policy];
    for other in [
        PagePolicy::InOrder,
        PagePolicy::Shuffled,
        PagePolicy::Interleaved,
        PagePolicy::SharedPrefix(2),
    ] {
        if !policies.contains(&other) {
            policies.push(other);
        }
    }
    policies
        .into_iter()
        .map(|policy| KvLayout::Paged { page_size, policy })
        .collect()
}

/// The (spec, distribution) of each check of a case: `checks` of them, at least one per policy
/// of [`check_policies`], the distributions cycling through [`Distribution::CHECKS`].
pub fn check_plan(spec: &DecodeSpec, checks: usize) -> Result<Vec<(DecodeSpec, Distribution)>> {
    let layouts = check_policies(spec);
    (0..checks.max(layouts.len()))
        .map(|i| {
            let layout = layouts[i % layouts.len()];
            let distribution = Distribution::CHECKS[i % Distribution::CHECKS.len()];
            Ok((spec.clone().with_layout(layout)?, distribution))
        })
        .collect()
}

/// The softmax scale of each check of [`check_plan`] of a case seeded `seed`: the spec's 1/√D
/// times [`scale_factor`] of the check's index and distribution, as a prefill check draws it.
pub fn check_scales(spec: &DecodeSpec, seed: u64, checks: usize) -> Result<Vec<f64>> {
    Ok(check_plan(spec, checks)?
        .iter()
        .enumerate()
        .map(|(i, (spec, distribution))| spec.params().scale * scale_factor(seed, i, *distribution))
        .collect())
}

#[allow(clippy::too_many_arguments)] // the kernel, the batch's buffers and the watchdog
/// Launches `prepared` on the guarded inputs into `o` (poisoned first), under the watchdog, and
/// downloads the output.
fn launch(
    gpu: &Gpu,
    prepared: &PreparedDecode,
    spec: &DecodeSpec,
    (q, k, v): (&GuardedTensor, &GuardedTensor, &GuardedTensor),
    lengths: &LengthBuffers,
    table: Option<&DeviceTable>,
    o: &mut GuardedTensor,
    scale: f64,
    watched: Watched<'_>,
) -> Result<HostTensor> {
    gpu.poison(o)?;
    let args = DecodeArgs {
        spec,
        q,
        k,
        v,
        cu_seqlens_q: &lengths.cu_seqlens_q,
        seqlens_kv: &lengths.seqlens_kv,
        table,
        scale,
    };
    let mut run = || -> attn_kernels::Result<()> {
        prepared.launch_args(gpu, &args, o)?;
        gpu.synchronize()
    };
    match watched {
        Some((w, bound)) => w.guard(bound, "a decode check launch", run)?,
        None => run()?,
    }
    Ok(gpu.download(o)?)
}

/// Runs every check of [`check_plan`]; `seed` the first check's seed.
pub fn run_decode_checks(
    gpu: &Gpu,
    prepared: &PreparedDecode,
    spec: &DecodeSpec,
    seed: u64,
    checks: usize,
    watched: Watched<'_>,
) -> Result<Vec<CorrectnessCheck>> {
    let harness = HarnessKernels::new(gpu)?;
    let mut previous: Option<HostTensor> = None;
    let mut out = Vec::new();
    let scales = check_scales(spec, seed, checks)?;
    for (i, (spec, distribution)) in check_plan(spec, checks)?.into_iter().enumerate() {
        let case = DecodeCase {
            spec,
            distribution,
            seed: seed.wrapping_add(i as u64 * 0x9e37),
        };
        let (check, output) = check_one(gpu, prepared, &harness, &case, scales[i], watched)?;
        let stale = previous
            .as_ref()
            .is_some_and(|p| p.as_bytes() == output.as_bytes());
        previous = Some(output);
        out.push(if stale && check.passed {
            failed(
                check,
                CheckFailure::Stale,
                "the output is byte-identical to the previous check's on new inputs".into(),
            )
        } else {
            check
        });
    }
    Ok(out)
}

/// One check of `case` at softmax `scale` (see the module); returns it and the first launch's
/// output.
pub fn check_one(
    gpu: &Gpu,
    prepared: &PreparedDecode,
    harness: &HarnessKernels,
    case: &DecodeCase,
    scale: f64,
    watched: Watched<'_>,
) -> Result<(CorrectnessCheck, HostTensor)> {
    let spec = &case.spec;
    let inputs = generate_decode(case)?;
    let mut g = GuardedDecodeSet::upload(gpu, &inputs, case.seed, Guards::Reads)?;
    let dims = [1, spec.varlen().total_q(), spec.heads(), spec.head_dim()];
    let mut o = GuardedTensor::alloc_poisoned(gpu, "O", dims, spec.dtype(), case.seed ^ 3)?;
    let before = g.checksums(gpu, harness, false, case.seed)?;
    let tensors = (&g.q, &g.k, &g.v);
    let first = launch(
        gpu,
        prepared,
        spec,
        tensors,
        &g.lengths,
        g.table.as_ref(),
        &mut o,
        scale,
        watched,
    )?;
    let second = launch(
        gpu,
        prepared,
        spec,
        tensors,
        &g.lengths,
        g.table.as_ref(),
        &mut o,
        scale,
        watched,
    )?;
    let after = g.checksums(gpu, harness, false, case.seed)?;
    let mut outside = g.outside_writes(gpu)?;
    outside.extend(o.check(gpu)?.map(|violation| violation.to_string()));
    let mut inputs_written: Vec<String> = changed_inputs(&before, &after)
        .into_iter()
        .map(String::from)
        .collect();
    inputs_written.extend(g.integers_written(gpu, spec)?);
    let identical = first.as_bytes() == second.as_bytes();
    let reference =
        reference_decode_scaled(spec, &inputs.q, &inputs.cache, &RowSelection::All, scale)?;
    let tol = tolerance(spec.dtype(), case.distribution);
    let verdict = compare_decode(&first, &reference, spec, &tol);
    let mut guards = LaunchGuards {
        guard_bytes: GUARD_BYTES as u64,
        input_guards_after: [&g.q, &g.k, &g.v]
            .iter()
            .map(|t| t.guard_bytes()[1] as u64)
            .collect(),
        read_probe_launches: 0,
        read_outside: vec![],
        outside: outside.clone(),
        inputs_written: inputs_written.clone(),
        launches: 2,
        identical,
    };
    if !verdict.passed && outside.is_empty() && inputs_written.is_empty() {
        let (cu, table) = (&g.lengths, g.table.as_ref());
        let probe = probe_reads(
            gpu,
            [&mut g.q, &mut g.k, &mut g.v],
            &first,
            identical,
            &mut |q, k, v| {
                launch(
                    gpu,
                    prepared,
                    spec,
                    (q, k, v),
                    cu,
                    table,
                    &mut o,
                    scale,
                    watched,
                )
            },
        )?;
        guards.read_probe_launches = probe.launches;
        guards.read_outside = probe.regions;
    }
    let mut check = CorrectnessCheck {
        seed: case.seed,
        distribution: case.distribution.to_string(),
        passed: verdict.passed,
        max_abs: verdict.max_abs,
        rel_l2: verdict.rel_l2,
        nan_count: verdict.nan_count + verdict.inf_count,
        poison_count: verdict.poison_count,
        reason: verdict.reason.clone(),
        sdpa_max_abs: None,
        closer_to: None,
        failure: (!verdict.passed).then_some(CheckFailure::Incorrect),
        rows: Some("every row of every sequence".into()),
        full: None,
        scale: Some(scale),
        shape: Some(spec.to_string()),
        guards: Some(guards.clone()),
    };
    if verdict.poison_count > 0 && !verdict.passed {
        check.failure = Some(CheckFailure::Unwritten);
    } else if verdict.nan_count + verdict.inf_count > 0 && !verdict.passed {
        check.failure = Some(CheckFailure::NonFinite);
    }
    let check = if !outside.is_empty() {
        failed(
            check,
            CheckFailure::WroteOutside,
            format!("wrote outside its output ({})", outside.join("; ")),
        )
    } else if !inputs_written.is_empty() {
        failed(
            check,
            CheckFailure::WroteInputs,
            format!("wrote into its inputs ({})", inputs_written.join(", ")),
        )
    } else if !guards.read_outside.is_empty() {
        failed(
            check,
            CheckFailure::ReadOutside,
            read_outside_reason(&guards.read_outside),
        )
    } else if check.passed && !identical {
        failed(
            check,
            CheckFailure::NonDeterministic,
            "non-deterministic output: two launches on the same inputs differ".into(),
        )
    } else {
        check
    };
    let check = CorrectnessCheck {
        reason: check
            .reason
            .map(|r| format!("{r} [{case}, scale {scale:.4}]")),
        ..check
    };
    Ok((check, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_checks_draw_a_scale_other_than_one_over_root_d_for_every_seed() {
        for text in [
            "decode B=4 q=1,2,4,1 kv=100,512,1000,17 H=8/2 D=64 page=16 pages=shuffled",
            "decode B=8 q=4 kv=2048 H=32/8 D=128",
        ] {
            let spec: DecodeSpec = text.parse().unwrap();
            let base = spec.params().scale;
            for seed in 0..200u64 {
                let scales = check_scales(&spec, seed, 5).unwrap();
                assert_eq!(scales.len(), check_plan(&spec, 5).unwrap().len());
                let factors: Vec<f64> = scales.iter().map(|s| s / base).collect();
                // Check 0 never at 1/√D, so a kernel ignoring `scale` fails it.
                assert!((factors[0] - 1.0).abs() > 1e-9, "{text} seed {seed}");
                assert!(factors.iter().all(|f| crate::check::SCALE_FACTORS
                    .iter()
                    .any(|g| (f - g).abs() < 1e-12)));
            }
            // Seeded: the same case draws the same scales.
            assert_eq!(
                check_scales(&spec, 9, 5).unwrap(),
                check_scales(&spec, 9, 5).unwrap()
            );
        }
    }
}
