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
