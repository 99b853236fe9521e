//! The runner against a fake `ncu`: a shell script that records its arguments and replays
//! captured output, so the real process plumbing is exercised without a GPU.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use attn_ncu::{profile, NcuError, Page, ProfileOptions};

/// Serialises writing and running scripts: a script still open for writing in one thread while
/// another thread forks would fail to execute with "text file busy".
static SCRIPTS: Mutex<()> = Mutex::new(());

/// Relative to the crate folder, where test runners start: the executable stays relocatable.
const RAW: &str = "tests/fixtures/h100_sdpa_cudnn_raw.csv";

/// Writes an executable fake ncu with this body into `dir`.
fn fake_ncu(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("ncu");
    let args_file = dir.join("args.txt");
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > '{}'\n{body}\n",
        args_file.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn options(ncu: PathBuf) -> ProfileOptions {
    ProfileOptions {
        ncu,
        launch_skip: 3,
        launch_count: 2,
        ..ProfileOptions::new(
            "sdpa_sm90",
            vec![
                "gpu__time_duration.sum".into(),
                "dram__bytes_read.sum".into(),
            ],
        )
    }
}

/// Runs the fake ncu with `body` and returns the result and the arguments it received.
fn run(body: &str) -> (Result<attn_ncu::Profile, NcuError>, Vec<String>) {
    let _guard = SCRIPTS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let opts = options(fake_ncu(dir.path(), body));
    let result = profile(
        &opts,
        Path::new("target/release/attn-bench"),
        &["--impl".into(), "v3 tiled".into()],
    );
    let args = std::fs::read_to_string(dir.path().join("args.txt")).unwrap_or_default();
    (result, args.lines().map(str::to_owned).collect())
}

#[test]
fn passes_the_right_command_line_and_parses_the_output() {
    let (result, args) = run(&format!(
        "echo 'bench: starting'\ncat '{}'\nexit 0",
        std::fs::canonicalize(RAW).unwrap().display()
    ));
    let expected = [
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--kernel-name",
        "regex:sdpa_sm90",
        "--launch-skip",
        "3",
        "--launch-count",
        "2",
        "--clock-control",
        "none",
        "--cache-control",
        "all",
        "--metrics",
        "gpu__time_duration.sum,dram__bytes_read.sum",
        "target/release/attn-bench",
        "--impl",
        "v3 tiled",
    ];
    assert_eq!(args, expected);
    let profile = result.unwrap();
    assert_eq!(profile.launches.len(), 5);
    assert_eq!(profile.command_line[1..], expected);
    assert!(profile.clock_note.contains("--clock-control none"));
    assert_eq!(profile.warnings.len(), 1, "{:?}", profile.warnings);
}

#[test]
fn details_page_is_requested_when_asked() {
    let opts = ProfileOptions {
        page: Page::Details,
        ..options("ncu".into())
    };
    let args = attn_ncu::arguments(&opts, Path::new("b"), &[]);
    assert!(args
        .windows(2)
        .any(|w| w[0] == "--page" && w[1] == "details"));
    assert_eq!(
        attn_ncu::command(&opts, Path::new("b"), &[]).get_program(),
        "ncu"
    );
}

fn check(body: &str, expected: &str) {
    let (result, _) = run(body);
    let err = result.expect_err(expected);
    let message = err.to_string();
    assert!(
        message.contains(expected),
        "{message:?} should contain {expected:?}"
    );
    assert!(!message.contains('\n'), "one line: {message:?}");
}

#[test]
fn failures_become_one_line_errors_with_the_fix() {
    let cases = [
        (
            "echo '==PROF== Connected to process 1 (/bench)'\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0.' >&2\nexit 1",
            "ERR_NVGPUCTRPERM): run as root",
        ),
        ("echo '==ERROR== Failed to find metric sm__bogus.sum' >&2\nexit 1", "ncu rejected a metric"),
        ("echo 'CUDA_ERROR_NO_DEVICE' >&2\necho '==ERROR== The application returned an error code (2).' >&2\nexit 2", "exit code 2): CUDA_ERROR_NO_DEVICE"),
        ("echo '==WARNING== No kernels were profiled.'\nexit 0", "nothing matched --kernel-name regex:sdpa_sm90 after skipping 3 launches"),
        ("kill -9 $$", "ncu failed (signal: 9"),
    ];
    for (body, expected) in cases {
        check(body, expected);
    }
}

#[test]
fn missing_ncu_says_how_to_install_it() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path().join("no-such-ncu"));
    let err = profile(&opts, Path::new("bench"), &[]).unwrap_err();
    assert!(matches!(err, NcuError::NcuNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("install Nsight Compute"));
}

#[test]
fn a_source_page_asks_for_sass_and_the_warp_state_sections_and_reads_back() {
    let opts = ProfileOptions {
        page: Page::Source,
        ..options(PathBuf::from("ncu"))
    };
    let args = attn_ncu::arguments(&opts, Path::new("xtask"), &["target".into()]);
    let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
    let joined = args.join(" ");
    assert!(joined.starts_with("--csv --page source --print-source sass --section WarpStateStats --section SourceCounters"), "{joined}");
    // A source page takes no metric list (its sections say what it holds).
    assert!(!args.contains(&"--metrics"), "{joined}");
    let ended = |stdout: &'static str| attn_ncu::Ended {
        success: true,
        status: "exit status: 0",
        stdout,
        stderr: "",
    };
    let page = include_str!("fixtures/h200_hopper_source_sass.csv");
    let profiles = attn_ncu::interpret_source(&opts, &ended(page)).unwrap();
    assert_eq!(profiles[0].kernel, "attn_fwd");
    let none = attn_ncu::interpret_source(&opts, &ended("==PROF== Disconnected from process 1\n"));
    assert!(
        matches!(none, Err(NcuError::NoKernelsProfiled { .. })),
        "{none:?}"
    );
    let failed = attn_ncu::interpret_source(
        &opts,
        &attn_ncu::Ended {
            success: false,
            status: "exit status: 1",
            stdout: "",
            stderr: "==ERROR== The application returned an error code (11).\n",
        },
    );
    assert!(failed.is_err());
}
