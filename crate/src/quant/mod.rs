//! TEMPORARY scalar stand-in for the block registry and kernels (replaced by the `quant` branch on merge).
use crate::error::{LoomError, Result};

#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q8_0,
    LoomQ4_0,
}

impl GgmlType {
    pub fn from_id(id: u32) -> Result<GgmlType> {
        Ok(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            30 => GgmlType::BF16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            _ => return Err(LoomError::UnsupportedDType(format!("ggml type id {id}"))),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::LoomQ4_0 => "LoomQ4_0",
        }
    }
    pub fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            _ => 32,
        }
    }
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 | GgmlType::LoomQ4_0 => 20,
            GgmlType::Q8_0 => 34,
        }
    }
    pub fn can_compute(self) -> bool {
        true
    }
    pub fn row_bytes(self, cols: usize) -> Result<usize> {
        if !cols.is_multiple_of(self.block_len()) {
            return Err(LoomError::InvalidNetwork(format!("{} rows of {cols}", self.name())));
        }
        (cols / self.block_len())
            .checked_mul(self.block_bytes())
            .ok_or_else(|| LoomError::InvalidNetwork("overflow".into()))
    }
}

fn h(b: &[u8]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

pub fn dequantize(t: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let bb = t.block_bytes();
    let bl = t.block_len();
    if !bytes.len().is_multiple_of(bb) || bytes.len() / bb * bl != out.len() {
        return Err(LoomError::InvalidNetwork("dequantize: length".into()));
    }
    for (blk, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bl)) {
        match t {
            GgmlType::F32 => o[0] = f32::from_le_bytes(blk.try_into().unwrap()),
            GgmlType::F16 => o[0] = h(blk),
            GgmlType::BF16 => o[0] = f32::from_bits(u32::from(u16::from_le_bytes([blk[0], blk[1]])) << 16),
            GgmlType::Q4_0 => {
                let d = h(blk);
                for j in 0..16 {
                    o[j] = d * (f32::from(blk[2 + j] & 15) - 8.0);
                    o[j + 16] = d * (f32::from(blk[2 + j] >> 4) - 8.0);
                }
            }
            GgmlType::Q4_1 => {
                let (d, m) = (h(blk), h(&blk[2..]));
                for j in 0..16 {
                    o[j] = d * f32::from(blk[4 + j] & 15) + m;
                    o[j + 16] = d * f32::from(blk[4 + j] >> 4) + m;
                }
            }
            GgmlType::Q8_0 => {
                let d = h(blk);
                for j in 0..32 {
                    o[j] = f32::from(blk[2 + j] as i8) * d;
                }
            }
            GgmlType::LoomQ4_0 => {
                let s = f32::from_le_bytes(blk[..4].try_into().unwrap());
                for j in 0..16 {
                    let b = blk[4 + j];
                    o[2 * j] = f32::from(((b << 4) as i8) >> 4) * s;
                    o[2 * j + 1] = f32::from((b as i8) >> 4) * s;
                }
            }
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
pub struct QMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl<'a> QMatrix<'a> {
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<QMatrix<'a>> {
        let rb = ty.row_bytes(cols)?;
        if rb.checked_mul(rows) != Some(data.len()) {
            return Err(LoomError::InvalidNetwork("QMatrix: length".into()));
        }
        Ok(QMatrix { ty, rows, cols, data })
    }
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.data.len() / self.rows;
        &self.data[r * rb..(r + 1) * rb]
    }
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<()> {
        dequantize(self.ty, self.row(r), out)
    }
}

pub fn matmul(w: &QMatrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    let mut row = vec![0f32; w.cols];
    for r in 0..w.rows {
        w.dequantize_row(r, &mut row)?;
        for t in 0..n {
            let xs = &x[t * w.cols..(t + 1) * w.cols];
            y[t * w.rows + r] = row.iter().zip(xs).map(|(a, b)| a * b).sum();
        }
    }
    Ok(())
}

pub fn set_threads(_n: usize) {}
