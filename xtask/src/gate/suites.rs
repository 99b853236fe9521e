//! The named shape suites, in one place.

use attn_evidence::ShapeSpec;

/// (name, shapes as `B,H,S,D [causal]`, what it is for).
pub const SUITES: [(&str, &[&str], &str); 3] = [
    (
        "seed",
        &["1,8,512,64", "2,8,512,64"],
        "the seeds' small shapes: launch- and latency-bound",
    ),
    (
        "large",
        &[
            "4,16,2048,128",
            "2,16,8192,128",
            "2,16,8192,128 causal",
            "2,16,8192,64",
        ],
        "throughput-bound shapes where FlashAttention-class kernels are compared",
    ),
    (
        "sweep",
        &[
            "2,16,512,128",
            "2,16,1024,128",
            "2,16,2048,128",
            "2,16,4096,128",
            "2,16,8192,128",
            "2,16,16384,128",
        ],
        "TFLOP/s against sequence length at D=128",
    ),
];

/// The shapes of suite `name` in `dtype`.
pub fn suite(name: &str, dtype: &str) -> anyhow::Result<Vec<ShapeSpec>> {
    let (_, shapes, _) = SUITES.iter().find(|(n, _, _)| *n == name).ok_or_else(|| {
        let known: Vec<&str> = SUITES.iter().map(|(n, _, _)| *n).collect();
        anyhow::anyhow!("unknown suite `{name}` (known: {})", known.join(", "))
    })?;
    shapes
        .iter()
        .map(|s| {
            let mut spec: ShapeSpec = s.parse()?;
            spec.dtype = dtype.to_string();
            Ok(spec)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn suites_parse_and_unknown_names_fail() {
        for (name, shapes, _) in super::SUITES {
            assert_eq!(super::suite(name, "bf16").unwrap().len(), shapes.len());
        }
        let large = super::suite("large", "fp16").unwrap();
        assert!(large[2].causal && !large[1].causal);
        assert!(super::suite("huge", "fp16")
            .unwrap_err()
            .to_string()
            .contains("known: seed, large, sweep"));
    }
}
