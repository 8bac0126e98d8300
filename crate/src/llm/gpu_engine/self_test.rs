//! The GPU self-test at open: each kernel the engine runs, once, on small seeded inputs against its CPU twin, then
//! the first token's logits (finite, not constant). A driver that miscompiles a kernel (subgroup sizes, f16, a
//! workgroup limit) shows here as [`LoomError::GpuSelfTest`] naming the kernel and by how much it is off, before a
//! single wrong token reaches a person; the caller then runs the model on the CPU.
//!
//! The bounds catch wrong kernels, not rounding: a matvec may be off by `1e-5 + 1e-4·Σ|x·w|`, every other kernel by
//! `1e-5 + 1e-4·|cpu|` (ten to a hundred times the differences the op tests measure on lavapipe and SwiftShader); a
//! decoder read wrong is off by the size of the values themselves. Argmax and the sampler must pick the same id.

use super::GpuEngine;
use crate::cpu::ops::{self, Scores};
use crate::dtype::{self, q4_0};
use crate::error::{LoomError, Result};
use crate::gpu::{
    packed_values, Argmax, AttendArgs, Gpu, KvCache, KvWrite, MatVec, MatVecOptions, PackedWeights, Packing, Pointwise,
    Recorder, Rows, SampleArgs, ARGMAX_SLICE,
};
use crate::llm::sampler::Sampler;
use crate::quant::GgmlType;

const ABS: f32 = 1e-5;
const REL: f32 = 1e-4;

/// One kernel's check: the largest difference from its CPU twin, and whether every value was within its bound.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCheck {
    /// The kernel, by its pipeline name's stem (`matvec/ggml_q4_k ×1`, `norm_rms ×64`, `attention_attend`, ...).
    pub kernel: String,
    pub max_error: f32,
    pub passed: bool,
}

/// Reproducible values uniform in `[lo, hi)` (SplitMix64).
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn values(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n)
            .map(|_| lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32))
            .collect()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Compares `got` with `want` within `ABS + REL·scale[i]` (`scale`: |want| unless given).
fn check(kernel: &str, got: &[f32], want: &[f32], scale: Option<&[f32]>) -> KernelCheck {
    let mut max_error = if got.len() == want.len() { 0.0 } else { f32::INFINITY };
    let mut passed = got.len() == want.len();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        let s = scale.map_or(w.abs(), |s| s[i]);
        // NaN fails: `NaN <= bound` is false.
        let within = err <= ABS + REL * s;
        passed &= within;
        max_error = if err.is_nan() || max_error.is_nan() {
            f32::NAN
        } else {
            max_error.max(err)
        };
    }
    KernelCheck {
        kernel: kernel.to_string(),
        max_error,
        passed,
    }
}

/// A tensor of `n` weights in `packing`, its bytes and scale: quantized from seeded values (Loom's codecs) or
/// seeded blocks with scales in a sane range (llama.cpp's types, which have no quantizer here).
fn weights(packing: Packing, n: usize, rng: &mut Seeded) -> (Vec<u8>, f32) {
    match packing {
        Packing::Loom(dt) => {
            let master = rng.values(n, -0.5, 0.5);
            let scale = dtype::auto_scale(dt, &master);
            (dtype::quantize(dt, &master, scale), scale)
        }
        Packing::LoomQ4_0 => (q4_0::pack(&rng.values(n, -0.5, 0.5)), 1.0),
        Packing::Ggml(t) => {
            let bb = t.block_bytes();
            let mut bytes = rng.bytes(n.div_ceil(t.block_len()) * bb);
            // Byte offsets of each block's f16 scale fields (random bits there could be NaN or huge).
            let halves: &[usize] = match t {
                GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
                GgmlType::Q6_K => &[208],
                GgmlType::LoomQ4_0 => &[],
                _ => &[0],
            };
            for block in bytes.chunks_exact_mut(bb) {
                for &o in halves {
                    let d = half::f16::from_f32(rng.values(1, -0.05, 0.05)[0]);
                    block[o..o + 2].copy_from_slice(&d.to_bits().to_le_bytes());
                }
                if t == GgmlType::LoomQ4_0 {
                    block[..4].copy_from_slice(&rng.values(1, -0.05, 0.05)[0].to_le_bytes());
                }
            }
            (bytes, 1.0)
        }
    }
}

/// Uploads each of `inputs`, records `f` over their buffers, submits, and reads every buffer back (inputs are
/// outputs too where a kernel writes in place).
async fn run_once(
    gpu: &Gpu,
    inputs: &[&[f32]],
    f: &dyn Fn(&mut Recorder, &[wgpu::Buffer]) -> Result<()>,
) -> Result<Vec<Vec<f32>>> {
    let mut buffers = Vec::with_capacity(inputs.len());
    for v in inputs {
        buffers.push(gpu.upload("self-test", bytemuck::cast_slice(v)).await?);
    }
    let mut rec = Recorder::new(gpu);
    f(&mut rec, &buffers)?;
    rec.submit();
    let mut out = Vec::with_capacity(buffers.len());
    for (b, v) in buffers.iter().zip(inputs) {
        let mut read = gpu.read_f32(b).await?;
        read.truncate(v.len());
        out.push(read);
    }
    Ok(out)
}

/// `W·x` for each row of `x` on the CPU, in f64, with `Σ|x·w|` per output (the matvec's error scale).
fn matvec_twin(w: &[f32], x: &[f32], n_in: usize, n_out: usize) -> (Vec<f32>, Vec<f32>) {
    let mut y = Vec::new();
    let mut s = Vec::new();
    for xr in x.chunks(n_in) {
        for row in w.chunks(n_in).take(n_out) {
            let (mut dot, mut abs) = (0f64, 0f64);
            for (a, b) in xr.iter().zip(row) {
                let p = f64::from(*a) * f64::from(*b);
                dot += p;
                abs += p.abs();
            }
            y.push(dot as f32);
            s.push(abs as f32);
        }
    }
    (y, s)
}

/// The matvec of one packing: plain over 1, 3 and 17 rows (a decode step, and each batch variant), then with the RMSNorm
/// folded in and the residual add (a decode step's variant), with x a gated unit's product `glu(gate)·up` (the down
/// projection's), then the embedding gather.
async fn matvec_checks(gpu: &Gpu, mv: &MatVec, eps: f32, glu: Pointwise, rng: &mut Seeded) -> Result<Vec<KernelCheck>> {
    let p = mv.packing();
    let name = format!("matvec/{}", p.key());
    // 256 inputs: a whole number of blocks of every type.
    let (n_in, n_out) = (256, 8);
    let (bytes, scale) = weights(p, n_in * n_out, rng);
    let w = PackedWeights::upload(gpu, p, &bytes, scale, n_in, n_out).await?;
    let dense = packed_values(p, &bytes, scale, n_in * n_out)?;
    let mut out = Vec::new();
    for batch in [1, 3, 17] {
        let x = rng.values(batch * n_in, -1.0, 1.0);
        let got = mv.run(gpu, &x, &w, Pointwise::Identity).await?;
        let (want, s) = matvec_twin(&dense, &x, n_in, n_out);
        out.push(check(&format!("{name} ×{batch}"), &got, &want, Some(&s)));
    }

    // y += W·RMSNorm(x; γ).
    let x = rng.values(n_in, -1.0, 1.0);
    let gamma = rng.values(n_in, 0.5, 1.5);
    let y0 = rng.values(n_out, -1.0, 1.0);
    let gb = gpu.upload("self-test γ", bytemuck::cast_slice(&gamma)).await?;
    let options = MatVecOptions {
        norm: Some((&gb, eps)),
        accumulate: true,
        glu: None,
    };
    let got = mv.run_with(gpu, &x, &w, &y0, Pointwise::Identity, options).await?;
    let mut xn = vec![0.0; n_in];
    ops::rms_norm_into(&x, &gamma, eps, &mut xn);
    let (prod, s) = matvec_twin(&dense, &xn, n_in, n_out);
    let want: Vec<f32> = prod.iter().zip(&y0).map(|(p, y)| p + y).collect();
    let s: Vec<f32> = s.iter().zip(&y0).map(|(s, y)| s + y.abs()).collect();
    out.push(check(&format!("{name} (norm, +=)"), &got, &want, Some(&s)));

    // y += W·g(gate)·up from fused gate|up rows (the down projection's variant), over 1 and 17 rows.
    for batch in [1, 17] {
        let gate_up = rng.values(batch * 2 * n_in, -3.0, 3.0);
        let y0 = rng.values(batch * n_out, -1.0, 1.0);
        let options = MatVecOptions {
            norm: None,
            accumulate: true,
            glu: Some(glu),
        };
        let got = mv
            .run_with(gpu, &gate_up, &w, &y0, Pointwise::Identity, options)
            .await?;
        let mut want = Vec::with_capacity(batch * n_out);
        let mut sums = Vec::with_capacity(batch * n_out);
        for (row, y_row) in gate_up.chunks(2 * n_in).zip(y0.chunks(n_out)) {
            let (mut x, up) = (row[..n_in].to_vec(), &row[n_in..]);
            glu_twin(glu, &mut x, up);
            let (prod, s) = matvec_twin(&dense, &x, n_in, n_out);
            want.extend(prod.iter().zip(y_row).map(|(p, y)| p + y));
            sums.extend(s.iter().zip(y_row).map(|(s, y)| s + y.abs()));
        }
        out.push(check(&format!("{name} (glu, +=) ×{batch}"), &got, &want, Some(&sums)));
    }

    // The embedding gather: rows 5, 0 and 7 of the matrix.
    let ids = [5u32, 0, 7];
    let id_bits: Vec<f32> = ids.iter().map(|&i| f32::from_bits(i)).collect();
    let ib = gpu.upload("self-test ids", bytemuck::cast_slice(&id_bits)).await?;
    let gathered = gpu.output("self-test rows", (4 * ids.len() * n_in) as u64).await?;
    let mut rec = Recorder::new(gpu);
    mv.encode_gather(
        &mut rec,
        Rows::new(&ib, ids.len() as u32, 1),
        &w,
        Rows::new(&gathered, ids.len() as u32, n_in as u32),
    )?;
    rec.submit();
    let got = gpu.read_f32(&gathered).await?;
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&i| dense[i as usize * n_in..][..n_in].iter().copied())
        .collect();
    out.push(check(&format!("{name} gather"), &got, &want, None));
    Ok(out)
}

/// The CPU's gated unit: `gate = g(gate)·up` for the engine's two functions.
fn glu_twin(glu: Pointwise, gate: &mut [f32], up: &[f32]) {
    match glu {
        Pointwise::Gelu => ops::gelu_tanh_mul(gate, up),
        _ => ops::silu_mul(gate, up),
    }
}

impl GpuEngine {
    /// Runs every kernel this engine uses once against its CPU twin on small seeded inputs, then the first token's
    /// logits; the engine's cache is left empty. A kernel off its twin (or logits that are not finite, or all one
    /// value) is [`LoomError::GpuSelfTest`] saying which kernel by how much: the engine should then be dropped and
    /// the model run on the CPU. Returns every check made.
    pub async fn self_test(&mut self) -> Result<Vec<KernelCheck>> {
        let checks = kernel_checks(self).await?;
        if let Some(bad) = checks.iter().find(|c| !c.passed) {
            return Err(LoomError::GpuSelfTest(format!(
                "the {} kernel differs from its CPU twin by up to {:e} (allowed {ABS:e} + {REL:e}·|cpu|)",
                bad.kernel, bad.max_error
            )));
        }
        self.reset();
        let logits = self.forward_logits(&[0], false).await;
        self.reset();
        let logits = logits?;
        let finite = logits.iter().all(|l| l.is_finite());
        let constant = logits.iter().all(|&l| l == logits[0]);
        if !finite || constant {
            let what = if finite { "all one value" } else { "not all finite" };
            return Err(LoomError::GpuSelfTest(format!(
                "the first token's logits on the GPU are {what} ({:?}…)",
                &logits[..logits.len().min(4)]
            )));
        }
        Ok(checks)
    }
}

/// The checks of every kernel in `k`, sized for the engine's shapes (head dimension, activation, attention's
/// scale, window and soft cap).
async fn kernel_checks(engine: &GpuEngine) -> Result<Vec<KernelCheck>> {
    let (gpu, k, c) = (&*engine.gpu, &engine.k, &engine.cfg);
    let mut rng = Seeded(0x5e1f_7e57);
    let mut out = Vec::new();
    let mut packings: Vec<&MatVec> = k.matvec.values().collect();
    packings.sort_by_key(|m| m.packing().key());
    let glu = super::glu_pointwise(c.block.ffn_act);
    for mv in packings {
        out.extend(matvec_checks(gpu, mv, c.rms_eps, glu, &mut rng).await?);
    }

    // RMSNorm over rows of the head dimension (the q/k norms' shape) and of 256.
    for width in [c.head_dim, 256] {
        let x = rng.values(3 * width, -2.0, 2.0);
        let gamma = rng.values(width, 0.5, 1.5);
        let got = k.norm.run_rms(gpu, &x, &gamma, c.rms_eps).await?;
        let mut want = vec![0.0; x.len()];
        for (xr, yr) in x.chunks(width).zip(want.chunks_mut(width)) {
            ops::rms_norm_into(xr, &gamma, c.rms_eps, yr);
        }
        out.push(check(&format!("norm_rms ×{width}"), &got, &want, None));
    }
    // h += x, then y = RMSNorm(h; γ): the residual add with the next block's norm.
    let width = 256;
    let (h, x, gamma) = (
        rng.values(2 * width, -2.0, 2.0),
        rng.values(2 * width, -2.0, 2.0),
        rng.values(width, 0.5, 1.5),
    );
    let y = vec![0.0; 2 * width];
    let got = run_once(gpu, &[&h, &x, &gamma, &y], &|rec, b| {
        let rows = |i: usize| Rows::new(&b[i], 2, width as u32);
        k.norm.encode_add_rms(rec, rows(0), rows(1), &b[2], rows(3), c.rms_eps)
    })
    .await?;
    let mut sum = h.clone();
    ops::add(&mut sum, &x);
    let mut want = vec![0.0; y.len()];
    for (hr, yr) in sum.chunks(width).zip(want.chunks_mut(width)) {
        ops::rms_norm_into(hr, &gamma, c.rms_eps, yr);
    }
    out.push(check("norm_add_rms (h)", &got[0], &sum, None));
    out.push(check("norm_add_rms (y)", &got[3], &want, None));

    // Attention: a five-token prefill of two query heads on one KV head, with the model's window and soft cap, the
    // tokens' K and V written by the attention and the model's RoPE (its pairing and rotated dimensions, the table
    // as the engine builds it) applied inside it, as the engine runs it.
    let (tokens, heads, hd) = (5, 2, c.head_dim);
    let window = c.block.sliding.as_ref().map_or(0, |_| 3);
    let cap = c.block.attn_softcap;
    let q = rng.values(tokens * heads * hd, -1.0, 1.0);
    let kk = rng.values(tokens * hd, -1.0, 1.0);
    let v = rng.values(tokens * hd, -1.0, 1.0);
    let cache = KvCache::new(gpu, 1, hd, 8).await?;
    let rot = engine.ropes.pairs();
    let freqs = engine.ropes.global(tokens);
    let pairs = c.rope_style.pairs();
    let table: Vec<f32> = (0..tokens)
        .flat_map(|pos| freqs.cos_sin(pos))
        .flat_map(|(c, s)| [c, s])
        .collect();
    let rope = (rot > 0).then_some((table.as_slice(), rot as u32, pairs));
    let got = k
        .attention
        .run(
            gpu,
            &cache,
            &q,
            &kk,
            &v,
            heads,
            AttendArgs {
                pos0: 0,
                scale: 1.0 / (hd as f32).sqrt(),
                window,
                softcap: cap.unwrap_or(0.0),
                split: true,
            },
            KvWrite::Fused(rope),
        )
        .await?;
    // The CPU turns q and k by RoPE first, token t at position t.
    let (mut q, mut kk) = (q, kk);
    if rot > 0 {
        for (t, row) in q.chunks_mut(heads * hd).enumerate() {
            ops::rope(row, hd, t, freqs, pairs);
        }
        for (t, row) in kk.chunks_mut(hd).enumerate() {
            ops::rope(row, hd, t, freqs, pairs);
        }
    }
    let rule = Scores {
        scale: 1.0 / (hd as f32).sqrt(),
        cap,
    };
    let mut want = vec![0.0; q.len()];
    let mut scores = vec![0.0; tokens];
    for t in 0..tokens {
        let first = if window == 0 {
            0
        } else {
            (t + 1).saturating_sub(window as usize)
        };
        for h in 0..heads {
            let at = (t * heads + h) * hd;
            let (kf, vf) = (&kk[first * hd..], &v[first * hd..]);
            ops::attention_head(
                &q[at..at + hd],
                kf,
                vf,
                t + 1 - first,
                hd,
                0,
                rule,
                &mut want[at..at + hd],
                &mut scores,
            );
        }
    }
    out.push(check("attention_attend", &got, &want, None));

    // The feed-forward's gated activation from two buffers and from fused gate|up rows (which the down projection
    // reads itself where the FFN is narrow: the matvec's glu); a bias row added in place; a scale.
    let width = 32;
    let gate = rng.values(2 * width, -4.0, 4.0);
    let up = rng.values(2 * width, -2.0, 2.0);
    let mut want = gate.clone();
    glu_twin(glu, &mut want, &up);
    let got = k.elementwise.glu(gpu, &gate, &up, glu).await?;
    out.push(check(&format!("elementwise_swiglu ({glu:?})"), &got, &want, None));
    let gate_up: Vec<f32> = gate
        .chunks(width)
        .zip(up.chunks(width))
        .flat_map(|(g, u)| g.iter().chain(u).copied())
        .collect();
    let y = vec![0.0; 2 * width];
    let got = run_once(gpu, &[&gate_up, &y], &|rec, b| {
        let (w, n) = (width as u32, 2);
        k.elementwise
            .encode_glu_rows(rec, Rows::new(&b[0], n, 2 * w), Rows::new(&b[1], n, w), glu)
    })
    .await?;
    out.push(check(
        &format!("elementwise_swiglu_rows ({glu:?})"),
        &got[1],
        &want,
        None,
    ));
    let bias = rng.values(width, -1.0, 1.0);
    let got = run_once(gpu, &[&gate, &bias], &|rec, b| {
        let w = width as u32;
        k.elementwise
            .encode_add_inplace(rec, Rows::new(&b[0], 2, w), Rows::new(&b[1], 1, w))?;
        k.elementwise.encode_scale(rec, Rows::new(&b[0], 2, w), 0.375)
    })
    .await?;
    let want: Vec<f32> = gate
        .iter()
        .zip(bias.iter().cycle())
        .map(|(g, b)| (g + b) * 0.375)
        .collect();
    out.push(check(
        "elementwise_add_inplace + elementwise_scale",
        &got[0],
        &want,
        None,
    ));

    // Greedy and sampled picks over a vocabulary-sized row (distinct values: one argmax).
    let n = 1000;
    let logits = rng.values(n, -8.0, 8.0);
    let got = k.argmax.run(gpu, &logits, n).await?;
    let want = ops::argmax(&logits) as u32;
    out.push(exact_pick("argmax_rows", got == [want]));
    // A vocabulary past one workgroup's row is picked in slices and a final pick: a row of a few slices.
    if Argmax::in_slices(c.vocab) {
        let n = 3 * ARGMAX_SLICE + 5;
        let logits = rng.values(n, -8.0, 8.0);
        let got = k.argmax.run(gpu, &logits, n).await?;
        let want = ops::argmax(&logits) as u32;
        out.push(exact_pick("argmax_slices + argmax_final", got == [want]));
    }
    let args = SampleArgs {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.05,
        u: 0x5a_5a5a,
        repetition_penalty: 1.1,
        penalized: vec![ops::argmax(&logits) as u32, 3, 999],
    };
    let got = k.sample.run(gpu, &logits, &args).await?;
    let want = Sampler::sample_with(&mut logits.clone(), &args);
    out.push(exact_pick("sample", got == want));
    Ok(out)
}

/// The check of a kernel that picks an id, which must be the CPU's exactly (an error of ∞ otherwise).
fn exact_pick(kernel: &str, same: bool) -> KernelCheck {
    KernelCheck {
        kernel: kernel.into(),
        max_error: if same { 0.0 } else { f32::INFINITY },
        passed: same,
    }
}
