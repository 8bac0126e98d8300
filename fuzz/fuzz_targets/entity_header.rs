//! `entity::header_len` and `entity::read_header` on arbitrary bytes: typed errors only, and an accepted header
//! is consistent with the preamble.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loom_wasm::formats::entity;

fuzz_target!(|data: &[u8]| {
    let len = entity::header_len(data);
    if let Ok(header) = entity::read_header(data) {
        assert_eq!(len, Ok(header.header_len));
        assert!(data.len() as u64 >= header.payload_offset());
        let _ = header.payload_len();
    }
});
