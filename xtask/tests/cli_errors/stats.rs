//! `stats compare`: a bad timing file named with its line.

use crate::{one_error_line, xtask};

#[test]
fn stats_compare_names_the_file_and_line_and_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("a.txt"), "1\n2\n3\n").unwrap();
    std::fs::write(d.join("neg.txt"), "1\n-2\n3\n").unwrap();
    one_error_line(
        d,
        &[
            "stats",
            "compare",
            "--baseline",
            "a.txt",
            "--candidate",
            "neg.txt",
        ],
        &[
            "candidate",
            "neg.txt",
            "line 2",
            "-2 is not a positive timing",
        ],
    );
    one_error_line(
        d,
        &[
            "stats",
            "compare",
            "--baseline",
            "missing.txt",
            "--candidate",
            "a.txt",
        ],
        &["baseline", "missing.txt", "cannot read"],
    );
    let (code, stdout, stderr) = xtask(
        d,
        &[
            "stats",
            "compare",
            "--baseline",
            "a.txt",
            "--candidate",
            "a.txt",
            "--resamples",
            "200",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let gate = stdout
        .lines()
        .find(|l| l.starts_with("gate "))
        .unwrap_or_else(|| panic!("no gate line: {stdout}"));
    assert!(
        gate.contains("failed: candidate median 2.0000 > 0.95 x baseline median"),
        "{gate}"
    );
    assert!(gate.contains("not entirely below 0"), "{gate}");
}
