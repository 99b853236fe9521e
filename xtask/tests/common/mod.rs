//! Shared by the integration tests that run the xtask binary.

use std::path::PathBuf;

/// The xtask binary: cargo's build, or the bundle's copy on a GPU machine without cargo (tests run
/// from the `xtask/` folder either way).
pub fn xtask() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_xtask"));
    if built.is_file() {
        built
    } else {
        // Absolute, so that tests may run it from another working directory.
        let bundled = PathBuf::from("../target/bundle/xtask");
        bundled.canonicalize().unwrap_or(bundled)
    }
}

/// A finished xtask's stdout then stderr, as one text (for assertions and failure messages).
#[allow(dead_code)] // each test file compiles this module; not every one reads output as text
pub fn output_text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
