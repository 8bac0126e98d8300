//! `shaders/softmax.wgsl` against its CPU twin, `CpuModel` forward of a Softmax layer (f32 with Go's exp), natively
//! through wgpu → Vulkan (Mesa lavapipe), and against Loom's own outputs for the corpus layers. The GPU's f32 `exp`
//! differs by a few ulp: |gpu − cpu| ≤ 1e-7 + 1e-5·|cpu|. Sparsemax and entmax: |gpu − cpu| ≤ 1e-6 + 1e-5·|cpu|, as
//! the threshold τ = (Σ_support x − 1)/k comes from a tree sum where the CPU sums the sorted values in order, and
//! every output x − τ inherits τ's rounding (about an ulp of the support's sum).
#![cfg(not(target_arch = "wasm32"))]

mod gpu_corpus;
mod gpu_util;

use gpu_util::{close, cpu, data, gpu, one_layer, testdata};
use loom_wasm::cpu::Tensor;
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::Recorder;
use loom_wasm::gpu::{GpuTensor, Softmax};
use loom_wasm::LoomError;

const ABS: f32 = 1e-7;
const REL: f32 = 1e-5;
const SPARSE_ABS: f32 = 1e-6;

#[test]
fn softmax_layers_match_the_cpu() {
    let gpu = gpu();
    let sm = Softmax::new(&gpu).unwrap();
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
        let got =
            pollster::block_on(sm.forward(&gpu, &net.layers[0], &Tensor::new(x, shape.clone()).unwrap())).unwrap();
        assert_eq!(got.shape, want.shape);
        close(&format!("softmax {kind} {shape:?}"), &got.data, &want.data, ABS, REL);
    }
}

#[test]
fn loom_written_softmax_layers_match() {
    let gpu = gpu();
    let sm = Softmax::new(&gpu).unwrap();
    for case in [
        "softmax_Standard",
        "softmax_Grid",
        "softmax_Temperature",
        "softmax_Hierarchical",
    ] {
        let net = loom_json::read(testdata(&format!("conformance/cases/{case}/loom.json")).as_bytes()).unwrap();
        let x = data(11, 6, -3.0, 3.0);
        let want = cpu(&net, &x, &[1, 6]);
        let got = pollster::block_on(sm.forward(&gpu, &net.layers[0], &Tensor::new(x, vec![1, 6]).unwrap())).unwrap();
        close(case, &got.data, &want.data, ABS, REL);
    }
}

#[test]
fn sparsemax_and_entmax_match_the_cpu() {
    let gpu = gpu();
    let sm = Softmax::new(&gpu).unwrap();
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
        let got =
            pollster::block_on(sm.forward(&gpu, &net.layers[0], &Tensor::new(x, shape.clone()).unwrap())).unwrap();
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
        let got =
            pollster::block_on(sm.forward(&gpu, &net.layers[0], &Tensor::new(x, shape.clone()).unwrap())).unwrap();
        close(
            &format!("Sparse ties {:?}", want.data),
            &got.data,
            &want.data,
            SPARSE_ABS,
            REL,
        );
    }
}

#[test]
fn loom_written_softmax_cases_match_loom() {
    // Every corpus Softmax case with Loom's own input and output (Sparse and Entmax included).
    let gpu = gpu();
    let sm = Softmax::new(&gpu).unwrap();
    let cases: Vec<_> = [
        gpu_corpus::corpus("conformance", &["softmax_"]),
        gpu_corpus::corpus("loom-extra", &["softmax_"]),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(cases.len(), 9 + 5);
    for case in &cases {
        let x = Tensor::new(case.input.clone(), case.shape.clone()).unwrap();
        let got = pollster::block_on(sm.forward(&gpu, &case.net.layers[0], &x)).unwrap();
        gpu_corpus::check(case, &got, SPARSE_ABS, REL);
    }
}

#[test]
fn encode_layer_records_rows_with_a_short_last_row() {
    // Grid rows of 10 over 35 values: three full rows and one of 5, in one dispatch.
    let gpu = gpu();
    let sm = Softmax::new(&gpu).unwrap();
    let net = one_layer(r#""type":"Softmax","softmax_type":"Grid","softmax_rows":3,"softmax_cols":10"#);
    let x = Tensor::new(data(5, 35, -6.0, 6.0), vec![1, 35]).unwrap();
    let want = cpu(&net, &x.data, &x.shape);
    let got = pollster::block_on(async {
        let xg = GpuTensor::upload(&gpu, &x).await?;
        let mut recorder = Recorder::new(&gpu);
        let y = sm.encode_layer(&mut recorder, &net.layers[0], "layers.0", &xg)?;
        recorder.submit();
        y.read(&gpu).await
    })
    .unwrap();
    close("Grid 3×10 + 5", &got.data, &want.data, ABS, REL);
}

#[test]
fn gumbel_is_refused() {
    let gpu = gpu();
    let sm = Softmax::new(&gpu).unwrap();
    let net = one_layer(r#""type":"Softmax","softmax_type":"Gumbel""#);
    let x = Tensor::new(vec![0.5; 4], vec![1, 4]).unwrap();
    let err = pollster::block_on(sm.forward(&gpu, &net.layers[0], &x)).unwrap_err();
    assert!(matches!(err, LoomError::Unsupported(_)), "{err:?}");
}
