//! The quantized block layer against gguf-py / numpy (`testdata/ggml-blocks/gen.py`): dequantization bit for bit,
//! `matmul` within float32 accumulation error of a float64 dot, on the SIMD and portable paths with 1 and 2
//! threads; hostile shapes and types as typed errors.

use loom_wasm::quant::{self, GgmlType, QMatrix, Simd};
use loom_wasm::LoomError;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// The types with test vectors and their files (`.bin`, `.f32`, `.x.f32`, `.y.f32`), compiled in so that the
/// test also runs in WebAssembly (`tests-wasm/tests/quant.rs`).
macro_rules! vector_files {
    ($($t:ident => $name:literal),* $(,)?) => {
        const TYPES: [GgmlType; [$(GgmlType::$t),*].len()] = [$(GgmlType::$t),*];

        fn files(t: GgmlType) -> [&'static [u8]; 4] {
            match t {
                $(GgmlType::$t => [
                    include_bytes!(concat!("../../testdata/ggml-blocks/", $name, ".bin")),
                    include_bytes!(concat!("../../testdata/ggml-blocks/", $name, ".f32")),
                    include_bytes!(concat!("../../testdata/ggml-blocks/", $name, ".x.f32")),
                    include_bytes!(concat!("../../testdata/ggml-blocks/", $name, ".y.f32")),
                ],)*
                _ => panic!("no vectors for {t}"),
            }
        }
    };
}

vector_files! {
    F32 => "f32",
    F16 => "f16",
    BF16 => "bf16",
    Q4_0 => "q4_0",
    Q4_1 => "q4_1",
    Q5_0 => "q5_0",
    Q5_1 => "q5_1",
    Q8_0 => "q8_0",
    Q4_K => "q4_k",
    Q5_K => "q5_k",
    Q6_K => "q6_k",
    LoomQ4_0 => "loomq4_0",
}

const MANIFEST: &str = include_str!("../../testdata/ggml-blocks/manifest.json");

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A type's vectors from gen.py.
struct Vectors {
    rows: usize,
    cols: usize,
    bytes: Vec<u8>,
    /// `gguf.quants.dequantize` of `bytes`.
    values: Vec<f32>,
    /// Activations [tokens][cols] and numpy's float64 X·Wᵀ [tokens][rows].
    x: Vec<f32>,
    y: Vec<f32>,
}

fn vectors(t: GgmlType) -> Vectors {
    let manifest: serde_json::Value = serde_json::from_str(MANIFEST).unwrap();
    let shape = &manifest["types"][t.name().to_ascii_lowercase()];
    let [bytes, values, x, y] = files(t);
    Vectors {
        rows: shape["rows"].as_u64().unwrap() as usize,
        cols: shape["cols"].as_u64().unwrap() as usize,
        bytes: bytes.to_vec(),
        values: f32s(values),
        x: f32s(x),
        y: f32s(y),
    }
}

/// `quant::codes` over whole tensors: each code with its group's scale and min gives gguf-py's value
/// (scale·(code − zero) + min in float32); types without integer codes have none.
#[test]
fn codes_and_their_scales_give_gguf_py_values() {
    for t in TYPES {
        let v = vectors(t);
        let Some((codes, groups)) = quant::codes(t, &v.bytes, v.values.len()) else {
            assert!(matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16), "{t}");
            continue;
        };
        assert_eq!(codes.len(), v.values.len(), "{t}");
        assert_eq!(groups.iter().map(|g| g.len).sum::<usize>(), codes.len(), "{t}");
        let per_element = groups.iter().flat_map(|g| std::iter::repeat_n(g, g.len));
        for (i, ((&c, g), &want)) in codes.iter().zip(per_element).zip(&v.values).enumerate() {
            let value = g.scale * (c - g.zero) as f32 + g.min;
            assert!(value == want, "{t} element {i}: code {c} gives {value}, gguf-py {want}");
        }
        // A prefix: its codes, and the groups that cover them.
        let (codes, groups) = quant::codes(t, &v.bytes, 40).unwrap();
        assert_eq!(codes.len(), 40, "{t}");
        assert_eq!(groups.len(), 40usize.div_ceil(groups[0].len), "{t}");
    }
}

/// `quant::dequantize` of every type's vectors against gguf-py, bit for bit.
fn check_dequantize(simd: Simd) {
    for t in TYPES {
        let v = vectors(t);
        assert_eq!(v.values.len(), v.rows * v.cols, "{t}");
        let mut ours = vec![f32::NAN; v.values.len()];
        quant::dequantize(t, &v.bytes, &mut ours).unwrap();
        let mismatches = ours
            .iter()
            .zip(&v.values)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            mismatches, 0,
            "{t} (simd {simd:?}): {mismatches} values differ from gguf-py"
        );
    }
}

/// The matrix with each row repeated `times` (rows stay outside truth: their expected values are repeated too),
/// so that rows split into several tasks and tiles with a remainder.
fn repeated(v: &Vectors, times: usize) -> (Vec<u8>, Vec<f32>, usize) {
    let row_bytes = v.bytes.len() / v.rows;
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    for (row, vals) in v.bytes.chunks_exact(row_bytes).zip(v.values.chunks_exact(v.cols)) {
        for _ in 0..times {
            bytes.extend_from_slice(row);
            values.extend_from_slice(vals);
        }
    }
    (bytes, values, v.rows * times)
}

/// The vectors with each row's columns repeated `times` (the activations too), so that a row has blocks in
/// several groups of the kernels' unrolled loops and a remainder: numpy's products are summed `times` over, so
/// `times · y`. The original rows are 3 blocks long, so each group of 4 blocks mixes different blocks.
fn widened(v: &Vectors, times: usize) -> Vectors {
    let tile =
        |values: &[u8], len: usize| -> Vec<u8> { values.chunks_exact(len).flat_map(|row| row.repeat(times)).collect() };
    let tile_f32 = |values: &[f32], len: usize| -> Vec<f32> {
        values.chunks_exact(len).flat_map(|row| row.repeat(times)).collect()
    };
    Vectors {
        rows: v.rows,
        cols: v.cols * times,
        bytes: tile(&v.bytes, v.bytes.len() / v.rows),
        values: tile_f32(&v.values, v.cols),
        x: tile_f32(&v.x, v.cols),
        y: v.y.iter().map(|y| y * times as f32).collect(),
    }
}

/// `n` rows of `len` values: the rows of `values` over and over.
fn cycled(values: &[f32], len: usize, n: usize) -> Vec<f32> {
    values.chunks_exact(len).cycle().take(n).flatten().copied().collect()
}

/// Whether `quant::matmul` may round the activations to 16 bits per block of 32: decode (one token) over a
/// quantized type with WebAssembly simd128 or AVX-512 (F and BW); with AVX2 alone, over the types it has a 16-bit
/// decode kernel for; prefill over a quantized type with simd128, AVX2 or AVX-512.
fn sixteen_bit_activations(t: GgmlType, n: usize) -> bool {
    let quantized = !matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    let avx2_decode = matches!(
        t,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q8_0
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
    );
    match quant::simd_in_use() {
        "avx512" | "avx512-vnni" | "simd128" => quantized,
        "avx2" => {
            if n == 1 {
                avx2_decode
            } else {
                quantized
            }
        }
        _ => false,
    }
}

/// `y` against numpy's float64 values within float32 accumulation error: 1e-5·Σ|w·x| + 1e-6 per element, plus,
/// where the activations are rounded to 16 bits, what that rounding can move a dot: half a step of each block's
/// scale (its largest |x| / 32767) times the block's Σ|w|.
fn check_matmul(what: &str, values: &[f32], cols: usize, x: &[f32], want: &[f32], y: &[f32], x16: bool) {
    let rows = values.len() / cols;
    let n = x.len() / cols;
    for tok in 0..n {
        for r in 0..rows {
            let xs = &x[tok * cols..(tok + 1) * cols];
            let ws = &values[r * cols..(r + 1) * cols];
            let magnitude: f64 = ws.iter().zip(xs).map(|(w, x)| f64::from(w * x).abs()).sum();
            let rounding: f64 = if x16 {
                ws.chunks(32)
                    .zip(xs.chunks(32))
                    .map(|(w, x)| {
                        let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                        w.iter().map(|v| f64::from(v.abs())).sum::<f64>() * f64::from(max) / 32767.0 / 2.0
                    })
                    .sum()
            } else {
                0.0
            };
            let (got, exp) = (y[tok * rows + r], want[tok * rows + r]);
            let err = (f64::from(got) - f64::from(exp)).abs();
            assert!(
                err <= 1e-5 * magnitude + 1e-6 + rounding,
                "{what}: y[{tok}][{r}] = {got}, numpy {exp} (Σ|w·x| = {magnitude}, 16-bit rounding ≤ {rounding})"
            );
        }
    }
}

/// Q6_K's largest scaled codes (`q − 32 = −32` times the int8 scale −128, value 4096·d) against activations of
/// one magnitude (each rounded to ±32767): 16 of those products nearly fill a 32-bit integer sum, so a kernel that
/// summed more of them in 32 bits would wrap. Decode and prefill, on 8 rows of 2 super-blocks.
fn check_largest_q6_k_products(what: &str) {
    let mut block = [0u8; 210];
    block[192..208].fill(0x80);
    // d = 1.0 (float16 0x3C00), last in the block.
    block[208..].copy_from_slice(&[0x00, 0x3C]);
    let (rows, cols) = (8, 512);
    let bytes = block.repeat(rows * cols / 256);
    let w = QMatrix::new(GgmlType::Q6_K, rows, cols, &bytes).unwrap();
    for n in [1, 37] {
        // Token t: every value ±0.5, the sign alternating with t; each row's dot is ±512·4096·0.5.
        let x: Vec<f32> = (0..n).flat_map(|t| [0.5 - (t % 2) as f32; 512]).collect();
        let mut y = vec![f32::NAN; n * rows];
        quant::matmul(&w, &x, n, &mut y).unwrap();
        for (i, &got) in y.iter().enumerate() {
            let want = 512.0 * 4096.0 * (0.5 - (i / rows % 2) as f32);
            assert!(
                (got - want).abs() <= 1e-5 * want.abs(),
                "{what}, n = {n}: y[{i}] = {got}, want {want}"
            );
        }
    }
}

/// Every path against gguf-py and numpy: dequantization, then matmul with 1 and 2 threads, decode (n = 1) and
/// prefill (n = 5 and 37), on the vectors, on their rows repeated 37 times and on their columns repeated 5 times; SIMD
/// and portable. One test, since the
/// switches are process-wide.
#[test]
fn every_path_matches_gguf_py_and_numpy() {
    let mut paths = Vec::new();
    for simd in [Simd::All, Simd::Avx512, Simd::Avx2, Simd::None] {
        quant::set_simd(simd);
        let path = quant::simd_in_use();
        match simd {
            Simd::None => assert_eq!(path, "portable"),
            Simd::Avx2 => assert!(!path.starts_with("avx512")),
            Simd::Avx512 => assert_ne!(path, "avx512-vnni"),
            Simd::All => {}
        }
        paths.push(path);
        check_dequantize(simd);
        check_largest_q6_k_products(&format!("simd {simd:?}"));
        for threads in [1, 2] {
            quant::set_threads(threads).unwrap();
            check_interleaved(&format!("simd {simd:?}, {threads} threads"));
            for (t, wide) in TYPES.into_iter().flat_map(|t| [(t, 1), (t, 5)]) {
                let v = widened(&vectors(t), wide);
                let tokens = v.x.len() / v.cols;
                assert_eq!(v.y.len(), tokens * v.rows);
                let what = |n: usize, times: usize| {
                    format!("{t} n = {n}, rows ×{times}, columns ×{wide}, simd {simd:?}, {threads} threads")
                };
                for times in [1, 37] {
                    let (bytes, values, rows) = repeated(&v, times);
                    // numpy's y [tokens][v.rows] for the repeated rows.
                    let want: Vec<f32> = (0..tokens)
                        .flat_map(|tok| (0..rows).map(move |r| (tok, r / times)))
                        .map(|(tok, r)| v.y[tok * v.rows + r])
                        .collect();
                    let w = QMatrix::new(t, rows, v.cols, &bytes).unwrap();
                    check_token_counts(t, &w, &v, &values, &want, |n| what(n, times));
                }
            }
        }
    }
    quant::set_simd(Simd::All);
    quant::set_threads(0).unwrap();
    // Which kernels this machine ran: the summary says so (a CPU without AVX2 runs the portable path thrice).
    eprintln!("every_path_matches_gguf_py_and_numpy: ran the {paths:?} paths");
}

/// The types with rows interleaved by eight, and the stored types they come from.
const INTERLEAVED: [(GgmlType, GgmlType); 7] = [
    (GgmlType::Q4_0, GgmlType::Q4_0x8),
    (GgmlType::Q4_1, GgmlType::Q4_1x8),
    (GgmlType::Q5_0, GgmlType::Q5_0x8),
    (GgmlType::Q5_1, GgmlType::Q5_1x8),
    (GgmlType::Q4_K, GgmlType::Q4_Kx8),
    (GgmlType::Q5_K, GgmlType::Q5_Kx8),
    (GgmlType::Q6_K, GgmlType::Q6_Kx8),
];

/// `matmul` of `w` (of type `t`, or its interleaved type; its rows' values `values`) with the vectors' tokens cycled
/// to 1, all of them and 37 tokens (two groups of 16 and a remainder), against numpy's `want` (`[tokens][rows]`).
fn check_token_counts(
    t: GgmlType,
    w: &QMatrix,
    v: &Vectors,
    values: &[f32],
    want: &[f32],
    what: impl Fn(usize) -> String,
) {
    let tokens = v.x.len() / v.cols;
    for n in [1, tokens, 37] {
        let x = cycled(&v.x, v.cols, n);
        let want = cycled(want, w.rows, n);
        let mut y = vec![f32::NAN; n * w.rows];
        quant::matmul(w, &x, n, &mut y).unwrap();
        check_matmul(&what(n), values, v.cols, &x, &want, &y, sixteen_bit_activations(t, n));
    }
}

/// Q4_0, Q5_0, Q4_K and Q5_K with their rows interleaved by eight (`Q4_0x8`, …, which the AVX2 decode kernels
/// read): each row dequantizes to gguf-py's values bit for bit, and `matmul` matches numpy as the stored rows do, decode and
/// prefill. The vectors' rows cycle, so that a group holds different rows; 24 groups split into runs of 16 or 32
/// rows and a last run of 8 on two threads, and into prefill tiles of 16 and a last tile of 8.
fn check_interleaved(what: &str) {
    for (t, interleaved_type) in INTERLEAVED {
        for wide in [1, 5] {
            let v = widened(&vectors(t), wide);
            let rows = v.rows * if wide == 1 { 8 } else { 24 };
            let stored_rows = v.bytes.len() / v.rows;
            let bytes: Vec<u8> = (0..rows)
                .flat_map(|r| v.bytes.chunks_exact(stored_rows).nth(r % v.rows).unwrap())
                .copied()
                .collect();
            let values: Vec<f32> = (0..rows)
                .flat_map(|r| v.values.chunks_exact(v.cols).nth(r % v.rows).unwrap())
                .copied()
                .collect();
            let stored = QMatrix::new(t, rows, v.cols, &bytes).unwrap();
            let (ty, interleaved) = quant::interleave(&stored).unwrap();
            assert_eq!(ty, interleaved_type);
            let w = QMatrix::new(ty, rows, v.cols, &interleaved).unwrap();
            let mut row = vec![0.0; v.cols];
            for r in 0..rows {
                w.dequantize_row(r, &mut row).unwrap();
                let want = &values[r * v.cols..(r + 1) * v.cols];
                assert!(
                    row.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{ty} row {r}, {what}"
                );
            }
            let tokens = v.x.len() / v.cols;
            // numpy's y [tokens][v.rows] for the cycled rows.
            let want: Vec<f32> = (0..tokens)
                .flat_map(|tok| (0..rows).map(move |r| (tok, r % v.rows)))
                .map(|(tok, r)| v.y[tok * v.rows + r])
                .collect();
            check_token_counts(t, &w, &v, &values, &want, |n| {
                format!("{ty} n = {n}, {rows} rows, columns ×{wide}, {what}")
            });
        }
    }
}

/// What the interleaved types refuse: a matrix that is not whole groups of eight rows, interleaving another type,
/// and dequantizing their bytes as blocks (they are not runs of a row's blocks).
#[test]
fn interleaved_types_refuse_what_they_cannot_hold() {
    let invalid = |r: loom_wasm::Result<QMatrix>| matches!(r, Err(LoomError::InvalidInput(_)));
    for (t, interleaved) in INTERLEAVED {
        let v = vectors(t);
        assert!(invalid(QMatrix::new(interleaved, v.rows, v.cols, &v.bytes)));
        let stored = QMatrix::new(t, v.rows, v.cols, &v.bytes).unwrap();
        assert!(matches!(quant::interleave(&stored), Err(LoomError::InvalidInput(_))));
        let mut out = vec![0.0; t.block_len()];
        assert!(matches!(
            quant::dequantize(interleaved, &v.bytes[..t.block_bytes()], &mut out),
            Err(LoomError::InvalidInput(_))
        ));
    }
    let q8_0 = vectors(GgmlType::Q8_0);
    // Eight rows: the seven, and the first again.
    let eight = [&q8_0.bytes[..], &q8_0.bytes[..q8_0.bytes.len() / q8_0.rows]].concat();
    let q8_0 = QMatrix::new(GgmlType::Q8_0, 8, q8_0.cols, &eight).unwrap();
    assert!(matches!(quant::interleave(&q8_0), Err(LoomError::InvalidInput(_))));
}

#[test]
fn dequantize_row_is_a_row_of_gguf_py_values() {
    for t in TYPES {
        let v = vectors(t);
        let w = QMatrix::new(t, v.rows, v.cols, &v.bytes).unwrap();
        let mut row = vec![0.0; v.cols];
        for r in 0..v.rows {
            w.dequantize_row(r, &mut row).unwrap();
            let want = &v.values[r * v.cols..(r + 1) * v.cols];
            assert!(
                row.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{t} row {r}"
            );
        }
        assert!(matches!(
            w.dequantize_row(v.rows, &mut row),
            Err(LoomError::InvalidInput(_))
        ));
        assert!(w.dequantize_row(0, &mut row[1..]).is_err());
    }
}

#[test]
fn hostile_shapes_and_types_are_typed_errors() {
    let v = vectors(GgmlType::Q4_1);
    let invalid = |r: loom_wasm::Result<QMatrix>| matches!(r, Err(LoomError::InvalidInput(_)));
    // Data one byte short or long, a row too many, columns not whole blocks, a row length that overflows.
    assert!(invalid(QMatrix::new(GgmlType::Q4_1, v.rows, v.cols, &v.bytes[1..])));
    assert!(invalid(QMatrix::new(
        GgmlType::Q4_1,
        v.rows,
        v.cols,
        &[v.bytes.as_slice(), &[0]].concat()
    )));
    assert!(invalid(QMatrix::new(GgmlType::Q4_1, v.rows + 1, v.cols, &v.bytes)));
    assert!(invalid(QMatrix::new(GgmlType::Q4_1, v.rows, v.cols + 1, &v.bytes)));
    assert!(invalid(QMatrix::new(GgmlType::Q4_1, usize::MAX, 32, &v.bytes)));
    assert!(invalid(QMatrix::new(GgmlType::F32, 2, usize::MAX / 2, &v.bytes)));
    // Types without kernels.
    for t in [
        GgmlType::Q2_K,
        GgmlType::IQ4_NL,
        GgmlType::Q8_1,
        GgmlType::F64,
        GgmlType::MXFP4,
    ] {
        let bytes = vec![0; t.block_bytes()];
        let unsupported = |r: loom_wasm::Result<()>| matches!(r, Err(LoomError::UnsupportedDType(_)));
        assert!(matches!(
            QMatrix::new(t, 1, t.block_len(), &bytes),
            Err(LoomError::UnsupportedDType(_))
        ));
        assert!(unsupported(quant::dequantize(t, &bytes, &mut vec![0.0; t.block_len()])));
        let forged = QMatrix {
            ty: t,
            rows: 1,
            cols: t.block_len(),
            data: &bytes,
        };
        let x = vec![1.0; t.block_len()];
        assert!(unsupported(quant::matmul(&forged, &x, 1, &mut [0.0])));
    }
    // Dequantizing: bytes not whole blocks, or an output of the wrong length.
    let mut out = vec![0.0; v.rows * v.cols];
    assert!(matches!(
        quant::dequantize(GgmlType::Q4_1, &v.bytes[3..], &mut out),
        Err(LoomError::InvalidInput(_))
    ));
    assert!(quant::dequantize(GgmlType::Q4_1, &v.bytes, &mut out[1..]).is_err());
    // matmul: x or y of the wrong length, a forged matrix whose data is short.
    let w = QMatrix::new(GgmlType::Q4_1, v.rows, v.cols, &v.bytes).unwrap();
    let mut y = vec![0.0; 2 * v.rows];
    assert!(quant::matmul(&w, &v.x[..2 * v.cols - 1], 2, &mut y).is_err());
    assert!(quant::matmul(&w, &v.x[..2 * v.cols], 2, &mut y[1..]).is_err());
    assert!(quant::matmul(&w, &v.x[..2 * v.cols], usize::MAX, &mut y).is_err());
    let forged = QMatrix { rows: v.rows + 5, ..w };
    assert!(quant::matmul(&forged, &v.x[..v.cols], 1, &mut vec![0.0; v.rows + 5]).is_err());
    // Empty shapes: no rows, no columns (every sum empty), no tokens.
    let empty = QMatrix::new(GgmlType::Q8_0, 3, 0, &[]).unwrap();
    let mut y = vec![f32::NAN; 6];
    quant::matmul(&empty, &[], 2, &mut y).unwrap();
    assert_eq!(y, vec![0.0; 6]);
    quant::matmul(
        &QMatrix::new(GgmlType::Q8_0, 0, 32, &[]).unwrap(),
        &v.x[..64],
        2,
        &mut [],
    )
    .unwrap();
    quant::matmul(&w, &[], 0, &mut []).unwrap();
    // Unknown ids.
    for id in [4, 5, 31, 36, 42, u32::MAX] {
        assert!(
            matches!(GgmlType::from_id(id), Err(LoomError::UnsupportedDType(_))),
            "id {id}"
        );
    }
}

/// Decode with a NaN or ±∞ among the activations gives what float32 arithmetic gives (NaN or ±∞, never a finite
/// number): the 16-bit rounding, which could not hold them, is not used for such a token.
#[test]
fn decode_with_a_non_finite_activation_is_not_finite() {
    for t in TYPES
        .into_iter()
        .filter(|t| !matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16))
    {
        let v = vectors(t);
        let w = QMatrix::new(t, v.rows, v.cols, &v.bytes).unwrap();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = v.x[..v.cols].to_vec();
            x[3] = bad;
            let mut y = vec![0.0; v.rows];
            quant::matmul(&w, &x, 1, &mut y).unwrap();
            // Even a zero weight gives NaN: 0 · ±∞ is NaN.
            for (r, y) in y.iter().enumerate() {
                assert!(!y.is_finite(), "{t} row {r} with x[3] = {bad}: {y}");
            }
        }
    }
}

/// A prompt with a NaN or ±∞ in one token (in its second group of 16): that token's outputs are not finite, and
/// every other token's are numpy's within float32's bound (the 16-bit rounding refuses the whole prompt, which then
/// runs in float32).
#[test]
fn prefill_with_a_non_finite_token_keeps_the_others() {
    for t in TYPES {
        let v = vectors(t);
        let w = QMatrix::new(t, v.rows, v.cols, &v.bytes).unwrap();
        let n = 37;
        let clean = cycled(&v.x, v.cols, n);
        let want = cycled(&v.y, v.rows, n);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = clean.clone();
            x[20 * v.cols + 3] = bad;
            let mut y = vec![0.0; n * v.rows];
            quant::matmul(&w, &x, n, &mut y).unwrap();
            let what = format!("{t}, token 20 holding {bad}");
            assert!(y[20 * v.rows..21 * v.rows].iter().all(|y| !y.is_finite()), "{what}");
            let others = |m: &[f32], len: usize| -> Vec<f32> {
                m.chunks_exact(len)
                    .enumerate()
                    .filter(|(k, _)| *k != 20)
                    .flat_map(|(_, c)| c.to_vec())
                    .collect()
            };
            let (x, want, y) = (others(&x, v.cols), others(&want, v.rows), others(&y, v.rows));
            check_matmul(&what, &v.values, v.cols, &x, &want, &y, false);
        }
    }
}

/// A block whose scale (a half) is ±∞ or NaN makes its row's dot non-finite on every path, and leaves the other
/// rows as they were: gguf-py dequantizes such a block to non-finite values, and a dot with them is not finite.
/// Rows 5 blocks wide (15 for the 32-element types), so that the bad block is in a group of four or in the
/// remainder; each row in turn, of an odd and an even number. The scale `d` is a block's first half, except Q6_K's, its last.
#[test]
fn a_non_finite_block_scale_gives_a_non_finite_dot() {
    for t in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::F16,
    ] {
        let scale_at = if t == GgmlType::Q6_K { 208 } else { 0 };
        let v = widened(&vectors(t), 5);
        let row_bytes = v.bytes.len() / v.rows;
        let block_bytes = t.block_bytes();
        // For F16, activations past 2³² too, which take another kernel.
        let scales: &[f32] = if t == GgmlType::F16 { &[1.0, 1e10] } else { &[1.0] };
        // An odd and an even number of rows, the bad one at each: a kernel may pair rows and take the odd one alone.
        for rows in [v.rows - 1, v.rows] {
            let x: Vec<Vec<f32>> = scales
                .iter()
                .map(|s| v.x[..v.cols].iter().map(|x| x * s).collect())
                .collect();
            let good = QMatrix::new(t, rows, v.cols, &v.bytes[..rows * row_bytes]).unwrap();
            let clean: Vec<Vec<f32>> = x
                .iter()
                .map(|x| {
                    let mut y = vec![0.0; rows];
                    quant::matmul(&good, x, 1, &mut y).unwrap();
                    y
                })
                .collect();
            for (bad_row, bad, block) in (0..rows)
                .flat_map(|r| [0x7C00u16, 0xFC00, 0x7E00].map(|b| (r, b)))
                .flat_map(|(r, b)| [1, row_bytes / block_bytes - 1].map(|k| (r, b, k)))
            {
                let mut bytes = v.bytes[..rows * row_bytes].to_vec();
                // Row `bad_row`'s block `block`: its scale, or for F16 its first value.
                let at = bad_row * row_bytes + block * block_bytes + scale_at;
                bytes[at..at + 2].copy_from_slice(&bad.to_le_bytes());
                let w = QMatrix::new(t, rows, v.cols, &bytes).unwrap();
                for (x, clean) in x.iter().zip(&clean) {
                    let mut y = vec![0.0; rows];
                    quant::matmul(&w, x, 1, &mut y).unwrap();
                    let what = format!(
                        "{t}, {rows} rows, {bad:#x} in row {bad_row}'s block {block}, x[0] {}",
                        x[0]
                    );
                    for (r, (y, clean)) in y.iter().zip(clean).enumerate() {
                        match r == bad_row {
                            true => assert!(!y.is_finite(), "{what}: the row is {y}"),
                            false => assert_eq!(y.to_bits(), clean.to_bits(), "{what}: row {r}"),
                        }
                    }
                }
            }
        }
    }
}

/// Each row of `values` (rows as long as `x`) dotted with `x` in float64, rounded to float32.
fn float64_dots(values: &[f32], x: &[f32]) -> Vec<f32> {
    values
        .chunks_exact(x.len())
        .map(|w| w.iter().zip(x).map(|(w, x)| f64::from(*w) * f64::from(*x)).sum::<f64>() as f32)
        .collect()
}

/// Decode over rows of every length from one to nine blocks of 32 (the kernels take blocks four at a time, and a
/// row's last blocks one by one): rows made of the vectors' blocks, against float64 dots of gguf-py's values with
/// the activations' blocks laid out the same way.
#[test]
fn decode_over_rows_of_one_to_nine_blocks() {
    for t in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::LoomQ4_0,
    ] {
        let v = vectors(t);
        let (per_row, block_bytes) = (v.cols / 32, v.bytes.len() / v.rows / (v.cols / 32));
        for blocks in 1..=9 {
            // Block j of each new row is block (j + r) % per_row of row r; the activations' block j is the
            // vectors' block j % per_row.
            let pick = |r: usize, j: usize| (j + r) % per_row;
            let bytes: Vec<u8> = (0..v.rows)
                .flat_map(|r| (0..blocks).map(move |j| (r, pick(r, j))))
                .flat_map(|(r, b)| v.bytes[(r * per_row + b) * block_bytes..][..block_bytes].to_vec())
                .collect();
            let values: Vec<f32> = (0..v.rows)
                .flat_map(|r| (0..blocks).map(move |j| (r, pick(r, j))))
                .flat_map(|(r, b)| v.values[r * v.cols + 32 * b..][..32].to_vec())
                .collect();
            let x: Vec<f32> = (0..blocks)
                .flat_map(|j| v.x[32 * (j % per_row)..][..32].to_vec())
                .collect();
            let cols = 32 * blocks;
            let want = float64_dots(&values, &x);
            let w = QMatrix::new(t, v.rows, cols, &bytes).unwrap();
            let mut y = vec![f32::NAN; v.rows];
            quant::matmul(&w, &x, 1, &mut y).unwrap();
            let what = format!("{t}, rows of {blocks} blocks, {}", quant::simd_in_use());
            check_matmul(&what, &values, cols, &x, &want, &y, sixteen_bit_activations(t, 1));
        }
    }
}

/// Decode of rows of halves and bfloat16s 1 to 19 values long (the kernels take 8 at a time and the rest one by
/// one), 1 to 5 rows (in pairs, then an odd one), with activations scaled from 1e-20 up to 1e12 (simd128 reads
/// halves against activations scaled by 2⁹⁶ unless one reaches 2³²): against float64 dots of gguf-py's values.
#[test]
fn float_decode_over_short_rows_and_large_activations() {
    for t in [GgmlType::F16, GgmlType::BF16] {
        let v = vectors(t);
        for (cols, rows) in (1..=19).flat_map(|c| (1..=5).map(move |r| (c, r))) {
            // The vectors' values in order, over and over: row r is values r·cols.. of that stream.
            let bytes: Vec<u8> = v
                .bytes
                .chunks_exact(2)
                .cycle()
                .take(rows * cols)
                .flatten()
                .copied()
                .collect();
            let values: Vec<f32> = v.values.iter().cycle().take(rows * cols).copied().collect();
            for scale in [1e-20f32, 1.0, 4e9, 1e12] {
                let x: Vec<f32> = v.x.iter().take(cols).map(|x| x * scale).collect();
                let want = float64_dots(&values, &x);
                let w = QMatrix::new(t, rows, cols, &bytes).unwrap();
                let mut y = vec![f32::NAN; rows];
                quant::matmul(&w, &x, 1, &mut y).unwrap();
                let what = format!("{t}, {rows} rows of {cols}, x ×{scale}, {}", quant::simd_in_use());
                check_matmul(&what, &values, cols, &x, &want, &y, false);
            }
        }
    }
}

/// `matmul_each` (several matrices, one set of activations: decode rounds them once) gives each matrix what
/// `matmul` gives, against float64 dots of gguf-py's values; and a product of the wrong shape is a typed error.
#[test]
fn matmul_each_matches_gguf_py_for_each_matrix() {
    let types: Vec<GgmlType> = TYPES.into_iter().filter(|&t| vectors(t).cols == 96).collect();
    assert!(types.len() >= 4, "{types:?}");
    let x = widened(&vectors(GgmlType::Q4_1), 5).x;
    // The SIMD switch is left as it is: `every_path_matches_gguf_py_and_numpy` turns it, process-wide, and the
    // 16-bit bound below holds for either path.
    let all: Vec<Vectors> = types.iter().map(|&t| widened(&vectors(t), 5)).collect();
    let cols = all[0].cols;
    for n in [1, 5] {
        let x = &x[..n * cols];
        let mut ys: Vec<Vec<f32>> = all.iter().map(|v| vec![f32::NAN; n * v.rows]).collect();
        let mut products: Vec<(QMatrix, &mut [f32])> = all
            .iter()
            .zip(&types)
            .zip(ys.iter_mut())
            .map(|((v, &t), y)| (QMatrix::new(t, v.rows, v.cols, &v.bytes).unwrap(), y.as_mut_slice()))
            .collect();
        quant::matmul_each(x, n, &mut products).unwrap();
        for ((v, &t), y) in all.iter().zip(&types).zip(&ys) {
            let want: Vec<f32> = (0..n)
                .flat_map(|tok| (0..v.rows).map(move |r| (tok, r)))
                .map(|(tok, r)| {
                    let w = &v.values[r * cols..(r + 1) * cols];
                    let xs = &x[tok * cols..(tok + 1) * cols];
                    w.iter()
                        .zip(xs)
                        .map(|(&w, &x)| f64::from(w) * f64::from(x))
                        .sum::<f64>() as f32
                })
                .collect();
            let what = format!("matmul_each: {t}, n = {n}");
            check_matmul(&what, &v.values, cols, x, &want, y, sixteen_bit_activations(t, n));
        }
    }
    let v = vectors(GgmlType::Q4_1);
    let w = QMatrix::new(GgmlType::Q4_1, v.rows, v.cols, &v.bytes).unwrap();
    let (mut good, mut short) = (vec![0.0; v.rows], vec![0.0; v.rows - 1]);
    let result = quant::matmul_each(&v.x[..v.cols], 1, &mut [(w, &mut good), (w, &mut short)]);
    assert!(matches!(result, Err(LoomError::InvalidInput(_))), "{result:?}");
}
