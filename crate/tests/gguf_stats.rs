//! GGUF headers, prefix inspection, tensor statistics/previews and model diffs, against outside truth:
//! `testdata/gguf/expected.json`, written by llama.cpp's gguf-py and numpy (`testdata/gguf/gen.py`), and Loom's
//! conformance corpus.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use loom_wasm::formats::gguf::{self, GgufValue};
use loom_wasm::formats::source::PrefixSource;
use loom_wasm::inspect::{self, Inspection};
use loom_wasm::model::LoadedModel;
use loom_wasm::LoomError;
use serde_json::Value;

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata").join(rel)
}

fn read(rel: &str) -> Vec<u8> {
    let p = testdata(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn expected() -> Value {
    serde_json::from_slice(&read("gguf/expected.json")).unwrap()
}

const GGUF_FILES: [&str; 5] = [
    "model.f32.gguf",
    "model.f16.gguf",
    "model.q8_0.gguf",
    "model.q4_0.gguf",
    "model.q4_1.gguf",
];

/// A metadata value as gguf-py reports it (`{"type", "value"}` or an array summary).
fn check_value(key: &str, ours: &GgufValue, theirs: &Value) {
    let ty = theirs["type"].as_str().unwrap();
    match (ours, ty) {
        (GgufValue::String(s), "string") => assert_eq!(s, theirs["value"].as_str().unwrap(), "{key}"),
        (GgufValue::U32(v), "uint32") => assert_eq!(u64::from(*v), theirs["value"].as_u64().unwrap(), "{key}"),
        (GgufValue::F32(v), "float32") => assert_eq!(f64::from(*v), theirs["value"].as_f64().unwrap(), "{key}"),
        (GgufValue::Bool(v), "bool") => assert_eq!(*v, theirs["value"].as_bool().unwrap(), "{key}"),
        (GgufValue::Array(_, items), "array") => {
            assert_eq!(items.len() as u64, theirs["len"].as_u64().unwrap(), "{key}");
            for (i, head) in theirs["head"].as_array().unwrap().iter().enumerate() {
                match &items[i] {
                    GgufValue::String(s) => assert_eq!(s, head.as_str().unwrap(), "{key}[{i}]"),
                    GgufValue::I32(v) => assert_eq!(i64::from(*v), head.as_i64().unwrap(), "{key}[{i}]"),
                    other => panic!("{key}[{i}]: unexpected {other:?}"),
                }
            }
        }
        _ => panic!("{key}: ours {ours:?}, gguf-py {theirs}"),
    }
}

#[test]
fn gguf_headers_match_gguf_py() {
    let exp = expected();
    for name in GGUF_FILES {
        let bytes = read(&format!("gguf/{name}"));
        let theirs = &exp["gguf_files"][name];
        let h = gguf::read_header_bytes(&bytes).unwrap();
        assert_eq!(u64::from(h.version), theirs["version"].as_u64().unwrap(), "{name}");
        assert_eq!(h.alignment, theirs["alignment"].as_u64().unwrap(), "{name}");
        assert_eq!(h.data_start, theirs["data_offset"].as_u64().unwrap(), "{name}");
        let meta = theirs["metadata"].as_object().unwrap();
        assert_eq!(h.metadata.len(), meta.len(), "{name}");
        for (key, value) in &h.metadata {
            check_value(key, value, &meta[key]);
        }
        let tensors = theirs["tensors"].as_array().unwrap();
        assert_eq!(h.tensors.len(), tensors.len(), "{name}");
        for (t, e) in h.tensors.iter().zip(tensors) {
            assert_eq!(t.name, e["name"].as_str().unwrap());
            let ne: Vec<u64> = e["ne"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(t.dims, ne, "{name} {}", t.name);
            assert_eq!(t.ggml_type.name(), e["type"].as_str().unwrap(), "{name} {}", t.name);
            assert_eq!(
                h.data_start + t.offset,
                e["offset"].as_u64().unwrap(),
                "{name} {}",
                t.name
            );
            assert_eq!(t.bytes, e["bytes"].as_u64().unwrap(), "{name} {}", t.name);
            assert_eq!(t.elements, e["elements"].as_u64().unwrap(), "{name} {}", t.name);
        }
        // The inspection shows the same tensors (row-major shapes, absolute offsets) and reads only the header.
        let ins = inspect::inspect_bytes(&bytes).unwrap();
        assert_eq!(ins.format, "gguf");
        assert_eq!(ins.header_bytes, h.data_start);
        assert_eq!(ins.metadata["general.architecture"], "llama");
        assert_eq!(ins.metadata["tokenizer.ggml.tokens"], "[string × 256]");
        assert_eq!(ins.metadata["gguf.version"], "3");
        for (row, e) in ins.tensors.iter().zip(tensors) {
            let mut ne: Vec<u64> = e["ne"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            ne.reverse();
            assert_eq!((row.offset, &row.shape), (e["offset"].as_u64().unwrap(), &ne));
        }
        let by_dtype: u64 = ins.bytes_by_dtype.values().sum();
        assert_eq!(by_dtype, ins.weight_bytes);
        assert_eq!(
            ins.weight_bytes,
            tensors.iter().map(|t| t["bytes"].as_u64().unwrap()).sum::<u64>()
        );
    }
}

/// Inspects `bytes` the way the browser does over HTTP Range: a 1 KiB prefix first, then as many bytes as each
/// `need_more` asks for. Returns the inspection and the final prefix length.
fn inspect_by_prefixes(bytes: &[u8]) -> (Inspection, u64) {
    let mut have = 1024.min(bytes.len());
    for _ in 0..64 {
        let mut src = PrefixSource::new(&bytes[..have], bytes.len() as u64).unwrap();
        match inspect::inspect(&mut src) {
            Ok(ins) => return (ins, have as u64),
            Err(LoomError::NeedMore { needed, available }) => {
                assert_eq!(available, have as u64);
                assert!(
                    needed as usize > have && needed as usize <= bytes.len(),
                    "{needed} after {have}"
                );
                have = needed as usize;
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("no result after 64 rounds");
}

fn without_bytes_read(mut ins: Inspection) -> Inspection {
    ins.bytes_read = 0;
    ins
}

#[test]
fn growing_prefixes_give_the_full_file_inspection() {
    let mut files: Vec<(String, Vec<u8>)> = GGUF_FILES
        .iter()
        .map(|n| (n.to_string(), read(&format!("gguf/{n}"))))
        .collect();
    files.push(("model.f16.safetensors".into(), read("gguf/model.f16.safetensors")));
    let manifest: Value = serde_json::from_slice(&read("conformance/manifest.json")).unwrap();
    for case in manifest["cases"].as_array().unwrap() {
        for f in ["loom.entity", "loom.json"] {
            if let Some(rel) = case["files"][f].as_str() {
                files.push((rel.to_string(), read(&format!("conformance/{rel}"))));
            }
        }
    }
    assert!(files.len() > 700);
    for (name, bytes) in &files {
        let full = inspect::inspect_bytes(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (ins, used) = inspect_by_prefixes(bytes);
        assert_eq!(without_bytes_read(ins), without_bytes_read(full.clone()), "{name}");
        // Headers only: the tiny-llama files' headers fit in the first 64 KiB step, well below their size.
        if name.starts_with("model.f32") || name.ends_with(".safetensors") {
            assert!(
                used <= 64 << 10 && used * 2 < bytes.len() as u64,
                "{name}: {used} of {}",
                bytes.len()
            );
        }
    }
}

#[test]
fn prefix_source_limits() {
    let bytes = read("gguf/model.q4_0.gguf");
    assert!(matches!(PrefixSource::new(&bytes, 10), Err(LoomError::InvalidInput(_))));
    // A prefix that claims a total beyond the real end: the tensor ranges are checked against the claimed length,
    // so the header still parses; an empty prefix asks for the first bytes.
    let mut src = PrefixSource::new(&bytes[..0], bytes.len() as u64).unwrap();
    let needed = bytes.len() as u64; // below the 64 KiB step
    assert!(matches!(inspect::inspect(&mut src), Err(LoomError::NeedMore { needed: n, .. }) if n == needed));
}

fn assert_close(ours: f64, theirs: f64, what: &str) {
    assert!(
        (ours - theirs).abs() <= 1e-12 + 1e-9 * theirs.abs(),
        "{what}: ours {ours}, numpy {theirs}"
    );
}

fn check_stats(model: &LoadedModel, name: &str, theirs: &Value, bins: usize) {
    let what = format!("{} {name}", model.name);
    let s = model.tensor_stats(name, bins).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(s.count, theirs["count"].as_u64().unwrap(), "{what}");
    assert_eq!(s.non_finite, theirs["non_finite"].as_u64().unwrap(), "{what}");
    assert_eq!(s.min, theirs["min"].as_f64().unwrap(), "{what}");
    assert_eq!(s.max, theirs["max"].as_f64().unwrap(), "{what}");
    assert_eq!(s.sparsity, theirs["sparsity"].as_f64().unwrap(), "{what}");
    assert_close(s.mean, theirs["mean"].as_f64().unwrap(), &format!("{what} mean"));
    assert_close(s.std, theirs["std"].as_f64().unwrap(), &format!("{what} std"));
    let h = &theirs["histogram"];
    assert_eq!(s.histogram.min, h["min"].as_f64().unwrap(), "{what}");
    assert_eq!(s.histogram.max, h["max"].as_f64().unwrap(), "{what}");
    let counts: Vec<u64> = h["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(s.histogram.counts, counts, "{what}");

    let p = model.tensor_preview(name, 8).unwrap();
    let hex: String = p
        .values
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hex, theirs["first_f32_hex"].as_str().unwrap(), "{what}");
    let codes: Option<Vec<i32>> = theirs["first_codes"]
        .as_array()
        .map(|a| a.iter().map(|c| c.as_i64().unwrap() as i32).collect());
    assert_eq!(p.codes, codes, "{what}");
}

fn load(rel: &str) -> LoadedModel {
    LoadedModel::from_bytes(Bytes::from(read(rel)), rel).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn stats_and_previews_match_numpy() {
    let exp = expected();
    let bins = exp["bins"].as_u64().unwrap() as usize;
    let mut checked = 0;
    for (file, tensors) in exp["stats"].as_object().unwrap() {
        let rel = if file.ends_with("loom.entity") {
            format!("conformance/cases/{file}")
        } else {
            format!("gguf/{file}")
        };
        let model = load(&rel);
        for (name, theirs) in tensors.as_object().unwrap() {
            check_stats(&model, name, theirs, bins);
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
}

fn f32_hex(v: f32) -> String {
    v.to_le_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// blocks.gguf (a tensor per block type): the preview's stored codes and the block / sub-block scales and mins
/// next to them are those gguf-py's layout gives, and they turn the codes into the values gguf-py dequantizes.
#[test]
fn block_codes_scales_and_mins_match_gguf_py() {
    let exp = expected();
    let model = load("gguf/blocks.gguf");
    let all = exp["codes"]["blocks.gguf"].as_object().unwrap();
    assert_eq!(all.len(), 8); // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K
    for (name, theirs) in all {
        let n = theirs["codes"].as_array().unwrap().len();
        let p = model.tensor_preview(name, n).unwrap();
        assert_eq!(p.dtype, theirs["type"].as_str().unwrap());
        let codes: Vec<i32> = theirs["codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_i64().unwrap() as i32)
            .collect();
        assert_eq!(p.codes.as_ref(), Some(&codes), "{name}");
        let groups = p.groups.as_ref().unwrap();
        let scales: Vec<String> = groups.iter().map(|g| f32_hex(g.scale)).collect();
        let mins: Vec<String> = groups.iter().map(|g| f32_hex(g.min)).collect();
        let want = |k: &str| -> Vec<String> {
            theirs[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(scales, want("scale_f32_hex"), "{name}");
        assert_eq!(mins, want("min_f32_hex"), "{name}");
        for g in groups {
            assert_eq!(g.len as u64, theirs["group"].as_u64().unwrap(), "{name}");
            assert_eq!(i64::from(g.zero), theirs["zero"].as_i64().unwrap(), "{name}");
        }
        let values: String = p.values.iter().map(|&v| f32_hex(v)).collect();
        assert_eq!(values, theirs["values_f32_hex"].as_str().unwrap(), "{name}");
    }
    // Plain floats have no groups; F16/BF16 show their bits as codes.
    let p = model.tensor_preview("bf16.weight", 4).unwrap();
    assert!(p.groups.is_none() && p.codes.is_some());
    assert!(model.tensor_preview("f32.weight", 4).unwrap().codes.is_none());
}

#[test]
fn stats_refuse_unknown_names_and_bad_bins() {
    let model = load("gguf/model.q4_0.gguf");
    assert!(matches!(
        model.tensor_stats("nope", 8),
        Err(LoomError::UnknownName { .. })
    ));
    assert!(matches!(
        model.tensor_stats("token_embd.weight", 0),
        Err(LoomError::InvalidInput(_))
    ));
    let dense = load("conformance/cases/layer_Dense_int4/loom.entity");
    assert!(matches!(
        dense.tensor_stats("layers.1", 8),
        Err(LoomError::UnknownName { .. })
    ));
}

#[test]
fn diffs_match_numpy() {
    let exp = expected();
    let check = |before: &LoadedModel, after: &LoadedModel, theirs: &Value| {
        let d = loom_wasm::stats::diff(before, after).unwrap();
        let theirs = theirs.as_object().unwrap();
        assert_eq!(d.entries.len(), theirs.len());
        for e in &d.entries {
            let t = &theirs[&e.name];
            assert_close(e.max_abs.unwrap(), t["max_abs"].as_f64().unwrap(), &e.name);
            assert_close(e.mean_abs.unwrap(), t["mean_abs"].as_f64().unwrap(), &e.name);
            let same_dtype = e.dtype_before == e.dtype_after;
            let expected_status = if same_dtype && t["max_abs"].as_f64().unwrap() == 0.0 {
                "same"
            } else {
                "changed"
            };
            assert_eq!(e.status, expected_status, "{}", e.name);
        }
        d
    };
    let f32 = load("gguf/model.f32.gguf");
    let q8 = load("gguf/model.q8_0.gguf");
    let d = check(&f32, &q8, &exp["diff"]["model.f32.gguf -> model.q8_0.gguf"]);
    let q = d.entries.iter().find(|e| e.name == "blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (q.dtype_before.as_deref(), q.dtype_after.as_deref()),
        (Some("F32"), Some("Q8_0"))
    );
    assert!(d.entries.iter().any(|e| e.status == "same"));

    let int8 = load("conformance/cases/layer_Dense_int8/loom.entity");
    let int4 = load("conformance/cases/layer_Dense_int4/loom.entity");
    let d = check(&int8, &int4, &exp["diff"]["layer_Dense_int8 -> layer_Dense_int4"]);
    assert_eq!(d.entries[0].dtype_after.as_deref(), Some("int4"));

    // Different models: tensors only one side has are added or removed.
    let d = loom_wasm::stats::diff(&int8, &f32).unwrap();
    assert_eq!(d.entries.iter().filter(|e| e.status == "removed").count(), 1);
    assert_eq!(
        d.entries.iter().filter(|e| e.status == "added").count(),
        f32.weight_tensors().unwrap().len()
    );
}

/// A GGUF file assembled from parts, for hostile-input tests.
struct Gguf(Vec<u8>);

impl Gguf {
    fn new(version: u32, tensors: u64, kvs: u64) -> Gguf {
        let mut b = b"GGUF".to_vec();
        b.extend(version.to_le_bytes());
        b.extend(tensors.to_le_bytes());
        b.extend(kvs.to_le_bytes());
        Gguf(b)
    }
    fn string(mut self, s: &str) -> Gguf {
        self.0.extend((s.len() as u64).to_le_bytes());
        self.0.extend(s.as_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Gguf {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Gguf {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn byte(mut self, b: u8) -> Gguf {
        self.0.push(b);
        self
    }
    fn pad(mut self, n: usize) -> Gguf {
        self.0.extend(vec![0; n]);
        self
    }
}

fn header_err(b: &Gguf) -> LoomError {
    gguf::read_header_bytes(&b.0).unwrap_err()
}

#[test]
fn hostile_gguf_headers_are_typed_errors() {
    // One F32 tensor [32] at offset 0: valid.
    let tensor = |g: Gguf, dims: &[u64], ty: u32, offset: u64| {
        let g = g.string("t").u32(dims.len() as u32);
        dims.iter().fold(g, |g, d| g.u64(*d)).u32(ty).u64(offset)
    };
    let ok = tensor(Gguf::new(3, 1, 0), &[32], 0, 0);
    let data_start = ok.0.len().next_multiple_of(32);
    let padding = data_start - ok.0.len() + 128;
    let ok = ok.pad(padding);
    let h = gguf::read_header_bytes(&ok.0).unwrap();
    assert_eq!((h.data_start, h.tensors[0].bytes), (data_start as u64, 128));

    // Every truncation of a real header is an error, never a panic.
    let real = read("gguf/model.q4_1.gguf");
    let end = gguf::read_header_bytes(&real).unwrap().data_start as usize;
    for cut in (0..end).step_by(7) {
        assert!(gguf::read_header_bytes(&real[..cut]).is_err(), "cut at {cut}");
    }

    assert!(matches!(
        header_err(&Gguf(b"GGUX\x03\0\0\0".to_vec())),
        LoomError::BadMagic { .. }
    ));
    assert!(matches!(
        header_err(&Gguf::new(1, 0, 0)),
        LoomError::UnsupportedVersion { version: 1, .. }
    ));
    // Big-endian version 3.
    assert!(matches!(
        header_err(&Gguf::new(3u32.swap_bytes(), 0, 0)),
        LoomError::UnsupportedVersion { .. }
    ));
    // Counts that cannot fit in the file.
    assert!(matches!(header_err(&Gguf::new(3, u64::MAX, 0)), LoomError::Gguf(_)));
    assert!(matches!(header_err(&Gguf::new(3, 0, 1 << 40)), LoomError::Gguf(_)));
    // A key whose length runs past the end.
    let g = Gguf::new(3, 0, 1).u64(u64::MAX).pad(16);
    assert!(matches!(header_err(&g), LoomError::Gguf(_)));
    // An array that claims more items than the file has bytes.
    let g = Gguf::new(3, 0, 1).string("k").u32(9).u32(4).u64(1 << 60).pad(16);
    assert!(matches!(header_err(&g), LoomError::Gguf(_)));
    // Arrays nested too deep.
    let mut g = Gguf::new(3, 0, 1).string("k");
    for _ in 0..8 {
        g = g.u32(9).u32(9).u64(1);
    }
    assert!(matches!(header_err(&g.pad(64)), LoomError::Gguf(_)));
    // Unknown value type, bad bool.
    assert!(matches!(
        header_err(&Gguf::new(3, 0, 1).string("k").u32(13).pad(8)),
        LoomError::Gguf(_)
    ));
    assert!(matches!(
        header_err(&Gguf::new(3, 0, 1).string("k").u32(7).byte(2).pad(8)),
        LoomError::Gguf(_)
    ));
    // Duplicate key.
    let g = Gguf::new(3, 0, 2).string("k").u32(4).u32(1).string("k").u32(4).u32(1);
    assert!(matches!(header_err(&g), LoomError::Gguf(_)));
    // Alignment that is not a u32 power of two.
    let g = Gguf::new(3, 0, 1).string("general.alignment").u32(4).u32(24);
    assert!(matches!(header_err(&g), LoomError::Gguf(_)));
    // Tensor infos: too many dimensions, unknown type, rows not whole blocks, misaligned or out-of-range offsets,
    // an element count that overflows.
    let bad_tensors = [
        tensor(Gguf::new(3, 1, 0), &[32, 1, 1, 1, 1], 0, 0),
        tensor(Gguf::new(3, 1, 0), &[32], 99, 0),
        tensor(Gguf::new(3, 1, 0), &[33], 2, 0),
        tensor(Gguf::new(3, 1, 0), &[32], 0, 8),
        tensor(Gguf::new(3, 1, 0), &[32], 0, 1 << 20),
        tensor(Gguf::new(3, 1, 0), &[1 << 40, 1 << 40], 0, 0),
    ];
    for (i, g) in bad_tensors.into_iter().enumerate() {
        let g = g.pad(256);
        let e = header_err(&g);
        assert!(
            matches!(
                e,
                LoomError::Gguf(_)
                    | LoomError::UnsupportedDType(_)
                    | LoomError::BlobOutOfRange { .. }
                    | LoomError::ShapeOverflow { .. }
            ),
            "case {i}: {e}"
        );
    }
    // Two tensors over the same bytes.
    let g = tensor(tensor(Gguf::new(3, 2, 0), &[32], 0, 0), &[32], 0, 0);
    let mut g2 = Gguf(g.0.clone());
    // The second tensor is also called "t": rename it so that the overlap, not the name, is refused.
    let at = g2.0.len() - (8 + 1 + 4 + 8 + 4 + 8);
    g2.0[at + 8] = b'u';
    assert!(matches!(header_err(&g2.pad(256)), LoomError::BlobOverlap { .. }));
    assert!(matches!(header_err(&g.pad(256)), LoomError::Gguf(_)));
}

/// The same model as a GGUF and as HF safetensors (the tiny-llama goldens, written from one set of weights) diffs
/// as equal in either order: tensors matched by HF name, the GGUF's permuted q/k rows put back in HF's order.
#[test]
fn a_gguf_and_its_hf_safetensors_diff_as_equal() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/golden/tiny-llama");
    let open =
        |name: &str| LoadedModel::from_bytes(Bytes::from(std::fs::read(golden.join(name)).unwrap()), name).unwrap();
    for (gguf, st) in [
        ("model.f32.gguf", "model.f32.safetensors"),
        ("model.f16.gguf", "model.f16.safetensors"),
    ] {
        let (g, s) = (open(gguf), open(st));
        for (before, after) in [(&g, &s), (&s, &g)] {
            let d = loom_wasm::stats::diff(before, after).unwrap();
            assert_eq!(d.entries.len(), g.weight_tensors().unwrap().len(), "{gguf} ↔ {st}");
            for e in &d.entries {
                if gguf == "model.f16.gguf" && e.name.contains("norm") {
                    // The GGUF keeps norms in F32 whatever its type; the F16 safetensors holds them rounded to F16.
                    assert!(
                        e.status == "changed" && e.max_abs.unwrap() < 1e-3,
                        "{gguf} ↔ {st}: {e:?}"
                    );
                } else {
                    assert_eq!((e.status, e.max_abs), ("same", Some(0.0)), "{gguf} ↔ {st}: {}", e.name);
                }
            }
            let q = d
                .entries
                .iter()
                .find(|e| e.name.contains("0.attn_q") || e.name.contains("0.self_attn.q_proj"))
                .unwrap();
            assert_eq!(q.max_abs, Some(0.0), "q rows restored");
        }
    }
    // Another model's weights are not equal: the BF16 safetensors against the F32 GGUF differ by rounding.
    let d = loom_wasm::stats::diff(&open("model.f32.gguf"), &open("model.bf16.safetensors")).unwrap();
    assert!(d
        .entries
        .iter()
        .all(|e| e.status == "changed" && e.max_abs.unwrap() < 1e-2));
    assert!(d.entries.iter().any(|e| e.max_abs.unwrap() > 0.0));
}
