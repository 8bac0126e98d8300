//! llama.cpp's (ggml's) Q4_0, Q4_1 and Q8_0 blocks: the CPU twin of the GPU block kernels. Not Loom's Q4_0
//! (see [`super::q4_0`]), which keeps f32 scales apart from the nibbles and packs the low nibble first.
//!
//! Every block covers 32 consecutive elements and starts with an IEEE half scale `d`:
//! - Q4_0, 18 bytes: `f16 d | u8 qs[16]`; element `j` is the low nibble of `qs[j]`, element `j+16` its high
//!   nibble; value `(q − 8)·d`.
//! - Q4_1, 20 bytes: `f16 d | f16 m | u8 qs[16]`, nibbles as Q4_0; value `q·d + m`.
//! - Q8_0, 34 bytes: `f16 d | i8 qs[32]`; value `q·d`.
//!
//! The arithmetic is gguf-py's (`gguf.quants`, llama.cpp's reference Python) in float32, so the values are
//! bit-identical to `gguf.quants.dequantize` (checked against vectors in `testdata/ggml-blocks/`).

use crate::error::{LoomError, Result};

/// Elements per ggml block.
pub const BLOCK: usize = 32;

/// A ggml block type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    Q4_0,
    Q4_1,
    Q8_0,
}

impl GgmlType {
    /// All block types here.
    pub const ALL: [GgmlType; 3] = [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0];

    /// Bytes per block of 32 elements.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q8_0 => 34,
        }
    }

    /// The name llama.cpp gives the type (`GGMLQuantizationType`).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q8_0 => "Q8_0",
        }
    }

    /// The ggml type id (as in GGUF tensor infos).
    pub fn ggml_id(self) -> u32 {
        match self {
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q8_0 => 8,
        }
    }

    /// Bytes holding `n` elements: whole blocks, the last one padded (`None` on overflow).
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        n.div_ceil(BLOCK).checked_mul(self.block_bytes())
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn half(lo: u8, hi: u8) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

/// Dequantizes the first `n` elements of `bytes` (whole blocks of type `t`), as `gguf.quants.dequantize` does.
pub fn dequantize(t: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let bb = t.block_bytes();
    if !bytes.len().is_multiple_of(bb) || bytes.len() / bb * BLOCK < n {
        return Err(LoomError::InvalidNetwork(format!(
            "{t}: {} bytes are not whole blocks holding {n} elements",
            bytes.len()
        )));
    }
    let mut out = Vec::with_capacity(n.next_multiple_of(BLOCK));
    for block in bytes.chunks_exact(bb).take(n.div_ceil(BLOCK)) {
        let d = half(block[0], block[1]);
        match t {
            GgmlType::Q4_0 => {
                let qs = &block[2..18];
                out.extend(qs.iter().map(|q| d * (f32::from(q & 0xF) - 8.0)));
                out.extend(qs.iter().map(|q| d * (f32::from(q >> 4) - 8.0)));
            }
            GgmlType::Q4_1 => {
                let m = half(block[2], block[3]);
                let qs = &block[4..20];
                out.extend(qs.iter().map(|q| d * f32::from(q & 0xF) + m));
                out.extend(qs.iter().map(|q| d * f32::from(q >> 4) + m));
            }
            GgmlType::Q8_0 => out.extend(block[2..34].iter().map(|q| f32::from(*q as i8) * d)),
        }
    }
    out.truncate(n);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibble_order_and_offsets() {
        // d = 0.5 (0x3800); qs[0] = 0x9A: element 0 = (0xA − 8)·d = 1, element 16 = (9 − 8)·d = 0.5.
        let mut b = vec![0x00, 0x38];
        b.push(0x9A);
        b.extend([0x88; 15]);
        let v = dequantize(GgmlType::Q4_0, &b, 32).unwrap();
        assert_eq!((v[0], v[16], v[1]), (1.0, 0.5, 0.0));
        // Q4_1: d = 0.5, m = -1 (0xBC00): q·d + m.
        let mut b = vec![0x00, 0x38, 0x00, 0xBC, 0x9A];
        b.extend([0; 15]);
        let v = dequantize(GgmlType::Q4_1, &b, 32).unwrap();
        assert_eq!((v[0], v[16], v[1]), (4.0, 3.5, -1.0));
        // Q8_0: signed bytes.
        let mut b = vec![0x00, 0x38, 0xFE, 0x03];
        b.extend([0; 30]);
        let v = dequantize(GgmlType::Q8_0, &b, 3).unwrap();
        assert_eq!(v, vec![-1.0, 1.5, 0.0]);
        assert!(dequantize(GgmlType::Q8_0, &b[..33], 3).is_err());
        assert!(dequantize(GgmlType::Q8_0, &b, 33).is_err());
    }
}
