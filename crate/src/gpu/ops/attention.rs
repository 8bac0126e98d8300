//! Host for `shaders/attention.wgsl`: the KV cache, its update kernel, and causal GQA attention against it (prefill:
//! many tokens at once; decode: one token against the cache). CPU twin: the attention step of `crate::cpu`
//! attention.rs, f64 there and f32 here. [`crate::gpu::Mha`] composes these into a MultiHeadAttention layer.

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, dispatch_3d, grid_for, storage_f32, u32_dim};
use super::tensor::check_values;
use super::{GpuTensor, Rows, REDUCE_WGSL};
use crate::cpu::ops::RopePairs;
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ATTENTION_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/attention.wgsl"));

/// Head dimensions one attention workgroup stages and outputs (its shared query chunk, 4 values per lane); wider heads
/// take several workgroups along z, each producing one chunk of the output.
const HEAD_CHUNK: u32 = 256;

/// K and V caches on the GPU, `[kv_head][max_seq][head_dim]` f32 each; timeline position `p` is row `p % max_seq`.
pub struct KvCache {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub max_seq: u32,
}

impl KvCache {
    /// A zeroed cache.
    pub async fn new(gpu: &Gpu, kv_heads: usize, head_dim: usize, max_seq: usize) -> Result<KvCache> {
        let len = kv_heads
            .checked_mul(head_dim)
            .and_then(|n| n.checked_mul(max_seq))
            .ok_or_else(|| LoomError::Unsupported("KV cache size overflows".into()))?;
        if max_seq == 0 {
            return Err(LoomError::InvalidInput("a KV cache of 0 rows".into()));
        }
        check_binding(gpu, "KV cache", 4 * len as u64)?;
        Ok(KvCache {
            k: gpu.output("k cache", 4 * len as u64).await?,
            v: gpu.output("v cache", 4 * len as u64).await?,
            kv_heads: u32_dim(kv_heads, "kv heads")?,
            head_dim: u32_dim(head_dim, "head_dim")?,
            max_seq: u32_dim(max_seq, "max_seq")?,
        })
    }

    /// Records zeroing both caches.
    pub fn clear(&self, rec: &mut Recorder) {
        rec.encoder().clear_buffer(&self.k, 0, None);
        rec.encoder().clear_buffer(&self.v, 0, None);
    }

    /// The caches' contents, `[kv_head][max_seq][head_dim]` each.
    pub async fn read(&self, gpu: &Gpu) -> Result<(Vec<f32>, Vec<f32>)> {
        let len = (self.kv_heads * self.head_dim * self.max_seq) as usize;
        let mut k = gpu.read_f32(&self.k).await?;
        let mut v = gpu.read_f32(&self.v).await?;
        k.truncate(len);
        v.truncate(len);
        Ok((k, v))
    }
}

/// What the queries of one attention dispatch attend to.
#[derive(Clone, Copy, Debug)]
pub struct AttendArgs {
    /// Timeline position of the first query; query `t` attends to positions `0..=pos0 + t`.
    pub pos0: u32,
    /// Score scale, `1/√head_dim` for Loom.
    pub scale: f32,
    /// A sliding window: each query attends to its latest `window` positions (its own included); 0 for all.
    pub window: u32,
    /// Soft-capped scores (Gemma 2): each scaled score becomes `cap · tanh(score / cap)`; 0 for none.
    pub softcap: f32,
    /// Split each query's positions into runs attended by workgroups of their own, then combine them
    /// (flash-decoding): one dispatch more, for the LLM engine, whose decode step would otherwise walk its whole
    /// context in one workgroup per head.
    pub split: bool,
}

/// The most runs a query's positions are split into.
const MAX_SPLITS: u32 = 32;
/// The longest run whose dot products the kernel shares among lanes (`attention.wgsl`'s `lpp`).
const LANE_SHARED_RUN: u32 = 32;
/// The fewest positions a run is worth, and the runs a query takes before its runs grow. On an H200 (decode of four
/// model shapes after 16 and after 512 prompt tokens), runs of 8 were fastest at the short context (Gemma's 256-dim
/// heads most) and runs of 32 at 512. So: runs of 8 up to 16 runs (128 positions); then 16 runs, growing up to 32
/// positions (512); then runs of 32 up to `MAX_SPLITS` runs (1,024); then that many runs, growing.
pub const ATTENTION_RUN_POSITIONS: u32 = 8;
pub const ATTENTION_MAX_SPLITS: u32 = 16;
/// CPU adapters (lavapipe, SwiftShader) keep few long runs: each run's workgroup costs them a dozen barriers, which
/// they run on the host (with runs of 8 the Chat page's WebGPU benchmark on SwiftShader ran past its test's four
/// minutes; it took two to three).
const CPU_ADAPTER_RUN_POSITIONS: u32 = 32;
/// Split workgroups a dispatch aims at (queries × heads × splits): enough to fill a GPU.
const SPLIT_WORKGROUPS: u32 = 4096;

/// The tokens' own K and V rows an attention dispatch writes into the cache (see [`Attention::encode_attend`]).
#[derive(Clone, Copy)]
pub struct NewKv<'a> {
    pub k: Rows<'a>,
    pub v: Rows<'a>,
    /// The queries and these K rows are read unrotated and turned by RoPE in the attention (its dispatch saved).
    pub rope: Option<RopeIn<'a>>,
}

/// RoPE applied inside the attention (CPU twin [`crate::cpu::ops::rope`]): the first `pairs` pairs of every head
/// turned, paired as `style` says, with the dispatch's tokens' (cos, sin) in `table` (`[tokens][pairs]` pairs).
#[derive(Clone, Copy)]
pub struct RopeIn<'a> {
    pub table: &'a wgpu::Buffer,
    pub pairs: u32,
    pub style: RopePairs,
}

/// How a one-shot attention ([`Attention::run`]) writes the tokens' K and V rows.
#[derive(Clone, Copy)]
pub enum KvWrite<'a> {
    /// A KV update's dispatch first.
    Update,
    /// The attention itself, turning the queries and K rows by RoPE as it reads them if given: the tokens' (cos,
    /// sin) table values, the pairs per head and their pairing.
    Fused(Option<(&'a [f32], u32, RopePairs)>),
}

/// The KV-update and attention kernels.
pub struct Attention {
    kv_update: Arc<wgpu::ComputePipeline>,
    attend: Arc<wgpu::ComputePipeline>,
    attend_split: Arc<wgpu::ComputePipeline>,
    attend_combine: Arc<wgpu::ComputePipeline>,
    /// The fewest positions a split run is worth ([`Attention::set_run_positions`]).
    run_positions: u32,
    /// The runs a query takes before its runs grow ([`Attention::set_max_splits`]).
    max_splits: u32,
}

impl Attention {
    pub fn new(gpu: &Gpu) -> Result<Attention> {
        let source = format!("{REDUCE_WGSL}\n{ATTENTION_WGSL}");
        let cpu = gpu.info.device_type == wgpu::DeviceType::Cpu;
        Ok(Attention {
            kv_update: gpu.pipeline("attention_kv_update", &source, "kv_update")?,
            attend: gpu.pipeline("attention_attend", &source, "attend")?,
            attend_split: gpu.pipeline("attention_attend_split", &source, "attend_split")?,
            attend_combine: gpu.pipeline("attention_attend_combine", &source, "attend_combine")?,
            run_positions: if cpu {
                CPU_ADAPTER_RUN_POSITIONS
            } else {
                ATTENTION_RUN_POSITIONS
            },
            max_splits: if cpu { MAX_SPLITS } else { ATTENTION_MAX_SPLITS },
        })
    }

    /// The fewest positions a split run takes (default 8; 32 on CPU adapters): a query's positions split into runs
    /// of at least this many, up to the split limit. Fewer a run spread a decode step's attention over more
    /// workgroups, each shorter, and leave more runs to combine.
    pub fn set_run_positions(&mut self, positions: u32) {
        self.run_positions = positions.max(1);
    }

    /// The runs a query's positions are split into before its runs grow past the fewest positions (default 16, 32 on
    /// CPU adapters; see [`ATTENTION_RUN_POSITIONS`]): at a long context, fewer runs each longer, and fewer to
    /// combine. Runs still stay within the kernel's lane-shared length while 32 runs allow.
    pub fn set_max_splits(&mut self, splits: u32) {
        self.max_splits = splits.max(1);
    }

    /// Records writing the rows of `k` and `v` (`kv_heads·head_dim` values each) into the cache at positions
    /// `pos0..`. The two may be columns of one buffer's rows (a fused q|k|v row): they share rows and stride.
    pub fn encode_kv_update(&self, rec: &mut Recorder, cache: &KvCache, k: Rows, v: Rows, pos0: u32) -> Result<()> {
        self.encode_kv_write(rec, cache, k, v, pos0, None)
    }

    /// [`Attention::encode_kv_update`], turning the K rows by `rope` (its table checked by the caller).
    fn encode_kv_write(
        &self,
        rec: &mut Recorder,
        cache: &KvCache,
        k: Rows,
        v: Rows,
        pos0: u32,
        rope: Option<RopeIn>,
    ) -> Result<()> {
        let (k, v) = self.check_kv_rows(cache, k, v)?;
        let n = k.len();
        if n == 0 {
            return Ok(());
        }
        u32_dim(n as usize, "KV update size")?;
        let g = grid_for(rec.gpu(), n, 64, "KV update")?;
        let words = [
            k.rows,
            k.row0,
            pos0,
            cache.max_seq,
            0,
            cache.kv_heads,
            cache.head_dim,
            0,
            0,
            0,
            0,
            0,
            k.stride,
            k.col0,
            v.col0,
            0,
            0,
            rope.map_or(0, |r| r.pairs),
            u32::from(rope.is_some_and(|r| r.style == RopePairs::Adjacent)),
        ];
        // Without RoPE the kernel still declares the table's binding: k's buffer (read-only) stands in.
        let table = rope.map_or(k.buffer, |r| r.table);
        let buffers = [(1, k.buffer), (2, v.buffer), (3, &cache.k), (4, &cache.v), (11, table)];
        dispatch(rec, &self.kv_update, &words, &buffers, g);
        Ok(())
    }

    /// Records causal attention of each row of `q` (whole heads of `head_dim`) against the cache into the same
    /// rows of `out`. Both start at column 0 of their buffer's rows and may be strided; they share their first row.
    /// With `new_kv`, the queries' own K and V rows (as [`Attention::encode_kv_update`] takes them, sharing q's
    /// rows) are written into the cache at positions `args.pos0..` first: where no query reads a cache row this
    /// dispatch writes, by a decode step's attention dispatch itself (its KV update's dispatch saved) or, for a
    /// prompt's chunk, by a KV update that turns K by RoPE on the way; else by a plain KV update before it. RoPE in
    /// `new_kv` needs the former (an error otherwise).
    pub fn encode_attend(
        &self,
        rec: &mut Recorder,
        cache: &KvCache,
        q: Rows,
        new_kv: Option<NewKv>,
        out: Rows,
        args: AttendArgs,
    ) -> Result<()> {
        let gpu = rec.gpu();
        q.check("attention queries")?;
        out.check("attention output")?;
        let hd = cache.head_dim;
        if hd == 0
            || !q.cols.is_multiple_of(hd)
            || (q.rows, q.cols, q.row0, q.col0) != (out.rows, out.cols, out.row0, 0)
            || out.col0 != 0
        {
            return Err(LoomError::InvalidInput(format!(
                "attention over heads of {hd}: queries {q}, output {out}"
            )));
        }
        let heads = q.cols / hd;
        if q.rows == 0 || heads == 0 {
            return Ok(());
        }
        if cache.kv_heads == 0 || heads / cache.kv_heads == 0 {
            return Err(LoomError::InvalidInput(format!(
                "{heads} heads cannot share {} kv heads",
                cache.kv_heads
            )));
        }
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        let chunks = hd.div_ceil(HEAD_CHUNK);
        if heads > max || q.rows > max || chunks > max {
            return Err(LoomError::Unsupported(format!(
                "attention of {heads} heads × {} tokens exceeds {max} workgroups per dimension",
                q.rows
            )));
        }
        // The queries' K and V rows written by the attention itself: each query then reads positions pos0.. from
        // them, so no cache row this dispatch writes may be one a query reads from the cache (no wrap within the
        // positions a query sees: a whole cache, or a window's ring with room for the tokens).
        let fused = match new_kv {
            Some(NewKv { k, v, rope }) => {
                let fits = args.pos0.saturating_add(q.rows) <= cache.max_seq
                    || (args.window > 0 && args.window.saturating_add(q.rows) <= cache.max_seq);
                if fits && heads.is_multiple_of(cache.kv_heads) && (k.row0, k.rows) == (q.row0, q.rows) {
                    let (k, v) = self.check_kv_rows(cache, k, v)?;
                    if let Some(r) = rope {
                        if r.pairs == 0 || 2 * u64::from(r.pairs) > u64::from(hd) {
                            return Err(LoomError::InvalidInput(format!(
                                "RoPE of {} pairs in heads of {hd}",
                                r.pairs
                            )));
                        }
                        check_values("RoPE table", r.table, 2 * u64::from(q.rows) * u64::from(r.pairs))?;
                    }
                    Some((k, v, rope))
                } else if rope.is_some() {
                    return Err(LoomError::InvalidInput(format!(
                        "RoPE inside attention needs it to write the tokens' K and V itself: {} tokens at {} in a \
                         cache of {} rows ({heads} heads on {} kv heads, K rows from {})",
                        q.rows, args.pos0, cache.max_seq, cache.kv_heads, k.row0
                    )));
                } else {
                    self.encode_kv_update(rec, cache, k, v, args.pos0)?;
                    None
                }
            }
            None => None,
        };
        // A prompt's chunk (more than one query) has its K rows turned once and written by a KV update before the
        // attention, which then turns only the queries and reads every position from the cache: turning K as each
        // query read it took four loads and the pair's index arithmetic per value, for every query again.
        let (fused, rope) = match fused {
            Some((k, v, rope)) if q.rows > 1 => {
                self.encode_kv_write(rec, cache, k, v, args.pos0, rope)?;
                (None, rope)
            }
            fused => (fused, fused.and_then(|(_, _, r)| r)),
        };
        // Splits: the dispatch's shape fixes how many at most (so that a decode step's scratch and dispatches stay
        // the same from step to step), and the scratch binding; the positions the last query sees, how many are
        // used now.
        let record = 4 * u64::from(q.rows) * u64::from(heads) * (u64::from(hd) + 2);
        let most = MAX_SPLITS.max(self.max_splits);
        let fit = (gpu.limits.max_storage_buffer_binding_size / record).min(u64::from(most)) as u32;
        let max_splits = if args.split {
            (SPLIT_WORKGROUPS / (q.rows * heads).max(1))
                .clamp(1, most)
                .min(fit.max(1))
        } else {
            1
        };
        let last = args.pos0.saturating_add(q.rows);
        let span = if args.window == 0 { last } else { last.min(args.window) };
        let splits = span
            .div_ceil(self.run_positions)
            .min(self.max_splits)
            .max(span.div_ceil(LANE_SHARED_RUN))
            .clamp(1, max_splits);
        let words = [
            q.rows,
            q.row0,
            args.pos0,
            cache.max_seq,
            heads,
            cache.kv_heads,
            hd,
            q.stride,
            out.stride,
            args.scale.to_bits(),
            args.window,
            args.softcap.to_bits(),
            fused.map_or(0, |(k, _, _)| k.stride),
            fused.map_or(0, |(k, _, _)| k.col0),
            fused.map_or(0, |(_, v, _)| v.col0),
            splits,
            u32::from(fused.is_some()),
            rope.map_or(0, |r| r.pairs),
            u32::from(rope.is_some_and(|r| r.style == RopePairs::Adjacent)),
        ];
        // Without an update or RoPE the kernels still declare those bindings: q's buffer (read-only) stands in.
        let (k_new, v_new) = fused.map_or((q.buffer, q.buffer), |(k, v, _)| (k.buffer, v.buffer));
        let table = rope.map_or(q.buffer, |r| r.table);
        let inputs = [
            (1, k_new),
            (2, v_new),
            (3, &cache.k),
            (4, &cache.v),
            (5, q.buffer),
            (11, table),
        ];
        if max_splits == 1 {
            let mut buffers = inputs.to_vec();
            buffers.push((8, out.buffer));
            dispatch_3d(rec, &self.attend, &words, &buffers, (heads, q.rows, chunks));
            return Ok(());
        }
        if chunks * max_splits > max {
            return Err(LoomError::Unsupported(format!(
                "attention over heads of {hd} in {max_splits} runs exceeds {max} workgroups per dimension"
            )));
        }
        let shape = [q.rows, heads, max_splits, hd + 2].map(|d| d as usize).to_vec();
        let part = GpuTensor::scratch(rec, shape)?;
        let mut buffers = inputs.to_vec();
        buffers.push((9, &part.buffer));
        dispatch_3d(
            rec,
            &self.attend_split,
            &words,
            &buffers,
            (heads, q.rows, chunks * splits),
        );
        dispatch_3d(
            rec,
            &self.attend_combine,
            &words,
            &[(8, out.buffer), (10, &part.buffer)],
            (heads, q.rows, chunks),
        );
        Ok(())
    }

    /// Checks K and V rows for the cache: whole rows of `kv_heads·head_dim` values, the same rows and stride.
    fn check_kv_rows<'a>(&self, cache: &KvCache, k: Rows<'a>, v: Rows<'a>) -> Result<(Rows<'a>, Rows<'a>)> {
        k.check("KV update K")?;
        v.check("KV update V")?;
        let kv_w = u64::from(cache.kv_heads) * u64::from(cache.head_dim);
        if u64::from(k.cols) != kv_w || (k.rows, k.cols, k.stride, k.row0) != (v.rows, v.cols, v.stride, v.row0) {
            return Err(LoomError::InvalidInput(format!(
                "KV update of rows of {kv_w} values: K {k}, V {v}"
            )));
        }
        Ok((k, v))
    }

    /// One-shot: writes the `k`, `v` rows of `tokens = q.len() / (heads·head_dim)` tokens into `cache` at positions
    /// `args.pos0..` as `write` says, then attends each query as `args` say. `pos0 = 0` is a prefill; a later call
    /// with one token is a decode step. Returns `[tokens][heads·head_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub async fn run(
        &self,
        gpu: &Gpu,
        cache: &KvCache,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        heads: usize,
        args: AttendArgs,
        write: KvWrite<'_>,
    ) -> Result<Vec<f32>> {
        let hd = cache.head_dim as usize;
        let (qw, kvw) = (heads * hd, cache.kv_heads as usize * hd);
        let tokens = q.len().checked_div(qw).unwrap_or(0);
        if qw == 0 || q.len() != tokens * qw || k.len() != tokens * kvw || v.len() != tokens * kvw {
            return Err(LoomError::InvalidInput(format!(
                "attention: {} q, {} k, {} v values for {heads} heads and {} kv heads of {hd}",
                q.len(),
                k.len(),
                v.len(),
                cache.kv_heads
            )));
        }
        let qb = storage_f32(gpu, "q", q, q.len()).await?;
        let kb = storage_f32(gpu, "k", k, k.len()).await?;
        let vb = storage_f32(gpu, "v", v, v.len()).await?;
        let ob = gpu.output("attention out", 4 * q.len() as u64).await?;
        let tokens = u32_dim(tokens, "tokens")?;
        let mut rec = Recorder::new(gpu);
        let kv_w = cache.kv_heads * cache.head_dim;
        let (k_rows, v_rows) = (Rows::new(&kb, tokens, kv_w), Rows::new(&vb, tokens, kv_w));
        let table = match write {
            KvWrite::Fused(Some((values, _, _))) => Some(storage_f32(gpu, "RoPE table", values, values.len()).await?),
            _ => None,
        };
        let new_kv = match write {
            KvWrite::Update => {
                self.encode_kv_update(&mut rec, cache, k_rows, v_rows, args.pos0)?;
                None
            }
            KvWrite::Fused(rope) => Some(NewKv {
                k: k_rows,
                v: v_rows,
                rope: rope
                    .zip(table.as_ref())
                    .map(|((_, pairs, style), table)| RopeIn { table, pairs, style }),
            }),
        };
        let q_w = u32_dim(qw, "q row")?;
        self.encode_attend(
            &mut rec,
            cache,
            Rows::new(&qb, tokens, q_w),
            new_kv,
            Rows::new(&ob, tokens, q_w),
            args,
        )?;
        rec.submit();
        let mut out = gpu.read_f32(&ob).await?;
        out.truncate(q.len());
        Ok(out)
    }
}
