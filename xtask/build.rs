//! Embeds the git revision the binary was built from, for evidence provenance on machines where
//! the checkout has no `.git` (a bundle copied to a GPU machine).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let rev = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    println!("cargo:rustc-env=ATTN_BUILD_GIT_REV={rev}");
    println!("cargo:rustc-env=ATTN_BUILD_GIT_DIRTY={dirty}");
    // `cargo xtask --version`: the crate's version and the revision it was built from.
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let built_from = match (rev.as_str(), dirty) {
        ("unknown", _) => "git revision unknown".to_string(),
        (rev, true) => format!(
            "git {}, with uncommitted changes",
            &rev[..rev.len().min(12)]
        ),
        (rev, false) => format!("git {}", &rev[..rev.len().min(12)]),
    };
    println!("cargo:rustc-env=ATTN_BUILD_VERSION={version} ({built_from})");
    // The dirty flag changes with the working tree, not only with HEAD or the index: rerun on any
    // edit of the sources a binary embeds (the kernels) or is built from.
    if let Some(root) = git(&["rev-parse", "--show-toplevel"]) {
        for path in ["kernels", "crates", "xtask/src", "Cargo.toml", "Cargo.lock"] {
            println!("cargo:rerun-if-changed={root}/{path}");
        }
    }
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        println!("cargo:rerun-if-changed={git_dir}/index");
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={git_dir}/{head_ref}");
        }
    }
}
