//! Training-checkpoint directories (safetensors and legacy JSON layouts), validation, and inference export. The
//! layout is this project's (issue 3; Loom writes none, see `formats::checkpoint`): its files are written here by the
//! reference `safetensors` crate and `serde_json`.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use loom_wasm::formats::checkpoint::{export, export_files, Checkpoint, Layout};
use loom_wasm::formats::safetensors::{Dtype, SafetensorsFile, Semantics};
use loom_wasm::LoomError;
use safetensors::tensor::TensorView as RefView;

/// A fresh, empty scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loom-wasm-ckpt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect()
}

/// A safetensors file written by the reference crate (as Python/PyTorch training code would).
fn st_file(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)], meta: Option<(&str, &str)>) -> Vec<u8> {
    let views: Vec<(String, RefView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), RefView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let meta = meta.map(|(k, v)| HashMap::from([(k.to_string(), v.to_string())]));
    safetensors::serialize(views, meta).unwrap()
}

fn weights_values() -> (Vec<f32>, Vec<f32>) {
    let w: Vec<f32> = (0..12).map(|i| (i as f32 - 5.5) * 0.123_456_7).collect();
    let b = vec![0.1f32, -0.2, 1e-5, 3.0];
    (w, b)
}

/// Files of a checkpoint in the safetensors layout: an F32 weight and a BF16 bias, both with F32 Adam moments.
fn st_checkpoint_files() -> Vec<(&'static str, Vec<u8>)> {
    let (w, b) = weights_values();
    let weights = st_file(
        &[
            ("layer_0.weights", Dtype::F32, vec![3, 4], f32_bytes(&w)),
            ("layer_0.bias", Dtype::BF16, vec![4], bf16_bytes(&b)),
        ],
        Some(("format", "pt")),
    );
    let m_vals: Vec<f32> = w.iter().map(|x| x * 0.01).collect();
    let m = st_file(
        &[
            ("layer_0.weights", Dtype::F32, vec![3, 4], f32_bytes(&m_vals)),
            ("layer_0.bias", Dtype::F32, vec![4], f32_bytes(&[0.0; 4])),
        ],
        None,
    );
    let v = st_file(
        &[("layer_0.weights", Dtype::F32, vec![3, 4], f32_bytes(&[1e-8; 12]))],
        None,
    );
    vec![
        ("weights.safetensors", weights),
        ("optimizer_m.safetensors", m),
        ("optimizer_v.safetensors", v),
        ("meta.json", br#"{"arch": "mlp", "layers": [4, 3]}"#.to_vec()),
        ("train_state.json", br#"{"step": 120, "lr": 0.001}"#.to_vec()),
        ("notes.txt", b"ignored".to_vec()),
    ]
}

fn write_dir(dir: &Path, files: &[(&str, Vec<u8>)]) {
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

fn check_st_checkpoint(ck: &Checkpoint) {
    let (w, b) = weights_values();
    assert_eq!(ck.layout(), Layout::Safetensors);
    let names: Vec<&str> = ck.tensors().map(|t| t.weight.name()).collect();
    assert_eq!(names, ["layer_0.weights", "layer_0.bias"]);
    let wt = ck.tensor("layer_0.weights").unwrap();
    assert_eq!((wt.weight.dtype(), wt.weight.shape()), (Dtype::F32, &[3u64, 4][..]));
    assert_eq!(wt.weight.bytes(), &f32_bytes(&w)[..]);
    assert_eq!(wt.adam_m.unwrap().to_f32(Semantics::Standard).unwrap()[1], w[1] * 0.01);
    assert_eq!(wt.adam_v.unwrap().to_f32(Semantics::Standard).unwrap(), [1e-8; 12]);
    let bt = ck.tensor("layer_0.bias").unwrap();
    assert_eq!(bt.weight.dtype(), Dtype::BF16);
    assert_eq!(bt.weight.bytes(), &bf16_bytes(&b)[..]);
    assert!(bt.adam_m.is_some() && bt.adam_v.is_none());
    assert!(ck.tensor("absent").is_none());
    assert_eq!(ck.meta().unwrap()["arch"], "mlp");
    assert_eq!(ck.train_state().unwrap()["step"], 120);
    assert_eq!(ck.weights_metadata().get("format").map(String::as_str), Some("pt"));
}

#[test]
fn opens_safetensors_layout_from_disk_and_memory() {
    let dir = scratch("st");
    write_dir(&dir, &st_checkpoint_files());
    check_st_checkpoint(&Checkpoint::open(&dir).unwrap());
    // A browser folder drop: paths carry the folder name; other files are ignored.
    let dropped = st_checkpoint_files()
        .into_iter()
        .map(|(n, b)| (format!("run-7/{n}"), b))
        .collect();
    check_st_checkpoint(&Checkpoint::from_files(dropped).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn legacy_json() -> &'static str {
    r#"{"w1": [[1, 2.5], [-3, 4e-3], [5, 6]], "b": [[0.5, -1, 0.25]], "empty": []}"#
}

#[test]
fn opens_legacy_json_layout() {
    let dir = scratch("legacy");
    write_dir(
        &dir,
        &[("weights.json", legacy_json().into()), ("meta.json", b"{}".to_vec())],
    );
    let ck = Checkpoint::open(&dir).unwrap();
    assert_eq!(ck.layout(), Layout::LegacyJson);
    let w1 = ck.tensor("w1").unwrap();
    assert_eq!((w1.weight.dtype(), w1.weight.shape()), (Dtype::F32, &[3u64, 2][..]));
    assert_eq!(
        w1.weight.to_f32(Semantics::Standard).unwrap(),
        [1.0, 2.5, -3.0, 4e-3, 5.0, 6.0]
    );
    assert_eq!(ck.tensor("b").unwrap().weight.shape(), [1, 3]);
    assert_eq!(ck.tensor("empty").unwrap().weight.shape(), [0, 0]);
    assert!(ck.train_state().is_none());
    // weights.safetensors wins over weights.json when both exist.
    let mut files = st_checkpoint_files();
    files.push(("weights.json", legacy_json().into()));
    let files = files.into_iter().map(|(n, b)| (n.to_string(), b)).collect();
    assert_eq!(Checkpoint::from_files(files).unwrap().layout(), Layout::Safetensors);
    // Legacy weights may have moments too (matching shape [rows, cols]).
    let m = st_file(&[("w1", Dtype::F32, vec![3, 2], f32_bytes(&[0.0; 6]))], None);
    let ck = Checkpoint::from_files(vec![
        ("weights.json".into(), legacy_json().into()),
        ("optimizer_m.safetensors".into(), m),
    ])
    .unwrap();
    assert!(ck.tensor("w1").unwrap().adam_m.is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn from(files: Vec<(&str, Vec<u8>)>) -> Result<Checkpoint, LoomError> {
    Checkpoint::from_files(files.into_iter().map(|(n, b)| (n.to_string(), b)).collect())
}

#[test]
fn validation_errors() {
    // No weights at all.
    let dir = scratch("noweights");
    std::fs::write(dir.join("meta.json"), "{}").unwrap();
    match Checkpoint::open(&dir) {
        Err(LoomError::InvalidInput(m)) => assert!(m.contains("weights.safetensors") && m.contains("noweights"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(Checkpoint::open(dir.join("nope")), Err(LoomError::Io(_))));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(
        from(vec![("meta.json", b"{}".to_vec())]),
        Err(LoomError::InvalidInput(_))
    ));

    let base = st_checkpoint_files();
    let weights = base[0].1.clone();
    // Moment shape disagreeing with its weight.
    let bad_m = st_file(
        &[("layer_0.weights", Dtype::F32, vec![4, 3], f32_bytes(&[0.0; 12]))],
        None,
    );
    match from(vec![
        ("weights.safetensors", weights.clone()),
        ("optimizer_m.safetensors", bad_m),
    ]) {
        Err(LoomError::InvalidInput(m)) => {
            assert!(
                m.contains("optimizer_m") && m.contains("layer_0.weights") && m.contains("[4, 3]"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Moment for a tensor the weights lack.
    let stray = st_file(&[("other", Dtype::F32, vec![1], f32_bytes(&[0.0]))], None);
    let r = from(vec![
        ("weights.safetensors", weights.clone()),
        ("optimizer_v.safetensors", stray),
    ]);
    assert!(matches!(r, Err(LoomError::InvalidInput(m)) if m.contains("\"other\"")));
    // Legacy rows of unequal length, and non-numbers.
    for (json, needle) in [
        (r#"{"w": [[1, 2], [3]]}"#, "row 1 has 1 numbers, row 0 has 2"),
        (r#"{"w": [[1, "x"]]}"#, "not a number"),
        (r#"{"w": [1, 2]}"#, "row 0 is not an array"),
        (r#"{"w": [[1e39]]}"#, "out of float32 range"),
        (r#"{"w": 3}"#, "2-D array"),
    ] {
        match from(vec![("weights.json", json.into())]) {
            Err(LoomError::InvalidInput(m)) => assert!(m.contains(needle) && m.contains("\"w\""), "{m}"),
            other => panic!("{json}: {other:?}"),
        }
    }
    assert!(matches!(
        from(vec![("weights.json", b"[[1]]".to_vec())]),
        Err(LoomError::Json { .. })
    ));
    // Broken JSON side files, broken safetensors (errors name the file).
    let r = from(vec![
        ("weights.safetensors", weights.clone()),
        ("train_state.json", b"{".to_vec()),
    ]);
    assert!(matches!(r, Err(LoomError::Json { context, .. }) if context == "train_state.json"));
    let r = from(vec![("weights.safetensors", weights[..weights.len() - 1].to_vec())]);
    assert!(matches!(r, Err(LoomError::Truncated { what, .. }) if what.starts_with("weights.safetensors")));
    // Two checkpoints dropped at once.
    let r = from(vec![
        ("a/weights.safetensors", weights.clone()),
        ("b/weights.safetensors", weights),
    ]);
    assert!(matches!(r, Err(LoomError::InvalidInput(m)) if m.contains("a/weights.safetensors")));
}

fn read_weights(dir: &Path) -> SafetensorsFile<memmap2::Mmap> {
    SafetensorsFile::open(dir.join("weights.safetensors")).unwrap()
}

#[test]
fn export_round_trips_f32_and_f16() {
    let src = scratch("export-src");
    write_dir(&src, &st_checkpoint_files());
    let ck = Checkpoint::open(&src).unwrap();
    let (w, b) = weights_values();
    let b_bf16: Vec<f32> = b.iter().map(|x| half::bf16::from_f32(*x).to_f32()).collect();

    let out = scratch("export-f32").join("nested/inference");
    export(&ck, &out, false, false).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["meta.json", "weights.safetensors"]);
    assert_eq!(
        std::fs::read(out.join("meta.json")).unwrap(),
        std::fs::read(src.join("meta.json")).unwrap()
    );
    let f = read_weights(&out);
    let wt = f.tensor("layer_0.weights").unwrap();
    assert_eq!((wt.dtype(), wt.shape()), (Dtype::F32, &[3u64, 4][..]));
    assert_eq!(wt.bytes(), &f32_bytes(&w)[..]);
    assert_eq!(
        f.tensor("layer_0.bias").unwrap().to_f32(Semantics::Standard).unwrap(),
        b_bf16
    );
    assert_eq!(f.header().metadata().get("format").map(String::as_str), Some("pt"));
    // The copy is itself a checkpoint, without optimizer state.
    let back = Checkpoint::open(&out).unwrap();
    assert!(back.tensors().all(|t| t.adam_m.is_none() && t.adam_v.is_none()));
    assert!(back.train_state().is_none());

    let out16 = scratch("export-f16");
    export(&ck, &out16, true, false).unwrap();
    let f = read_weights(&out16);
    let wt = f.tensor("layer_0.weights").unwrap();
    assert_eq!(wt.dtype(), Dtype::F16);
    let want: Vec<f32> = w.iter().map(|x| half::f16::from_f32(*x).to_f32()).collect();
    assert_eq!(wt.to_f32(Semantics::Standard).unwrap(), want);
    let want_b: Vec<f32> = b_bf16.iter().map(|x| half::f16::from_f32(*x).to_f32()).collect();
    assert_eq!(
        f.tensor("layer_0.bias").unwrap().to_f32(Semantics::Standard).unwrap(),
        want_b
    );

    // Legacy layout exports too (no meta.json: only the weights).
    let legacy = Checkpoint::from_files(vec![("weights.json".into(), legacy_json().into())]).unwrap();
    let files = export_files(&legacy, false).unwrap();
    assert_eq!(files.len(), 1);
    let f = SafetensorsFile::from_bytes(files[0].1.clone()).unwrap();
    assert_eq!(
        f.tensor("w1").unwrap().to_f32(Semantics::Standard).unwrap(),
        [1.0, 2.5, -3.0, 4e-3, 5.0, 6.0]
    );

    for d in [src, out.parent().unwrap().parent().unwrap().to_path_buf(), out16] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn export_never_clobbers_without_overwrite() {
    let src = scratch("clobber-src");
    write_dir(&src, &st_checkpoint_files());
    let ck = Checkpoint::open(&src).unwrap();
    let out = scratch("clobber-out");
    std::fs::write(out.join("weights.safetensors"), b"precious").unwrap();
    std::fs::write(out.join("keep.txt"), b"mine").unwrap();
    assert!(matches!(export(&ck, &out, false, false), Err(LoomError::Unsaveable(_))));
    assert_eq!(std::fs::read(out.join("weights.safetensors")).unwrap(), b"precious");
    // Exporting onto the source directory is refused as well.
    assert!(export(&ck, &src, false, false).is_err());
    // A file where the directory should be.
    assert!(matches!(
        export(&ck, out.join("keep.txt"), false, true),
        Err(LoomError::Io(_))
    ));

    export(&ck, &out, false, true).unwrap();
    assert_eq!(read_weights(&out).header().tensors().len(), 2);
    assert_eq!(std::fs::read(out.join("keep.txt")).unwrap(), b"mine");
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["keep.txt", "meta.json", "weights.safetensors"]);

    // Overwriting the source checkpoint in place keeps the open (mapped) checkpoint readable.
    export(&ck, &src, true, true).unwrap();
    assert_eq!(ck.tensor("layer_0.weights").unwrap().weight.dtype(), Dtype::F32);
    assert_eq!(
        read_weights(&src).tensor("layer_0.weights").unwrap().dtype(),
        Dtype::F16
    );
    assert!(src.join("optimizer_m.safetensors").exists());
    std::fs::remove_dir_all(&src).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
}
