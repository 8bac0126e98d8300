//! Activations that stay on the GPU between layers, so a forward pass records every dispatch into one command
//! encoder and reads back once at the end.

use std::sync::Arc;

use super::kernel::check_binding;
use super::Gpu;
use crate::cpu::Tensor;
use crate::error::{LoomError, Result};

/// A float32 tensor in a storage buffer, with its shape (row-major, batch first, as [`Tensor`]).
#[derive(Clone, Debug)]
pub struct GpuTensor {
    pub buffer: Arc<wgpu::Buffer>,
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
            buffer: Arc::new(buffer),
            shape: t.shape.clone(),
        })
    }

    /// A new activation of `shape` for a kernel to write, created without waiting (so encoding stays synchronous):
    /// the caller wraps a whole forward pass in one out-of-memory error scope.
    pub fn scratch(gpu: &Gpu, shape: Vec<usize>) -> Result<GpuTensor> {
        let n = shape
            .iter()
            .try_fold(1usize, |a, d| a.checked_mul(*d))
            .ok_or_else(|| LoomError::InvalidInput(format!("activation shape {shape:?} overflows")))?;
        let bytes = (4 * n as u64).max(4);
        check_binding(gpu, "activation", bytes)?;
        let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("activation"),
            size: bytes.next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Ok(GpuTensor {
            buffer: Arc::new(buffer),
            shape,
        })
    }

    /// Reads the values back (submits what is queued and waits).
    pub async fn read(&self, gpu: &Gpu) -> Result<Tensor> {
        let mut data = gpu.read_f32(&self.buffer).await?;
        data.truncate(self.len());
        Tensor::new(data, self.shape.clone())
    }
}
