//! Where a search run lives and how it starts: a new run writes `search.json`; a resumed one
//! reads it back and continues from the run's log as if never interrupted.

use std::path::{Path, PathBuf};

use attn_evidence::{read_evo_log, EvoLogAppender, SearchSpec};

use crate::{evaluations_from_log, EvoError, Result, Search};

/// A run's folder and what it searches.
#[derive(Debug, Clone)]
pub struct SearchRun {
    /// What is searched (`search.json`).
    pub spec: SearchSpec,
    /// The run's folder.
    pub dir: PathBuf,
    resumed: bool,
}

impl SearchRun {
    /// The run logged in `dir`, to resume (its `search.json`).
    pub fn resume(dir: &Path) -> Result<SearchRun> {
        let spec = SearchSpec::read(&dir.join("search.json"))?;
        Ok(SearchRun {
            spec,
            dir: dir.to_path_buf(),
            resumed: true,
        })
    }

    /// A new run of `spec` in `<evidence>/evo/<name>`; the default name is the date, the target
    /// and the problem.
    pub fn new(spec: SearchSpec, evidence: &Path, name: Option<String>) -> SearchRun {
        let name = name.unwrap_or_else(|| {
            format!(
                "{}-{}-{}",
                attn_evidence::utc_now_rfc3339().replace(':', "-"),
                attn_evidence::slug(&spec.target),
                attn_evidence::slug(&spec.problem_text())
            )
        });
        SearchRun {
            spec,
            dir: evidence.join("evo").join(name),
            resumed: false,
        }
    }

    /// The run's name: its folder's.
    pub fn name(&self) -> String {
        let name = self.dir.file_name().map(|n| n.to_string_lossy());
        name.unwrap_or_default().into_owned()
    }

    /// The run's log, a row per candidate.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("log.csv")
    }

    /// Starts `search` in this run: a resumed run continues from its log, a new one writes
    /// `search.json` (and refuses a folder with a log). Returns the search, the log to append to
    /// and, for a resumed run, how many candidates its log already holds.
    pub fn start(&self, search: Search) -> Result<(Search, EvoLogAppender, Option<usize>)> {
        let log_path = self.log_path();
        let (search, resumed) = if self.resumed {
            let rows = if log_path.is_file() {
                read_evo_log(&log_path)?
            } else {
                vec![]
            };
            let history = evaluations_from_log(&rows, search.space())?;
            (search.resume(history)?, Some(rows.len()))
        } else {
            if log_path.exists() {
                return Err(EvoError::RunExists {
                    log: log_path,
                    dir: self.dir.clone(),
                });
            }
            self.spec.write(&self.dir.join("search.json"))?;
            (search, None)
        };
        let log = EvoLogAppender::open(&log_path, &search.space().columns())?;
        Ok((search, log, resumed))
    }
}
