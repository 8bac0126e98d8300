//! The GPU KMeans layer (`shaders/kmeans.wgsl`) against Loom's own outputs for every KMeans case of the corpora,
//! natively through wgpu → Vulkan (Mesa lavapipe), within the corpus tolerance of `loom conformance --device gpu`
//! (`GPU_TOLERANCE`) and 5e-7 + 1e-5·|cpu| of the CPU twin (6e-8 at most measured on lavapipe). The kernel against
//! its CPU twin, on each device, is in `op_cases/kmeans.rs`.
#![cfg(not(target_arch = "wasm32"))]

mod gpu_corpus;
mod gpu_util;

use gpu_corpus::{check, corpus, Case};
use gpu_util::gpu;
use loom_wasm::cpu::Tensor;
use loom_wasm::gpu::KMeans;

const ABS: f32 = 5e-7;
const REL: f32 = 1e-5;

#[test]
fn loom_written_kmeans_layers_match() {
    let gpu = gpu();
    let km = KMeans::new(&gpu).unwrap();
    let cases: Vec<Case> = [
        corpus("conformance", &["layer_KMeans"]),
        corpus("loom-extra", &["layer_KMeans"]),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(cases.len(), 21 + 21);
    for case in &cases {
        let x = Tensor::new(case.input.clone(), case.shape.clone()).unwrap();
        let got = pollster::block_on(km.forward(&gpu, &case.net.layers[0], "layers.0", &x)).unwrap();
        check(case, &got, ABS, REL);
    }
}
