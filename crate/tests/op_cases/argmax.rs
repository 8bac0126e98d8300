//! `shaders/argmax.wgsl` against its CPU twin `loom_wasm::gpu::first_argmax` (the first index of the largest value,
//! NaN never winning). Exact: the same index for every row.

use loom_wasm::gpu::{first_argmax, Argmax, Gpu};

use super::harness::data;

on_each_device!(
    argmax_matches_the_cpu_twin,
    ties_nan_and_infinities,
    long_rows_in_slices
);

pub async fn argmax_matches_the_cpu_twin(gpu: &Gpu) {
    let am = Argmax::new(gpu).unwrap();
    for (rows, n) in [
        (1, 1),
        (1, 63),
        (3, 64),
        (5, 65),
        (2, 32000),
        (70, 129),
        (1, 4097),
        (1, 151_936),
        (1, 262_144),
    ] {
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

/// One row past a workgroup's (a decode step's logits) is picked in slices of 2,048 and a final pick: ties across
/// slices keep the lower index, NaN and −∞ never win whichever slice holds them, a row of nothing but them gives 0.
pub async fn long_rows_in_slices(gpu: &Gpu) {
    let am = Argmax::new(gpu).unwrap();
    let n = 3 * 2048 + 100;
    let mut rows: Vec<Vec<f32>> = Vec::new();
    // The largest value at 5000 (slice 2), 2100 (slice 1) and 6200 (the last, short slice): 2100.
    let mut tied = vec![-1.0; n];
    for i in [5000, 2100, 6200] {
        tied[i] = 7.5;
    }
    rows.push(tied);
    // Slice 0 all NaN, slice 1 all −∞, the best in slice 2, NaN after it.
    rows.push(
        (0..n)
            .map(|i| match i {
                0..2048 => f32::NAN,
                2048..4096 => f32::NEG_INFINITY,
                4500 => 3.0,
                i if i > 4500 && i % 3 == 0 => f32::NAN,
                _ => -2.0,
            })
            .collect(),
    );
    rows.push(vec![f32::NAN; n]);
    rows.push(vec![f32::NEG_INFINITY; n]);
    rows.push(vec![0.25; n]);
    // +∞ in the last slice beats everything before it.
    let mut inf = vec![1e30; n];
    inf[n - 1] = f32::INFINITY;
    rows.push(inf);
    let want: Vec<u32> = rows.iter().map(|r| first_argmax(r)).collect();
    assert_eq!(want, [2100, 4500, 0, 0, 0, n as u32 - 1]);
    for (row, want) in rows.iter().zip(want) {
        assert_eq!(am.run(gpu, row, n).await.unwrap(), [want]);
    }
    // Past 256 slices a lane of the final pick takes several: slices 1 and 257 (one lane's) tie.
    let n = 257 * 2048 + 10;
    let mut row = vec![0.0; n];
    row[257 * 2048 + 5] = 2.0;
    row[2048 + 5] = 2.0;
    assert_eq!(am.run(gpu, &row, n).await.unwrap(), [2048 + 5]);
}
