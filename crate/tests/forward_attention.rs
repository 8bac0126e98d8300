//! MultiHeadAttention forward against Loom's own outputs (testdata/forward/attention.json): query_dim, GQA (also
//! uneven), odd head_dim, RoPE bases below 1, batch rows sharing one KV timeline, KV continuation and reset, the
//! 512-row cache wrap, odd input ranks, quantized dtypes, q_norm/k_norm blobs of an `.entity` file.

mod forward_cases;

use forward_cases::{check, corpus, model, refuses};
use serde_json::json;

#[test]
fn every_shared_corpus_case_matches_loom() {
    assert_eq!(corpus(&["layer_MultiHeadAttention_"]), 21);
}

#[test]
fn matches_loom_bit_for_bit() {
    assert_eq!(check("attention.json"), 42);
}

#[test]
fn inputs_loom_would_crash_on_are_typed_errors() {
    let mut m = model("attention.json", "mha_rank2_not_d", |_| {});
    // A scalar has no last dimension to replace.
    refuses(&mut m, 1, &[], true, &["layers.0", "[seq, 4]"]);
    // seq_length 2 rows of d_model 4 need 8 values.
    refuses(&mut m, 6, &[1, 6], true, &["layers.0", "1×2×4", "[1, 6]"]);
    // [2, 8] reads 2 rows but a flat input's output holds only d_model values.
    refuses(&mut m, 8, &[8], true, &["layers.0", "[8]"]);
}

#[test]
fn layouts_loom_would_crash_on_are_typed_errors() {
    // query_dim below d_model: Loom copies d_model values out of each query_dim-wide attention row.
    // (Without weights: the store would not fit the edited sizes, and the layout is refused before it is read.)
    let mut m = model("attention.json", "mha_query_dim_gqa", |l| {
        l.insert("d_model".into(), json!(9));
        l.remove("weights");
    });
    refuses(&mut m, 9, &[1, 9], false, &["layers.0", "query_dim (8)"]);
    // More kv heads than heads: heads / kv_heads is 0 and Loom divides by it.
    let mut m = model("attention.json", "mha_query_dim_gqa", |l| {
        l.insert("num_kv_heads".into(), json!(5));
        l.remove("weights");
    });
    refuses(&mut m, 6, &[1, 6], false, &["layers.0", "4 heads", "5 kv heads"]);
}
