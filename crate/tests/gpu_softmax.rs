//! The GPU Softmax layers against Loom's own outputs for every Softmax case of the corpora (Sparse and Entmax
//! included), natively through wgpu → Vulkan (Mesa lavapipe), within |gpu − loom| ≤ 1e-6 + 1e-5·|loom| (the
//! kernels against their CPU twin, on each device, are in `op_cases/softmax.rs`).
#![cfg(not(target_arch = "wasm32"))]

mod gpu_corpus;
mod gpu_util;

use gpu_util::gpu;
use loom_wasm::cpu::Tensor;
use loom_wasm::gpu::Softmax;

const REL: f32 = 1e-5;
const SPARSE_ABS: f32 = 1e-6;

#[test]
fn loom_written_softmax_cases_match_loom() {
    // Every corpus Softmax case with Loom's own input and output (Sparse and Entmax included).
    let gpu = gpu();
    let sm = Softmax::new(&gpu).unwrap();
    let cases: Vec<_> = [
        gpu_corpus::corpus("conformance", &["softmax_"]),
        gpu_corpus::corpus("loom-extra", &["softmax_"]),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(cases.len(), 9 + 5);
    for case in &cases {
        let x = Tensor::new(case.input.clone(), case.shape.clone()).unwrap();
        let got = pollster::block_on(sm.forward(&gpu, &case.net.layers[0], &x)).unwrap();
        gpu_corpus::check(case, &got, SPARSE_ABS, REL);
    }
}
