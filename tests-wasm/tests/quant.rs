//! `crate/tests/quant_blocks.rs` (the block kernels against gguf-py and numpy) compiled to wasm32 with simd128 and
//! run in headless Chromium: the simd128 kernels here, the portable ones through its forced-portable cases; and
//! `crate/tests/ops_exp.rs` (the decoder's exponentials against float64).
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "../../crate/tests/quant_blocks.rs"]
mod quant_blocks;

#[path = "../../crate/tests/ops_exp.rs"]
mod ops_exp;
