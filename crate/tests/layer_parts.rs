//! What the inspector says of each Loom layer beyond its size: the shape of an input row and of the output row
//! it gives (checked against the lengths Loom's corpus feeds in and gets back), and the parts of a combined
//! store (checked against the HuggingFace tensors a transformer `.entity` was made from).

mod common;
#[path = "llm_util/mod.rs"]
mod llm_util;

use std::collections::BTreeSet;

use common::corpus_dir;
use loom_wasm::formats::safetensors::{SafetensorsFile, Semantics};
use loom_wasm::inspect::inspect_bytes;
use loom_wasm::llm::model::LlmModel;
use loom_wasm::model::LoadedModel;
use serde_json::Value;

fn product(shape: &[u64]) -> usize {
    shape.iter().product::<u64>() as usize
}

#[test]
fn every_corpus_network_maps_its_input_rows_to_as_many_output_rows() {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(corpus_dir().join("../manifest.json")).unwrap()).unwrap();
    let mut checked = BTreeSet::new();
    for case in manifest["cases"].as_array().unwrap() {
        let (Some(input), Some(output), Some(file)) = (
            case["input"].as_array(),
            case["expected_output"].as_array(),
            case["files"]["loom.entity"].as_str(),
        ) else {
            continue;
        };
        let id = case["id"].as_str().unwrap();
        let ins = inspect_bytes(&std::fs::read(corpus_dir().join("..").join(file)).unwrap()).unwrap();
        let top: Vec<_> = ins.layers.iter().filter(|l| l.nesting == 0 && !l.disabled).collect();
        let (Some(first), Some(last)) = (top.first(), top.last()) else {
            continue;
        };
        let (Some(row_in), Some(row_out)) = (&first.input, &last.output) else {
            continue;
        };
        let (n_in, n_out) = (input.len(), output.len());
        assert_eq!(
            n_in % product(row_in),
            0,
            "{id}: {n_in} input values in rows of {row_in:?}"
        );
        assert_eq!(
            n_out % product(row_out),
            0,
            "{id}: {n_out} output values in rows of {row_out:?}"
        );
        assert_eq!(
            n_in / product(row_in),
            n_out / product(row_out),
            "{id}: rows of {row_in:?} in, {row_out:?} out, for {n_in} → {n_out} values"
        );
        if top.len() == 1 {
            checked.insert(first.layer_type.clone());
        }
    }
    // Every weighted layer type was checked alone, so no type's shapes go untested.
    for t in [
        "Dense",
        "MultiHeadAttention",
        "SwiGLU",
        "RMSNorm",
        "LayerNorm",
        "RNN",
        "LSTM",
        "CNN1",
        "CNN2",
        "CNN3",
        "ConvTransposed1D",
        "ConvTransposed2D",
        "ConvTransposed3D",
        "Embedding",
        "KMeans",
    ] {
        assert!(
            checked.contains(t),
            "no single-layer corpus case checked {t}: {checked:?}"
        );
    }
}

/// The tiny Llama as an HF folder, converted losslessly to a transformer `.entity`: each MHA and SwiGLU part read
/// back from the `.entity` is the HF tensor it came from, value for value, with its shape.
#[test]
fn transformer_entity_parts_are_the_hf_tensors() {
    let dir = llm_util::golden().join("tiny-llama");
    let (entity, report) = LlmModel::open(&dir.join("model.f32.safetensors"))
        .unwrap()
        .to_entity(false)
        .unwrap();
    assert!(report.is_lossless());
    let model = LoadedModel::from_bytes(entity.into(), "tiny.entity").unwrap();
    let hf = SafetensorsFile::open(dir.join("model.f32.safetensors")).unwrap();
    let rows = &model.inspection.layers;
    let mha: Vec<_> = rows.iter().filter(|l| l.layer_type == "MultiHeadAttention").collect();
    let mlp: Vec<_> = rows.iter().filter(|l| l.layer_type == "SwiGLU").collect();
    assert!(!mha.is_empty() && mha.len() == mlp.len());
    for (b, (attn, swiglu)) in mha.iter().zip(&mlp).enumerate() {
        for (row, part, hf_name) in [
            (attn, "q_weight", "self_attn.q_proj.weight"),
            (attn, "k_weight", "self_attn.k_proj.weight"),
            (attn, "v_weight", "self_attn.v_proj.weight"),
            (attn, "o_weight", "self_attn.o_proj.weight"),
            (swiglu, "gate_weight", "mlp.gate_proj.weight"),
            (swiglu, "up_weight", "mlp.up_proj.weight"),
            (swiglu, "down_weight", "mlp.down_proj.weight"),
        ] {
            let name = format!("{}#{part}", row.path);
            let ours = model.tensor(&name).unwrap();
            let theirs = hf.tensor(&format!("model.layers.{b}.{hf_name}")).unwrap();
            assert_eq!(ours.shape, theirs.shape(), "{name}");
            assert_eq!(
                row.parts.iter().find(|p| p.name == part).unwrap().shape,
                theirs.shape(),
                "{name}"
            );
            let a = ours.values(0, ours.count).unwrap();
            let e = theirs.to_f32(Semantics::Standard).unwrap();
            assert!(
                a.len() == e.len() && a.iter().zip(&e).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{name}"
            );
        }
        // Llama has no attention biases: those parts are zeros, as the `.entity` stores them.
        let bias = model.tensor(&format!("{}#q_bias", attn.path)).unwrap();
        assert!(bias.values(0, bias.count).unwrap().iter().all(|&v| v == 0.0));
    }
    let Err(err) = model.tensor(&format!("{}#nope", mha[0].path)) else {
        panic!("a part that is not there")
    };
    assert!(err.to_string().contains("nope"), "{err}");
}
