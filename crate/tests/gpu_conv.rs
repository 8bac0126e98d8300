//! The GPU conv layers (`shaders/conv.wgsl`: CNN1/2/3, ConvTransposed1D/2D/3D) against Loom's own outputs for every
//! conv case of the corpora and of `testdata/forward/conv.json`, natively through wgpu → Vulkan (Mesa lavapipe),
//! within the corpus tolerance of `loom conformance --device gpu` (`GPU_TOLERANCE`) and 1.5e-6 + 1e-5·|cpu| of the
//! CPU twin (1.8e-7 at most measured on lavapipe). The kernel against its CPU twin, on each device, is in
//! `op_cases/conv.rs`.
#![cfg(not(target_arch = "wasm32"))]

mod gpu_corpus;
mod gpu_util;

use gpu_corpus::{check, corpus, forward, Case};
use gpu_util::gpu;
use loom_wasm::cpu::Tensor;
use loom_wasm::gpu::{Conv, Gpu};

const ABS: f32 = 1.5e-6;
const REL: f32 = 1e-5;

fn run(gpu: &Gpu, conv: &Conv, case: &Case) -> Tensor {
    let x = Tensor::new(case.input.clone(), case.shape.clone()).unwrap();
    pollster::block_on(conv.forward(gpu, &case.net.layers[0], "layers.0", &x)).unwrap()
}

#[test]
fn loom_written_conv_layers_match() {
    let gpu = gpu();
    let conv = Conv::new(&gpu).unwrap();
    let cases: Vec<Case> = [
        corpus("conformance", &["layer_CNN", "layer_ConvTransposed"]),
        corpus("loom-extra", &["layer_CNN", "layer_ConvT"]),
        forward("conv.json"),
    ]
    .into_iter()
    .flatten()
    .collect();
    // 6 families × 21 dtypes in each corpus, and the 38 stride/padding/kernel/dtype calls of conv.json.
    assert_eq!(cases.len(), 126 + 126 + 38);
    for case in &cases {
        let got = run(&gpu, &conv, case);
        check(case, &got, ABS, REL);
    }
}
