//! `shaders/kmeans.wgsl` against its CPU twin, `CpuModel` on a one-layer KMeans network (bit-exact with Loom):
//! modes, temperatures, sizes and dtypes, and bad inputs as typed errors.
//!
//! Tolerance: |gpu − cpu| ≤ 1e-6 + 1e-4·|cpu|. Both are f32; the GPU's exp, division and tree sums differ from the
//! CPU's (Go's exp, sequential sums) by a few ulp, which the logits' scale (distance / 2T²) magnifies.

use loom_wasm::cpu::Tensor;
use loom_wasm::gpu::{Gpu, KMeans};
use loom_wasm::{DType, LoomError};

use super::harness::{close, cpu, data, one_layer, with_dtype, with_weights};

const ABS: f32 = 1e-6;
const REL: f32 = 1e-4;

on_each_device!(
    modes_temperatures_sizes_and_dtypes_match_the_cpu,
    kmeans_bad_inputs_are_typed_errors
);

pub async fn modes_temperatures_sizes_and_dtypes_match_the_cpu(gpu: &Gpu) {
    let km = KMeans::new(gpu).unwrap();
    // (clusters, input values, temperature, output mode, activation): clusters below and past the 64 lanes.
    let cases = [
        (3, 4, 0.0, "probabilities", "Linear"),
        (10, 7, 0.5, "features", "Linear"),
        (64, 16, 2.0, "probabilities", "Sigmoid"),
        (150, 33, 3.0, "features", "Tanh"),
        (97, 200, 10.0, "probabilities", "Linear"),
    ];
    // Integer dtypes: Loom leaves the logits at 0, a uniform output.
    let dtypes = [DType::Float32, DType::BFloat16, DType::Fp4, DType::Int8, DType::Int16];
    for (i, (k, d, t, mode, act)) in cases.into_iter().enumerate() {
        let json = format!(
            r#""type":"KMeans","activation":"{act}","num_clusters":{k},"kmeans_temperature":{t},"output_mode":"{mode}""#
        );
        let net = with_weights(one_layer(&json), data(i as u64, k * d, -1.0, 1.0));
        let x = data(20 + i as u64, d, -1.0, 1.0);
        // Batch is not a KMeans notion: the whole input is one point, whatever its shape.
        let shape = if d % 2 == 0 { vec![2, d / 2] } else { vec![1, d] };
        for dt in dtypes {
            let net = with_dtype(net.clone(), dt);
            let want = cpu(&net, &x, &shape);
            let xt = Tensor::new(x.clone(), shape.clone()).unwrap();
            let got = km.forward(gpu, &net.layers[0], "layers.0", &xt).await.unwrap();
            assert_eq!(got.shape, want.shape);
            let what = format!("KMeans {k}×{d} T {t} {mode} {act} {}", dt.name());
            close(&what, &got.data, &want.data, ABS, REL);
        }
    }
}

pub async fn kmeans_bad_inputs_are_typed_errors(gpu: &Gpu) {
    let km = KMeans::new(gpu).unwrap();
    let net = with_weights(
        one_layer(r#""type":"KMeans","num_clusters":4"#),
        data(1, 4 * 5, -1.0, 1.0),
    );
    let run = async |l: &loom_wasm::network::Layer, n: usize| {
        let x = Tensor::new(vec![0.5; n], vec![1, n]).unwrap();
        km.forward(gpu, l, "layers.0", &x).await.unwrap_err()
    };
    // 6 inputs need 24 centre values, the layer has 20; no clusters; a huge cluster count; not a KMeans layer.
    let err = run(&net.layers[0], 6).await;
    assert!(
        matches!(&err, LoomError::InvalidInput(m) if m.contains("20 centre values")),
        "{err:?}"
    );
    let mut none = net.clone();
    none.layers[0].num_clusters = 0;
    assert!(matches!(run(&none.layers[0], 5).await, LoomError::InvalidInput(_)));
    let mut huge = net.clone();
    huge.layers[0].num_clusters = i64::MAX;
    assert!(matches!(run(&huge.layers[0], 5).await, LoomError::InvalidInput(_)));
    let dense = one_layer(r#""type":"Dense","input_height":4,"output_height":2"#);
    assert!(matches!(run(&dense.layers[0], 5).await, LoomError::InvalidInput(_)));
}
