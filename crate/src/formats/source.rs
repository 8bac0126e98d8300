//! Where a format reader gets its bytes: random access over a file, a buffer or the first bytes of a larger file
//! ([`ByteSource`]), and the async range reads of picked files in the browser ([`RangeReader`]).

use bytes::Bytes;

use crate::error::{LoomError, Result};

/// Random-access bytes: a file, a `Blob`, a buffer.
pub trait ByteSource {
    /// Total length in bytes.
    fn len(&self) -> u64;
    /// True for an empty source.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Bytes readable now without a [`LoomError::NeedMore`] (all of them, except for a [`PrefixSource`]).
    fn available(&self) -> u64 {
        self.len()
    }
    /// Checks, before a buffer is allocated for it, that a read ending at `end` can succeed.
    fn check_end(&self, end: u64) -> Result<()> {
        if end > self.len() {
            return Err(LoomError::Truncated {
                what: "file".into(),
                needed: end,
                available: self.len(),
            });
        }
        Ok(())
    }
}

/// The first bytes of a larger file (an HTTP Range read, a `Blob.slice`), with the real total length. A read
/// past the prefix fails with [`LoomError::NeedMore`], whose `needed` at least doubles the prefix (never past
/// the end), so a caller that reads `needed` bytes and calls again is done in a few rounds.
pub struct PrefixSource<'a> {
    prefix: &'a [u8],
    total: u64,
}

/// The smallest `needed` a [`PrefixSource`] asks for.
pub const MIN_PREFIX_STEP: u64 = 64 << 10;

impl<'a> PrefixSource<'a> {
    pub fn new(prefix: &'a [u8], total: u64) -> Result<PrefixSource<'a>> {
        if prefix.len() as u64 > total {
            return Err(LoomError::InvalidInput(format!(
                "a prefix of {} bytes is longer than the file's {total} bytes",
                prefix.len()
            )));
        }
        Ok(PrefixSource { prefix, total })
    }
}

impl ByteSource for PrefixSource<'_> {
    fn len(&self) -> u64 {
        self.total
    }

    fn available(&self) -> u64 {
        self.prefix.len() as u64
    }

    fn check_end(&self, end: u64) -> Result<()> {
        let have = self.prefix.len() as u64;
        if end > self.total {
            return Err(LoomError::Truncated {
                what: "file".into(),
                needed: end,
                available: self.total,
            });
        }
        if end > have {
            let needed = end.max(have.saturating_mul(2)).max(MIN_PREFIX_STEP).min(self.total);
            return Err(LoomError::NeedMore {
                needed,
                available: have,
            });
        }
        Ok(())
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_end(offset.saturating_add(buf.len() as u64))?;
        let mut prefix = self.prefix;
        prefix.read_at(offset, buf)
    }
}

impl ByteSource for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or_else(|| LoomError::Truncated {
                what: "input".into(),
                needed: offset.saturating_add(buf.len() as u64),
                available: <[u8]>::len(self) as u64,
            })?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// A native file read with positioned reads.
#[cfg(not(target_arch = "wasm32"))]
pub struct FileSource {
    file: std::fs::File,
    len: u64,
}

#[cfg(not(target_arch = "wasm32"))]
impl FileSource {
    pub fn open(path: &std::path::Path) -> Result<FileSource> {
        let file = std::fs::File::open(path).map_err(|e| LoomError::Io(format!("{}: {e}", path.display())))?;
        let len = file.metadata()?.len();
        Ok(FileSource { file, len })
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        if offset.saturating_add(buf.len() as u64) > self.len {
            return Err(LoomError::Truncated {
                what: "file".into(),
                needed: offset.saturating_add(buf.len() as u64),
                available: self.len,
            });
        }
        self.file.seek(SeekFrom::Start(offset))?;
        self.file.read_exact(buf)?;
        Ok(())
    }
}

/// Byte ranges of picked files, as the page (or a test) reads them.
// The futures are not `Send` in the browser, so the trait's async fns stay plain.
#[allow(async_fn_in_trait)]
pub trait RangeReader {
    /// `len` bytes of file `file` from `offset`; the callers keep every range within the file's length.
    async fn read(&self, file: usize, offset: u64, len: u64) -> Result<Bytes>;
}
