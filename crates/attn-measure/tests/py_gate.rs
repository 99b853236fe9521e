//! Python callables as the gate's candidate (`gate --py`), judged by the real pipeline on the
//! GPU: an honest callable passes against SDPA's math backend, and each known exploit of a
//! callable benchmark (`tests/fixtures/callables.py`, `patches_timer.py`) is rejected with its
//! own status and reason; one that loads the GPU from a thread whenever it is not called gains
//! nothing, its process stopped while the baseline is timed. Each callable gets a helper process
//! of its own, as `gate --py` does.
//!
//! Run on a GPU machine with `--include-ignored`.

use std::path::Path;
use std::time::Duration;

use attn_evidence::{CaseStatus, DefenceName, GateRule};
use attn_kernels::{Gpu, TimingMode, TimingOptions};
use attn_measure::gate::GatePlan;
use attn_measure::py_gate::PyGate;
use attn_measure::sdpa::{Backend, Sdpa};
use attn_measure::timing::Interleave;
use attn_measure::{Baseline, Problem};
use attn_stats::CompareOptions;

/// One callable, the status its case must end with, and words its reason must contain.
struct Case {
    file: &'static str,
    function: &'static str,
    expect: CaseStatus,
    says: &'static str,
    /// SDPA's backend as the baseline: math (which an honest SDPA call beats by far) unless said.
    baseline: Backend,
}

const CASES: [Case; 8] = [
    Case {
        file: "callables.py",
        function: "honest",
        expect: CaseStatus::Passed,
        says: "speedup",
        baseline: Backend::Math,
    },
    Case {
        file: "callables.py",
        function: "remembers_outputs",
        expect: CaseStatus::StaleOutput,
        says: "remembered output",
        baseline: Backend::Math,
    },
    Case {
        file: "callables.py",
        function: "returns_v",
        expect: CaseStatus::BrokeContract,
        says: "memory of its input V",
        baseline: Backend::Math,
    },
    Case {
        file: "callables.py",
        function: "side_stream",
        expect: CaseStatus::EscapedStream,
        says: "another stream",
        baseline: Backend::Math,
    },
    Case {
        file: "callables.py",
        function: "down_casts",
        expect: CaseStatus::BrokeContract,
        says: "a down-cast",
        baseline: Backend::Math,
    },
    Case {
        file: "callables.py",
        function: "zeros_inputs",
        expect: CaseStatus::WroteInputs,
        says: "changed its input Q",
        baseline: Backend::Math,
    },
    Case {
        file: "patches_timer.py",
        function: "attend",
        expect: CaseStatus::BrokeContract,
        says: "patched the timer",
        baseline: Backend::Math,
    },
    // Honest, with a thread that loads the GPU whenever it is not being called: stopped while
    // the baseline is timed, it gains nothing over SDPA itself (its eager calls against SDPA's
    // graphs, not faster).
    Case {
        file: "callables.py",
        function: "slows_the_baseline",
        expect: CaseStatus::NotFaster,
        says: "not faster",
        baseline: Backend::Default,
    },
];

/// The case's verdict on a shape whose V has Q's shape (so that returning V type-checks),
/// against its SDPA backend.
fn judge(case: &Case, gpu: &Gpu) -> attn_evidence::GateCase {
    let (baseline, _) = Baseline::from_name("sdpa", case.baseline).unwrap();
    let helper = Sdpa::detect().expect("PyTorch in the helper");
    let file = Path::new("tests/fixtures").join(case.file);
    helper.load_callable(&file, case.function).unwrap();
    let plan = GatePlan {
        checks: 3,
        interleave: Interleave::new(
            TimingOptions {
                samples: 20,
                warmup: 3,
                mode: TimingMode::Graph,
                ..TimingOptions::default()
            },
            gpu.info().max_sm_mhz,
        ),
        compare: CompareOptions::default(),
        rule: GateRule::default(),
        hang_floor: Duration::from_secs(10),
        hang_factor: 100.0,
        peak_tflops: attn_measure::provenance::peak_tflops(gpu),
    };
    // Long enough that the attention, not the call's host overhead, is what both sides time.
    let problem = Problem::parse("1,8,1024,64 causal bf16").unwrap();
    let mut session = PyGate::new(gpu, &helper, &baseline, &plan, None);
    session.case(&problem, 0x9e7e)
}

#[test]
#[ignore = "needs a CUDA GPU and PyTorch"]
fn python_callables_pass_and_fail_the_gate_for_their_own_reasons() {
    let gpu = Gpu::open(0).unwrap();
    let mut wrong = vec![];
    for case in &CASES {
        let verdict = judge(case, &gpu);
        let status = verdict.status.expect("a decided case");
        println!(
            "{}:{}: {status}: {}",
            case.file, case.function, verdict.reason
        );
        if status != case.expect || !verdict.reason.contains(case.says) {
            wrong.push(format!(
                "{}: expected {} ({}), got {status}: {}",
                case.function, case.expect, case.says, verdict.reason
            ));
        }
        // What a callable's PASS does not cover is said, not silently claimed.
        let guards = verdict
            .defences
            .iter()
            .find(|d| d.name == DefenceName::GuardRegions)
            .expect("every defence recorded");
        assert!(
            guards.covered.contains("allocates its own output"),
            "{guards:?}"
        );
        if case.expect == CaseStatus::Passed {
            for name in [DefenceName::InputChecksums, DefenceName::Determinism] {
                let d = verdict.defences.iter().find(|d| d.name == name).unwrap();
                assert!(d.ran, "{d:?}");
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
