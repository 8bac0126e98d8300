//! `shaders/rope.wgsl` and `shaders/attention.wgsl` (KV update, causal GQA attention) and the GPU MultiHeadAttention
//! layer (`loom_wasm::gpu::Mha`) against their CPU twins, natively through wgpu → Vulkan (Mesa lavapipe).
//!
//! Tolerances (the CPU computes in f64 with Loom's roundings, the GPU in f32):
//! - RoPE: |gpu − cpu| ≤ 1e-6 + 1e-5·|cpu| against the CPU's f64 rotation;
//! - KV update: bit-identical (a copy), including a dispatch that wraps the cache;
//! - attention: ≤ 1e-5 + 1e-4·|cpu| against the CPU's f64 scores / softmax / weighted sum, prefill and decode;
//! - the MHA layer: ≤ 1e-5 + 1e-4·|cpu| against `CpuModel` forward (bit-exact with Loom) of Loom-written layers
//!   (every dtype of the conformance corpus, every case of `testdata/forward/attention.json`) and of larger random
//!   ones, over prefill and KV-cache continuation calls.
#![cfg(not(target_arch = "wasm32"))]

mod gpu_util;

use gpu_util::{close, data, gpu, one_layer, testdata, MaxErr};
use loom_wasm::conformance::hex_f32s;
use loom_wasm::cpu::CpuModel;
use loom_wasm::formats::{entity, loom_json};
use loom_wasm::gpu::Recorder;
use loom_wasm::gpu::{Attention, Gpu, GpuTensor, KvCache, KvRows, Mha, Rope};
use loom_wasm::network::{Network, WeightStore};
use loom_wasm::LoomError;
use serde_json::Value;

const ABS: f32 = 1e-5;
const REL: f32 = 1e-4;

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

#[test]
fn rope_matches_the_cpu_rotation() {
    let gpu = gpu();
    let rope = Rope::new(&gpu).unwrap();
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
        let got = pollster::block_on(rope.run(&gpu, &x, heads, hd, theta, pos0)).unwrap();
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
    fn attend(&self, q: &[f32], heads: usize, hd: usize, pos0: usize) -> Vec<f32> {
        let kv_heads = self.kv / hd;
        let per_kv = heads / kv_heads;
        let scale = 1.0 / (hd as f64).sqrt();
        let mut out = Vec::with_capacity(q.len());
        for (t, qt) in q.chunks(heads * hd).enumerate() {
            for h in 0..heads {
                let qh = &qt[h * hd..(h + 1) * hd];
                let at = |p: usize| (p % self.max_seq) * self.kv + h / per_kv * hd;
                let scores: Vec<f64> = (0..=pos0 + t)
                    .map(|p| {
                        let k = &self.k[at(p)..at(p) + hd];
                        qh.iter()
                            .zip(k)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().fold(-1e9f64, |m, s| m.max(*s));
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for i in 0..hd {
                    let acc: f64 = e
                        .iter()
                        .enumerate()
                        .map(|(p, e)| e * f64::from(self.v[at(p) + i]))
                        .sum();
                    out.push((acc / sum) as f32);
                }
            }
        }
        out
    }
}

#[test]
fn kv_update_is_an_exact_copy_even_when_it_wraps() {
    let gpu = gpu();
    let att = Attention::new(&gpu).unwrap();
    for (kv_heads, hd, max_seq, steps) in [
        (2, 16, 512, vec![(0, 16), (16, 1), (17, 1)]),
        (3, 5, 8, vec![(5, 13), (18, 2)]),
    ] {
        let cache = pollster::block_on(KvCache::new(&gpu, kv_heads, hd, max_seq)).unwrap();
        // The same rows read from inside fused `[q | k | v]` rows (q: 7 values here) into a second cache.
        let fused_cache = pollster::block_on(KvCache::new(&gpu, kv_heads, hd, max_seq)).unwrap();
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
            let kb = pollster::block_on(gpu.upload("k", bytemuck::cast_slice(&k))).unwrap();
            let vb = pollster::block_on(gpu.upload("v", bytemuck::cast_slice(&v))).unwrap();
            let q = data(7 + pos0 as u64, tokens * 7, -1.0, 1.0);
            let fused: Vec<f32> = (0..tokens)
                .flat_map(|t| [&q[7 * t..7 * t + 7], &k[kv * t..kv * (t + 1)], &v[kv * t..kv * (t + 1)]].concat())
                .collect();
            let fb = pollster::block_on(gpu.upload("qkv", bytemuck::cast_slice(&fused))).unwrap();
            let fused_rows = KvRows {
                tokens: tokens as u32,
                first: 0,
                stride: (7 + 2 * kv) as u32,
                k_offset: 7,
                v_offset: (7 + kv) as u32,
            };
            let mut recorder = Recorder::new(&gpu);
            let rows = KvRows::packed(&cache, tokens as u32, 0);
            att.encode_kv_update(&mut recorder, &cache, &kb, &vb, rows, pos0 as u32)
                .unwrap();
            att.encode_kv_update(&mut recorder, &fused_cache, &fb, &fb, fused_rows, pos0 as u32)
                .unwrap();
            recorder.submit();
            for (what, cache) in [("separate", &cache), ("fused", &fused_cache)] {
                let (gk, gv) = pollster::block_on(cache.read(&gpu)).unwrap();
                assert!(
                    gk == cpu.per_head(&cpu.k, hd),
                    "K cache after {tokens} tokens at {pos0}, {what} rows"
                );
                assert!(
                    gv == cpu.per_head(&cpu.v, hd),
                    "V cache after {tokens} tokens at {pos0}, {what} rows"
                );
            }
            eprintln!("KV update of {tokens} tokens at {pos0} ({kv_heads} kv heads × {hd}, {max_seq} rows): identical");
        }
    }
}

#[test]
fn attention_prefill_and_decode_match_the_cpu() {
    let gpu = gpu();
    let att = Attention::new(&gpu).unwrap();
    // (heads, kv_heads, head_dim, prefill tokens, decode steps, cache rows): GQA, MHA, odd head_dim, the largest
    // head, more positions than one 256-wide chunk, uneven GQA (Loom's flat read into the next row), a wrapped cache.
    for (heads, kv_heads, hd, prefill, decode, max_seq) in [
        (4, 2, 16, 16, 3, 512),
        (2, 2, 5, 7, 2, 512),
        (1, 1, 256, 4, 1, 512),
        (2, 1, 8, 300, 2, 512),
        (3, 2, 2, 4, 2, 512),
        (2, 2, 4, 20, 3, 16),
    ] {
        let (qw, kv) = (heads * hd, kv_heads * hd);
        let cache = pollster::block_on(KvCache::new(&gpu, kv_heads, hd, max_seq)).unwrap();
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
            let want = cpu.attend(&q, heads, hd, pos);
            let got = pollster::block_on(att.run(&gpu, &cache, &q, &k, &v, heads, pos)).unwrap();
            let what = if step == 0 { "prefill" } else { "decode" };
            let e = close(
                &format!("attention {what} {tokens} at {pos} ({heads} heads / {kv_heads} kv × {hd}, {max_seq} rows)"),
                &got,
                &want,
                ABS,
                REL,
            );
            worst.abs = worst.abs.max(e.abs);
            pos += tokens;
        }
        eprintln!("  worst |err| {:.3e}", worst.abs);
    }
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Runs `calls` (input, shape) through the GPU layer and `CpuModel`, both keeping their KV cache between calls.
fn compare_calls(gpu: &Gpu, what: &str, net: &Network, calls: &[(Vec<f32>, Vec<usize>)]) -> MaxErr {
    let mut cpu = CpuModel::new(net.clone());
    let mut mha = pollster::block_on(Mha::new(gpu, &net.layers[0])).unwrap();
    let mut worst = MaxErr::default();
    for (n, (x, shape)) in calls.iter().enumerate() {
        let want = cpu.forward(x, shape).unwrap();
        let got = pollster::block_on(mha.forward(gpu, x, shape)).unwrap();
        assert_eq!(got.shape, want.shape, "{what} call {n}");
        let e = close(&format!("{what} call {n} {shape:?}"), &got.data, &want.data, ABS, REL);
        worst.abs = worst.abs.max(e.abs);
        worst.rel = worst.rel.max(e.rel);
    }
    worst
}

#[test]
fn loom_written_mha_layers_of_every_dtype_match() {
    let gpu = gpu();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance/cases");
    let mut cases: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("layer_MultiHeadAttention_"))
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 21);
    for case in cases {
        let net = loom_json::read(testdata(&format!("conformance/cases/{case}/loom.json")).as_bytes()).unwrap();
        // A 3-token prefill, two decode steps, then a batch of 2 that starts a new timeline.
        let calls = vec![
            (data(1, 12, -1.0, 1.0), vec![3, 4]),
            (data(2, 4, -1.0, 1.0), vec![1, 4]),
            (data(3, 4, -1.0, 1.0), vec![1, 1, 4]),
            (data(4, 16, -1.0, 1.0), vec![2, 2, 4]),
        ];
        compare_calls(&gpu, &case, &net, &calls);
    }
}

#[test]
fn every_loom_attention_case_matches() {
    // testdata/forward/attention.json: Loom's own outputs for query_dim, GQA (also uneven), odd head_dim, RoPE bases
    // far from 10000, batch rows sharing one timeline, KV continuation and reset, the 512-row wrap, odd input ranks,
    // quantized dtypes, q_norm/k_norm blobs. The CPU matches them bit for bit; the GPU within the tolerance of both.
    let gpu = gpu();
    let doc: Value = serde_json::from_str(&testdata("forward/attention.json")).unwrap();
    let mut n = 0;
    for case in doc["cases"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        let net = match case["entity_hex"].as_str() {
            Some(hex) => entity::read(&hex_bytes(hex)).unwrap(),
            None => loom_json::read(case["network"].as_str().unwrap().as_bytes()).unwrap(),
        };
        let mut mha = pollster::block_on(Mha::new(&gpu, &net.layers[0])).unwrap();
        for (k, call) in case["calls"].as_array().unwrap().iter().enumerate() {
            let shape: Vec<usize> = call["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let x = hex_f32s(call["input_f32_hex"].as_str().unwrap()).unwrap();
            let loom = hex_f32s(call["expected_f32_hex"].as_str().unwrap()).unwrap();
            let got = pollster::block_on(mha.forward(&gpu, &x, &shape)).unwrap();
            close(&format!("{id} call {k} {shape:?} vs Loom"), &got.data, &loom, ABS, REL);
            n += 1;
        }
    }
    assert_eq!(n, 42);
}

#[test]
fn larger_random_layers_prefill_then_decode() {
    let gpu = gpu();
    // d_model 64, 4 heads over 2 kv heads (head_dim 16); the same with a wider query_dim (80) and RoPE base 5e5
    // (fields architecture JSON does not read, so set on the layer); weights ×8 (peaked attention, outputs near 1);
    // 8 heads of 32 over 2 kv heads.
    for (d, heads, kv_heads, query_dim, theta, scale) in [
        (64, 4, 2, 0, 0.0, 1.0),
        (64, 4, 2, 80, 5e5, 1.0),
        (64, 4, 2, 0, 0.0, 8.0),
        (256, 8, 2, 0, 0.0, 1.0),
    ] {
        let mut net = one_layer(&format!(
            r#""type":"MultiHeadAttention","activation":"Linear","d_model":{d},"num_heads":{heads},
            "num_kv_heads":{kv_heads}"#
        ));
        let layer = &mut net.layers[0];
        layer.query_dim = query_dim;
        layer.rope_freq_base = theta;
        layer.weights = None;
        net.init_random_weights(d as u64 + query_dim as u64).unwrap();
        let w: Vec<f32> = net.layers[0].weights.as_ref().unwrap().master_values();
        net.layers[0].weights = Some(WeightStore::from_master(w.iter().map(|v| v * scale).collect()));
        let what = format!(
            "MHA d {d}, {heads}/{kv_heads} heads × {}, query_dim {query_dim}, θ {theta}, weights ×{scale}",
            net.layers[0].head_dim
        );
        let mut calls = vec![(data(1, 16 * d, -1.0, 1.0), vec![16, d])];
        for s in 0..5 {
            calls.push((data(10 + s, d, -1.0, 1.0), vec![1, d]));
        }
        // Batch 2 × seq 16 resets the timeline; row 1 continues row 0's positions; then one more decode step.
        calls.push((data(20, 2 * 16 * d, -1.0, 1.0), vec![2, 16, d]));
        calls.push((data(21, d, -1.0, 1.0), vec![1, 1, d]));
        let e = compare_calls(&gpu, &what, &net, &calls);
        eprintln!("  worst |err| {:.3e}, rel {:.3e}", e.abs, e.rel);
    }
}

#[test]
fn heads_wider_than_256_match_the_cpu() {
    // The attention kernel stages the query and writes the output in chunks of 256 head dims: head_dim 320 (one
    // full chunk and a partial one, GQA 4 over 2) and 512 (two full chunks), over a prefill and decode steps.
    let gpu = gpu();
    for (d, heads, kv_heads, hd) in [(48, 4, 2, 320), (64, 2, 2, 512)] {
        let mut net = one_layer(&format!(
            r#""type":"MultiHeadAttention","activation":"Linear","d_model":{d},"num_heads":{heads},
            "num_kv_heads":{kv_heads}"#
        ));
        let layer = &mut net.layers[0];
        layer.head_dim = hd as i64;
        layer.query_dim = (heads * hd) as i64;
        layer.weights = None;
        net.init_random_weights(hd as u64).unwrap();
        let mut calls = vec![(data(1, 7 * d, -1.0, 1.0), vec![7, d])];
        for s in 0..3 {
            calls.push((data(10 + s, d, -1.0, 1.0), vec![1, d]));
        }
        let e = compare_calls(
            &gpu,
            &format!("MHA d {d}, {heads}/{kv_heads} heads × {hd}"),
            &net,
            &calls,
        );
        eprintln!("  worst |err| {:.3e}, rel {:.3e}", e.abs, e.rel);
    }
}

#[test]
fn layers_the_gpu_cannot_run_are_typed_errors() {
    let gpu = gpu();
    let mha = |edit: &dyn Fn(&mut loom_wasm::network::Layer)| {
        let mut net = one_layer(r#""type":"MultiHeadAttention","d_model":8,"num_heads":2,"num_kv_heads":1"#);
        edit(&mut net.layers[0]);
        pollster::block_on(Mha::new(&gpu, &net.layers[0])).map(|_| ())
    };
    // What Loom would panic on, refused as the CPU refuses it: query_dim below d_model, more kv heads than heads.
    let err = mha(&|l| l.query_dim = 4).unwrap_err();
    assert!(matches!(err, LoomError::InvalidNetwork(_)), "{err:?}");
    let err = mha(&|l| l.num_kv_heads = 3).unwrap_err();
    assert!(matches!(err, LoomError::InvalidNetwork(_)), "{err:?}");
    // A scalar input has no last dimension to replace.
    let net = one_layer(r#""type":"MultiHeadAttention","d_model":8,"num_heads":2"#);
    let mut m = pollster::block_on(Mha::new(&gpu, &net.layers[0])).unwrap();
    let err = pollster::block_on(m.forward(&gpu, &[0.5], &[])).unwrap_err();
    assert!(matches!(err, LoomError::InvalidInput(_)), "{err:?}");
    // So is a tensor that holds fewer tokens than its shape's layout reads, when encoding directly.
    let mut recorder = Recorder::new(&gpu);
    let x = GpuTensor::scratch(&mut recorder, vec![3]).unwrap();
    let mut fresh = pollster::block_on(Mha::new(&gpu, &net.layers[0])).unwrap();
    let err = fresh.encode(&mut recorder, &x).unwrap_err();
    assert!(matches!(err, LoomError::InvalidInput(_)), "{err:?}");
}
