//! The GPU MultiHeadAttention layer (`loom_wasm::gpu::Mha`: matvec projections, bias adds, RoPE, KV update, causal
//! GQA attention) against `CpuModel` forward (bit-exact with Loom), over a prefill and decode steps that continue
//! the KV cache: Loom-written layers of every dtype, larger random layers (GQA, a wider query_dim, another RoPE base, peaked
//! attention), heads wider than 256, and layers it cannot run as typed errors, within |gpu − cpu| ≤ 1e-5 +
//! 1e-4·|cpu| (the CPU computes in f64 with Loom's roundings, the GPU in f32); and every case of
//! `testdata/forward/attention.json` against Loom's own outputs within the same tolerance.

use loom_wasm::cpu::CpuModel;
use loom_wasm::formats::{entity, loom_json};
use loom_wasm::gpu::{Gpu, GpuTensor, Mha, Recorder};
use loom_wasm::network::{Network, WeightStore};
use loom_wasm::LoomError;
use serde_json::Value;

use super::harness::{close, data, one_layer, MaxErr};

const ABS: f32 = 1e-5;
const REL: f32 = 1e-4;

on_each_device!(
    loom_written_mha_layers_of_every_dtype_match,
    every_loom_attention_case_matches,
    larger_random_layers_prefill_then_decode,
    heads_wider_than_256_match_the_cpu,
    layers_the_gpu_cannot_run_are_typed_errors,
);

/// The MHA layers Loom wrote, one per dtype (`testdata/conformance/cases/layer_MultiHeadAttention_*`).
const LOOM_MHA: [(&str, &str); 21] = [
    (
        "bfloat16",
        testdata!("conformance/cases/layer_MultiHeadAttention_bfloat16/loom.json"),
    ),
    (
        "binary",
        testdata!("conformance/cases/layer_MultiHeadAttention_binary/loom.json"),
    ),
    (
        "float16",
        testdata!("conformance/cases/layer_MultiHeadAttention_float16/loom.json"),
    ),
    (
        "float32",
        testdata!("conformance/cases/layer_MultiHeadAttention_float32/loom.json"),
    ),
    (
        "float64",
        testdata!("conformance/cases/layer_MultiHeadAttention_float64/loom.json"),
    ),
    (
        "fp4",
        testdata!("conformance/cases/layer_MultiHeadAttention_fp4/loom.json"),
    ),
    (
        "fp8e4m3",
        testdata!("conformance/cases/layer_MultiHeadAttention_fp8e4m3/loom.json"),
    ),
    (
        "fp8e5m2",
        testdata!("conformance/cases/layer_MultiHeadAttention_fp8e5m2/loom.json"),
    ),
    (
        "int16",
        testdata!("conformance/cases/layer_MultiHeadAttention_int16/loom.json"),
    ),
    (
        "int2",
        testdata!("conformance/cases/layer_MultiHeadAttention_int2/loom.json"),
    ),
    (
        "int32",
        testdata!("conformance/cases/layer_MultiHeadAttention_int32/loom.json"),
    ),
    (
        "int4",
        testdata!("conformance/cases/layer_MultiHeadAttention_int4/loom.json"),
    ),
    (
        "int64",
        testdata!("conformance/cases/layer_MultiHeadAttention_int64/loom.json"),
    ),
    (
        "int8",
        testdata!("conformance/cases/layer_MultiHeadAttention_int8/loom.json"),
    ),
    (
        "ternary",
        testdata!("conformance/cases/layer_MultiHeadAttention_ternary/loom.json"),
    ),
    (
        "uint16",
        testdata!("conformance/cases/layer_MultiHeadAttention_uint16/loom.json"),
    ),
    (
        "uint2",
        testdata!("conformance/cases/layer_MultiHeadAttention_uint2/loom.json"),
    ),
    (
        "uint32",
        testdata!("conformance/cases/layer_MultiHeadAttention_uint32/loom.json"),
    ),
    (
        "uint4",
        testdata!("conformance/cases/layer_MultiHeadAttention_uint4/loom.json"),
    ),
    (
        "uint64",
        testdata!("conformance/cases/layer_MultiHeadAttention_uint64/loom.json"),
    ),
    (
        "uint8",
        testdata!("conformance/cases/layer_MultiHeadAttention_uint8/loom.json"),
    ),
];

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Little-endian f32 values from hex (the corpus files' encoding).
fn hex_f32s(hex: &str) -> Vec<f32> {
    hex_bytes(hex)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub async fn loom_written_mha_layers_of_every_dtype_match(gpu: &Gpu) {
    for (dtype, text) in LOOM_MHA {
        let net = loom_json::read(text.as_bytes()).unwrap();
        // A 3-token prefill, two decode steps, then a batch of 2 that starts a new timeline.
        let calls = vec![
            (data(1, 12, -1.0, 1.0), vec![3, 4]),
            (data(2, 4, -1.0, 1.0), vec![1, 4]),
            (data(3, 4, -1.0, 1.0), vec![1, 1, 4]),
            (data(4, 16, -1.0, 1.0), vec![2, 2, 4]),
        ];
        compare_calls(gpu, &format!("Loom MHA {dtype}"), &net, &calls).await;
    }
}

pub async fn every_loom_attention_case_matches(gpu: &Gpu) {
    // testdata/forward/attention.json: Loom's own outputs for query_dim, GQA (also uneven), odd head_dim, RoPE bases
    // far from 10000, batch rows sharing one timeline, KV continuation and reset, the 512-row wrap, odd input ranks,
    // quantized dtypes, q_norm/k_norm blobs. The CPU matches them bit for bit; the GPU within the tolerance of both.
    let doc: Value = serde_json::from_str(testdata!("forward/attention.json")).unwrap();
    let mut n = 0;
    for case in doc["cases"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        let net = match case["entity_hex"].as_str() {
            Some(hex) => entity::read(&hex_bytes(hex)).unwrap(),
            None => loom_json::read(case["network"].as_str().unwrap().as_bytes()).unwrap(),
        };
        let mut mha = Mha::new(gpu, &net.layers[0]).await.unwrap();
        for (k, call) in case["calls"].as_array().unwrap().iter().enumerate() {
            let shape: Vec<usize> = call["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let x = hex_f32s(call["input_f32_hex"].as_str().unwrap());
            let loom = hex_f32s(call["expected_f32_hex"].as_str().unwrap());
            let got = mha.forward(gpu, &x, &shape).await.unwrap();
            close(&format!("{id} call {k} {shape:?} vs Loom"), &got.data, &loom, ABS, REL);
            n += 1;
        }
    }
    assert_eq!(n, 42);
}

/// Runs `calls` (input, shape) through the GPU layer and `CpuModel`, both keeping their KV cache between calls.
async fn compare_calls(gpu: &Gpu, what: &str, net: &Network, calls: &[(Vec<f32>, Vec<usize>)]) -> MaxErr {
    let mut cpu = CpuModel::new(net.clone());
    let mut mha = Mha::new(gpu, &net.layers[0]).await.unwrap();
    let mut worst = MaxErr::default();
    for (n, (x, shape)) in calls.iter().enumerate() {
        let want = cpu.forward(x, shape).unwrap();
        let got = mha.forward(gpu, x, shape).await.unwrap();
        assert_eq!(got.shape, want.shape, "{what} call {n}");
        let e = close(&format!("{what} call {n} {shape:?}"), &got.data, &want.data, ABS, REL);
        worst.abs = worst.abs.max(e.abs);
        worst.rel = worst.rel.max(e.rel);
    }
    worst
}

pub async fn larger_random_layers_prefill_then_decode(gpu: &Gpu) {
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
        let e = compare_calls(gpu, &what, &net, &calls).await;
        note!("  worst |err| {:.3e}, rel {:.3e}", e.abs, e.rel);
    }
}

pub async fn heads_wider_than_256_match_the_cpu(gpu: &Gpu) {
    // The attention kernel stages the query and writes the output in chunks of 256 head dims: head_dim 320 (one
    // full chunk and a partial one, GQA 4 over 2) and 512 (two full chunks), over a prefill and decode steps.
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
            gpu,
            &format!("MHA d {d}, {heads}/{kv_heads} heads × {hd}"),
            &net,
            &calls,
        )
        .await;
        note!("  worst |err| {:.3e}, rel {:.3e}", e.abs, e.rel);
    }
}

pub async fn layers_the_gpu_cannot_run_are_typed_errors(gpu: &Gpu) {
    let mha = async |edit: &dyn Fn(&mut loom_wasm::network::Layer)| {
        let mut net = one_layer(r#""type":"MultiHeadAttention","d_model":8,"num_heads":2,"num_kv_heads":1"#);
        edit(&mut net.layers[0]);
        Mha::new(gpu, &net.layers[0]).await.map(|_| ())
    };
    // What Loom would panic on, refused as the CPU refuses it: query_dim below d_model, more kv heads than heads.
    let err = mha(&|l| l.query_dim = 4).await.unwrap_err();
    assert!(matches!(err, LoomError::InvalidNetwork(_)), "{err:?}");
    let err = mha(&|l| l.num_kv_heads = 3).await.unwrap_err();
    assert!(matches!(err, LoomError::InvalidNetwork(_)), "{err:?}");
    // A scalar input has no last dimension to replace.
    let net = one_layer(r#""type":"MultiHeadAttention","d_model":8,"num_heads":2"#);
    let mut m = Mha::new(gpu, &net.layers[0]).await.unwrap();
    let err = m.forward(gpu, &[0.5], &[]).await.unwrap_err();
    assert!(matches!(err, LoomError::InvalidInput(_)), "{err:?}");
    // So is a tensor that holds fewer tokens than its shape's layout reads, when encoding directly.
    let mut recorder = Recorder::new(gpu);
    let x = GpuTensor::scratch(&mut recorder, vec![3]).unwrap();
    let mut fresh = Mha::new(gpu, &net.layers[0]).await.unwrap();
    let err = fresh.encode(&mut recorder, &x).unwrap_err();
    assert!(matches!(err, LoomError::InvalidInput(_)), "{err:?}");
}
