//! Where provd keeps what it makes: cached keys, the job journal, compiled kernels.

use std::path::PathBuf;

/// provd's data directory: `PROVD_DATA_DIR`, else `$XDG_DATA_HOME/provd`,
/// else `~/.local/share/provd`.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PROVD_DATA_DIR") {
        return d.into();
    }
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("provd")
}

/// An exclusive hold on a directory or file that one process may use at a
/// time (the data directory, the job journal), through an advisory lock on
/// a `.lock` file beside it; released when dropped or when the process
/// ends, however it ends.
#[derive(Debug)]
pub struct Exclusive {
    _file: std::fs::File,
}

/// Why an exclusive hold could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another provd{holder} is using {path}; stop it first, or give this one its own \
         (--data-dir, jobs.path)"
    )]
    Held { path: String, holder: String },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Exclusive {
    /// Takes the lock file `lock` (created if absent) for `what`, or says
    /// who holds it. The holder's process id is written into it.
    pub fn take(lock: &std::path::Path, what: &std::path::Path) -> Result<Self, LockError> {
        use std::io::{Read, Seek, Write};
        let path = what.display().to_string();
        let io = |source| LockError::Io { path: path.clone(), source };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(lock)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let holder = match pid.trim() {
                    "" => String::new(),
                    pid => format!(" (pid {pid})"),
                };
                return Err(LockError::Held { path, holder });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()))
            .map_err(io)?;
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_second_is_told_who() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join(".lock");
        let first = Exclusive::take(&lock, dir.path()).unwrap();
        let e = Exclusive::take(&lock, dir.path()).unwrap_err();
        let says = format!("pid {}", std::process::id());
        assert!(matches!(&e, LockError::Held { holder, .. } if holder.contains(&says)), "{e}");
        drop(first);
        Exclusive::take(&lock, dir.path()).expect("free once the first is dropped");
    }
}
