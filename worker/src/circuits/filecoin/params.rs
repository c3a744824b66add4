//! Filecoin's parameter cache, shared by every Filecoin kind: where a
//! circuit's `.params`, `.vk` and `.meta` files are (by the names
//! filecoin-proofs gives them), loading and checking the proving key against
//! the circuit it is served for, and TEST-ONLY generation for test sizes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::circuits::{KeySource, LoadError};
use crate::groth16::{Matrices, PointCheck, ProveError, ProvingKey};

/// filecoin-proofs' parameter cache: `FIL_PROOFS_PARAMETER_CACHE`, else its default.
pub fn default_parameter_cache() -> PathBuf {
    std::env::var_os("FIL_PROOFS_PARAMETER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/filecoin-proof-parameters"))
}

/// The files of one circuit's parameters in a cache directory.
#[derive(Clone, Debug)]
pub struct ParameterFiles {
    pub params: PathBuf,
    pub vk: PathBuf,
    pub meta: PathBuf,
}

impl ParameterFiles {
    /// The files of the circuit filecoin-proofs identifies as `cache_id` in `dir`.
    pub fn new(dir: &Path, cache_id: &str) -> Self {
        use storage_proofs_core::parameter_cache::{metadata_id, parameter_id, verifying_key_id};
        Self {
            params: dir.join(parameter_id(cache_id)),
            vk: dir.join(verifying_key_id(cache_id)),
            meta: dir.join(metadata_id(cache_id)),
        }
    }
}

/// What the circuit a key is loaded for looks like: a key made for another
/// circuit is refused at load, not found out by failing proofs.
#[derive(Clone, Copy, Debug)]
pub struct Expected {
    /// Public inputs, the constant ONE included.
    pub public_inputs: usize,
    /// Constraints, the inputs' own included.
    pub constraints: usize,
    /// Bytes of the sector, written to the `.meta` file of generated parameters.
    pub sector_size: u64,
}

/// Loads the key of `circuit` (`what` names its proof type in messages)
/// from `files`, checked against `expected`. Absent files are generated
/// TEST-ONLY when `test_only`, from the matrices `record` gives; otherwise
/// the error says where to get real ones.
pub fn load(
    circuit: &str,
    what: &str,
    files: &ParameterFiles,
    test_only: bool,
    expected: Expected,
    record: impl FnOnce() -> Result<Arc<Matrices>, ProveError>,
) -> Result<(ProvingKey, KeySource), LoadError> {
    let fail = |reason: String| LoadError::Config { circuit: circuit.to_string(), reason };
    let (key, source) = if files.params.exists() {
        // Every point on the curve; the subgroup checks (a minute per
        // 2 GB on 16 cores, tens of minutes for a 32 GiB sector's file)
        // only for the verifying key, below, as filecoin-proofs skips
        // them too: every proof is verified against that key before it
        // leaves, so a bad base shows as a failed proof, never a bad one.
        let key = ProvingKey::read_file(&files.params, PointCheck::OnCurve).map_err(|source| {
            LoadError::KeyFile {
                circuit: circuit.to_string(),
                path: files.params.display().to_string(),
                source,
            }
        })?;
        (key, KeySource::File { path: files.params.clone() })
    } else if test_only {
        let recorded = record().map_err(|e| fail(format!("recording the partition circuit: {e}")))?;
        (
            generate(circuit, &recorded, expected.sector_size, files)?,
            KeySource::GeneratedTestOnly { path: files.params.clone() },
        )
    } else {
        return Err(fail(format!(
            "no parameters for {what} at {}: fetch Filecoin's parameter files into the cache (paramfetch, \
             `lotus fetch-params`), point parameter_cache at them, or set test_only_parameters = true for a \
             test sector size",
            files.params.display()
        )));
    };
    check(circuit, files, &key, expected)?;
    Ok((key, source))
}

/// Refuses a key made for another circuit, or a `.vk` beside it of another key.
fn check(
    circuit: &str,
    files: &ParameterFiles,
    key: &ProvingKey,
    expected: Expected,
) -> Result<(), LoadError> {
    let Expected { public_inputs: inputs, constraints, .. } = expected;
    let wrong = |reason: String| LoadError::WrongKey {
        circuit: circuit.to_string(),
        path: files.params.display().to_string(),
        reason,
    };
    if key.vk.ic.len() != inputs {
        return Err(wrong(format!(
            "it has {} public inputs, the circuit {}",
            key.vk.ic.len().saturating_sub(1),
            inputs - 1
        )));
    }
    if key.domain_size() != constraints.next_power_of_two() {
        return Err(wrong(format!(
            "its domain has {} points, the circuit's {constraints} constraints need {}",
            key.domain_size(),
            constraints.next_power_of_two()
        )));
    }
    crate::groth16::VerifyingKey::from_bytes(&key.vk.to_bytes())
        .map_err(|e| wrong(format!("its verifying key: {e}")))?;
    match std::fs::read(&files.vk) {
        Ok(vk) if vk != key.vk.to_bytes() => {
            Err(wrong(format!("the verifying key beside it, {}, is another key's", files.vk.display())))
        }
        _ => Ok(()),
    }
}

/// Generates TEST-ONLY parameters and writes them where filecoin-proofs
/// looks for them (`.params`, `.vk`, `.meta`), each file written whole or not at all.
fn generate(
    circuit: &str,
    matrices: &Matrices,
    sector_size: u64,
    files: &ParameterFiles,
) -> Result<ProvingKey, LoadError> {
    let fail = |reason: String| LoadError::Config { circuit: circuit.to_string(), reason };
    tracing::warn!(
        %circuit, path = %files.params.display(),
        "generating TEST-ONLY Filecoin parameters from random toxic waste (never use them in production)"
    );
    let t = std::time::Instant::now();
    let key = crate::groth16::keygen::generate_test_key_for(matrices, &mut rand::rngs::OsRng)
        .map_err(|e| fail(format!("generating TEST-ONLY parameters: {e}")))?;
    let dir = files.params.parent().expect("a file in the cache directory");
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("creating {}: {e}", dir.display())))?;
    let write = |path: &Path, bytes: &[u8]| -> Result<(), LoadError> {
        let tmp = path.with_extension(format!("partial-{}", std::process::id()));
        std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path)).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            fail(format!("writing {}: {e}", path.display()))
        })
    };
    // The key first: a cache with a .vk but no .params would look complete to a verifier only.
    key.write_file(&files.params).map_err(|source| LoadError::KeyFile {
        circuit: circuit.to_string(),
        path: files.params.display().to_string(),
        source,
    })?;
    write(&files.vk, &key.vk.to_bytes())?;
    write(&files.meta, serde_json::json!({ "sector_size": sector_size }).to_string().as_bytes())?;
    tracing::info!(%circuit, secs = t.elapsed().as_secs_f64(), "TEST-ONLY Filecoin parameters generated");
    Ok(key)
}
