//! A Loom layer's weights as the GPU kernels read them.

use std::borrow::Cow;

use crate::cpu;
use crate::dtype::DType;
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::storage_f32;
use crate::gpu::{Gpu, Packing};
use crate::network::{f32_bytes, Layer};

/// The weights a layer's forward reads (Loom's `GetActive`), packed as stored: the packing, its bytes and the layer
/// scale. A layer whose dtype version does not exist yet forwards its float32 master, as Loom does. Dense, SwiGLU
/// and MultiHeadAttention read their whole store this way.
pub fn dense_weights(layer: &Layer) -> Result<(Packing, Cow<'_, [u8]>, f32)> {
    let ws = layer
        .weights
        .as_ref()
        .ok_or_else(|| LoomError::InvalidNetwork(format!("the {} layer has no weights", layer.layer_type)))?;
    let dt = layer.dtype;
    match ws.version(dt) {
        Some(bytes) if dt != DType::Float32 => Ok((Packing::Loom(dt), Cow::Borrowed(bytes), ws.scale())),
        _ => {
            let bytes = match ws.native_bytes(DType::Float32) {
                Some(b) => b,
                None => Cow::Owned(f32_bytes(&ws.master_values())),
            };
            Ok((Packing::Loom(DType::Float32), bytes, 1.0))
        }
    }
}

/// A layer's weights as its CPU twin reads them (`GetActive`, f32), for the generic conv, recurrent and KMeans
/// kernels.
pub struct F32Weights {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) count: usize,
}

impl F32Weights {
    pub(crate) async fn upload(gpu: &Gpu, layer: &Layer, path: &str) -> Result<F32Weights> {
        let w = cpu::weights(layer, path, &mut cpu::State::default())?;
        let buffer = storage_f32(gpu, &format!("{path} weights"), &w, w.len()).await?;
        Ok(F32Weights { buffer, count: w.len() })
    }
}
