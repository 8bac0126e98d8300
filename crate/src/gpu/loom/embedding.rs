//! Loom's Embedding layer on the gather op ([`Embedding`]).

use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::u32_dim;
use crate::gpu::Recorder;
use crate::gpu::{Embedding, EmbeddingTable, Gpu, GpuTensor, Rows};
use crate::network::{Layer, LayerType};

impl Embedding {
    /// Uploads a Loom Embedding layer's table once.
    pub async fn prepare(gpu: &Gpu, layer: &Layer) -> Result<EmbeddingTable> {
        if layer.layer_type != LayerType::Embedding {
            return Err(LoomError::InvalidInput(format!(
                "{} is not an Embedding layer",
                layer.layer_type
            )));
        }
        let dim = |v: i64, what: &str| {
            usize::try_from(v).map_err(|_| LoomError::InvalidNetwork(format!("Embedding {what} is {v}")))
        };
        let (vocab, d) = (
            dim(layer.vocab_size, "vocab_size")?,
            dim(layer.embedding_dim, "embedding_dim")?,
        );
        let w = layer
            .weights
            .as_ref()
            .ok_or_else(|| LoomError::InvalidNetwork("the Embedding layer has no weights".into()))?
            .active(layer.dtype);
        EmbeddingTable::upload(gpu, &w, vocab, d).await
    }

    /// Records the layer on `x` (one id per value): output shape `x.shape + [embedding_dim]`.
    pub fn encode_layer(
        &self,
        rec: &mut Recorder,
        layer: &Layer,
        table: &EmbeddingTable,
        x: &GpuTensor,
    ) -> Result<GpuTensor> {
        let mut shape = x.shape.clone();
        shape.push(table.dim());
        let y = GpuTensor::scratch(rec, shape)?;
        let tokens = u32_dim(x.len(), "ids")?;
        let (ids, out) = (
            Rows::new(&x.buffer, 1, tokens),
            Rows::new(&y.buffer, tokens, table.dim() as u32),
        );
        self.encode(rec, table, ids, out, layer.activation.into())?;
        Ok(y)
    }

    /// One-shot forward of a Loom Embedding layer on `x` (uploads the table and the ids, reads back).
    pub async fn forward(&self, gpu: &Gpu, layer: &Layer, x: &Tensor) -> Result<Tensor> {
        let table = Embedding::prepare(gpu, layer).await?;
        let xb = GpuTensor::upload(gpu, x).await?;
        let mut rec = Recorder::new(gpu);
        let y = self.encode_layer(&mut rec, layer, &table, &xb)?;
        let mut data: Vec<f32> = bytemuck::pod_collect_to_vec(&gpu.submit_and_read(&mut rec, &y.buffer).await?);
        data.truncate(y.len());
        Tensor::new(data, y.shape)
    }
}
