//! RNN and LSTM forward against Loom's own outputs (testdata/forward/recurrent.json): tiles 1, 3, 5 and the
//! default 8, use_tiling, batches, long sequences, rank-2 and over-long inputs, quantized dtypes.

mod forward_cases;

use forward_cases::{check, corpus, model, refuses};

#[test]
fn every_shared_corpus_case_matches_loom() {
    assert_eq!(corpus(&["layer_RNN_", "layer_LSTM_"]), 42);
}

#[test]
fn matches_loom_bit_for_bit() {
    assert_eq!(check("recurrent.json"), 22);
}

#[test]
fn short_or_scalar_inputs_are_typed_errors() {
    for id in ["rnn_rank2", "lstm_tile_1"] {
        let mut m = model("recurrent.json", id, |_| {});
        refuses(&mut m, 1, &[], true, &["layers.0", "scalar"]);
        // Batch 3 of seq_length × input_height values is more than 15 values.
        refuses(&mut m, 15, &[3, 5], true, &["layers.0", "[batch, ", "got 15", "[3, 5]"]);
    }
}
