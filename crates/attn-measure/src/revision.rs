//! The ratchet's baseline (`gate --baseline rev:REF`): the candidate's kernel as committed at a
//! git revision, read with `git` (never checked out), compiled like any candidate.
//!
//! A registered implementation reads `kernels/<file>` at REF; a `--src FILE` reads `FILE` at REF.
//! Headers come from REF too: `kernels/attn_common.cuh` and the headers beside the file, written
//! to a folder (named by their hash) that NVRTC searches before the embedded headers. Knobs,
//! per-shape tuning, geometry and ABI are today's: a revision whose kernel expects other knobs or
//! another launch geometry is compared as it would run today (a limitation, said in the docs).

use std::path::{Path, PathBuf};
use std::process::Command;

use attn_kernels::Candidate;

use crate::{MeasureError, Result};

/// The shared header every kernel may include, relative to the repository's root.
const COMMON_HEADER: &str = "kernels/attn_common.cuh";

/// Header extensions read from beside a `--src` file at the revision.
const HEADER_EXTENSIONS: [&str; 4] = ["cuh", "h", "hpp", "inc"];

/// A git repository, read through the `git` command.
#[derive(Debug, Clone)]
pub struct Repo {
    root: PathBuf,
}

/// An error about `reference`, one line.
fn bad(reference: &str, reason: impl std::fmt::Display) -> MeasureError {
    MeasureError::Invalid(format!("revision {reference}: {reason}"))
}

impl Repo {
    /// The repository around `dir`.
    pub fn discover(dir: &Path) -> Result<Repo> {
        let root = git(dir, &["rev-parse", "--show-toplevel"])
            .map_err(|why| MeasureError::Invalid(format!("no git repository here: {why}")))?;
        Ok(Repo {
            root: PathBuf::from(root.trim_end()),
        })
    }

    /// The repository's root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The full commit hash `reference` names (a branch, tag, hash or `HEAD~1`).
    pub fn commit(&self, reference: &str) -> Result<String> {
        if reference.is_empty() || reference.starts_with('-') {
            return Err(bad(reference, "not a git revision"));
        }
        let spec = format!("{reference}^{{commit}}");
        git(&self.root, &["rev-parse", "--verify", "--quiet", &spec])
            .map(|hash| hash.trim().to_string())
            .map_err(|_| bad(reference, "not a commit of this repository (fetched?)"))
    }

    /// The text of `path` (relative to the root, `/`-separated) at `commit`.
    pub fn read(&self, commit: &str, path: &str) -> Result<String> {
        git(
            &self.root,
            &["cat-file", "blob", &format!("{commit}:{path}")],
        )
        .map_err(|_| {
            bad(
                &commit[..commit.len().min(7)],
                format!("{path} does not exist there"),
            )
        })
    }

    /// The files of folder `dir` (relative to the root, `""` for the root) at `commit`.
    fn files(&self, commit: &str, dir: &str) -> Result<Vec<String>> {
        let tree = if dir.is_empty() {
            commit.to_string()
        } else {
            format!("{commit}:{dir}")
        };
        let listing = git(&self.root, &["ls-tree", &tree]).map_err(|why| bad(commit, why))?;
        // `<mode> <type> <object>\t<name>`
        Ok(listing
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .filter(|(meta, _)| meta.split(' ').nth(1) == Some("blob"))
            .map(|(_, name)| name.to_string())
            .collect())
    }

    /// `path` (a file of the working tree) relative to the root, `/`-separated.
    fn relative(&self, path: &Path) -> Result<String> {
        let canonical = |p: &Path| {
            p.canonicalize().map_err(|source| MeasureError::Io {
                what: format!("resolving {}", p.display()),
                source,
            })
        };
        let (root, file) = (canonical(&self.root)?, canonical(path)?);
        let inside = file.strip_prefix(&root).map_err(|_| {
            MeasureError::Invalid(format!(
                "{} is outside the git repository at {}",
                path.display(),
                root.display()
            ))
        })?;
        let parts: Vec<String> = inside
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        Ok(parts.join("/"))
    }
}

/// Runs `git -C dir ARGS`; its stdout, or its first line of stderr.
fn git(dir: &Path, args: &[&str]) -> std::result::Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|e| format!("git could not be run ({e})"))?;
    if out.status.success() {
        return String::from_utf8(out.stdout).map_err(|_| "not UTF-8 text".to_string());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(stderr.lines().next().unwrap_or("git failed").to_string())
}

/// `candidate` as committed at `reference` in `repo`: the kernel's source there, and a folder of
/// that revision's headers. The cuBLAS path has no kernel of its own to take.
pub fn at_revision(candidate: &Candidate, reference: &str, repo: &Repo) -> Result<Candidate> {
    let commit = repo.commit(reference)?;
    let (path, dir) = match candidate.today() {
        // A library plan's own kernel is read at the revision; cuBLAS is today's.
        Candidate::Registered { implementation, .. } => {
            let file = implementation.engine.kernel_file().0;
            (format!("kernels/{file}"), "kernels".to_string())
        }
        Candidate::Source { path, .. } => {
            let path = repo.relative(path)?;
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
            (path, dir)
        }
        Candidate::Revision { .. } => return Err(bad(reference, "already a revision")),
        Candidate::Triton { .. } => {
            return Err(bad(
                reference,
                "a Triton kernel is built by Triton from the working tree; rev: rebuilds CUDA kernels only",
            ))
        }
    };
    let source = repo.read(&commit, &path)?;
    let mut headers: Vec<(String, String)> = Vec::new();
    for name in repo.files(&commit, &dir)? {
        let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
        if HEADER_EXTENSIONS.contains(&ext) {
            let file = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            headers.push((name, repo.read(&commit, &file)?));
        }
    }
    let common = COMMON_HEADER
        .rsplit_once('/')
        .map_or(COMMON_HEADER, |(_, n)| n);
    if !headers.iter().any(|(name, _)| name == common) {
        // Older revisions may predate the header: then the embedded one serves.
        if let Ok(text) = repo.read(&commit, COMMON_HEADER) {
            headers.push((common.to_string(), text));
        }
    }
    Ok(Candidate::Revision {
        of: Box::new(candidate.clone()),
        source,
        include_dir: header_folder(&headers)?,
        revision: commit,
    })
}

/// A folder holding `headers` (name, text), named by their hash so that runs share it (and the
/// compile cache, keyed by the include path, hits).
fn header_folder(headers: &[(String, String)]) -> Result<PathBuf> {
    let mut bytes = Vec::new();
    for (name, text) in headers {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(text.as_bytes());
        bytes.push(0);
    }
    let tag = &attn_kernels::compile::sha256_hex(&bytes)[..16];
    let dir = std::env::temp_dir().join(format!("attn-rev-{tag}"));
    std::fs::create_dir_all(&dir).map_err(|source| MeasureError::Io {
        what: format!("creating {}", dir.display()),
        source,
    })?;
    for (name, text) in headers {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            attn_oracle::npy::write_bytes_atomic(&path, text.as_bytes())?;
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_kernels::Config;

    fn repo() -> Option<Repo> {
        // The crate's own repository; skipped where the sources are not a git checkout.
        Repo::discover(Path::new(env!("CARGO_MANIFEST_DIR"))).ok()
    }

    #[test]
    fn a_registered_kernel_is_read_at_an_earlier_revision_with_its_header() {
        let Some(repo) = repo() else { return };
        let naive = Candidate::registered("naive", Config::default()).unwrap();
        let Ok(parent) = repo.commit("HEAD~1") else {
            return; // a shallow clone
        };
        let Candidate::Revision {
            source,
            include_dir,
            revision,
            of,
        } = at_revision(&naive, "HEAD~1", &repo).unwrap()
        else {
            panic!("not a revision");
        };
        assert_eq!(revision, parent);
        assert!(source.contains("attn_fwd"), "{source}");
        assert_eq!(of.label(), "naive");
        let header = std::fs::read_to_string(include_dir.join("attn_common.cuh")).unwrap();
        assert_eq!(header, repo.read(&revision, COMMON_HEADER).unwrap());
        // Today's knobs and label with the commit.
        let at = at_revision(&naive, "HEAD", &repo).unwrap();
        assert_eq!(at.knobs(), naive.knobs());
        assert!(at.label().starts_with("naive@"), "{}", at.label());
    }

    #[test]
    fn every_kernel_read_from_git_compiles_with_its_headers_and_todays_knobs() {
        // At HEAD: an earlier commit may expect other knobs (the documented limitation).
        let Some(repo) = repo() else { return };
        let arch = attn_kernels::compile::Arch("compute_90".into());
        for name in ["naive", "tiled", "mma", "hopper"] {
            let today = Candidate::registered(name, Config::default()).unwrap();
            let at = at_revision(&today, "HEAD", &repo).unwrap();
            let variant = at
                .variant(
                    attn_oracle::DType::F16,
                    128,
                    &arch,
                    &attn_kernels::Limits::H100,
                )
                .unwrap();
            attn_kernels::compile::compile(&variant.request)
                .unwrap_or_else(|e| panic!("{name} at HEAD: {e}"));
        }
    }

    #[test]
    fn a_source_file_is_read_at_the_revision_by_its_path_in_the_repository() {
        let Some(repo) = repo() else { return };
        let path = repo.root().join("kernels/tiled.cu");
        let src = Candidate::from_file(&path, None, Config::default()).unwrap();
        let at = at_revision(&src, "HEAD", &repo).unwrap();
        assert!(at.label().starts_with("src:tiled.cu@"), "{}", at.label());
        let Candidate::Revision { source, .. } = at else {
            panic!("not a revision")
        };
        assert!(source.contains("attn_fwd"));
    }

    #[test]
    fn bad_revisions_and_files_are_one_line_errors_and_a_library_plan_reads_its_kernel() {
        let Some(repo) = repo() else { return };
        let naive = Candidate::registered("naive", Config::default()).unwrap();
        for reference in ["no-such-branch-3f9a", "", "--output=x", "HEAD~100000"] {
            let err = at_revision(&naive, reference, &repo)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("revision "), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
        let err = repo
            .read(&repo.commit("HEAD").unwrap(), "kernels/nope.cu")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kernels/nope.cu does not exist there"),
            "{err}"
        );
        // A library plan's revision is its own kernel's text there (cuBLAS is today's).
        let cublas = Candidate::registered("cublas", Config::default()).unwrap();
        match at_revision(&cublas, "HEAD", &repo) {
            Ok(Candidate::Revision { source, .. }) => assert!(source.contains("softmax_rows")),
            other => panic!("{other:?}"),
        }
        // A file outside the repository.
        let outside = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(outside.path(), "x").unwrap();
        let src = Candidate::from_file(outside.path(), None, Config::default()).unwrap();
        let err = at_revision(&src, "HEAD", &repo).unwrap_err().to_string();
        assert!(err.contains("outside the git repository"), "{err}");
    }

    #[test]
    fn no_repository_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        // A temporary folder is not inside a repository (unless TMPDIR is one).
        if let Err(err) = Repo::discover(dir.path()) {
            let err = err.to_string();
            assert!(err.starts_with("no git repository here"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
