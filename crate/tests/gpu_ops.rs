//! The GPU ops against their CPU twins, natively: wgpu → Vulkan (Mesa lavapipe in CI, subgroups and shader-f16).
//! The bodies are in `op_cases/`; `tests-wasm/tests/gpu_ops.rs` runs the same ones in headless Chromium.
#![cfg(not(target_arch = "wasm32"))]

mod op_cases;
