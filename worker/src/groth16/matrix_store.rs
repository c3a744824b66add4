//! Recorded matrices kept on disk, so that a restart loads them instead of
//! recording the circuit again (minutes for a 32 GiB PoRep partition, ~130M
//! constraints), and recording holds no more in memory than the finished
//! matrices: rows stream to files as the circuit is recorded, and the
//! matrices are read back at their exact size (recording into growing
//! vectors can briefly need twice that).
//!
//! One directory per circuit, named by its identity (for Filecoin, the
//! parameter cache's id, which changes with the circuit); in it, per matrix,
//! `a.rows` (the row starts, u64 LE), `a.values` (its distinct coefficients'
//! 32-byte canonical encodings, one first) and `a.terms` (per term a u32 LE
//! column and the u32 LE index of its coefficient in `a.values`),
//! `densities` (the three bitmaps' u64 LE words) and `meta.json` (the
//! format, the identity, every count and each file's SHA-256). A store is written under a
//! temporary name and renamed when complete; loading checks the identity,
//! the counts and every digest, and a store that fails them is recorded
//! again.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bellperson::Circuit;
use blstrs::Scalar;
use ff::PrimeField;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::density::Density;
use super::error::ProveError;
use super::matrices::{record_into, Matrices, RowSink};
use super::sparse::{CoefficientTable, Column, SparseMatrix};

/// The on-disk layout's version; a store of another is recorded again.
/// Format 1 kept each term's coefficient whole (36 bytes a term).
const FORMAT: u32 = 2;
const MATRICES: [&str; 3] = ["a", "b", "c"];
/// Bytes of one stored term: a column and its coefficient's index.
const TERM: usize = 4 + 4;
/// Bytes of one stored coefficient.
const VALUE: usize = 32;

/// Why a store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The store is not what it says (another identity, a count or digest
    /// that does not match): it is recorded again.
    #[error("{path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("recording the circuit: {0}")]
    Record(#[source] ProveError),
}

/// How the matrices were obtained.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Origin {
    /// Read from the store.
    Loaded { read: Duration },
    /// Recorded into the store, then read from it.
    Recorded { record: Duration, read: Duration },
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Meta {
    format: u32,
    identity: String,
    inputs: usize,
    aux: usize,
    rows: usize,
    /// Terms of A, B and C.
    terms: [usize; 3],
    /// Distinct coefficients of A, B and C (one included).
    values: [usize; 3],
    /// Hex SHA-256 of each file, by name.
    sha256: std::collections::BTreeMap<String, String>,
}

/// A directory of recorded circuits' matrices.
#[derive(Clone, Debug)]
pub struct MatrixStore {
    dir: PathBuf,
}

impl MatrixStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Where the matrices of `identity` are kept.
    pub fn path_of(&self, identity: &str) -> PathBuf {
        self.dir.join(identity)
    }

    /// The matrices recorded for `identity`: read from the store, or, when
    /// it has none (or a corrupt one, which is replaced), recorded from
    /// `blank()` into it first.
    pub fn load_or_record<C: Circuit<Scalar>>(
        &self,
        identity: &str,
        blank: impl FnOnce() -> C,
    ) -> Result<(Matrices, Origin), StoreError> {
        let path = self.path_of(identity);
        if path.join("meta.json").exists() {
            let t = Instant::now();
            match load(&path, identity) {
                Ok(m) => return Ok((m, Origin::Loaded { read: t.elapsed() })),
                // A damaged store, or one unreadable in part (a file gone):
                // recording again replaces it, or names the I/O fault.
                Err(e) => tracing::warn!(error = %e, "recorded matrices unusable; recording them again"),
            }
        }
        let t = Instant::now();
        self.record(identity, blank())?;
        let record = t.elapsed();
        let t = Instant::now();
        let m = load(&path, identity)?;
        Ok((m, Origin::Recorded { record, read: t.elapsed() }))
    }

    /// Records `circuit` into the store under `identity`.
    fn record<C: Circuit<Scalar>>(&self, identity: &str, circuit: C) -> Result<(), StoreError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        let staging = Staging::create(self.dir.join(format!(".{identity}.{}.partial", std::process::id())))
            .map_err(io(&self.dir))?;
        let staging_dir = &staging.dir;
        let writers = MATRICES.map(|m| MatrixWriter::create(staging_dir, m));
        let writers = match writers {
            [Ok(a), Ok(b), Ok(c)] => [a, b, c],
            [a, b, c] => {
                let e = [a.err(), b.err(), c.err()].into_iter().flatten().next().expect("one failed");
                return Err(e);
            }
        };
        let recorded = record_into(circuit, writers).map_err(StoreError::Record)?;
        let mut meta = Meta {
            format: FORMAT,
            identity: identity.to_string(),
            inputs: recorded.inputs,
            aux: recorded.aux,
            rows: 0,
            terms: [0; 3],
            values: [0; 3],
            sha256: Default::default(),
        };
        for (i, w) in recorded.rows.into_iter().enumerate() {
            let written = w.finish()?;
            meta.rows = written.rows;
            meta.terms[i] = written.terms;
            meta.values[i] = written.values;
            meta.sha256.extend(written.digests);
        }
        let mut densities = HashingFile::create(&staging_dir.join("densities"))?;
        for d in &recorded.densities {
            for w in d.words() {
                densities.write(&w.to_le_bytes());
            }
        }
        meta.sha256.insert("densities".into(), densities.finish()?);
        let meta_path = staging_dir.join("meta.json");
        let json = serde_json::to_vec_pretty(&meta).expect("meta serializes");
        std::fs::write(&meta_path, json).map_err(io(&meta_path))?;
        let path = self.path_of(identity);
        staging.keep_as(&path).map_err(io(&path))
    }
}

/// A store being written: removed unless it is kept (a recording that
/// failed must not leave tens of GiB behind).
struct Staging {
    dir: PathBuf,
    kept: bool,
}

impl Staging {
    /// An empty directory at `dir` (one left by a crash is emptied).
    fn create(dir: PathBuf) -> io::Result<Self> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir, kept: false })
    }

    /// Renames the finished store to `path`, replacing what was there.
    fn keep_as(mut self, path: &Path) -> io::Result<()> {
        let _ = std::fs::remove_dir_all(path);
        std::fs::rename(&self.dir, path)?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A file written through a buffer, its SHA-256 taken on the way; the
/// first error is kept and reported at `finish` (a constraint system's
/// `enforce` cannot return one).
struct HashingFile {
    path: PathBuf,
    out: BufWriter<File>,
    hash: Sha256,
    error: Option<io::Error>,
}

impl HashingFile {
    fn create(path: &Path) -> Result<Self, StoreError> {
        let file = File::create(path).map_err(|source| StoreError::Io { path: path.into(), source })?;
        Ok(Self {
            path: path.into(),
            out: BufWriter::with_capacity(1 << 20, file),
            hash: Sha256::new(),
            error: None,
        })
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            self.hash.update(bytes);
            if let Err(e) = self.out.write_all(bytes) {
                self.error = Some(e);
            }
        }
    }

    /// Flushes and syncs the file; its digest.
    fn finish(self) -> Result<String, StoreError> {
        let HashingFile { path, out, hash, error } = self;
        let io = |source| StoreError::Io { path: path.clone(), source };
        if let Some(e) = error {
            return Err(io(e));
        }
        out.into_inner().map_err(|e| io(e.into_error()))?.sync_all().map_err(io)?;
        Ok(hex::encode(hash.finalize()))
    }
}

/// What a [`MatrixWriter`] wrote: rows, terms, distinct coefficients, and
/// (file name, SHA-256) of its three files.
struct Written {
    rows: usize,
    terms: usize,
    values: usize,
    digests: [(String, String); 3],
}

/// One matrix's rows, streamed to `x.rows` and `x.terms`; its coefficients
/// go to `x.values` at the end, when all are known.
struct MatrixWriter {
    name: &'static str,
    dir: PathBuf,
    rows: HashingFile,
    terms: HashingFile,
    table: CoefficientTable,
    row_count: usize,
    term_count: usize,
}

impl MatrixWriter {
    fn create(dir: &Path, name: &'static str) -> Result<Self, StoreError> {
        let mut rows = HashingFile::create(&dir.join(format!("{name}.rows")))?;
        rows.write(&0u64.to_le_bytes());
        let terms = HashingFile::create(&dir.join(format!("{name}.terms")))?;
        Ok(Self {
            name,
            dir: dir.to_path_buf(),
            rows,
            terms,
            table: CoefficientTable::default(),
            row_count: 0,
            term_count: 0,
        })
    }

    /// Rows, terms and values written, and the files' digests.
    fn finish(self) -> Result<Written, StoreError> {
        let name = self.name;
        let mut values = HashingFile::create(&self.dir.join(format!("{name}.values")))?;
        for v in self.table.values() {
            values.write(&v.to_repr());
        }
        let rows = (format!("{name}.rows"), self.rows.finish()?);
        let terms = (format!("{name}.terms"), self.terms.finish()?);
        let digests = [rows, terms, (format!("{name}.values"), values.finish()?)];
        Ok(Written {
            rows: self.row_count,
            terms: self.term_count,
            values: self.table.values().len(),
            digests,
        })
    }
}

impl RowSink for MatrixWriter {
    fn push_row(&mut self, terms: &[(Column, Scalar)]) {
        for &(col, c) in terms {
            self.terms.write(&col.encode().to_le_bytes());
            self.terms.write(&self.table.index_of(c).to_le_bytes());
        }
        self.term_count += terms.len();
        self.row_count += 1;
        self.rows.write(&(self.term_count as u64).to_le_bytes());
    }
}

/// Reads the store at `path`, checking it against `identity` and itself.
fn load(path: &Path, identity: &str) -> Result<Matrices, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { path: path.into(), reason };
    let meta_path = path.join("meta.json");
    let bytes =
        std::fs::read(&meta_path).map_err(|source| StoreError::Io { path: meta_path.clone(), source })?;
    let meta: Meta = serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("meta.json: {e}")))?;
    if meta.format != FORMAT || meta.identity != identity {
        return Err(corrupt(format!(
            "it holds format {} of '{}', not format {FORMAT} of '{identity}'",
            meta.format, meta.identity
        )));
    }
    let digest =
        |name: &str| meta.sha256.get(name).cloned().ok_or_else(|| corrupt(format!("no digest of {name}")));
    // The three matrices at once: reading and decoding is most of a load.
    let read = |(i, name): (usize, &str)| -> Result<SparseMatrix, StoreError> {
        let row_start = read_file(
            &path.join(format!("{name}.rows")),
            meta.rows + 1,
            8,
            &digest(&format!("{name}.rows"))?,
            |b, out: &mut [usize]| {
                for (o, c) in out.iter_mut().zip(b.chunks_exact(8)) {
                    *o = u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize;
                }
                true
            },
        )?;
        let values = read_file(
            &path.join(format!("{name}.values")),
            meta.values[i],
            VALUE,
            &digest(&format!("{name}.values"))?,
            |b, out: &mut [Scalar]| {
                out.iter_mut().zip(b.chunks_exact(VALUE)).all(|(o, c)| {
                    let repr: [u8; 32] = c.try_into().expect("32 bytes");
                    Scalar::from_repr_vartime(repr).map(|v| *o = v).is_some()
                })
            },
        )?;
        let table = CoefficientTable::from_values(values)
            .ok_or_else(|| corrupt(format!("matrix {name}'s values do not start with one or repeat")))?;
        let terms = meta.terms[i];
        let (mut cols, mut coefficient_of) = (vec![0u32; terms], vec![0u32; terms]);
        let parts = (&mut cols[..], &mut coefficient_of[..]);
        read_terms(&path.join(format!("{name}.terms")), parts, &digest(&format!("{name}.terms"))?)?;
        SparseMatrix::from_compressed(row_start, cols, table, coefficient_of)
            .ok_or_else(|| corrupt(format!("matrix {name}'s rows, terms and values do not agree")))
    };
    let mut matrices: Vec<_> = MATRICES.into_par_iter().enumerate().map(read).collect::<Result<_, _>>()?;
    let words = [meta.aux, meta.inputs, meta.aux].map(|n| n.div_ceil(64));
    let all = read_file(
        &path.join("densities"),
        words.iter().sum(),
        8,
        &digest("densities")?,
        |b, out: &mut [u64]| {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(8)) {
                *o = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            }
            true
        },
    )?;
    let (a_aux, rest) = all.split_at(words[0]);
    let (b_input, b_aux) = rest.split_at(words[1]);
    let densities = [(a_aux, meta.aux), (b_input, meta.inputs), (b_aux, meta.aux)]
        .map(|(w, len)| Density::from_words(w.to_vec(), len));
    let [Some(a_aux), Some(b_input), Some(b_aux)] = densities else {
        return Err(corrupt("a density has bits beyond its variables".into()));
    };
    let c = matrices.pop().expect("three");
    let b = matrices.pop().expect("three");
    let a = matrices.pop().expect("three");
    Matrices::from_parts(meta.inputs, meta.aux, [a, b, c], [a_aux, b_input, b_aux])
        .ok_or_else(|| corrupt("its matrices do not fit its counts".into()))
}

/// Chunk of a file read, hashed and decoded at once.
const CHUNK: usize = 64 << 20;

/// Reads `n` items of `size` bytes from `path`, checking its length and
/// its digest, decoding each chunk with `decode` (false: a bad item).
fn read_file<T: Clone + Default + Send>(
    path: &Path,
    n: usize,
    size: usize,
    digest: &str,
    decode: impl Fn(&[u8], &mut [T]) -> bool + Sync,
) -> Result<Vec<T>, StoreError> {
    let mut out = vec![T::default(); n];
    stream(path, n * size, digest, |offset, bytes| {
        decode(bytes, &mut out[offset / size..(offset + bytes.len()) / size])
    })?;
    Ok(out)
}

/// Reads a terms file into columns and coefficient indices, decoding on
/// every core (the indices are checked against the table after).
fn read_terms(
    path: &Path,
    (cols, coefficient_of): (&mut [u32], &mut [u32]),
    digest: &str,
) -> Result<(), StoreError> {
    let n = cols.len();
    stream(path, n * TERM, digest, |offset, bytes| {
        let first = offset / TERM;
        let count = bytes.len() / TERM;
        let (cols, indices) = (&mut cols[first..first + count], &mut coefficient_of[first..first + count]);
        bytes
            .par_chunks(TERM * 4096)
            .zip(cols.par_chunks_mut(4096).zip(indices.par_chunks_mut(4096)))
            .for_each(|(b, (cols, indices))| {
                for (t, (col, index)) in b.chunks_exact(TERM).zip(cols.iter_mut().zip(indices)) {
                    *col = u32::from_le_bytes(t[..4].try_into().expect("4 bytes"));
                    *index = u32::from_le_bytes(t[4..].try_into().expect("4 bytes"));
                }
            });
        true
    })
}

/// Streams `path` (which must be `len` bytes) in chunks of whole items to
/// `chunk(offset, bytes)`, hashing as it goes; checks the digest at the end.
fn stream(
    path: &Path,
    len: usize,
    digest: &str,
    mut chunk: impl FnMut(usize, &[u8]) -> bool,
) -> Result<(), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { path: path.into(), reason };
    let io = |source| StoreError::Io { path: path.into(), source };
    let mut file = File::open(path).map_err(io)?;
    let actual = file.metadata().map_err(io)?.len();
    if actual != len as u64 {
        return Err(corrupt(format!("{actual} bytes, not the {len} its counts give")));
    }
    // A whole number of values (32 bytes), terms (8) and words (8) per chunk.
    let step = CHUNK - CHUNK % VALUE;
    let mut buf = vec![0u8; step.min(len)];
    let mut hash = Sha256::new();
    let mut offset = 0;
    while offset < len {
        let bytes = &mut buf[..step.min(len - offset)];
        file.read_exact(bytes).map_err(io)?;
        hash.update(&*bytes);
        if !chunk(offset, bytes) {
            return Err(corrupt(format!(
                "an undecodable item within bytes {offset}..{}",
                offset + bytes.len()
            )));
        }
        offset += bytes.len();
    }
    if hex::encode(hash.finalize()) != digest {
        return Err(corrupt("its SHA-256 is not the one recorded".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuits::BenchCircuit;

    fn same(got: &Matrices, want: &Matrices) {
        let ([ga, gb, gc], gi, gx) = got.parts();
        let ([wa, wb, wc], wi, wx) = want.parts();
        assert_eq!((gi, gx), (wi, wx), "inputs and aux");
        for (g, w) in [(ga, wa), (gb, wb), (gc, wc)] {
            assert!(g.compressed_rows() == w.compressed_rows(), "rows");
        }
        assert_eq!(got.densities(), want.densities());
    }

    #[test]
    fn matrices_are_recorded_once_then_read_back_as_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::new(dir.path());
        let want = Matrices::record(BenchCircuit::new(10, 3, None)).unwrap();
        let (got, origin) = store.load_or_record("bench-10", || BenchCircuit::new(10, 3, None)).unwrap();
        assert!(matches!(origin, Origin::Recorded { .. }), "{origin:?}");
        same(&got, &want);
        let (got, origin) =
            store.load_or_record("bench-10", || -> BenchCircuit { panic!("not recorded again") }).unwrap();
        assert!(matches!(origin, Origin::Loaded { .. }), "{origin:?}");
        same(&got, &want);
        // Nothing is left from staging.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["bench-10"]);
    }

    #[test]
    fn a_damaged_or_foreign_store_is_found_and_recorded_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = MatrixStore::new(dir.path());
        let want = Matrices::record(BenchCircuit::new(8, 2, None)).unwrap();
        let blank = || BenchCircuit::new(8, 2, None);
        store.load_or_record("bench-8", blank).unwrap();
        let path = store.path_of("bench-8");

        // One flipped bit of a coefficient, or of a term's index: the digest
        // catches it, and the store is recorded again.
        for (file, at) in [("b.values", 0), ("a.terms", 4)] {
            let file = path.join(file);
            let mut bytes = std::fs::read(&file).unwrap();
            bytes[at] ^= 1;
            std::fs::write(&file, &bytes).unwrap();
            let e = load(&path, "bench-8").expect_err("a damaged store");
            assert!(e.to_string().contains("SHA-256"), "{e}");
            let (got, origin) = store.load_or_record("bench-8", blank).unwrap();
            assert!(matches!(origin, Origin::Recorded { .. }));
            same(&got, &want);
        }

        // A file cut short.
        let rows = path.join("c.rows");
        let bytes = std::fs::read(&rows).unwrap();
        std::fs::write(&rows, &bytes[..bytes.len() - 8]).unwrap();
        let e = load(&path, "bench-8").expect_err("a short file");
        assert!(e.to_string().contains("bytes, not the"), "{e}");

        // A file gone: recorded again, not an error.
        store.load_or_record("bench-8", blank).unwrap();
        std::fs::remove_file(path.join("a.rows")).unwrap();
        let (got, origin) = store.load_or_record("bench-8", blank).unwrap();
        assert!(matches!(origin, Origin::Recorded { .. }));
        same(&got, &want);

        // Another circuit's store under this name.
        store.load_or_record("bench-8", blank).unwrap();
        std::fs::rename(&path, store.path_of("bench-9")).unwrap();
        let e = load(&store.path_of("bench-9"), "bench-9").expect_err("a foreign store");
        assert!(e.to_string().contains(&format!("not format {FORMAT} of 'bench-9'")), "{e}");

        // A store of format 1 (each term's coefficient whole): recorded again in this format.
        store.load_or_record("bench-8", blank).unwrap();
        let meta = path.join("meta.json");
        let text = std::fs::read_to_string(&meta).unwrap();
        std::fs::write(&meta, text.replace(&format!("\"format\": {FORMAT}"), "\"format\": 1")).unwrap();
        let e = load(&path, "bench-8").expect_err("an older format");
        assert!(e.to_string().contains(&format!("format 1 of 'bench-8', not format {FORMAT}")), "{e}");
        let (got, origin) = store.load_or_record("bench-8", blank).unwrap();
        assert!(matches!(origin, Origin::Recorded { .. }));
        same(&got, &want);
    }

    /// A circuit whose synthesis fails part way, after recording a row.
    struct Failing;

    impl Circuit<Scalar> for Failing {
        fn synthesize<CS: bellperson::ConstraintSystem<Scalar>>(
            self,
            cs: &mut CS,
        ) -> Result<(), bellperson::SynthesisError> {
            let x = cs.alloc(|| "x", || Ok(Scalar::from(2u64)))?;
            cs.enforce(|| "x * x = x", |lc| lc + x, |lc| lc + x, |lc| lc + x);
            Err(bellperson::SynthesisError::AssignmentMissing)
        }
    }

    #[test]
    fn a_recording_that_fails_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let e = MatrixStore::new(dir.path()).load_or_record("failing", || Failing).unwrap_err();
        assert!(matches!(e, StoreError::Record(_)), "{e:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no staging directory left");
    }

    #[test]
    fn a_store_that_cannot_be_written_says_where() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let e =
            MatrixStore::new(&file).load_or_record("bench-4", || BenchCircuit::new(4, 1, None)).unwrap_err();
        assert!(matches!(e, StoreError::Io { .. }), "{e:?}");
        assert!(e.to_string().contains("a-file"), "{e}");
    }
}
