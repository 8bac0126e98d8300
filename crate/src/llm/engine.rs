//! The interface every decoder engine implements (the CPU one here, the GPU one beside it), and the CPU engine:
//! the Llama/Qwen block computed with [`crate::cpu::ops`] and the block-type matrix products of
//! [`crate::quant`], reading the weights as stored.

use std::sync::Arc;

use super::config::{FfnAct, ModelConfig, Ropes};
use super::generate::Step;
use super::sampler::SampleArgs;
use super::saved::{KvRows, LayerRows};
use super::weights::{Matrix, ModelWeights};
use crate::cpu::ops;
use crate::error::{LoomError, Result};
use crate::quant;

/// A decoder with its KV cache. Generation ([`super::generate`]) drives any engine through this.
pub trait Engine {
    fn config(&self) -> &ModelConfig;
    /// "CPU" or "WebGPU"/"Vulkan", for people.
    fn device(&self) -> String;
    /// Tokens held in the KV cache: the next token goes at this position.
    fn cached(&self) -> usize;
    /// Forgets cached positions from `len` on (a conversation that changed after them). Returns the positions it
    /// still holds: `len` (or fewer when it held fewer), or 0 where a layer that keeps only its window no longer has
    /// what the next position reads (a conversation cut far back): the caller runs the prompt again from there.
    fn truncate(&mut self, len: usize) -> usize;
    /// Runs `tokens` at positions `cached()..`, appending to the KV cache. Returns the logits of the last token
    /// (vocab values), or of every token (n × vocab) when `all_logits`.
    fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>>;
    /// Runs `tokens` as [`Engine::forward`] does and returns the greedy next token: the argmax of the last logits,
    /// the lowest id on ties. The GPU engine picks it on the device and reads back only the id.
    fn forward_greedy(&mut self, tokens: &[u32]) -> Result<u32> {
        Ok(ops::argmax(&self.forward(tokens, false)?) as u32)
    }
    /// Runs `tokens` and draws the next id per `args` where the engine can (the GPU: one id read back), else
    /// returns the last logits for the caller's sampler.
    fn forward_sample(&mut self, tokens: &[u32], _args: &SampleArgs) -> Result<Step> {
        Ok(Step::Logits(self.forward(tokens, false)?))
    }
    /// Runs `tokens` and picks the next id among those `allowed` (a grammar's mask: bit `id % 32` of word `id / 32`)
    /// by argmax (`draw` is `None`) or per `draw`, where the engine can (the GPU: one id read back); else returns
    /// the last logits for the caller to mask.
    fn forward_masked(&mut self, tokens: &[u32], _draw: Option<&SampleArgs>, _allowed: &[u32]) -> Result<Step> {
        Ok(Step::Logits(self.forward(tokens, false)?))
    }
    /// The keys and values cached, as a saved chat carries them (the same rows from every engine).
    fn kv_rows(&self) -> Result<KvRows>;
    /// Replaces the cache with saved rows of this model. Rows that do not fit it are an error that changes nothing;
    /// a device that fails while taking them leaves the cache empty, never half-filled.
    fn set_kv_rows(&mut self, kv: KvRows) -> Result<()>;
}

/// Keys and values of every layer, `[pos][kv_heads × head_dim]`, grown as positions arrive (never more than
/// the model's context). A layer that attends to a window of `w` positions keeps only what later queries read: its
/// rows start at `first[l]`, and the ones before `len − w + 1` go once there are `w` of them (so a layer holds at
/// most about 2w rows, plus a prompt chunk).
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    len: usize,
    /// Per layer: its window (`None`: every position) and the first position its rows hold.
    windows: Vec<Option<usize>>,
    first: Vec<usize>,
}

impl KvCache {
    /// A cache for `windows.len()` layers, each keeping every position or only its window.
    pub fn new(windows: Vec<Option<usize>>) -> KvCache {
        let layers = windows.len();
        KvCache {
            k: vec![Vec::new(); layers],
            v: vec![Vec::new(); layers],
            len: 0,
            first: vec![0; layers],
            windows,
        }
    }

    /// Drops the rows of windowed layers that no query from position `len` on reads, once there are at least a
    /// window's worth of them (amortised: a decode step moves no rows).
    fn trim(&mut self, kv_dim: usize) {
        for l in 0..self.k.len() {
            let Some(w) = self.windows[l] else { continue };
            let needed_from = (self.len + 1).saturating_sub(w);
            let stale = needed_from.saturating_sub(self.first[l]);
            if stale >= w.max(64) {
                self.k[l].drain(..stale * kv_dim);
                self.v[l].drain(..stale * kv_dim);
                self.first[l] += stale;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps the first `len` positions, or none where a windowed layer has dropped rows the position `len` reads;
    /// returns the positions kept.
    pub fn truncate(&mut self, len: usize, kv_dim: usize) -> usize {
        let len = self.len.min(len);
        let lost =
            (0..self.k.len()).any(|l| self.windows[l].is_some_and(|w| (len + 1).saturating_sub(w) < self.first[l]));
        self.len = if lost { 0 } else { len };
        for l in 0..self.k.len() {
            if self.len == 0 {
                self.first[l] = 0;
            }
            let rows = self.len - self.first[l];
            self.k[l].truncate(rows * kv_dim);
            self.v[l].truncate(rows * kv_dim);
        }
        self.len
    }

    /// The most bytes the cache of `cfg` can hold over `positions` positions: every position for a global layer;
    /// for a windowed one what trimming leaves at most (two windows, or one and 64 rows, and a prompt chunk).
    pub fn max_bytes(cfg: &ModelConfig, positions: usize) -> u64 {
        let rows = |l: usize| match cfg.window(l) {
            Some(w) => positions.min(w + w.max(64) + PREFILL_CHUNK),
            None => positions,
        };
        (0..cfg.n_layers)
            .map(|l| 2 * rows(l) as u64 * cfg.kv_dim() as u64 * 4)
            .sum()
    }

    /// The rows held (each layer's from its first kept position), as a saved chat carries them.
    pub fn rows(&self, kv_dim: usize) -> KvRows {
        let layers = (0..self.k.len())
            .map(|l| LayerRows {
                from: self.first[l],
                k: self.k[l].clone(),
                v: self.v[l].clone(),
            })
            .collect();
        KvRows {
            len: self.len,
            kv_dim,
            layers,
        }
    }

    /// Holds `kv`'s rows instead (checked against the model by the caller: one layer each, the rows each reads).
    pub fn set_rows(&mut self, kv: KvRows) {
        self.len = kv.len;
        for (l, r) in kv.layers.into_iter().enumerate() {
            self.first[l] = r.from;
            self.k[l] = r.k;
            self.v[l] = r.v;
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|c| c.capacity() * 4).sum()
    }
}

/// Prompt tokens computed together: bounds the scratch buffers of a long prompt.
const PREFILL_CHUNK: usize = 256;

/// The CPU engine.
pub struct CpuEngine {
    cfg: ModelConfig,
    weights: Arc<ModelWeights>,
    cache: KvCache,
    ropes: Ropes,
}

impl CpuEngine {
    /// An engine over `weights`, its matrices in the layout this CPU's kernels read fastest
    /// ([`ModelWeights::for_cpu`]).
    pub fn new(cfg: ModelConfig, weights: Arc<ModelWeights>) -> CpuEngine {
        CpuEngine {
            cache: KvCache::new((0..cfg.n_layers).map(|l| cfg.window(l)).collect()),
            ropes: cfg.ropes(),
            cfg,
            weights: weights.for_cpu(),
        }
    }

    pub fn cache_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// One chunk of tokens through every block of a call whose sequence ends at `end` positions (which picks
    /// LongRoPE's factors); returns the final hidden states (n × hidden), normalised.
    fn run_chunk(&mut self, tokens: &[u32], end: usize) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let w = &*self.weights;
        let (n, h, qd, kvd, hd) = (tokens.len(), c.hidden, c.q_dim(), c.kv_dim(), c.head_dim);
        let start = self.cache.len;
        let pairs = c.rope_style.pairs();
        let mut x = vec![0f32; n * h];
        for (row, &t) in x.chunks_exact_mut(h).zip(tokens) {
            if t as usize >= c.vocab {
                return Err(LoomError::InvalidInput(format!(
                    "token id {t} is outside the vocabulary of {}",
                    c.vocab
                )));
            }
            w.embed.view().dequantize_row(t as usize, row)?;
        }
        let spec = &c.block;
        scale(&mut x, spec.embed_scale);
        let rule = ops::Scores {
            scale: spec.attn_scale,
            cap: spec.attn_softcap,
        };
        let mut xn = vec![0f32; n * h];
        let mut q = vec![0f32; n * qd];
        let mut k = vec![0f32; n * kvd];
        let mut v = vec![0f32; n * kvd];
        let mut att = vec![0f32; n * qd];
        let mut proj = vec![0f32; n * h];
        let mut gate = vec![0f32; n * c.ffn];
        let mut up = vec![0f32; n * c.ffn];
        let mut kt = Vec::new();
        for (l, b) in w.blocks.iter().enumerate() {
            each_token(&mut xn, n, |t, row| {
                ops::rms_norm_into(&x[t * h..(t + 1) * h], &b.attn_norm, c.rms_eps, row)
            });
            quant::matmul_each(
                &xn,
                n,
                &mut [(b.wq.view(), &mut q), (b.wk.view(), &mut k), (b.wv.view(), &mut v)],
            )?;
            add_bias(&mut q, &b.bq);
            add_bias(&mut k, &b.bk);
            add_bias(&mut v, &b.bv);
            if let (Some(qn), Some(kn)) = (&b.q_norm, &b.k_norm) {
                ops::rms_norm(&mut q, qn, c.rms_eps);
                ops::rms_norm(&mut k, kn, c.rms_eps);
            }
            let freqs = c.layer_rope(l, self.ropes.global(end), self.ropes.sliding());
            if c.rotates(l) {
                each_token(&mut q, n, |t, row| ops::rope(row, hd, start + t, freqs, pairs));
                each_token(&mut k, n, |t, row| ops::rope(row, hd, start + t, freqs, pairs));
            }
            let held_from = self.cache.first[l];
            let (kc, vc) = (&mut self.cache.k[l], &mut self.cache.v[l]);
            kc.extend_from_slice(&k);
            vc.extend_from_slice(&v);
            // Every (token, kv head) on its own: the query heads `j·group..(j + 1)·group` read kv head j together,
            // over the positions their window keeps (the latest `window`, their own included).
            let (kv_heads, group) = (c.n_kv_heads, c.n_heads / c.n_kv_heads);
            let window = c.window(l);
            let (kc, vc) = (&*kc, &*vc);
            if n >= PAR_TOKENS && ops::attention_tokens_fast(hd) {
                // A prompt: `ATTENTION_TOKENS` tokens a task, each kv head's keys transposed once for all of them.
                let len = kc.len() / kvd;
                kt.resize(kv_heads * hd * len, 0.0);
                for (j, kt) in kt.chunks_exact_mut(hd * len).enumerate() {
                    ops::transpose_keys(kc, len, kvd, j * hd, hd, kt);
                }
                let kt = &kt[..];
                let scratch = ops::attention_tokens_scratch(ATTENTION_TOKENS, group, len);
                quant::par_chunks(&mut att, ATTENTION_TOKENS * qd, scratch, |i, out, scores| {
                    let first_token = i * ATTENTION_TOKENS;
                    let ranges: Vec<(usize, usize)> = (first_token..first_token + out.len() / qd)
                        .map(|t| {
                            let end = start + t + 1;
                            let first = window.map_or(0, |w| end.saturating_sub(w));
                            (first - held_from, end - held_from)
                        })
                        .collect();
                    for j in 0..kv_heads {
                        let queries = ops::TokenQueries {
                            q: &q[first_token * qd + j * group * hd..],
                            stride: qd,
                            heads: group,
                            head_dim: hd,
                            ranges: &ranges,
                            kt: &kt[j * hd * len..][..hd * len],
                            len,
                            v: vc,
                            kv_dim: kvd,
                            kv_offset: j * hd,
                            rule,
                        };
                        ops::attention_tokens(&queries, &mut out[j * group * hd..], scores);
                    }
                });
            } else {
                quant::par_chunks(&mut att, group * hd, group * (start + n), |i, out, scores| {
                    let (t, j) = (i / kv_heads, i % kv_heads);
                    let qs = &q[t * qd + j * group * hd..][..group * hd];
                    let end = start + t + 1;
                    let first = window.map_or(0, |w| end.saturating_sub(w));
                    // Rows start at `held_from`: trimming keeps every row a query of this chunk reads.
                    let (ks, vs) = (&kc[(first - held_from) * kvd..], &vc[(first - held_from) * kvd..]);
                    ops::attention_group(qs, ks, vs, end - first, kvd, j * hd, hd, rule, out, scores);
                });
            }
            matmul(&b.wo, &att, n, &mut proj)?;
            add_bias(&mut proj, &b.bo);
            if let Some(norm) = &b.post_attn_norm {
                ops::rms_norm(&mut proj, norm, c.rms_eps);
            }
            scale(&mut proj, spec.residual_scale);
            ops::add(&mut x, &proj);
            each_token(&mut xn, n, |t, row| {
                ops::rms_norm_into(&x[t * h..(t + 1) * h], &b.ffn_norm, c.rms_eps, row)
            });
            quant::matmul_each(&xn, n, &mut [(b.gate.view(), &mut gate), (b.up.view(), &mut up)])?;
            add_bias(&mut gate, &b.b_gate);
            add_bias(&mut up, &b.b_up);
            let ffn = c.ffn;
            each_token(&mut gate, n, |t, row| match spec.ffn_act {
                FfnAct::Silu => ops::silu_mul(row, &up[t * ffn..(t + 1) * ffn]),
                FfnAct::GeluTanh => ops::gelu_tanh_mul(row, &up[t * ffn..(t + 1) * ffn]),
            });
            matmul(&b.down, &gate, n, &mut proj)?;
            add_bias(&mut proj, &b.b_down);
            if let Some(norm) = &b.post_ffn_norm {
                ops::rms_norm(&mut proj, norm, c.rms_eps);
            }
            scale(&mut proj, spec.residual_scale);
            ops::add(&mut x, &proj);
        }
        self.cache.len += n;
        self.cache.trim(kvd);
        ops::rms_norm(&mut x, &w.final_norm, c.final_norm_eps);
        Ok(x)
    }
}

/// Prompt tokens from which the per-token steps between the matmuls (norms, RoPE, the gated unit) are split over
/// the pool, and the tokens of one task: a decode step's would cost more to hand over than to run (7-8% of a
/// 512-token prefill's CPU time ran on one thread of two before).
const PAR_TOKENS: usize = 16;
const TOKENS_PER_TASK: usize = 8;
/// Tokens of a prompt an attention task takes (`ops::attention_tokens`): each value row read once for all of them.
const ATTENTION_TOKENS: usize = 8;

/// `f(t, row)` for each of the `n` equal rows of `out`: over the pool for `PAR_TOKENS` rows and more.
fn each_token(out: &mut [f32], n: usize, f: impl Fn(usize, &mut [f32]) + Send + Sync) {
    if n == 0 {
        return;
    }
    let len = out.len() / n;
    if n < PAR_TOKENS {
        out.chunks_exact_mut(len).enumerate().for_each(|(t, row)| f(t, row));
        return;
    }
    quant::par_chunks(out, TOKENS_PER_TASK * len, 0, |i, rows, _| {
        for (k, row) in rows.chunks_exact_mut(len).enumerate() {
            f(TOKENS_PER_TASK * i + k, row);
        }
    });
}

/// `x *= s` (a family's multiplier; 1 leaves x as it is).
fn scale(x: &mut [f32], s: f32) {
    if s != 1.0 {
        x.iter_mut().for_each(|v| *v *= s);
    }
}

fn add_bias(x: &mut [f32], bias: &Option<Vec<f32>>) {
    if let Some(bias) = bias {
        ops::add_bias(x, bias);
    }
}

fn matmul(w: &Matrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    quant::matmul(&w.view(), x, n, y)
}

impl Engine for CpuEngine {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn device(&self) -> String {
        "CPU".into()
    }

    fn cached(&self) -> usize {
        self.cache.len
    }

    fn truncate(&mut self, len: usize) -> usize {
        self.cache.truncate(len, self.cfg.kv_dim())
    }

    fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        quant::in_pool(|| self.forward_in_pool(tokens, all_logits))
    }

    fn kv_rows(&self) -> Result<KvRows> {
        Ok(self.cache.rows(self.cfg.kv_dim()))
    }

    fn set_kv_rows(&mut self, kv: KvRows) -> Result<()> {
        kv.check(&self.cfg, self.cfg.context)?;
        self.cache.set_rows(kv);
        Ok(())
    }
}

impl CpuEngine {
    fn forward_in_pool(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(LoomError::InvalidInput("no tokens to run".into()));
        }
        let needed = self.cache.len + tokens.len();
        if needed > self.cfg.context {
            return Err(LoomError::ContextFull {
                needed,
                limit: self.cfg.context,
            });
        }
        let (h, vocab) = (self.cfg.hidden, self.cfg.vocab);
        let head = self.weights.lm_head().clone();
        let mut logits = Vec::with_capacity(if all_logits { tokens.len() * vocab } else { vocab });
        let chunks = tokens.len().div_ceil(PREFILL_CHUNK);
        let before = self.cache.len;
        for (i, chunk) in tokens.chunks(PREFILL_CHUNK).enumerate() {
            let hidden = match self.run_chunk(chunk, needed) {
                Ok(h) => h,
                Err(e) => {
                    // A failed call leaves the cache as it found it.
                    self.cache.truncate(before, self.cfg.kv_dim());
                    return Err(e);
                }
            };
            if !all_logits && i + 1 < chunks {
                continue;
            }
            let rows: &[f32] = if all_logits {
                &hidden
            } else {
                &hidden[hidden.len() - h..]
            };
            let n = rows.len() / h;
            let at = logits.len();
            logits.resize(at + n * vocab, 0.0);
            matmul(&head, rows, n, &mut logits[at..])?;
            scale(&mut logits[at..], 1.0 / self.cfg.block.logit_scale);
            if let Some(cap) = self.cfg.block.final_softcap {
                logits[at..].iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
            }
        }
        Ok(logits)
    }
}
