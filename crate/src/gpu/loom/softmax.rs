//! Loom's Softmax layer on the softmax op ([`Softmax`]): its variant and row rule.

use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::u32_dim;
use crate::gpu::ops::SoftmaxVariant;
use crate::gpu::Recorder;
use crate::gpu::{Gpu, GpuTensor, Softmax};
use crate::network::{Layer, LayerType, SoftmaxType};

impl Softmax {
    /// Records a Loom Softmax layer on `x` into a new activation of the same shape: the whole tensor as one row, or
    /// rows of `softmax_cols` for Grid and Hierarchical (a shorter last row when they do not divide the length);
    /// Temperature divides by `temperature` (1 when unset); Sparse is sparsemax, Entmax blends with α =
    /// `entmax_alpha` (1.5 when unset); Standard, Masked, Adaptive and Mixture are plain softmax. Gumbel adds
    /// unseeded noise in Loom, so no output can match it: refused.
    pub fn encode_layer(&self, rec: &mut Recorder, layer: &Layer, path: &str, x: &GpuTensor) -> Result<GpuTensor> {
        if layer.layer_type != LayerType::Softmax {
            return Err(LoomError::InvalidInput(format!(
                "{path}: {} is not a Softmax layer",
                layer.layer_type
            )));
        }
        let variant = match layer.softmax_type {
            SoftmaxType::Gumbel => {
                return Err(LoomError::Unsupported(format!(
                    "{path}: Gumbel softmax adds unseeded noise in Loom, so no output can match it"
                )))
            }
            SoftmaxType::Temperature if layer.temperature != 0.0 => SoftmaxVariant::Softmax(layer.temperature as f32),
            SoftmaxType::Sparse => SoftmaxVariant::Sparsemax,
            SoftmaxType::Entmax => {
                let alpha = if layer.entmax_alpha != 0.0 {
                    layer.entmax_alpha as f32
                } else {
                    1.5
                };
                SoftmaxVariant::Entmax(alpha - 1.0)
            }
            _ => SoftmaxVariant::Softmax(1.0),
        };
        let len = x.len();
        let per_row = matches!(layer.softmax_type, SoftmaxType::Grid | SoftmaxType::Hierarchical);
        let n = if per_row && layer.softmax_cols > 0 {
            usize::try_from(layer.softmax_cols).unwrap_or(usize::MAX).min(len)
        } else {
            len
        };
        let y = GpuTensor::scratch(rec, x.shape.clone())?;
        if len == 0 {
            return Ok(y);
        }
        let rows = len.div_ceil(n);
        let last = len - (rows - 1) * n;
        let u = |v: usize, what: &str| u32_dim(v, &format!("{path}: {what}"));
        self.record(
            rec,
            &x.buffer,
            &y.buffer,
            u(rows, "softmax rows")?,
            u(n, "softmax row")?,
            u(last, "softmax row")?,
            variant,
        )?;
        Ok(y)
    }

    /// One-shot [`Softmax::encode_layer`]: uploads `x`, runs the layer, reads the result back.
    pub async fn forward(&self, gpu: &Gpu, layer: &Layer, x: &Tensor) -> Result<Tensor> {
        let xg = GpuTensor::upload(gpu, x).await?;
        let mut rec = Recorder::new(gpu);
        let y = self.encode_layer(&mut rec, layer, "softmax", &xg)?;
        rec.submit();
        y.read(gpu).await
    }
}
