//! The GPU ops against their CPU twins, natively: wgpu → Vulkan (Mesa lavapipe in CI, subgroups and shader-f16).
//! The bodies are in `op_cases/`; `tests-wasm/tests/gpu_ops.rs` runs the same ones in headless Chromium.
#![cfg(not(target_arch = "wasm32"))]

mod op_cases;

use loom_wasm::gpu::{Gpu, MatVec, PackedWeights, Packing, Pointwise};
use loom_wasm::quant::GgmlType;

/// The profile counts passes where wgpu records them: each matvec dispatched while profiling is on is one timed pass
/// under its pipeline's name, with the weight bytes it read, and the product is what it is unprofiled; nothing is
/// timed once profiling is off.
#[test]
fn kernel_times_count_each_dispatch() {
    let gpu = pollster::block_on(Gpu::profiled()).expect("timestamp queries (lavapipe has them)");
    // 8 rows of 64 Q8_0 weights (two blocks of 34 bytes a row): every code 1, scale 0.5, so each output is Σx/2.
    let mut bytes = Vec::new();
    for _ in 0..16 {
        bytes.extend(half::f16::from_f32(0.5).to_le_bytes());
        bytes.extend([1u8; 32]);
    }
    let packing = Packing::Ggml(GgmlType::Q8_0);
    let w = pollster::block_on(PackedWeights::upload(&gpu, packing, &bytes, 1.0, 64, 8)).unwrap();
    let mv = MatVec::auto(&gpu, packing).unwrap();
    let x: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let run = || pollster::block_on(mv.run(&gpu, &x, &w, Pointwise::Identity)).unwrap();
    let plain = run();
    assert_eq!(plain, vec![1008.0; 8]);
    assert!(gpu.take_kernel_times().is_empty(), "profiling starts off");

    gpu.set_profiling(true);
    assert_eq!(run(), plain);
    assert_eq!(run(), plain);
    let times = gpu.take_kernel_times();
    assert_eq!(times.len(), 1, "{times:?}");
    assert!(times[0].kernel.starts_with("matvec/ggml_q8_0/"), "{}", times[0].kernel);
    assert_eq!((times[0].passes, times[0].weight_bytes), (2, 2 * 544));
    assert!(times[0].seconds > 0.0 && times[0].seconds < 1.0, "{}", times[0].seconds);

    gpu.set_profiling(false);
    run();
    assert!(gpu.take_kernel_times().is_empty());
}
