//! The 21 Loom dtypes: names, aliases and sizes (spec §1), codecs (§2–4) and Loom's Q4_0 blocks (§8). llama.cpp's
//! blocks are in [`crate::quant`].

mod codec;
mod minifloat;
pub mod q4_0;

pub use codec::{auto_scale, dequantize, pack_codes, quantize, unpack, unpack_codes};
pub use minifloat::{e4m3_decode, e4m3_trunc, e5m2_decode, e5m2_trunc, f16_trunc, FP4_TABLE};

use crate::error::{LoomError, Result};

/// A Loom weight dtype. The discriminant is Loom's numeric id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum DType {
    Float64 = 0,
    Float32 = 1,
    Float16 = 2,
    BFloat16 = 3,
    Fp8E4M3 = 4,
    Fp8E5M2 = 5,
    Int64 = 6,
    Int32 = 7,
    Int16 = 8,
    Int8 = 9,
    Uint64 = 10,
    Uint32 = 11,
    Uint16 = 12,
    Uint8 = 13,
    Int4 = 14,
    Uint4 = 15,
    Fp4 = 16,
    Int2 = 17,
    Uint2 = 18,
    Ternary = 19,
    Binary = 20,
}

impl DType {
    /// All dtypes in id order.
    pub const ALL: [DType; 21] = [
        DType::Float64,
        DType::Float32,
        DType::Float16,
        DType::BFloat16,
        DType::Fp8E4M3,
        DType::Fp8E5M2,
        DType::Int64,
        DType::Int32,
        DType::Int16,
        DType::Int8,
        DType::Uint64,
        DType::Uint32,
        DType::Uint16,
        DType::Uint8,
        DType::Int4,
        DType::Uint4,
        DType::Fp4,
        DType::Int2,
        DType::Uint2,
        DType::Ternary,
        DType::Binary,
    ];

    /// The string Loom writes (`DType.String()`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Float64 => "float64",
            DType::Float32 => "float32",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Fp8E4M3 => "fp8e4m3",
            DType::Fp8E5M2 => "fp8e5m2",
            DType::Int64 => "int64",
            DType::Int32 => "int32",
            DType::Int16 => "int16",
            DType::Int8 => "int8",
            DType::Uint64 => "uint64",
            DType::Uint32 => "uint32",
            DType::Uint16 => "uint16",
            DType::Uint8 => "uint8",
            DType::Int4 => "int4",
            DType::Uint4 => "uint4",
            DType::Fp4 => "fp4",
            DType::Int2 => "int2",
            DType::Uint2 => "uint2",
            DType::Ternary => "ternary",
            DType::Binary => "binary",
        }
    }

    /// Parses a written name or one of Loom's aliases, case-insensitively.
    ///
    /// Loom's `ParseDType` turns unknown strings into float32; we refuse them instead, so that a typo never
    /// silently changes a network.
    pub fn parse(s: &str) -> Result<DType> {
        let upper = s.to_ascii_uppercase();
        let dt = match upper.as_str() {
            "FLOAT64" | "FP64" | "F64" => DType::Float64,
            "FLOAT32" | "FP32" | "F32" => DType::Float32,
            "FLOAT16" | "FP16" | "F16" => DType::Float16,
            "BFLOAT16" | "BF16" => DType::BFloat16,
            "FP8E4M3" | "FP8" => DType::Fp8E4M3,
            "FP8E5M2" => DType::Fp8E5M2,
            "INT64" | "I64" => DType::Int64,
            "INT32" | "I32" => DType::Int32,
            "INT16" | "I16" => DType::Int16,
            "INT8" | "I8" => DType::Int8,
            "UINT64" | "U64" => DType::Uint64,
            "UINT32" | "U32" => DType::Uint32,
            "UINT16" | "U16" => DType::Uint16,
            "UINT8" | "U8" => DType::Uint8,
            "INT4" => DType::Int4,
            "UINT4" => DType::Uint4,
            "FP4" | "F4" => DType::Fp4,
            "INT2" => DType::Int2,
            "UINT2" => DType::Uint2,
            "TERNARY" => DType::Ternary,
            "BINARY" => DType::Binary,
            _ => return Err(LoomError::UnknownDType(s.to_string())),
        };
        Ok(dt)
    }

    /// Loom's numeric id.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// The dtype with Loom's numeric id, if any.
    pub fn from_id(id: u8) -> Option<DType> {
        DType::ALL.get(id as usize).copied()
    }

    /// Bits per element in Loom's native packing.
    pub fn bits(self) -> usize {
        match self {
            DType::Float64 | DType::Int64 | DType::Uint64 => 64,
            DType::Float32 | DType::Int32 | DType::Uint32 => 32,
            DType::Float16 | DType::BFloat16 | DType::Int16 | DType::Uint16 => 16,
            DType::Int8 | DType::Uint8 | DType::Fp8E4M3 | DType::Fp8E5M2 => 8,
            DType::Int4 | DType::Uint4 | DType::Fp4 => 4,
            DType::Int2 | DType::Uint2 | DType::Ternary => 2,
            DType::Binary => 1,
        }
    }

    /// Bytes Loom's native packing writes for `n` elements (`None` on overflow).
    pub fn packed_len(self, n: usize) -> Option<usize> {
        let bits = self.bits();
        if bits >= 8 {
            n.checked_mul(bits / 8)
        } else {
            let per_byte = 8 / bits;
            Some(n / per_byte + usize::from(!n.is_multiple_of(per_byte)))
        }
    }

    /// Elements that decoding `bytes` native bytes yields, padding included (spec §4).
    pub fn unpacked_len(self, bytes: usize) -> usize {
        let bits = self.bits();
        if bits >= 8 {
            bytes / (bits / 8)
        } else {
            bytes * (8 / bits)
        }
    }

    /// Auto-scale divisor `D` (spec §1); `None` for float32 (no auto-scale) and binary (mean-abs).
    pub fn scale_divisor(self) -> Option<f32> {
        match self {
            DType::Float32 | DType::Binary => None,
            DType::Int4 | DType::Uint4 => Some(7.0),
            DType::Fp4 => Some(3.0),
            DType::Int2 | DType::Uint2 | DType::Ternary => Some(1.0),
            _ => Some(127.0),
        }
    }

    /// True for the dtypes whose dequantized values are exactly the float32 master
    /// (no information lost when converting a float32 network to it).
    pub fn is_lossless_from_f32(self) -> bool {
        matches!(self, DType::Float32 | DType::Float64)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = LoomError;
    fn from_str(s: &str) -> Result<DType> {
        DType::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_ids_are_in_order() {
        for (i, dt) in DType::ALL.iter().enumerate() {
            assert_eq!(dt.id() as usize, i);
            assert_eq!(DType::parse(dt.name()).unwrap(), *dt);
            assert_eq!(DType::parse(&dt.name().to_uppercase()).unwrap(), *dt);
        }
        assert_eq!(DType::parse("fp8").unwrap(), DType::Fp8E4M3);
        assert_eq!(DType::parse("Bf16").unwrap(), DType::BFloat16);
        // welvet's Python names are not Loom aliases (Loom would silently read them as float32).
        assert!(matches!(DType::parse("fp8_e4m3"), Err(LoomError::UnknownDType(_))));
    }

    #[test]
    fn packed_lengths() {
        assert_eq!(DType::Int4.packed_len(15), Some(8));
        assert_eq!(DType::Ternary.packed_len(15), Some(4));
        assert_eq!(DType::Binary.packed_len(15), Some(2));
        assert_eq!(DType::Float64.packed_len(15), Some(120));
        assert_eq!(DType::Float64.packed_len(usize::MAX), None);
        assert_eq!(DType::Int2.unpacked_len(4), 16);
    }
}
