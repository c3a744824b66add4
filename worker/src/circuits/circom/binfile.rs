//! iden3's binary container, the envelope of snarkjs's `.zkey` and circom's
//! `.wtns`: a 4-byte magic, a u32 version, a u32 section count, then sections
//! of (u32 type, u64 length, bytes), little-endian, in any order.
//!
//! (ark-circom reads these files for BN254 through arkworks only; nothing
//! maintained reads them for BLS12-381, so the container is read here.)

use std::io::{Read, Seek, SeekFrom};

/// A malformed container, or an I/O error while reading it.
#[derive(Debug, thiserror::Error)]
pub enum BinFileError {
    #[error("not a .{expected} file (it starts with {found:?}, not \"{expected}\")")]
    WrongMagic { expected: &'static str, found: String },
    #[error(".{kind} version {version} is not supported (at most {max})")]
    Version { kind: &'static str, version: u32, max: u32 },
    #[error("section {id} is missing")]
    MissingSection { id: u32 },
    #[error("section {id} appears {count} times; it must appear once")]
    RepeatedSection { id: u32, count: usize },
    #[error("the file ends inside {what}")]
    Truncated { what: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Where one section's bytes lie.
#[derive(Clone, Copy, Debug)]
struct Section {
    id: u32,
    offset: u64,
    len: u64,
}

/// The container's section table, read from the front of a file.
#[derive(Debug)]
pub struct BinFile {
    sections: Vec<Section>,
}

impl BinFile {
    /// Reads the header and the section table, checking the magic and version.
    pub fn scan<R: Read + Seek>(
        r: &mut R,
        magic: &'static str,
        max_version: u32,
    ) -> Result<Self, BinFileError> {
        let end = r.seek(SeekFrom::End(0))?;
        r.seek(SeekFrom::Start(0))?;
        let mut head = [0u8; 12];
        read_exact(r, &mut head, "the file header")?;
        if &head[..4] != magic.as_bytes() {
            let found = String::from_utf8_lossy(&head[..4]).into_owned();
            return Err(BinFileError::WrongMagic { expected: magic, found });
        }
        let version = u32::from_le_bytes(head[4..8].try_into().unwrap());
        if version == 0 || version > max_version {
            return Err(BinFileError::Version { kind: magic, version, max: max_version });
        }
        let count = u32::from_le_bytes(head[8..12].try_into().unwrap());
        let mut sections = Vec::new();
        let mut at = 12u64;
        for _ in 0..count {
            let mut sh = [0u8; 12];
            read_exact(r, &mut sh, "the section table")?;
            let id = u32::from_le_bytes(sh[..4].try_into().unwrap());
            let len = u64::from_le_bytes(sh[4..12].try_into().unwrap());
            let offset = at + 12;
            if offset.checked_add(len).is_none_or(|e| e > end) {
                return Err(BinFileError::Truncated { what: format!("section {id} ({len} bytes)") });
            }
            sections.push(Section { id, offset, len });
            at = offset + len;
            r.seek(SeekFrom::Start(at))?;
        }
        Ok(Self { sections })
    }

    fn unique(&self, id: u32) -> Result<Section, BinFileError> {
        let mut found = self.sections.iter().filter(|s| s.id == id);
        match (found.next(), found.count()) {
            (None, _) => Err(BinFileError::MissingSection { id }),
            (Some(s), 0) => Ok(*s),
            (Some(_), more) => Err(BinFileError::RepeatedSection { id, count: more + 1 }),
        }
    }

    /// The length of section `id`, which must appear exactly once.
    pub fn len(&self, id: u32) -> Result<u64, BinFileError> {
        Ok(self.unique(id)?.len)
    }

    /// Section `id`'s bytes, read whole.
    pub fn read<R: Read + Seek>(&self, r: &mut R, id: u32) -> Result<Vec<u8>, BinFileError> {
        let s = self.unique(id)?;
        r.seek(SeekFrom::Start(s.offset))?;
        let len =
            usize::try_from(s.len).map_err(|_| BinFileError::Truncated { what: format!("section {id}") })?;
        let mut buf = vec![0u8; len];
        read_exact(r, &mut buf, &format!("section {id}"))?;
        Ok(buf)
    }
}

fn read_exact<R: Read>(r: &mut R, buf: &mut [u8], what: &str) -> Result<(), BinFileError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => BinFileError::Truncated { what: what.to_string() },
        _ => BinFileError::Io(e),
    })
}

/// Reads little-endian fields off a section's bytes, naming what ran short.
pub struct Fields<'a> {
    bytes: &'a [u8],
    section: &'static str,
}

impl<'a> Fields<'a> {
    pub fn new(bytes: &'a [u8], section: &'static str) -> Self {
        Self { bytes, section }
    }

    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], BinFileError> {
        if self.bytes.len() < n {
            return Err(BinFileError::Truncated { what: format!("{} ({what})", self.section) });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub fn u32(&mut self, what: &str) -> Result<u32, BinFileError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Cursor;

    /// A container with the given sections, for tests of the readers above it.
    pub fn container(magic: &str, version: u32, sections: &[(u32, &[u8])]) -> Vec<u8> {
        let mut out = magic.as_bytes().to_vec();
        out.extend(version.to_le_bytes());
        out.extend((sections.len() as u32).to_le_bytes());
        for (id, bytes) in sections {
            out.extend(id.to_le_bytes());
            out.extend((bytes.len() as u64).to_le_bytes());
            out.extend(*bytes);
        }
        out
    }

    #[test]
    fn reads_sections_in_any_order_and_names_what_is_wrong() {
        let file = container("wtns", 2, &[(2, b"second"), (1, b"first")]);
        let mut r = Cursor::new(file.clone());
        let bin = BinFile::scan(&mut r, "wtns", 2).unwrap();
        assert_eq!(bin.read(&mut r, 1).unwrap(), b"first");
        assert_eq!(bin.read(&mut r, 2).unwrap(), b"second");
        assert!(matches!(bin.read(&mut r, 3), Err(BinFileError::MissingSection { id: 3 })));

        let err = BinFile::scan(&mut Cursor::new(file.clone()), "zkey", 1).unwrap_err();
        assert_eq!(err.to_string(), "not a .zkey file (it starts with \"wtns\", not \"zkey\")");
        let err = BinFile::scan(&mut Cursor::new(file.clone()), "wtns", 1).unwrap_err();
        assert!(matches!(err, BinFileError::Version { version: 2, .. }), "{err}");
        let cut = &file[..file.len() - 3];
        let err = BinFile::scan(&mut Cursor::new(cut), "wtns", 2).unwrap_err();
        assert!(matches!(err, BinFileError::Truncated { .. }), "{err}");
        let twice = container("wtns", 2, &[(1, b"a"), (1, b"b")]);
        let mut r = Cursor::new(twice);
        let bin = BinFile::scan(&mut r, "wtns", 2).unwrap();
        assert!(matches!(bin.read(&mut r, 1), Err(BinFileError::RepeatedSection { id: 1, count: 2 })));
    }
}
