//! Hostile Loom JSON (persistence and architecture): every case must end in a specific typed [`LoomError`],
//! never a panic, a hang, a silently wrong network or an allocation that only the text asked for.

mod common;

use common::*;
use loom_wasm::formats::{entity, loom_json};
use loom_wasm::network::{Network, MAX_INIT_WEIGHTS};
use loom_wasm::{DType, LoomError};
use serde_json::{json, Value};

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// One int4 Dense layer (5×3 = 15 weights, 8 native bytes), as Loom saved it.
fn dense() -> Vec<u8> {
    corpus_file("layer_Dense_int4", "loom.json")
}

/// The legacy input Loom was fed for it: float32 master weights, no `native`, `scale: 1`.
fn dense_legacy() -> Vec<u8> {
    corpus_file("layer_Dense_int4", "spec.json")
}

fn nested() -> Vec<u8> {
    corpus_file("nested_int4", "loom.json")
}

fn raw(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn read_fails(input: &[u8]) -> LoomError {
    must_fail(input, loom_json::read)
}

fn build_fails(input: &[u8]) -> LoomError {
    must_fail(input, loom_json::build)
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn one_layer(layer: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"depth": 1, "rows": 1, "cols": 1, "layers_per_cell": 1, "layers": [layer]})).unwrap()
}

#[test]
fn the_base_files_are_accepted() {
    for f in [dense(), dense_legacy(), nested()] {
        let (r, peak) = peak_alloc(|| loom_json::read(&f));
        r.unwrap();
        assert!(peak <= alloc_bound(f.len()));
    }
}

#[test]
fn every_prefix_of_a_saved_network_is_refused() {
    for case in ["layer_Dense_int4", "nested_int4", "grid_2x1x2x2", "transformer_int8"] {
        let full = corpus_file(case, "loom.json");
        assert!(loom_json::read(&full).is_ok());
        for len in 0..full.len() {
            assert_err!(read_fails(&full[..len]), LoomError::Json { .. });
        }
    }
}

#[test]
fn invalid_utf8_and_invalid_json_are_refused() {
    let text = String::from_utf8(dense()).unwrap();
    for bad in [&b"\xff"[..], b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"] {
        let mut f = text.clone().into_bytes();
        let at = text.find("Dense").unwrap();
        f.splice(at..at, bad.iter().copied());
        assert_err!(read_fails(&f), LoomError::Json { .. });
        assert_err!(build_fails(&f), LoomError::Json { .. });
    }
    for f in [
        text.replacen('{', "", 1),
        text.replacen("\"scale\"", "scale", 1),
        text.replacen("1,", "1,,", 1),
        text.replacen(" 0,", " 0x0,", 1),
        text.replacen(" 0,", " NaN,", 1),
        text.replacen(" 0,", " -Infinity,", 1),
        text.replacen(" 0,", " 00,", 1),
        text.replacen("\"network\"", "'network'", 1),
        format!("{text},"),
        format!("{text}{text}"),
        String::new(),
        "\u{feff}{}".into(),
        // Valid JSON that is not a network.
        "null".into(),
        "[]".into(),
        "7".into(),
        r#"{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":{}}"#.into(),
        r#"{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":[[]]}"#.into(),
        r#"{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":["Dense"]}"#.into(),
    ] {
        assert_err!(read_fails(f.as_bytes()), LoomError::Json { .. });
        assert_err!(build_fails(f.as_bytes()), LoomError::Json { .. });
    }
}

#[test]
fn deeply_nested_json_is_an_error_not_a_stack_overflow() {
    for depth in [129usize, 100_000, 2_000_000] {
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let f = format!(r#"{{"layers":{}0{}}}"#, open.repeat(depth), close.repeat(depth));
            assert_err!(read_fails(f.as_bytes()), LoomError::Json { .. });
            assert_err!(build_fails(f.as_bytes()), LoomError::Json { .. });
        }
    }
    // Built as text: a deep serde_json::Value would overflow the test's own stack when serialised or dropped.
    let nest = |depth: usize, key: &str| {
        let (open, close) = match key {
            "meta_observed_layer" => (r#"{"type":"Metacognition","meta_observed_layer":"#, "}"),
            "parallel_branches" => (r#"{"type":"Parallel","parallel_branches":["#, "]}"),
            _ => (r#"{"type":"Sequential","sequential_layers":["#, "]}"),
        };
        let layer = format!(
            r#"{}{{"type":"Dense","input_height":1,"output_height":1}}{}"#,
            open.repeat(depth),
            close.repeat(depth)
        );
        format!(r#"{{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":[{layer}]}}"#).into_bytes()
    };
    for key in ["parallel_branches", "sequential_layers", "meta_observed_layer"] {
        let f = nest(1000, key);
        assert_err!(read_fails(&f), LoomError::Json { .. });
        assert_err!(build_fails(&f), LoomError::Json { .. });
    }
    // Within serde_json's limit a deep network reads, builds and writes back.
    let f = nest(60, "sequential_layers");
    let mut net = loom_json::build(&f).unwrap();
    let saved = loom_json::write(&mut net).unwrap();
    assert_eq!(loom_json::read(&saved).unwrap().total_weights(), 1);
}

#[test]
fn invalid_base64_weights_are_refused() {
    for bad in [
        "!!!!",
        "NxqyUb5V6dA",
        "NxqyUb5V6dA==",
        "NxqyUb5V6dA=x",
        "Nxqy Ub5V6dA=",
        "Nxqy\nUb5V6dA=",
        "NxqyUb5V6d-=",
        "NxqyUb5V6d_=",
        "=",
        "é",
        // Non-zero bits after the last byte: Go's lenient decoder would drop them, we refuse the text.
        "NxqyUb5V6dB=",
    ] {
        let f = mutate_json(&dense(), |v| v["layers"][0]["weights"] = json!(bad));
        assert_err!(
            read_fails(&f),
            LoomError::Json { context, .. } if context == "field \"weights\""
        );
    }
}

#[test]
fn weights_of_the_wrong_length_are_refused() {
    // Native int4: 15 weights need 8 bytes.
    let native = [0x37u8, 0x1a, 0xb2, 0x51, 0xbe, 0x55, 0xe9, 0xd0];
    for (bytes, dtype, expected) in [
        (&native[..7], "int4", 8u64),
        (&[&native[..], &[0]].concat()[..], "int4", 8),
        (&native[..1], "int4", 8),
        (&native[..], "int8", 15),
        (&native[..], "uint2", 4),
        (&native[..], "binary", 2),
        (&native[..], "float32", 60),
        (&native[..], "int64", 120),
    ] {
        let f = mutate_json(&dense(), |v| {
            v["layers"][0]["weights"] = json!(b64(bytes));
            v["layers"][0]["dtype"] = json!(dtype);
        });
        assert_err!(
            read_fails(&f),
            LoomError::BlobLength { path, dtype: d, count: 15, expected: e, actual, .. }
                if path == "layers.0" && d == dtype && e == expected && actual == bytes.len() as u64
        );
    }
    // Legacy (`native` false or absent): float32 master bytes, 60 for 15 weights, whatever the layer dtype.
    let master: Vec<u8> = (0..15).flat_map(|i| (i as f32 * 0.01).to_le_bytes()).collect();
    for (len, native) in [
        (56usize, json!(false)),
        (61, json!(false)),
        (8, Value::Null),
        (64, json!(false)),
    ] {
        let bytes: Vec<u8> = master.iter().copied().cycle().take(len).collect();
        let f = mutate_json(&dense_legacy(), |v| {
            v["layers"][0]["weights"] = json!(b64(&bytes));
            if !native.is_null() {
                v["layers"][0]["native"] = native.clone();
            }
        });
        assert_err!(
            read_fails(&f),
            LoomError::BlobLength { dtype, count: 15, expected: 60, actual, .. }
                if dtype == "float32" && actual == len as u64
        );
    }
    // A nested layer names its own path.
    let f = mutate_json(&nested(), |v| {
        v["layers"][0]["parallel_branches"][1]["sequential_layers"][2]["weights"] = json!(b64(&[1, 2, 3]));
    });
    assert_err!(
        read_fails(&f),
        LoomError::BlobLength { path, .. } if path == "layers.0.parallel_branches.1.sequential_layers.2"
    );
}

#[test]
fn wrong_field_types_are_refused() {
    let cases: Vec<(&str, Value)> = vec![
        ("/layers/0/input_height", json!("5")),
        ("/layers/0/input_height", json!(5.5)),
        ("/layers/0/input_height", raw("5.0")),
        ("/layers/0/input_height", raw("5e0")),
        ("/layers/0/input_height", raw("-0.0")),
        ("/layers/0/input_height", raw("9223372036854775808")),
        ("/layers/0/input_height", json!(true)),
        ("/layers/0/input_height", json!([5])),
        ("/layers/0/input_height", json!({"v": 5})),
        ("/layers/0/z", json!("0")),
        ("/layers/0/type", json!(0)),
        ("/layers/0/type", json!(["Dense"])),
        ("/layers/0/activation", json!(1)),
        ("/layers/0/dtype", json!(14)),
        ("/layers/0/softmax_type", json!(true)),
        ("/layers/0/softmax_type", json!(1.5)),
        ("/layers/0/weights", json!(123)),
        ("/layers/0/weights", json!([55, 26])),
        ("/layers/0/native", json!("true")),
        ("/layers/0/native", json!(1)),
        ("/layers/0/scale", json!("0.5")),
        ("/layers/0/scale", json!(true)),
        ("/layers/0/temperature", json!("1")),
        ("/layers/0/temperature", raw("1e309")),
        ("/layers/0/rope_freq_base", raw("-1e400")),
        ("/layers/0/gumbel_noise", json!("false")),
        ("/layers/0/output_mode", json!(0)),
        ("/layers/0/parallel_branches", json!({})),
        ("/layers/0/parallel_branches", json!([1])),
        ("/layers/0/meta_observed_layer", json!([])),
        ("/layers/0/meta_rules", json!([{"Command": "x"}])),
        ("/layers/0/meta_rules", json!([{"Command": raw("1e39")}])),
        ("/depth", json!("1")),
        ("/depth", json!(1.5)),
        ("/depth", json!(-1)),
        ("/rows", json!(true)),
        ("/layers", json!("[]")),
    ];
    for (ptr, v) in cases {
        let f = mutate_json(&dense(), |doc| set_ptr(doc, ptr, v.clone()));
        assert_err!(read_fails(&f), LoomError::Json { .. });
    }
    // Go leaves a field unchanged on null.
    let f = mutate_json(&dense(), |v| v["layers"][0]["activation"] = Value::Null);
    assert!(loom_json::read(&f).is_ok());
}

#[test]
fn unknown_names_are_refused() {
    for (key, bad, kind) in [
        ("type", "Convolution", "layer type"),
        ("type", "Dense2", "layer type"),
        ("type", " Dense", "layer type"),
        ("activation", "swish", "activation"),
        ("activation", "ReLU6", "activation"),
        ("softmax_type", "grid", "softmax type"),
        ("softmax_type", "Standard ", "softmax type"),
    ] {
        let f = mutate_json(&dense(), |v| v["layers"][0][key] = json!(bad));
        assert_err!(read_fails(&f), LoomError::UnknownName { kind: k, name } if k == kind && name == bad);
        assert_err!(build_fails(&f), LoomError::UnknownName { kind: k, .. } if k == kind);
    }
    for bad in ["int3", "Q4_0", "fp8_e4m3", "float", "int 4", "int4\0"] {
        let f = mutate_json(&dense(), |v| v["layers"][0]["dtype"] = json!(bad));
        assert_err!(read_fails(&f), LoomError::UnknownDType(s) if s == bad);
        assert_err!(build_fails(&f), LoomError::UnknownDType(s) if s == bad);
    }
    // Architecture JSON writes softmax_type as an integer id (0..=9).
    for id in [-1i64, 10, i64::MAX] {
        let f = one_layer(json!({"type": "Softmax", "softmax_type": id}));
        assert_err!(
            build_fails(&f),
            LoomError::UnknownName {
                kind: "softmax type",
                ..
            }
        );
    }
}

#[test]
fn coordinates_outside_the_grid_are_refused() {
    for (k, v) in [
        ("z", json!(1)),
        ("y", json!(1)),
        ("x", json!(-1)),
        ("l", json!(1)),
        ("l", json!(i64::MAX)),
        ("z", json!(i64::MIN)),
    ] {
        let f = mutate_json(&dense(), |doc| doc["layers"][0][k] = v.clone());
        assert_err!(read_fails(&f), LoomError::InvalidNetwork(_));
        assert_err!(build_fails(&f), LoomError::InvalidNetwork(_));
    }
    for k in ["z", "x"] {
        let f = mutate_json(&dense(), |doc| doc["layers"][0][k] = raw("18446744073709551616"));
        assert_err!(read_fails(&f), LoomError::Json { .. });
    }
    // An empty grid has no cells at all.
    for k in ["depth", "rows", "cols", "layers_per_cell"] {
        let f = mutate_json(&dense(), |doc| doc[k] = json!(0));
        assert_err!(read_fails(&f), LoomError::InvalidNetwork(_));
    }
}

#[test]
fn absurd_grids_are_refused_without_allocating_them() {
    let big = 1u64 << 20;
    for (d, r, c, l) in [
        (big, big, big, 1),
        (big, big, 1, 1),
        (1024, 1024, 1, 1),
        (64, 64, 2, 1),
        (u64::MAX >> 1, 3, 1, 1),
    ] {
        let f = mutate_json(&dense(), |v| {
            v["depth"] = json!(d);
            v["rows"] = json!(r);
            v["cols"] = json!(c);
            v["layers_per_cell"] = json!(l);
        });
        assert_err!(read_fails(&f), LoomError::InvalidNetwork(_));
        assert_err!(build_fails(&f), LoomError::InvalidNetwork(_));
    }
    // A grid of 4096 default cells needs no more text than that.
    let f = br#"{"depth":16,"rows":16,"cols":16,"layers_per_cell":1}"#;
    assert_eq!(loom_json::read(f).unwrap().layers.len(), 4096);
    // Bigger grids are fine when the file describes them (as Loom's files do, one object per cell).
    let cells: Vec<Value> = (0..5000)
        .map(|i| json!({"z": 0, "y": 0, "x": i, "l": 0, "type": "Dense"}))
        .collect();
    let f = serde_json::to_vec(&json!({"depth": 1, "rows": 1, "cols": 5000, "layers_per_cell": 1, "layers": cells}))
        .unwrap();
    assert_eq!(loom_json::read(&f).unwrap().layers.len(), 5000);
}

#[test]
fn scales_json_cannot_hold_in_float32_are_refused() {
    for scale in ["1e39", "-1e39", "3.5e38", "1e400"] {
        let f = mutate_json(&dense(), |v| v["layers"][0]["scale"] = raw(scale));
        assert_err!(read_fails(&f), LoomError::InvalidScale { path, scale } if path == "layers.0" && scale.is_infinite());
        // Also on a layer that carries no weights.
        let f = mutate_json(&dense(), |v| {
            v["layers"][0].as_object_mut().unwrap().remove("weights");
            v["layers"][0]["scale"] = raw(scale);
        });
        assert_err!(read_fails(&f), LoomError::InvalidScale { .. });
    }
    // Nested layers report their own path.
    let f = mutate_json(&nested(), |v| {
        v["layers"][1]["sequential_layers"][1]["scale"] = raw("1e39")
    });
    assert_err!(
        read_fails(&f),
        LoomError::InvalidScale { path, .. } if path == "layers.1.sequential_layers.1"
    );
    // Legacy weights whose auto-scale would be infinite.
    for (bad, dtype) in [
        (f32::INFINITY, "int8"),
        (f32::NEG_INFINITY, "fp4"),
        (f32::MAX, "binary"),
    ] {
        let mut w = [0.25f32; 15];
        w[0] = bad;
        w[1] = bad;
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let f = mutate_json(&dense_legacy(), |v| {
            v["layers"][0]["weights"] = json!(b64(&bytes));
            v["layers"][0]["dtype"] = json!(dtype);
        });
        assert_err!(read_fails(&f), LoomError::InvalidScale { path, .. } if path == "layers.0");
    }
    // ±Inf and NaN weights are data like any other when no auto-scale is involved.
    let w = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY].repeat(5);
    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    let f = mutate_json(&dense(), |v| {
        v["layers"][0]["weights"] = json!(b64(&bytes));
        v["layers"][0]["dtype"] = json!("float32");
    });
    let mut net = loom_json::read(&f).unwrap();
    let saved = loom_json::write(&mut net).unwrap();
    let back = loom_json::read(&saved).unwrap();
    let bits = |n: &Network| -> Vec<u32> {
        n.layers[0]
            .weights
            .as_ref()
            .unwrap()
            .master_values()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    };
    assert_eq!(bits(&back), w.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
}

#[test]
fn weights_for_weightless_layers_are_refused() {
    for t in ["Softmax", "Parallel", "Sequential", "Residual", "Metacognition"] {
        let f = one_layer(json!({"type": t, "weights": b64(&[0; 4]), "native": true}));
        assert_err!(read_fails(&f), LoomError::InvalidNetwork(_));
    }
    // Empty weights are no weights (Loom skips them).
    let f = one_layer(json!({"type": "Softmax", "weights": "", "native": true}));
    assert!(loom_json::read(&f).unwrap().layers[0].weights.is_none());
}

#[test]
fn shapes_that_overflow_or_go_negative_are_refused() {
    let t = 1u64 << 40;
    for layer in [
        json!({"type": "Dense", "input_height": t, "output_height": t}),
        json!({"type": "SwiGLU", "input_height": t, "output_height": t}),
        json!({"type": "Embedding", "vocab_size": t, "embedding_dim": t}),
        json!({"type": "CNN2", "filters": t, "input_channels": t, "kernel_size": 3}),
        json!({"type": "MultiHeadAttention", "d_model": t, "num_heads": 1}),
    ] {
        let mut l = layer.clone();
        l["weights"] = json!(b64(&[0; 8]));
        l["native"] = json!(true);
        assert_err!(read_fails(&one_layer(l)), LoomError::ShapeOverflow { .. });
        assert_err!(build_fails(&one_layer(layer)), LoomError::ShapeOverflow { .. });
    }
    for layer in [
        json!({"type": "Dense", "input_height": -1, "output_height": 3}),
        json!({"type": "LSTM", "input_height": 3, "output_height": -3}),
        json!({"type": "CNN1", "filters": -2, "input_channels": 1, "kernel_size": 3}),
    ] {
        let mut l = layer.clone();
        l["weights"] = json!(b64(&[0; 8]));
        l["native"] = json!(true);
        assert_err!(read_fails(&one_layer(l)), LoomError::InvalidNetwork(_));
        assert_err!(build_fails(&one_layer(layer)), LoomError::InvalidNetwork(_));
    }
}

#[test]
fn build_refuses_networks_too_big_to_initialise() {
    // 2^15 × 2^14 = 2^29 weights: representable, but 2 GiB of float32 from a 60-byte text.
    let f = one_layer(json!({"type": "Dense", "input_height": 1 << 15, "output_height": 1 << 14}));
    assert_err!(
        build_fails(&f),
        LoomError::TooLarge { max, .. } if max == MAX_INIT_WEIGHTS as u64 * 4
    );
    // Many layers that fit one by one but not together.
    let layers: Vec<Value> = (0..4)
        .map(|l| json!({"l": l, "type": "Dense", "input_height": 1 << 13, "output_height": 1 << 14}))
        .collect();
    let f =
        serde_json::to_vec(&json!({"depth": 1, "rows": 1, "cols": 1, "layers_per_cell": 4, "layers": layers})).unwrap();
    assert_err!(build_fails(&f), LoomError::TooLarge { .. });
    // The same shapes without weights are only a description: read keeps them, without allocating.
    let (r, peak) = peak_alloc(|| loom_json::read(&f));
    assert!(r.unwrap().layers.iter().all(|l| l.weights.is_none()));
    assert!(peak <= alloc_bound(f.len()));
}

#[test]
fn saving_a_read_network_leaves_it_intact_and_rereads_equal() {
    let files = corpus_files("loom.json");
    assert!(files.len() > 300);
    for (case, bytes) in files {
        let read = loom_json::read(&bytes).unwrap_or_else(|e| panic!("{case}: {e}"));
        let mut net = read.clone();
        let saved = loom_json::write(&mut net).unwrap();
        assert_eq!(net, read, "{case}: saving changed the network");
        let back = loom_json::read(&saved).unwrap();
        assert_eq!(back.layers.len(), read.layers.len());
        for (a, b) in back.layers.iter().zip(&read.layers) {
            if a.seq_length != b.seq_length {
                // A cell absent from the input gains seq_length 1 on reload (spec §9); nothing else may differ.
                assert_eq!((b.seq_length, a.seq_length), (0, 1), "{case}");
                continue;
            }
            assert_eq!(a, b, "{case}");
        }
        // Cross-format: the same network saved as .entity keeps every master value.
        let mut net = read.clone();
        let e = entity::write(&mut net).unwrap();
        assert_eq!(net, read, "{case}: entity::write changed the network");
        let from_entity = entity::read(&e).unwrap();
        assert_eq!(from_entity.total_weights(), read.total_weights(), "{case}");
        for (a, b) in from_entity.layers.iter().zip(&read.layers) {
            if let (Some(wa), Some(wb)) = (&a.weights, &b.weights) {
                let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(wa.master_values()), bits(wb.master_values()), "{case}");
            }
        }
    }
}

#[test]
fn saving_after_the_user_changes_a_dtype_keeps_the_weights() {
    for case in ["layer_Dense_int8", "layer_Dense_uint2", "nested_fp4", "grid_2x1x2x2"] {
        let read = loom_json::read(&corpus_file(case, "loom.json")).unwrap();
        let mut net = read.clone();
        for l in &mut net.layers {
            l.dtype = DType::Float32;
        }
        let saved = loom_json::write(&mut net).unwrap();
        let back = loom_json::read(&saved).unwrap();
        for (a, b) in back.layers.iter().zip(&read.layers) {
            if let (Some(wa), Some(wb)) = (&a.weights, &b.weights) {
                assert_eq!(wa.master_values(), wb.master_values(), "{case}");
            }
        }
    }
}

#[test]
fn random_mutations_of_corpus_files_never_panic() {
    let mut seed = 0x0dd_ba11_cafe_f00du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for base in [dense(), nested(), corpus_file("transformer_int4", "loom.json")] {
        for _ in 0..300 {
            let mut f = base.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() as usize) % f.len();
                match next() % 3 {
                    0 => f[i] = next() as u8,
                    1 => f[i] = b"0123456789-.e\"{}[],:"[(next() % 20) as usize],
                    _ => {
                        f.remove(i);
                    }
                }
            }
            let (r, peak) = peak_alloc(|| loom_json::read(&f));
            assert!(peak <= alloc_bound(f.len()));
            if let Ok(mut net) = r {
                let saved = loom_json::write(&mut net).unwrap();
                loom_json::read(&saved).unwrap();
            }
            let (r, _) = peak_alloc(|| loom_json::build(&f));
            if let Ok(mut net) = r {
                loom_json::write(&mut net).unwrap();
            }
        }
    }
}
