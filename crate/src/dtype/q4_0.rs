//! Loom's Q4_0 blocks (spec §8), used by transformer `.entity` files. Not llama.cpp's Q4_0.
//!
//! Payload: `u32 nScales | u32 nPacked | f32 scales[nScales] | u32 packed[nPacked]`, blocks of 32 consecutive
//! elements, scale `maxAbs/7`, signed nibbles with the low nibble first, words padded to `max(512, roundup64)`.

use crate::error::{LoomError, Result};

/// Elements per block.
pub const BLOCK: usize = 32;

/// Number of u32 words Loom allocates for `n_scales` blocks.
pub fn packed_words(n_scales: usize) -> usize {
    (4 * n_scales).div_ceil(64).saturating_mul(64).max(512)
}

/// Packs float32 weights into a Loom Q4_0 blob payload.
pub fn pack(w: &[f32]) -> Vec<u8> {
    let n_scales = w.len().div_ceil(BLOCK);
    let n_packed = packed_words(n_scales);
    let mut scales = Vec::with_capacity(n_scales);
    let mut words = vec![0u32; n_packed];
    for (b, block) in w.chunks(BLOCK).enumerate() {
        let max_abs = block.iter().fold(0f32, |m, x| if x.abs() > m { x.abs() } else { m });
        let s = max_abs / 7.0;
        scales.push(s);
        if s == 0.0 {
            continue;
        }
        for (i, x) in block.iter().enumerate() {
            let q = f64::from(x / s).round().clamp(-8.0, 7.0) as i32;
            let nibble = (q as u32) & 0xF;
            words[4 * b + i / 8] |= nibble << (4 * (i % 8));
        }
    }
    let mut out = Vec::with_capacity(8 + 4 * (n_scales + n_packed));
    out.extend_from_slice(&(n_scales as u32).to_le_bytes());
    out.extend_from_slice(&(n_packed as u32).to_le_bytes());
    scales.iter().for_each(|s| out.extend_from_slice(&s.to_le_bytes()));
    words.iter().for_each(|w| out.extend_from_slice(&w.to_le_bytes()));
    out
}

/// A parsed Q4_0 payload.
#[derive(Clone, Debug, PartialEq)]
pub struct Q4Blocks {
    pub scales: Vec<f32>,
    pub words: Vec<u32>,
}

/// The `(nScales, nPacked)` counts of a payload, checked: both must agree with the byte length, and the words
/// must hold every block. Reads only the 8-byte header.
pub fn counts(bytes: &[u8]) -> Result<(usize, usize)> {
    let header = |i: usize| -> Result<u64> {
        let b = bytes.get(4 * i..4 * i + 4).ok_or_else(|| LoomError::Truncated {
            what: "Q4_0 header".into(),
            needed: 8,
            available: bytes.len() as u64,
        })?;
        Ok(u64::from(u32::from_le_bytes(b.try_into().unwrap())))
    };
    let (n_scales, n_packed) = (header(0)?, header(1)?);
    let needed = 8 + 4 * (n_scales + n_packed);
    if needed != bytes.len() as u64 {
        return Err(LoomError::InvalidNetwork(format!(
            "Q4_0 payload declares {n_scales} scales and {n_packed} words ({needed} bytes) but has {} bytes",
            bytes.len()
        )));
    }
    if n_packed < 4 * n_scales {
        return Err(LoomError::InvalidNetwork(format!(
            "Q4_0 payload has {n_packed} words for {n_scales} blocks"
        )));
    }
    Ok((n_scales as usize, n_packed as usize))
}

/// The blocks of a checked payload as 20-byte records, `f32 scale | 16 bytes of nibbles`
/// (`quant::GgmlType::LoomQ4_0`): the same bytes regrouped, nothing decoded.
pub fn interleaved_blocks(bytes: &[u8]) -> Result<Vec<u8>> {
    let (n_scales, _) = counts(bytes)?;
    let words = 8 + 4 * n_scales;
    let mut out = Vec::with_capacity(20 * n_scales);
    for b in 0..n_scales {
        out.extend_from_slice(&bytes[8 + 4 * b..12 + 4 * b]);
        out.extend_from_slice(&bytes[words + 16 * b..words + 16 * b + 16]);
    }
    Ok(out)
}

impl Q4Blocks {
    /// Parses and checks a payload (see [`counts`]).
    pub fn parse(bytes: &[u8]) -> Result<Q4Blocks> {
        let (n_scales, _) = counts(bytes)?;
        let f = |c: &[u8]| <[u8; 4]>::try_from(c).unwrap();
        let split = 8 + 4 * n_scales;
        Ok(Q4Blocks {
            scales: bytes[8..split]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(f(c)))
                .collect(),
            words: bytes[split..]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(f(c)))
                .collect(),
        })
    }

    /// Dequantizes the first `n` elements (`q·s_b`); `n` is capped at the blocks' capacity.
    pub fn dequantize(&self, n: usize) -> Vec<f32> {
        let n = n.min(self.scales.len() * BLOCK);
        (0..n)
            .map(|i| {
                let nibble = (self.words[i / 8] >> (4 * (i % 8))) & 0xF;
                let q = ((nibble << 28) as i32) >> 28;
                q as f32 * self.scales[i / BLOCK]
            })
            .collect()
    }

    /// Re-encodes to the payload bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 4 * (self.scales.len() + self.words.len()));
        out.extend_from_slice(&(self.scales.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.words.len() as u32).to_le_bytes());
        self.scales.iter().for_each(|s| out.extend_from_slice(&s.to_le_bytes()));
        self.words.iter().for_each(|w| out.extend_from_slice(&w.to_le_bytes()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_padding() {
        assert_eq!(packed_words(3), 512);
        assert_eq!(packed_words(129), 576);
    }

    #[test]
    fn parse_rejects_inconsistent_counts() {
        let mut p = pack(&[1.0; 40]);
        assert!(Q4Blocks::parse(&p).is_ok());
        p.pop();
        assert!(Q4Blocks::parse(&p).is_err());
        assert!(Q4Blocks::parse(&[1, 0, 0]).is_err());
        // Counts that would overflow a naive size computation.
        let hostile = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
        assert!(Q4Blocks::parse(&hostile).is_err());
    }
}
