//! Loom layers on WebGPU in headless Chromium (SwiftShader: no shader-f16, subgroups of 4), each against the CPU
//! forward on the same data, as `crate/tests/gpu_*.rs` do natively on lavapipe: a whole MultiHeadAttention layer
//! (matvec projections, bias adds, RoPE, KV update, causal GQA attention) over a prefill and decode steps that
//! continue the KV cache, CNN2, ConvTransposed2D and LSTM layers; and every op kernel compiles under Chromium's WGSL
//! compiler. The ops themselves are tested against their CPU twins by `gpu_ops.rs`, on the bodies natively run.
//!
//! Run with `bash scripts/test.sh` (its browser step), or
//! `cargo test -p loom-wasm-browser-tests --target wasm32-unknown-unknown` with the runner variables it sets.
//! Every GPU call is awaited (the JS event loop drives WebGPU), never polled.
#![cfg(target_arch = "wasm32")]

#[macro_use]
#[path = "../../crate/tests/op_cases/harness.rs"]
mod harness;

use harness::{close, data, one_layer};
use loom_wasm::cpu::{CpuModel, Tensor};
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{Argmax, Attention, Elementwise, Embedding, Gpu, MatVec, Mha, Norm, Rope, Sample, Softmax};
use loom_wasm::network::WeightStore;
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
    if let Err(e) = gpu.check_pipelines().await {
        panic!("a kernel does not compile in Chromium: {e}");
    }
    console_log!("matvec, norm, elementwise, softmax, embedding, argmax, sample, rope, attention: all compile");
}

#[wasm_bindgen_test]
async fn conv_and_lstm_match_their_cpu_twins() {
    // The layer families that left the CPU (issue 5): their kernels compile under Tint, and a CNN2, a
    // ConvTransposed2D, Loom's own LSTM layer and a wider LSTM agree with the CPU (tolerances as in
    // crate/tests/gpu_conv.rs and gpu_recurrent.rs).
    let gpu = gpu().await;
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let conv = loom_wasm::gpu::Conv::new(&gpu).unwrap();
    let rec = loom_wasm::gpu::Recurrent::new(&gpu).unwrap();
    loom_wasm::gpu::KMeans::new(&gpu).unwrap();
    if let Some(e) = scope.pop().await {
        panic!("a kernel does not compile in Chromium: {e}");
    }

    let with = |json: &str, count: usize| {
        let mut net = one_layer(json);
        net.layers[0].weights = Some(WeightStore::from_master(data(count as u64, count, -0.5, 0.5)));
        net
    };
    let cnn = with(
        r#""type":"CNN2","activation":"Tanh","input_channels":3,"filters":4,"kernel_size":3,"stride":2,"padding":1,"input_height":9,"input_width":8,"output_height":5,"output_width":4"#,
        4 * 3 * 9,
    );
    let convt = with(
        r#""type":"ConvTransposed2D","activation":"Linear","input_channels":2,"filters":3,"kernel_size":3,"stride":2,"padding":1,"input_height":4,"input_width":3,"output_height":7,"output_width":5"#,
        3 * 2 * 9,
    );
    for (name, net, shape) in [
        ("CNN2 3→4 9×8 s2 p1", cnn, vec![2, 3, 9, 8]),
        ("ConvTransposed2D 2→3 4×3 s2 p1", convt, vec![2, 2, 4, 3]),
    ] {
        let x = data(7, shape.iter().product(), -1.0, 1.0);
        let want = CpuModel::new(net.clone()).forward(&x, &shape).unwrap();
        let x = Tensor::new(x, shape).unwrap();
        let got = conv.forward(&gpu, &net.layers[0], "layers.0", &x).await.unwrap();
        assert_eq!(got.shape, want.shape);
        close(name, &got.data, &want.data, 1e-5, 1e-4);
    }

    let loom = loom_json::read(
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/loom-extra/cases/layer_LSTM_float32/loom.json"
        ))
        .as_bytes(),
    )
    .unwrap();
    let wide = with(
        r#""type":"LSTM","input_height":12,"output_height":70,"seq_length":6,"tile_size":5"#,
        4 * 70 * (12 + 70 + 1),
    );
    for (name, net) in [("Loom LSTM", loom), ("LSTM 12→70 ×6 tile 5", wide)] {
        let l = &net.layers[0];
        let shape = vec![3, l.seq_length as usize, l.input_height as usize];
        let x = data(8, shape.iter().product(), -1.0, 1.0);
        let want = CpuModel::new(net.clone()).forward(&x, &shape).unwrap();
        let got = rec
            .forward(&gpu, l, "layers.0", &Tensor::new(x, shape).unwrap())
            .await
            .unwrap();
        close(name, &got.data, &want.data, 1e-5, 1e-4);
    }
}
