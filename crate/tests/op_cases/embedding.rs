//! `shaders/embedding.wgsl` against its CPU twin, `CpuModel` forward of an Embedding layer. The gather is exact: bit-identical outputs with a Linear activation, ids truncated toward
//! zero and out-of-range ids (negative, ≥ vocab, NaN, ±∞) giving a zero row, with the table in one binding or split
//! into shards. With another activation the GPU's f32 maths rounds differently: |gpu − cpu| ≤ 1e-6 + 1e-5·|cpu|.

use loom_wasm::cpu::Tensor;
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{Embedding, EmbeddingTable, Gpu};
use loom_wasm::network::Activation;

use super::harness::{close, cpu, data, exact, one_layer};

on_each_device!(
    gather_is_bit_identical_to_the_cpu_layer,
    activations_and_loom_written_tables
);

fn ids(vocab: usize, n: usize) -> Vec<f32> {
    let mut ids: Vec<f32> = data(vocab as u64, n, -3.0, vocab as f32 + 3.0);
    ids.extend([
        0.0,
        -0.0,
        -0.5,
        0.99,
        (vocab - 1) as f32 + 0.5,
        vocab as f32,
        -1.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e30,
    ]);
    ids
}

pub async fn gather_is_bit_identical_to_the_cpu_layer(gpu: &Gpu) {
    let emb = Embedding::new(gpu).unwrap();
    for (vocab, dim, n) in [(1, 1, 1), (6, 4, 9), (100, 37, 50), (1000, 256, 33), (50, 300, 257)] {
        let net = one_layer(&format!(
            r#""type":"Embedding","activation":"Linear","vocab_size":{vocab},"embedding_dim":{dim}"#
        ));
        let x = ids(vocab, n);
        let shape = vec![1, x.len()];
        let want = cpu(&net, &x, &shape);
        let got = emb
            .forward(gpu, &net.layers[0], &Tensor::new(x.clone(), shape).unwrap())
            .await
            .unwrap();
        assert_eq!(got.shape, want.shape);
        exact(
            &format!("embedding vocab {vocab} × dim {dim}, {} ids", x.len()),
            &got.data,
            &want.data,
        );

        // The same table in shards of 7 rows: each shard writes its rows, the first the out-of-range ones.
        let w = net.layers[0].weights.as_ref().unwrap().master_values();
        let table = EmbeddingTable::upload_sharded(gpu, &w, vocab, dim, 7).await.unwrap();
        assert_eq!(table.shards(), vocab.div_ceil(7));
        let got = emb.run(gpu, &table, &x, Activation::Linear.into()).await.unwrap();
        exact(&format!("  … in {} shards", table.shards()), &got, &want.data);
    }
}

pub async fn activations_and_loom_written_tables(gpu: &Gpu) {
    let emb = Embedding::new(gpu).unwrap();
    // Loom's conformance layers: Silu activation; float32 and quantized tables (dequantized, as the CPU reads them).
    for (case, text) in [
        (
            "layer_Embedding_float32",
            testdata!("conformance/cases/layer_Embedding_float32/loom.json"),
        ),
        (
            "layer_Embedding_int8",
            testdata!("conformance/cases/layer_Embedding_int8/loom.json"),
        ),
        (
            "layer_Embedding_fp4",
            testdata!("conformance/cases/layer_Embedding_fp4/loom.json"),
        ),
        (
            "layer_Embedding_uint16",
            testdata!("conformance/cases/layer_Embedding_uint16/loom.json"),
        ),
    ] {
        let net = loom_json::read(text.as_bytes()).unwrap();
        let x = ids(6, 8);
        let shape = vec![x.len()];
        let want = cpu(&net, &x, &shape);
        let got = emb
            .forward(gpu, &net.layers[0], &Tensor::new(x, shape).unwrap())
            .await
            .unwrap();
        close(&format!("{case} (Silu)"), &got.data, &want.data, 1e-6, 1e-5);
    }
    let net = one_layer(r#""type":"Embedding","activation":"Sigmoid","vocab_size":40,"embedding_dim":9"#);
    let x = ids(40, 20);
    let shape = vec![4, x.len() / 4];
    let x = x[..shape[0] * shape[1]].to_vec();
    let want = cpu(&net, &x, &shape);
    let got = emb
        .forward(gpu, &net.layers[0], &Tensor::new(x, shape.clone()).unwrap())
        .await
        .unwrap();
    assert_eq!(got.shape, [shape[0], shape[1], 9]);
    close("embedding Sigmoid [4, 7]", &got.data, &want.data, 1e-6, 1e-5);
}
