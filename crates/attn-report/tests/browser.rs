//! The report as a person sees it: rendered by a real headless Chromium in a 1400 px wide window,
//! for the committed evidence, the fixture evidence and the sweep fixture. Asserts that nothing
//! overflows the window (no horizontal scrolling, no table scrolling inside itself or hiding a
//! column, every folded table included), that every chart linked from the page loads, that the throughput charts carry
//! the physical lines (measured matmul rate and device peak) and no attention rate posing as a
//! ceiling, and that the full-page screenshot is a real picture. Screenshots are kept under
//! `target/tmp/report-browser/<case>/` for a person to look at.
//!
//! Needs `chromium` (or `ATTN_CHROMIUM=/path/to/browser`). Without one the test says so on one line
//! and passes, unless `ATTN_BROWSER_TEST=required` (set by `cargo xtask test` when it found a
//! browser, or installed one: `--install-browser`, or `CI=true`): then a missing browser fails it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use attn_report::{Report, ReportOptions};

/// The window width the report must fit, px.
const WINDOW_WIDTH: u32 = 1400;
/// The tallest screenshot taken, px (Chromium's limit is far above; this keeps files small).
const MAX_SCREENSHOT_HEIGHT: u32 = 16_000;

fn crate_dir() -> PathBuf {
    // Test runners start in the crate folder (cargo test, and the bundle's script): relative
    // paths keep the executable relocatable.
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
}

/// The browser to use: `ATTN_CHROMIUM`, else the first of the usual names on `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ATTN_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// What the page measured about itself, inside the browser.
#[derive(Debug, serde::Deserialize)]
struct PageMetrics {
    #[serde(rename = "innerWidth")]
    inner_width: f64,
    #[serde(rename = "scrollWidth")]
    scroll_width: f64,
    #[serde(rename = "scrollHeight")]
    scroll_height: f64,
    /// Elements whose right edge lies beyond the window.
    wide: Vec<String>,
    /// Tables wider than their box (they would hide columns).
    scrolled: Vec<String>,
    /// Chart images that loaded and render wider than 100 px.
    charts: usize,
}

/// Opens every `<details>` at once, then measures the page once it has loaded (an inline script at
/// the end of the body runs before the images arrive) and writes the result into the DOM.
const MEASURE_SCRIPT: &str = r#"<script>
document.querySelectorAll('details').forEach(function (d) { d.open = true; });
window.addEventListener('load', function () {
  var width = window.innerWidth, wide = [], scrolled = [];
  var describe = function (e) { return e.tagName + ': ' + (e.textContent || '').trim().slice(0, 60); };
  document.querySelectorAll('body *').forEach(function (e) {
    if (e.getBoundingClientRect().right > width + 0.5) wide.push(describe(e));
  });
  document.querySelectorAll('table').forEach(function (t) {
    if (t.scrollWidth > t.clientWidth + 1) scrolled.push(describe(t));
  });
  var charts = Array.prototype.filter.call(document.querySelectorAll('img'), function (i) {
    return i.complete && i.naturalWidth > 100 && i.getBoundingClientRect().width > 100;
  });
  var result = {
    innerWidth: width,
    scrollWidth: document.documentElement.scrollWidth,
    scrollHeight: document.documentElement.scrollHeight,
    wide: wide,
    scrolled: scrolled,
    charts: charts.length
  };
  var out = document.createElement('pre');
  out.id = 'attn-measure';
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"#;

/// Runs the browser with `args`; its standard output goes to `stdout_file` (a pipe could fill up
/// and stall it), which is read back.
fn run_browser(browser: &Path, args: &[String], stdout_file: &Path) -> String {
    let stdout = std::fs::File::create(stdout_file).expect("browser output file");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-dev-shm-usage",
            // No network is wanted: these keep Chromium from trying one at every start.
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
        ])
        .args(args)
        .stdout(stdout)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", browser.display()));
    // Chromium can hang on a broken setup: give it two minutes, then fail with a clear line.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            _ => {
                let _ = child.kill();
                panic!("{} did not finish within 120 s", browser.display());
            }
        }
    }
    std::fs::read_to_string(stdout_file).unwrap_or_default()
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// Loads `index.html` with [`MEASURE_SCRIPT`] in a [`WINDOW_WIDTH`] window and reads the result.
fn measure(browser: &Path, dir: &Path) -> PageMetrics {
    let html = std::fs::read_to_string(dir.join("index.html")).expect("index.html");
    let page = dir.join("measure.html");
    let instrumented = html.replacen("</body>", &format!("{MEASURE_SCRIPT}\n</body>"), 1);
    std::fs::write(&page, instrumented).expect("writing measure.html");
    let dom = run_browser(
        browser,
        &[
            format!("--window-size={WINDOW_WIDTH},1000"),
            "--virtual-time-budget=5000".into(),
            "--dump-dom".into(),
            file_url(&page),
        ],
        &dir.join("dom.html"),
    );
    let start = dom
        .find("<pre id=\"attn-measure\">")
        .unwrap_or_else(|| panic!("the browser did not run the measuring script:\n{dom:.500}"));
    let body = &dom[start + "<pre id=\"attn-measure\">".len()..];
    let json = body.split("</pre>").next().unwrap_or_default();
    let json = json
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// A full-page screenshot of `index.html`; returns its path.
fn screenshot(browser: &Path, dir: &Path, height: u32) -> PathBuf {
    let png = dir.join("screenshot.png");
    let _ = std::fs::remove_file(&png);
    run_browser(
        browser,
        &[
            format!("--window-size={WINDOW_WIDTH},{height}"),
            format!("--screenshot={}", png.display()),
            "--virtual-time-budget=5000".into(),
            file_url(&dir.join("index.html")),
        ],
        &dir.join("screenshot.log"),
    );
    png
}

/// Width and height from a PNG's header, checking its signature and its first chunk.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let signature = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    if bytes.len() < 24 || bytes[..8] != signature || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let word =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    Some((word(16), word(20)))
}

/// Builds the report of `evidence` into `target/tmp/report-browser/<case>/`.
fn render(case: &str, evidence: &Path) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("report-browser")
        .join(case);
    let _ = std::fs::remove_dir_all(&dir);
    let report = Report::build(evidence, &ReportOptions::default())
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    report.write(&dir).unwrap_or_else(|e| panic!("{case}: {e}"));
    dir
}

/// The text of an SVG's `<text>` elements, joined by spaces.
fn chart_text(svg: &str) -> String {
    let doc = roxmltree::Document::parse(svg).expect("chart parses");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Renders one case and checks everything a reader relies on; returns the chart texts.
fn check_case(browser: &Path, case: &str, evidence: &Path) -> Vec<String> {
    let dir = render(case, evidence);
    let svgs: Vec<String> = std::fs::read_dir(dir.join("charts"))
        .map(|entries| {
            entries
                .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    let charts = svgs.len();
    let metrics = measure(browser, &dir);
    assert_eq!(
        metrics.inner_width,
        f64::from(WINDOW_WIDTH),
        "{case}: the window is not {WINDOW_WIDTH} px wide"
    );
    assert!(
        metrics.scroll_width <= metrics.inner_width,
        "{case}: the page scrolls sideways ({} px wide in a {} px window)",
        metrics.scroll_width,
        metrics.inner_width
    );
    assert!(
        metrics.wide.is_empty(),
        "{case}: elements reach past the window: {:?}",
        metrics.wide
    );
    assert!(
        metrics.scrolled.is_empty(),
        "{case}: tables wider than their box (hidden columns): {:?}",
        metrics.scrolled
    );
    assert_eq!(metrics.charts, charts, "{case}: every chart file is shown");

    let height = (metrics.scroll_height.ceil() as u32).clamp(600, MAX_SCREENSHOT_HEIGHT);
    let png = screenshot(browser, &dir, height);
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{case}: no screenshot: {e}"));
    let (width, shot_height) =
        png_size(&bytes).unwrap_or_else(|| panic!("{case}: {} is not a PNG", png.display()));
    assert_eq!(width, WINDOW_WIDTH, "{case}: screenshot width");
    assert!(
        shot_height >= 600,
        "{case}: screenshot height {shot_height}"
    );
    assert!(
        bytes.len() > 30_000,
        "{case}: screenshot of {} bytes is nearly blank",
        bytes.len()
    );
    eprintln!("{case}: screenshot {}", png.display());
    svgs.iter().map(|svg| chart_text(svg)).collect()
}

#[test]
fn report_fits_a_1400px_window_and_shows_curves_with_physical_lines() {
    let Some(browser) = chromium() else {
        let required = std::env::var("ATTN_BROWSER_TEST").as_deref() == Ok("required");
        assert!(
            !required,
            "no headless browser: install chromium (`apt-get install -y chromium`) or set ATTN_CHROMIUM"
        );
        eprintln!(
            "SKIPPED: no chromium on PATH (`cargo xtask test --install-browser` installs it and requires this test)"
        );
        return;
    };
    let repository_evidence = crate_dir().join("../../evidence");
    check_case(&browser, "evidence", &repository_evidence);
    check_case(
        &browser,
        "fixtures",
        &crate_dir().join("tests/fixtures/evidence"),
    );

    let texts = check_case(&browser, "sweep", &crate_dir().join("tests/fixtures/sweep"));
    let throughput: Vec<&String> = texts
        .iter()
        .filter(|t| t.contains("Throughput vs sequence length"))
        .collect();
    assert_eq!(throughput.len(), 2, "one chart per family: {texts:?}");
    for chart in throughput {
        assert!(
            chart.contains("dense fp16 matmul 891 TFLOP/s (cuBLAS 8192³"),
            "matmul line missing: {chart}"
        );
        assert!(
            chart.contains("device peak 1071 TFLOP/s (132 SMs × 1980 MHz × 4096 FLOP/clock/SM"),
            "device peak missing: {chart}"
        );
        for series in [
            "hopper",
            "mma",
            "tiled",
            "sdpa:default",
            "sdpa:flash",
            "fa3",
        ] {
            assert!(chart.contains(series), "{series} missing: {chart}");
        }
        assert!(
            !chart.contains("ceiling"),
            "no line may call itself a ceiling: {chart}"
        );
    }
}
