//! The GPU ops against their CPU twins in headless Chromium: wgpu on WebGPU (SwiftShader: no shader-f16, no
//! subgroups). The same bodies as `crate/tests/gpu_ops.rs` runs natively, from `crate/tests/op_cases/`.
//!
//! Run with `bash scripts/test.sh` (its browser step), or
//! `cargo test -p loom-wasm-browser-tests --target wasm32-unknown-unknown --test gpu_ops` with the runner variables
//! it sets.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "../../crate/tests/op_cases/mod.rs"]
mod op_cases;
