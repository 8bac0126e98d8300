//! Hostile `.entity` inputs: every case must end in a specific typed [`LoomError`], never a panic, a hang, a
//! silently wrong network or an allocation that only the header asked for. Inputs start from Loom-written
//! corpus files and are mutated.

mod common;

use common::*;
use loom_wasm::formats::entity::{self, MAX_HEADER_LEN, PREAMBLE_LEN};
use loom_wasm::network::LayerType;
use loom_wasm::{DType, LoomError};
use serde_json::{json, Value};

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// A 1×1×1×2 grid of Parallel/Sequential containers holding int4 Dense, Residual, RMSNorm and LayerNorm layers.
fn nested() -> Vec<u8> {
    corpus_file("nested_int4", "loom.entity")
}

/// One int4 Dense layer, 5×3 = 15 weights in an 8-byte blob.
fn dense() -> Vec<u8> {
    corpus_file("layer_Dense_int4", "loom.entity")
}

/// A number with its exact text (the crate's serde_json keeps number text verbatim).
fn raw(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// A whole-file read must fail on `input`; returns the error. A selective read of every layer fails the same way,
/// or succeeds when only a `transformer.*` blob was wrong (selective loads skip those, spec §8).
fn read_fails(input: &[u8]) -> LoomError {
    let e = must_fail(input, entity::read);
    // The zero-copy reader refuses it the same way.
    let shared = bytes::Bytes::copy_from_slice(input);
    assert_eq!(must_fail(input, |_| entity::read_bytes(shared)), e);
    let (r, peak) = peak_alloc(|| entity::read_layers(input, &[0, 1, 2, 3]));
    assert!(peak <= alloc_bound(input.len()));
    if let Err(e2) = r {
        assert_eq!(e, e2);
    }
    e
}

/// The header alone must already be refused.
fn header_fails(input: &[u8]) -> LoomError {
    let e = must_fail(input, entity::read_header);
    assert_eq!(read_fails(input), e);
    e
}

/// A one-layer network header around `layer`, with the given blob table.
fn one_layer(layer: Value, blobs: Value) -> Value {
    json!({
        "format_version": 1,
        "network": {"id": "network", "depth": 1, "rows": 1, "cols": 1, "layers_per_cell": 1, "layers": [layer]},
        "blobs": blobs,
    })
}

/// [`entity::layer_blob`] with an owned result.
fn layer_blob(bytes: &[u8], i: usize) -> loom_wasm::Result<Option<(Vec<u8>, f32, bool)>> {
    entity::layer_blob(bytes, i).map(|o| o.map(|(d, s, n)| (d.to_vec(), s, n)))
}

fn blob(path: &str, offset: u64, length: u64, dtype: &str) -> Value {
    json!({"path": path, "offset": offset, "length": length, "dtype": dtype, "scale": 0.5, "native": true})
}

// ---------------------------------------------------------------------------------------------------------
// Preamble: truncation, magic, version, header_len.

#[test]
fn every_prefix_of_a_corpus_file_is_refused() {
    for (case, file) in [
        ("nested_int4", "loom.entity"),
        ("layer_Dense_int4", "loom.entity"),
        ("grid_2x1x2x2", "loom.entity"),
        ("transformer_int8", "loom.entity"),
        ("q4_0_transformer_entity", "emulated_q4.entity"),
    ] {
        let full = corpus_file(case, file);
        let whole_header = entity::read_header(&full).unwrap();
        let n = whole_header.header_len as usize;
        assert!(entity::read(&full).is_ok(), "{case}");
        for len in 0..full.len() {
            let prefix = &full[..len];
            // header_len needs exactly the 20-byte preamble.
            match entity::header_len(prefix) {
                Ok(h) => {
                    assert!(len >= PREAMBLE_LEN, "{case}: {len}");
                    assert_eq!(h, n as u64);
                }
                Err(e) => {
                    assert!(len < PREAMBLE_LEN, "{case}: {len}: {e:?}");
                    assert_err!(e, LoomError::Truncated { needed: 20, .. });
                }
            }
            // read_header succeeds exactly when the whole header is there, and then says what the file says.
            let (r, peak) = peak_alloc(|| entity::read_header(prefix));
            assert!(peak <= alloc_bound(len), "{case}: {len}: {peak}");
            match r {
                Ok(h) => {
                    assert!(len >= PREAMBLE_LEN + n, "{case}: {len}");
                    assert_eq!(h, whole_header);
                }
                Err(e) => {
                    assert!(len < PREAMBLE_LEN + n, "{case}: {len}: {e:?}");
                    assert_err!(e, LoomError::Truncated { .. });
                }
            }
            // A whole-file read of any strict prefix fails: the preamble or header is cut, or a blob is.
            let e = read_fails(prefix);
            if len < PREAMBLE_LEN + n {
                assert_err!(e, LoomError::Truncated { .. });
            } else {
                assert_err!(e, LoomError::BlobOutOfRange { .. });
            }
        }
    }
}

#[test]
fn bad_magic_is_refused() {
    let good = nested();
    for i in 0..8 {
        let mut f = good.clone();
        f[i] ^= 0x20;
        assert_err!(
            must_fail(&f, entity::header_len),
            LoomError::BadMagic { format: "ENTITY" }
        );
        assert_err!(header_fails(&f), LoomError::BadMagic { .. });
    }
    // Other formats' openings.
    for start in [
        &b"{\"id\":\"network\",\"depth\":1}"[..],
        b"\x08\0\0\0\0\0\0\0{\"a\":{}}  ",
        b"ENTITY\0\x01",
    ] {
        let mut f = start.to_vec();
        f.resize(f.len().max(40), b' ');
        assert_err!(header_fails(&f), LoomError::BadMagic { .. });
    }
}

#[test]
fn versions_other_than_1_are_refused() {
    for version in [0u16, 2, 3, 0x0100, u16::MAX] {
        let mut f = nested();
        f[8..10].copy_from_slice(&version.to_le_bytes());
        assert_err!(
            must_fail(&f, entity::header_len),
            LoomError::UnsupportedVersion { format: "ENTITY", version: v } if v == u64::from(version)
        );
        assert_err!(header_fails(&f), LoomError::UnsupportedVersion { .. });
    }
    // The flags word is read and ignored (spec §8).
    let mut f = nested();
    f[10..12].copy_from_slice(&0xFFFFu16.to_le_bytes());
    assert_eq!(entity::read(&f).unwrap(), entity::read(&nested()).unwrap());
}

#[test]
fn header_len_beyond_the_file_or_the_limit_is_refused_without_allocating_it() {
    let good = nested();
    let set = |n: u64| {
        let mut f = good.clone();
        f[12..20].copy_from_slice(&n.to_le_bytes());
        f
    };
    // Beyond the file, below the limit: truncated, and nothing of that size is allocated.
    let file_len = good.len() as u64;
    for n in [file_len - 19, file_len, 1 << 20, MAX_HEADER_LEN] {
        let f = set(n);
        assert_eq!(entity::header_len(&f).unwrap(), n);
        assert_err!(
            header_fails(&f),
            LoomError::Truncated { needed, available, .. } if needed == 20 + n && available == file_len
        );
    }
    // Above the limit, up to u64::MAX (where 20 + n would overflow).
    for n in [MAX_HEADER_LEN + 1, 1 << 40, u64::MAX - 19, u64::MAX] {
        let f = set(n);
        assert_err!(
            must_fail(&f, entity::header_len),
            LoomError::TooLarge { len, max: MAX_HEADER_LEN, .. } if len == n
        );
        assert_err!(header_fails(&f), LoomError::TooLarge { .. });
    }
    // Shorter than the real header: the JSON is cut.
    assert_err!(header_fails(&set(100)), LoomError::Json { .. });
    assert_err!(header_fails(&set(0)), LoomError::Json { .. });
}

// ---------------------------------------------------------------------------------------------------------
// Header JSON.

#[test]
fn invalid_utf8_and_invalid_json_in_the_header_are_refused() {
    let (header, payload) = split_entity(&nested());
    let text = serde_json::to_string(&header).unwrap();
    // Invalid UTF-8 inside a string, a lone continuation byte, an overlong encoding, a surrogate.
    for bad in [&b"\xff"[..], b"\x80", b"\xc0\xaf", b"\xed\xa0\x80"] {
        let mut h = text.clone().into_bytes();
        let at = text.find("Parallel").unwrap();
        h.splice(at..at, bad.iter().copied());
        assert_err!(header_fails(&entity_raw(&h, &payload)), LoomError::Json { .. });
    }
    let cases: Vec<Vec<u8>> = vec![
        text.replacen('{', "", 1).into_bytes(),
        text.replacen("}]}", "},]}", 1).into_bytes(),
        format!("{text}x").into_bytes(),
        format!("{text}{text}").into_bytes(),
        text.replacen(":1,", ":01,", 1).into_bytes(),
        text.replacen(":1,", ":NaN,", 1).into_bytes(),
        text.replacen(":1,", ":Infinity,", 1).into_bytes(),
        text.replacen("\"network\"", "'network'", 1).into_bytes(),
        b"".to_vec(),
        b"   ".to_vec(),
        b"\0".to_vec(),
        // Valid JSON that is not an ENTITY header.
        b"null".to_vec(),
        b"[]".to_vec(),
        b"\"network\"".to_vec(),
        b"{}".to_vec(),
        br#"{"network":null}"#.to_vec(),
        br#"{"network":[]}"#.to_vec(),
        br#"{"network":{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":{}}}"#.to_vec(),
        br#"{"network":{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":[7]}}"#.to_vec(),
        br#"{"network":{"depth":1,"rows":1,"cols":1,"layers_per_cell":1},"blobs":{}}"#.to_vec(),
        br#"{"network":{"depth":1,"rows":1,"cols":1,"layers_per_cell":1},"blobs":[7]}"#.to_vec(),
        br#"{"network":{"depth":1,"rows":1,"cols":1,"layers_per_cell":1},"transformer":[]}"#.to_vec(),
    ];
    for h in cases {
        let e = header_fails(&entity_raw(&h, &payload));
        assert_err!(e, LoomError::Json { .. });
    }
}

#[test]
fn deeply_nested_json_is_an_error_not_a_stack_overflow() {
    for depth in [129usize, 10_000, 1_000_000] {
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let h = format!(r#"{{"network":{}1{}}}"#, open.repeat(depth), close.repeat(depth));
            assert_err!(header_fails(&entity_raw(h.as_bytes(), &[])), LoomError::Json { .. });
        }
    }
    // Nested layers: parallel_branches within parallel_branches, past serde_json's recursion limit.
    let nest = |depth: usize| {
        let mut layer = json!({"type": "Dense", "input_height": 1, "output_height": 1});
        for _ in 0..depth {
            layer = json!({"type": "Parallel", "parallel_branches": [layer]});
        }
        entity_from(&one_layer(layer, Value::Null), &[])
    };
    assert_err!(header_fails(&nest(200)), LoomError::Json { .. });
    // Within the limit a deep network is fine, and it writes back.
    let mut net = entity::read(&nest(60)).unwrap();
    let again = entity::write(&mut net).unwrap();
    assert_eq!(entity::read(&again).unwrap(), net);
    // meta_observed_layer chains nest one object per level.
    let mut layer = json!({"type": "Dense"});
    for _ in 0..300 {
        layer = json!({"type": "Metacognition", "meta_observed_layer": layer});
    }
    assert_err!(
        header_fails(&entity_from(&one_layer(layer, Value::Null), &[])),
        LoomError::Json { .. }
    );
}

#[test]
fn wrong_field_types_in_the_header_are_refused() {
    let d = dense();
    let cases: Vec<(&str, Value)> = vec![
        ("/network/depth", json!("1")),
        ("/network/depth", json!(1.5)),
        ("/network/depth", json!(-1)),
        ("/network/depth", raw("1e0")),
        ("/network/rows", json!(true)),
        ("/network/layers", json!({})),
        ("/network/layers/0/input_height", json!("5")),
        ("/network/layers/0/input_height", json!(5.5)),
        ("/network/layers/0/input_height", raw("5.0")),
        ("/network/layers/0/input_height", raw("99999999999999999999")),
        ("/network/layers/0/type", json!(0)),
        ("/network/layers/0/temperature", raw("1e400")),
        ("/network/layers/0/use_tiling", json!(1)),
        ("/network/layers/0/parallel_branches", json!({})),
        ("/network/layers/0/meta_rules", json!({})),
        ("/blobs/0/path", json!(0)),
        ("/blobs/0/offset", json!(-1)),
        ("/blobs/0/offset", json!("0")),
        ("/blobs/0/offset", raw("0.0")),
        ("/blobs/0/offset", raw("18446744073709551616")),
        ("/blobs/0/length", json!(-8)),
        ("/blobs/0/length", json!(8.5)),
        ("/blobs/0/dtype", json!(14)),
        ("/blobs/0/scale", json!("0.5")),
        ("/blobs/0/native", json!("true")),
        ("/blobs/0/native", json!(1)),
    ];
    for (ptr, v) in cases {
        let f = mutate_entity(&d, |h| set_ptr(h, ptr, v.clone()));
        let e = header_fails(&f);
        assert_err!(e, LoomError::Json { .. });
    }
}

#[test]
fn unknown_names_are_refused() {
    let d = dense();
    for (ptr, v) in [
        ("/network/layers/0/type", "Convolution"),
        ("/network/layers/0/type", "Dense "),
        ("/network/layers/0/activation", "swish"),
        ("/network/layers/0/softmax_type", "grid"),
    ] {
        let f = mutate_entity(&d, |h| *h.pointer_mut(ptr).unwrap() = json!(v));
        assert_err!(header_fails(&f), LoomError::UnknownName { name, .. } if name == v);
    }
    // Unknown dtype strings: on the layer, on its blob, and on a side blob.
    for bad in ["int3", "Q4_1", "fp8_e4m3", "", "float32\0", "ｉｎｔ４"] {
        let f = mutate_entity(&d, |h| h["network"]["layers"][0]["dtype"] = json!(bad));
        if bad.is_empty() {
            // An empty layer dtype is Loom's default, float32; the blob's int4 then applies.
            assert_eq!(entity::read(&f).unwrap().layers[0].dtype, DType::Int4);
        } else {
            assert_err!(header_fails(&f), LoomError::UnknownDType(s) if s == bad);
        }
        let f = mutate_entity(&d, |h| h["blobs"][0]["dtype"] = json!(bad));
        assert_err!(read_fails(&f), LoomError::UnknownDType(s) if s == bad);
        let (mut h, mut payload) = split_entity(&d);
        h["network"]["layers"][0]["type"] = json!("SwiGLU");
        h["network"]["layers"][0]["input_height"] = json!(1);
        h["network"]["layers"][0]["output_height"] = json!(1);
        h["blobs"] = json!([blob("layers.0.biases", 0, 12, bad)]);
        payload.resize(12, 0);
        assert_err!(read_fails(&entity_from(&h, &payload)), LoomError::UnknownDType(s) if s == bad);
    }
}

// ---------------------------------------------------------------------------------------------------------
// The blob table.

#[test]
fn blobs_outside_the_payload_are_refused() {
    let n = nested();
    let (_, payload) = split_entity(&n);
    let p = payload.len() as u64;
    for (offset, length) in [
        (p, 1),
        (p - 1, 2),
        (0, p + 1),
        (p + 1, 0),
        (1 << 40, 8),
        (i64::MAX as u64, 1),
        (u64::MAX / 2, u64::MAX / 2),
    ] {
        let f = mutate_entity(&n, |h| h["blobs"] = json!([blob("layers.0", offset, length, "int4")]));
        // The header is fine: only a reader that knows the payload can refuse it.
        assert!(entity::read_header(&f).is_ok());
        assert_err!(
            read_fails(&f),
            LoomError::BlobOutOfRange { offset: o, end, payload, .. } if o == offset && end == offset + length && payload == p
        );
        assert_err!(must_fail(&f, |b| layer_blob(b, 0)), LoomError::BlobOutOfRange { .. });
    }
    // layer_blob bounds-checks the blob it returns.
    let f = mutate_entity(&n, |h| {
        h["blobs"] = json!([blob("layers.1", u64::from(u32::MAX) + 1, 1, "int4")])
    });
    assert_err!(must_fail(&f, |b| layer_blob(b, 1)), LoomError::BlobOutOfRange { .. });
}

#[test]
fn offset_plus_length_overflowing_u64_is_refused() {
    let n = nested();
    for (offset, length) in [
        (u64::MAX, 1),
        (1, u64::MAX),
        (u64::MAX, u64::MAX),
        (1 << 63, 1 << 63),
        (u64::MAX - 7, 9),
    ] {
        let f = mutate_entity(&n, |h| {
            h["blobs"][0] = blob("layers.0.parallel_branches.0", offset, length, "int4")
        });
        assert_err!(
            header_fails(&f),
            LoomError::BlobOutOfRange { offset: o, end: u64::MAX, .. } if o == offset
        );
    }
}

#[test]
fn overlapping_blobs_are_refused() {
    let n = nested();
    // Blob 1 moved into blob 0, onto it, and containing it.
    for (i, offset, length) in [(1usize, 5u64, 18u64), (1, 0, 18), (0, 8, 2), (5, 56, 22)] {
        let f = mutate_entity(&n, |h| {
            h["blobs"][i]["offset"] = json!(offset);
            h["blobs"][i]["length"] = json!(length);
        });
        assert_err!(header_fails(&f), LoomError::BlobOverlap { .. });
    }
    // Two entries for the same bytes.
    let f = mutate_entity(&n, |h| {
        let first = h["blobs"][0].clone();
        h["blobs"].as_array_mut().unwrap().push(first);
    });
    assert_err!(header_fails(&f), LoomError::BlobOverlap { .. });
}

#[test]
fn blob_lengths_must_match_dtype_and_count() {
    // 15 int4 weights take 8 bytes.
    let d = dense();
    let (h, payload) = split_entity(&d);
    assert_eq!(payload.len(), 8);
    let with = |length: u64, dtype: &str, native: bool, payload: &[u8]| {
        let mut h = h.clone();
        h["blobs"][0]["length"] = json!(length);
        h["blobs"][0]["dtype"] = json!(dtype);
        h["blobs"][0]["native"] = json!(native);
        entity_from(&h, payload)
    };
    let long: Vec<u8> = payload.iter().copied().chain([0]).collect();
    for (length, dtype, native, data, expected) in [
        (7, "int4", true, &payload[..], 8),
        (9, "int4", true, &long[..], 8),
        (0, "int4", true, &payload[..], 8),
        (8, "int8", true, &payload[..], 15),
        (8, "binary", true, &payload[..], 2),
        (8, "float64", true, &payload[..], 120),
        // Legacy blobs are float32 whatever the layer dtype.
        (8, "int4", false, &payload[..], 60),
    ] {
        let f = with(length, dtype, native, data);
        let dt = if native { dtype } else { "float32" };
        assert_err!(
            read_fails(&f),
            LoomError::BlobLength { path, dtype: d, count: 15, expected: e, actual, .. }
                if path == "layers.0" && d == dt && e == expected && actual == length
        );
    }
    // The dtype × count law holds for every dtype: one byte short or long is refused, exact is accepted.
    for dt in DType::ALL {
        let exact = dt.packed_len(15).unwrap() as u64;
        for length in [exact - 1, exact, exact + 1] {
            let f = with(length, dt.name(), true, &vec![0u8; length as usize]);
            if length == exact {
                let net = entity::read(&f).unwrap();
                assert_eq!(net.layers[0].dtype, dt);
            } else {
                assert_err!(read_fails(&f), LoomError::BlobLength { .. });
            }
        }
    }
    // Side blobs: float32 bytes and Q4_0 payloads are checked too.
    let mut h = h.clone();
    h["network"]["layers"][0]["type"] = json!("SwiGLU");
    for (path, dtype, len) in [
        ("layers.0.biases", "float32", 13u64),
        ("layers.0.q_norm", "float32", 2),
        ("transformer.embeddings", "float32", 7),
    ] {
        let mut h = h.clone();
        h["blobs"] = json!([blob(path, 0, len, dtype)]);
        let f = entity_from(&h, &vec![0; len as usize]);
        assert_err!(read_fails(&f), LoomError::BlobLength { .. });
    }
    let q4 = loom_wasm::dtype::q4_0::pack(&[1.0; 40]);
    for (bytes, truncated) in [(&q4[..q4.len() - 4], false), (&q4[..6], true), (&q4[..0], true)] {
        let mut h = h.clone();
        h["blobs"] = json!([blob("layers.0.q4_0.100", 0, bytes.len() as u64, "Q4_0")]);
        let e = read_fails(&entity_from(&h, bytes));
        if truncated {
            assert_err!(e, LoomError::Truncated { .. });
        } else {
            assert_err!(e, LoomError::InvalidNetwork(_));
        }
    }
}

#[test]
fn blobs_for_weightless_layers_are_refused() {
    for t in ["Softmax", "Parallel", "Sequential", "Residual", "Metacognition"] {
        let h = one_layer(json!({"type": t}), json!([blob("layers.0", 0, 4, "float32")]));
        assert_err!(read_fails(&entity_from(&h, &[0; 4])), LoomError::InvalidNetwork(_));
    }
    // The corpus Softmax file with a blob added.
    let f = mutate_entity(&corpus_file("softmax_Standard", "loom.entity"), |h| {
        h["blobs"] = json!([blob("layers.0", 0, 0, "float32")]);
    });
    assert_err!(read_fails(&f), LoomError::InvalidNetwork(_));
    // A nested weightless layer (the Residual inside nested_int4's Sequential).
    let f = mutate_entity(&nested(), |h| {
        h["blobs"][2]["path"] = json!("layers.0.parallel_branches.1.sequential_layers.1")
    });
    assert_err!(read_fails(&f), LoomError::InvalidNetwork(_));
}

#[test]
fn bad_blob_paths_are_refused() {
    let n = nested();
    for path in [
        "layers.99",
        "layers.2",
        "layers.0.parallel_branches.7",
        "layers.0.parallel_branches.1.sequential_layers.3",
        "layers.1.parallel_branches.0",
        "layers.0.meta_observed_layer",
        "layers.x",
        "layers.-1",
        "layers.+1",
        "layers.0x1",
        "layers. 0",
        "layers.",
        "layers",
        "layers.99999999999999999999999",
        "foo.0",
        "Layers.0",
        "",
        ".layers.0",
        "layers.0.",
        "layers.0.parallel_branches",
        "layers.0.parallel_branches.",
        "layers.0.parallel_branches.x",
        "layers.0.parallel_branches.0.",
        "layers.0.parallel_branches.0.foo",
        "layers.0.parallel_branches.0 ",
        "layers.0.parallel_branches.0\0",
        "layers.0.biases.0",
        "layers.0.q4_0",
        "layers.0.q4_0.",
        "layers.0.q4_0.x",
        "layers.0.q4_0.200.201",
        "layers.0.q4_0.2.😀😀",
        "layers.0.q4_0.2.é",
        "layers.0.biases.😀",
        "layers.😀",
        "transformer.foo",
        "transformer.embeddings.0",
        "transformer",
    ] {
        let f = mutate_entity(&n, |h| h["blobs"][0]["path"] = json!(path));
        assert_err!(read_fails(&f), LoomError::BadBlobPath(p) if p == path);
    }
    // A missing path is the empty path.
    let f = mutate_entity(&n, |h| {
        h["blobs"][0].as_object_mut().unwrap().remove("path");
    });
    assert_err!(read_fails(&f), LoomError::BadBlobPath(p) if p.is_empty());
}

// ---------------------------------------------------------------------------------------------------------
// Shapes, grids, scales.

#[test]
fn shape_products_that_overflow_are_refused() {
    let t = 1u64 << 40;
    for (layer, what) in [
        (json!({"type": "Dense", "input_height": t, "output_height": t}), "Dense"),
        (
            json!({"type": "SwiGLU", "input_height": t, "output_height": t}),
            "SwiGLU",
        ),
        (
            json!({"type": "LSTM", "input_height": 1u64 << 31, "output_height": 1u64 << 31}),
            "LSTM",
        ),
        (json!({"type": "RNN", "input_height": t, "output_height": t}), "RNN"),
        (
            json!({"type": "CNN3", "filters": 1 << 20, "input_channels": 1 << 20, "kernel_size": 1 << 10}),
            "CNN3",
        ),
        (
            json!({"type": "Embedding", "vocab_size": t, "embedding_dim": t}),
            "Embedding",
        ),
        (
            json!({"type": "KMeans", "num_clusters": t, "input_height": t}),
            "KMeans",
        ),
        (
            json!({"type": "MultiHeadAttention", "d_model": 1u64 << 33, "num_heads": 1, "head_dim": 1u64 << 31}),
            "MultiHeadAttention",
        ),
        // num_kv_heads × head_dim = 2^63 fits in a usize but not in the i64 the next product takes.
        (
            json!({"type": "MultiHeadAttention", "d_model": 1, "num_heads": 1, "num_kv_heads": 1u64 << 32, "head_dim": 1u64 << 31}),
            "MultiHeadAttention",
        ),
    ] {
        let h = one_layer(layer, json!([blob("layers.0", 0, 8, "int4")]));
        let e = read_fails(&entity_from(&h, &[0; 8]));
        assert_err!(e, LoomError::ShapeOverflow { what: w, .. } if w == what);
    }
    // Large but representable: the 8-byte blob is refused by length, and nothing of the claimed size is allocated.
    for (dtype, expected) in [("int4", 1u64 << 61), ("binary", 1 << 59), ("float32", u64::MAX)] {
        let layer = json!({"type": "Dense", "input_height": 1u64 << 31, "output_height": 1u64 << 31});
        let h = one_layer(layer, json!([blob("layers.0", 0, 8, dtype)]));
        assert_err!(
            read_fails(&entity_from(&h, &[0; 8])),
            LoomError::BlobLength { expected: e, actual: 8, .. } if e == expected
        );
    }
    // Without a blob the huge shape is only a description: read, written back, read again.
    let layer = json!({"type": "Dense", "input_height": t, "output_height": t});
    let mut net = entity::read(&entity_from(&one_layer(layer, Value::Null), &[])).unwrap();
    assert!(net.layers[0].weights.is_none());
    let again = entity::write(&mut net).unwrap();
    assert_eq!(entity::read(&again).unwrap(), net);
}

#[test]
fn negative_dimensions_are_refused_when_they_size_weights() {
    for layer in [
        json!({"type": "Dense", "input_height": -5, "output_height": 3}),
        json!({"type": "Dense", "input_height": -5, "output_height": -3}),
        json!({"type": "CNN1", "filters": 2, "input_channels": 2, "kernel_size": -1}),
        json!({"type": "MultiHeadAttention", "d_model": 4, "num_heads": 2, "head_dim": -2}),
        json!({"type": "Embedding", "vocab_size": i64::MIN, "embedding_dim": -1}),
    ] {
        let h = one_layer(layer, json!([blob("layers.0", 0, 8, "int4")]));
        assert_err!(read_fails(&entity_from(&h, &[0; 8])), LoomError::InvalidNetwork(_));
    }
}

#[test]
fn absurd_grids_are_refused_without_allocating_them() {
    let big = 1u64 << 20;
    for (d, r, c, l) in [
        (big, big, big, 1),
        (big, big, 1, 1),
        (1 << 62, 4, 1, 1),
        (u32::MAX as u64, u32::MAX as u64, 2, 1),
        (1024, 1024, 1, 1),
        (64, 64, 64, 1),
    ] {
        let f = mutate_entity(&nested(), |h| {
            h["network"]["depth"] = json!(d);
            h["network"]["rows"] = json!(r);
            h["network"]["cols"] = json!(c);
            h["network"]["layers_per_cell"] = json!(l);
        });
        assert_err!(header_fails(&f), LoomError::InvalidNetwork(_));
    }
    // An empty grid holds no layers.
    let f = mutate_entity(&nested(), |h| h["network"]["depth"] = json!(0));
    assert_err!(header_fails(&f), LoomError::InvalidNetwork(_));
}

#[test]
fn coordinates_outside_the_grid_are_refused() {
    for (k, v) in [
        ("z", json!(1)),
        ("y", json!(1)),
        ("x", json!(1)),
        ("l", json!(2)),
        ("l", json!(-1)),
        ("z", json!(i64::MAX)),
        ("x", json!(i64::MIN)),
    ] {
        let f = mutate_entity(&nested(), |h| h["network"]["layers"][1][k] = v.clone());
        assert_err!(header_fails(&f), LoomError::InvalidNetwork(_));
    }
}

#[test]
fn scales_json_cannot_hold_in_float32_are_refused() {
    let d = dense();
    for scale in ["1e39", "-1e39", "3.5e38", "1e400", "-1e99999"] {
        let f = mutate_entity(&d, |h| h["blobs"][0]["scale"] = raw(scale));
        assert_err!(header_fails(&f), LoomError::InvalidScale { path, scale: s } if path == "layers.0" && s.is_infinite());
    }
    // The largest float32 is a scale like any other.
    let f = mutate_entity(&d, |h| h["blobs"][0]["scale"] = raw("3.4028235e38"));
    assert_eq!(entity::read_header(&f).unwrap().blobs[0].scale, f32::MAX);
    // A legacy float32 blob holding Inf makes the auto-scale infinite.
    for (bad, dtype) in [
        (f32::INFINITY, "int8"),
        (f32::NEG_INFINITY, "int4"),
        (f32::MAX, "binary"),
    ] {
        let mut w = [0.5f32; 15];
        w[3] = bad;
        w[4] = bad;
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let h = one_layer(
            json!({"type": "Dense", "input_height": 5, "output_height": 3, "dtype": dtype}),
            json!([{"path": "layers.0", "offset": 0, "length": 60, "dtype": dtype, "scale": 1, "native": false}]),
        );
        assert_err!(
            read_fails(&entity_from(&h, &bytes)),
            LoomError::InvalidScale { path, scale } if path == "layers.0" && !scale.is_finite()
        );
    }
}

#[test]
fn trailing_bytes_after_the_payload_are_ignored_like_loom() {
    let mut f = nested();
    let net = entity::read(&f).unwrap();
    f.extend_from_slice(b"garbage");
    assert_eq!(entity::read(&f).unwrap(), net);
}

// ---------------------------------------------------------------------------------------------------------
// Saving never loses what the user had.

/// The values each weighted layer (nested included) forward would use, by blob path.
fn weights_of(net: &loom_wasm::network::Network) -> Vec<(String, Vec<u32>)> {
    fn walk(l: &loom_wasm::network::Layer, path: String, out: &mut Vec<(String, Vec<u32>)>) {
        if let Some(ws) = &l.weights {
            out.push((path.clone(), ws.master_values().iter().map(|x| x.to_bits()).collect()));
            out.push((
                format!("{path}@{}", l.dtype),
                ws.active(l.dtype).iter().map(|x| x.to_bits()).collect(),
            ));
        }
        for (seg, c) in l.children() {
            walk(c, format!("{path}.{seg}"), out);
        }
    }
    let mut out = Vec::new();
    for (i, l) in net.layers.iter().enumerate() {
        walk(l, format!("layers.{i}"), &mut out);
    }
    out
}

#[test]
fn writing_a_read_network_leaves_it_intact_and_rereads_equal() {
    let files = corpus_files("loom.entity");
    assert!(files.len() > 300);
    for (case, bytes) in files {
        let Ok(read) = entity::read(&bytes) else {
            panic!("{case}: corpus file refused");
        };
        let mut net = read.clone();
        let written = entity::write(&mut net).unwrap();
        // The network the user holds is unchanged by saving it.
        assert_eq!(net, read, "{case}");
        // Likewise when its weights are slices of the file buffer (zero-copy read).
        let mut shared = entity::read_bytes(bytes::Bytes::from(bytes.clone())).unwrap();
        assert_eq!(shared, read, "{case}");
        assert_eq!(entity::write(&mut shared).unwrap(), written, "{case}");
        assert_eq!(shared, read, "{case}");
        let again = entity::read(&written).unwrap();
        // RMSNorm comes back float32 from its master (spec §8); every other layer keeps dtype and values.
        let has_quantized_rmsnorm = read.layers.iter().any(|l| {
            fn any(l: &loom_wasm::network::Layer) -> bool {
                (l.layer_type == LayerType::RMSNorm && l.dtype != DType::Float32)
                    || l.children().iter().any(|(_, c)| any(c))
            }
            any(l)
        });
        if has_quantized_rmsnorm {
            let masters = |n: &loom_wasm::network::Network| {
                weights_of(n)
                    .into_iter()
                    .filter(|(p, _)| !p.contains('@'))
                    .collect::<Vec<_>>()
            };
            assert_eq!(masters(&again), masters(&read), "{case}");
        } else {
            assert_eq!(weights_of(&again), weights_of(&read), "{case}");
            assert_eq!(again, read, "{case}");
        }
        assert_eq!(again.transformer, read.transformer, "{case}");
    }
}

#[test]
fn writing_after_the_user_changes_a_dtype_does_not_panic_or_lose_weights() {
    for (case, to) in [
        ("layer_Dense_int8", DType::Float32),
        ("layer_Dense_int4", DType::Float32),
        ("layer_Dense_float32", DType::Int8),
        ("layer_Dense_fp4", DType::Float16),
        ("grid_2x1x2x2", DType::Float32),
    ] {
        let read = entity::read(&corpus_file(case, "loom.entity")).unwrap();
        let mut net = read.clone();
        for l in &mut net.layers {
            l.dtype = to;
        }
        let written = entity::write(&mut net).unwrap();
        let again = entity::read(&written).unwrap();
        for (a, b) in again.layers.iter().zip(&read.layers) {
            let (Some(wa), Some(wb)) = (&a.weights, &b.weights) else {
                assert_eq!(a.weights.is_some(), b.weights.is_some());
                continue;
            };
            if to == DType::Float32 {
                // Converting up to float32 keeps every value the layer had.
                assert_eq!(wa.master_values(), wb.master_values(), "{case}");
            }
            assert_eq!(wa.len(), wb.len());
        }
    }
}

#[test]
fn random_mutations_of_corpus_files_never_panic() {
    // A cheap deterministic mutator; the fuzz targets do this at scale.
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for base in [
        nested(),
        dense(),
        corpus_file("q4_0_transformer_entity", "emulated_q4.entity"),
    ] {
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
            let (r, peak) = peak_alloc(|| entity::read(&f));
            assert!(peak <= alloc_bound(f.len()));
            if let Ok(mut net) = r {
                let w = entity::write(&mut net).unwrap();
                entity::read(&w).unwrap();
            }
        }
    }
}
