//! A whole Loom network on the GPU. A forward uploads the input, records every layer into one command encoder
//! (activations stay in GPU buffers between layers), submits once and reads the output back once.
//!
//! Each layer family is prepared once ([`GpuModel::prepare`]: weights uploaded, packed as stored where the kernel
//! decodes them) and then encoded by every forward, synchronously, drawing on the layer's arena (`kernel.rs`: its bind
//! groups, uniforms and output buffers for one input shape, reused by the next forward of that shape). Combinators
//! run on the GPU too: Residual and Parallel `add` / `avg` with the elementwise kernels, `concat` with buffer copies,
//! `filter` as a cleared buffer, Sequential and Metacognition by walking their layers. A layer the device cannot run
//! (its prepare says `Unsupported`, e.g. weights past the device's binding limits) runs on the CPU: the forward
//! submits what it has recorded, reads the layer's input back, runs [`cpu::forward_layer`] and uploads the result
//! ([`GpuModel::cpu_layers`] says which layers and why).
//!
//! Adding a family: its host's kernels in [`Kernels`], a [`Prepared`] variant holding what its prepare uploaded, an
//! arm in [`prepare_layer`] (async) and an arm in [`Prepared::encode`] (sync).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::cpu::{self, Tensor};
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::u32_dim;
use crate::gpu::F32Weights;
use crate::gpu::NormWeights;
use crate::gpu::{dense_weights, MatVec, PackedWeights, Rows};
use crate::gpu::{Arena, GpuCounts, Recorder};
use crate::gpu::{
    Conv, Elementwise, Embedding, EmbeddingTable, Gpu, GpuTensor, KMeans, Mha, Norm, Pointwise, Recurrent, Softmax,
};
use crate::network::{Activation, Layer, LayerType, Network};

/// Arenas kept per layer (input shapes seen most recently: a decode step's and a few prefill lengths).
const ARENAS_PER_LAYER: usize = 4;

/// What the last [`GpuModel::forward`] did on the device, counted at the wgpu calls ([`Gpu::counts`]): work that
/// other models put on the same device meanwhile counts too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardStats {
    /// Compute dispatches recorded.
    pub dispatches: u32,
    /// Bind groups created (0 when every layer reused its arena).
    pub bind_groups: u32,
    /// Buffers created for activations, layer intermediates and uniforms (0 likewise).
    pub buffers: u32,
    /// Queue submits: 1, plus 1 per layer that ran on the CPU.
    pub submits: u32,
    /// Buffers read back to the host: 1, plus 1 per layer that ran on the CPU.
    pub readbacks: u32,
}

impl ForwardStats {
    /// From what the device counted at the wgpu calls during the forward.
    fn of(c: GpuCounts) -> ForwardStats {
        ForwardStats {
            dispatches: c.dispatches as u32,
            bind_groups: c.bind_groups as u32,
            buffers: c.buffers as u32,
            submits: c.submits as u32,
            readbacks: c.readbacks as u32,
        }
    }
}

/// A layer after its prepare: what its forward reads on the GPU, or why it runs on the CPU.
enum Prepared {
    Dense { kernel: MatVec, weights: PackedWeights },
    Swiglu(Swiglu),
    Mha(Box<Mha>),
    Norm(NormWeights),
    Embedding(EmbeddingTable),
    Softmax,
    Conv(F32Weights),
    Recurrent(F32Weights),
    KMeans(F32Weights),
    Cpu(String),
}

/// The kernels every layer of a model shares (pipelines are compiled once per device).
struct Kernels {
    norm: Norm,
    softmax: Softmax,
    embedding: Embedding,
    elementwise: Elementwise,
    conv: Conv,
    recurrent: Recurrent,
    kmeans: KMeans,
}

/// A network ready for GPU inference, with the state kept between calls (weights on the GPU, KV caches, arenas).
pub struct GpuModel {
    net: Network,
    run: Runner,
}

/// Everything but the network, so that a forward walks the network while it updates this.
struct Runner {
    gpu: Arc<Gpu>,
    kernels: Kernels,
    /// By layer path.
    layers: HashMap<String, Prepared>,
    /// By layer path (`input` for the input upload): (input shape, arena), most recent first.
    arenas: HashMap<String, Vec<(Vec<usize>, Arena)>>,
    cpu: cpu::State,
    cpu_layers: BTreeMap<String, String>,
    /// The staging buffer readbacks go through, kept across forwards.
    readback: Option<Arena>,
    stats: ForwardStats,
}

type Step<'a> = Pin<Box<dyn Future<Output = Result<GpuTensor>> + 'a>>;

impl GpuModel {
    /// Prepares `net` on `gpu` (shareable between models: pipelines are compiled once). Weights are uploaded by
    /// [`GpuModel::prepare`], or by the first forward.
    pub fn new(gpu: Arc<Gpu>, net: Network) -> Result<GpuModel> {
        let kernels = Kernels {
            norm: Norm::new(&gpu)?,
            softmax: Softmax::new(&gpu)?,
            embedding: Embedding::new(&gpu)?,
            elementwise: Elementwise::new(&gpu)?,
            conv: Conv::new(&gpu)?,
            recurrent: Recurrent::new(&gpu)?,
            kmeans: KMeans::new(&gpu)?,
        };
        Ok(GpuModel {
            net,
            run: Runner {
                gpu,
                kernels,
                layers: HashMap::new(),
                arenas: HashMap::new(),
                cpu: cpu::State::default(),
                cpu_layers: BTreeMap::new(),
                readback: None,
                stats: ForwardStats::default(),
            },
        })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.run.gpu
    }

    pub fn network(&self) -> &Network {
        &self.net
    }

    /// Layers prepared to run on the CPU (path → reason): layers the device cannot hold, e.g. weights past its limits.
    pub fn cpu_layers(&self) -> &BTreeMap<String, String> {
        &self.run.cpu_layers
    }

    /// What the last forward did: dispatches, bind groups and buffers created, submits, readbacks.
    pub fn stats(&self) -> ForwardStats {
        self.run.stats
    }

    /// Uploads the weights of every layer a forward runs (skipping those already uploaded).
    pub async fn prepare(&mut self) -> Result<()> {
        let mut leaves = Vec::new();
        for (i, layer) in self.net.layers.iter().enumerate() {
            if !layer.is_disabled {
                collect_leaves(layer, format!("layers.{i}"), &mut leaves);
            }
        }
        for (path, layer) in leaves {
            self.run.prepare(layer, &path).await?;
        }
        Ok(())
    }

    /// Uploads the weights of the layer at `path` (`layers.3`, `layers.3.sequential_layers.0`, …; a combinator's
    /// path prepares every layer inside it). After that, forwards never read its host weights, and
    /// [`GpuModel::drop_host_weights`] may free them: a caller can install one layer's weights (through
    /// [`GpuModel::layer_mut`]), prepare it, drop them and go on to the next, holding one layer's weights at a time.
    pub async fn prepare_layer(&mut self, path: &str) -> Result<()> {
        let layer = layer_at(&self.net, path).ok_or_else(|| no_layer(path))?;
        let mut leaves = Vec::new();
        collect_leaves(layer, path.to_string(), &mut leaves);
        for (p, l) in leaves {
            self.run.prepare(l, &p).await?;
        }
        Ok(())
    }

    /// Frees the host copy (weights and extra blobs) of every layer prepared on the GPU; forwards read only the GPU
    /// copies. Layers that run on the CPU keep theirs. Returns how many layers held something.
    pub fn drop_host_weights(&mut self) -> usize {
        let mut freed = 0;
        for (path, prepared) in &self.run.layers {
            if matches!(prepared, Prepared::Cpu(_)) {
                continue;
            }
            if let Some(layer) = layer_at_mut(&mut self.net, path) {
                if layer.weights.take().is_some() || !layer.extra_blobs.is_empty() {
                    freed += 1;
                }
                layer.extra_blobs.clear();
            }
        }
        freed
    }

    /// The layer at `path`, to change it (e.g. to install its weights when they arrive one layer at a time). What
    /// the GPU holds for it and for the layers inside it (weights, KV cache, arenas) is discarded, as are the CPU
    /// path's caches, so the next prepare or forward uses what the layer then holds.
    pub fn layer_mut(&mut self, path: &str) -> Result<&mut Layer> {
        layer_at(&self.net, path).ok_or_else(|| no_layer(path))?;
        let inside = |p: &str| p == path || p.strip_prefix(path).is_some_and(|rest| rest.starts_with('.'));
        self.run.layers.retain(|p, _| !inside(p));
        self.run.arenas.retain(|p, _| !inside(p));
        self.run.cpu_layers.retain(|p, _| !inside(p));
        self.run.cpu = cpu::State::default();
        Ok(layer_at_mut(&mut self.net, path).expect("found above"))
    }

    /// Runs the grid in `(z, y, x, l)` order, skipping disabled layers, as [`cpu::CpuModel::forward`] does: one
    /// submit and one readback, plus one of each per layer that runs on the CPU. Device allocation failures during
    /// the forward are [`LoomError::GpuOutOfMemory`].
    pub async fn forward(&mut self, input: &[f32], shape: &[usize]) -> Result<Tensor> {
        let x = Tensor::new(input.to_vec(), shape.to_vec())?;
        self.net.check_input_shape(shape)?;
        self.prepare().await?;
        self.run.forward(&self.net, &x).await
    }
}

impl Runner {
    async fn prepare(&mut self, layer: &Layer, path: &str) -> Result<()> {
        if self.layers.contains_key(path) {
            return Ok(());
        }
        let prepared = match prepare_layer(&self.gpu, &self.kernels, layer, path).await {
            Ok(p) => p,
            // A layer this device cannot run (e.g. weights over its binding limits) still runs, on the CPU.
            Err(LoomError::Unsupported(why)) => Prepared::Cpu(format!("the GPU cannot run it: {why}")),
            Err(e) => return Err(at(path, e)),
        };
        if let Prepared::Cpu(reason) = &prepared {
            self.cpu_layers.insert(path.to_string(), reason.clone());
        }
        self.layers.insert(path.to_string(), prepared);
        Ok(())
    }

    async fn forward(&mut self, net: &Network, input: &Tensor) -> Result<Tensor> {
        let gpu = self.gpu.clone();
        let counted = gpu.counts();
        let oom = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let result = self.run(net, input).await;
        self.stats = ForwardStats::of(gpu.counts().since(counted));
        let invalid = invalid.pop().await;
        if let Some(e) = oom.pop().await {
            return Err(LoomError::GpuOutOfMemory(format!("forward: {e}")));
        }
        if let Some(e) = invalid {
            return Err(LoomError::Gpu(format!("forward: {e}")));
        }
        result
    }

    async fn run(&mut self, net: &Network, input: &Tensor) -> Result<Tensor> {
        let gpu = self.gpu.clone();
        let mut rec = Recorder::new(&gpu);
        let mut x = self.in_arena(&mut rec, "input", &input.shape, |_, rec| {
            let x = GpuTensor::scratch(rec, input.shape.clone())?;
            x.write(rec.gpu(), &input.data)?;
            Ok(x)
        })?;
        for (i, layer) in net.layers.iter().enumerate() {
            if !layer.is_disabled {
                x = self.layer(&mut rec, layer, format!("layers.{i}"), x, None).await?;
            }
        }
        self.read(&mut rec, &x).await
    }

    /// Submits what `rec` holds and reads `x` back.
    async fn read(&mut self, rec: &mut Recorder<'_>, x: &GpuTensor) -> Result<Tensor> {
        let outer = rec.swap_arena(Some(self.readback.take().unwrap_or_default()));
        let bytes = self.gpu.submit_and_read(rec, &x.buffer).await;
        self.readback = rec.swap_arena(outer);
        let mut data: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes?);
        data.truncate(x.len());
        Tensor::new(data, x.shape.clone())
    }

    /// Runs `encode` with `rec` drawing on the arena of `path` for input `shape`.
    fn in_arena<R>(
        &mut self,
        rec: &mut Recorder,
        path: &str,
        shape: &[usize],
        encode: impl FnOnce(&mut Self, &mut Recorder) -> Result<R>,
    ) -> Result<R> {
        let mut list = self.arenas.remove(path).unwrap_or_default();
        let arena = match list.iter().position(|(s, _)| s == shape) {
            Some(i) => list.remove(i).1,
            None => Arena::default(),
        };
        let outer = rec.swap_arena(Some(arena));
        let out = encode(self, rec);
        let arena = rec.swap_arena(outer).unwrap_or_default();
        list.insert(0, (shape.to_vec(), arena));
        list.truncate(ARENAS_PER_LAYER);
        self.arenas.insert(path.to_string(), list);
        out
    }

    /// Records `layer` on `x`; `skip` is what a Residual inside a Sequential adds (the previous sub-layer's input).
    fn layer<'a, 'g: 'a>(
        &'a mut self,
        rec: &'a mut Recorder<'g>,
        layer: &'a Layer,
        path: String,
        x: GpuTensor,
        skip: Option<&'a GpuTensor>,
    ) -> Step<'a> {
        Box::pin(async move {
            match layer.layer_type {
                LayerType::Sequential => {
                    let mut prev: Option<GpuTensor> = None;
                    let mut x = x;
                    for (j, sub) in layer.sequential_layers.iter().enumerate() {
                        let input = x.clone();
                        let sub_path = format!("{path}.sequential_layers.{j}");
                        x = self.layer(rec, sub, sub_path, x, prev.as_ref()).await?;
                        prev = Some(input);
                    }
                    Ok(x)
                }
                LayerType::Parallel => {
                    let mut outs = Vec::with_capacity(layer.parallel_branches.len());
                    for (j, b) in layer.parallel_branches.iter().enumerate() {
                        let branch = format!("{path}.parallel_branches.{j}");
                        outs.push(self.layer(rec, b, branch, x.clone(), None).await?);
                    }
                    self.in_arena(rec, &path, &x.shape, |run, rec| {
                        combine(rec, &run.kernels.elementwise, layer, &x, &outs)
                    })
                    .map_err(|e| at(&path, e))
                }
                LayerType::Residual => self.in_arena(rec, &path, &x.shape, |run, rec| {
                    residual(rec, &run.kernels.elementwise, &x, skip)
                }),
                LayerType::Metacognition => match layer.meta_observed_layer.as_deref() {
                    Some(observed) => {
                        let observed_path = format!("{path}.meta_observed_layer");
                        self.layer(rec, observed, observed_path, x, skip).await
                    }
                    None => Ok(x),
                },
                // Only Residual reads `skip` (and Metacognition passes it on): a CPU layer needs none.
                _ if matches!(self.layers.get(&path), Some(Prepared::Cpu(_))) => {
                    self.on_cpu(rec, layer, &path, x).await
                }
                _ => self
                    .in_arena(rec, &path, &x.shape, |run, rec| {
                        let prepared = run
                            .layers
                            .get_mut(&path)
                            .ok_or_else(|| LoomError::Gpu(format!("{path} was not prepared before the forward")))?;
                        prepared.encode(rec, &run.kernels, layer, &path, &x)
                    })
                    .map_err(|e| at(&path, e)),
            }
        })
    }

    /// A layer that runs on the CPU: submits what is recorded, reads `x` back, runs the CPU forward and uploads its
    /// output for the layers after it.
    async fn on_cpu(&mut self, rec: &mut Recorder<'_>, layer: &Layer, path: &str, x: GpuTensor) -> Result<GpuTensor> {
        let host = self.read(rec, &x).await?;
        let y = cpu::forward_layer(layer, path, host, None, &mut self.cpu)?;
        self.in_arena(rec, path, &x.shape, |_, rec| {
            let t = GpuTensor::scratch(rec, y.shape.clone())?;
            t.write(rec.gpu(), &y.data)?;
            Ok(t)
        })
    }
}

/// The layers a forward runs inside `layer` (itself when it is not a combinator), with their paths.
fn collect_leaves<'a>(layer: &'a Layer, path: String, out: &mut Vec<(String, &'a Layer)>) {
    let nested: Vec<(String, &Layer)> = match layer.layer_type {
        LayerType::Sequential => (layer.sequential_layers.iter().enumerate())
            .map(|(j, l)| (format!("{path}.sequential_layers.{j}"), l))
            .collect(),
        LayerType::Parallel => (layer.parallel_branches.iter().enumerate())
            .map(|(j, l)| (format!("{path}.parallel_branches.{j}"), l))
            .collect(),
        LayerType::Metacognition => (layer.meta_observed_layer.iter())
            .map(|l| (format!("{path}.meta_observed_layer"), &**l))
            .collect(),
        LayerType::Residual => Vec::new(),
        _ => {
            out.push((path, layer));
            return;
        }
    };
    for (p, l) in nested {
        collect_leaves(l, p, out);
    }
}

/// The layer at a blob path (`layers.<i>` then `.parallel_branches.<j>`, `.sequential_layers.<j>`,
/// `.meta_observed_layer`).
fn layer_at<'a>(net: &'a Network, path: &str) -> Option<&'a Layer> {
    let mut parts = path.split('.');
    if parts.next()? != "layers" {
        return None;
    }
    let mut layer = net.layers.get(parts.next()?.parse::<usize>().ok()?)?;
    while let Some(field) = parts.next() {
        layer = match field {
            "parallel_branches" => layer.parallel_branches.get(parts.next()?.parse::<usize>().ok()?)?,
            "sequential_layers" => layer.sequential_layers.get(parts.next()?.parse::<usize>().ok()?)?,
            "meta_observed_layer" => layer.meta_observed_layer.as_deref()?,
            _ => return None,
        };
    }
    Some(layer)
}

/// [`layer_at`], mutably.
fn layer_at_mut<'a>(net: &'a mut Network, path: &str) -> Option<&'a mut Layer> {
    let mut parts = path.split('.');
    if parts.next()? != "layers" {
        return None;
    }
    let mut layer = net.layers.get_mut(parts.next()?.parse::<usize>().ok()?)?;
    while let Some(field) = parts.next() {
        layer = match field {
            "parallel_branches" => layer.parallel_branches.get_mut(parts.next()?.parse::<usize>().ok()?)?,
            "sequential_layers" => layer.sequential_layers.get_mut(parts.next()?.parse::<usize>().ok()?)?,
            "meta_observed_layer" => layer.meta_observed_layer.as_deref_mut()?,
            _ => return None,
        };
    }
    Some(layer)
}

fn no_layer(path: &str) -> LoomError {
    LoomError::InvalidInput(format!("the network has no layer at {path:?}"))
}

/// Uploads what `layer`'s forward reads on the GPU. Every family has a kernel; combinators are never prepared.
async fn prepare_layer(gpu: &Gpu, k: &Kernels, layer: &Layer, path: &str) -> Result<Prepared> {
    Ok(match layer.layer_type {
        LayerType::Dense => {
            let n_in = dim(layer.input_height, "input_height")?;
            let n_out = dim(layer.output_height, "output_height")?;
            let (packing, bytes, scale) = dense_weights(layer)?;
            Prepared::Dense {
                kernel: MatVec::auto(gpu, packing)?,
                weights: PackedWeights::upload(gpu, packing, &bytes, scale, n_in, n_out).await?,
            }
        }
        LayerType::SwiGLU => Prepared::Swiglu(Swiglu::prepare(gpu, layer).await?),
        LayerType::MultiHeadAttention => Prepared::Mha(Box::new(Mha::new(gpu, layer).await?)),
        LayerType::RMSNorm | LayerType::LayerNorm => Prepared::Norm(Norm::prepare(gpu, layer).await?),
        LayerType::Embedding => Prepared::Embedding(Embedding::prepare(gpu, layer).await?),
        LayerType::Softmax => Prepared::Softmax,
        LayerType::CNN1
        | LayerType::CNN2
        | LayerType::CNN3
        | LayerType::ConvTransposed1D
        | LayerType::ConvTransposed2D
        | LayerType::ConvTransposed3D => Prepared::Conv(k.conv.prepare(gpu, layer, path).await?),
        LayerType::RNN | LayerType::LSTM => Prepared::Recurrent(k.recurrent.prepare(gpu, layer, path).await?),
        LayerType::KMeans => Prepared::KMeans(k.kmeans.prepare(gpu, layer, path).await?),
        LayerType::Residual | LayerType::Parallel | LayerType::Sequential | LayerType::Metacognition => {
            return Err(LoomError::Gpu(format!(
                "{path}: a {} layer has nothing to prepare",
                layer.layer_type
            )))
        }
    })
}

impl Prepared {
    /// Records the layer's forward of `x` into `rec`. Reads no host weights (they may have been dropped).
    fn encode(
        &mut self,
        rec: &mut Recorder,
        k: &Kernels,
        layer: &Layer,
        path: &str,
        x: &GpuTensor,
    ) -> Result<GpuTensor> {
        match self {
            Prepared::Dense { kernel, weights } => dense(rec, kernel, weights, layer.activation, x),
            Prepared::Swiglu(s) => s.encode(rec, &k.elementwise, x),
            Prepared::Mha(m) => m.encode(rec, x),
            Prepared::Norm(w) => k.norm.encode_layer(rec, layer, w, x),
            Prepared::Embedding(t) => k.embedding.encode_layer(rec, layer, t, x),
            Prepared::Softmax => k.softmax.encode_layer(rec, layer, path, x),
            Prepared::Conv(w) => k.conv.encode(rec, layer, path, w, x),
            Prepared::Recurrent(w) => k.recurrent.encode(rec, layer, path, w, x),
            Prepared::KMeans(w) => k.kmeans.encode(rec, layer, path, w, x),
            Prepared::Cpu(reason) => Err(LoomError::Gpu(format!(
                "{path} runs on the CPU ({reason}) but was encoded"
            ))),
        }
    }
}

/// Dense: `act(W·x)` on `[batch, n_in]`.
fn dense(rec: &mut Recorder, kernel: &MatVec, w: &PackedWeights, act: Activation, x: &GpuTensor) -> Result<GpuTensor> {
    let batch = x.batch();
    if x.shape.len() < 2 || x.len() != batch * w.n_in {
        return Err(LoomError::InvalidInput(format!(
            "Dense needs a [batch, {}] input, got shape {:?}",
            w.n_in, x.shape
        )));
    }
    let y = GpuTensor::scratch(rec, vec![batch, w.n_out])?;
    let xr = Rows::new(&x.buffer, u32_dim(batch, "batch")?, u32_dim(w.n_in, "Dense input")?);
    kernel.encode(rec, xr, w, y.rows(), act.into())?;
    Ok(y)
}

/// A SwiGLU layer's store on the GPU, packed as stored: `[gate (i×h), up (i×h), down (h×i), b_gate, b_up, b_down]`,
/// one upload seen through three matrix views, each with its bias.
struct Swiglu {
    kernel: MatVec,
    gate: PackedWeights,
    up: PackedWeights,
    down: PackedWeights,
}

impl Swiglu {
    async fn prepare(gpu: &Gpu, layer: &Layer) -> Result<Swiglu> {
        let h = dim(layer.input_height, "input_height")?;
        let i = dim(layer.output_height, "output_height")?;
        let len = layer.weights.as_ref().map_or(0, |w| w.len());
        let (packing, bytes, scale) = dense_weights(layer)?;
        let ih = i
            .checked_mul(h)
            .ok_or_else(|| LoomError::InvalidNetwork(format!("SwiGLU of {h}×{i} overflows")))?;
        let needed = ih.saturating_mul(3).saturating_add(2 * i + h);
        if needed > len {
            return Err(LoomError::InvalidNetwork(format!(
                "SwiGLU with hidden {h} and intermediate {i} needs {needed} weights, it has {len}"
            )));
        }
        let store = PackedWeights::upload_tensor(gpu, packing, &bytes, scale, len).await?;
        Ok(Swiglu {
            kernel: MatVec::auto(gpu, packing)?,
            gate: store.matrix(0, h, i, Some(3 * ih))?,
            up: store.matrix(ih, h, i, Some(3 * ih + i))?,
            down: store.matrix(2 * ih, i, h, Some(3 * ih + 2 * i))?,
        })
    }

    /// `down(silu(gate·x + bg) ⊙ (up·x + bu)) + bd` per row of `h` values; the layer's activation is ignored, as in
    /// Loom.
    fn encode(&self, rec: &mut Recorder, elementwise: &Elementwise, x: &GpuTensor) -> Result<GpuTensor> {
        let (h, i) = (self.gate.n_in, self.gate.n_out);
        if h == 0 || !x.len().is_multiple_of(h) {
            return Err(LoomError::InvalidInput(format!(
                "SwiGLU needs rows of {h} values, got {}",
                x.len()
            )));
        }
        let rows = x.len() / h;
        let r32 = u32_dim(rows, "rows")?;
        let lin = Pointwise::Identity;
        let g = GpuTensor::scratch(rec, vec![rows, i])?;
        let u = GpuTensor::scratch(rec, vec![rows, i])?;
        let inter = GpuTensor::scratch(rec, vec![rows, i])?;
        let y = GpuTensor::scratch(rec, x.shape.clone())?;
        let h32 = u32_dim(h, "SwiGLU width")?;
        let (xr, yr) = (Rows::new(&x.buffer, r32, h32), Rows::new(&y.buffer, r32, h32));
        self.kernel.encode(rec, xr, &self.gate, g.rows(), lin)?;
        self.kernel.encode(rec, xr, &self.up, u.rows(), lin)?;
        elementwise.encode_swiglu(rec, g.rows(), u.rows(), inter.rows())?;
        self.kernel.encode(rec, inter.rows(), &self.down, yr, lin)?;
        Ok(y)
    }
}

/// Residual: `x + skip` in f32 (exact, as the CPU's) when a skip of equal length exists, else the identity.
fn residual(
    rec: &mut Recorder,
    elementwise: &Elementwise,
    x: &GpuTensor,
    skip: Option<&GpuTensor>,
) -> Result<GpuTensor> {
    let Some(skip) = skip.filter(|s| s.len() == x.len()) else {
        return Ok(x.clone());
    };
    let y = GpuTensor::scratch(rec, x.shape.clone())?;
    elementwise.encode_add(rec, x.rows(), skip.rows(), y.rows())?;
    Ok(y)
}

/// Joins a Parallel layer's branch outputs as [`cpu::combine`] does: `concat` (or empty, or `grid_scatter`) per
/// batch row with buffer copies, `add` in f32 in branch order (exact), `avg` the same sum times `1/n` (f32 here,
/// a float64 factor in Loom), `filter` zeros shaped like the first branch. No branches: the input.
fn combine(
    rec: &mut Recorder,
    elementwise: &Elementwise,
    layer: &Layer,
    x: &GpuTensor,
    outs: &[GpuTensor],
) -> Result<GpuTensor> {
    let batch = x.batch().max(1);
    let Some(first) = outs.first() else {
        return Ok(x.clone());
    };
    match layer.combine_mode.as_str() {
        "" | "concat" | "grid_scatter" => {
            if outs.iter().any(|o| !o.len().is_multiple_of(batch)) {
                return Err(LoomError::InvalidInput(format!(
                    "branch outputs do not split into {batch} rows"
                )));
            }
            let total: usize = outs.iter().map(GpuTensor::len).sum();
            let y = GpuTensor::scratch(rec, vec![batch, total / batch])?;
            let mut at = 0u64;
            for b in 0..batch as u64 {
                for o in outs {
                    let row = 4 * (o.len() / batch) as u64;
                    if row > 0 {
                        rec.encoder()
                            .copy_buffer_to_buffer(&o.buffer, b * row, &y.buffer, at, row);
                    }
                    at += row;
                }
            }
            Ok(y)
        }
        mode @ ("add" | "avg") => {
            if outs.iter().any(|o| o.len() != first.len()) {
                return Err(LoomError::InvalidInput(format!(
                    "branch outputs differ in size, cannot {mode}"
                )));
            }
            // One branch: its output (times exactly 1 for avg).
            if outs.len() == 1 {
                return Ok(first.clone());
            }
            let y = GpuTensor::scratch(rec, first.shape.clone())?;
            elementwise.encode_add(rec, first.rows(), outs[1].rows(), y.rows())?;
            for o in &outs[2..] {
                elementwise.encode_add_inplace(rec, y.rows(), o.rows())?;
            }
            if mode == "avg" {
                elementwise.encode_scale(rec, y.rows(), (1.0 / outs.len() as f64) as f32)?;
            }
            Ok(y)
        }
        // Loom does not persist the filter gate: a loaded filter layer outputs zeros (see `cpu::combine`).
        "filter" => {
            let y = GpuTensor::scratch(rec, first.shape.clone())?;
            rec.encoder().clear_buffer(&y.buffer, 0, None);
            Ok(y)
        }
        other => Err(LoomError::InvalidNetwork(format!("unknown combine mode {other:?}"))),
    }
}

fn dim(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| LoomError::InvalidNetwork(format!("{what} is {v}")))
}

/// Prefixes a layer's own errors with its path (unless the host already did).
fn at(path: &str, e: LoomError) -> LoomError {
    let prefixed = |m: String| {
        if m.starts_with(&format!("{path}:")) {
            m
        } else {
            format!("{path}: {m}")
        }
    };
    match e {
        LoomError::InvalidNetwork(m) => LoomError::InvalidNetwork(prefixed(m)),
        LoomError::InvalidInput(m) => LoomError::InvalidInput(prefixed(m)),
        e => e,
    }
}
