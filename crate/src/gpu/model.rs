//! A whole Loom network on the GPU. Layers with a GPU kernel run there (Dense with its weights packed as stored,
//! MultiHeadAttention with its KV cache, SwiGLU, RMSNorm, LayerNorm, Embedding, Softmax); combinators
//! (Sequential, Parallel, Residual, Metacognition) are joined on the host exactly as the CPU path joins them.
//! Layer families without a GPU kernel yet run on the CPU, and [`GpuModel::cpu_layers`] says which and why.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::matvec::{dense_weights, MatVec, PackedWeights};
use super::{Elementwise, Embedding, Gpu, Mha, Norm, Softmax};
use crate::cpu::{self, Tensor};
use crate::dtype::DType;
use crate::error::{LoomError, Result};
use crate::network::{Activation, Layer, LayerType, Network, SoftmaxType};

/// A SwiGLU layer's three projections (float32 on the GPU) and biases.
struct SwigluWeights {
    gate: PackedWeights,
    up: PackedWeights,
    down: PackedWeights,
    b_gate: Vec<f32>,
    b_up: Vec<f32>,
    b_down: Vec<f32>,
}

/// A network ready for GPU inference, with the state kept between calls (weights on the GPU, KV caches).
pub struct GpuModel {
    gpu: Arc<Gpu>,
    net: Network,
    cpu: cpu::State,
    dense: HashMap<String, (MatVec, PackedWeights)>,
    swiglu: HashMap<String, SwigluWeights>,
    mha: HashMap<String, Mha>,
    f32_matvec: MatVec,
    norm: Norm,
    softmax: Softmax,
    embedding: Embedding,
    elementwise: Elementwise,
    cpu_layers: BTreeMap<String, String>,
}

type Step<'a> = Pin<Box<dyn Future<Output = Result<Tensor>> + 'a>>;

impl GpuModel {
    /// Prepares `net` on `gpu` (shareable between models: pipelines are compiled once); weights are uploaded
    /// when a layer first runs.
    pub fn new(gpu: Arc<Gpu>, net: Network) -> Result<GpuModel> {
        Ok(GpuModel {
            f32_matvec: MatVec::f32(&gpu)?,
            norm: Norm::new(&gpu)?,
            softmax: Softmax::new(&gpu)?,
            embedding: Embedding::new(&gpu)?,
            elementwise: Elementwise::new(&gpu)?,
            gpu,
            net,
            cpu: cpu::State::default(),
            dense: HashMap::new(),
            swiglu: HashMap::new(),
            mha: HashMap::new(),
            cpu_layers: BTreeMap::new(),
        })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Layers that ran on the CPU so far (path → reason): families with no GPU kernel yet.
    pub fn cpu_layers(&self) -> &BTreeMap<String, String> {
        &self.cpu_layers
    }

    /// Runs the grid in `(z, y, x, l)` order, skipping disabled layers, as [`cpu::CpuModel::forward`] does.
    pub async fn forward(&mut self, input: &[f32], shape: &[usize]) -> Result<Tensor> {
        let mut x = Tensor::new(input.to_vec(), shape.to_vec())?;
        let net = std::mem::replace(&mut self.net, Network::new(0, 0, 0, 0)?);
        let result = async {
            for (i, layer) in net.layers.iter().enumerate() {
                if !layer.is_disabled {
                    x = self.layer(layer, format!("layers.{i}"), x, None).await?;
                }
            }
            Ok(x)
        }
        .await;
        self.net = net;
        result
    }

    fn layer<'a>(&'a mut self, layer: &'a Layer, path: String, x: Tensor, skip: Option<&'a Tensor>) -> Step<'a> {
        Box::pin(async move {
            let gpu = &self.gpu;
            match layer.layer_type {
                LayerType::Dense => self.dense(layer, &path, &x).await,
                LayerType::SwiGLU => self.swiglu(layer, &path, &x).await,
                LayerType::MultiHeadAttention => {
                    if !self.mha.contains_key(&path) {
                        let mha = Mha::new(gpu, layer).await?;
                        self.mha.insert(path.clone(), mha);
                    }
                    let mha = self.mha.get_mut(&path).expect("inserted above");
                    mha.forward(&self.gpu, &x.data, &x.shape).await
                }
                LayerType::RMSNorm | LayerType::LayerNorm => self.norm.forward(gpu, layer, &x).await,
                LayerType::Embedding => self.embedding.forward(gpu, layer, &x).await,
                LayerType::Softmax
                    if !matches!(
                        layer.softmax_type,
                        SoftmaxType::Sparse | SoftmaxType::Entmax | SoftmaxType::Gumbel
                    ) =>
                {
                    self.softmax.forward(gpu, layer, &x).await
                }
                LayerType::Residual => Ok(cpu::residual(x, skip)),
                LayerType::Sequential => {
                    let mut prev: Option<Tensor> = None;
                    let mut x = x;
                    for (j, sub) in layer.sequential_layers.iter().enumerate() {
                        let input = x.clone();
                        x = self
                            .layer(sub, format!("{path}.sequential_layers.{j}"), x, prev.as_ref())
                            .await?;
                        prev = Some(input);
                    }
                    Ok(x)
                }
                LayerType::Parallel => {
                    let mut outs = Vec::with_capacity(layer.parallel_branches.len());
                    for (j, b) in layer.parallel_branches.iter().enumerate() {
                        outs.push(
                            self.layer(b, format!("{path}.parallel_branches.{j}"), x.clone(), None)
                                .await?,
                        );
                    }
                    cpu::combine(layer, &path, x, outs)
                }
                LayerType::Metacognition => match layer.meta_observed_layer.as_deref() {
                    Some(observed) => {
                        self.layer(observed, format!("{path}.meta_observed_layer"), x, skip)
                            .await
                    }
                    None => Ok(x),
                },
                other => {
                    let reason = match other {
                        LayerType::Softmax => format!("{} softmax needs a sort; no GPU kernel yet", layer.softmax_type),
                        _ => format!("no GPU kernel for {other} layers yet"),
                    };
                    self.cpu_layers.insert(path.clone(), reason);
                    cpu::forward_layer(layer, &path, x, skip, &mut self.cpu)
                }
            }
        })
    }

    async fn dense(&mut self, layer: &Layer, path: &str, x: &Tensor) -> Result<Tensor> {
        let n_in = cpu::dim(layer.input_height, "input_height", path)?;
        let n_out = cpu::dim(layer.output_height, "output_height", path)?;
        if x.shape.len() < 2 || x.data.len() != x.batch() * n_in {
            return Err(LoomError::InvalidInput(format!(
                "{path}: Dense needs a [batch, {n_in}] input, got shape {:?}",
                x.shape
            )));
        }
        if !self.dense.contains_key(path) {
            let (packing, bytes, scale) = dense_weights(layer).map_err(|e| at(path, e))?;
            let weights = PackedWeights::upload(&self.gpu, packing, &bytes, scale, n_in, n_out).await?;
            let kernel = MatVec::auto(&self.gpu, packing)?;
            self.dense.insert(path.to_string(), (kernel, weights));
        }
        let (kernel, weights) = &self.dense[path];
        let y = kernel.run(&self.gpu, &x.data, weights, layer.activation).await?;
        Tensor::new(y, vec![x.batch(), n_out])
    }

    /// `down(silu(gate·x + bg) ⊙ (up·x + bu)) + bd` per row; the layer's activation is ignored, as in Loom.
    async fn swiglu(&mut self, layer: &Layer, path: &str, x: &Tensor) -> Result<Tensor> {
        let h = cpu::dim(layer.input_height, "input_height", path)?;
        let i = cpu::dim(layer.output_height, "output_height", path)?;
        if h == 0 || !x.data.len().is_multiple_of(h) {
            return Err(LoomError::InvalidInput(format!(
                "{path}: SwiGLU needs rows of {h} values"
            )));
        }
        if !self.swiglu.contains_key(path) {
            let w = cpu::weights(layer, path, &mut self.cpu)?;
            let f32_packing = super::matvec::Packing::Loom(DType::Float32);
            let upload = |from: usize, rows: usize, cols: usize| {
                let bytes = crate::network::f32_bytes(&w[from..from + rows * cols]);
                let gpu = &self.gpu;
                async move { PackedWeights::upload(gpu, f32_packing, &bytes, 1.0, cols, rows).await }
            };
            let sw = SwigluWeights {
                gate: upload(0, i, h).await?,
                up: upload(i * h, i, h).await?,
                down: upload(2 * i * h, h, i).await?,
                b_gate: w[3 * i * h..3 * i * h + i].to_vec(),
                b_up: w[3 * i * h + i..3 * i * h + 2 * i].to_vec(),
                b_down: w[3 * i * h + 2 * i..3 * i * h + 2 * i + h].to_vec(),
            };
            self.swiglu.insert(path.to_string(), sw);
        }
        let sw = &self.swiglu[path];
        let gpu = &self.gpu;
        let lin = Activation::Linear;
        let rows = x.data.len() / h;
        let bias =
            |v: Vec<f32>, b: &[f32]| -> Vec<f32> { v.iter().zip(b.iter().cycle()).map(|(a, c)| a + c).collect() };
        let g = bias(self.f32_matvec.run(gpu, &x.data, &sw.gate, lin).await?, &sw.b_gate);
        let u = bias(self.f32_matvec.run(gpu, &x.data, &sw.up, lin).await?, &sw.b_up);
        let inter = self.elementwise.swiglu(gpu, &g, &u).await?;
        let y = bias(self.f32_matvec.run(gpu, &inter, &sw.down, lin).await?, &sw.b_down);
        debug_assert_eq!(y.len(), rows * h);
        Tensor::new(y, x.shape.clone())
    }
}

fn at(path: &str, e: LoomError) -> LoomError {
    match e {
        LoomError::InvalidNetwork(m) => LoomError::InvalidNetwork(format!("{path}: {m}")),
        e => e,
    }
}
