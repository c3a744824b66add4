//! The bench kind's key cache: keys of the built-in circuits, generated once
//! (TEST-ONLY toxic waste) and cached under the data directory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::Builtin;
use crate::groth16::{keygen, ParamsError, PointCheck, ProveError, ProvingKey};

/// Why a built-in key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyCacheError {
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("key generation for {circuit} failed: {source}")]
    Generate {
        circuit: String,
        #[source]
        source: ProveError,
    },
    #[error("cached key {path} is unusable ({source}); delete it to regenerate")]
    Cached {
        path: String,
        #[source]
        source: ParamsError,
    },
    #[error("cannot write key {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: ParamsError,
    },
}

/// Where a built-in circuit's key lives.
pub fn key_path(data_dir: &Path, circuit: Builtin) -> PathBuf {
    data_dir.join("params").join(circuit.key_file_name())
}

/// Loads the cached key of `circuit`, generating and caching it first if absent.
pub fn load_or_generate(data_dir: &Path, circuit: Builtin) -> Result<ProvingKey, KeyCacheError> {
    let path = key_path(data_dir, circuit);
    if path.exists() {
        let t = Instant::now();
        // Written by this program: the expensive subgroup checks can be skipped.
        let key = ProvingKey::read_file(&path, PointCheck::Trusted)
            .map_err(|source| KeyCacheError::Cached { path: path.display().to_string(), source })?;
        tracing::info!(%circuit, path = %path.display(), secs = t.elapsed().as_secs_f64(), "loaded cached key");
        return Ok(key);
    }
    let dir = path.parent().expect("key path has a parent");
    std::fs::create_dir_all(dir)
        .map_err(|source| KeyCacheError::DataDir { path: dir.display().to_string(), source })?;
    let key = generate(circuit)?;
    key.write_file(&path)
        .map_err(|source| KeyCacheError::Write { path: path.display().to_string(), source })?;
    Ok(key)
}

/// Generates a TEST-ONLY key for `circuit` from OS randomness.
pub fn generate(circuit: Builtin) -> Result<ProvingKey, KeyCacheError> {
    let t = Instant::now();
    tracing::warn!(%circuit, "generating a TEST-ONLY proving key from random toxic waste (never use it in production)");
    let key = keygen::generate_test_key(circuit.circuit(None), &mut rand::rngs::OsRng)
        .map_err(|source| KeyCacheError::Generate { circuit: circuit.to_string(), source })?;
    tracing::info!(%circuit, secs = t.elapsed().as_secs_f64(), "key generated");
    Ok(key)
}
