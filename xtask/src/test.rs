//! `cargo xtask test`: makes sure NVRTC, ptxas and the CUDA headers are available (installing NVIDIA's
//! pinned wheels into `target/` when no toolkit is found), numpy for the SDPA helper's row check
//! and Triton for the Triton front end's compile test, Ray for the local-cluster search test
//! (pinned wheels into `target/` when python3 has none), then runs the whole workspace test suite,
//! kernel compile checks included. The report's browser test runs when a headless Chromium is
//! found; only when asked (`--install-browser`, or `CI=true`) is Debian's `chromium` installed
//! with apt-get, the one step that changes the system. No GPU needed: GPU tests are `#[ignore]`d
//! and run from the bundle.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use attn_kernels::toolkit::{Toolkit, PINNED_WHEELS, WHEELS_DIR};

/// Arguments of `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Install Debian's chromium with apt-get (as root, or through `sudo -n`) when no browser is
    /// found, so that the report's headless-browser test runs: this changes the system (about
    /// 120 packages). Implied by `CI=true`. Without it and without a browser the test is skipped.
    #[arg(long)]
    pub install_browser: bool,
    /// Extra arguments for `cargo test` (e.g. `-- --include-ignored` on a GPU machine).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub cargo_args: Vec<String>,
}

/// The NVRTC compile test (crates/attn-kernels/tests/compile.rs): every kernel variant through
/// NVRTC and ptxas one after another, silent for minutes under libtest's capture, so it runs as its
/// own step with a spinner that shows the time taken.
const COMPILE_TEST: &str = "every_default_variant_compiles_without_spills";

/// What the compile step says while it runs: its order of time, not a promise (one core's work,
/// longer on a busy machine).
const COMPILE_STEP: &str =
    "compile test: every kernel variant through NVRTC and ptxas, one after another (a few minutes)";

/// Runs the subcommand; returns the process exit code. The last line printed is the verdict.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let failed = steps(&args)?;
    match failed {
        None => {
            println!(
                "\ncargo xtask test: PASSED (workspace tests, every kernel variant compiled, no default variant spills)"
            );
            Ok(0)
        }
        Some(step) => {
            println!("\ncargo xtask test: FAILED ({step}; see above)");
            Ok(crate::EXIT_FAILED)
        }
    }
}

/// The steps in order; the first that fails, named, or `None`.
fn steps(args: &Args) -> anyhow::Result<Option<&'static str>> {
    let workspace = crate::workspace_root();
    let toolkit = find_or_install(&workspace)?;
    println!(
        "CUDA compile toolkit: {} ({})",
        toolkit.root.display(),
        toolkit.origin
    );
    let cargo = || -> anyhow::Result<Command> {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(&workspace);
        toolkit.apply(&mut cmd)?;
        Ok(cmd)
    };
    // The user's arguments: those for cargo, and those after `--` for the test harness.
    let split = args.cargo_args.iter().position(|a| a == "--");
    let (for_cargo, for_harness) = match split {
        Some(at) => (&args.cargo_args[..at], &args.cargo_args[at + 1..]),
        None => (&args.cargo_args[..], &[][..]),
    };

    let mut tests = cargo()?;
    tests
        .args(["test", "--workspace"])
        .args(for_cargo)
        .arg("--")
        .args(for_harness)
        .args(["--skip", COMPILE_TEST]);
    let ci = std::env::var("CI").ok();
    if ensure_chromium(may_install_browser(args.install_browser, ci.as_deref())) {
        // The browser test then fails (one line) instead of skipping if the browser is missing.
        tests.env("ATTN_BROWSER_TEST", "required");
    }
    // The helper's row-check test then fails instead of skipping if numpy is missing.
    if let Some(path) = ensure_python_package(&workspace, &NUMPY) {
        tests.env("ATTN_HELPER_PYTHONPATH", path);
    }
    tests.env("ATTN_HELPER_TEST", "required");
    // The Triton compile test likewise.
    if let Some(path) = ensure_python_package(&workspace, &TRITON) {
        tests.env(attn_kernels::triton::PYTHONPATH_VAR, path);
    }
    tests.env("ATTN_TRITON_TEST", "required");
    // The local Ray cluster's test likewise.
    if let Some(path) = ensure_python_package(&workspace, &RAY) {
        tests.env(attn_measure::search::ray::PYTHONPATH_VAR, path);
    }
    tests.env("ATTN_RAY_TEST", "required");
    if !tests.status().context("running cargo test")?.success() {
        return Ok(Some("workspace tests"));
    }

    // Built by the step above: this only runs the one test, with its output kept for a failure.
    let mut compile = cargo()?;
    compile
        .args([
            "test",
            "--quiet",
            "--package",
            "attn-kernels",
            "--test",
            "compile",
        ])
        .args(for_cargo.iter().filter(|a| *a == "--release"))
        .arg("--")
        .args(for_harness)
        .args(["--exact", COMPILE_TEST]);
    let spinner = indicatif::ProgressBar::new_spinner();
    spinner.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    spinner.set_message(COMPILE_STEP);
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    if spinner.is_hidden() {
        // No terminal for the spinner: say once what runs.
        println!("{COMPILE_STEP}");
    }
    let output = compile.output().context("running the compile test")?;
    spinner.finish_and_clear();
    if !output.status.success() {
        print!("{}", String::from_utf8_lossy(&output.stdout));
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
        return Ok(Some("compile test"));
    }
    println!(
        "compile test: every kernel variant compiled without spills ({:.0?})",
        spinner.elapsed()
    );

    // Show what the compile test checked for the defaults: registers, shared memory, spills, with
    // a non-zero exit on any spill. Through cargo: `cargo test` may have relinked this very
    // executable.
    let mut kernels = cargo()?;
    kernels.args([
        "run",
        "--quiet",
        "--package",
        "xtask",
        "--",
        "kernels",
        "--ptxas",
    ]);
    if !kernels
        .status()
        .context("running xtask kernels --ptxas")?
        .success()
    {
        return Ok(Some("a default variant spills (xtask kernels --ptxas)"));
    }
    Ok(None)
}

/// Names the report's browser test looks for on `PATH` (see `crates/attn-report/tests/browser.rs`).
const BROWSERS: [&str; 4] = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
];

fn browser_on_path() -> bool {
    if std::env::var_os("ATTN_CHROMIUM").is_some() {
        return true;
    }
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| BROWSERS.iter().any(|name| dir.join(name).is_file()))
}

/// What `cargo xtask test` does about the report's browser test.
#[derive(Debug, PartialEq, Eq)]
enum BrowserStep {
    /// A browser is there: the test must run.
    Found,
    /// None, and installing one was asked for: apt-get installs Debian's `chromium`.
    Install,
    /// None, and none is installed: the test skips, for this reason (said on one line).
    Skip(&'static str),
}

/// The step for a browser `found` or not, `install` asked for (`--install-browser`, or CI) or
/// not, and apt-get there or not.
fn browser_step(found: bool, install: bool, apt_get: bool) -> BrowserStep {
    match (found, install, apt_get) {
        (true, _, _) => BrowserStep::Found,
        (false, false, _) => BrowserStep::Skip(
            "no chromium found: the report's headless-browser test will be skipped (set ATTN_CHROMIUM=/path/to/chromium, or pass --install-browser to install Debian's chromium with apt-get, which changes the system)",
        ),
        (false, true, false) => BrowserStep::Skip(
            "no chromium and no apt-get: the report's headless-browser test will be skipped",
        ),
        (false, true, true) => BrowserStep::Install,
    }
}

/// Whether the system may be changed to install a browser: `--install-browser`, or `CI=true` (a
/// CI runner's machine is there to be set up).
fn may_install_browser(flag: bool, ci: Option<&str>) -> bool {
    flag || ci == Some("true")
}

/// Whether the report's browser test must run (it then fails on one line, rather than skipping,
/// if the browser is missing): a browser was found, or `install` asked for Debian's `chromium`
/// and apt-get was there to install it ([`browser_step`]).
fn ensure_chromium(install: bool) -> bool {
    let apt = Path::new("/usr/bin/apt-get").is_file();
    match browser_step(browser_on_path(), install, apt) {
        BrowserStep::Found => true,
        BrowserStep::Skip(why) => {
            println!("{why}");
            false
        }
        BrowserStep::Install => {
            println!("installing chromium with apt-get (for the report's headless-browser test)");
            let installed = apt_get(&["install", "-y", "-q", "chromium"])
                || (apt_get(&["update", "-q"]) && apt_get(&["install", "-y", "-q", "chromium"]));
            if !installed || !browser_on_path() {
                println!(
                    "could not install chromium with apt-get: the report's headless-browser test will fail"
                );
            }
            true
        }
    }
}

/// Runs `apt-get ARGS` quietly (through `sudo -n` when not root); whether it succeeded.
fn apt_get(args: &[&str]) -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    let mut cmd = if root {
        Command::new("apt-get")
    } else {
        let mut sudo = Command::new("sudo");
        sudo.args(["-n", "apt-get"]);
        sudo
    };
    cmd.args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A Python package some tests need, pinned.
struct PythonPackage {
    /// What `import` names.
    module: &'static str,
    /// The wheel pip installs, with its version.
    pinned: &'static [&'static str],
    /// Where in the workspace.
    dir: &'static str,
    /// The tests it is for, in a phrase.
    for_what: &'static str,
}

/// numpy for the SDPA helper's row-check test (`crates/attn-measure/tests/helper.rs`).
const NUMPY: PythonPackage = PythonPackage {
    module: "numpy",
    pinned: &["numpy==2.2.6"],
    dir: "target/py-numpy",
    for_what: "the SDPA helper's row-check test",
};

/// Triton for the Triton front end's compile test (`crates/attn-kernels/tests/triton_compile.rs`),
/// the version the GPU machine has.
const TRITON: PythonPackage = PythonPackage {
    module: "triton",
    pinned: &["triton==3.6.0"],
    dir: "target/py-triton",
    for_what: "the Triton front end's compile test",
};

/// Ray for `evo --on ray`'s local-cluster test (`xtask/tests/evo_ray.rs`), with every package it
/// imports pinned (pip adds none).
const RAY: PythonPackage = PythonPackage {
    module: "ray",
    pinned: &[
        "ray==2.52.1",
        "attrs==26.1.0",
        "certifi==2026.10.19.post1",
        "charset-normalizer==3.5.3",
        "click==8.5.1",
        "filelock==4.3.2",
        "idna==3.21",
        "jsonschema==4.26.0",
        "jsonschema-specifications==2025.9.1",
        "msgpack==1.2.4",
        "packaging==26.4",
        "protobuf==7.36.2",
        "pyyaml==6.0.4",
        "referencing==0.37.0",
        "requests==2.34.2",
        "rpds-py==2026.9.1",
        "typing-extensions==4.16.0",
        "urllib3==2.8.0",
    ],
    dir: "target/py-ray",
    for_what: "the local Ray cluster's search test",
};

/// `package` for python3: `None` when python3 imports it already, else the folder a pinned wheel
/// was installed into with pip (a failed install is said on one line; its tests then fail on it).
fn ensure_python_package(workspace: &Path, package: &PythonPackage) -> Option<std::path::PathBuf> {
    let imports = |path: Option<&Path>| {
        let mut python = Command::new("python3");
        if let Some(path) = path {
            python.env("PYTHONPATH", path);
        }
        python
            .args(["-c", &format!("import {}", package.module)])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if imports(None) {
        return None;
    }
    let target = workspace.join(package.dir);
    if !imports(Some(&target)) {
        println!(
            "installing {} into {} (for {})",
            package.pinned.join(" "),
            target.display(),
            package.for_what
        );
        let installed = pinned_install("python3", &target, package.pinned)
            .arg("--quiet")
            .status()
            .is_ok_and(|status| status.success());
        if !installed {
            println!(
                "could not install {} with pip: {} will fail",
                package.pinned.join(" "),
                package.for_what
            );
        }
    }
    Some(target)
}

/// `python -m pip install` of exactly `wheels` (each pinned to a version) into `target`, a folder
/// of the project: `--no-deps`, so that pip picks no dependency's version itself (the lists name
/// every wheel needed).
fn pinned_install(python: &str, target: &Path, wheels: &[&str]) -> Command {
    let mut pip = Command::new(python);
    pip.args(["-m", "pip", "install", "--disable-pip-version-check"])
        .args(["--upgrade", "--no-deps", "--target"])
        .arg(target)
        .args(wheels);
    pip
}

/// Finds a toolkit (`attn_kernels::toolkit`), installing the pinned wheels with pip when there is
/// none.
fn find_or_install(workspace: &Path) -> anyhow::Result<Toolkit> {
    if let Some(toolkit) = Toolkit::find(workspace) {
        return Ok(toolkit);
    }
    let target = workspace.join(WHEELS_DIR);
    eprintln!(
        "no CUDA toolkit found: installing {} into {} (about 500 MB to download; pip shows its progress)",
        PINNED_WHEELS.join(" "),
        target.display()
    );
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("-m").arg("pip").arg("--version").output().is_ok_and(|o| o.status.success()))
        .context("no CUDA toolkit and no python3 with pip to install NVIDIA's NVRTC wheels (install pip, or set CUDA_HOME)")?;
    // pip's own download progress (drawn when stderr is a terminal): the wheels are large.
    let status = pinned_install(python, &target, &PINNED_WHEELS)
        .args(["--progress-bar", "on"])
        .status()
        .with_context(|| format!("running {python} -m pip"))?;
    if !status.success() {
        bail!("pip could not install the CUDA wheels ({status}); set CUDA_HOME to a CUDA 13 toolkit instead");
    }
    Toolkit::find(workspace).with_context(|| {
        let root = attn_kernels::toolkit::wheel_root(workspace);
        format!(
            "pip installed the wheels but {} has no include/cuda_fp16.h or libnvrtc",
            root.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_browser_is_installed_only_when_asked() {
        assert_eq!(browser_step(true, false, true), BrowserStep::Found);
        assert_eq!(browser_step(true, true, false), BrowserStep::Found);
        assert_eq!(browser_step(false, true, true), BrowserStep::Install);
        let BrowserStep::Skip(why) = browser_step(false, false, true) else {
            panic!("not asked: no install");
        };
        assert!(
            why.contains("--install-browser") && why.contains("ATTN_CHROMIUM"),
            "{why}"
        );
        assert!(matches!(
            browser_step(false, true, false),
            BrowserStep::Skip(_)
        ));
        // CI=true asks, as --install-browser does; anything else does not.
        assert!(may_install_browser(true, None));
        assert!(may_install_browser(false, Some("true")));
        assert!(!may_install_browser(false, None));
        assert!(!may_install_browser(false, Some("false")));
    }

    #[test]
    fn every_wheel_is_pinned_exactly_and_pip_adds_none() {
        let names: Vec<&str> = PINNED_WHEELS
            .iter()
            .chain(NUMPY.pinned.iter().chain(TRITON.pinned).chain(RAY.pinned))
            .map(|w| {
                let (name, version) = w
                    .split_once("==")
                    .unwrap_or_else(|| panic!("{w} is not pinned"));
                // A literal release (`3.21`, `2.52.1`, `2026.10.19.post1`): no wildcard, range or
                // pre-release pip could resolve to something else.
                let parts: Vec<&str> = version.split('.').collect();
                let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
                let (last, release) = parts.split_last().expect("split gives one part");
                let exact = parts.len() >= 2
                    && release.iter().all(|p| digits(p))
                    && (digits(last) || last.strip_prefix("post").is_some_and(digits));
                assert!(exact, "{w}: not an exact version");
                name
            })
            .collect();
        // nvcc's own dependencies are in the list, so that --no-deps leaves none out.
        for needed in [
            "nvidia-cuda-nvcc",
            "nvidia-nvvm",
            "nvidia-cuda-runtime",
            "nvidia-cuda-crt",
        ] {
            assert!(names.contains(&needed), "{needed} missing from {names:?}");
        }
        let pip = pinned_install("python3", Path::new("target/x"), &PINNED_WHEELS);
        let args: Vec<_> = pip
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.iter().any(|a| a == "--no-deps"), "{args:?}");
        assert!(
            args.windows(2)
                .any(|w| w[0] == "--target" && w[1] == "target/x"),
            "{args:?}"
        );
    }
}
