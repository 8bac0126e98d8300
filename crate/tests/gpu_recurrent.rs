//! The GPU RNN and LSTM layers (`shaders/recurrent.wgsl`) against Loom's own outputs for every recurrent case of the
//! corpora and of `testdata/forward/recurrent.json`, natively through wgpu → Vulkan (Mesa lavapipe), within the corpus
//! tolerance of `loom conformance --device gpu` (`GPU_TOLERANCE`) and 5e-6 + 1e-5·|cpu| of the CPU twin (5e-7 at
//! most measured on lavapipe). The kernel against its CPU twin, on each device, is in `op_cases/recurrent.rs`.
#![cfg(not(target_arch = "wasm32"))]

mod gpu_corpus;
mod gpu_util;

use gpu_corpus::{check, corpus, forward, Case};
use gpu_util::gpu;
use loom_wasm::cpu::Tensor;
use loom_wasm::gpu::Recurrent;

const ABS: f32 = 5e-6;
const REL: f32 = 1e-5;

#[test]
fn loom_written_recurrent_layers_match() {
    let gpu = gpu();
    let rec = Recurrent::new(&gpu).unwrap();
    let cases: Vec<Case> = [
        corpus("conformance", &["layer_RNN", "layer_LSTM"]),
        corpus("loom-extra", &["layer_RNN", "layer_LSTM"]),
        forward("recurrent.json"),
    ]
    .into_iter()
    .flatten()
    .collect();
    // 2 families × 21 dtypes in each corpus, and the 22 batch/tile/dtype calls of recurrent.json.
    assert_eq!(cases.len(), 42 + 42 + 22);
    for case in &cases {
        let x = Tensor::new(case.input.clone(), case.shape.clone()).unwrap();
        let got = pollster::block_on(rec.forward(&gpu, &case.net.layers[0], "layers.0", &x)).unwrap();
        check(case, &got, ABS, REL);
    }
}
