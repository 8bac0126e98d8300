//! Host for `shaders/recurrent.wgsl`: RNN and LSTM. CPU twin: `crate::cpu` recurrent.rs, whose sizes and checks
//! this host shares ([`RecurrentDims`]). The CPU sums in f64 (LSTM: f64 tiles rounded to f32) and carries LSTM
//! state in f64; the GPU does all of it in f32, so results agree within a tolerance (`crate/tests/gpu_recurrent.rs`).
//!
//! State: none between calls. Loom's forward starts every batch row of every call from zero h and c, so step 0 reads
//! no previous output and no cell value; within a call one dispatch per step reads the previous step's output (and,
//! for LSTM, the cell state in a scratch buffer of the call). Weights go up dequantized as f32.

use std::sync::Arc;

use crate::cpu::{self, RecurrentDims, Tensor};
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::{check_binding, dispatch, grid_for, run_once, u32_dim};
use crate::gpu::ops::ACTIVATION_WGSL;
use crate::gpu::F32Weights;
use crate::gpu::Recorder;
use crate::gpu::{Gpu, GpuTensor, PipelineKey};
use crate::network::{Layer, LayerType};

const RECURRENT_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/recurrent.wgsl"));
const LANES: u32 = 64;

/// The RNN and LSTM kernels.
pub struct Recurrent {
    rnn: Arc<wgpu::ComputePipeline>,
    lstm: Arc<wgpu::ComputePipeline>,
}

/// The kernels' module: the shared tanh and sigmoid of `activation.wgsl`, then `recurrent.wgsl`.
fn source() -> String {
    format!("{ACTIVATION_WGSL}\n{RECURRENT_WGSL}")
}

impl Recurrent {
    pub fn new(gpu: &Gpu) -> Result<Recurrent> {
        Ok(Recurrent {
            rnn: gpu.pipeline_with(PipelineKey::Named("recurrent_rnn"), source, "rnn")?,
            lstm: gpu.pipeline_with(PipelineKey::Named("recurrent_lstm"), source, "lstm")?,
        })
    }

    /// Uploads `layer`'s dequantized weights.
    pub async fn prepare(&self, gpu: &Gpu, layer: &Layer, path: &str) -> Result<F32Weights> {
        gates(layer, path)?;
        F32Weights::upload(gpu, layer, path).await
    }

    /// Records the layer on `x` (`[batch, seq_length, input_height]`, checked as the CPU checks it) into a new
    /// `[batch, seq_length, output_height]` activation. The layer's activation is never applied, as in Loom.
    pub fn encode(
        &self,
        rec: &mut Recorder,
        layer: &Layer,
        path: &str,
        w: &F32Weights,
        x: &GpuTensor,
    ) -> Result<GpuTensor> {
        let gpu = rec.gpu();
        let gates = gates(layer, path)?;
        let d = RecurrentDims::new(layer, path, &x.shape, x.len(), w.count, gates)?;
        let y = GpuTensor::scratch(rec, vec![d.batch, d.steps, d.hidden])?;
        if y.is_empty() {
            return Ok(y);
        }
        let u = |v: usize, what: &str| u32_dim(v, &format!("{path}: {what}"));
        // A tile longer than the row is one tile; capping it keeps the shader's tile loop from wrapping.
        let tile = cpu::tile(layer).min(d.input.max(d.hidden).max(1));
        let (batch, steps) = (u(d.batch, "batch")?, u(d.steps, "seq_length")?);
        let (input, hidden, tile) = (
            u(d.input, "input_height")?,
            u(d.hidden, "output_height")?,
            u(tile, "tile_size")?,
        );
        // One thread per (batch row, hidden unit); batch·hidden is at most the output size, so it cannot overflow.
        let units = d.batch * d.hidden;
        let groups = grid_for(gpu, units as u64, LANES, path)?;
        let cell = if gates == 1 {
            None
        } else {
            check_binding(gpu, &format!("{path} cell state"), 4 * units as u64)?;
            Some(GpuTensor::scratch(rec, vec![units])?)
        };
        for t in 0..steps {
            let words = [batch, steps, input, hidden, tile, t];
            match &cell {
                None => {
                    let buffers = [(1, &x.buffer), (2, &w.buffer), (3, &y.buffer)];
                    dispatch(rec, &self.rnn, &words, &buffers, groups);
                }
                Some(cell) => {
                    let buffers = [(1, &x.buffer), (2, &w.buffer), (3, &y.buffer), (4, &cell.buffer)];
                    dispatch(rec, &self.lstm, &words, &buffers, groups);
                }
            }
        }
        Ok(y)
    }

    /// One-shot: uploads the weights and `x`, runs the layer, reads the result back.
    pub async fn forward(&self, gpu: &Gpu, layer: &Layer, path: &str, x: &Tensor) -> Result<Tensor> {
        let w = self.prepare(gpu, layer, path).await?;
        run_once(gpu, x, |rec, xg| self.encode(rec, layer, path, &w, xg)).await
    }
}

/// Weight blocks per layer type: RNN 1, LSTM 4 (i, f, g, o); any other type is refused.
fn gates(layer: &Layer, path: &str) -> Result<usize> {
    match layer.layer_type {
        LayerType::RNN => Ok(1),
        LayerType::LSTM => Ok(4),
        other => Err(LoomError::InvalidInput(format!(
            "{path}: {other} is not an RNN or LSTM layer"
        ))),
    }
}
