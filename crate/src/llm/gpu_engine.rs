//! The GPU engine: the decoder of [`super::engine::CpuEngine`] on [`crate::gpu`] kernels. Weights are uploaded once
//! in their stored blocks and decoded in the shaders (embedding lookup included); activations and the KV cache stay
//! on the GPU; a call records every dispatch of a chunk of tokens into one command encoder and submits it once (a
//! decode step on a GPU in parts, so that the GPU starts before the host has recorded the whole step). The greedy
//! path picks the next token on the GPU and reads back one id (4 bytes).
//!
//! Bind groups and buffers come from per-shape arenas (`gpu::kernel`): a decode step (one token) creates none after
//! the first; only the uniform words that hold the position (one block shared by the step's attention dispatches)
//! and the RoPE table are rewritten.
//!
//! On GPUs each RMSNorm rides in the matvecs that read its output (x normalized as it is read) and each residual
//! add in the output projection (`x += W·a`); on CPU adapters they are dispatches of their own
//! ([`GpuEngine::set_fold_norms`]).

mod self_test;

use std::collections::HashMap;
use std::sync::Arc;

use super::config::{FfnAct, ModelConfig, Ropes};
use super::sampler::SampleArgs;
use super::saved::{KvRows, LayerRows};
use super::weights::{BlockWeights, Matrix, ModelWeights};
use crate::cpu::ops;
use crate::error::{LoomError, Result};
use crate::gpu::{
    binding_parts, Arena, Argmax, AttendArgs, Attention, Elementwise, Gpu, GpuTensor, KvCache, LogitMask, MatVec,
    MatVecOptions, NewKv, Norm, PackedWeights, Packing, Recorder, RopeIn, RowLayout, Rows, Sample, GPU_SAMPLE_MAX,
    MAX_WEIGHT_BINDINGS,
};

/// Prompt tokens per submit on CPU adapters: bounds the activation buffers of a long prompt and a submit's time.
const CPU_ADAPTER_CHUNK: usize = 64;
/// Prompt tokens per submit on GPUs: a prefill dispatch's workgroups grow with its tokens, and 64 tokens left an
/// H100's SMs mostly idle.
const GPU_CHUNK: usize = 256;
/// The most prompt tokens per submit on GPUs ([`GpuEngine::set_prefill_chunk`]): a windowed layer's KV ring holds
/// its window and one chunk.
const MAX_GPU_CHUNK: usize = 512;
/// A decode step's blocks per submit on GPUs after its first block's own (`GpuEngine::set_decode_submit_blocks`):
/// the GPU starts on the first block while the host records the rest, each later part reaching the GPU before the
/// parts before it have run. On an H200 4 decoded 1.1-1.4× as fast as one submit, and faster than 8 or 16.
const GPU_DECODE_SUBMIT_BLOCKS: usize = 4;

/// The largest hidden × FFN width whose decode steps read the gated product inside the down projection: on an H100
/// that saved its dispatch on SmolLM2 (576 × 1536) and Gemma-3-270M (640 × 2048) and cost Qwen2.5-0.5B
/// (896 × 4864) and Llama-3.2-1B (2048 × 8192) 5-15% of their decode speed.
const FUSED_GLU_DECODE_MAX: usize = 2 << 20;

/// The gated unit's function on the GPU for a block's FFN activation.
fn glu_pointwise(act: FfnAct) -> crate::gpu::Pointwise {
    match act {
        FfnAct::Silu => crate::gpu::Pointwise::Silu,
        FfnAct::GeluTanh => crate::gpu::Pointwise::Gelu,
    }
}

/// KV positions the engine allocates when the caller does not say and the model's context is longer (each
/// position costs `layers × 2 × kv_dim × 4` bytes).
pub const DEFAULT_GPU_CONTEXT: usize = 4096;

pub use self_test::KernelCheck;

/// What a call did on the GPU, counted at the wgpu calls ([`Gpu::counts`]; one engine per device at a time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCallStats {
    pub submits: u32,
    pub dispatches: u32,
    /// Bind groups and buffers created (0 once a shape's arena exists).
    pub bind_groups_created: u32,
    pub buffers_created: u32,
    pub bytes_read_back: u64,
    /// `queue.write_buffer` calls while recording: the token ids, the RoPE table and the uniform blocks whose words
    /// changed (a decode step's position: one block for all its attention dispatches).
    pub writes: u32,
    /// Host time recording the dispatches, in µs (milliseconds' resolution in the browser).
    pub record_us: u32,
}

/// Whether a tensor of `bytes` fits `limits` as [`PackedWeights`] uploads it: in at most [`MAX_WEIGHT_BINDINGS`]
/// buffers of the storage-binding size, none over the largest buffer.
pub fn fits_bindings(limits: &wgpu::Limits, bytes: u64) -> bool {
    let (words_per_part, parts) = binding_parts(limits.max_storage_buffer_binding_size, bytes);
    parts <= MAX_WEIGHT_BINDINGS as u64 && bytes.min(4 * words_per_part) <= limits.max_buffer_size
}

/// The KV positions an engine for `cfg` holds when asked for `context` (default: the model's context, at most
/// [`DEFAULT_GPU_CONTEXT`]).
pub fn engine_context(cfg: &ModelConfig, context: Option<usize>) -> usize {
    context.unwrap_or(DEFAULT_GPU_CONTEXT).min(cfg.context).max(1)
}

/// The rows of layer `l`'s KV cache in an engine of `context` positions whose chunks are at most `chunk` tokens:
/// every position, or for a windowed layer a ring of the window and a chunk (`shaders/attention.wgsl` wraps
/// positions), so that a chunk's writes never reach the rows its first query reads.
fn kv_rows(cfg: &ModelConfig, l: usize, context: usize, chunk: usize) -> usize {
    cfg.window(l).map_or(context, |w| context.min(w + chunk))
}

/// What opening a model on a device needs, from its tensors' sizes alone (the headers: nothing of the weights is
/// read), and what of it the device's limits refuse.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuFit {
    /// Positions the KV cache would hold (as [`GpuEngineBuilder::new`] chooses).
    pub context: usize,
    pub weight_bytes: u64,
    /// Keys and values of every layer (a windowed layer's ring is its window and a chunk, as large as a GPU's).
    pub kv_cache_bytes: u64,
    /// The largest tensor, by name.
    pub largest: (String, u64),
    /// Each tensor or cache the limits refuse, with why; empty when the model fits.
    pub problems: Vec<String>,
}

impl GpuFit {
    /// The fit of a model of configuration `cfg` and tensors `tensors` (name, bytes) with a KV cache of `context`
    /// positions (the default as the engine's) on a device of `limits`.
    pub fn of(cfg: &ModelConfig, tensors: &[(String, u64)], context: Option<usize>, limits: &wgpu::Limits) -> GpuFit {
        let context = engine_context(cfg, context);
        let mut problems = Vec::new();
        let binding = limits.max_storage_buffer_binding_size;
        for (name, bytes) in tensors {
            if !fits_bindings(limits, *bytes) {
                problems.push(format!(
                    "{name}: {bytes} bytes need more than {MAX_WEIGHT_BINDINGS} bindings of {binding} bytes"
                ));
            }
        }
        let mut kv_cache_bytes = 0;
        for l in 0..cfg.n_layers {
            let rows = kv_rows(cfg, l, context, MAX_GPU_CHUNK) as u64;
            let bytes = rows * cfg.kv_dim() as u64 * 4;
            kv_cache_bytes += 2 * bytes;
            if bytes > binding.min(limits.max_buffer_size) {
                problems.push(format!(
                    "the KV cache of layer {l}: {bytes} bytes for {rows} positions exceed a binding of {binding} bytes"
                ));
            }
        }
        let largest = tensors.iter().max_by_key(|(_, b)| *b).cloned().unwrap_or_default();
        GpuFit {
            context,
            weight_bytes: tensors.iter().map(|(_, b)| b).sum(),
            kv_cache_bytes,
            largest,
            problems,
        }
    }
}

/// One decoder block's tensors on the GPU.
struct GpuBlock {
    attn_norm: wgpu::Buffer,
    qkv: Qkv,
    wo: PackedWeights,
    bo: Option<wgpu::Buffer>,
    b_down: Option<wgpu::Buffer>,
    q_norm: Option<wgpu::Buffer>,
    k_norm: Option<wgpu::Buffer>,
    ffn_norm: wgpu::Buffer,
    /// Gemma's norms of the attention and feed-forward outputs.
    post_attn_norm: Option<wgpu::Buffer>,
    post_ffn_norm: Option<wgpu::Buffer>,
    gate_up: GateUp,
    down: PackedWeights,
}

/// Attention's q, k and v projections.
#[allow(clippy::large_enum_variant)] // one a block: the size is nothing
enum Qkv {
    /// One matrix, q's rows then k's then v's (one block type, no biases, no q/k norms): one matvec writes each
    /// token's `[q | k | v]` row, RoPE turns q's and k's heads in one dispatch, attention and the KV update read
    /// them where they are.
    Fused(PackedWeights),
    Split {
        wq: PackedWeights,
        wk: PackedWeights,
        wv: PackedWeights,
        bq: Option<wgpu::Buffer>,
        bk: Option<wgpu::Buffer>,
        bv: Option<wgpu::Buffer>,
    },
}

/// The matrices' rows back to back, their blocks as stored, when they share a block type and a row length.
fn stacked(ms: &[&Matrix]) -> Option<Matrix> {
    let first = ms.first()?;
    if !ms.iter().all(|m| m.ty == first.ty && m.cols == first.cols) {
        return None;
    }
    Some(Matrix {
        ty: first.ty,
        rows: ms.iter().map(|m| m.rows).sum(),
        cols: first.cols,
        data: ms
            .iter()
            .flat_map(|m| m.data.iter().copied())
            .collect::<Vec<u8>>()
            .into(),
    })
}

/// SwiGLU's gate and up projections.
enum GateUp {
    /// One matrix, the gate's rows then the up's (same block type, no biases): one matvec computes both.
    Fused(PackedWeights),
    Split {
        gate: PackedWeights,
        up: PackedWeights,
        b_gate: Option<wgpu::Buffer>,
        b_up: Option<wgpu::Buffer>,
    },
}

struct Kernels {
    matvec: HashMap<Packing, MatVec>,
    norm: Norm,
    attention: Attention,
    elementwise: Elementwise,
    argmax: Argmax,
    sample: Sample,
    mask: LogitMask,
}

/// What a chunk hands back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Output {
    /// Nothing: a prompt chunk before the last.
    Nothing,
    /// Logits of the last token.
    LastLogits,
    /// Logits of every token.
    AllLogits,
    /// The argmax of the last token's logits.
    Greedy,
    /// The id drawn from the last token's logits by `sample.wgsl` (the engine's `draw`).
    Sampled,
    /// [`Output::Greedy`] and [`Output::Sampled`] among the ids a grammar allows (`mask.wgsl` first).
    MaskedGreedy,
    MaskedSampled,
}

/// The decoder on a GPU.
pub struct GpuEngine {
    gpu: Arc<Gpu>,
    cfg: ModelConfig,
    k: Kernels,
    embed: PackedWeights,
    head: PackedWeights,
    final_norm: wgpu::Buffer,
    blocks: Vec<GpuBlock>,
    caches: Vec<KvCache>,
    cached: usize,
    ropes: Ropes,
    /// Arenas by (tokens in the chunk, output): decode steps reuse theirs.
    arenas: HashMap<(usize, Output), Arena>,
    /// Whether the norms and residual adds ride in the matvecs, when set by [`GpuEngine::set_fold_norms`]; `None`:
    /// the engine's choice per chunk ([`GpuEngine::folds_norms`]).
    fold_norms: Option<bool>,
    /// Whether the down projection reads the gated product itself, when set by [`GpuEngine::set_fuse_glu`].
    fuse_glu: Option<bool>,
    /// The adapter is a GPU (a workgroup per matvec row), not a CPU adapter.
    on_gpu: bool,
    /// Prompt tokens per submit, and the most it may be set to (a windowed layer's ring holds one more chunk).
    chunk: usize,
    max_chunk: usize,
    /// A decode step's blocks per submit after its first block (0: one submit).
    decode_submit_blocks: usize,
    last: GpuCallStats,
    /// The draw of the step in flight (for [`Output::Sampled`]) and the buffer of its penalised ids.
    draw: Option<SampleArgs>,
    draw_ids: wgpu::Buffer,
    /// The allowed ids of a masked step, written before it runs ([`GpuEngine::forward_masked`]).
    allowed: wgpu::Buffer,
}

/// Uploads small f32 vectors (norms, biases).
async fn upload_f32(gpu: &Gpu, name: &str, v: &[f32]) -> Result<wgpu::Buffer> {
    gpu.upload(name, bytemuck::cast_slice(v)).await
}

async fn upload_opt(gpu: &Gpu, name: &str, v: &Option<Vec<f32>>) -> Result<Option<wgpu::Buffer>> {
    Ok(match v {
        Some(v) => Some(upload_f32(gpu, name, v).await?),
        None => None,
    })
}

/// Uploads `m` as stored, naming the tensor in any error (out of memory, a block type the GPU lacks).
async fn upload_matrix(gpu: &Gpu, name: &str, m: &Matrix) -> Result<PackedWeights> {
    let named = |e: LoomError| match e {
        LoomError::GpuOutOfMemory(why) => LoomError::GpuOutOfMemory(format!("{name}: {why}")),
        LoomError::UnsupportedDType(why) => LoomError::UnsupportedDType(format!("{name}: {why}")),
        LoomError::Unsupported(why) => LoomError::Unsupported(format!("{name}: {why}")),
        e => e,
    };
    let packing = Packing::for_block_type(m.ty).map_err(named)?;
    PackedWeights::upload(gpu, packing, &m.data, 1.0, m.cols, m.rows)
        .await
        .map_err(named)
}

/// A GPU engine built in steps, so that a load can stream a file's tensors: the globals, then each block in order;
/// every tensor is uploaded as it comes and its host copy can go.
pub struct GpuEngineBuilder {
    gpu: Arc<Gpu>,
    cfg: ModelConfig,
    matvec: HashMap<Packing, MatVec>,
    globals: Option<(PackedWeights, PackedWeights, wgpu::Buffer)>,
    blocks: Vec<GpuBlock>,
}

impl GpuEngineBuilder {
    /// An engine for `cfg` with a KV cache of `context` positions (default: the model's context, at most
    /// [`DEFAULT_GPU_CONTEXT`]).
    pub fn new(gpu: Arc<Gpu>, cfg: &ModelConfig, context: Option<usize>) -> GpuEngineBuilder {
        let mut cfg = cfg.clone();
        cfg.context = engine_context(&cfg, context);
        GpuEngineBuilder {
            gpu,
            cfg,
            matvec: HashMap::new(),
            globals: None,
            blocks: Vec::new(),
        }
    }

    /// Uploads `m` as stored (compiling the matvec kernel of its block type on first sight).
    async fn matrix(&mut self, name: &str, m: &Matrix) -> Result<PackedWeights> {
        let p = Packing::for_block_type(m.ty)?;
        if let std::collections::hash_map::Entry::Vacant(e) = self.matvec.entry(p) {
            e.insert(MatVec::auto(&self.gpu, p)?);
        }
        upload_matrix(&self.gpu, name, m).await
    }

    /// The embedding, the output head (`None`: tied to the embedding) and the final norm.
    pub async fn globals(&mut self, embed: &Matrix, head: Option<&Matrix>, final_norm: &[f32]) -> Result<()> {
        let embed_w = self.matrix("token_embd", embed).await?;
        // A tied head reads the embedding's own buffers: the table is on the GPU once.
        let head_w = match head {
            Some(head) => self.matrix("output", head).await?,
            None => embed_w.clone(),
        };
        let norm = upload_f32(&self.gpu, "output_norm", final_norm).await?;
        self.globals = Some((embed_w, head_w, norm));
        Ok(())
    }

    /// A block's gate and up projections, fused into one matrix where they can be (see [`GateUp`]). The fused copy
    /// is the two matrices' blocks back to back, as stored.
    async fn gate_up(&mut self, i: usize, b: &BlockWeights) -> Result<GateUp> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let no_biases = b.b_gate.is_none() && b.b_up.is_none();
        let fits = |m: &Matrix| fits_bindings(&self.gpu.limits, m.data.len() as u64);
        if let Some(fused) = no_biases.then(|| stacked(&[&b.gate, &b.up])).flatten().filter(fits) {
            return Ok(GateUp::Fused(self.matrix(&n("ffn_gate+ffn_up"), &fused).await?));
        }
        let g = self.gpu.clone();
        Ok(GateUp::Split {
            gate: self.matrix(&n("ffn_gate"), &b.gate).await?,
            up: self.matrix(&n("ffn_up"), &b.up).await?,
            b_gate: upload_opt(&g, &n("ffn_gate.bias"), &b.b_gate).await?,
            b_up: upload_opt(&g, &n("ffn_up.bias"), &b.b_up).await?,
        })
    }

    /// A block's q, k and v projections, fused into one matrix where they can be (see [`Qkv`]): the three
    /// matrices' blocks back to back, as stored.
    async fn qkv(&mut self, i: usize, b: &BlockWeights) -> Result<Qkv> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let no_extras = b.bq.is_none() && b.bk.is_none() && b.bv.is_none() && b.q_norm.is_none() && b.k_norm.is_none();
        let fits = |m: &Matrix| fits_bindings(&self.gpu.limits, m.data.len() as u64);
        if let Some(fused) = no_extras
            .then(|| stacked(&[&b.wq, &b.wk, &b.wv]))
            .flatten()
            .filter(fits)
        {
            return Ok(Qkv::Fused(self.matrix(&n("attn_q+attn_k+attn_v"), &fused).await?));
        }
        let g = self.gpu.clone();
        Ok(Qkv::Split {
            wq: self.matrix(&n("attn_q"), &b.wq).await?,
            wk: self.matrix(&n("attn_k"), &b.wk).await?,
            wv: self.matrix(&n("attn_v"), &b.wv).await?,
            bq: upload_opt(&g, &n("attn_q.bias"), &b.bq).await?,
            bk: upload_opt(&g, &n("attn_k.bias"), &b.bk).await?,
            bv: upload_opt(&g, &n("attn_v.bias"), &b.bv).await?,
        })
    }

    /// The next block's weights.
    pub async fn block(&mut self, b: &BlockWeights) -> Result<()> {
        let i = self.blocks.len();
        if i >= self.cfg.n_layers {
            return Err(LoomError::InvalidNetwork(format!(
                "block {i}: the model has {} blocks",
                self.cfg.n_layers
            )));
        }
        let n = |s: &str| format!("blk.{i}.{s}");
        let g = self.gpu.clone();
        let block = GpuBlock {
            attn_norm: upload_f32(&g, &n("attn_norm"), &b.attn_norm).await?,
            qkv: self.qkv(i, b).await?,
            wo: self.matrix(&n("attn_output"), &b.wo).await?,
            bo: upload_opt(&g, &n("attn_output.bias"), &b.bo).await?,
            b_down: upload_opt(&g, &n("ffn_down.bias"), &b.b_down).await?,
            q_norm: upload_opt(&g, &n("attn_q_norm"), &b.q_norm).await?,
            k_norm: upload_opt(&g, &n("attn_k_norm"), &b.k_norm).await?,
            ffn_norm: upload_f32(&g, &n("ffn_norm"), &b.ffn_norm).await?,
            post_attn_norm: upload_opt(&g, &n("post_attention_norm"), &b.post_attn_norm).await?,
            post_ffn_norm: upload_opt(&g, &n("post_ffw_norm"), &b.post_ffn_norm).await?,
            gate_up: self.gate_up(i, b).await?,
            down: self.matrix(&n("ffn_down"), &b.down).await?,
        };
        self.blocks.push(block);
        Ok(())
    }

    /// The engine, once the globals and every block are in; allocates the KV cache.
    pub async fn finish(self) -> Result<GpuEngine> {
        let GpuEngineBuilder {
            gpu,
            cfg,
            matvec,
            globals,
            blocks,
        } = self;
        let (embed, head, final_norm) =
            globals.ok_or_else(|| LoomError::InvalidNetwork("the embedding and output head were not loaded".into()))?;
        if blocks.len() != cfg.n_layers {
            return Err(LoomError::InvalidNetwork(format!(
                "{} of {} blocks were loaded",
                blocks.len(),
                cfg.n_layers
            )));
        }
        let g = &*gpu;
        let k = Kernels {
            matvec,
            norm: Norm::new(g)?,
            attention: Attention::new(g)?,
            elementwise: Elementwise::new(g)?,
            argmax: Argmax::new(g)?,
            sample: Sample::new(g)?,
            mask: LogitMask::new(g)?,
        };
        let draw_ids = Sample::ids_buffer(g).await?;
        let allowed = LogitMask::buffer(g, cfg.vocab).await?;
        let on_gpu = RowLayout::for_adapter(&gpu) != RowLayout::Lane;
        let max_chunk = if on_gpu { MAX_GPU_CHUNK } else { CPU_ADAPTER_CHUNK };
        let mut caches = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let rows = kv_rows(&cfg, l, cfg.context, max_chunk);
            caches.push(KvCache::new(g, cfg.n_kv_heads, cfg.head_dim, rows).await?);
        }
        let ropes = cfg.ropes();
        Ok(GpuEngine {
            gpu,
            cfg,
            k,
            embed,
            head,
            final_norm,
            blocks,
            caches,
            cached: 0,
            ropes,
            arenas: HashMap::new(),
            fold_norms: None,
            fuse_glu: None,
            on_gpu,
            chunk: if on_gpu { GPU_CHUNK } else { CPU_ADAPTER_CHUNK },
            max_chunk,
            decode_submit_blocks: if on_gpu { GPU_DECODE_SUBMIT_BLOCKS } else { 0 },
            last: GpuCallStats::default(),
            draw: None,
            draw_ids,
            allowed,
        })
    }
}

impl GpuEngine {
    /// Uploads `weights` to `gpu` with a KV cache of `context` positions (default: the model's context, at most
    /// [`DEFAULT_GPU_CONTEXT`]). A tensor the device cannot hold is [`LoomError::GpuOutOfMemory`] naming it.
    pub async fn new(
        gpu: Arc<Gpu>,
        cfg: &ModelConfig,
        weights: &ModelWeights,
        context: Option<usize>,
    ) -> Result<GpuEngine> {
        let mut b = GpuEngineBuilder::new(gpu, cfg, context);
        b.globals(&weights.embed, weights.head.as_ref(), &weights.final_norm)
            .await?;
        for block in &weights.blocks {
            b.block(block).await?;
        }
        b.finish().await
    }

    /// The model's configuration, with the context this engine's KV cache holds.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Keeps the first `len` cached positions, or none where a windowed layer's ring has overwritten rows that
    /// position `len` reads (a cut more than a chunk back); returns the positions kept.
    pub fn truncate(&mut self, len: usize) -> usize {
        // Rows past `len` are rewritten before any query reads them. A ring of `rows` rows for a window `w` still
        // holds positions `cached − rows ..`; position `len` reads back to `len − w + 1`.
        let len = self.cached.min(len);
        let lost = self.caches.iter().enumerate().any(|(l, cache)| {
            self.cfg.window(l).is_some_and(|w| {
                let oldest = self.cached.saturating_sub(cache.max_seq as usize);
                (len + 1).saturating_sub(w) < oldest
            })
        });
        self.cached = if lost { 0 } else { len };
        self.cached
    }

    /// The device's adapter, for people ("NVIDIA H100 (Vulkan)").
    pub fn adapter(&self) -> String {
        format!("{} ({:?})", self.gpu.info.name, self.gpu.info.backend)
    }

    /// Forgets every cached position.
    /// Whether the RMSNorms ride in the projections that read them (x normalized as the matvec reads it) and the
    /// residual adds in the output projections (`x +=`): 2 dispatches a block fewer, for every chunk from here on.
    /// Without this call the engine chooses per chunk ([`GpuEngine::folds_norms`]).
    pub fn set_fold_norms(&mut self, fold: bool) {
        if self.fold_norms != Some(fold) {
            self.fold_norms = Some(fold);
            self.arenas.clear();
        }
    }

    /// Prompt tokens per submit from here on: `tokens` within 1 ..= the engine's most (512 on GPUs, 64 on CPU
    /// adapters, as a windowed layer's ring was sized); returns the size taken. Without this call: 256 on GPUs, 64 on
    /// CPU adapters.
    pub fn set_prefill_chunk(&mut self, tokens: usize) -> usize {
        self.chunk = tokens.clamp(1, self.max_chunk);
        self.chunk
    }

    /// Prompt tokens per submit.
    pub fn prefill_chunk(&self) -> usize {
        self.chunk
    }

    /// Submits a decode step in parts from here on: its first block, then every `blocks` blocks (0: the whole step in
    /// one submit), so that the GPU runs the first parts while the host records the rest. Without this call: 4 on
    /// GPUs, one submit on CPU adapters (whose queue runs a submit's work on the host's own cores).
    pub fn set_decode_submit_blocks(&mut self, blocks: usize) {
        self.decode_submit_blocks = blocks;
    }

    /// The fewest positions a decode step's attention takes a workgroup for ([`Attention::set_run_positions`]),
    /// for every call from here on.
    pub fn set_attention_run_positions(&mut self, positions: u32) {
        self.k.attention.set_run_positions(positions);
    }

    /// The runs a decode step's attention splits a query's positions into before its runs grow
    /// ([`Attention::set_max_splits`]), for every call from here on.
    pub fn set_attention_max_splits(&mut self, splits: u32) {
        self.k.attention.set_max_splits(splits);
    }

    /// The workgroups of 64 rows a prefill product fills before its rows take a lane each rather than four
    /// ([`MatVec::set_tiled_full_groups`]), for every call from here on.
    pub fn set_tiled_full_groups(&mut self, groups: u32) {
        for m in self.k.matvec.values_mut() {
            m.set_tiled_full_groups(groups);
        }
    }

    /// The rows each lane of a prefill product takes where it runs a lane a row: 1, 2 or 4, or none for the
    /// adapter's choice ([`MatVec::set_tiled_rows`]), for every call from here on.
    pub fn set_tiled_rows(&mut self, rows: Option<u32>) -> Result<()> {
        for m in self.k.matvec.values_mut() {
            m.set_tiled_rows(rows)?;
        }
        Ok(())
    }

    /// A decode step's blocks per submit after its first block (0: one submit).
    pub fn decode_submit_blocks(&self) -> usize {
        self.decode_submit_blocks
    }

    /// Whether a chunk of `tokens` submits its recording so far after block `l`.
    fn submits_after(&self, tokens: usize, l: usize) -> bool {
        let b = self.decode_submit_blocks;
        tokens == 1 && b > 0 && l.is_multiple_of(b) && l + 1 < self.blocks.len()
    }

    /// Prompt tokens per submit for a call that reads back `out`: every token's logits are read through one binding,
    /// which caps the chunk at what its logits fit.
    fn chunk_tokens(&self, out: Output) -> usize {
        if out != Output::AllLogits {
            return self.chunk;
        }
        let per_token = 4 * self.cfg.vocab as u64;
        let binding = self
            .gpu
            .limits
            .max_storage_buffer_binding_size
            .min(self.gpu.limits.max_buffer_size);
        self.chunk.min((binding / per_token).max(1) as usize)
    }

    /// Whether a chunk of `tokens` runs with the norms folded: as set, or by the engine's choice, measured on an
    /// H200: folded for one-token decode steps of models up to 1,024 wide on GPUs (the dispatches it saves are what
    /// such a step costs; 340 against 275 tok/s for SmolLM2-135M), apart for wider models (each row's workgroup
    /// sums x² and multiplies by γ again: Llama-3.2-1B decoded 173 tok/s folded, 208 apart) and for prefill (1.2 to
    /// 1.9× faster apart), and apart on CPU adapters, whose matvecs run a lane per row.
    /// A block with norms after its attention and feed-forward (Gemma) or a residual multiplier (Granite) never
    /// folds: those sit between the projection and the residual add that folding merges.
    pub fn folds_norms(&self, tokens: usize) -> bool {
        !self.cfg.block.post_norms
            && self.cfg.block.residual_scale == 1.0
            && self
                .fold_norms
                .unwrap_or(self.on_gpu && tokens == 1 && self.cfg.hidden <= 1024)
    }

    /// Whether a fused gate|up's product is read by the down projection as it goes (a dispatch fewer a block) or
    /// computed by a dispatch of its own, for every chunk from here on. Without this call the engine chooses per
    /// chunk ([`GpuEngine::fuses_glu`]).
    pub fn set_fuse_glu(&mut self, fuse: bool) {
        if self.fuse_glu != Some(fuse) {
            self.fuse_glu = Some(fuse);
            self.arenas.clear();
        }
    }

    /// Whether a chunk of `tokens` reads the gated product inside the down projection: as set, or by the engine's
    /// choice: in prefill chunks, whose tiled matvec computes each activation once per tile, and in decode steps of
    /// narrow FFNs only, where each output row's workgroup computes all of them (hidden × ffn activations in all;
    /// see `FUSED_GLU_DECODE_MAX`).
    pub fn fuses_glu(&self, tokens: usize) -> bool {
        self.fuse_glu
            .unwrap_or(tokens > 4 || self.cfg.hidden * self.cfg.ffn <= FUSED_GLU_DECODE_MAX)
    }

    pub fn reset(&mut self) {
        self.cached = 0;
    }

    /// The keys and values cached, as a saved chat carries them: each layer's positions still in its rows (every
    /// one, or a windowed layer's ring), read back one layer at a time.
    pub async fn kv_rows(&self) -> Result<KvRows> {
        let (len, kv_dim, hd) = (self.cached, self.cfg.kv_dim(), self.cfg.head_dim);
        let mut layers = Vec::with_capacity(self.caches.len());
        for cache in &self.caches {
            let ring = cache.max_seq as usize;
            let from = len.saturating_sub(ring);
            let (k, v) = cache.read(&self.gpu).await?;
            // [kv_head][ring][head_dim] → [position][kv_head × head_dim]; position p is in row p % ring.
            let rows = |c: &[f32]| {
                let mut out = Vec::with_capacity((len - from) * kv_dim);
                for p in from..len {
                    for h in 0..cache.kv_heads as usize {
                        let at = (h * ring + p % ring) * hd;
                        out.extend_from_slice(&c[at..at + hd]);
                    }
                }
                out
            };
            layers.push(LayerRows {
                from,
                k: rows(&k),
                v: rows(&v),
            });
        }
        Ok(KvRows { len, kv_dim, layers })
    }

    /// Replaces the cache with saved rows of this model (from any engine): a layer keeps what its rows hold, the
    /// last positions of a windowed one. Rows that do not fit are an error that changes nothing; a lost device
    /// leaves the cache empty.
    pub async fn set_kv_rows(&mut self, kv: KvRows) -> Result<()> {
        kv.check(&self.cfg, self.cfg.context)?;
        self.cached = 0;
        let hd = self.cfg.head_dim;
        for (cache, r) in self.caches.iter().zip(&kv.layers) {
            let ring = cache.max_seq as usize;
            let heads = cache.kv_heads as usize;
            let image = |rows: &[f32]| {
                let mut out = vec![0f32; heads * ring * hd];
                for p in r.from.max(kv.len.saturating_sub(ring))..kv.len {
                    let row = &rows[(p - r.from) * kv.kv_dim..][..kv.kv_dim];
                    for h in 0..heads {
                        let at = (h * ring + p % ring) * hd;
                        out[at..at + hd].copy_from_slice(&row[h * hd..][..hd]);
                    }
                }
                out
            };
            self.gpu.check_alive()?;
            self.gpu
                .queue
                .write_buffer(&cache.k, 0, bytemuck::cast_slice(&image(&r.k)));
            self.gpu
                .queue
                .write_buffer(&cache.v, 0, bytemuck::cast_slice(&image(&r.v)));
        }
        self.cached = kv.len;
        Ok(())
    }

    /// What the last call did on the GPU.
    pub fn last_call(&self) -> GpuCallStats {
        self.last
    }

    /// Bytes of GPU memory the model's weights take: every weight, bias and norm buffer, each counted once.
    pub fn weight_bytes(&self) -> u64 {
        let mut buffers: Vec<&wgpu::Buffer> = vec![&self.final_norm];
        buffers.extend(self.embed.buffers().iter().chain(self.head.buffers()));
        for b in &self.blocks {
            buffers.extend([&b.attn_norm, &b.ffn_norm]);
            for w in [&b.wo, &b.down] {
                buffers.extend(w.buffers());
            }
            buffers.extend([&b.bo, &b.b_down, &b.q_norm, &b.k_norm].into_iter().flatten());
            match &b.qkv {
                Qkv::Fused(w) => buffers.extend(w.buffers()),
                Qkv::Split { wq, wk, wv, bq, bk, bv } => {
                    buffers.extend(wq.buffers().iter().chain(wk.buffers()).chain(wv.buffers()));
                    buffers.extend([bq, bk, bv].into_iter().flatten());
                }
            }
            match &b.gate_up {
                GateUp::Fused(w) => buffers.extend(w.buffers()),
                GateUp::Split { gate, up, b_gate, b_up } => {
                    buffers.extend(gate.buffers().iter().chain(up.buffers()));
                    buffers.extend([b_gate, b_up].into_iter().flatten());
                }
            }
        }
        // Views of one tensor share buffers (a few hundred in all: a linear scan is enough).
        let mut distinct: Vec<&wgpu::Buffer> = Vec::with_capacity(buffers.len());
        for b in buffers {
            if !distinct.contains(&b) {
                distinct.push(b);
            }
        }
        distinct.iter().map(|b| b.size()).sum()
    }

    /// Runs `tokens` at positions `cached()..` and returns the logits of the last token (or of every token when
    /// `all_logits`), as [`super::engine::Engine::forward`].
    pub async fn forward_logits(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        let out = if all_logits {
            Output::AllLogits
        } else {
            Output::LastLogits
        };
        let bytes = self.run(tokens, out).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Runs `tokens` and returns the greedy next token, picked on the GPU (one id read back).
    pub async fn forward_argmax(&mut self, tokens: &[u32]) -> Result<u32> {
        self.run_id(tokens, Output::Greedy, None).await
    }

    /// Whether [`GpuEngine::forward_sampled`] takes `args` (top-k and the penalised ids within what one workgroup
    /// sorts).
    pub fn samples(args: &SampleArgs) -> bool {
        (args.temperature == 0.0 || (1..=GPU_SAMPLE_MAX).contains(&args.top_k))
            && args.penalized.len() <= GPU_SAMPLE_MAX
    }

    /// Runs `tokens` and returns the next token drawn per `args` on the GPU (one id read back), as
    /// `Sampler::sample_with` draws it from the logits.
    pub async fn forward_sampled(&mut self, tokens: &[u32], args: &SampleArgs) -> Result<u32> {
        self.run_id(tokens, Output::Sampled, Some(args)).await
    }

    /// Runs `tokens` and returns the next token among those `allowed` (bit `id % 32` of word `id / 32`, one bit per
    /// vocabulary id): the argmax (`draw` is `None`) or the draw per `draw`, picked on the GPU after the mask (one id
    /// read back), as the CPU picks it from logits that [`crate::gpu::mask_logits`] masked.
    pub async fn forward_masked(&mut self, tokens: &[u32], draw: Option<&SampleArgs>, allowed: &[u32]) -> Result<u32> {
        if allowed.len() != self.cfg.vocab.div_ceil(32) {
            return Err(LoomError::InvalidInput(format!(
                "a mask of {} words for a vocabulary of {}",
                allowed.len(),
                self.cfg.vocab
            )));
        }
        LogitMask::write(&self.gpu, &self.allowed, allowed)?;
        let out = match draw {
            None => Output::MaskedGreedy,
            Some(_) => Output::MaskedSampled,
        };
        self.run_id(tokens, out, draw).await
    }

    /// Runs `tokens` for an id picked on the GPU (`out`: greedy or sampled, masked or not) and reads it back; a
    /// draw's penalised ids are written and the draw kept for the step's recording.
    async fn run_id(&mut self, tokens: &[u32], out: Output, draw: Option<&SampleArgs>) -> Result<u32> {
        if let Some(args) = draw {
            if !GpuEngine::samples(args) {
                return Err(LoomError::InvalidInput(format!(
                    "GPU sampling takes top-k 1..={GPU_SAMPLE_MAX} and at most {GPU_SAMPLE_MAX} penalised ids"
                )));
            }
            Sample::write_ids(&self.gpu, &self.draw_ids, args);
        }
        self.draw = draw.cloned();
        let bytes = self.run(tokens, out).await;
        self.draw = None;
        let bytes = bytes?;
        Ok(u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes read back")))
    }

    async fn run(&mut self, tokens: &[u32], out: Output) -> Result<Vec<u8>> {
        if tokens.is_empty() {
            return Err(LoomError::InvalidInput("no tokens to run".into()));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab) {
            return Err(LoomError::InvalidInput(format!(
                "token id {t} is outside the vocabulary of {}",
                self.cfg.vocab
            )));
        }
        let needed = self.cached + tokens.len();
        if needed > self.cfg.context {
            return Err(LoomError::ContextFull {
                needed,
                limit: self.cfg.context,
            });
        }
        self.last = GpuCallStats::default();
        let counted = self.gpu.counts();
        let before = self.cached;
        let size = self.chunk_tokens(out);
        let chunks = tokens.len().div_ceil(size);
        let mut result = Vec::new();
        for (i, chunk) in tokens.chunks(size).enumerate() {
            // Only the last chunk hands back the last token's logits or id.
            let out = if i + 1 == chunks || out == Output::AllLogits {
                out
            } else {
                Output::Nothing
            };
            match self.chunk(chunk, out, needed).await {
                Ok(bytes) => result.extend_from_slice(&bytes),
                Err(e) => {
                    // A failed call leaves the cache as it found it.
                    self.cached = before;
                    return Err(e);
                }
            }
        }
        // Counted at the wgpu calls: whatever this call did on the device (one engine per device at a time).
        let done = self.gpu.counts().since(counted);
        self.last.submits = done.submits as u32;
        self.last.dispatches = done.dispatches as u32;
        self.last.bind_groups_created = done.bind_groups as u32;
        self.last.buffers_created = done.buffers as u32;
        self.last.writes = done.writes as u32;
        Ok(result)
    }

    /// Records one chunk of a call whose sequence ends at `end` positions into one encoder and submits it; reads
    /// back what `out` asks for.
    async fn chunk(&mut self, tokens: &[u32], out: Output, end: usize) -> Result<Vec<u8>> {
        let gpu = self.gpu.clone();
        let key = (tokens.len(), out);
        let arena = self.arenas.remove(&key).unwrap_or_default();
        gpu.check_alive()?;
        // Errors while recording (a device gone since the check, buffers it invalidated) come back through the
        // scopes as typed errors instead of reaching wgpu's default handler, which panics.
        let oom = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let started = super::generate::now_s();
        let mut rec = Recorder::with_arena(&gpu, arena);
        let read = self.encode(&mut rec, tokens, out, end);
        self.last.record_us += ((super::generate::now_s() - started) * 1e6) as u32;
        let invalid = invalid.pop().await;
        let oom = oom.pop().await;
        if let Some(e) = oom {
            return Err(LoomError::GpuOutOfMemory(format!("decoder activations: {e}")));
        }
        if let Some(e) = invalid {
            gpu.check_alive_now()?;
            return Err(LoomError::Gpu(format!("decoder: {e}")));
        }
        // The read-back goes through the arena's staging buffer, so it stays in the recorder until then.
        let bytes = match read? {
            Some(buffer) => gpu.submit_and_read(&mut rec, &buffer).await?,
            None => Vec::new(),
        };
        rec.flush();
        let arena = rec.swap_arena(None).unwrap_or_default();
        // Keep the decode arena and the full-chunk prefill arena; other lengths come once per prompt.
        if tokens.len() == 1 || tokens.len() == self.chunk_tokens(out) {
            self.arenas.insert(key, arena);
        }
        self.last.bytes_read_back += bytes.len() as u64;
        self.cached += tokens.len();
        Ok(bytes)
    }

    /// Records the chunk; returns the buffer to read back, if any.
    fn encode(&self, rec: &mut Recorder, tokens: &[u32], out: Output, end: usize) -> Result<Option<wgpu::Buffer>> {
        let gpu = &*self.gpu;
        let c = &self.cfg;
        let k = &self.k;
        let n = tokens.len();
        let start = self.cached;
        let (h, qd, kvd, hd, ffn) = (c.hidden, c.q_dim(), c.kv_dim(), c.head_dim, c.ffn);
        let rot = self.ropes.pairs();

        let ids = GpuTensor::scratch(rec, vec![n])?;
        let id_bits: Vec<f32> = tokens.iter().map(|&t| f32::from_bits(t)).collect();
        ids.write(gpu, &id_bits)?;
        // The chunk's RoPE cos/sin: one table, and one more for sliding layers with their own base.
        let rope_table = |rec: &mut Recorder, freqs: &ops::RopeFreqs| -> Result<GpuTensor> {
            let table: Vec<f32> = (start..start + n)
                .flat_map(|pos| freqs.cos_sin(pos))
                .flat_map(|(c, s)| [c, s])
                .collect();
            let t = GpuTensor::scratch(rec, vec![n, rot.max(1) * 2])?;
            if rot > 0 {
                t.write(gpu, &table)?;
            }
            Ok(t)
        };
        let global_table = rope_table(rec, self.ropes.global(end))?;
        let sliding_table = match self.ropes.sliding() {
            Some(inv) => Some(rope_table(rec, inv)?),
            None => None,
        };

        // One set of activations serves every block (dispatches run in order).
        let x = GpuTensor::scratch(rec, vec![n, h])?;
        let q = GpuTensor::scratch(rec, vec![n, qd])?;
        let qn = GpuTensor::scratch(rec, vec![n, qd])?;
        let kk = GpuTensor::scratch(rec, vec![n, kvd])?;
        let kn = GpuTensor::scratch(rec, vec![n, kvd])?;
        let v = GpuTensor::scratch(rec, vec![n, kvd])?;
        let qkv_w = qd + 2 * kvd;
        let qkv = GpuTensor::scratch(rec, vec![n, qkv_w])?;
        let att = GpuTensor::scratch(rec, vec![n, qd])?;
        let gate = GpuTensor::scratch(rec, vec![n, ffn])?;
        let up = GpuTensor::scratch(rec, vec![n, ffn])?;
        let gate_up = GpuTensor::scratch(rec, vec![n, 2 * ffn])?;
        let act = GpuTensor::scratch(rec, vec![n, ffn])?;
        // A projection's output after its post-norm (Gemma).
        let post_normed = match c.block.post_norms {
            true => Some(GpuTensor::scratch(rec, vec![n, h])?),
            false => None,
        };

        // Without folding: the normalized x and an output projection, each a dispatch's output.
        let fold = self.folds_norms(n);
        let unfolded = if fold {
            None
        } else {
            Some((
                GpuTensor::scratch(rec, vec![n, h])?,
                GpuTensor::scratch(rec, vec![n, h])?,
            ))
        };

        let identity = crate::gpu::Pointwise::Identity;
        let mv = |m: &PackedWeights, x: &GpuTensor, y: &GpuTensor, rec: &mut Recorder, options: MatVecOptions| {
            k.matvec[&m.packing].encode_with(rec, x.rows(), m, y.rows(), identity, options)
        };
        let bias = |b: &Option<wgpu::Buffer>, y: &GpuTensor, width: usize, rec: &mut Recorder| match b {
            Some(b) => k
                .elementwise
                .encode_add_inplace(rec, y.rows(), Rows::new(b, 1, width as u32)),
            None => Ok(()),
        };
        // y = W·RMSNorm(x; γ).
        let project = |m: &PackedWeights, gamma: &wgpu::Buffer, y: &GpuTensor, rec: &mut Recorder| match &unfolded {
            None => {
                let options = MatVecOptions {
                    norm: Some((gamma, c.rms_eps)),
                    ..MatVecOptions::default()
                };
                mv(m, &x, y, rec, options)
            }
            Some((xn, _)) => mv(m, xn, y, rec, MatVecOptions::default()),
        };
        // x += post(W·a + b), post a norm or nothing, and without folding the norm `next` of the new x (the next
        // projection's input). Post-norms never fold (`folds_norms`).
        // `glu`: a is fused gate|up rows, the product read as g(gate)·up.
        let residual = |m: &PackedWeights,
                        a: &GpuTensor,
                        glu: Option<crate::gpu::Pointwise>,
                        b: &Option<wgpu::Buffer>,
                        post: &Option<wgpu::Buffer>,
                        next: Option<&wgpu::Buffer>,
                        rec: &mut Recorder| match &unfolded {
            None => {
                let options = MatVecOptions {
                    norm: None,
                    accumulate: true,
                    glu,
                };
                mv(m, a, &x, rec, options)?;
                bias(b, &x, h, rec)
            }
            Some((xn, proj)) => {
                let options = MatVecOptions {
                    glu,
                    ..MatVecOptions::default()
                };
                mv(m, a, proj, rec, options)?;
                bias(b, proj, h, rec)?;
                let proj = match (post, &post_normed) {
                    (Some(gamma), Some(out)) => {
                        k.norm.encode_rms(rec, proj.rows(), gamma, out.rows(), 1, c.rms_eps)?;
                        out
                    }
                    _ => proj,
                };
                if c.block.residual_scale != 1.0 {
                    k.elementwise.encode_scale(rec, proj.rows(), c.block.residual_scale)?;
                }
                match next {
                    Some(gamma) => k
                        .norm
                        .encode_add_rms(rec, x.rows(), proj.rows(), gamma, xn.rows(), c.rms_eps),
                    None => k.elementwise.encode_add_inplace(rec, x.rows(), proj.rows()),
                }
            }
        };
        let pairs = c.rope_style.pairs();

        k.matvec[&self.embed.packing].encode_gather(rec, ids.rows(), &self.embed, x.rows())?;
        if c.block.embed_scale != 1.0 {
            k.elementwise.encode_scale(rec, x.rows(), c.block.embed_scale)?;
        }
        let glu = glu_pointwise(c.block.ffn_act);
        let fuse_glu = self.fuses_glu(n);
        // Per block: q/k/v from the attention norm of x, x += the attention's projection, gate/up from the FFN
        // norm of x, x += down.
        for (l, b) in self.blocks.iter().enumerate() {
            // Without folding, the first block's norm; each later one's came with the residual add before it.
            if let (0, Some((xn, _))) = (l, &unfolded) {
                k.norm
                    .encode_rms(rec, x.rows(), &b.attn_norm, xn.rows(), 1, c.rms_eps)?;
            }
            let window = c.window(l);
            let table = c.layer_rope(l, &global_table, sliding_table.as_ref());
            // RoPE turns q and k inside the attention, as it reads them.
            let rope = (c.rotates(l) && rot > 0).then_some(RopeIn {
                table: &table.buffer,
                pairs: rot as u32,
                style: pairs,
            });
            // q, k and v: each a view of its own buffer, or columns of the fused q|k|v rows.
            let (qr, kr, vr) = match &b.qkv {
                Qkv::Fused(w) => {
                    project(w, &b.attn_norm, &qkv, rec)?;
                    let rows = qkv.rows();
                    let (qd, kvd) = (qd as u32, kvd as u32);
                    (rows.columns(0, qd), rows.columns(qd, kvd), rows.columns(qd + kvd, kvd))
                }
                Qkv::Split { wq, wk, wv, bq, bk, bv } => {
                    project(wq, &b.attn_norm, &q, rec)?;
                    project(wk, &b.attn_norm, &kk, rec)?;
                    project(wv, &b.attn_norm, &v, rec)?;
                    bias(bq, &q, qd, rec)?;
                    bias(bk, &kk, kvd, rec)?;
                    bias(bv, &v, kvd, rec)?;
                    let (qr, kr) = match (&b.q_norm, &b.k_norm) {
                        (Some(qnw), Some(knw)) => {
                            // Each head is a row of the per-head norm.
                            let (q_rows, k_rows) = ((n * c.n_heads) as u32, (n * c.n_kv_heads) as u32);
                            let (q_in, q_out) = (
                                Rows::new(&q.buffer, q_rows, hd as u32),
                                Rows::new(&qn.buffer, q_rows, hd as u32),
                            );
                            let (k_in, k_out) = (
                                Rows::new(&kk.buffer, k_rows, hd as u32),
                                Rows::new(&kn.buffer, k_rows, hd as u32),
                            );
                            k.norm.encode_rms(rec, q_in, qnw, q_out, 1, c.rms_eps)?;
                            k.norm.encode_rms(rec, k_in, knw, k_out, 1, c.rms_eps)?;
                            (&qn, &kn)
                        }
                        _ => (&q, &kk),
                    };
                    (qr.rows(), kr.rows(), v.rows())
                }
            };
            let cache = &self.caches[l];
            let args = AttendArgs {
                pos0: start as u32,
                scale: c.block.attn_scale,
                window: window.map_or(0, |w| u32::try_from(w).unwrap_or(u32::MAX)),
                softcap: c.block.attn_softcap.unwrap_or(0.0),
                split: true,
            };
            // The attention writes the chunk's K and V rows into the cache itself.
            let new_kv = NewKv { k: kr, v: vr, rope };
            k.attention
                .encode_attend(rec, cache, qr, Some(new_kv), att.rows(), args)?;
            residual(&b.wo, &att, None, &b.bo, &b.post_attn_norm, Some(&b.ffn_norm), rec)?;
            // The down projection's input: the gated product read from the fused gate|up rows as it goes, or
            // computed by a dispatch of its own.
            let (down_in, down_glu) = match &b.gate_up {
                GateUp::Fused(w) => {
                    project(w, &b.ffn_norm, &gate_up, rec)?;
                    if fuse_glu {
                        (&gate_up, Some(glu))
                    } else {
                        k.elementwise.encode_glu_rows(rec, gate_up.rows(), act.rows(), glu)?;
                        (&act, None)
                    }
                }
                GateUp::Split {
                    gate: wg,
                    up: wu,
                    b_gate,
                    b_up,
                } => {
                    project(wg, &b.ffn_norm, &gate, rec)?;
                    project(wu, &b.ffn_norm, &up, rec)?;
                    bias(b_gate, &gate, ffn, rec)?;
                    bias(b_up, &up, ffn, rec)?;
                    k.elementwise.encode_glu(rec, gate.rows(), up.rows(), act.rows(), glu)?;
                    (&act, None)
                }
            };
            let next = self.blocks.get(l + 1).map(|next| &next.attn_norm);
            residual(&b.down, down_in, down_glu, &b.b_down, &b.post_ffn_norm, next, rec)?;
            if self.submits_after(n, l) {
                rec.flush();
            }
        }
        if out == Output::Nothing {
            return Ok(None);
        }
        // The head runs on every row for all logits, else on the last row only.
        let rows = if out == Output::AllLogits { n } else { 1 };
        let last = GpuTensor::scratch(rec, vec![rows, h])?;
        let from = (4 * (n - rows) * h) as u64;
        rec.encoder()
            .copy_buffer_to_buffer(&x.buffer, from, &last.buffer, 0, (4 * rows * h) as u64);
        let logits = GpuTensor::scratch(rec, vec![rows, c.vocab])?;
        let head = &k.matvec[&self.head.packing];
        if fold {
            let options = MatVecOptions {
                norm: Some((&self.final_norm, c.final_norm_eps)),
                ..MatVecOptions::default()
            };
            head.encode_with(rec, last.rows(), &self.head, logits.rows(), identity, options)?;
        } else {
            let normed = GpuTensor::scratch(rec, vec![rows, h])?;
            let eps = c.final_norm_eps;
            k.norm
                .encode_rms(rec, last.rows(), &self.final_norm, normed.rows(), 1, eps)?;
            head.encode(rec, normed.rows(), &self.head, logits.rows(), identity)?;
        }
        if c.block.logit_scale != 1.0 {
            k.elementwise
                .encode_scale(rec, logits.rows(), 1.0 / c.block.logit_scale)?;
        }
        // Gemma 2's final soft cap: cap · tanh(logit / cap).
        let logits = match c.block.final_softcap {
            None => logits,
            Some(cap) => {
                let capped = GpuTensor::scratch(rec, vec![rows, c.vocab])?;
                k.elementwise.encode_scale(rec, logits.rows(), 1.0 / cap)?;
                k.elementwise
                    .encode_act(rec, logits.rows(), capped.rows(), crate::gpu::Pointwise::Tanh)?;
                k.elementwise.encode_scale(rec, capped.rows(), cap)?;
                capped
            }
        };
        if matches!(out, Output::MaskedGreedy | Output::MaskedSampled) {
            k.mask.encode(rec, logits.rows(), &self.allowed)?;
        }
        let id = match out {
            Output::Greedy | Output::MaskedGreedy => {
                let id = GpuTensor::scratch(rec, vec![1])?;
                k.argmax.encode(rec, logits.rows(), id.rows())?;
                id
            }
            Output::Sampled | Output::MaskedSampled => {
                let args = self
                    .draw
                    .as_ref()
                    .ok_or_else(|| LoomError::InvalidInput("a sampled step without its draw".into()))?;
                let id = GpuTensor::scratch(rec, vec![1])?;
                k.sample.encode(rec, logits.rows(), &self.draw_ids, id.rows(), args)?;
                id
            }
            _ => return Ok(Some(logits.buffer)),
        };
        Ok(Some(id.buffer))
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl super::engine::Engine for GpuEngine {
    fn config(&self) -> &ModelConfig {
        GpuEngine::config(self)
    }

    fn device(&self) -> String {
        format!("GPU: {}", self.adapter())
    }

    fn cached(&self) -> usize {
        self.cached
    }

    fn truncate(&mut self, len: usize) -> usize {
        GpuEngine::truncate(self, len)
    }

    fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        pollster::block_on(self.forward_logits(tokens, all_logits))
    }

    fn forward_greedy(&mut self, tokens: &[u32]) -> Result<u32> {
        pollster::block_on(self.forward_argmax(tokens))
    }

    fn kv_rows(&self) -> Result<KvRows> {
        pollster::block_on(GpuEngine::kv_rows(self))
    }

    fn set_kv_rows(&mut self, kv: KvRows) -> Result<()> {
        pollster::block_on(GpuEngine::set_kv_rows(self, kv))
    }

    fn forward_sample(&mut self, tokens: &[u32], args: &SampleArgs) -> Result<super::generate::Step> {
        use super::generate::Step;
        Ok(if GpuEngine::samples(args) {
            Step::Id(pollster::block_on(self.forward_sampled(tokens, args))?)
        } else {
            Step::Logits(self.forward(tokens, false)?)
        })
    }

    fn forward_masked(
        &mut self,
        tokens: &[u32],
        draw: Option<&SampleArgs>,
        allowed: &[u32],
    ) -> Result<super::generate::Step> {
        use super::generate::Step;
        Ok(if draw.is_none_or(GpuEngine::samples) {
            Step::Id(pollster::block_on(GpuEngine::forward_masked(
                self, tokens, draw, allowed,
            ))?)
        } else {
            Step::Logits(self.forward(tokens, false)?)
        })
    }
}
