//! `shaders/softmax.wgsl` against its CPU twin, `CpuModel` forward of a Softmax layer (f32 with Go's exp), natively
//! through wgpu → Vulkan (Mesa lavapipe). The GPU's f32 `exp` differs by a few ulp: |gpu − cpu| ≤ 1e-7 + 1e-5·|cpu|.
#![cfg(not(target_arch = "wasm32"))]

mod gpu_util;

use gpu_util::{close, cpu, data, gpu, one_layer, testdata};
use loom_wasm::cpu::Tensor;
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::Softmax;
use loom_wasm::LoomError;

const ABS: f32 = 1e-7;
const REL: f32 = 1e-5;

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
fn sort_based_softmaxes_are_refused() {
    let gpu = gpu();
    let sm = Softmax::new(&gpu).unwrap();
    for kind in ["Sparse", "Entmax", "Gumbel"] {
        let net = one_layer(&format!(r#""type":"Softmax","softmax_type":"{kind}""#));
        let x = Tensor::new(vec![0.5; 4], vec![1, 4]).unwrap();
        let err = pollster::block_on(sm.forward(&gpu, &net.layers[0], &x)).unwrap_err();
        assert!(matches!(err, LoomError::Unsupported(_)), "{kind}: {err:?}");
    }
}
