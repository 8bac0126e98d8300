//! `shaders/softmax.wgsl` against its CPU twin, `CpuModel` forward of a Softmax layer (f32 with Go's exp). The GPU's
//! f32 `exp` differs by a few ulp: |gpu − cpu| ≤ 1e-7 + 1e-5·|cpu|. Sparsemax and entmax: |gpu − cpu| ≤ 1e-6 +
//! 1e-5·|cpu|, as the threshold τ = (Σ_support x − 1)/k comes from a tree sum where the CPU sums the sorted values in
//! order, and every output x − τ inherits τ's rounding (about an ulp of the support's sum).

use loom_wasm::cpu::Tensor;
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{Gpu, GpuTensor, Recorder, Softmax};
use loom_wasm::LoomError;

use super::harness::{close, cpu, data, one_layer};

const ABS: f32 = 1e-7;
const REL: f32 = 1e-5;
const SPARSE_ABS: f32 = 1e-6;

on_each_device!(
    softmax_layers_match_the_cpu,
    loom_written_softmax_layers_match,
    sparsemax_and_entmax_match_the_cpu,
    encode_layer_records_rows_with_a_short_last_row,
    gumbel_is_refused,
);

pub async fn softmax_layers_match_the_cpu(gpu: &Gpu) {
    let sm = Softmax::new(gpu).unwrap();
    let cases = [
        // Standard: the whole tensor is one row, batch ignored.
        (r#""softmax_type":"Standard""#, vec![1, 1]),
        (r#""softmax_type":"Standard""#, vec![3, 50]),
        (r#""softmax_type":"Standard""#, vec![1, 5003]),
        (r#""softmax_type":"Temperature","temperature":0.37"#, vec![2, 129]),
        (r#""softmax_type":"Temperature""#, vec![1, 64]),
        // Grid / Hierarchical: rows of softmax_cols, including a short last row.
        (
            r#""softmax_type":"Grid","softmax_rows":7,"softmax_cols":65"#,
            vec![7, 65],
        ),
        (
            r#""softmax_type":"Grid","softmax_rows":3,"softmax_cols":10"#,
            vec![1, 35],
        ),
        (
            r#""softmax_type":"Hierarchical","softmax_rows":300,"softmax_cols":3"#,
            vec![300, 3],
        ),
        (r#""softmax_type":"Masked""#, vec![4, 33]),
    ];
    for (kind, shape) in cases {
        let net = one_layer(&format!(r#""type":"Softmax","activation":"Linear",{kind}"#));
        let n: usize = shape.iter().product();
        let x = data(n as u64, n, -12.0, 12.0);
        let want = cpu(&net, &x, &shape);
        let got = sm
            .forward(gpu, &net.layers[0], &Tensor::new(x, shape.clone()).unwrap())
            .await
            .unwrap();
        assert_eq!(got.shape, want.shape);
        close(&format!("softmax {kind} {shape:?}"), &got.data, &want.data, ABS, REL);
    }
}

pub async fn loom_written_softmax_layers_match(gpu: &Gpu) {
    let sm = Softmax::new(gpu).unwrap();
    for (case, text) in [
        (
            "softmax_Standard",
            testdata!("conformance/cases/softmax_Standard/loom.json"),
        ),
        ("softmax_Grid", testdata!("conformance/cases/softmax_Grid/loom.json")),
        (
            "softmax_Temperature",
            testdata!("conformance/cases/softmax_Temperature/loom.json"),
        ),
        (
            "softmax_Hierarchical",
            testdata!("conformance/cases/softmax_Hierarchical/loom.json"),
        ),
    ] {
        let net = loom_json::read(text.as_bytes()).unwrap();
        let x = data(11, 6, -3.0, 3.0);
        let want = cpu(&net, &x, &[1, 6]);
        let got = sm
            .forward(gpu, &net.layers[0], &Tensor::new(x, vec![1, 6]).unwrap())
            .await
            .unwrap();
        close(case, &got.data, &want.data, ABS, REL);
    }
}

pub async fn sparsemax_and_entmax_match_the_cpu(gpu: &Gpu) {
    let sm = Softmax::new(gpu).unwrap();
    // (variant, shape, input range): the whole tensor is one row, batch ignored. Wide ranges give a small support,
    // narrow ones put every value in it; rows below, at and far past the 64 lanes.
    let cases = [
        (r#""softmax_type":"Sparse""#, vec![1, 1], 3.0),
        (r#""softmax_type":"Sparse""#, vec![1, 6], 1.0),
        (r#""softmax_type":"Sparse""#, vec![3, 50], 4.0),
        (r#""softmax_type":"Sparse""#, vec![2, 64], 0.01),
        (r#""softmax_type":"Sparse""#, vec![1, 5003], 12.0),
        (r#""softmax_type":"Sparse""#, vec![1, 32000], 0.5),
        (r#""softmax_type":"Entmax""#, vec![1, 7], 2.0),
        (r#""softmax_type":"Entmax","entmax_alpha":1.2"#, vec![4, 33], 3.0),
        (r#""softmax_type":"Entmax","entmax_alpha":2"#, vec![1, 129], 1.0),
        (r#""softmax_type":"Entmax","entmax_alpha":1.7"#, vec![1, 10000], 6.0),
    ];
    for (kind, shape, range) in cases {
        let net = one_layer(&format!(r#""type":"Softmax","activation":"Linear",{kind}"#));
        let n: usize = shape.iter().product();
        let x = data(n as u64, n, -range, range);
        let want = cpu(&net, &x, &shape);
        let got = sm
            .forward(gpu, &net.layers[0], &Tensor::new(x, shape.clone()).unwrap())
            .await
            .unwrap();
        assert_eq!(got.shape, want.shape);
        close(
            &format!("{kind} {shape:?} ±{range}"),
            &got.data,
            &want.data,
            SPARSE_ABS,
            REL,
        );
        if kind.contains("Sparse") && n > 1 && range >= 1.0 {
            assert!(
                want.data.contains(&0.0),
                "{kind} {shape:?}: the case should exercise a partial support"
            );
        }
    }
    // Ties, and a row of equal values (uniform output).
    let net = one_layer(r#""type":"Softmax","softmax_type":"Sparse""#);
    for x in [vec![0.5; 9], vec![1.0, 2.0, 2.0, 0.0, 2.0, -1.0]] {
        let shape = vec![1, x.len()];
        let want = cpu(&net, &x, &shape);
        let got = sm
            .forward(gpu, &net.layers[0], &Tensor::new(x, shape.clone()).unwrap())
            .await
            .unwrap();
        close(
            &format!("Sparse ties {:?}", want.data),
            &got.data,
            &want.data,
            SPARSE_ABS,
            REL,
        );
    }
}

pub async fn encode_layer_records_rows_with_a_short_last_row(gpu: &Gpu) {
    // Grid rows of 10 over 35 values: three full rows and one of 5, in one dispatch.
    let sm = Softmax::new(gpu).unwrap();
    let net = one_layer(r#""type":"Softmax","softmax_type":"Grid","softmax_rows":3,"softmax_cols":10"#);
    let x = Tensor::new(data(5, 35, -6.0, 6.0), vec![1, 35]).unwrap();
    let want = cpu(&net, &x.data, &x.shape);
    let xg = GpuTensor::upload(gpu, &x).await.unwrap();
    let mut recorder = Recorder::new(gpu);
    let y = sm.encode_layer(&mut recorder, &net.layers[0], "layers.0", &xg).unwrap();
    recorder.submit();
    let got = y.read(gpu).await.unwrap();
    close("Grid 3×10 + 5", &got.data, &want.data, ABS, REL);
}

pub async fn gumbel_is_refused(gpu: &Gpu) {
    let sm = Softmax::new(gpu).unwrap();
    let net = one_layer(r#""type":"Softmax","softmax_type":"Gumbel""#);
    let x = Tensor::new(vec![0.5; 4], vec![1, 4]).unwrap();
    let err = sm.forward(gpu, &net.layers[0], &x).await.unwrap_err();
    assert!(matches!(err, LoomError::Unsupported(_)), "{err:?}");
}
