//! `loom_json::read` (and `build`) on arbitrary bytes; whatever is accepted must save as JSON and as `.entity`,
//! read back, and be a fixed point from the second JSON save on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loom_wasm::formats::{entity, loom_json};

fuzz_target!(|data: &[u8]| {
    if let Ok(mut net) = loom_json::build(data) {
        let saved = loom_json::write(&mut net).expect("a built network saves");
        loom_json::read(&saved).expect("a saved built network reads back");
    }
    let Ok(mut net) = loom_json::read(data) else {
        return;
    };
    let mut as_entity = net.clone();
    let e = entity::write(&mut as_entity).expect("a network read from JSON saves as .entity");
    entity::read(&e).expect("the .entity reads back");
    let first = loom_json::write(&mut net).expect("a network read from a file saves");
    let mut again = loom_json::read(&first).expect("a saved network reads back");
    let second = loom_json::write(&mut again).expect("saves again");
    let mut third_net = loom_json::read(&second).expect("reads back again");
    let third = loom_json::write(&mut third_net).expect("saves a third time");
    assert!(
        second == third,
        "saving is not a fixed point from the second generation"
    );
});
