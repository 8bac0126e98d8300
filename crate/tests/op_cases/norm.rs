//! `shaders/norm.wgsl` (RMSNorm, LayerNorm, the fused residual add + RMSNorm) against its CPU twins: `CpuModel`
//! forward of one norm layer, f64 references of the formulas, and `ops::add` + `ops::rms_norm_into`. The CPU's
//! statistics are f64 and the GPU's f32 tree sums, so results agree within |gpu − cpu| ≤ 1e-5 + 1e-4·|cpu|
//! (measured errors are printed; they are near 1e-6 relative).

use loom_wasm::cpu::{ops, Tensor};
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{Gpu, Norm, Recorder, Rows};

use super::harness::{close, cpu, data, one_layer, with_weights};
use super::{output, upload};

const ABS: f32 = 1e-5;
const REL: f32 = 1e-4;

on_each_device!(
    rms_and_layer_norm_match_the_cpu_layers,
    loom_written_norm_layers_match,
    per_head_gamma_rows_and_one_shot_helpers,
    add_then_rms_norm_matches_the_cpu_ops,
);

pub async fn rms_and_layer_norm_match_the_cpu_layers(gpu: &Gpu) {
    let norm = Norm::new(gpu).unwrap();
    // Row lengths below, at and past the 64-lane workgroup, odd ones, and a long row; several rows each.
    for (n, rows) in [(1, 3), (5, 1), (7, 4), (64, 2), (65, 3), (300, 5), (4096, 2)] {
        for ty in ["RMSNorm", "LayerNorm"] {
            let params = if ty == "RMSNorm" { n } else { 2 * n };
            let net = one_layer(&format!(r#""type":"{ty}","activation":"Linear","input_height":{n}"#));
            // γ around 1, β small, inputs with an offset so that LayerNorm's mean matters.
            let mut w = data(n as u64, params, 0.5, 1.5);
            if ty == "LayerNorm" {
                w[n..].copy_from_slice(&data(7 + n as u64, n, -0.2, 0.2));
            }
            let net = with_weights(net, w);
            let x = data(100 + n as u64, rows * n, -2.0, 3.0);
            let shape = [rows, n];
            let want = cpu(&net, &x, &shape);
            let got = norm
                .forward(gpu, &net.layers[0], &Tensor::new(x, shape.to_vec()).unwrap())
                .await
                .unwrap();
            assert_eq!(got.shape, want.shape);
            close(&format!("{ty} {rows}×{n}"), &got.data, &want.data, ABS, REL);
        }
    }
}

pub async fn loom_written_norm_layers_match(gpu: &Gpu) {
    let norm = Norm::new(gpu).unwrap();
    // Loom-written layers, float32 and quantized (the GPU gets the dequantized γ, as the CPU forward does).
    for (case, text) in [
        (
            "RMSNorm float32",
            testdata!("conformance/cases/layer_RMSNorm_float32/loom.json"),
        ),
        (
            "RMSNorm int8",
            testdata!("conformance/cases/layer_RMSNorm_int8/loom.json"),
        ),
        (
            "RMSNorm fp4",
            testdata!("conformance/cases/layer_RMSNorm_fp4/loom.json"),
        ),
        (
            "LayerNorm float32",
            testdata!("conformance/cases/layer_LayerNorm_float32/loom.json"),
        ),
        (
            "LayerNorm int8",
            testdata!("conformance/cases/layer_LayerNorm_int8/loom.json"),
        ),
        (
            "LayerNorm bfloat16",
            testdata!("conformance/cases/layer_LayerNorm_bfloat16/loom.json"),
        ),
    ] {
        let net = loom_json::read(text.as_bytes()).unwrap();
        for shape in [vec![1, 5], vec![3, 5]] {
            let x = data(3, shape.iter().product(), -1.0, 1.0);
            let want = cpu(&net, &x, &shape);
            let got = norm
                .forward(gpu, &net.layers[0], &Tensor::new(x, shape.clone()).unwrap())
                .await
                .unwrap();
            close(&format!("Loom {case} {shape:?}"), &got.data, &want.data, ABS, REL);
        }
    }
}

pub async fn per_head_gamma_rows_and_one_shot_helpers(gpu: &Gpu) {
    let norm = Norm::new(gpu).unwrap();
    // run_rms / run_layer against an f64 reference of the CPU formulas.
    let (n, rows) = (33, 7);
    let x = data(1, n * rows, -4.0, 4.0);
    let g = data(2, n, 0.5, 2.0);
    let b = data(3, n, -1.0, 1.0);
    let rms_ref: Vec<f32> = x
        .chunks(n)
        .flat_map(|r| {
            let ss: f64 = r.iter().map(|v| f64::from(*v) * f64::from(*v)).sum();
            let rms = (ss / n as f64 + 1e-6).sqrt();
            r.iter()
                .zip(&g)
                .map(move |(v, g)| (f64::from(*v) / rms * f64::from(*g)) as f32)
        })
        .collect();
    let got = norm.run_rms(gpu, &x, &g, 1e-6).await.unwrap();
    close("run_rms 7×33", &got, &rms_ref, ABS, REL);
    let ln_ref: Vec<f32> = x
        .chunks(n)
        .flat_map(|r| {
            let mean = r.iter().map(|v| f64::from(*v)).sum::<f64>() / n as f64;
            let var = r.iter().map(|v| (f64::from(*v) - mean).powi(2)).sum::<f64>() / n as f64;
            let inv = (var + 1e-5).sqrt();
            r.iter()
                .zip(g.iter().zip(&b))
                .map(move |(v, (g, b))| ((f64::from(*v) - mean) / inv * f64::from(*g) + f64::from(*b)) as f32)
        })
        .collect();
    let got = norm.run_layer(gpu, &x, &g, &b, 1e-5).await.unwrap();
    close("run_layer 7×33", &got, &ln_ref, ABS, REL);

    // gamma_rows > 1 (MHA's per-head Q/K norms): row r uses γ row r % gamma_rows.
    let (heads, hd, tokens) = (3usize, 8usize, 5usize);
    let x = data(4, tokens * heads * hd, -1.0, 1.0);
    let gamma = data(5, heads * hd, 0.5, 1.5);
    let want: Vec<f32> = x
        .chunks(hd)
        .enumerate()
        .flat_map(|(r, row)| {
            let ss: f64 = row.iter().map(|v| f64::from(*v) * f64::from(*v)).sum();
            let inv = 1.0 / (ss / hd as f64 + 1e-6).sqrt();
            let g = &gamma[(r % heads) * hd..(r % heads + 1) * hd];
            row.iter()
                .zip(g)
                .map(move |(v, g)| (f64::from(*v) * inv * f64::from(*g)) as f32)
        })
        .collect();
    let xb = upload(gpu, "x", &x).await;
    let gb = upload(gpu, "g", &gamma).await;
    let yb = output(gpu, "y", x.len()).await;
    let mut recorder = Recorder::new(gpu);
    let rows = (tokens * heads) as u32;
    let (xr, yr) = (Rows::new(&xb, rows, hd as u32), Rows::new(&yb, rows, hd as u32));
    norm.encode_rms(&mut recorder, xr, &gb, yr, heads as u32, 1e-6).unwrap();
    recorder.submit();
    let got = gpu.read_f32(&yb).await.unwrap();
    close("per-head RMSNorm 5×3×8", &got[..x.len()], &want, ABS, REL);
}

/// The fused residual add and RMSNorm (`h += x`, then RMSNorm of `h`) against its CPU twin, `ops::add` then
/// `ops::rms_norm_into`: both the updated residual and the normalised rows.
pub async fn add_then_rms_norm_matches_the_cpu_ops(gpu: &Gpu) {
    let norm = Norm::new(gpu).unwrap();
    for (n, rows) in [(1, 2), (7, 3), (64, 1), (65, 2), (576, 4), (4096, 1)] {
        let h = data(11 + n as u64, rows * n, -2.0, 2.0);
        let x = data(13 + n as u64, rows * n, -1.0, 1.0);
        let gamma = data(17 + n as u64, n, 0.5, 1.5);
        let mut want_h = h.clone();
        ops::add(&mut want_h, &x);
        let mut want_y = vec![0.0; rows * n];
        ops::rms_norm_into(&want_h, &gamma, 1e-5, &mut want_y);

        let (hb, xb, gb) = (
            upload(gpu, "h", &h).await,
            upload(gpu, "x", &x).await,
            upload(gpu, "gamma", &gamma).await,
        );
        let yb = output(gpu, "y", rows * n).await;
        let mut recorder = Recorder::new(gpu);
        let view = |b| Rows::new(b, rows as u32, n as u32);
        norm.encode_add_rms(&mut recorder, view(&hb), view(&xb), &gb, view(&yb), 1e-5)
            .unwrap();
        recorder.submit();
        let got_h = gpu.read_f32(&hb).await.unwrap();
        let got_y = gpu.read_f32(&yb).await.unwrap();
        close(
            &format!("h after add, {rows}×{n}"),
            &got_h[..rows * n],
            &want_h,
            0.0,
            0.0,
        );
        close(
            &format!("add + RMSNorm, {rows}×{n}"),
            &got_y[..rows * n],
            &want_y,
            ABS,
            REL,
        );
    }
}
