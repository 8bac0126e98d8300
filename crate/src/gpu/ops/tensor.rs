//! Activations that stay on the GPU between layers, so a forward pass records every dispatch into one command
//! encoder and reads back once at the end.

use super::kernel::{check_binding, Recorder};
use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;

/// A float32 tensor in a storage buffer, with its shape (row-major, batch first, as [`Tensor`]).
#[derive(Clone, Debug)]
pub struct GpuTensor {
    pub buffer: wgpu::Buffer,
    pub shape: Vec<usize>,
}

impl GpuTensor {
    /// Number of values.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Batch size: the first dimension (Loom's convention).
    pub fn batch(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }

    /// Uploads `t`.
    pub async fn upload(gpu: &Gpu, t: &Tensor) -> Result<GpuTensor> {
        check_binding(gpu, "activation", 4 * t.data.len() as u64)?;
        let buffer = gpu.upload("activation", bytemuck::cast_slice(&t.data)).await?;
        Ok(GpuTensor {
            buffer,
            shape: t.shape.clone(),
        })
    }

    /// An activation of `shape` for a kernel to write, created without waiting (so encoding stays synchronous):
    /// the caller wraps a whole forward pass in one out-of-memory error scope. From a recorder's arena, the buffer
    /// is the one the previous recording of that shape used, holding its values: a kernel must write every value
    /// of its output.
    pub fn scratch(rec: &mut Recorder, shape: Vec<usize>) -> Result<GpuTensor> {
        let n = shape
            .iter()
            .try_fold(1usize, |a, d| a.checked_mul(*d))
            .ok_or_else(|| LoomError::InvalidInput(format!("activation shape {shape:?} overflows")))?;
        let bytes = (4 * n as u64).max(4);
        check_binding(rec.gpu(), "activation", bytes)?;
        Ok(rec.output_tensor(shape, bytes))
    }

    /// Queues writing `data` (exactly [`GpuTensor::len`] values) into the buffer, ahead of the next submit.
    pub fn write(&self, gpu: &Gpu, data: &[f32]) -> Result<()> {
        if data.len() != self.len() {
            return Err(LoomError::InvalidInput(format!(
                "{} values for an activation of shape {:?}",
                data.len(),
                self.shape
            )));
        }
        if !data.is_empty() {
            gpu.write_buffer(&self.buffer, 0, bytemuck::cast_slice(data));
        }
        Ok(())
    }

    /// Reads the values back (submits what is queued and waits).
    pub async fn read(&self, gpu: &Gpu) -> Result<Tensor> {
        let mut data = gpu.read_f32(&self.buffer).await?;
        data.truncate(self.len());
        Tensor::new(data, self.shape.clone())
    }
}

impl GpuTensor {
    /// The tensor as rows of its last dimension (a scalar or a vector is one row).
    pub fn rows(&self) -> Rows<'_> {
        let cols = self.shape.last().copied().unwrap_or(1);
        let rows = self.len().checked_div(cols).unwrap_or(0);
        Rows::new(&self.buffer, fit_u32(rows), fit_u32(cols))
    }
}

/// A view of what an op reads or writes: `rows` rows of `cols` 4-byte values (f32, or u32 ids) in a storage
/// buffer, row `r` beginning `(row0 + r)·stride + col0` values in. Ops check a view against its buffer and against
/// what their kernel can address before they record, so a wrong dimension is an error rather than an
/// out-of-bounds access the GPU would quietly clamp.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub rows: u32,
    pub cols: u32,
    pub stride: u32,
    pub row0: u32,
    pub col0: u32,
}

impl<'a> Rows<'a> {
    /// `rows` rows of `cols` values side by side from the start of `buffer`.
    pub fn new(buffer: &'a wgpu::Buffer, rows: u32, cols: u32) -> Rows<'a> {
        Rows {
            buffer,
            rows,
            cols,
            stride: cols,
            row0: 0,
            col0: 0,
        }
    }

    /// Columns `col0..col0 + cols` of each of these rows (q, k or v in a fused q|k|v row).
    pub fn columns(self, col0: u32, cols: u32) -> Rows<'a> {
        Rows {
            col0: self.col0.saturating_add(col0),
            cols,
            ..self
        }
    }

    /// Rows `row0..row0 + rows` of these.
    pub fn slice_rows(self, row0: u32, rows: u32) -> Rows<'a> {
        Rows {
            row0: self.row0.saturating_add(row0),
            rows,
            ..self
        }
    }

    /// Number of values.
    pub fn len(&self) -> u64 {
        u64::from(self.rows) * u64::from(self.cols)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses a view whose rows overlap (columns past the stride) or that reaches past its buffer.
    pub fn check(&self, what: &str) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let (stride, col0, cols) = (u64::from(self.stride), u64::from(self.col0), u64::from(self.cols));
        let last_row = u64::from(self.row0) + u64::from(self.rows) - 1;
        let end = last_row * stride + col0 + cols;
        if self.rows > 1 && col0 + cols > stride {
            return Err(LoomError::InvalidInput(format!(
                "{what}: {self} overlap (columns past the stride)"
            )));
        }
        if 4 * end > self.buffer.size() {
            return Err(LoomError::InvalidInput(format!(
                "{what}: {self} do not fit a buffer of {} bytes",
                self.buffer.size()
            )));
        }
        Ok(())
    }

    /// [`Rows::check`], and refuses a view that is not its buffer's first `len` values in order (for the kernels
    /// that address values by a flat index); returns that `len`.
    pub fn flat(&self, what: &str) -> Result<u32> {
        self.check(what)?;
        let packed = self.row0 == 0 && self.col0 == 0 && (self.stride == self.cols || self.rows <= 1);
        if !packed && !self.is_empty() {
            return Err(LoomError::InvalidInput(format!(
                "{what} takes values side by side from the start of a buffer, not {self}"
            )));
        }
        u32::try_from(self.len())
            .map_err(|_| LoomError::Unsupported(format!("{what}: {} values do not fit a GPU index", self.len())))
    }
}

impl std::fmt::Display for Rows<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let Rows {
            rows,
            cols,
            stride,
            row0,
            col0,
            ..
        } = self;
        write!(
            f,
            "{rows} rows of {cols} values (stride {stride}, from row {row0}, column {col0})"
        )
    }
}

/// Refuses a weight buffer (γ, a bias row, a lookup table) of fewer than `values` 4-byte values.
pub(crate) fn check_values(what: &str, buffer: &wgpu::Buffer, values: u64) -> Result<()> {
    if 4 * values > buffer.size() {
        return Err(LoomError::InvalidInput(format!(
            "{what}: {values} values do not fit a buffer of {} bytes",
            buffer.size()
        )));
    }
    Ok(())
}

fn fit_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Refuses an input and output view unless both are packed and of one shape; returns their rows and columns.
pub(crate) fn same_packed_shape(what: &str, x: &Rows, y: &Rows) -> Result<(u32, u32)> {
    same_shape(what, x, y)?;
    x.flat(what)?;
    y.flat(what)?;
    Ok((x.rows, x.cols))
}

/// Refuses two views of different shapes where an op reads one and writes the other.
pub(crate) fn same_shape(what: &str, a: &Rows, b: &Rows) -> Result<()> {
    if (a.rows, a.cols) != (b.rows, b.cols) {
        return Err(LoomError::InvalidInput(format!(
            "{what}: {} rows of {} in, {} rows of {} out",
            a.rows, a.cols, b.rows, b.cols
        )));
    }
    Ok(())
}
