//! Format detection from a file's first bytes ([`DETECT_LEN`] are always enough).

use super::safetensors::MAX_HEADER_LEN;

/// Bytes [`detect`] ever looks at.
pub const DETECT_LEN: usize = 16;

/// A checkpoint format recognised by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Loom ENTITY v1 (`ENTITY\0\0` magic).
    Entity,
    /// Loom JSON (optional UTF-8 BOM and whitespace, then `{`).
    LoomJson,
    /// safetensors (plausible little-endian u64 header length, then `{`).
    Safetensors,
    /// GGUF (`GGUF` magic).
    Gguf,
    /// None of the above.
    Unknown,
}

/// Guesses the format from the first bytes of a file (pass at least [`DETECT_LEN`] when the file has them).
pub fn detect(first_bytes: &[u8]) -> Format {
    let b = &first_bytes[..first_bytes.len().min(DETECT_LEN)];
    if b.starts_with(b"ENTITY\0\0") {
        return Format::Entity;
    }
    if b.starts_with(b"GGUF") {
        return Format::Gguf;
    }
    if b.len() >= 9 && b[8] == b'{' {
        let mut n = [0u8; 8];
        n.copy_from_slice(&b[..8]);
        let n = u64::from_le_bytes(n);
        // The shortest header is `{}`.
        if (2..=MAX_HEADER_LEN).contains(&n) {
            return Format::Safetensors;
        }
    }
    let text = b.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(b);
    match text.iter().find(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
        Some(b'{') => Format::LoomJson,
        _ => Format::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics_and_edges() {
        assert_eq!(detect(b"ENTITY\0\0\x01\0\0\0"), Format::Entity);
        assert_eq!(detect(b"ENTITY\0"), Format::Unknown);
        assert_eq!(detect(b"GGUF\x03\0\0\0"), Format::Gguf);
        assert_eq!(detect(b"\x02\0\0\0\0\0\0\0{}"), Format::Safetensors);
        // Header length 0 or absurd: not safetensors.
        assert_eq!(detect(b"\0\0\0\0\0\0\0\0{}"), Format::Unknown);
        assert_eq!(detect(b"\xff\xff\xff\xff\xff\xff\xff\xff{}"), Format::Unknown);
        assert_eq!(detect(b"\xEF\xBB\xBF \r\n\t{\"id\""), Format::LoomJson);
        assert_eq!(detect(b"{"), Format::LoomJson);
        // JSON whose first 8 bytes, read as a length, would be absurd.
        assert_eq!(detect(b"{\"id\":\"x{\",\"depth\""), Format::LoomJson);
        assert_eq!(detect(b"   "), Format::Unknown);
        assert_eq!(detect(b"[1,2]"), Format::Unknown);
        assert_eq!(detect(b""), Format::Unknown);
        assert_eq!(detect(b"\x89PNG\r\n\x1a\n"), Format::Unknown);
    }
}
