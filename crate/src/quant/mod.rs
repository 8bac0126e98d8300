//! ggml's tensor types (every type a GGUF file may hold) plus Loom's repacked Q4_0, in one registry:
//! block geometry, bit-exact dequantization ([`dequantize`]) and CPU matrix kernels over blocks as stored
//! ([`matmul`], [`QMatrix`]).
//!
//! Dequantization is gguf-py's (`gguf.quants.dequantize`, llama.cpp's reference Python) in float32, operation
//! for operation, so the values are bit-identical to it (checked against `testdata/ggml-blocks/`).

mod activations;
mod blocks;
mod interleaved;
mod matmul;
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
mod prefill;
#[cfg(target_arch = "x86_64")]
mod simd_avx512;
#[cfg(target_arch = "x86_64")]
mod simd_avx512_prefill;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd_wasm;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd_wasm_prefill;
#[cfg(target_arch = "x86_64")]
mod simd_x86;
#[cfg(target_arch = "x86_64")]
mod simd_x86_16;
#[cfg(target_arch = "x86_64")]
mod simd_x86_prefill;

pub use blocks::CodeGroup;
pub use interleaved::{interleave, interleave_pays};
pub use matmul::{in_pool, matmul, matmul_each, par_chunks, set_simd, set_threads, simd_in_use, QMatrix, Simd};

use crate::error::{LoomError, Result};

/// A ggml tensor type (names as gguf-py's `GGMLQuantizationType`), or [`GgmlType::LoomQ4_0`].
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    /// Loom's Q4_0 repacked per block, in memory only (no GGUF id): 20 bytes = f32 LE scale `s` + 16 bytes where
    /// byte `j` holds element `2j` in its low nibble and `2j+1` in its high nibble, each a 4-bit two's-complement
    /// `q` (−8..7); value `q·s`.
    LoomQ4_0,
    /// Q4_0 with its rows interleaved eight at a time, in memory only (no GGUF id; [`interleave`] makes it): per
    /// group of eight rows, per block of 32 columns, the eight f16 scales then four 32-byte vectors, the 16-bit lane
    /// `2r + t` of vector `m` holding in its nibble `n` row `r`'s code for element `2(4m + n) + t`. The same bytes as
    /// the stored rows; a matrix of it has whole groups of rows.
    Q4_0x8,
    /// Q4_1 with its rows interleaved eight at a time, in memory only: [`GgmlType::Q4_0x8`]'s layout with the eight
    /// f16 minima after the eight scales (the same bytes as the stored rows).
    Q4_1x8,
    /// Q5_0 with its rows interleaved eight at a time, in memory only: [`GgmlType::Q4_0x8`]'s layout with each
    /// block's fifth bits after its codes (bit `p` of lane `2r + t` that of element `2p + t` of row `r`).
    Q5_0x8,
    /// Q5_1 with its rows interleaved eight at a time, in memory only: [`GgmlType::Q5_0x8`]'s layout with the eight
    /// f16 minima after the eight scales.
    Q5_1x8,
    /// Q4_K with its rows interleaved eight at a time, in memory only (no GGUF id; [`interleave`] makes it): per
    /// group of eight rows, per super-block, the eight `d`, the eight `dmin`, the 6-bit scales and minima as bytes
    /// (eight rows of a sub-block together), then each sub-block's codes as [`GgmlType::Q4_0x8`] holds a block's:
    /// 1184 bytes, 148 a row. A matrix of it has whole groups of rows.
    Q4_Kx8,
    /// Q5_K with its rows interleaved eight at a time, in memory only: [`GgmlType::Q4_Kx8`]'s layout with each
    /// sub-block's fifth bits after its codes, as [`GgmlType::Q5_0x8`] keeps them (1440 bytes, 180 a row).
    Q5_Kx8,
    /// Q6_K with its rows interleaved eight at a time, in memory only: per group of eight rows, per super-block, the
    /// eight `d`, the int8 scales (eight rows of a sixteen-element sub-block together), then per 32 elements the low
    /// four bits of the codes as [`GgmlType::Q4_0x8`] holds a block's and their two high bits (1680 bytes, 210 a row,
    /// as stored).
    Q6_Kx8,
}

/// One row of the registry.
struct Info {
    id: Option<u32>,
    name: &'static str,
    block_len: usize,
    block_bytes: usize,
}

const fn info(id: u32, name: &'static str, block_len: usize, block_bytes: usize) -> Info {
    Info {
        id: Some(id),
        name,
        block_len,
        block_bytes,
    }
}

impl GgmlType {
    /// Every type: the 34 GGUF types in id order, then the in-memory ones: [`GgmlType::LoomQ4_0`],
    /// and the interleaved Q4_0x8, Q4_1x8, Q5_0x8, Q5_1x8, Q4_Kx8, Q5_Kx8 and Q6_Kx8.
    pub const ALL: [GgmlType; 42] = {
        use GgmlType::*;
        [
            F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ2_XXS, IQ2_XS, IQ3_XXS,
            IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64, IQ1_M, BF16, TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0,
            LoomQ4_0, Q4_0x8, Q4_1x8, Q5_0x8, Q5_1x8, Q4_Kx8, Q5_Kx8, Q6_Kx8,
        ]
    };

    /// Id, name and block geometry (gguf-py's `GGML_QUANT_SIZES`, except Q8_1 as ggml stores it: two halves and
    /// 32 bytes).
    fn info(self) -> Info {
        use GgmlType::*;
        match self {
            F32 => info(0, "F32", 1, 4),
            F16 => info(1, "F16", 1, 2),
            Q4_0 => info(2, "Q4_0", 32, 18),
            Q4_1 => info(3, "Q4_1", 32, 20),
            Q5_0 => info(6, "Q5_0", 32, 22),
            Q5_1 => info(7, "Q5_1", 32, 24),
            Q8_0 => info(8, "Q8_0", 32, 34),
            Q8_1 => info(9, "Q8_1", 32, 36),
            Q2_K => info(10, "Q2_K", 256, 84),
            Q3_K => info(11, "Q3_K", 256, 110),
            Q4_K => info(12, "Q4_K", 256, 144),
            Q5_K => info(13, "Q5_K", 256, 176),
            Q6_K => info(14, "Q6_K", 256, 210),
            Q8_K => info(15, "Q8_K", 256, 292),
            IQ2_XXS => info(16, "IQ2_XXS", 256, 66),
            IQ2_XS => info(17, "IQ2_XS", 256, 74),
            IQ3_XXS => info(18, "IQ3_XXS", 256, 98),
            IQ1_S => info(19, "IQ1_S", 256, 50),
            IQ4_NL => info(20, "IQ4_NL", 32, 18),
            IQ3_S => info(21, "IQ3_S", 256, 110),
            IQ2_S => info(22, "IQ2_S", 256, 82),
            IQ4_XS => info(23, "IQ4_XS", 256, 136),
            I8 => info(24, "I8", 1, 1),
            I16 => info(25, "I16", 1, 2),
            I32 => info(26, "I32", 1, 4),
            I64 => info(27, "I64", 1, 8),
            F64 => info(28, "F64", 1, 8),
            IQ1_M => info(29, "IQ1_M", 256, 56),
            BF16 => info(30, "BF16", 1, 2),
            TQ1_0 => info(34, "TQ1_0", 256, 54),
            TQ2_0 => info(35, "TQ2_0", 256, 66),
            MXFP4 => info(39, "MXFP4", 32, 17),
            NVFP4 => info(40, "NVFP4", 64, 36),
            Q1_0 => info(41, "Q1_0", 128, 18),
            LoomQ4_0 => Info {
                id: None,
                name: "LoomQ4_0",
                block_len: 32,
                block_bytes: 20,
            },
            // A row's share of its group's bytes, as stored Q4_0.
            Q4_0x8 => Info {
                id: None,
                name: "Q4_0x8",
                block_len: 32,
                block_bytes: 18,
            },
            Q4_1x8 => Info {
                id: None,
                name: "Q4_1x8",
                block_len: 32,
                block_bytes: 20,
            },
            Q5_0x8 => Info {
                id: None,
                name: "Q5_0x8",
                block_len: 32,
                block_bytes: 22,
            },
            Q5_1x8 => Info {
                id: None,
                name: "Q5_1x8",
                block_len: 32,
                block_bytes: 24,
            },
            Q4_Kx8 => Info {
                id: None,
                name: "Q4_Kx8",
                block_len: 256,
                block_bytes: interleaved::Geometry::of(Q4_Kx8).group / interleaved::ROWS,
            },
            Q5_Kx8 => Info {
                id: None,
                name: "Q5_Kx8",
                block_len: 256,
                block_bytes: interleaved::Geometry::of(Q5_Kx8).group / interleaved::ROWS,
            },
            Q6_Kx8 => Info {
                id: None,
                name: "Q6_Kx8",
                block_len: 256,
                block_bytes: interleaved::Geometry::of(Q6_Kx8).group / interleaved::ROWS,
            },
        }
    }

    /// The type with GGUF id `id`.
    pub fn from_id(id: u32) -> Result<GgmlType> {
        GgmlType::ALL
            .into_iter()
            .find(|t| t.id() == Some(id))
            .ok_or_else(|| LoomError::UnsupportedDType(format!("ggml type id {id}")))
    }

    /// The GGUF id; `None` for [`GgmlType::LoomQ4_0`] and the interleaved types, which exist only in memory.
    pub fn id(self) -> Option<u32> {
        self.info().id
    }

    /// The name gguf-py gives the type (`GGMLQuantizationType`); `LoomQ4_0` for Loom's blocks.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Elements per block.
    pub fn block_len(self) -> usize {
        self.info().block_len
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.info().block_bytes
    }

    /// True for the types [`dequantize`] and [`matmul`] handle.
    pub fn can_compute(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16
                | BF16
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q8_0
                | Q4_K
                | Q5_K
                | Q6_K
                | LoomQ4_0
                | Q4_0x8
                | Q4_1x8
                | Q5_0x8
                | Q5_1x8
                | Q4_Kx8
                | Q5_Kx8
                | Q6_Kx8
        )
    }

    /// Whether the type's rows are interleaved eight at a time ([`interleave`]).
    pub fn interleaved(self) -> bool {
        matches!(
            self,
            GgmlType::Q4_0x8
                | GgmlType::Q4_1x8
                | GgmlType::Q5_0x8
                | GgmlType::Q5_1x8
                | GgmlType::Q4_Kx8
                | GgmlType::Q5_Kx8
                | GgmlType::Q6_Kx8
        )
    }

    /// Bytes of a row of `cols` elements: `cols` must be a whole number of blocks.
    pub fn row_bytes(self, cols: usize) -> Result<usize> {
        if !cols.is_multiple_of(self.block_len()) {
            return Err(LoomError::InvalidInput(format!(
                "{self}: a row of {cols} elements is not whole blocks of {}",
                self.block_len()
            )));
        }
        (cols / self.block_len())
            .checked_mul(self.block_bytes())
            .ok_or_else(|| LoomError::InvalidInput(format!("{self}: a row of {cols} elements overflows")))
    }

    /// The error for a type that cannot compute.
    fn unsupported(self) -> LoomError {
        LoomError::UnsupportedDType(format!("computing with ggml {self} blocks"))
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Dequantizes whole blocks of type `t` into `out` (`block_len` values per block), bit-identical to
/// `gguf.quants.dequantize`. Not the interleaved types ([`GgmlType::interleaved`]), whose blocks are not runs of a
/// row's bytes ([`QMatrix::dequantize_row`] takes their rows apart).
pub fn dequantize(t: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    if !t.can_compute() {
        return Err(t.unsupported());
    }
    if t.interleaved() {
        return Err(LoomError::InvalidInput(format!(
            "{t} blocks are eight rows interleaved: dequantize a matrix's rows"
        )));
    }
    let bb = t.block_bytes();
    let blocks = bytes.len() / bb;
    if !bytes.len().is_multiple_of(bb) || blocks.checked_mul(t.block_len()) != Some(out.len()) {
        return Err(LoomError::InvalidInput(format!(
            "{t}: {} bytes are not whole blocks holding {} values",
            bytes.len(),
            out.len()
        )));
    }
    matmul::dequantize_blocks(matmul::Level::current(), t, bytes, out);
    Ok(())
}

/// The stored integer codes of the first `n` elements of whole blocks of type `t` and the groups of shared scale
/// covering them (the last group may reach past `n`); `None` for types without integer codes (floats, and types
/// that cannot compute).
pub fn codes(t: GgmlType, bytes: &[u8], n: usize) -> Option<(Vec<i32>, Vec<CodeGroup>)> {
    let (mut codes, mut groups) = (Vec::new(), Vec::new());
    // At least one block, so that a type without codes says so for n = 0 too.
    for block in bytes
        .chunks_exact(t.block_bytes())
        .take(n.div_ceil(t.block_len()).max(1))
    {
        if !blocks::block_codes(t, block, &mut codes, &mut groups) {
            return None;
        }
    }
    codes.truncate(n);
    let mut covered = 0;
    groups.retain(|g| {
        let keep = covered < n;
        covered += g.len;
        keep
    });
    Some((codes, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_consistent() {
        for t in GgmlType::ALL {
            if let Some(id) = t.id() {
                assert_eq!(GgmlType::from_id(id).unwrap(), t);
            }
            assert!(t.block_bytes() > 0 && t.block_len() > 0, "{t}");
        }
        assert_eq!(GgmlType::ALL.iter().filter(|t| t.id().is_none()).count(), 8);
        assert!(matches!(GgmlType::from_id(4), Err(LoomError::UnsupportedDType(_))));
        assert_eq!(GgmlType::Q4_K.row_bytes(512).unwrap(), 288);
        assert!(GgmlType::Q4_K.row_bytes(100).is_err());
        assert!(GgmlType::F64.row_bytes(usize::MAX).is_err());
    }

    #[test]
    fn branch_free_half_conversion_is_exact_for_every_half() {
        for bits in 0..=u16::MAX {
            let (got, want) = (blocks::half_to_f32(bits), half::f16::from_bits(bits).to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{bits:#06x}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn nibble_order_and_offsets() {
        let deq = |t, b: &[u8]| {
            let mut v = vec![0.0; 32];
            dequantize(t, b, &mut v).map(|()| v)
        };
        // d = 0.5 (0x3800); qs[0] = 0x9A: element 0 = (0xA − 8)·d = 1, element 16 = (9 − 8)·d = 0.5.
        let mut b = vec![0x00, 0x38, 0x9A];
        b.extend([0x88; 15]);
        let v = deq(GgmlType::Q4_0, &b).unwrap();
        assert_eq!((v[0], v[16], v[1]), (1.0, 0.5, 0.0));
        // Q4_1: d = 0.5, m = -1 (0xBC00): q·d + m.
        let mut b = vec![0x00, 0x38, 0x00, 0xBC, 0x9A];
        b.extend([0; 15]);
        let v = deq(GgmlType::Q4_1, &b).unwrap();
        assert_eq!((v[0], v[16], v[1]), (4.0, 3.5, -1.0));
        // Loom's Q4_0: s = 0.5, byte 0 = 0x9A: element 0 = −6·s, element 1 = −7·s.
        let mut b = 0.5f32.to_le_bytes().to_vec();
        b.push(0x9A);
        b.extend([0x17; 15]);
        let v = deq(GgmlType::LoomQ4_0, &b).unwrap();
        assert_eq!((v[0], v[1], v[2], v[3]), (-3.0, -3.5, 3.5, 0.5));
        assert!(deq(GgmlType::LoomQ4_0, &b[..19]).is_err());
        assert!(matches!(deq(GgmlType::Q2_K, &b), Err(LoomError::UnsupportedDType(_))));
    }
}
