//! `entity::read` and `entity::read_bytes` on arbitrary bytes; whatever they accept must save, read back, and be
//! a fixed point from the second save on (spec §9: legacy blobs and quantized RMSNorm change once).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use loom_wasm::formats::entity;

fuzz_target!(|data: &[u8]| {
    let _ = entity::read_layers(data, &[0]);
    let _ = entity::layer_blob(data, 0);
    let read = entity::read(data);
    // The zero-copy reader (the CLI's) agrees with the copying one: the same error, or networks that save to
    // the same bytes (compared saved, since NaN weights make `==` on networks false).
    match (&read, entity::read_bytes(Bytes::copy_from_slice(data))) {
        (Ok(a), Ok(mut b)) => {
            let a = entity::write(&mut a.clone()).expect("saves");
            assert!(a == entity::write(&mut b).expect("saves"), "read and read_bytes differ");
        }
        (Err(a), Err(b)) => assert_eq!(*a, b),
        (a, b) => panic!("read gave {a:?}, read_bytes gave {b:?}"),
    }
    let Ok(mut net) = read else {
        return;
    };
    let first = entity::write(&mut net).expect("a network read from a file saves");
    let mut again = entity::read(&first).expect("a saved network reads back");
    let second = entity::write(&mut again).expect("saves again");
    let mut third_net = entity::read(&second).expect("reads back again");
    let third = entity::write(&mut third_net).expect("saves a third time");
    assert!(
        second == third,
        "saving is not a fixed point from the second generation"
    );
});
