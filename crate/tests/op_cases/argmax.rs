//! `shaders/argmax.wgsl` against its CPU twin `loom_wasm::gpu::first_argmax` (the first index of the largest value,
//! NaN never winning). Exact: the same index for every row.

use loom_wasm::gpu::{first_argmax, Argmax, Gpu};

use super::harness::data;

on_each_device!(argmax_matches_the_cpu_twin, ties_nan_and_infinities);

pub async fn argmax_matches_the_cpu_twin(gpu: &Gpu) {
    let am = Argmax::new(gpu).unwrap();
    for (rows, n) in [(1, 1), (1, 63), (3, 64), (5, 65), (2, 32000), (70, 129), (1, 151_936)] {
        let x = data((rows * n) as u64, rows * n, -10.0, 10.0);
        let want: Vec<u32> = x.chunks(n).map(first_argmax).collect();
        let got = am.run(gpu, &x, n).await.unwrap();
        assert_eq!(got, want, "{rows}×{n}");
        note!("argmax {rows}×{n}: identical");
    }
}

pub async fn ties_nan_and_infinities(gpu: &Gpu) {
    let am = Argmax::new(gpu).unwrap();
    let inf = f32::INFINITY;
    let n = 200;
    let mut rows: Vec<Vec<f32>> = vec![
        vec![1.0; n],                             // all tied: 0
        vec![f32::NEG_INFINITY; n],               // nothing beats −∞: 0
        vec![f32::NAN; n],                        // NaN never wins: 0
        (0..n).map(|i| (i % 7) as f32).collect(), // max 6 first at 6, repeated in every lane
        (0..n).map(|i| if i == 150 || i == 190 { inf } else { 0.0 }).collect(),
        (0..n)
            .map(|i| if i % 2 == 0 { f32::NAN } else { -(i as f32) })
            .collect(),
        (0..n)
            .map(|i| {
                if i == 3 {
                    -0.0
                } else if i == 100 {
                    0.0
                } else {
                    -1.0
                }
            })
            .collect(),
    ];
    rows[2][199] = 5.0;
    let x: Vec<f32> = rows.concat();
    let want: Vec<u32> = rows.iter().map(|r| first_argmax(r)).collect();
    assert_eq!(want, [0, 0, 199, 6, 150, 1, 3]);
    let got = am.run(gpu, &x, n).await.unwrap();
    assert_eq!(got, want);
}
