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
            gpu.queue.write_buffer(&self.buffer, 0, bytemuck::cast_slice(data));
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
