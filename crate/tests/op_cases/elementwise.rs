//! `shaders/elementwise.wgsl` against its CPU twins:
//! - residual add: bit-identical to the CPU Residual (`Dense(x) + x` of a `[Dense, Residual]` Sequential), both f32;
//! - broadcast bias add: bit-identical to the f32 sum;
//! - activations: `crate::cpu::activate` (Go's f64 exp/tanh, rounded) within |gpu − cpu| ≤ 1e-6 + 1e-5·|cpu|
//!   (GELU/Tanh: the shared activation.wgsl computes tanh in f32);
//! - the SwiGLU product `silu(g)·u`: Loom's `f32((g·σ(g))·u)` in f64 within 1e-6 + 1e-5·|cpu|, and a whole SwiGLU
//!   layer composed from matvecs, bias adds and the product against `CpuModel` within 1e-5 + 1e-4·|cpu|.

use loom_wasm::cpu::activate;
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{Elementwise, Gpu, MatVec, PackedWeights, Packing, Pointwise, Recorder, Rows};
use loom_wasm::network::{f32_bytes, Activation};

use super::harness::{close, cpu, data, exact, one_layer};
use super::{output, upload};

on_each_device!(
    residual_add_is_bit_identical_to_the_cpu_residual,
    bias_add_broadcasts_rows_exactly,
    grid_splits_past_the_workgroup_limit,
    activations_match_cpu_activate,
    swiglu_product_matches_loom_rounding,
    swiglu_rows_of_a_fused_gate_up_match_the_split_product,
    geglu_product_matches_the_tanh_gelu,
    a_swiglu_layer_composed_on_the_gpu_matches_the_cpu_layer,
);

pub async fn residual_add_is_bit_identical_to_the_cpu_residual(gpu: &Gpu) {
    let ew = Elementwise::new(gpu).unwrap();
    for (n, batch) in [(1, 1), (37, 3), (256, 2), (1000, 5)] {
        let dense = format!(r#""type":"Dense","activation":"Tanh","input_height":{n},"output_height":{n}"#);
        let seq = format!(
            r#""type":"Sequential","sequential_layers":[{{{dense}}},{{"type":"Residual","activation":"Linear"}}]"#
        );
        let x = data(n as u64, batch * n, -3.0, 3.0);
        let d = cpu(&one_layer(&dense), &x, &[batch, n]);
        let want = cpu(&one_layer(&seq), &x, &[batch, n]);
        let got = ew.add(gpu, &d.data, &x).await.unwrap();
        exact(&format!("residual {batch}×{n}"), &got, &want.data);
    }
}

pub async fn bias_add_broadcasts_rows_exactly(gpu: &Gpu) {
    let ew = Elementwise::new(gpu).unwrap();
    for (rows, width) in [(1, 1), (3, 37), (17, 257), (7, 10001)] {
        let a = data(1, rows * width, -1.0, 1.0);
        let b = data(2, width, -1.0, 1.0);
        let want: Vec<f32> = a.iter().enumerate().map(|(i, v)| v + b[i % width]).collect();
        let got = ew.add(gpu, &a, &b).await.unwrap();
        exact(&format!("bias add {rows}×{width}"), &got, &want);
        // The in-place form used after matvecs.
        let yb = upload(gpu, "y", &a).await;
        let bb = upload(gpu, "b", &b).await;
        let mut recorder = Recorder::new(gpu);
        let (y, b) = (
            Rows::new(&yb, rows as u32, width as u32),
            Rows::new(&bb, 1, width as u32),
        );
        ew.encode_add_inplace(&mut recorder, y, b).unwrap();
        recorder.submit();
        let got = gpu.read_f32(&yb).await.unwrap();
        exact(&format!("bias add in place {rows}×{width}"), &got, &want);
    }
}

pub async fn grid_splits_past_the_workgroup_limit(gpu: &Gpu) {
    // 65535 × 256 lanes is the most one grid row holds; 17M values need a second row of workgroups.
    let ew = Elementwise::new(gpu).unwrap();
    let n = 65535 * 256 + 1001;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b = [0.5f32, -0.25, 2.0];
    let got = ew.add(gpu, &a[..n / 3 * 3], &b).await.unwrap();
    let want: Vec<f32> = a[..n / 3 * 3].iter().enumerate().map(|(i, v)| v + b[i % 3]).collect();
    assert!(got == want, "bias add over a 2-D grid");
    note!("bias add over {} values (2-D grid): bit-identical", want.len());
}

pub async fn activations_match_cpu_activate(gpu: &Gpu) {
    let ew = Elementwise::new(gpu).unwrap();
    let mut x = data(9, 4099, -8.0, 8.0);
    x.extend([0.0, -0.0, 1e-8, -1e-8, 20.0, -20.0, 1.0, -1.0]);
    for act in [
        Activation::ReLU,
        Activation::Silu,
        Activation::GELU,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::LeakyReLU,
        Activation::ReLU2,
        Activation::Linear,
    ] {
        let want: Vec<f32> = x.iter().map(|v| activate(act, *v)).collect();
        let got = ew.activate(gpu, &x, act.into()).await.unwrap();
        close(&format!("activation {act:?}"), &got, &want, 1e-6, 1e-5);
    }
}

pub async fn swiglu_product_matches_loom_rounding(gpu: &Gpu) {
    let ew = Elementwise::new(gpu).unwrap();
    for n in [1, 63, 300, 5003] {
        let g = data(n as u64, n, -6.0, 6.0);
        let u = data(3 + n as u64, n, -2.0, 2.0);
        let want: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| {
                let g = f64::from(*g);
                (g * (1.0 / (1.0 + (-g).exp())) * f64::from(*u)) as f32
            })
            .collect();
        let got = ew.swiglu(gpu, &g, &u).await.unwrap();
        close(&format!("SwiGLU product ×{n}"), &got, &want, 1e-6, 1e-5);
    }
}

/// GeGLU (Gemma's feed-forward): tanh-approximated GELU of the gate times up, against its float64 formula
/// (PyTorch's `gelu(approximate="tanh")`) and the CPU twin `cpu::ops::gelu_tanh_mul`; large gates saturate to
/// gate·up and 0 without NaN.
pub async fn geglu_product_matches_the_tanh_gelu(gpu: &Gpu) {
    let ew = Elementwise::new(gpu).unwrap();
    for n in [1, 63, 300, 5003] {
        let mut g = data(n as u64, n, -6.0, 6.0);
        g[0] = if n > 1 { 40.0 } else { -40.0 };
        let u = data(3 + n as u64, n, -2.0, 2.0);
        let want: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| {
                let g = f64::from(*g);
                let inner = (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g);
                (0.5 * g * (1.0 + inner.tanh()) * f64::from(*u)) as f32
            })
            .collect();
        let got = ew.glu(gpu, &g, &u, Pointwise::Gelu).await.unwrap();
        close(&format!("GeGLU product ×{n}"), &got, &want, 1e-6, 1e-5);
        let mut cpu = g.clone();
        loom_wasm::cpu::ops::gelu_tanh_mul(&mut cpu, &u);
        close(&format!("GeGLU CPU twin ×{n}"), &cpu, &want, 1e-6, 1e-5);
    }
}

/// The fused form (gate and up side by side in each row, as one gate|up matvec writes them) against the same
/// rounding, and bit-identical to the product of the split halves.
pub async fn swiglu_rows_of_a_fused_gate_up_match_the_split_product(gpu: &Gpu) {
    let ew = Elementwise::new(gpu).unwrap();
    for (rows, width) in [(1, 1), (1, 1536), (3, 300), (7, 257)] {
        let gate_up = data((rows * width) as u64, 2 * rows * width, -6.0, 6.0);
        let (gate, up): (Vec<f32>, Vec<f32>) = gate_up
            .chunks_exact(2 * width)
            .flat_map(|r| r[..width].iter().zip(&r[width..]).map(|(g, u)| (*g, *u)))
            .unzip();
        let want: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(g, u)| {
                let g = f64::from(*g);
                (g * (1.0 / (1.0 + (-g).exp())) * f64::from(*u)) as f32
            })
            .collect();
        let got = ew.swiglu_rows(gpu, &gate_up, width).await.unwrap();
        close(&format!("SwiGLU rows {rows}×{width}"), &got, &want, 1e-6, 1e-5);
        let split = ew.swiglu(gpu, &gate, &up).await.unwrap();
        assert_eq!(got, split, "{rows}×{width}: fused and split differ");
    }
}

/// A SwiGLU layer on the GPU: gate and up matvecs with their biases, `silu(g)·u`, the down matvec and its bias.
async fn swiglu_layer(gpu: &Gpu, w: &[f32], h: usize, i: usize, x: &[f32]) -> Vec<f32> {
    let mv = MatVec::f32(gpu).unwrap();
    let ew = Elementwise::new(gpu).unwrap();
    let rows = x.len() / h;
    let (wg, rest) = w.split_at(i * h);
    let (wu, rest) = rest.split_at(i * h);
    let (wd, rest) = rest.split_at(h * i);
    let (bg, rest) = rest.split_at(i);
    let (bu, bd) = rest.split_at(i);
    let f32_packing = Packing::Loom(loom_wasm::DType::Float32);
    let mut weights = Vec::new();
    for (v, n_in, n_out) in [(wg, h, i), (wu, h, i), (wd, i, h)] {
        weights.push(
            PackedWeights::upload(gpu, f32_packing, &f32_bytes(v), 1.0, n_in, n_out)
                .await
                .unwrap(),
        );
    }
    let (wgb, wub, wdb) = (&weights[0], &weights[1], &weights[2]);
    let (xb, bgb, bub, bdb) = (
        upload(gpu, "x", x).await,
        upload(gpu, "bg", bg).await,
        upload(gpu, "bu", bu).await,
        upload(gpu, "bd", bd).await,
    );
    let (gb, ub, pb, yb) = (
        output(gpu, "g", rows * i).await,
        output(gpu, "u", rows * i).await,
        output(gpu, "p", rows * i).await,
        output(gpu, "y", rows * h).await,
    );
    let (h32, i32_, r32) = (h as u32, i as u32, rows as u32);
    let lin = Activation::Linear.into();
    let mut recorder = Recorder::new(gpu);
    let (x, y) = (Rows::new(&xb, r32, h32), Rows::new(&yb, r32, h32));
    let (g, u, p) = (
        Rows::new(&gb, r32, i32_),
        Rows::new(&ub, r32, i32_),
        Rows::new(&pb, r32, i32_),
    );
    let bias = |b| Rows::new(b, 1, i32_);
    mv.encode(&mut recorder, x, wgb, g, lin).unwrap();
    ew.encode_add_inplace(&mut recorder, g, bias(&bgb)).unwrap();
    mv.encode(&mut recorder, x, wub, u, lin).unwrap();
    ew.encode_add_inplace(&mut recorder, u, bias(&bub)).unwrap();
    ew.encode_swiglu(&mut recorder, g, u, p).unwrap();
    mv.encode(&mut recorder, p, wdb, y, lin).unwrap();
    ew.encode_add_inplace(&mut recorder, y, Rows::new(&bdb, 1, h32))
        .unwrap();
    recorder.submit();
    let mut y = gpu.read_f32(&yb).await.unwrap();
    y.truncate(rows * h);
    y
}

pub async fn a_swiglu_layer_composed_on_the_gpu_matches_the_cpu_layer(gpu: &Gpu) {
    for (h, i, rows) in [(8, 12, 1), (33, 70, 3), (64, 172, 4)] {
        let net = one_layer(&format!(
            r#""type":"SwiGLU","activation":"Linear","input_height":{h},"output_height":{i}"#
        ));
        let w = net.layers[0].weights.as_ref().unwrap().master_values();
        let x = data(h as u64, rows * h, -2.0, 2.0);
        let want = cpu(&net, &x, &[rows, h]);
        let got = swiglu_layer(gpu, &w, h, i, &x).await;
        close(
            &format!("SwiGLU layer {h}→{i}→{h} ×{rows}"),
            &got,
            &want.data,
            1e-5,
            1e-4,
        );
    }
    // A Loom-written SwiGLU layer.
    let text = testdata!("conformance/cases/layer_SwiGLU_float32/loom.json");
    let net = loom_json::read(text.as_bytes()).unwrap();
    let l = &net.layers[0];
    let (h, i) = (l.input_height as usize, l.output_height as usize);
    let x = data(5, 2 * h, -1.0, 1.0);
    let want = cpu(&net, &x, &[2, h]);
    let got = swiglu_layer(gpu, &l.weights.as_ref().unwrap().master_values(), h, i, &x).await;
    close("Loom SwiGLU layer ×2", &got, &want.data, 1e-5, 1e-4);
}
