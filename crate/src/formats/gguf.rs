//! GGUF (llama.cpp's model file) header: metadata key/values, tensor infos, alignment and the data offset, read
//! from a [`ByteSource`] without touching the tensor data. Versions 2 and 3 (little-endian); version 1 used 32-bit
//! counts and is refused, as are big-endian files.
//!
//! Layout: `GGUF` | u32 version | u64 tensor count | u64 KV count | KVs | tensor infos | padding to the alignment |
//! tensor data. A string is u64 length + UTF-8 bytes; a KV is string key + u32 type + value; an array is u32 item
//! type + u64 count + items; a tensor info is string name + u32 n_dims + u64 `ne[n_dims]` (innermost first) + u32
//! ggml type + u64 offset relative to the data start, a multiple of the alignment (`general.alignment`, default 32).
//!
//! Hostile input: counts and lengths are checked against the bytes the file has before anything is allocated or
//! read, nesting and dimensions are bounded, and every failure is a typed error.

use std::collections::BTreeMap;

use super::source::{ByteSource, MIN_PREFIX_STEP};
use crate::error::{LoomError, Result};
use crate::quant::GgmlType;

pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Largest header (metadata + tensor infos) accepted; real ones, vocabularies included, are a few MB.
pub const MAX_HEADER_LEN: u64 = 1 << 30;
/// ggml tensors have at most 4 dimensions.
pub const MAX_DIMS: usize = 4;
/// Arrays of arrays nest at most this deep.
const MAX_NESTING: usize = 4;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Item type id (as in the file) and the items.
    Array(u32, Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// Name of a value type id.
fn type_name(id: u32) -> &'static str {
    match id {
        0 => "u8",
        1 => "i8",
        2 => "u16",
        3 => "i16",
        4 => "u32",
        5 => "i32",
        6 => "f32",
        7 => "bool",
        8 => "string",
        9 => "array",
        10 => "u64",
        11 => "i64",
        12 => "f64",
        _ => "?",
    }
}

/// Arrays longer than this show as `[type × count]` in [`GgufValue::display`].
const DISPLAY_ITEMS: usize = 16;

impl GgufValue {
    /// The value as text: numbers and strings as they are, short arrays in full (`[1, 2]`, `["a", "b"]`), long
    /// ones as `[string × 32000]`.
    pub fn display(&self) -> String {
        match self {
            GgufValue::U8(v) => v.to_string(),
            GgufValue::I8(v) => v.to_string(),
            GgufValue::U16(v) => v.to_string(),
            GgufValue::I16(v) => v.to_string(),
            GgufValue::U32(v) => v.to_string(),
            GgufValue::I32(v) => v.to_string(),
            GgufValue::F32(v) => v.to_string(),
            GgufValue::Bool(v) => v.to_string(),
            GgufValue::String(v) => v.clone(),
            GgufValue::U64(v) => v.to_string(),
            GgufValue::I64(v) => v.to_string(),
            GgufValue::F64(v) => v.to_string(),
            GgufValue::Array(t, items) if items.len() > DISPLAY_ITEMS => {
                format!("[{} × {}]", type_name(*t), items.len())
            }
            GgufValue::Array(_, items) => {
                let parts: Vec<String> = items
                    .iter()
                    .map(|v| match v {
                        GgufValue::String(s) => format!("{s:?}"),
                        v => v.display(),
                    })
                    .collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }

    /// The value as an unsigned integer, when it is one.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// ggml `ne`: innermost (contiguous) dimension first. A row-major shape is this reversed.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Byte offset of the data, relative to the header's `data_start`.
    pub offset: u64,
    pub elements: u64,
    pub bytes: u64,
}

impl GgufTensorInfo {
    /// The shape in row-major order (outermost first), as numpy and safetensors write it.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed GGUF header.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    /// Key/values in file order.
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<GgufTensorInfo>,
    pub alignment: u64,
    /// File offset of the tensor data (the header's end, padded to the alignment).
    pub data_start: u64,
}

impl GgufHeader {
    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Metadata values as text ([`GgufValue::display`]).
    pub fn metadata_strings(&self) -> BTreeMap<String, String> {
        self.metadata.iter().map(|(k, v)| (k.clone(), v.display())).collect()
    }
}

fn bad(msg: impl Into<String>) -> LoomError {
    LoomError::Gguf(msg.into())
}

/// Sequential reads over a [`ByteSource`], buffered: the bytes read so far are kept from offset 0.
struct Cursor<'s> {
    src: &'s mut dyn ByteSource,
    buf: Vec<u8>,
    pos: usize,
}

impl Cursor<'_> {
    /// Makes the first `end` bytes available, reading ahead in growing chunks (never past what the source
    /// holds now, so a prefix source only fails for bytes that are truly missing).
    fn ensure(&mut self, end: u64) -> Result<()> {
        let have = self.buf.len() as u64;
        if end <= have {
            return Ok(());
        }
        if end > MAX_HEADER_LEN {
            return Err(LoomError::TooLarge {
                what: "GGUF header".into(),
                len: end,
                max: MAX_HEADER_LEN,
            });
        }
        self.src.check_end(end)?;
        let ahead = end.max(have.saturating_mul(2)).max(MIN_PREFIX_STEP);
        let target = ahead.min(self.src.available().max(end)).min(self.src.len());
        let mut more = vec![0; (target - have) as usize];
        self.src.read_at(have, &mut more)?;
        self.buf.extend_from_slice(&more);
        Ok(())
    }

    fn take(&mut self, n: u64) -> Result<&[u8]> {
        let end = (self.pos as u64).saturating_add(n);
        self.ensure(end)?;
        let start = self.pos;
        self.pos = end as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N as u64)?.try_into().expect("took N bytes"))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Bytes of the file after the cursor.
    fn remaining(&self) -> u64 {
        self.src.len().saturating_sub(self.pos as u64)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64()?;
        if len > self.remaining() {
            return Err(bad(format!(
                "{what}: a string of {len} bytes at offset {} runs past the end of the file",
                self.pos
            )));
        }
        Ok(String::from_utf8_lossy(self.take(len)?).into_owned())
    }

    fn value(&mut self, type_id: u32, depth: usize, what: &str) -> Result<GgufValue> {
        Ok(match type_id {
            0 => GgufValue::U8(self.array::<1>()?[0]),
            1 => GgufValue::I8(self.array::<1>()?[0] as i8),
            2 => GgufValue::U16(u16::from_le_bytes(self.array()?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array()?)),
            4 => GgufValue::U32(self.u32()?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array()?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(bad(format!("{what}: bool byte {b}"))),
            },
            8 => GgufValue::String(self.string(what)?),
            9 => {
                if depth >= MAX_NESTING {
                    return Err(bad(format!("{what}: arrays nested deeper than {MAX_NESTING}")));
                }
                let item = self.u32()?;
                let count = self.u64()?;
                let min_item = min_value_len(item).ok_or_else(|| bad(format!("{what}: array item type {item}")))?;
                if count.saturating_mul(min_item) > self.remaining() {
                    return Err(bad(format!(
                        "{what}: {count} array items cannot fit in the {} bytes left",
                        self.remaining()
                    )));
                }
                // Grown as items are read: the count is only checked against the file's claimed length.
                let mut items = Vec::with_capacity(count.min(4096) as usize);
                for _ in 0..count {
                    items.push(self.value(item, depth + 1, what)?);
                }
                GgufValue::Array(item, items)
            }
            10 => GgufValue::U64(self.u64()?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array()?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array()?)),
            t => return Err(bad(format!("{what}: unknown value type {t}"))),
        })
    }
}

/// The fewest bytes a value of type `id` takes (`None` for an unknown type).
fn min_value_len(id: u32) -> Option<u64> {
    Some(match id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => return None,
    })
}

/// Reads a GGUF header from `src`. `head` holds the file's first bytes when the caller has read them already.
/// Returns the header and how many bytes were read from `src` (beyond `head`).
pub fn read_header(src: &mut dyn ByteSource, head: Vec<u8>) -> Result<(GgufHeader, u64)> {
    let already = head.len() as u64;
    let mut c = Cursor { src, buf: head, pos: 0 };
    if c.take(4)? != MAGIC {
        return Err(LoomError::BadMagic { format: "GGUF" });
    }
    let version = c.u32()?;
    if !(2..=3).contains(&version) {
        // A big-endian file reads as a version above 2^24.
        return Err(LoomError::UnsupportedVersion {
            format: "GGUF",
            version: version.into(),
        });
    }
    let tensor_count = c.u64()?;
    let kv_count = c.u64()?;
    // A KV takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor info 8 + 4 + 4 + 8.
    if kv_count
        .saturating_mul(13)
        .saturating_add(tensor_count.saturating_mul(24))
        > c.remaining()
    {
        return Err(bad(format!(
            "{kv_count} metadata entries and {tensor_count} tensors cannot fit in a {}-byte file (a truncated file?)",
            c.src.len()
        )));
    }

    let mut metadata: Vec<(String, GgufValue)> = Vec::new();
    let mut keys = std::collections::HashSet::new();
    for i in 0..kv_count {
        let key = c.string(&format!("metadata key {i}"))?;
        let type_id = c.u32()?;
        let value = c.value(type_id, 0, &key)?;
        if !keys.insert(key.clone()) {
            return Err(bad(format!("duplicate metadata key {key:?}")));
        }
        metadata.push((key, value));
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, GgufValue::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, v)) => return Err(bad(format!("general.alignment must be a u32 power of two, got {v:?}"))),
    };

    let mut tensors: Vec<GgufTensorInfo> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for i in 0..tensor_count {
        let name = c.string(&format!("tensor {i} name"))?;
        let n_dims = c.u32()? as usize;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(bad(format!("{name}: {n_dims} dimensions (1 to {MAX_DIMS})")));
        }
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            dims.push(c.u64()?);
        }
        let type_id = c.u32()?;
        let ggml_type = GgmlType::from_id(type_id)
            .map_err(|_| LoomError::UnsupportedDType(format!("tensor {name}: unknown ggml type id {type_id}")))?;
        let (block, block_bytes) = (ggml_type.block_len() as u64, ggml_type.block_bytes() as u64);
        let offset = c.u64()?;
        let elements =
            dims.iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .ok_or_else(|| LoomError::ShapeOverflow {
                    what: name.clone(),
                    shape: dims.clone(),
                })?;
        if dims[0] % block != 0 {
            return Err(bad(format!(
                "{name}: {ggml_type} rows are not whole blocks of {block} elements"
            )));
        }
        let bytes = (elements / block)
            .checked_mul(block_bytes)
            .ok_or_else(|| LoomError::ShapeOverflow {
                what: name.clone(),
                shape: dims.clone(),
            })?;
        if offset % alignment != 0 {
            return Err(bad(format!("{name}: offset {offset} is not a multiple of {alignment}")));
        }
        if !names.insert(name.clone()) {
            return Err(bad(format!("duplicate tensor name {name:?}")));
        }
        tensors.push(GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            elements,
            bytes,
        });
    }

    let data_start = (c.pos as u64).next_multiple_of(alignment);
    let data_len = c.src.len().saturating_sub(data_start);
    let mut ranges: Vec<(u64, u64, &str)> = Vec::with_capacity(tensors.len());
    for t in &tensors {
        let end = t
            .offset
            .checked_add(t.bytes)
            .filter(|&e| e <= data_len)
            .ok_or_else(|| {
                // A lying offset or shape, or a file cut short: say which tensor and where its bytes would end.
                bad(format!(
                    "tensor {}: {} bytes of {} at data offset {} end past the {data_len} bytes of tensor data \
                     the file holds (a truncated file, or a wrong offset or shape)",
                    t.name, t.bytes, t.ggml_type, t.offset
                ))
            })?;
        ranges.push((t.offset, end, &t.name));
    }
    ranges.sort_unstable();
    if let Some(w) = ranges.windows(2).find(|w| w[1].0 < w[0].1) {
        return Err(LoomError::BlobOverlap {
            first: w[0].2.to_string(),
            second: w[1].2.to_string(),
        });
    }
    let read = c.buf.len() as u64 - already;
    Ok((
        GgufHeader {
            version,
            metadata,
            tensors,
            alignment,
            data_start,
        },
        read,
    ))
}

/// Reads the header of a GGUF file held in memory.
pub fn read_header_bytes(bytes: &[u8]) -> Result<GgufHeader> {
    let mut src = bytes;
    Ok(read_header(&mut src, Vec::new())?.0)
}
