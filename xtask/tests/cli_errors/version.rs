//! `--version`: the crate version and the revision.

use std::path::Path;

use crate::xtask;

#[test]
fn version_says_the_crate_version_and_the_revision() {
    for flag in ["--version", "-V"] {
        let (code, stdout, stderr) = xtask(Path::new("."), &[flag]);
        assert_eq!(code, 0, "{stderr}");
        let line = stdout.trim_end();
        let want = format!("cargo xtask {} (", env!("CARGO_PKG_VERSION"));
        assert!(line.starts_with(&want), "{line}");
        assert!(line.contains("git "), "{line}");
        assert_eq!(line.lines().count(), 1, "{line}");
    }
}
