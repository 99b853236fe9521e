//! Where a run lives and how it starts: a new run writes `search.json`; `--resume` reads it back
//! and continues from the run's log as if never interrupted.

use std::path::PathBuf;

use anyhow::{bail, Context};
use attn_evidence::{read_evo_log, EvoLogAppender, SearchSpec};
use attn_evo::Search;

use super::Args;

/// A run's folder and what it searches.
pub struct Run {
    pub spec: SearchSpec,
    pub dir: PathBuf,
    resumed: bool,
}

impl Run {
    /// The run the arguments name: `--resume DIR`'s, or a new one in `<evidence>/evo/<run>`.
    pub fn open(args: &Args) -> anyhow::Result<Run> {
        if let Some(dir) = &args.resume {
            let spec = SearchSpec::read(&dir.join("search.json")).context("--resume")?;
            return Ok(Run {
                spec,
                dir: dir.clone(),
                resumed: true,
            });
        }
        let spec = super::spec::search_spec(args)?;
        let name = args.run.clone().unwrap_or_else(|| {
            format!(
                "{}-{}-{}",
                attn_evidence::utc_now_rfc3339().replace(':', "-"),
                attn_evidence::slug(&spec.target),
                attn_evidence::slug(&spec.shape.to_string())
            )
        });
        Ok(Run {
            spec,
            dir: args.evidence.join("evo").join(name),
            resumed: false,
        })
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("log.csv")
    }

    /// Starts `search` in this run: a resumed run continues from its log, a new one writes
    /// `search.json` (and refuses a folder with a log). Returns the log to append to.
    pub fn start(&self, search: Search) -> anyhow::Result<(Search, EvoLogAppender)> {
        let log_path = self.log_path();
        let search = if self.resumed {
            let rows = if log_path.is_file() {
                read_evo_log(&log_path)?
            } else {
                vec![]
            };
            let search = search.resume(attn_evo::evaluations_from_log(&rows)?)?;
            println!(
                "evo: resuming {} ({} candidates already measured)",
                self.dir.display(),
                rows.len()
            );
            search
        } else {
            if log_path.exists() {
                bail!(
                    "{} exists: continue it with --resume {}",
                    log_path.display(),
                    self.dir.display()
                );
            }
            self.spec.write(&self.dir.join("search.json"))?;
            search
        };
        let knob_names: Vec<String> = self.spec.knobs.keys().cloned().collect();
        let log = EvoLogAppender::open(&log_path, &knob_names)?;
        Ok((search, log))
    }
}
