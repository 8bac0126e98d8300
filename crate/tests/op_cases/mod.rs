//! One test body per GPU op, run on each device: natively through wgpu → Vulkan (Mesa lavapipe in CI) by
//! `crate/tests/gpu_ops.rs`, and in headless Chromium on WebGPU (SwiftShader: no shader-f16, no subgroups) by
//! `tests-wasm/tests/gpu_ops.rs`. Each case is an `async fn(&Gpu)` comparing a kernel with its CPU twin;
//! [`on_each_device!`] turns a module's cases into `#[test]`s (blocked on natively) and `#[wasm_bindgen_test]`s
//! (awaited: the JavaScript event loop drives WebGPU). Files they read are embedded with [`testdata!`].
#![allow(dead_code, unused_macros)]

#[macro_use]
pub mod harness;

/// Declares the listed `async fn(&Gpu)` cases of the calling module as tests on the device of the build.
macro_rules! on_each_device {
    ($($case:ident),+ $(,)?) => {
        #[cfg(not(target_arch = "wasm32"))]
        mod native {
            $(
                #[test]
                fn $case() {
                    pollster::block_on(super::$case(crate::op_cases::native_gpu()))
                }
            )+
        }
        #[cfg(target_arch = "wasm32")]
        mod browser {
            $(
                #[wasm_bindgen_test::wasm_bindgen_test]
                async fn $case() {
                    super::$case(crate::op_cases::browser_gpu().await).await
                }
            )+
        }
    };
}

pub mod argmax;
pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod embedding;
pub mod kmeans;
pub mod matvec;
pub mod mha;
pub mod norm;
pub mod recurrent;
pub mod sample;
pub mod softmax;
pub mod views;

use loom_wasm::gpu::{
    Argmax, Attention, Conv, Elementwise, Embedding, Gpu, KMeans, LogitMask, MatVec, Norm, Recurrent, Rope, Sample,
    Softmax,
};

on_each_device!(every_kernel_compiles);

/// Every kernel family's pipelines are accepted by the device's shader compiler. Chromium's (Tint) is stricter than
/// naga natively: it refused a constant −∞ and a decimal a hair past f32::MAX that naga took. In the browser a
/// refused shader is known only once its validation scope resolves: `check_pipelines` waits for every pipeline
/// created so far.
pub async fn every_kernel_compiles(gpu: &Gpu) {
    MatVec::f32(gpu).unwrap();
    Norm::new(gpu).unwrap();
    Elementwise::new(gpu).unwrap();
    Softmax::new(gpu).unwrap();
    Embedding::new(gpu).unwrap();
    Argmax::new(gpu).unwrap();
    Sample::new(gpu).unwrap();
    LogitMask::new(gpu).unwrap();
    Rope::new(gpu).unwrap();
    Attention::new(gpu).unwrap();
    Conv::new(gpu).unwrap();
    Recurrent::new(gpu).unwrap();
    KMeans::new(gpu).unwrap();
    if let Err(e) = gpu.check_pipelines().await {
        panic!("a kernel does not compile: {e}");
    }
    note!("matvec, norm, elementwise, softmax, embedding, argmax, sample, mask, rope, attention, conv, recurrent, kmeans: all compile");
}

/// The wgpu device every native case shares (Vulkan: Mesa lavapipe without a GPU).
#[cfg(not(target_arch = "wasm32"))]
pub fn native_gpu() -> &'static Gpu {
    static GPU: std::sync::OnceLock<Gpu> = std::sync::OnceLock::new();
    GPU.get_or_init(|| {
        let gpu = pollster::block_on(Gpu::new())
            .expect("no wgpu adapter: is mesa-vulkan-drivers installed? (scripts/setup.sh)");
        describe(&gpu);
        gpu
    })
}

/// The WebGPU device every browser case shares, as natively: its pipeline cache then compiles each kernel once for
/// all the cases (SwiftShader compiles slowly), where a device per case compiled the same pipelines again. Leaked,
/// like the native one in its static: it lives as long as the test page.
#[cfg(target_arch = "wasm32")]
pub async fn browser_gpu() -> &'static Gpu {
    thread_local! {
        static GPU: std::cell::Cell<Option<&'static Gpu>> = const { std::cell::Cell::new(None) };
    }
    if let Some(gpu) = GPU.get() {
        return gpu;
    }
    let gpu: &'static Gpu =
        Box::leak(Box::new(Gpu::new().await.expect(
            "no WebGPU adapter: does webdriver.json pass --enable-unsafe-webgpu?",
        )));
    describe(gpu);
    GPU.set(Some(gpu));
    gpu
}

fn describe(gpu: &Gpu) {
    note!(
        "adapter {:?} ({:?}, {:?}), shader-f16 {}, subgroups {}",
        gpu.info.name,
        gpu.info.backend,
        gpu.info.device_type,
        gpu.has_f16,
        gpu.has_subgroups
    );
}

/// Uploads f32 values into a new storage buffer.
pub async fn upload(gpu: &Gpu, label: &str, values: &[f32]) -> wgpu::Buffer {
    gpu.upload(label, bytemuck::cast_slice(values)).await.unwrap()
}

/// A new output buffer of `n` f32 values.
pub async fn output(gpu: &Gpu, label: &str, n: usize) -> wgpu::Buffer {
    gpu.output(label, 4 * n as u64).await.unwrap()
}
