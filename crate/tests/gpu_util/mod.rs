//! Shared by the native `gpu_*` suites: the device and corpus files, plus the device-agnostic helpers of
//! `op_cases/harness.rs` (reproducible data, one-layer networks, the tolerance checks).
#![allow(dead_code, unused_macros)]

#[macro_use]
#[path = "../op_cases/harness.rs"]
mod harness;

pub use harness::*;
use loom_wasm::gpu::Gpu;

/// The wgpu device (Vulkan natively: Mesa lavapipe without a GPU).
pub fn gpu() -> Gpu {
    pollster::block_on(Gpu::new()).expect("no wgpu adapter: is mesa-vulkan-drivers installed? (scripts/setup.sh)")
}

/// A corpus file's text, path relative to `testdata/`.
pub fn testdata(path: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata")
            .join(path),
    )
    .unwrap()
}
