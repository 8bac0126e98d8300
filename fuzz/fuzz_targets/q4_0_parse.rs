//! `Q4Blocks::parse` on arbitrary bytes: what it accepts re-encodes to the same bytes and dequantizes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loom_wasm::dtype::q4_0::{Q4Blocks, BLOCK};

fuzz_target!(|data: &[u8]| {
    if let Ok(blocks) = Q4Blocks::parse(data) {
        assert_eq!(blocks.to_bytes(), data);
        assert_eq!(blocks.dequantize(usize::MAX).len(), blocks.scales.len() * BLOCK);
    }
});
