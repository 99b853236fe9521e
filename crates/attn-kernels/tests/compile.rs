//! CPU-only: every registered kernel × default (and suite-tuned) config × dtype × head dim compiles with NVRTC for
//! sm_80 and sm_90, with no spills or local memory (when ptxas is available); invalid configs are
//! rejected before compiling, with their reason. Needs NVRTC (`cargo xtask test` provides it).

use attn_kernels::compile::{self, Arch, CompileRequest};
use attn_kernels::registry::{registry, Limits};
use attn_kernels::{Candidate, Config, KernelError};
use attn_oracle::DType;

/// (B, H, S) of the gate's suites (attn-measure's `suites`), whose tuned configs must not spill
/// either.
const SUITE_SHAPES: [(usize, usize, usize); 6] = [
    (1, 8, 512),
    (2, 8, 512),
    (4, 16, 2048),
    (2, 16, 8192),
    (2, 16, 512),
    (2, 16, 1024),
];

/// Knobs that choose a code path at the same tiles: every value of each is compiled on top of each
/// config below that does not name it (hopper's persistent scheduler, SCHEDULE=1, besides its grid).
const PATH_KNOBS: [&str; 1] = ["SCHEDULE"];

/// Opt-in configs (no default or tuning picks them) compiled too, at their head dims (with every
/// value of the [`PATH_KNOBS`] on top): hopper's FlashAttention-3 tile, 128 x 176 in 2 stages at
/// D=128 (#25), with two consumer warpgroups and with one; its N = 64 P·V per panel at D=128
/// (PV_N=64, the default before N = 128); Q from shared memory (Q_REGS=0, the default before Q in
/// registers) at D=128, and Q in registers with two overlapped consumer warpgroups at D=64.
/// Conditional rescaling (LAZY_RESCALE=1) on the defaults at both head dims. (Two Q tiles in the
/// persistent loop, Q_STAGES=2, are the suites' full grids' tuning at both head dims.) Beside
/// them at D=128 the widest K/V tile whose 2-stage ring fits, 160 keys. Clusters of two blocks
/// sharing each K/V tile (CLUSTER=2): on the grid's defaults at both head dims and its
/// FlashAttention-3 tile, and in the persistent loop with two Q tiles (at D=128 of 160 keys). The
/// persistent loop's one Q tile released after an item's last Q·Kᵀ (Q_RELEASE=1): at D=64, and at
/// D=128 on the 176-key tile with and without clusters. Persistent clusters over two query heads
/// of one K/V head (CLUSTER_HEADS=1) with two Q tiles: at D=64, and at D=128 of 160 keys.
const OPT_IN: [(&str, &str, usize); 18] = [
    (
        "hopper",
        "CLUSTER=2,CLUSTER_HEADS=1,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2",
        64,
    ),
    (
        "hopper",
        "CLUSTER=2,CLUSTER_HEADS=1,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2,BLOCK_N=160,LAZY_RESCALE=1",
        128,
    ),
    ("hopper", "SCHEDULE=1,Q_REGS=0,Q_RELEASE=1", 64),
    (
        "hopper",
        "SCHEDULE=1,Q_REGS=0,Q_RELEASE=1,BLOCK_N=176,STAGES=2,LAZY_RESCALE=1",
        128,
    ),
    (
        "hopper",
        "CLUSTER=2,SCHEDULE=1,Q_REGS=0,Q_RELEASE=1,BLOCK_N=176,STAGES=2,LAZY_RESCALE=1",
        128,
    ),
    (
        "hopper",
        "SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2,BLOCK_N=160",
        128,
    ),
    ("hopper", "LAZY_RESCALE=1", 128),
    ("hopper", "LAZY_RESCALE=1", 64),
    ("hopper", "BLOCK_N=176,STAGES=2", 128),
    ("hopper", "PV_N=64", 128),
    ("hopper", "Q_REGS=0", 128),
    ("hopper", "BLOCK_M=128,NUM_WARPS=8,OVERLAP=1,Q_REGS=1", 64),
    (
        "hopper",
        "BLOCK_M=64,NUM_WARPS=4,BLOCK_N=176,STAGES=2,OVERLAP=0,PINGPONG=0",
        128,
    ),
    ("hopper", "CLUSTER=2,SCHEDULE=0", 128),
    ("hopper", "CLUSTER=2,SCHEDULE=0", 64),
    ("hopper", "CLUSTER=2,SCHEDULE=1,Q_REGS=0,Q_STAGES=2", 64),
    (
        "hopper",
        "CLUSTER=2,SCHEDULE=0,BLOCK_N=176,STAGES=2,LAZY_RESCALE=1",
        128,
    ),
    (
        "hopper",
        "CLUSTER=2,SCHEDULE=1,Q_REGS=0,Q_STAGES=2,STAGES=2,BLOCK_N=160,LAZY_RESCALE=1",
        128,
    ),
];

/// One (implementation, config, dtype, head dim) to compile, as `Candidate::variant` builds it.
struct Case {
    candidate: Candidate,
    dtype: DType,
    head_dim: usize,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for imp in registry() {
        let head_dims: Vec<usize> = imp
            .head_dims
            .map(<[usize]>::to_vec)
            .unwrap_or_else(|| vec![64, 96, 128]);
        for dtype in [DType::F16, DType::Bf16] {
            for &head_dim in &head_dims {
                // The defaults, and the knobs tuned for the suites' shapes (the defaults there).
                let mut configs = vec![Config::default()];
                for ((b, h, seq), causal) in SUITE_SHAPES
                    .into_iter()
                    .flat_map(|s| [(s, false), (s, true)])
                {
                    let shape = attn_oracle::Shape::new(b, h, seq, seq, head_dim).unwrap();
                    let params = attn_oracle::Params::new(head_dim, causal);
                    let tuned = imp.tuned_for(&shape, &params, &Limits::H100);
                    if !configs.contains(&tuned) {
                        configs.push(tuned);
                    }
                }
                for (_, config, _) in OPT_IN
                    .iter()
                    .filter(|(name, _, d)| *name == imp.name && *d == head_dim)
                {
                    configs.push(config.parse().unwrap());
                }
                for knob in imp
                    .knobs
                    .iter()
                    .filter(|k| PATH_KNOBS.contains(&k.name.as_str()))
                {
                    // A config that names the knob (an opt-in one valid on one path) keeps it.
                    for config in configs
                        .clone()
                        .into_iter()
                        .filter(|c| c.get(knob.name).is_none())
                    {
                        for &value in knob.domain {
                            let path = config.merged(&Config::from_pairs(&[(knob.name, value)]));
                            // A path the config's other knobs rule out (the tuned clusters of
                            // one Q tile in the persistent loop) is not a variant.
                            let valid = imp.resolve(&path, head_dim, &Limits::H100).is_ok();
                            if valid && !configs.contains(&path) {
                                configs.push(path);
                            }
                        }
                    }
                }
                for overrides in configs {
                    out.push(Case {
                        candidate: Candidate::Registered {
                            implementation: imp,
                            overrides,
                        },
                        dtype,
                        head_dim,
                    });
                }
            }
        }
    }
    out
}

#[test]
fn every_default_variant_compiles_without_spills() {
    let ptxas = attn_kernels::toolkit::ptxas_path();
    let mut checked = 0;
    for case in cases() {
        let Candidate::Registered { implementation, .. } = &case.candidate else {
            unreachable!("cases() builds registered candidates")
        };
        let archs: Vec<&str> = match implementation.arch {
            Some(required) => vec![required],
            None => vec!["compute_80", "compute_90"],
        };
        for arch in archs {
            let arch = Arch(arch.to_string());
            let variant = case
                .candidate
                .variant(case.dtype, case.head_dim, &arch, &Limits::H100)
                .unwrap_or_else(|e| panic!("{e}"));
            let compiled = compile::compile(&variant.request).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                compiled.ptx.contains(&format!(".entry {}", variant.entry)),
                "{}: no entry in the PTX",
                implementation.name
            );
            if ptxas.is_some() {
                let res = compile::ptxas_resources(&compiled.ptx, &arch, variant.entry)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    !res.uses_local_memory(),
                    "{} [{}] for {}: unexpected local memory {res:?}",
                    implementation.name,
                    variant.request.defines.join(" "),
                    arch.0
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} variants compiled");
}

#[test]
fn the_gpu_reference_compiles_for_every_dtype_and_head_dim() {
    for dtype in [DType::F16, DType::Bf16] {
        for head_dim in [32usize, 64, 96, 128, 256] {
            let req = CompileRequest {
                name: "reference.cu".into(),
                source: include_str!("../../../kernels/reference.cu"),
                include_dir: None,
                defines: CompileRequest::abi_defines(dtype, head_dim).unwrap(),
                arch: Arch("compute_90".into()),
            };
            let compiled = compile::compile(&req).unwrap_or_else(|e| panic!("{e}"));
            for entry in ["attn_reference", "compare_rows", "count_bad"] {
                assert!(compiled.ptx.contains(&format!(".entry {entry}")), "{entry}");
            }
        }
    }
}

#[test]
fn the_harness_kernels_compile_with_no_dtype_or_head_dim() {
    let req = CompileRequest {
        name: "harness.cu".into(),
        source: include_str!("../../../kernels/harness.cu"),
        include_dir: None,
        defines: vec![],
        arch: Arch("compute_90".into()),
    };
    let compiled = compile::compile(&req).unwrap_or_else(|e| panic!("{e}"));
    for entry in ["checksum_words", "clock_stamp"] {
        assert!(compiled.ptx.contains(&format!(".entry {entry}")), "{entry}");
    }
}

#[test]
fn a_compile_error_reports_the_log_and_the_config() {
    let req = CompileRequest {
        name: "broken.cu".into(),
        source: "#include \"attn_common.cuh\"\nextern \"C\" __global__ void attn_fwd() { undeclared_thing(); }\n",
        include_dir: None,
        defines: vec!["ATTN_DTYPE_F16".into(), "HEAD_DIM=64".into(), "BLOCK_M=64".into()],
        arch: Arch("compute_90".into()),
    };
    let err = compile::compile(&req).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, KernelError::Compile { .. }), "{text}");
    assert!(
        text.contains("undeclared_thing") && text.contains("BLOCK_M=64"),
        "{text}"
    );
}

#[test]
fn invalid_configs_are_rejected_with_their_reason() {
    struct Case {
        implementation: &'static str,
        config: &'static str,
        head_dim: usize,
        reason: &'static str,
    }
    let cases = [
        Case {
            implementation: "tiled",
            config: "BLOCK_M=48",
            head_dim: 64,
            reason: "outside its domain",
        },
        Case {
            implementation: "tiled",
            config: "BLOCK_M=128,NUM_WARPS=4",
            head_dim: 64,
            reason: "at most 16",
        },
        Case {
            implementation: "tiled",
            config: "TILE=3",
            head_dim: 64,
            reason: "unknown knob TILE",
        },
        Case {
            implementation: "tiled",
            config: "",
            head_dim: 96,
            reason: "head dim 96",
        },
        Case {
            implementation: "hopper",
            config: "BLOCK_M=64",
            head_dim: 128,
            reason: "must be 16 x NUM_WARPS",
        },
        Case {
            implementation: "hopper",
            config: "CLUSTER=2,SCHEDULE=1",
            head_dim: 128,
            reason: "CLUSTER=2 in the persistent loop needs Q_STAGES=2 or Q_RELEASE=1",
        },
        Case {
            implementation: "hopper",
            config: "Q_RELEASE=1,SCHEDULE=0",
            head_dim: 128,
            reason: "Q_RELEASE=1 needs SCHEDULE=1",
        },
        Case {
            implementation: "hopper",
            config: "CLUSTER_HEADS=1,SCHEDULE=1",
            head_dim: 128,
            reason: "CLUSTER_HEADS=1 needs CLUSTER=2 and SCHEDULE=1",
        },
        Case {
            implementation: "naive",
            config: "",
            head_dim: 512,
            reason: "head dim 512",
        },
    ];
    for case in cases {
        let imp = attn_kernels::registry::find(case.implementation).unwrap();
        let cfg: Config = case.config.parse().unwrap();
        let err = imp
            .resolve(&cfg, case.head_dim, &Limits::H100)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(case.reason),
            "{} [{}] D={}: got `{err}`",
            case.implementation,
            case.config,
            case.head_dim
        );
    }
    // Shared memory over the device limit.
    let tiny = Limits {
        max_threads_per_block: 1024,
        max_shared_per_block: 16 * 1024,
        ..Limits::H100
    };
    let err = attn_kernels::registry::find("tiled")
        .unwrap()
        .resolve(&Config::default(), 128, &tiny)
        .unwrap_err()
        .to_string();
    assert!(err.contains("shared memory"), "{err}");
    let threads = Limits {
        max_threads_per_block: 64,
        max_shared_per_block: 232_448,
        ..Limits::H100
    };
    let err = attn_kernels::registry::find("tiled")
        .unwrap()
        .resolve(&Config::default(), 64, &threads)
        .unwrap_err()
        .to_string();
    assert!(err.contains("threads per block"), "{err}");
}

#[test]
fn unknown_implementation_lists_the_known_ones() {
    let err = attn_kernels::registry::find("fast")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown implementation `fast`") && err.contains("tiled"),
        "{err}"
    );
}

#[test]
fn a_revision_compiles_its_own_text_with_its_headers_first_and_todays_defines() {
    let hopper = Candidate::registered("hopper", Config::default()).unwrap();
    let arch = Arch("compute_90".into());
    let today = hopper
        .variant(DType::F16, 128, &arch, &Limits::H100)
        .unwrap();
    let dir = std::env::temp_dir().join(format!("attn-revision-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The revision's header defines a marker the embedded one lacks; the revision's kernel
    // refuses to compile without it.
    let header = compile::HEADERS[0].1.to_string() + "\n#define ATTN_FROM_REVISION 1\n";
    std::fs::write(dir.join("attn_common.cuh"), header).unwrap();
    let source = today.request.source.replace(
        "#include \"attn_common.cuh\"",
        "#include \"attn_common.cuh\"\n#ifndef ATTN_FROM_REVISION\n#error embedded header\n#endif",
    );
    assert_ne!(
        source, today.request.source,
        "hopper.cu includes attn_common.cuh"
    );
    let revision = Candidate::Revision {
        of: Box::new(hopper.clone()),
        source,
        include_dir: dir.clone(),
        revision: "0123456789abcdef".into(),
    };
    assert_eq!(revision.label(), "hopper@0123456");
    let variant = revision
        .variant(DType::F16, 128, &arch, &Limits::H100)
        .unwrap();
    // Today's defines, architecture (hopper's compute_90a), entry and shared memory.
    assert_eq!(variant.request.defines, today.request.defines);
    assert_eq!(variant.request.arch, today.request.arch);
    assert_eq!(variant.shared_bytes, today.shared_bytes);
    assert_eq!(variant.request.name, "hopper@0123456");
    let compiled = compile::compile(&variant.request).unwrap_or_else(|e| panic!("{e}"));
    assert!(compiled.ptx.contains(".entry attn_fwd"));
    let _ = std::fs::remove_dir_all(&dir);
    // A revision that predates a knob (its text never names SCHEDULE) is compiled and launched
    // as the kernel it is, whatever today's config says.
    let persistent =
        Candidate::registered("hopper", "SCHEDULE=persistent".parse().unwrap()).unwrap();
    let before = Candidate::Revision {
        of: Box::new(persistent.clone()),
        source: "// a kernel of another time\n".into(),
        include_dir: dir.clone(),
        revision: "0123456789abcdef".into(),
    };
    let old = before
        .variant(DType::F16, 128, &arch, &Limits::H100)
        .unwrap();
    assert_eq!(old.config.get("SCHEDULE"), Some(0));
    assert!(
        old.request.defines.contains(&"SCHEDULE=0".to_string()),
        "{:?}",
        old.request.defines
    );
    let now = persistent
        .variant(DType::F16, 128, &arch, &Limits::H100)
        .unwrap();
    assert!(now.request.defines.contains(&"SCHEDULE=1".to_string()));
    let knowing = Candidate::Revision {
        of: Box::new(persistent),
        source: "#if SCHEDULE\n#endif\n".into(),
        include_dir: dir.clone(),
        revision: "0123456789abcdef".into(),
    };
    let knowing = knowing
        .variant(DType::F16, 128, &arch, &Limits::H100)
        .unwrap();
    assert_eq!(knowing.config.get("SCHEDULE"), Some(1));
    // Per-shape tuning carries over to the revision.
    let shape = attn_oracle::Shape::new(1, 8, 512, 512, 64).unwrap();
    for causal in [false, true] {
        let params = attn_oracle::Params::new(64, causal);
        assert_eq!(
            revision.for_problem(&shape, &params, &Limits::H100).knobs(),
            hopper.for_problem(&shape, &params, &Limits::H100).knobs()
        );
    }
}

#[test]
fn source_kernels_declare_tensor_maps_and_producer_warps_validly() {
    let arch = Arch("compute_90a".into());
    let source = |defines: &str| Candidate::Source {
        path: "kernels/mine.cu".into(),
        source: String::new(),
        entry: "attn_fwd".into(),
        defines: defines.parse().unwrap(),
    };
    // (defines, the reason given, or None when valid)
    let cases = [
        (
            "TENSOR_MAPS=1,BLOCK_N=128,NUM_WARPS=8,PRODUCER_WARPS=4",
            None,
        ),
        ("NUM_WARPS=28,PRODUCER_WARPS=4", None),
        ("TENSOR_MAPS=1", Some("needs BLOCK_N")),
        (
            "TENSOR_MAPS=2,BLOCK_N=64",
            Some("must be 0 (plain ABI) or 1"),
        ),
        (
            "NUM_WARPS=29,PRODUCER_WARPS=4",
            Some("do not fit the device"),
        ),
        ("PRODUCER_WARPS=-1", Some("do not fit the device")),
        ("TENSOR_MAPS=1,BLOCK_N=176,CLUSTER=2", None),
        (
            "TENSOR_MAPS=1,BLOCK_N=176,CLUSTER=3",
            Some("must be 1 to 8 blocks and divide BLOCK_N=176"),
        ),
        ("CLUSTER=0", Some("must be 1 to 8 blocks")),
    ];
    for (defines, reason) in cases {
        let candidate = source(defines);
        let result = candidate.variant(DType::F16, 128, &arch, &Limits::H100);
        match (result, reason) {
            (Ok(_), None) => {}
            (Err(e), Some(reason)) => assert!(e.to_string().contains(reason), "[{defines}]: {e}"),
            (Ok(_), Some(reason)) => panic!("[{defines}] accepted; expected `{reason}`"),
            (Err(e), None) => panic!("[{defines}]: {e}"),
        }
    }
}

#[test]
fn a_source_kernel_gets_variant_problems_only_when_it_declares_them() {
    let dir = std::env::temp_dir().join(format!("attn-variants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mine.cu");
    std::fs::write(&path, "// a kernel\n").unwrap();
    let gqa: attn_oracle::Shape = "1,8/2,64,64".parse().unwrap();
    let params = attn_oracle::Params::new(64, false);
    let plain = Candidate::from_file(&path, None, Config::default()).unwrap();
    let err = plain.check_supports(&gqa, &params).unwrap_err().to_string();
    assert!(
        err.contains("grouped-query") && err.contains("VARIANTS=1"),
        "{err}"
    );
    assert!(plain
        .check_supports(&attn_oracle::Shape::single(64), &params)
        .is_ok());
    let declared =
        Candidate::from_file(&path, None, Config::from_pairs(&[("VARIANTS", 1)])).unwrap();
    assert!(declared.check_supports(&gqa, &params).is_ok());
    let _ = std::fs::remove_dir_all(dir);
}
