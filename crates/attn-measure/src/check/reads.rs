//! Reads outside the inputs, found after a check failed on its values: the inputs of a check sit
//! between NaN guards ([`GuardedTensor::upload_for_reads`]), so a kernel that reads past them
//! computes from NaN. Relaunched with every input guard refilled with finite values, an output
//! that changes depended on the guards; then one guard at a time holds NaN again, and the guards
//! whose NaNs change the output are named ("past K"). Only an output that depends on what lies
//! outside the inputs is named: a kernel that reads a guard and discards what it read is not.

use attn_kernels::guard::{GuardFill, Side};
use attn_kernels::{Gpu, GuardedTensor};
use attn_oracle::{DType, HostTensor};

use crate::Result;

/// The six guards around Q, K and V, in the order they are tried: (input, side).
const REGIONS: [(usize, Side); 6] = [
    (0, Side::Before),
    (0, Side::After),
    (1, Side::Before),
    (1, Side::After),
    (2, Side::Before),
    (2, Side::After),
];

/// What the relaunches found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ReadProbe {
    /// The guards whose contents changed the output ("past K"); empty when none did.
    pub regions: Vec<String>,
    /// Launches it took.
    pub launches: u32,
}

/// `"before Q"` or `"past K"`.
pub(crate) fn region_name(input: &str, side: Side) -> String {
    match side {
        Side::Before => format!("before {input}"),
        Side::After => format!("past {input}"),
    }
}

/// What the probe names when no single guard changes the output but all of them together do.
pub(crate) const TOGETHER: &str = "around Q, K and V together";

/// The verdict: `"read outside its inputs (past K, past V)"`.
pub(crate) fn read_outside_reason(regions: &[String]) -> String {
    format!("read outside its inputs ({})", regions.join(", "))
}

/// Whether an element's bits are NaN, Inf or poison in `dtype` (its exponent all ones).
fn non_finite(dtype: DType, word: u16) -> bool {
    match dtype {
        DType::Bf16 => word & 0x7f80 == 0x7f80,
        _ => word & 0x7c00 == 0x7c00,
    }
}

/// Whether `probe` differs from `base` because of the guards: any bit where the kernel is
/// deterministic, else which elements are NaN/Inf (what a NaN guard changes; a non-deterministic
/// kernel's finite values differ from launch to launch anyway).
pub(crate) fn depends_on_guards(
    base: &HostTensor,
    probe: &HostTensor,
    deterministic: bool,
) -> bool {
    let (a, b) = (base.as_bytes(), probe.as_bytes());
    if a.len() != b.len() {
        return true;
    }
    if deterministic {
        return a != b;
    }
    let Ok(dtype) = base.dtype() else {
        return a != b;
    };
    let word = |c: &[u8]| u16::from_le_bytes([c[0], c[1]]);
    a.chunks_exact(2)
        .zip(b.chunks_exact(2))
        .any(|(x, y)| non_finite(dtype, word(x)) != non_finite(dtype, word(y)))
}

/// Relaunches a check whose first output (`first`, under NaN guards) failed, with the guards of
/// `inputs` (Q, K, V) refilled, and names the guards its output depends on (see the module).
/// `launch` runs the candidate on the inputs as they are and returns its output. At most eight
/// launches: one with finite guards, one per guard, one with all NaN again when no single guard
/// changed the output. The guards are left as the last launch had them.
pub(crate) fn probe_reads(
    gpu: &Gpu,
    inputs: [&mut GuardedTensor; 3],
    first: &HostTensor,
    deterministic: bool,
    launch: &mut dyn FnMut(&GuardedTensor, &GuardedTensor, &GuardedTensor) -> Result<HostTensor>,
) -> Result<ReadProbe> {
    let tensors = inputs;
    let mut probe = ReadProbe::default();
    let mut run = |tensors: &[&mut GuardedTensor; 3], probe: &mut ReadProbe| {
        probe.launches += 1;
        launch(tensors[0], tensors[1], tensors[2])
    };
    for (i, side) in REGIONS {
        tensors[i].fill_guard(gpu, side, GuardFill::Finite)?;
    }
    let finite = run(&tensors, &mut probe)?;
    if !depends_on_guards(first, &finite, deterministic) {
        return Ok(probe);
    }
    for (i, side) in REGIONS {
        tensors[i].fill_guard(gpu, side, GuardFill::Nan)?;
        let out = run(&tensors, &mut probe)?;
        tensors[i].fill_guard(gpu, side, GuardFill::Finite)?;
        if depends_on_guards(&finite, &out, deterministic) {
            probe.regions.push(region_name(tensors[i].name(), side));
        }
    }
    if probe.regions.is_empty() {
        for (i, side) in REGIONS {
            tensors[i].fill_guard(gpu, side, GuardFill::Nan)?;
        }
        let out = run(&tensors, &mut probe)?;
        if depends_on_guards(&finite, &out, deterministic) {
            probe.regions.push(TOGETHER.into());
        }
    }
    Ok(probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_oracle::POISON_F16_BITS;

    fn tensor(dtype: DType, words: &[u16]) -> HostTensor {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        HostTensor::from_bytes([1, 1, 1, words.len()], dtype, &bytes).unwrap()
    }

    #[test]
    fn an_output_depends_on_the_guards_only_where_they_change_it() {
        for (dtype, one, nan, inf) in [
            (DType::F16, 0x3c00u16, 0x7e00u16, 0x7c00u16),
            (DType::Bf16, 0x3f80, 0x7fc0, 0x7f80),
        ] {
            let base = tensor(dtype, &[one, 0, one]);
            // Deterministic: any bit.
            assert!(!depends_on_guards(&base, &base.clone(), true));
            assert!(depends_on_guards(
                &base,
                &tensor(dtype, &[one, 1, one]),
                true
            ));
            // Non-deterministic: finite values move anyway; NaN or Inf appearing or going is the
            // guards'.
            let moved = tensor(dtype, &[one ^ 1, 1, one]);
            assert!(!depends_on_guards(&base, &moved, false));
            assert!(depends_on_guards(
                &base,
                &tensor(dtype, &[one, nan, one]),
                false
            ));
            assert!(depends_on_guards(
                &tensor(dtype, &[inf, 0, one]),
                &base,
                false
            ));
            // The same NaNs with other finite values: not the guards'.
            let a = tensor(dtype, &[nan, 0, one]);
            let b = tensor(dtype, &[nan | 1, 7, one]);
            assert!(!depends_on_guards(&a, &b, false));
            assert!(depends_on_guards(&a, &b, true));
        }
        // Poison left where a value was written counts as not finite.
        let written = tensor(DType::F16, &[0x3c00, 0x3c00]);
        let unwritten = tensor(DType::F16, &[0x3c00, POISON_F16_BITS]);
        assert!(depends_on_guards(&written, &unwritten, false));
    }

    #[test]
    fn the_guards_are_named_from_their_input() {
        assert_eq!(region_name("K", Side::After), "past K");
        assert_eq!(region_name("Q", Side::Before), "before Q");
        assert_eq!(
            read_outside_reason(&["before Q".into(), "past V".into()]),
            "read outside its inputs (before Q, past V)"
        );
        assert_eq!(
            read_outside_reason(&[TOGETHER.into()]),
            "read outside its inputs (around Q, K and V together)"
        );
        // Every guard of the three inputs is tried once.
        let mut seen: Vec<(usize, bool)> = REGIONS
            .iter()
            .map(|&(i, side)| (i, side == Side::After))
            .collect();
        seen.dedup();
        assert_eq!(seen.len(), 6);
    }
}
