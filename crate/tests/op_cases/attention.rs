//! `shaders/rope.wgsl` and `shaders/attention.wgsl` (KV update, causal GQA attention) against their CPU twins.
//!
//! Tolerances (the CPU computes in f64, the GPU in f32):
//! - RoPE: |gpu − cpu| ≤ 1e-6 + 1e-5·|cpu| against the CPU's f64 rotation;
//! - KV update: bit-identical (a copy), including a dispatch that wraps the cache;
//! - attention: ≤ 1e-5 + 1e-4·|cpu| against the CPU's f64 scores / softmax / weighted sum, prefill and decode.

use loom_wasm::cpu::ops::{self, RopeFreqs, RopePairs};
use loom_wasm::gpu::{AttendArgs, Attention, Gpu, KvCache, KvWrite, Recorder, Rope, Rows};

use super::harness::{close, data, MaxErr};
use super::upload;

const ABS: f32 = 1e-5;
const REL: f32 = 1e-4;

on_each_device!(
    rope_matches_the_cpu_rotation,
    kv_update_is_an_exact_copy_even_when_it_wraps,
    attention_prefill_and_decode_match_the_cpu,
    rope_inside_attention_matches_rope_then_attention,
);

/// The CPU's RoPE on f32 values, in f64 (`crate::cpu` attention.rs).
fn rope_ref(x: &[f32], heads: usize, hd: usize, theta: f64, pos0: usize) -> Vec<f32> {
    let half = hd / 2;
    let mut out = x.to_vec();
    for (t, row) in out.chunks_mut(heads * hd).enumerate() {
        let pos = (pos0 + t) as f64;
        for head in row.chunks_mut(hd) {
            for j in 0..half {
                let angle = pos / theta.powf((2 * j) as f64 / hd as f64);
                let (s, c) = angle.sin_cos();
                let (v0, v1) = (f64::from(head[j]), f64::from(head[j + half]));
                head[j] = (v0 * c - v1 * s) as f32;
                head[j + half] = (v0 * s + v1 * c) as f32;
            }
        }
    }
    out
}

pub async fn rope_matches_the_cpu_rotation(gpu: &Gpu) {
    let rope = Rope::new(gpu).unwrap();
    // (heads, head_dim, tokens, θ, first position): odd head_dim leaves its last element, positions past 512,
    // a small θ whose angles pass 2^29.
    for (heads, hd, tokens, theta, pos0) in [
        (1, 2, 1, 10000.0, 0),
        (4, 16, 16, 10000.0, 0),
        (3, 3, 5, 10000.0, 7),
        (2, 64, 9, 500000.5, 600),
        (1, 8, 3, 0.001, 0),
        (8, 128, 33, 1e6, 100),
    ] {
        let x = data(hd as u64, tokens * heads * hd, -2.0, 2.0);
        let want = rope_ref(&x, heads, hd, theta, pos0);
        let got = rope.run(gpu, &x, heads, hd, theta, pos0).await.unwrap();
        close(
            &format!("RoPE {tokens}×{heads}×{hd} θ {theta} from {pos0}"),
            &got,
            &want,
            1e-6,
            1e-5,
        );
    }
}

/// The CPU's cache: `[max_seq][kv]` rows, written token by token.
struct RefCache {
    k: Vec<f32>,
    v: Vec<f32>,
    kv: usize,
    max_seq: usize,
}

impl RefCache {
    fn write(&mut self, k: &[f32], v: &[f32], pos0: usize) {
        for (t, (kr, vr)) in k.chunks(self.kv).zip(v.chunks(self.kv)).enumerate() {
            let row = (pos0 + t) % self.max_seq * self.kv;
            self.k[row..row + self.kv].copy_from_slice(kr);
            self.v[row..row + self.kv].copy_from_slice(vr);
        }
    }

    /// The GPU layout, `[kv_head][max_seq][head_dim]`.
    fn per_head(&self, m: &[f32], hd: usize) -> Vec<f32> {
        let kv_heads = self.kv / hd;
        let mut out = vec![0.0; m.len()];
        for row in 0..self.max_seq {
            for e in 0..self.kv {
                out[((e / hd) * self.max_seq + row) * hd + e % hd] = m[row * self.kv + e];
            }
        }
        assert_eq!(out.len(), kv_heads * self.max_seq * hd);
        out
    }

    /// The CPU's attention for queries at positions `pos0..` (f64 scores, max from −1e9, one division).
    /// Each query over its positions, or the latest `window` of them (0: all), its scores soft-capped at `cap`
    /// (`cap · tanh(s / cap)`; 0: none).
    fn attend(&self, q: &[f32], heads: usize, hd: usize, pos0: usize, window: usize, cap: f64) -> Vec<f32> {
        let kv_heads = self.kv / hd;
        let per_kv = heads / kv_heads;
        let scale = 1.0 / (hd as f64).sqrt();
        let mut out = Vec::with_capacity(q.len());
        for (t, qt) in q.chunks(heads * hd).enumerate() {
            for h in 0..heads {
                let qh = &qt[h * hd..(h + 1) * hd];
                let at = |p: usize| (p % self.max_seq) * self.kv + h / per_kv * hd;
                let first = match window {
                    0 => 0,
                    w => (pos0 + t + 1).saturating_sub(w),
                };
                let positions: Vec<usize> = (first..=pos0 + t).collect();
                let scores: Vec<f64> = positions
                    .iter()
                    .map(|&p| {
                        let k = &self.k[at(p)..at(p) + hd];
                        qh.iter()
                            .zip(k)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum::<f64>()
                            * scale
                    })
                    .map(|s| if cap > 0.0 { cap * (s / cap).tanh() } else { s })
                    .collect();
                let max = scores.iter().fold(-1e9f64, |m, s| m.max(*s));
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for i in 0..hd {
                    let acc: f64 = e
                        .iter()
                        .zip(&positions)
                        .map(|(e, &p)| e * f64::from(self.v[at(p) + i]))
                        .sum();
                    out.push((acc / sum) as f32);
                }
            }
        }
        out
    }
}

pub async fn kv_update_is_an_exact_copy_even_when_it_wraps(gpu: &Gpu) {
    let att = Attention::new(gpu).unwrap();
    for (kv_heads, hd, max_seq, steps) in [
        (2, 16, 512, vec![(0, 16), (16, 1), (17, 1)]),
        (3, 5, 8, vec![(5, 13), (18, 2)]),
    ] {
        let cache = KvCache::new(gpu, kv_heads, hd, max_seq).await.unwrap();
        // The same rows read from inside fused `[q | k | v]` rows (q: 7 values here) into a second cache.
        let fused_cache = KvCache::new(gpu, kv_heads, hd, max_seq).await.unwrap();
        let kv = kv_heads * hd;
        let mut cpu = RefCache {
            k: vec![0.0; max_seq * kv],
            v: vec![0.0; max_seq * kv],
            kv,
            max_seq,
        };
        for (pos0, tokens) in steps {
            let k = data(pos0 as u64, tokens * kv, -1.0, 1.0);
            let v = data(99 + pos0 as u64, tokens * kv, -1.0, 1.0);
            cpu.write(&k, &v, pos0);
            let kb = upload(gpu, "k", &k).await;
            let vb = upload(gpu, "v", &v).await;
            let q = data(7 + pos0 as u64, tokens * 7, -1.0, 1.0);
            let fused: Vec<f32> = (0..tokens)
                .flat_map(|t| [&q[7 * t..7 * t + 7], &k[kv * t..kv * (t + 1)], &v[kv * t..kv * (t + 1)]].concat())
                .collect();
            let fb = upload(gpu, "qkv", &fused).await;
            let (t, kv32) = (tokens as u32, kv as u32);
            let fused_rows = Rows::new(&fb, t, 7 + 2 * kv32);
            let (fk, fv) = (fused_rows.columns(7, kv32), fused_rows.columns(7 + kv32, kv32));
            let mut recorder = Recorder::new(gpu);
            let (k_rows, v_rows) = (Rows::new(&kb, t, kv32), Rows::new(&vb, t, kv32));
            att.encode_kv_update(&mut recorder, &cache, k_rows, v_rows, pos0 as u32)
                .unwrap();
            att.encode_kv_update(&mut recorder, &fused_cache, fk, fv, pos0 as u32)
                .unwrap();
            recorder.submit();
            for (what, cache) in [("separate", &cache), ("fused", &fused_cache)] {
                let (gk, gv) = cache.read(gpu).await.unwrap();
                assert!(
                    gk == cpu.per_head(&cpu.k, hd),
                    "K cache after {tokens} tokens at {pos0}, {what} rows"
                );
                assert!(
                    gv == cpu.per_head(&cpu.v, hd),
                    "V cache after {tokens} tokens at {pos0}, {what} rows"
                );
            }
            note!("KV update of {tokens} tokens at {pos0} ({kv_heads} kv heads × {hd}, {max_seq} rows): identical");
        }
    }
}

pub async fn attention_prefill_and_decode_match_the_cpu(gpu: &Gpu) {
    let att = Attention::new(gpu).unwrap();
    // (heads, kv_heads, head_dim, prefill tokens, decode steps, cache rows): GQA, MHA, odd head_dim, the largest
    // head, more positions than one 256-wide chunk, uneven GQA (Loom's flat read into the next row), a wrapped cache.
    // Then sliding windows (Gemma's), shorter than the prefill and than one 256-wide chunk, and soft-capped scores
    // (Gemma 2's; a cap of 0.5 that the scores pass). Last, a decode past 512 positions: more than 16 runs of 32.
    for (heads, kv_heads, hd, prefill, decode, max_seq, window, cap) in [
        (4, 2, 16, 16, 3, 512, 0, 0.0),
        (2, 2, 5, 7, 2, 512, 0, 0.0),
        (1, 1, 256, 4, 1, 512, 0, 0.0),
        (2, 1, 8, 300, 2, 512, 0, 0.0),
        (3, 2, 2, 4, 2, 512, 0, 0.0),
        (2, 2, 4, 20, 3, 16, 0, 0.0),
        (4, 2, 16, 16, 3, 512, 5, 0.0),
        (2, 1, 8, 300, 2, 512, 260, 0.0),
        (4, 2, 16, 16, 3, 512, 5, 0.5f32),
        (2, 1, 16, 600, 2, 1024, 0, 0.0),
    ] {
        let (qw, kv) = (heads * hd, kv_heads * hd);
        let cache = KvCache::new(gpu, kv_heads, hd, max_seq).await.unwrap();
        let split_cache = KvCache::new(gpu, kv_heads, hd, max_seq).await.unwrap();
        let fused_cache = KvCache::new(gpu, kv_heads, hd, max_seq).await.unwrap();
        let fused_split_cache = KvCache::new(gpu, kv_heads, hd, max_seq).await.unwrap();
        let mut cpu = RefCache {
            k: vec![0.0; max_seq * kv],
            v: vec![0.0; max_seq * kv],
            kv,
            max_seq,
        };
        let mut pos = 0;
        let mut worst = MaxErr::default();
        for (step, tokens) in std::iter::once(prefill)
            .chain(std::iter::repeat_n(1, decode))
            .enumerate()
        {
            let seed = (step * 1000 + hd) as u64;
            let q = data(seed, tokens * qw, -2.0, 2.0);
            let k = data(seed + 1, tokens * kv, -2.0, 2.0);
            let v = data(seed + 2, tokens * kv, -1.0, 1.0);
            cpu.write(&k, &v, pos);
            let want = cpu.attend(&q, heads, hd, pos, window, f64::from(cap));
            // Both kernels (one workgroup per query and head, and the positions split over workgroups), after a KV
            // update's dispatch and writing the tokens' K and V rows themselves.
            for (cache, split, fused) in [
                (&cache, false, false),
                (&split_cache, true, false),
                (&fused_cache, false, true),
                (&fused_split_cache, true, true),
            ] {
                let args = AttendArgs {
                    pos0: pos as u32,
                    scale: (1.0 / (hd as f64).sqrt()) as f32,
                    window: window as u32,
                    softcap: cap,
                    split,
                };
                let write = if fused { KvWrite::Fused(None) } else { KvWrite::Update };
                let got = att.run(gpu, cache, &q, &k, &v, heads, args, write).await.unwrap();
                let what = if step == 0 { "prefill" } else { "decode" };
                let e = close(
                    &format!(
                        "attention {what} {tokens} at {pos} ({heads} heads / {kv_heads} kv × {hd}, {max_seq} rows, \
                         window {window}, cap {cap}, split {split}, fused {fused})"
                    ),
                    &got,
                    &want,
                    ABS,
                    REL,
                );
                worst.abs = worst.abs.max(e.abs);
            }
            // The attention's own writes leave the cache as the KV update's dispatch does.
            let want_cache = cache.read(gpu).await.unwrap();
            for fused in [&fused_cache, &fused_split_cache] {
                assert!(
                    fused.read(gpu).await.unwrap() == want_cache,
                    "the cache after {tokens} tokens at {pos} ({heads} heads / {kv_heads} kv × {hd}), fused"
                );
            }
            pos += tokens;
        }
        note!("  worst |err| {:.3e}", worst.abs);
    }
}

/// RoPE inside the attention (the LLM engine's: queries and the tokens' K rows read unrotated, the K rows written
/// turned) against the CPU's RoPE (`ops::rope`) then its attention, whole and split, prefill then decode: rotate-half
/// over every pair and over some (partial rotary, an odd head), adjacent pairs, a window, a prompt in two chunks; and
/// refused where the tokens would wrap the cache (the attention could not write them itself).
pub async fn rope_inside_attention_matches_rope_then_attention(gpu: &Gpu) {
    let att = Attention::new(gpu).unwrap();
    // (heads, kv_heads, head_dim, rotated pairs, pairing, prefill, decode steps, window)
    for (heads, kv_heads, hd, rot, style, prefill, decode, window) in [
        (4, 2, 16, 8, RopePairs::Half, 16, 3, 0),
        (2, 2, 5, 2, RopePairs::Half, 7, 2, 0),
        (2, 1, 16, 4, RopePairs::Adjacent, 40, 2, 0),
        (4, 2, 16, 8, RopePairs::Adjacent, 16, 3, 5),
        (1, 1, 256, 64, RopePairs::Half, 4, 1, 0),
    ] {
        let (qw, kv, max_seq) = (heads * hd, kv_heads * hd, 128);
        let freqs = RopeFreqs::plain(10_000.0, 2 * rot);
        let mut cpu = RefCache {
            k: vec![0.0; max_seq * kv],
            v: vec![0.0; max_seq * kv],
            kv,
            max_seq,
        };
        let caches = [
            KvCache::new(gpu, kv_heads, hd, max_seq).await.unwrap(),
            KvCache::new(gpu, kv_heads, hd, max_seq).await.unwrap(),
        ];
        let mut pos = 0;
        // A prompt in two chunks (the second reads the first's turned K rows from the cache), then decode steps.
        for (step, tokens) in [prefill, 5]
            .into_iter()
            .chain(std::iter::repeat_n(1, decode))
            .enumerate()
        {
            let seed = (step * 1000 + hd + 7) as u64;
            let (q, k, v) = (
                data(seed, tokens * qw, -2.0, 2.0),
                data(seed + 1, tokens * kv, -2.0, 2.0),
                data(seed + 2, tokens * kv, -1.0, 1.0),
            );
            let table: Vec<f32> = (pos..pos + tokens)
                .flat_map(|p| freqs.cos_sin(p))
                .flat_map(|(c, s)| [c, s])
                .collect();
            let (mut q_rot, mut k_rot) = (q.clone(), k.clone());
            for (t, row) in q_rot.chunks_mut(qw).enumerate() {
                ops::rope(row, hd, pos + t, &freqs, style);
            }
            for (t, row) in k_rot.chunks_mut(kv).enumerate() {
                ops::rope(row, hd, pos + t, &freqs, style);
            }
            cpu.write(&k_rot, &v, pos);
            let want = cpu.attend(&q_rot, heads, hd, pos, window, 0.0);
            for (cache, split) in caches.iter().zip([false, true]) {
                let args = AttendArgs {
                    pos0: pos as u32,
                    scale: (1.0 / (hd as f64).sqrt()) as f32,
                    window: window as u32,
                    softcap: 0.0,
                    split,
                };
                let write = KvWrite::Fused(Some((&table, rot as u32, style)));
                let got = att.run(gpu, cache, &q, &k, &v, heads, args, write).await.unwrap();
                close(
                    &format!(
                        "RoPE ({rot} pairs, {style:?}) in attention, {tokens} at {pos} ({heads} heads / {kv_heads} \
                         kv × {hd}, window {window}, split {split})"
                    ),
                    &got,
                    &want,
                    ABS,
                    REL,
                );
            }
            pos += tokens;
        }
    }
    // 20 tokens into a cache of 16 rows: the attention cannot write them itself, so RoPE inside it is refused.
    let cache = KvCache::new(gpu, 2, 4, 16).await.unwrap();
    let (q, kv) = (data(1, 20 * 8, -1.0, 1.0), data(2, 20 * 8, -1.0, 1.0));
    let table = vec![1.0f32; 20 * 2 * 2];
    let args = AttendArgs {
        pos0: 0,
        scale: 0.5,
        window: 0,
        softcap: 0.0,
        split: true,
    };
    let write = KvWrite::Fused(Some((&table, 2, RopePairs::Half)));
    assert!(att.run(gpu, &cache, &q, &kv, &kv, 2, args, write).await.is_err());
}
