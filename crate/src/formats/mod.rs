//! Readers and writers: Loom JSON, ENTITY v1, safetensors, training checkpoints, GGUF headers, format detection;
//! [`open`], the one place a file's format is told from its first bytes and its header read.

pub mod checkpoint;
pub mod detect;
pub mod entity;
pub mod gguf;
pub mod gojson;
pub mod loom_json;
pub mod safetensors;
pub mod source;
pub mod tensors;

use crate::error::{LoomError, Result};
use crate::network::Network;
use detect::Format;
use source::ByteSource;

/// A file's header as its format reads it.
pub enum Header {
    Entity(entity::EntityHeader),
    /// A Loom JSON file is all header: its network.
    LoomJson(Network),
    Safetensors(safetensors::SafetensorsHeader),
    Gguf(gguf::GgufHeader),
}

/// A file opened by [`open`]: its header, its length and the bytes read to get the header.
pub struct Opened {
    pub header: Header,
    pub file_bytes: u64,
    pub bytes_read: u64,
}

/// Tells a file's format from its first bytes and reads its header (only its header where the format allows it:
/// a multi-GB `.entity`, safetensors or GGUF costs its header's bytes), checking that every range it names lies
/// within the file. A [`source::PrefixSource`] too short for the header fails with [`LoomError::NeedMore`].
pub fn open(source: &mut dyn ByteSource) -> Result<Opened> {
    let file_bytes = source.len();
    let mut src = Counting { inner: source, read: 0 };
    // One read covers format detection and both formats' fixed preambles.
    let mut head = src.read(0, file_bytes.min(entity::PREAMBLE_LEN as u64))?;
    let header = match detect::detect(&head) {
        Format::Entity => {
            let n = entity::header_len(&head)?;
            head.extend(src.read(entity::PREAMBLE_LEN as u64, n)?);
            let header = entity::read_header(&head)?;
            let payload = file_bytes.saturating_sub(header.payload_offset());
            for b in &header.blobs {
                b.range(payload)?;
            }
            Header::Entity(header)
        }
        Format::Safetensors => {
            let needed = safetensors::header_size(&head)?;
            let have = head.len() as u64;
            if needed > have {
                head.extend(src.read(have, needed - have)?);
            }
            let header = safetensors::inspect(&head)?;
            if header.file_len() > file_bytes {
                return Err(LoomError::Truncated {
                    what: "safetensors data".into(),
                    needed: header.file_len(),
                    available: file_bytes,
                });
            }
            Header::Safetensors(header)
        }
        Format::LoomJson => Header::LoomJson(loom_json::read(&src.read(0, file_bytes)?)?),
        Format::Gguf => {
            let (header, read) = gguf::read_header(src.inner, head)?;
            src.read += read;
            Header::Gguf(header)
        }
        Format::Unknown => {
            return Err(LoomError::UnknownFormat(
                "not a Loom .entity or JSON file, nor safetensors or GGUF".into(),
            ))
        }
    };
    Ok(Opened {
        header,
        file_bytes,
        bytes_read: src.read,
    })
}

/// Opens bytes already in memory.
pub fn open_bytes(bytes: &[u8]) -> Result<Opened> {
    let mut src = bytes;
    open(&mut src)
}

/// Counts the bytes a source hands out.
struct Counting<'a> {
    inner: &'a mut dyn ByteSource,
    read: u64,
}

impl Counting<'_> {
    fn read(&mut self, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.inner.check_end(offset.saturating_add(len))?;
        let mut buf = vec![0; len as usize];
        self.inner.read_at(offset, &mut buf)?;
        self.read += len;
        Ok(buf)
    }
}
