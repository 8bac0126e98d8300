//! Loom's RMSNorm and LayerNorm layers on the norm op ([`Norm`]): their weights and row rule.

use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::{storage_f32, u32_dim};
use crate::gpu::Recorder;
use crate::gpu::{Gpu, GpuTensor, Norm, Rows, LAYER_NORM_EPS, RMS_NORM_EPS};
use crate::network::{Layer, LayerType};

/// A norm layer's parameters on the GPU: γ (then β for LayerNorm), and how many γ values there are.
pub struct NormWeights {
    rms: bool,
    params: usize,
    weights: wgpu::Buffer,
}

impl Norm {
    /// Uploads a Loom RMSNorm or LayerNorm layer's γ (and β) once.
    pub async fn prepare(gpu: &Gpu, layer: &Layer) -> Result<NormWeights> {
        let rms = match layer.layer_type {
            LayerType::RMSNorm => true,
            LayerType::LayerNorm => false,
            other => return Err(LoomError::InvalidInput(format!("{other} is not a norm layer"))),
        };
        let w = layer
            .weights
            .as_ref()
            .ok_or_else(|| LoomError::InvalidNetwork(format!("the {} layer has no weights", layer.layer_type)))?
            .active(layer.dtype);
        Ok(NormWeights {
            rms,
            params: if rms { w.len() } else { w.len() / 2 },
            weights: storage_f32(gpu, "norm weights", &w, w.len()).await?,
        })
    }

    /// Records the layer on `x` with the CPU's row rule (rows of `output_height`, else the input split into
    /// `shape[0]` rows) and its epsilons; the output has `x`'s shape.
    pub fn encode_layer(
        &self,
        rec: &mut Recorder,
        layer: &Layer,
        weights: &NormWeights,
        x: &GpuTensor,
    ) -> Result<GpuTensor> {
        let len = x.len();
        let n = if layer.output_height > 0 {
            usize::try_from(layer.output_height).unwrap_or(usize::MAX)
        } else {
            len / x.batch().max(1)
        };
        let kind = if weights.rms { "RMSNorm" } else { "LayerNorm" };
        if n == 0 || !len.is_multiple_of(n) || n > weights.params {
            return Err(LoomError::InvalidInput(format!(
                "{kind} cannot normalise {len} values in rows of {n} with {} parameters",
                weights.params
            )));
        }
        let rows = u32_dim(len / n, "norm rows")?;
        let n32 = u32_dim(n, "norm row length")?;
        let y = GpuTensor::scratch(rec, x.shape.clone())?;
        let (xr, wb, yr) = (
            Rows::new(&x.buffer, rows, n32),
            &weights.weights,
            Rows::new(&y.buffer, rows, n32),
        );
        if weights.rms {
            self.encode_rms(rec, xr, wb, yr, 1, RMS_NORM_EPS)?;
        } else {
            let beta = u32_dim(weights.params, "LayerNorm β offset")?;
            self.encode_layer_norm(rec, xr, wb, yr, beta, LAYER_NORM_EPS)?;
        }
        Ok(y)
    }

    /// One-shot forward of a Loom RMSNorm or LayerNorm layer on `x` (uploads the weights and the input, reads back).
    pub async fn forward(&self, gpu: &Gpu, layer: &Layer, x: &Tensor) -> Result<Tensor> {
        let weights = Norm::prepare(gpu, layer).await?;
        let xb = GpuTensor::upload(gpu, x).await?;
        let mut rec = Recorder::new(gpu);
        let y = self.encode_layer(&mut rec, layer, &weights, &xb)?;
        let mut data: Vec<f32> = bytemuck::pod_collect_to_vec(&gpu.submit_and_read(&mut rec, &y.buffer).await?);
        data.truncate(y.len());
        Tensor::new(data, y.shape)
    }
}
