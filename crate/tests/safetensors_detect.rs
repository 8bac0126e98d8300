//! Format detection on every file of the conformance corpus, from its first 16 bytes only.

use std::io::Read;
use std::path::{Path, PathBuf};

use loom_wasm::formats::detect::{detect, Format, DETECT_LEN};

fn first_bytes(path: &Path) -> Vec<u8> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .unwrap()
        .take(DETECT_LEN as u64)
        .read_to_end(&mut buf)
        .unwrap();
    buf
}

#[test]
fn every_corpus_file_is_detected_by_its_kind() {
    let cases = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance/cases");
    let mut seen = std::collections::BTreeMap::new();
    for case in std::fs::read_dir(&cases).unwrap() {
        for f in std::fs::read_dir(case.unwrap().path()).unwrap() {
            let path = f.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let want = if name.ends_with(".entity") || name.ends_with(".entity.header") {
                Format::Entity
            } else if name.ends_with(".json") {
                Format::LoomJson
            } else if name.ends_with(".safetensors") {
                Format::Safetensors
            } else {
                continue;
            };
            assert_eq!(detect(&first_bytes(&path)), want, "{}", path.display());
            *seen.entry(format!("{want:?}")).or_insert(0) += 1;
        }
    }
    // The corpus has hundreds of JSON and ENTITY files and two safetensors files.
    assert!(seen["Entity"] > 100 && seen["LoomJson"] > 100, "{seen:?}");
    assert_eq!(seen["Safetensors"], 2);
    // The manifest is JSON too.
    let manifest = cases.join("../manifest.json");
    assert_eq!(detect(&first_bytes(&manifest)), Format::LoomJson);
}

#[test]
fn gguf_and_short_inputs() {
    // A GGUF v3 preamble: magic, version, tensor count, metadata count.
    let mut gguf = b"GGUF".to_vec();
    gguf.extend_from_slice(&3u32.to_le_bytes());
    gguf.extend_from_slice(&1u64.to_le_bytes());
    assert_eq!(detect(&gguf), Format::Gguf);
    // Every prefix of a safetensors file shorter than 9 bytes is undecidable, hence Unknown.
    let st = b"\x02\0\0\0\0\0\0\0{}";
    for len in 0..9 {
        assert_eq!(detect(&st[..len]), Format::Unknown);
    }
    assert_eq!(detect(st), Format::Safetensors);
    // Extra bytes beyond 16 are ignored.
    let mut long = b"  \n".to_vec();
    long.extend(std::iter::repeat_n(b' ', 100));
    long.push(b'{');
    assert_eq!(detect(&long), Format::Unknown);
}
