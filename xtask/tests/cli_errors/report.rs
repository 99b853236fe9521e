//! `report`: no evidence is refused and the existing report left alone.

use crate::one_error_line;

#[test]
fn a_report_from_no_evidence_is_refused_and_leaves_the_report_alone() {
    let dir = tempfile::tempdir().unwrap();
    let charts = dir.path().join("reports/charts");
    std::fs::create_dir_all(&charts).unwrap();
    std::fs::write(dir.path().join("reports/index.html"), "the real report").unwrap();
    std::fs::write(charts.join("glance.svg"), "<svg/>").unwrap();
    std::fs::create_dir_all(dir.path().join("empty")).unwrap();
    for (evidence, reason) in [
        ("evidnce", "does not exist"),
        ("empty", "no gate, bench, ncu or search results"),
    ] {
        for check in [&[][..], &["--check"][..]] {
            let mut args = vec!["report", "--evidence", evidence, "--out", "reports"];
            args.extend(check);
            one_error_line(dir.path(), &args, &[evidence, reason]);
        }
        let page = std::fs::read_to_string(dir.path().join("reports/index.html")).unwrap();
        assert_eq!(page, "the real report", "{evidence}: the page was replaced");
        assert!(
            charts.join("glance.svg").is_file(),
            "{evidence}: a chart was deleted"
        );
    }
}
