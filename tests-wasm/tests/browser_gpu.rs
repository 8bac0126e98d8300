//! Loom's MultiHeadAttention layer on WebGPU in headless Chromium (SwiftShader: no shader-f16, no subgroups) against
//! the CPU forward on the same data, as `crate/tests/gpu_attention.rs` does natively on lavapipe: matvec
//! projections, bias adds, RoPE, KV update and causal GQA attention over a prefill and decode steps that continue the
//! KV cache; and every kernel compiles under Chromium's WGSL compiler. The kernels themselves are tested against their
//! CPU twins by `gpu_ops.rs`, on the same bodies as natively.
//!
//! Run with `bash scripts/test.sh` (its browser step), or
//! `cargo test -p loom-wasm-browser-tests --target wasm32-unknown-unknown` with the runner variables it sets.
//! Every GPU call is awaited (the JS event loop drives WebGPU), never polled.
#![cfg(target_arch = "wasm32")]

#[macro_use]
#[path = "../../crate/tests/op_cases/harness.rs"]
mod harness;

use harness::{close, data, one_layer};
use loom_wasm::cpu::CpuModel;
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{Argmax, Attention, Elementwise, Embedding, Gpu, MatVec, Mha, Norm, Rope, Sample, Softmax};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

async fn gpu() -> Gpu {
    let gpu = Gpu::new()
        .await
        .expect("no WebGPU adapter: does webdriver.json pass --enable-unsafe-webgpu?");
    console_log!(
        "adapter {:?} ({:?}, {:?}), f16 {}, subgroups {}",
        gpu.info.name,
        gpu.info.backend,
        gpu.info.device_type,
        gpu.has_f16,
        gpu.has_subgroups
    );
    gpu
}

#[wasm_bindgen_test]
async fn mha_layer_prefill_and_decode_match_the_cpu() {
    let gpu = gpu().await;
    // Loom's own float32 MHA layer (2 heads over 1 kv head, d_model 4), then a random d_model 64, 4 heads over
    // 2 kv heads.
    let loom = loom_json::read(
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/conformance/cases/layer_MultiHeadAttention_float32/loom.json"
        ))
        .as_bytes(),
    )
    .unwrap();
    let random =
        one_layer(r#""type":"MultiHeadAttention","activation":"Linear","d_model":64,"num_heads":4,"num_kv_heads":2"#);
    for (name, net) in [("Loom MHA d 4", loom), ("MHA d 64, 4/2 heads", random)] {
        let d = net.layers[0].d_model as usize;
        let mut cpu = CpuModel::new(net.clone());
        let mut mha = Mha::new(&gpu, &net.layers[0]).await.unwrap();
        let mut calls = vec![(data(1, 16 * d, -1.0, 1.0), vec![16, d])];
        calls.extend((0..3).map(|s| (data(10 + s, d, -1.0, 1.0), vec![1, d])));
        calls.push((data(20, 2 * 4 * d, -1.0, 1.0), vec![2, 4, d]));
        for (k, (x, shape)) in calls.iter().enumerate() {
            let want = cpu.forward(x, shape).unwrap();
            let got = mha.forward(&gpu, x, shape).await.unwrap();
            assert_eq!(got.shape, want.shape);
            close(&format!("{name} call {k} {shape:?}"), &got.data, &want.data, 1e-5, 1e-4);
        }
    }
}

#[wasm_bindgen_test]
async fn every_op_shader_compiles_in_chromium() {
    // Chromium's WGSL compiler (Tint) is stricter than naga natively: it refused a constant −∞ and a decimal a hair
    // past f32::MAX that naga took. In the browser a refused shader is known only once its validation scope resolves:
    // `check_pipelines` waits for every pipeline created so far.
    let gpu = gpu().await;
    MatVec::f32(&gpu).unwrap();
    Norm::new(&gpu).unwrap();
    Elementwise::new(&gpu).unwrap();
    Softmax::new(&gpu).unwrap();
    Embedding::new(&gpu).unwrap();
    Argmax::new(&gpu).unwrap();
    Sample::new(&gpu).unwrap();
    Rope::new(&gpu).unwrap();
    Attention::new(&gpu).unwrap();
    loom_wasm::gpu::Conv::new(&gpu).unwrap();
    loom_wasm::gpu::Recurrent::new(&gpu).unwrap();
    loom_wasm::gpu::KMeans::new(&gpu).unwrap();
    if let Err(e) = gpu.check_pipelines().await {
        panic!("a kernel does not compile in Chromium: {e}");
    }
    console_log!("matvec, norm, elementwise, softmax, embedding, argmax, sample, rope, attention, conv, recurrent, kmeans: all compile");
}
