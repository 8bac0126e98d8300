//! Host for `shaders/kmeans.wgsl`: the KMeans layer's soft assignment. CPU twin: `crate::cpu` embedding.rs
//! `kmeans`, whose settings and checks this host shares ([`KMeansConfig`]). Both are f32; the GPU's `exp`, division
//! and tree sums differ from the CPU's by a few ulp. Centres go up dequantized as f32.

use std::sync::Arc;

use crate::cpu::{KMeansConfig, Tensor};
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::{dispatch, run_once, u32_dim};
use crate::gpu::ops::{ACTIVATION_WGSL, REDUCE_WGSL};
use crate::gpu::F32Weights;
use crate::gpu::Recorder;
use crate::gpu::{Gpu, GpuTensor, Pointwise};
use crate::network::{Layer, LayerType};

const KMEANS_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/kmeans.wgsl"));

/// The KMeans kernel.
pub struct KMeans {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl KMeans {
    pub fn new(gpu: &Gpu) -> Result<KMeans> {
        let source = format!("{ACTIVATION_WGSL}\n{REDUCE_WGSL}\n{KMEANS_WGSL}");
        Ok(KMeans {
            pipeline: gpu.pipeline("kmeans", &source, "kmeans")?,
        })
    }

    /// Uploads `layer`'s dequantized centres.
    pub async fn prepare(&self, gpu: &Gpu, layer: &Layer, path: &str) -> Result<F32Weights> {
        check_type(layer, path)?;
        F32Weights::upload(gpu, layer, path).await
    }

    /// Records the layer on `x` (all of it one point, as Loom reads it) into a new `[1, n]` activation: the
    /// `num_clusters` probabilities, or with `output_mode` "features" the `x.len()` weighted-centre values.
    pub fn encode(
        &self,
        rec: &mut Recorder,
        layer: &Layer,
        path: &str,
        w: &F32Weights,
        x: &GpuTensor,
    ) -> Result<GpuTensor> {
        check_type(layer, path)?;
        let d = x.len();
        let cfg = KMeansConfig::new(layer, path, d, w.count)?;
        let y = GpuTensor::scratch(rec, vec![1, cfg.outputs(d)])?;
        let probs = GpuTensor::scratch(rec, vec![cfg.clusters])?;
        let words = [
            u32_dim(cfg.clusters, &format!("{path}: num_clusters"))?,
            u32_dim(d, &format!("{path}: input size"))?,
            u32::from(cfg.features),
            u32::from(cfg.integer),
            Pointwise::from(layer.activation).id(),
            cfg.denom.to_bits(),
        ];
        let buffers = [(1, &x.buffer), (2, &w.buffer), (3, &y.buffer), (4, &probs.buffer)];
        dispatch(rec, &self.pipeline, &words, &buffers, (1, 1));
        Ok(y)
    }

    /// One-shot: uploads the centres and `x`, runs the layer, reads the result back.
    pub async fn forward(&self, gpu: &Gpu, layer: &Layer, path: &str, x: &Tensor) -> Result<Tensor> {
        let w = self.prepare(gpu, layer, path).await?;
        run_once(gpu, x, |rec, xg| self.encode(rec, layer, path, &w, xg)).await
    }
}

fn check_type(layer: &Layer, path: &str) -> Result<()> {
    if layer.layer_type != LayerType::KMeans {
        return Err(LoomError::InvalidInput(format!(
            "{path}: {} is not a KMeans layer",
            layer.layer_type
        )));
    }
    Ok(())
}
