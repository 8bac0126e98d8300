//! Host for `shaders/embedding.wgsl`: the embedding gather. CPU twin: the Embedding layer (`crate::cpu`
//! embedding.rs). The gather itself is exact; an activation other than Linear rounds as the GPU's f32 maths does.

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid_for, storage_f32, u32_dim};
use super::{Pointwise, Rows, ACTIVATION_WGSL};
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const EMBEDDING_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/embedding.wgsl"));
const LANES: u32 = 256;

/// An f32 embedding table on the GPU, split into shards of whole rows that each fit one storage binding.
pub struct EmbeddingTable {
    vocab: u32,
    dim: u32,
    /// `(first row, rows, buffer)`.
    shards: Vec<(u32, u32, wgpu::Buffer)>,
}

impl EmbeddingTable {
    /// Uploads `vocab × dim` f32 values, in as few shards as the device's binding limit allows.
    pub async fn upload(gpu: &Gpu, table: &[f32], vocab: usize, dim: usize) -> Result<EmbeddingTable> {
        let max = gpu
            .limits
            .max_storage_buffer_binding_size
            .min(gpu.limits.max_buffer_size);
        let rows = (max / (4 * dim.max(1) as u64)).max(1);
        Self::upload_sharded(gpu, table, vocab, dim, rows.min(usize::MAX as u64) as usize).await
    }

    /// Uploads the table in shards of at most `shard_rows` rows (tests exercise sharding with small tables).
    pub async fn upload_sharded(
        gpu: &Gpu,
        table: &[f32],
        vocab: usize,
        dim: usize,
        shard_rows: usize,
    ) -> Result<EmbeddingTable> {
        let need = vocab.checked_mul(dim);
        if need.is_none_or(|n| n > table.len()) || shard_rows == 0 {
            return Err(LoomError::InvalidInput(format!(
                "embedding table of {} values for vocab {vocab} × dim {dim} (shards of {shard_rows} rows)",
                table.len()
            )));
        }
        let mut shards = Vec::new();
        let mut row0 = 0;
        while row0 < vocab {
            let rows = shard_rows.min(vocab - row0);
            let part = &table[row0 * dim..(row0 + rows) * dim];
            check_binding(gpu, "embedding shard", 4 * part.len() as u64)?;
            let buffer = storage_f32(gpu, "embedding shard", part, part.len()).await?;
            shards.push((
                u32_dim(row0, "embedding row")?,
                u32_dim(rows, "embedding rows")?,
                buffer,
            ));
            row0 += rows;
        }
        if shards.is_empty() {
            // No rows: one empty shard still writes the out-of-range rows.
            shards.push((0, 0, gpu.output("embedding shard", 4).await?));
        }
        Ok(EmbeddingTable {
            vocab: u32_dim(vocab, "vocab")?,
            dim: u32_dim(dim, "embedding dim")?,
            shards,
        })
    }

    pub fn vocab(&self) -> usize {
        self.vocab as usize
    }

    pub fn dim(&self) -> usize {
        self.dim as usize
    }

    pub fn shards(&self) -> usize {
        self.shards.len()
    }
}

/// The gather kernel.
pub struct Embedding {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl Embedding {
    pub fn new(gpu: &Gpu) -> Result<Embedding> {
        let source = format!("{ACTIVATION_WGSL}\n{EMBEDDING_WGSL}");
        Ok(Embedding {
            pipeline: gpu.pipeline("embedding_gather", &source, "gather")?,
        })
    }

    /// Records row `t` of `y` = `act(table[int(ids[t])])` for each of the ids (f32 values, as Loom's input) in
    /// `ids` (packed), one dispatch per shard; `y` is packed rows of the table's width.
    pub fn encode(&self, rec: &mut Recorder, table: &EmbeddingTable, ids: Rows, y: Rows, act: Pointwise) -> Result<()> {
        let tokens = ids.flat("embedding ids")?;
        y.flat("embedding output")?;
        if (y.rows, y.cols) != (tokens, table.dim) {
            return Err(LoomError::InvalidInput(format!(
                "embedding of {tokens} ids of width {} into {y}",
                table.dim
            )));
        }
        let n = y.len();
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(rec.gpu(), n, LANES, "embedding")?;
        for (k, (row0, rows, shard)) in table.shards.iter().enumerate() {
            let words = [
                tokens,
                table.dim,
                table.vocab,
                *row0,
                *rows,
                act.id(),
                u32::from(k == 0),
            ];
            dispatch(
                rec,
                &self.pipeline,
                &words,
                &[(1, ids.buffer), (2, shard), (3, y.buffer)],
                g,
            );
        }
        Ok(())
    }

    /// One-shot gather of `ids`: `ids.len() × dim` values.
    pub async fn run(&self, gpu: &Gpu, table: &EmbeddingTable, ids: &[f32], act: Pointwise) -> Result<Vec<f32>> {
        let len = ids.len() * table.dim();
        check_binding(gpu, "embedding output", 4 * len as u64)?;
        let ib = storage_f32(gpu, "ids", ids, ids.len()).await?;
        let yb = gpu.output("embedding y", 4 * len as u64).await?;
        let mut rec = Recorder::new(gpu);
        let tokens = u32_dim(ids.len(), "ids")?;
        let y = Rows::new(&yb, tokens, table.dim);
        self.encode(&mut rec, table, Rows::new(&ib, 1, tokens), y, act)?;
        rec.submit();
        let mut out = gpu.read_f32(&yb).await?;
        out.truncate(len);
        Ok(out)
    }
}
