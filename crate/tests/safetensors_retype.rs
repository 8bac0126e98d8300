//! Re-exporting a safetensors file without a Loom topology (an HF checkpoint) as F32, F16 or BF16: the values
//! are the ones torch wrote for the same model in that type (the tiny-llama goldens), and the loss report counts
//! exactly the values that differ between the golden files.

#[path = "llm_util/mod.rs"]
mod llm_util;

use loom_wasm::convert::retype_safetensors;
use loom_wasm::formats::safetensors::{self as st, Dtype, SafetensorsFile, Semantics, TensorData};
use loom_wasm::LoomError;

fn golden(name: &str) -> Vec<u8> {
    std::fs::read(llm_util::golden().join("tiny-llama").join(name)).unwrap()
}

fn values(file: &SafetensorsFile<&[u8]>, name: &str) -> Vec<u32> {
    let t = file.tensor(name).unwrap();
    t.to_f32(Semantics::Standard)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn f32_to_f16_and_bf16_gives_the_golden_files_values_and_reports_each_rounded_value() {
    let source = golden("model.f32.safetensors");
    let src = SafetensorsFile::from_bytes(source.as_slice()).unwrap();
    for (dtype, name) in [
        (Dtype::F16, "model.f16.safetensors"),
        (Dtype::BF16, "model.bf16.safetensors"),
    ] {
        let expected_bytes = golden(name);
        let expected = SafetensorsFile::from_bytes(expected_bytes.as_slice()).unwrap();
        let (out, report) = retype_safetensors(&source, dtype).unwrap();
        let ours = SafetensorsFile::from_bytes(out.as_slice()).unwrap();
        assert_eq!(ours.header().tensors().len(), src.header().tensors().len());
        assert_eq!(ours.header().metadata(), src.header().metadata());
        let mut lossy = 0;
        for t in src.header().tensors() {
            let mine = ours.tensor(&t.name).unwrap();
            assert_eq!(mine.dtype(), dtype, "{}", t.name);
            assert_eq!(mine.shape(), t.shape.as_slice(), "{}", t.name);
            let theirs = values(&expected, &t.name);
            assert_eq!(values(&ours, &t.name), theirs, "{} as {dtype}", t.name);
            // The values that change are those where torch's rounding changed them.
            let changed = values(&src, &t.name)
                .iter()
                .zip(&theirs)
                .filter(|(a, b)| a != b)
                .count();
            let row = report.layers.iter().find(|l| l.path == t.name);
            match row {
                Some(l) => {
                    assert_eq!((l.changed, l.total), (changed, t.elements as usize), "{}", t.name);
                    assert_eq!((l.from.as_str(), l.to.clone()), ("F32", dtype.to_string()));
                    lossy += 1;
                }
                None => assert_eq!(changed, 0, "{} changes but is not reported", t.name),
            }
        }
        assert!(lossy > 0, "rounding a random model to {dtype} changes something");
    }
}

#[test]
fn widening_to_f32_is_lossless_and_keeps_every_value() {
    for name in ["model.f16.safetensors", "model.bf16.safetensors"] {
        let source = golden(name);
        let src = SafetensorsFile::from_bytes(source.as_slice()).unwrap();
        let (out, report) = retype_safetensors(&source, Dtype::F32).unwrap();
        assert!(report.is_lossless(), "{name}: {}", report.describe());
        let ours = SafetensorsFile::from_bytes(out.as_slice()).unwrap();
        for t in src.header().tensors() {
            assert_eq!(values(&ours, &t.name), values(&src, &t.name), "{name} {}", t.name);
        }
        // And back: the original type again, value for value.
        let back_type = src.header().tensors()[0].dtype;
        let (back, report) = retype_safetensors(&out, back_type).unwrap();
        assert!(report.is_lossless(), "{name} back: {}", report.describe());
        let back = SafetensorsFile::from_bytes(back.as_slice()).unwrap();
        for t in src.header().tensors() {
            assert_eq!(values(&back, &t.name), values(&src, &t.name), "{name} {}", t.name);
        }
    }
}

#[test]
fn tensors_that_are_not_floats_are_refused_by_name() {
    let ids = [1.0f32, 2.0, 3.0];
    let mut file = st::write(
        &[TensorData {
            name: "w",
            shape: &[3],
            values: &ids,
        }],
        Dtype::F32,
        &Default::default(),
    )
    .unwrap();
    // Relabel the tensor as I32 (the same 12 bytes), as an HF file's position_ids would be.
    let at = file.windows(5).position(|w| w == b"\"F32\"").unwrap();
    file.splice(at..at + 5, *b"\"I32\"");
    let err = retype_safetensors(&file, Dtype::F16).unwrap_err();
    assert!(matches!(err, LoomError::Unsupported(_)), "{err:?}");
    assert!(
        err.to_string().contains("\"w\"") && err.to_string().contains("I32"),
        "{err}"
    );
}
