//! Bounding what a candidate may do to the process that judges it.
//!
//! - [`Watchdog`]: a thread that ends this process with a one-line "hang" when a GPU operation
//!   armed on it has not finished in time. A hung kernel cannot be interrupted from inside its
//!   CUDA context; ending the process is the only way to bound it, and the driver frees the GPU.
//! - [`run_supervised`]: runs a command (a worker, e.g. one search candidate) in its own process
//!   group with a time limit, killing the whole group when it runs over.
//! - [`run_json_worker`]: a supervised worker's JSON result, or why there is none.
//! - [`classify_failure`]: what a dead worker printed, as one line.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{MeasureError, Result};

/// What an expired watchdog reports before the process ends.
pub type OnHang = Box<dyn Fn(&str, Duration) + Send + Sync>;

#[derive(Default)]
struct Armed {
    deadline: Option<Instant>,
    bound: Duration,
    what: String,
}

/// Ends the process (exit code 1) when an armed deadline passes.
#[derive(Clone)]
pub struct Watchdog {
    armed: Arc<Mutex<Armed>>,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog").finish_non_exhaustive()
    }
}

impl Watchdog {
    /// Starts the watching thread. `on_hang(what, bound)` runs once when a deadline passes (print
    /// the verdict there); then the process exits with code 1.
    pub fn start(on_hang: OnHang) -> Watchdog {
        let armed = Arc::new(Mutex::new(Armed::default()));
        let watched = Arc::clone(&armed);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(20));
            let expired = {
                let a = watched.lock().unwrap_or_else(|e| e.into_inner());
                match a.deadline {
                    Some(deadline) if Instant::now() >= deadline => Some((a.what.clone(), a.bound)),
                    _ => None,
                }
            };
            if let Some((what, bound)) = expired {
                on_hang(&what, bound);
                std::process::exit(1);
            }
        });
        Watchdog { armed }
    }

    /// From now, `what` must finish (be disarmed or re-armed) within `bound`.
    pub fn arm(&self, bound: Duration, what: &str) {
        let mut a = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        a.deadline = Some(Instant::now() + bound);
        a.bound = bound;
        a.what = what.to_string();
    }

    /// Progress was made: the armed operation's next step must finish within `bound`.
    pub fn kick(&self, bound: Duration) {
        let mut a = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        if a.deadline.is_some() {
            a.deadline = Some(Instant::now() + bound);
            a.bound = bound;
        }
    }

    /// Nothing is being watched.
    pub fn disarm(&self) {
        self.armed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .deadline = None;
    }

    /// Runs `f` armed with `bound`, disarmed afterwards (also on error).
    pub fn guard<T>(&self, bound: Duration, what: &str, f: impl FnOnce() -> T) -> T {
        self.arm(bound, what);
        let out = f();
        self.disarm();
        out
    }
}

/// How a supervised command ended.
#[derive(Debug)]
pub enum Supervised {
    /// It exited (or was killed by a signal) on its own.
    Finished {
        /// Its exit status.
        status: ExitStatus,
        /// Everything it printed on stdout.
        stdout: String,
        /// Everything it printed on stderr.
        stderr: String,
    },
    /// It ran past the limit; its process group was killed.
    TimedOut,
}

/// Runs `command` in its own process group with stdout and stderr captured; past `timeout` the
/// whole group (its own children too) is killed.
pub fn run_supervised(mut command: Command, timeout: Duration) -> Result<Supervised> {
    use std::os::unix::process::CommandExt;
    let mut child = command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| MeasureError::Io {
            what: "starting a worker".into(),
            source,
        })?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        let polled = child.try_wait().map_err(|source| MeasureError::Io {
            what: "waiting for a worker".into(),
            source,
        })?;
        if let Some(status) = polled {
            break Some(status);
        }
        if started.elapsed() >= timeout {
            // SAFETY: killpg only sends a signal; the group id is the worker's own pid, which is
            // its group leader (`process_group(0)` above) and has not been reaped yet.
            unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (stdout, stderr) = (
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default(),
    );
    Ok(match status {
        Some(status) => Supervised::Finished {
            status,
            stdout,
            stderr,
        },
        None => Supervised::TimedOut,
    })
}

/// Runs a worker that ends by printing its result as a JSON line, within `timeout`: the last
/// such line read as `T`, or why there is none (the timeout, or how it died, classified).
pub fn run_json_worker<T: serde::de::DeserializeOwned>(
    command: Command,
    timeout: Duration,
) -> Result<std::result::Result<T, String>> {
    let (status, out, err) = match run_supervised(command, timeout)? {
        Supervised::TimedOut => {
            let seconds = timeout.as_secs_f64();
            return Ok(Err(format!("timeout after {seconds} s")));
        }
        Supervised::Finished {
            status,
            stdout,
            stderr,
        } => (status, stdout, stderr),
    };
    let line = out.lines().rev().find(|l| l.starts_with('{'));
    if let Some(parsed) = line.and_then(|l| serde_json::from_str(l).ok()) {
        return Ok(Ok(parsed));
    }
    let why = match status.code() {
        Some(code) => format!("exit code {code}"),
        None => format!("killed by a signal ({status})"),
    };
    Ok(Err(classify_failure(&format!("{out}\n{err}"), &why)))
}

/// `text` written as `name` in a folder of its own (`attn-<prefix>-<pid>-<n>` in the temp
/// folder), for a child Python to run: the folder, which its owner removes, and the script.
pub(crate) fn script_folder(
    prefix: &str,
    name: &str,
    text: &str,
) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("attn-{prefix}-{}-{n}", std::process::id()));
    let io = |what: String| move |source| crate::MeasureError::Io { what, source };
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let script = dir.join(name);
    std::fs::write(&script, text).map_err(io(format!("writing {}", script.display())))?;
    Ok((dir, script))
}

/// Ends this process when its parent goes away (a worker outlives no supervisor, hung or not).
pub fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(200));
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(3);
        }
    });
}

/// One line for a failed worker: an illegal address by name, else the last line it printed
/// (without an `error: ` prefix), else `fallback`.
pub fn classify_failure(text: &str, fallback: &str) -> String {
    if text.contains("ILLEGAL_ADDRESS") || text.contains("illegal memory access") {
        return "illegal address".into();
    }
    let last = text
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or(fallback);
    let last = last.strip_prefix("error: ").unwrap_or(last);
    last.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_classified_on_one_line() {
        let fault = "error: CUDA cuStreamSynchronize failed: DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, \"an illegal memory access was encountered\")";
        assert_eq!(classify_failure(fault, "x"), "illegal address");
        assert_eq!(
            classify_failure("noise\nerror: NVRTC could not compile\n\n", "x"),
            "NVRTC could not compile"
        );
        assert_eq!(classify_failure("", "exit code 134"), "exit code 134");
    }

    #[test]
    fn a_command_past_its_limit_is_killed_with_its_children() {
        let mut command = Command::new("sh");
        command.args(["-c", "sleep 30 & sleep 30"]);
        let started = Instant::now();
        let outcome = run_supervised(command, Duration::from_millis(200)).unwrap();
        assert!(matches!(outcome, Supervised::TimedOut));
        assert!(started.elapsed() < Duration::from_secs(5));
        let mut quick = Command::new("sh");
        quick.args(["-c", "echo out; echo err >&2; exit 3"]);
        match run_supervised(quick, Duration::from_secs(10)).unwrap() {
            Supervised::Finished {
                status,
                stdout,
                stderr,
            } => {
                assert_eq!(status.code(), Some(3));
                assert_eq!((stdout.trim(), stderr.trim()), ("out", "err"));
            }
            Supervised::TimedOut => panic!("a quick command timed out"),
        }
    }
}
