//! safetensors (spec §10): header-only inspection, tensor decoding with standard or Loom-compatible semantics,
//! zero-copy (memory-mapped) files, and writers (general and byte-compatible with Loom's `SaveSafetensorsToBytes`).
//!
//! Validation follows the `safetensors` crate (`Metadata::validate`): header at most 100 MB, UTF-8 JSON object,
//! known dtypes, `__metadata__` a string map, and tensor data that covers the data section contiguously from 0 with
//! each byte length equal to dtype size × element count. Unlike the crate, every check works on 64-bit numbers on
//! every target (wasm32 included), errors name the tensor, and duplicate names are refused.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IntoDeserializer, MapAccess, Visitor};

use crate::dtype::FP4_TABLE;
use crate::error::{LoomError, Result};

/// A safetensors element type (the `safetensors` crate's; `Display` gives the header string, e.g. `F8_E4M3`).
pub use ::safetensors::Dtype;

/// Largest accepted JSON header, in bytes (the `safetensors` crate's limit).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// One tensor of a header.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Tensor name (a key of the header).
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions, row-major.
    pub shape: Vec<u64>,
    /// Number of elements (product of `shape`).
    pub elements: u64,
    /// `data_offsets` as written: byte range relative to the start of the data section.
    pub offsets: (u64, u64),
    /// The same byte range, relative to the start of the file.
    pub absolute: (u64, u64),
}

impl TensorInfo {
    /// Length of the tensor's data in bytes.
    pub fn byte_len(&self) -> u64 {
        self.offsets.1 - self.offsets.0
    }
}

/// A validated safetensors header: tensors in file (data offset) order and the `__metadata__` map.
#[derive(Clone, Debug, PartialEq)]
pub struct SafetensorsHeader {
    header_len: u64,
    metadata: BTreeMap<String, String>,
    tensors: Vec<TensorInfo>,
    index: BTreeMap<String, usize>,
}

impl SafetensorsHeader {
    /// Length of the JSON header (the file's first 8 bytes), padding included.
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Offset of the data section in the file (`8 + header_len`).
    pub fn data_start(&self) -> u64 {
        8 + self.header_len
    }

    /// Length of the data section (end of the last tensor).
    pub fn data_len(&self) -> u64 {
        self.tensors.iter().map(|t| t.offsets.1).max().unwrap_or(0)
    }

    /// Exact length of the whole file this header describes.
    pub fn file_len(&self) -> u64 {
        // Cannot overflow: checked when the header was validated.
        self.data_start() + self.data_len()
    }

    /// Tensors in the order their data appears in the file.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`, if any.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The `__metadata__` string map (empty when absent).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }
}

/// Bytes [`inspect`] needs (`8 + header_len`), from at least the first 8 bytes of a file.
pub fn header_size(first8: &[u8]) -> Result<u64> {
    let Some(len_bytes) = first8.get(..8) else {
        return Err(LoomError::Truncated {
            what: "safetensors header length".into(),
            needed: 8,
            available: first8.len() as u64,
        });
    };
    let mut arr = [0u8; 8];
    arr.copy_from_slice(len_bytes);
    let n = u64::from_le_bytes(arr);
    if n > MAX_HEADER_LEN {
        return Err(LoomError::TooLarge {
            what: "safetensors header".into(),
            len: n,
            max: MAX_HEADER_LEN,
        });
    }
    Ok(8 + n)
}

/// Parses and validates the header from a file prefix of at least [`header_size`] bytes (the data is not needed).
pub fn inspect(prefix: &[u8]) -> Result<SafetensorsHeader> {
    let needed = header_size(prefix)?;
    let Some(json) = usize::try_from(needed).ok().and_then(|end| prefix.get(8..end)) else {
        return Err(LoomError::Truncated {
            what: "safetensors header".into(),
            needed,
            available: prefix.len() as u64,
        });
    };
    let text = std::str::from_utf8(json).map_err(|e| header_err(format!("invalid UTF-8: {e}")))?;
    let raw: RawHeader = serde_json::from_str(text).map_err(header_err)?;
    validate(needed - 8, raw)
}

fn header_err(e: impl fmt::Display) -> LoomError {
    crate::error::json_err("safetensors header", e)
}

fn st_err(name: &str, msg: impl fmt::Display) -> LoomError {
    LoomError::Safetensors(format!("tensor {name:?}: {msg}"))
}

/// Parses a safetensors dtype string (`"F32"`, `"BF16"`, `"F8_E4M3"`, …).
pub fn parse_dtype(s: &str) -> Option<Dtype> {
    let de: de::value::StrDeserializer<'_, de::value::Error> = s.into_deserializer();
    Dtype::deserialize(de).ok()
}

fn validate(header_len: u64, raw: RawHeader) -> Result<SafetensorsHeader> {
    let data_start = 8 + header_len;
    let mut tensors = Vec::with_capacity(raw.tensors.len());
    for (name, info) in raw.tensors {
        let dtype =
            parse_dtype(&info.dtype).ok_or_else(|| st_err(&name, format_args!("unknown dtype {:?}", info.dtype)))?;
        let overflow = || LoomError::ShapeOverflow {
            what: format!("safetensors tensor {name:?}"),
            shape: info.shape.clone(),
        };
        let elements = info
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(overflow)?;
        let bits = elements.checked_mul(dtype.bitsize() as u64).ok_or_else(overflow)?;
        if !bits.is_multiple_of(8) {
            return Err(st_err(
                &name,
                format_args!("{elements} {dtype} elements do not fill whole bytes"),
            ));
        }
        let (start, end) = info.data_offsets;
        if end < start {
            return Err(st_err(
                &name,
                format_args!("data_offsets [{start}, {end}] end before they start"),
            ));
        }
        if end - start != bits / 8 {
            return Err(st_err(
                &name,
                format_args!(
                    "data_offsets [{start}, {end}] hold {} bytes, but {dtype} × {:?} needs {}",
                    end - start,
                    info.shape,
                    bits / 8
                ),
            ));
        }
        let abs_end = end.checked_add(data_start).ok_or_else(|| {
            st_err(
                &name,
                format_args!("data_offsets [{start}, {end}] overflow the file size"),
            )
        })?;
        tensors.push(TensorInfo {
            name,
            dtype,
            shape: info.shape,
            elements,
            offsets: (start, end),
            absolute: (start + data_start, abs_end),
        });
    }
    tensors.sort_by_key(|t| t.offsets);
    let mut covered = 0u64;
    let mut prev: Option<&str> = None;
    for t in &tensors {
        let (start, end) = t.offsets;
        if start < covered {
            let other = prev.unwrap_or_default();
            return Err(st_err(
                &t.name,
                format_args!("data_offsets [{start}, {end}] overlap tensor {other:?} (which ends at {covered})"),
            ));
        }
        if start > covered {
            return Err(st_err(
                &t.name,
                format_args!(
                    "data_offsets [{start}, {end}] leave bytes {covered}..{start} of the data covered by no tensor"
                ),
            ));
        }
        covered = end;
        prev = Some(&t.name);
    }
    let mut index = BTreeMap::new();
    for (i, t) in tensors.iter().enumerate() {
        if index.insert(t.name.clone(), i).is_some() {
            return Err(st_err(&t.name, "name appears twice in the header"));
        }
    }
    Ok(SafetensorsHeader {
        header_len,
        metadata: raw.metadata.unwrap_or_default(),
        tensors,
        index,
    })
}

/// A tensor entry as written in the header (typed, not yet validated).
#[derive(serde::Deserialize)]
struct RawInfo {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// The header's top-level object, keeping the tensors in header order.
struct RawHeader {
    metadata: Option<BTreeMap<String, String>>,
    tensors: Vec<(String, RawInfo)>,
}

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct HeaderVisitor;
        impl<'de> Visitor<'de> for HeaderVisitor {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a safetensors header object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawHeader, A::Error> {
                let mut metadata = None;
                let mut tensors = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "__metadata__" {
                        if metadata.is_some() {
                            return Err(de::Error::custom("__metadata__ appears twice"));
                        }
                        let m = map
                            .next_value::<BTreeMap<String, String>>()
                            .map_err(|e| de::Error::custom(format_args!("__metadata__: {e}")))?;
                        metadata = Some(m);
                    } else {
                        let info = map
                            .next_value::<RawInfo>()
                            .map_err(|e| de::Error::custom(format_args!("tensor {key:?}: {e}")))?;
                        tensors.push((key, info));
                    }
                }
                Ok(RawHeader { metadata, tensors })
            }
        }
        d.deserialize_map(HeaderVisitor)
    }
}

/// How stored values become f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Semantics {
    /// The format's own meaning: IEEE/OCP floats (F8_E4M3 is E4M3FN, F4 is OCP E2M1), BOOL as 0/1.
    Standard,
    /// What Loom's `LoadSafetensors` returns: F4 uses Loom's fp4 table; BOOL, F8 and F6 are refused.
    Loom,
}

/// Decodes raw little-endian tensor bytes to f32; sub-byte dtypes are packed LSB-first (F4: element 2k in the low nibble).
pub fn decode(dtype: Dtype, bytes: &[u8], semantics: Semantics) -> Result<Vec<f32>> {
    decode_inner(dtype, bytes, semantics).map_err(|msg| LoomError::Unsupported(format!("{dtype}: {msg}")))
}

fn decode_inner(dtype: Dtype, bytes: &[u8], semantics: Semantics) -> std::result::Result<Vec<f32>, String> {
    let bits = dtype.bitsize();
    if !(bytes.len() as u64 * 8).is_multiple_of(bits as u64) {
        return Err(format!("{} bytes do not hold a whole number of elements", bytes.len()));
    }
    let loom = semantics == Semantics::Loom;
    macro_rules! le {
        ($t:ty, $n:expr) => {
            bytes
                .chunks_exact($n)
                .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size")) as f32)
                .collect()
        };
    }
    let out = match dtype {
        Dtype::F64 => le!(f64, 8),
        Dtype::F32 => le!(f32, 4),
        Dtype::I64 => le!(i64, 8),
        Dtype::U64 => le!(u64, 8),
        Dtype::I32 => le!(i32, 4),
        Dtype::U32 => le!(u32, 4),
        Dtype::I16 => le!(i16, 2),
        Dtype::U16 => le!(u16, 2),
        Dtype::I8 => bytes.iter().map(|&b| b as i8 as f32).collect(),
        Dtype::U8 => bytes.iter().map(|&b| b as f32).collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F4 => {
            let table: [f32; 16] = if loom {
                FP4_TABLE
            } else {
                std::array::from_fn(|c| minifloat(c as u32, 2, 1, 1))
            };
            bytes
                .iter()
                .flat_map(|&b| [table[usize::from(b & 0xF)], table[usize::from(b >> 4)]])
                .collect()
        }
        _ if loom => return Err("Loom's safetensors reader rejects this dtype".into()),
        Dtype::BOOL => bytes.iter().map(|&b| f32::from(u8::from(b != 0))).collect(),
        Dtype::F8_E4M3 => bytes
            .iter()
            .map(|&b| {
                if b & 0x7F == 0x7F {
                    f32::NAN
                } else {
                    minifloat(u32::from(b), 4, 3, 7)
                }
            })
            .collect(),
        // E5M2 is the top byte of an IEEE half.
        Dtype::F8_E5M2 => bytes
            .iter()
            .map(|&b| half::f16::from_bits(u16::from(b) << 8).to_f32())
            .collect(),
        Dtype::F8_E8M0 => bytes
            .iter()
            .map(|&b| match b {
                0xFF => f32::NAN,
                0 => f32::from_bits(0x0040_0000), // 2^-127, an f32 subnormal
                e => f32::from_bits(u32::from(e) << 23),
            })
            .collect(),
        Dtype::F6_E2M3 => unpack6(bytes).map(|c| minifloat(c, 2, 3, 1)).collect(),
        Dtype::F6_E3M2 => unpack6(bytes).map(|c| minifloat(c, 3, 2, 3)).collect(),
        _ => return Err("dtype not supported".into()),
    };
    Ok(out)
}

/// Value of a finite-only minifloat code (sign bit above `ebits` exponent and `mbits` mantissa bits).
fn minifloat(code: u32, ebits: u32, mbits: u32, bias: i32) -> f32 {
    let sign = if code >> (ebits + mbits) & 1 == 1 { -1.0 } else { 1.0 };
    let e = ((code >> mbits) & ((1 << ebits) - 1)) as i32;
    let m = (code & ((1 << mbits) - 1)) as f32;
    let scale = (1u32 << mbits) as f32;
    let v = if e == 0 {
        m / scale * 2f32.powi(1 - bias)
    } else {
        (1.0 + m / scale) * 2f32.powi(e - bias)
    };
    sign * v
}

/// 6-bit codes packed LSB-first: 3 bytes hold 4 codes (assumed convention; the format does not define one).
fn unpack6(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes.chunks_exact(3).flat_map(|c| {
        let w = u32::from(c[0]) | u32::from(c[1]) << 8 | u32::from(c[2]) << 16;
        [w & 0x3F, (w >> 6) & 0x3F, (w >> 12) & 0x3F, (w >> 18) & 0x3F]
    })
}

/// A zero-copy view of one tensor of a [`SafetensorsFile`].
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    info: &'a TensorInfo,
    bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// Header entry of the tensor.
    pub fn info(&self) -> &'a TensorInfo {
        self.info
    }

    /// Tensor name.
    pub fn name(&self) -> &'a str {
        &self.info.name
    }

    /// Element type.
    pub fn dtype(&self) -> Dtype {
        self.info.dtype
    }

    /// Dimensions.
    pub fn shape(&self) -> &'a [u64] {
        &self.info.shape
    }

    /// The raw stored bytes (little-endian), borrowed from the file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Decodes the values to f32.
    pub fn to_f32(&self, semantics: Semantics) -> Result<Vec<f32>> {
        decode_inner(self.info.dtype, self.bytes, semantics).map_err(|msg| {
            LoomError::Unsupported(format!(
                "tensor {:?} of dtype {}: {msg}",
                self.info.name, self.info.dtype
            ))
        })
    }
}

/// A whole safetensors file over any byte container: a `Vec<u8>`, a `&[u8]`, or natively a memory map.
#[derive(Debug)]
pub struct SafetensorsFile<B = Vec<u8>> {
    header: SafetensorsHeader,
    bytes: B,
}

impl<B: AsRef<[u8]>> SafetensorsFile<B> {
    /// Validates the header and that the data section ends exactly at the end of `bytes`.
    pub fn from_bytes(bytes: B) -> Result<Self> {
        let all = bytes.as_ref();
        let header = inspect(all)?;
        let available = all.len() as u64;
        if available < header.file_len() {
            let first_short = header.tensors.iter().find(|t| t.absolute.1 > available);
            let what = match first_short {
                Some(t) => format!("safetensors tensor {:?}", t.name),
                None => "safetensors data".into(),
            };
            return Err(LoomError::Truncated {
                what,
                needed: header.file_len(),
                available,
            });
        }
        if available > header.file_len() {
            return Err(LoomError::Safetensors(format!(
                "{} bytes after the end of the last tensor (the data must end the file)",
                available - header.file_len()
            )));
        }
        Ok(SafetensorsFile { header, bytes })
    }

    /// The validated header.
    pub fn header(&self) -> &SafetensorsHeader {
        &self.header
    }

    /// The whole file's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let info = self.header.tensor(name).ok_or_else(|| LoomError::UnknownName {
            kind: "safetensors tensor",
            name: name.to_string(),
        })?;
        Ok(self.view(info))
    }

    /// All tensors, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> + '_ {
        self.header.tensors.iter().map(|info| self.view(info))
    }

    fn view<'a>(&'a self, info: &'a TensorInfo) -> TensorView<'a> {
        // In range: `from_bytes` checked that the file is exactly `file_len` long.
        let (s, e) = info.absolute;
        let bytes = &self.bytes.as_ref()[s as usize..e as usize];
        TensorView { info, bytes }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl SafetensorsFile<memmap2::Mmap> {
    /// Memory-maps `path`; only the pages of the header and of the tensors read are touched.
    ///
    /// As with any memory map, the file must not be modified while it is open.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |e: std::io::Error| LoomError::Io(format!("{}: {e}", path.display()));
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; the caller is told not to modify the file while it is open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        SafetensorsFile::from_bytes(map)
    }
}

/// One tensor to write: name, shape and row-major f32 values.
#[derive(Clone, Copy, Debug)]
pub struct TensorData<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Dimensions; their product must equal `values.len()`.
    pub shape: &'a [u64],
    /// Values, row-major.
    pub values: &'a [f32],
}

fn check_items<'a>(tensors: &[TensorData<'a>]) -> Result<Vec<TensorData<'a>>> {
    let mut sorted = tensors.to_vec();
    sorted.sort_by(|a, b| a.name.cmp(b.name));
    for (i, t) in sorted.iter().enumerate() {
        if t.name == "__metadata__" {
            return Err(LoomError::InvalidInput("a tensor cannot be named __metadata__".into()));
        }
        if i > 0 && sorted[i - 1].name == t.name {
            return Err(LoomError::InvalidInput(format!("tensor {:?} given twice", t.name)));
        }
        let n = t.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if n != Some(t.values.len() as u64) {
            return Err(LoomError::InvalidInput(format!(
                "tensor {:?}: shape {:?} does not match {} values",
                t.name,
                t.shape,
                t.values.len()
            )));
        }
    }
    Ok(sorted)
}

fn push_shape_offsets(header: &mut String, dtype: Dtype, shape: &[u64], start: usize, end: usize) {
    use fmt::Write;
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let _ = write!(
        header,
        "{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{start},{end}]}}",
        dims.join(",")
    );
}

/// Writes a safetensors file of F32, F16 or BF16 tensors (rounded to nearest) with an optional `__metadata__` map.
///
/// The layout is the `safetensors` crate's (`serialize`): tensors ordered by name, header padded with spaces to a
/// multiple of 8; metadata keys are sorted, so the bytes are deterministic.
pub fn write(tensors: &[TensorData<'_>], dtype: Dtype, metadata: &BTreeMap<String, String>) -> Result<Vec<u8>> {
    let width = match dtype {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        _ => {
            return Err(LoomError::Unsupported(format!(
                "writing {dtype} safetensors (F32, F16 and BF16 only)"
            )))
        }
    };
    let sorted = check_items(tensors)?;
    let mut header = String::from("{");
    if !metadata.is_empty() {
        header.push_str("\"__metadata__\":");
        header.push_str(&serde_json::to_string(metadata).map_err(header_err)?);
    }
    let mut offset = 0usize;
    for (i, t) in sorted.iter().enumerate() {
        if i > 0 || !metadata.is_empty() {
            header.push(',');
        }
        header.push_str(&serde_json::to_string(t.name).map_err(header_err)?);
        header.push(':');
        let end = offset + t.values.len() * width;
        push_shape_offsets(&mut header, dtype, t.shape, offset, end);
        offset = end;
    }
    header.push('}');
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for t in &sorted {
        match dtype {
            Dtype::F32 => t.values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Dtype::F16 => t
                .values
                .iter()
                .for_each(|&v| out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes())),
            _ => t
                .values
                .iter()
                .for_each(|&v| out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes())),
        }
    }
    Ok(out)
}

/// Writes F32 tensors exactly as Loom's `SaveSafetensorsToBytes` does: compact header, names sorted, no
/// `__metadata__`, no padding. Data offsets follow the sorted names (Loom's follow Go map order, so for more than
/// one tensor Loom's own files vary from call to call; ours are deterministic).
pub fn write_loom(tensors: &[TensorData<'_>]) -> Result<Vec<u8>> {
    let sorted = check_items(tensors)?;
    let mut header = String::from("{");
    let mut offset = 0usize;
    for (i, t) in sorted.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        super::gojson::write_string(&mut header, t.name);
        header.push(':');
        let end = offset + t.values.len() * 4;
        push_shape_offsets(&mut header, Dtype::F32, t.shape, offset, end);
        offset = end;
    }
    header.push('}');
    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for t in &sorted {
        t.values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minifloat_grids() {
        let e2m1: Vec<f32> = (0..8).map(|c| minifloat(c, 2, 1, 1)).collect();
        assert_eq!(e2m1, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(minifloat(0xF, 2, 1, 1), -6.0);
        // OCP E4M3FN: max normal 448, smallest subnormal 2^-9.
        assert_eq!(minifloat(0x7E, 4, 3, 7), 448.0);
        assert_eq!(minifloat(0x01, 4, 3, 7), 2f32.powi(-9));
        assert_eq!(minifloat(0x38, 4, 3, 7), 1.0);
        // F6: E2M3 max 7.5, E3M2 max 28.
        assert_eq!(minifloat(0x1F, 2, 3, 1), 7.5);
        assert_eq!(minifloat(0x1F, 3, 2, 3), 28.0);
        assert_eq!(minifloat(0x01, 3, 2, 3), 0.0625);
    }

    #[test]
    fn fp8_and_e8m0_standard() {
        let d = |dt, b: &[u8]| decode(dt, b, Semantics::Standard).unwrap();
        let e4 = d(Dtype::F8_E4M3, &[0x7F, 0xFF, 0x7E, 0xFE, 0x08, 0x80]);
        assert!(e4[0].is_nan() && e4[1].is_nan());
        assert_eq!(&e4[2..], &[448.0, -448.0, 2f32.powi(-6), -0.0]);
        let e5 = d(Dtype::F8_E5M2, &[0x7C, 0x7B, 0x01, 0x7D, 0x3C]);
        assert_eq!(&e5[..3], &[f32::INFINITY, 57344.0, 2f32.powi(-16)]);
        assert!(e5[3].is_nan());
        assert_eq!(e5[4], 1.0);
        let e8 = d(Dtype::F8_E8M0, &[127, 128, 0, 254, 255]);
        assert_eq!(&e8[..4], &[1.0, 2.0, 2f32.powi(-127), 2f32.powi(127)]);
        assert!(e8[4].is_nan());
        assert_eq!(d(Dtype::BOOL, &[0, 1, 2]), [0.0, 1.0, 1.0]);
        // 4 E2M3 codes 1, 2, 0x1F, 0x3F packed LSB-first.
        let w: u32 = 1 | 2 << 6 | 0x1F << 12 | 0x3F << 18;
        let f6 = d(Dtype::F6_E2M3, &w.to_le_bytes()[..3]);
        assert_eq!(f6, [0.125, 0.25, 7.5, -7.5]);
    }

    #[test]
    fn loom_rejects_bool_and_f8() {
        for dt in [Dtype::BOOL, Dtype::F8_E4M3, Dtype::F8_E5M2, Dtype::F8_E8M0] {
            assert!(matches!(
                decode(dt, &[0], Semantics::Loom),
                Err(LoomError::Unsupported(_))
            ));
        }
        assert_eq!(
            decode(Dtype::F4, &[0x61], Semantics::Loom).unwrap(),
            [0.75, f32::INFINITY]
        );
        assert_eq!(decode(Dtype::F4, &[0x61], Semantics::Standard).unwrap(), [0.5, 4.0]);
    }
}
