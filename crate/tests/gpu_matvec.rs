//! `shaders/matvec.wgsl` against its CPU twin (Loom's Dense forward), natively through wgpu → Vulkan
//! (Mesa lavapipe in CI). The GPU sums in a different order in f32, so results agree within a stated tolerance:
//! |gpu − cpu| ≤ 1e-5 + 1e-4·|cpu|.
#![cfg(not(target_arch = "wasm32"))]

use loom_wasm::cpu::CpuModel;
use loom_wasm::dtype::DType;
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{Gpu, MatVec, PackedWeights, Packing};
use loom_wasm::network::f32_bytes;

fn gpu() -> Gpu {
    pollster::block_on(Gpu::new()).expect("no wgpu adapter: is mesa-vulkan-drivers installed? (scripts/setup.sh)")
}

fn assert_close(gpu: &[f32], cpu: &[f32], what: &str) {
    assert_eq!(gpu.len(), cpu.len(), "{what}");
    let mut max_abs = 0f32;
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        let err = (g - c).abs();
        max_abs = max_abs.max(err);
        assert!(err <= 1e-5 + 1e-4 * c.abs(), "{what}[{i}]: gpu {g} cpu {c}");
    }
    eprintln!("{what}: max abs error {max_abs:e}");
}

#[test]
fn f32_matvec_matches_the_cpu_dense_forward() {
    let gpu = gpu();
    eprintln!(
        "adapter: {:?}, f16 {}, subgroups {}",
        gpu.info.name, gpu.has_f16, gpu.has_subgroups
    );
    let kernel = MatVec::f32(&gpu).unwrap();
    for (n_in, n_out, batch, act) in [(576, 1536, 1, "Silu"), (37, 5, 3, "Tanh"), (1024, 64, 2, "GELU")] {
        let arch = format!(
            r#"{{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":[{{"z":0,"y":0,"x":0,"l":0,
            "type":"Dense","activation":"{act}","dtype":"float32","input_height":{n_in},"output_height":{n_out}}}]}}"#
        );
        let net = loom_json::build(arch.as_bytes()).unwrap();
        let w = net.layers[0].weights.as_ref().unwrap().master_values();
        let x: Vec<f32> = (0..n_in * batch)
            .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
            .collect();
        let cpu = CpuModel::new(net).forward(&x, &[batch, n_in]).unwrap();
        let act = loom_wasm::network::Activation::parse(act).unwrap();
        let packed = pollster::block_on(PackedWeights::upload(
            &gpu,
            Packing::Loom(DType::Float32),
            &f32_bytes(&w),
            1.0,
            n_in,
            n_out,
        ))
        .unwrap();
        let out = pollster::block_on(kernel.run(&gpu, &x, &packed, act.into())).unwrap();
        assert_close(&out, &cpu.data, &format!("Dense {n_in}→{n_out} ×{batch}"));
    }
}
