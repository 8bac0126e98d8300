//! The packed matvec kernels (`shaders/matvec.wgsl`) against their CPU twins: every Loom dtype (Dense layers
//! quantized by our Loom codecs, and layers Loom itself wrote) against `CpuModel` (bit-exact with Loom); Loom's Q4_0
//! blocks and every llama.cpp block type against their CPU dequantizers (gguf-py's vectors and random blocks); every
//! kernel variant (f32 and `shader-f16` decoders where the device has it; a workgroup, a lane or subgroups per row);
//! weights split across bindings; the folded RMSNorm and the residual add.
//!
//! Tolerance. The GPU sums in f32 in another order than Loom (f64 tiles of 8 rounded to f32), multiplies the layer
//! scale once per row instead of once per weight, and has its own exp/tanh. With `S = Σ_i |x_i·w_i|` (w the CPU
//! twin's dequantized weights) every output must satisfy `|gpu − cpu| ≤ 1e-6 + RTOL·S`, RTOL = 2e-6 for every
//! family (see [`rtol`]). The decoders themselves are exact: `decoders_are_exact` reads every code back through the
//! kernel with one-hot inputs and compares with the CPU dequantizers (an f32 subnormal may read as zero where the
//! device flushes subnormals, as WGSL allows).

use loom_wasm::cpu::{ops, CpuModel};
use loom_wasm::dtype::{q4_0, DType};
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{
    dense_weights, packed_values, Gpu, MatVec, MatVecOptions, PackedWeights, Packing, Pointwise, Recorder, RowLayout,
    Rows, GPU_GGML_TYPES, MAX_WEIGHT_BINDINGS,
};
use loom_wasm::network::{Activation, Network, WeightStore};
use loom_wasm::quant::{self, GgmlType};

use super::upload as upload_f32;

on_each_device!(
    every_loom_dtype_matches_the_cpu_dense_forward,
    loom_written_dense_layers_match_the_cpu_forward,
    loom_q4_0_blocks_match_their_cpu_twin,
    ggml_dequantizer_equals_gguf_py_bit_for_bit,
    ggml_blocks_match_their_cpu_twin,
    weights_split_across_bindings_give_the_same_result,
    decoders_are_exact,
    more_rows_than_one_dispatch_dimension,
    bad_inputs_are_errors,
    norm_and_residual_add_match_the_cpu_ops,
    gated_unit_input_matches_the_cpu_product,
);

const ATOL: f32 = 1e-6;

/// RTOL of the bound `|gpu − cpu| ≤ ATOL + RTOL·Σ|x·w|`, the same for every family. A dot product of n terms
/// summed in f32 in a 64-lane tree is off by at most about (n/64 + 6)·2^-24·Σ|x·w| (far less on average), the CPU's
/// own f32 rounding every 8 terms adds as much again, and the scale factored out of the sums one rounding more.
/// Measured on lavapipe (max |gpu − cpu|/Σ|x·w| over these tests): floats 1.3e-7, integers 2.9e-7, Loom Q4_0 and
/// ggml blocks 1.4e-7. RTOL leaves a margin of about 7× for other drivers' summation orders and exp/tanh.
fn rtol(p: Packing) -> f32 {
    match p {
        Packing::Loom(_) | Packing::LoomQ4_0 | Packing::Ggml(_) => 2e-6,
    }
}

/// The Dense layers Loom wrote, one per dtype (`testdata/conformance/cases/layer_Dense_*`).
const LOOM_DENSE: [(&str, &str); 21] = [
    (
        "bfloat16",
        testdata!("conformance/cases/layer_Dense_bfloat16/loom.json"),
    ),
    ("binary", testdata!("conformance/cases/layer_Dense_binary/loom.json")),
    ("float16", testdata!("conformance/cases/layer_Dense_float16/loom.json")),
    ("float32", testdata!("conformance/cases/layer_Dense_float32/loom.json")),
    ("float64", testdata!("conformance/cases/layer_Dense_float64/loom.json")),
    ("fp4", testdata!("conformance/cases/layer_Dense_fp4/loom.json")),
    ("fp8e4m3", testdata!("conformance/cases/layer_Dense_fp8e4m3/loom.json")),
    ("fp8e5m2", testdata!("conformance/cases/layer_Dense_fp8e5m2/loom.json")),
    ("int16", testdata!("conformance/cases/layer_Dense_int16/loom.json")),
    ("int2", testdata!("conformance/cases/layer_Dense_int2/loom.json")),
    ("int32", testdata!("conformance/cases/layer_Dense_int32/loom.json")),
    ("int4", testdata!("conformance/cases/layer_Dense_int4/loom.json")),
    ("int64", testdata!("conformance/cases/layer_Dense_int64/loom.json")),
    ("int8", testdata!("conformance/cases/layer_Dense_int8/loom.json")),
    ("ternary", testdata!("conformance/cases/layer_Dense_ternary/loom.json")),
    ("uint16", testdata!("conformance/cases/layer_Dense_uint16/loom.json")),
    ("uint2", testdata!("conformance/cases/layer_Dense_uint2/loom.json")),
    ("uint32", testdata!("conformance/cases/layer_Dense_uint32/loom.json")),
    ("uint4", testdata!("conformance/cases/layer_Dense_uint4/loom.json")),
    ("uint64", testdata!("conformance/cases/layer_Dense_uint64/loom.json")),
    ("uint8", testdata!("conformance/cases/layer_Dense_uint8/loom.json")),
];

/// gguf-py's vectors (`testdata/ggml-blocks`): each block type's bytes and its dequantized f32 values.
const GGML_VECTORS: [(&str, &[u8], &[u8]); 9] = [
    (
        "q4_0",
        testdata_bytes!("ggml-blocks/q4_0.bin"),
        testdata_bytes!("ggml-blocks/q4_0.f32"),
    ),
    (
        "q4_1",
        testdata_bytes!("ggml-blocks/q4_1.bin"),
        testdata_bytes!("ggml-blocks/q4_1.f32"),
    ),
    (
        "q5_0",
        testdata_bytes!("ggml-blocks/q5_0.bin"),
        testdata_bytes!("ggml-blocks/q5_0.f32"),
    ),
    (
        "q5_1",
        testdata_bytes!("ggml-blocks/q5_1.bin"),
        testdata_bytes!("ggml-blocks/q5_1.f32"),
    ),
    (
        "q8_0",
        testdata_bytes!("ggml-blocks/q8_0.bin"),
        testdata_bytes!("ggml-blocks/q8_0.f32"),
    ),
    (
        "q4_k",
        testdata_bytes!("ggml-blocks/q4_k.bin"),
        testdata_bytes!("ggml-blocks/q4_k.f32"),
    ),
    (
        "q5_k",
        testdata_bytes!("ggml-blocks/q5_k.bin"),
        testdata_bytes!("ggml-blocks/q5_k.f32"),
    ),
    (
        "q6_k",
        testdata_bytes!("ggml-blocks/q6_k.bin"),
        testdata_bytes!("ggml-blocks/q6_k.f32"),
    ),
    (
        "loomq4_0",
        testdata_bytes!("ggml-blocks/loomq4_0.bin"),
        testdata_bytes!("ggml-blocks/loomq4_0.f32"),
    ),
];

/// A deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn inputs(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..n).map(|_| r.f32()).collect()
}

/// Σ_i |x_i·w_i| per output, the scale of the rounding error of a dot product.
fn magnitudes(x: &[f32], w: &[f32], n_in: usize, n_out: usize) -> Vec<f32> {
    let batch = x.len() / n_in;
    let mut out = Vec::with_capacity(batch * n_out);
    for b in 0..batch {
        let xr = &x[b * n_in..(b + 1) * n_in];
        for o in 0..n_out {
            let wr = &w[o * n_in..(o + 1) * n_in];
            out.push(
                xr.iter()
                    .zip(wr)
                    .map(|(a, b)| (f64::from(*a) * f64::from(*b)).abs())
                    .sum::<f64>() as f32,
            );
        }
    }
    out
}

/// Asserts the tolerance and prints max abs / rel / normalised errors; returns the normalised maximum.
fn assert_close(gpu: &[f32], cpu: &[f32], mag: &[f32], rtol: f32, what: &str) -> f32 {
    assert_eq!(gpu.len(), cpu.len(), "{what}");
    let (mut max_abs, mut max_rel, mut max_norm) = (0f32, 0f32, 0f32);
    for (i, ((g, c), s)) in gpu.iter().zip(cpu).zip(mag).enumerate() {
        let err = (g - c).abs();
        assert!(
            err <= ATOL + rtol * s,
            "{what}[{i}]: gpu {g} cpu {c}, |err| {err:e} > {ATOL:e} + {rtol:e}·{s}"
        );
        max_abs = max_abs.max(err);
        if c.abs() > 1e-6 {
            max_rel = max_rel.max(err / c.abs());
        }
        if *s > 0.0 {
            max_norm = max_norm.max(err / s);
        }
    }
    note!("{what}: max abs {max_abs:.2e}, max rel {max_rel:.2e}, max abs/Σ|xw| {max_norm:.2e}");
    max_norm
}

async fn upload(gpu: &Gpu, p: Packing, bytes: &[u8], scale: f32, n_in: usize, n_out: usize) -> PackedWeights {
    PackedWeights::upload(gpu, p, bytes, scale, n_in, n_out).await.unwrap()
}

async fn run(gpu: &Gpu, kernel: &MatVec, x: &[f32], w: &PackedWeights, act: Activation) -> Vec<f32> {
    kernel.run(gpu, x, w, act.into()).await.unwrap()
}

/// `kernel` with each lane of its tiled products (prefill batches) taking `rows` rows, never 4 lanes a row.
fn tiled_rows(mut kernel: MatVec, rows: u32) -> MatVec {
    kernel.set_tiled_full_groups(0);
    kernel.set_tiled_rows(Some(rows)).unwrap();
    kernel
}

/// [`kernels`], and natively for a prefill batch (more than 4 rows of x: the tiled products) also with a lane
/// taking 4 rows where a workgroup per row is the layout otherwise (on shader-f16 too where the device has it). A
/// lane per row takes 4 by default, on both devices; 1 and 2 run in `llm_gpu`'s goldens. (Chromium's SwiftShader
/// compiles each pipeline slowly: the extra variant cost its matvec cases a minute, 427 s against 368.)
fn batch_kernels(gpu: &Gpu, p: Packing, batch: usize) -> Vec<(MatVec, &'static str)> {
    let mut out = kernels(gpu, p);
    if batch > 4 && cfg!(not(target_arch = "wasm32")) {
        out.push((
            tiled_rows(MatVec::new(gpu, p, false).unwrap().with_layout(RowLayout::Workgroup), 4),
            "f32 path, tiled 4 rows a lane",
        ));
        if p.has_halves() && gpu.has_f16 {
            out.push((
                tiled_rows(MatVec::new(gpu, p, true).unwrap().with_layout(RowLayout::Workgroup), 4),
                "shader-f16, tiled 4 rows a lane",
            ));
        }
    }
    out
}

/// Every kernel variant for `p`: the f32 and (where the device has it) shader-f16 decoders, each with a workgroup
/// per row and with a lane per row.
fn kernels(gpu: &Gpu, p: Packing) -> Vec<(MatVec, &'static str)> {
    let mut out = vec![
        (
            MatVec::new(gpu, p, false).unwrap().with_layout(RowLayout::Workgroup),
            "f32 path",
        ),
        (
            MatVec::new(gpu, p, false).unwrap().with_layout(RowLayout::Lane),
            "f32 path, lane per row",
        ),
    ];
    if gpu.has_subgroups {
        out.push((
            MatVec::new(gpu, p, false).unwrap().with_layout(RowLayout::Subgroups),
            "f32 path, subgroups",
        ));
    }
    if p.has_halves() && gpu.has_f16 {
        out.push((
            MatVec::new(gpu, p, true).unwrap().with_layout(RowLayout::Workgroup),
            "shader-f16",
        ));
        out.push((
            MatVec::new(gpu, p, true).unwrap().with_layout(RowLayout::Lane),
            "shader-f16, lane per row",
        ));
        if gpu.has_subgroups {
            out.push((
                MatVec::new(gpu, p, true).unwrap().with_layout(RowLayout::Subgroups),
                "shader-f16, subgroups",
            ));
        }
    }
    out
}

fn dense_arch(dt: DType, n_in: usize, n_out: usize, act: Activation) -> String {
    format!(
        r#"{{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":[{{"z":0,"y":0,"x":0,"l":0,
        "type":"Dense","activation":"{}","dtype":"{}","input_height":{n_in},"output_height":{n_out}}}]}}"#,
        act.name(),
        dt.name()
    )
}

/// A float32 Dense layer holding `w`: the CPU twin of a block format's matvec.
fn dense_f32(w: Vec<f32>, n_in: usize, n_out: usize, act: Activation) -> CpuModel {
    let mut net = loom_json::build(dense_arch(DType::Float32, n_in, n_out, act).as_bytes()).unwrap();
    net.layers[0].weights = Some(WeightStore::from_master(w));
    CpuModel::new(net)
}

/// GPU matvec of a Dense layer (its dtype's packed version) against `CpuModel`, on every half path.
async fn check_dense(gpu: &Gpu, net: Network, x: &[f32], what: &str) -> f32 {
    let layer = &net.layers[0];
    let (n_in, n_out, act) = (
        layer.input_height as usize,
        layer.output_height as usize,
        layer.activation,
    );
    let (packing, bytes, scale) = dense_weights(layer).unwrap();
    assert_eq!(
        packing,
        Packing::Loom(layer.dtype),
        "{what}: the layer has its dtype's version"
    );
    let w = layer.weights.as_ref().unwrap().active(layer.dtype);
    let mag = magnitudes(x, &w, n_in, n_out);
    let packed = upload(gpu, packing, &bytes, scale, n_in, n_out).await;
    let cpu = CpuModel::new(net.clone()).forward(x, &[x.len() / n_in, n_in]).unwrap();
    let mut worst = 0f32;
    for (kernel, path) in batch_kernels(gpu, packing, x.len() / n_in) {
        let out = run(gpu, &kernel, x, &packed, act).await;
        worst = worst.max(assert_close(
            &out,
            &cpu.data,
            &mag,
            rtol(packing),
            &format!("{what} ({path})"),
        ));
    }
    worst
}

const SHAPES: [(usize, usize, usize, Activation); 6] = [
    (576, 1536, 1, Activation::Silu),
    (37, 5, 3, Activation::Tanh),
    (100, 67, 2, Activation::GELU),
    (13, 129, 4, Activation::Linear),
    (1000, 31, 2, Activation::Sigmoid),
    // Prefill batches: 16 rows a workgroup, and a last group of 3.
    (70, 9, 19, Activation::Silu),
];

pub async fn every_loom_dtype_matches_the_cpu_dense_forward(gpu: &Gpu) {
    let mut summary = Vec::new();
    for dt in DType::ALL {
        let mut worst = 0f32;
        for (k, (n_in, n_out, batch, act)) in SHAPES.into_iter().enumerate() {
            let mut net = loom_json::build(dense_arch(dt, n_in, n_out, act).as_bytes()).unwrap();
            net.layers[0].weights.as_mut().unwrap().morph(dt);
            let x = inputs(n_in * batch, 7 + k as u64);
            worst = worst.max(check_dense(gpu, net, &x, &format!("{dt} Dense {n_in}→{n_out} ×{batch}")).await);
        }
        summary.push(format!("{dt}: {worst:.2e}"));
    }
    note!("max abs/Σ|xw| per dtype: {}", summary.join(", "));
}

pub async fn loom_written_dense_layers_match_the_cpu_forward(gpu: &Gpu) {
    for dt in DType::ALL {
        let (_, text) = LOOM_DENSE.iter().find(|(name, _)| *name == dt.name()).unwrap();
        let net = loom_json::read(text.as_bytes()).unwrap();
        let n_in = net.layers[0].input_height as usize;
        let x = inputs(3 * n_in, 99);
        check_dense(gpu, net, &x, &format!("Loom-written {dt} Dense")).await;
    }
}

/// Checks a block packing on the GPU against the CPU twin (its dequantized values in a float32 Dense layer).
/// `shape` is (n_in, n_out, batch).
async fn check_blocks(gpu: &Gpu, p: Packing, bytes: &[u8], shape: (usize, usize, usize), act: Activation, what: &str) {
    let (n_in, n_out, batch) = shape;
    let w = packed_values(p, bytes, 1.0, n_in * n_out).unwrap();
    let x = inputs(n_in * batch, (n_in * 31 + n_out) as u64);
    let mag = magnitudes(&x, &w, n_in, n_out);
    let cpu = dense_f32(w, n_in, n_out, act).forward(&x, &[batch, n_in]).unwrap();
    let packed = upload(gpu, p, bytes, 1.0, n_in, n_out).await;
    for (kernel, path) in batch_kernels(gpu, p, batch) {
        let out = run(gpu, &kernel, &x, &packed, act).await;
        assert_close(
            &out,
            &cpu.data,
            &mag,
            rtol(p),
            &format!("{what} {n_in}→{n_out} ×{batch} ({path})"),
        );
    }
}

pub async fn loom_q4_0_blocks_match_their_cpu_twin(gpu: &Gpu) {
    for (n_in, n_out, batch, act) in SHAPES {
        let master = inputs(n_in * n_out, 3);
        let payload = q4_0::pack(&master);
        check_blocks(gpu, Packing::LoomQ4_0, &payload, (n_in, n_out, batch), act, "Loom Q4_0").await;
    }
}

fn ggml_vectors(t: GgmlType) -> (Vec<u8>, Vec<f32>, usize, usize) {
    let name = t.name().to_ascii_lowercase();
    let (_, bytes, values) = GGML_VECTORS.iter().find(|(n, _, _)| *n == name).unwrap();
    let values: Vec<f32> = values
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let manifest: serde_json::Value = serde_json::from_str(testdata!("ggml-blocks/manifest.json")).unwrap();
    let shape = &manifest["types"][&name];
    let (rows, cols) = (shape["rows"].as_u64().unwrap(), shape["cols"].as_u64().unwrap());
    (bytes.to_vec(), values, cols as usize, rows as usize)
}

pub async fn ggml_dequantizer_equals_gguf_py_bit_for_bit(_gpu: &Gpu) {
    for t in GPU_GGML_TYPES {
        let (bytes, expected, cols, rows) = ggml_vectors(t);
        assert_eq!(expected.len(), rows * cols);
        let mut ours = vec![0.0; rows * cols];
        quant::dequantize(t, &bytes, &mut ours).unwrap();
        let mismatches = ours
            .iter()
            .zip(&expected)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(mismatches, 0, "{t}: {mismatches} values differ from gguf-py");
        note!("{t}: {} values bit-identical to gguf.quants.dequantize", ours.len());
    }
}

/// Random ggml blocks: random quants and scale bytes, with every float scale field (f16 `d`, `dmin`/`m`; Loom's
/// f32 scale) set to a plausible value so that no block decodes to NaN or infinity.
fn random_blocks(t: GgmlType, blocks: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed);
    let bb = t.block_bytes();
    // Byte offsets of the f16 scale fields in one block.
    let halves: &[usize] = match t {
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::LoomQ4_0 => &[],
        _ => &[0],
    };
    let mut out = r.bytes(blocks * bb);
    for block in out.chunks_exact_mut(bb) {
        for &o in halves {
            let v = half::f16::from_f32(r.f32() * 0.05).to_bits();
            block[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
        if t == GgmlType::LoomQ4_0 {
            block[..4].copy_from_slice(&(r.f32() * 0.05).to_le_bytes());
        }
    }
    out
}

pub async fn ggml_blocks_match_their_cpu_twin(gpu: &Gpu) {
    for t in GPU_GGML_TYPES {
        let p = Packing::Ggml(t);
        let (bytes, _, cols, rows) = ggml_vectors(t);
        check_blocks(
            gpu,
            p,
            &bytes,
            (cols, rows, 3),
            Activation::Linear,
            &format!("{t} (gguf-py vectors)"),
        )
        .await;
        for (n_in, n_out, batch, act) in [
            (576usize, 1536usize, 1usize, Activation::Silu),
            (96, 33, 2, Activation::Tanh),
            // Rows that start inside blocks (not a GGUF layout, but the kernel reads the flat tensor).
            (80, 12, 3, Activation::Linear),
            (1024, 7, 5, Activation::GELU),
            (96, 9, 35, Activation::Silu),
            // Prefill tiles on GPUs: several tiles of x, the last one partial, over more than 64 rows.
            (320, 130, 21, Activation::Linear),
            (768, 66, 17, Activation::Linear),
            // Enough rows for the tiled body's 64-row workgroups on GPUs (4 lanes a row above).
            (256, 4100, 17, Activation::Linear),
            // One row of x through many short rows (an LM head): tiled, 4 lanes a row, on GPUs.
            (256, 16390, 1, Activation::Linear),
        ] {
            let bytes = random_blocks(t, (n_in * n_out).div_ceil(t.block_len()), (n_in + n_out) as u64);
            check_blocks(gpu, p, &bytes, (n_in, n_out, batch), act, &format!("{t}")).await;
        }
    }
}

/// One packing's test tensor for the split test: bytes, scale and shape.
fn split_case(p: Packing) -> (Vec<u8>, f32, usize, usize) {
    let (n_in, n_out) = match p {
        Packing::Ggml(_) => (96, 45),
        _ => (37, 41),
    };
    let master = inputs(n_in * n_out, 11);
    match p {
        Packing::Loom(dt) => {
            let scale = loom_wasm::dtype::auto_scale(dt, &master);
            (loom_wasm::dtype::quantize(dt, &master, scale), scale, n_in, n_out)
        }
        Packing::LoomQ4_0 => (q4_0::pack(&master), 1.0, n_in, n_out),
        Packing::Ggml(t) => (
            random_blocks(t, (n_in * n_out).div_ceil(t.block_len()), 5),
            1.0,
            n_in,
            n_out,
        ),
    }
}

pub async fn weights_split_across_bindings_give_the_same_result(gpu: &Gpu) {
    let packings = [
        Packing::Loom(DType::Float32),
        Packing::Loom(DType::Float64),
        Packing::Loom(DType::Int64),
        Packing::Loom(DType::Float16),
        Packing::Loom(DType::Int8),
        Packing::Loom(DType::Int4),
        Packing::Loom(DType::Int2),
        Packing::Loom(DType::Binary),
        Packing::LoomQ4_0,
        Packing::Ggml(GgmlType::Q4_0),
        Packing::Ggml(GgmlType::Q4_1),
        Packing::Ggml(GgmlType::Q8_0),
        Packing::Ggml(GgmlType::Q5_0),
        Packing::Ggml(GgmlType::Q4_K),
        Packing::Ggml(GgmlType::Q6_K),
    ];
    let act = Activation::Tanh;
    for p in packings {
        let (bytes, scale, n_in, n_out) = split_case(p);
        let x = inputs(2 * n_in, 17);
        let w = packed_values(p, &bytes, scale, n_in * n_out).unwrap();
        let mag = magnitudes(&x, &w, n_in, n_out);
        let cpu = dense_f32(w, n_in, n_out, act).forward(&x, &[2, n_in]).unwrap();
        let whole = upload(gpu, p, &bytes, scale, n_in, n_out).await;
        assert_eq!(whole.parts(), 1);
        for (kernel, path) in kernels(gpu, p) {
            let reference = run(gpu, &kernel, &x, &whole, act).await;
            let words = bytes.len().div_ceil(4) as u64;
            for parts in 2..=MAX_WEIGHT_BINDINGS as u64 {
                // An odd word count per binding puts split points inside units and blocks.
                let limit = 4 * (words.div_ceil(parts) | 1);
                let split = PackedWeights::upload_split(gpu, p, &bytes, scale, n_in, n_out, limit)
                    .await
                    .unwrap();
                assert!(
                    split.parts() > 1 && split.parts() <= parts as usize,
                    "{p:?}: {} parts",
                    split.parts()
                );
                let out = run(gpu, &kernel, &x, &split, act).await;
                assert_eq!(out, reference, "{p:?} ({path}) split in {} parts", split.parts());
                assert_close(
                    &out,
                    &cpu.data,
                    &mag,
                    rtol(p),
                    &format!("{p:?} split in {} ({path})", split.parts()),
                );
            }
        }
        let too_many = (bytes.len() as u64).div_ceil(MAX_WEIGHT_BINDINGS as u64 + 1) / 2;
        let err = PackedWeights::upload_split(gpu, p, &bytes, scale, n_in, n_out, too_many).await;
        assert!(
            err.is_err(),
            "{p:?}: more than {MAX_WEIGHT_BINDINGS} bindings must be refused"
        );
    }
}

/// Reads `n_out × n_in` weights back through the kernel: batch row `b` is the one-hot `e_b`, so `y[b][o]` is
/// `W[o][b]` computed by the whole-unit path (`part_dot`), exactly. `n_in = 1` reads through the partial-unit path.
async fn read_back(gpu: &Gpu, kernel: &MatVec, w: &PackedWeights) -> Vec<f32> {
    let n_in = w.n_in;
    let mut x = vec![0f32; n_in * n_in];
    (0..n_in).for_each(|b| x[b * n_in + b] = 1.0);
    let y = run(gpu, kernel, &x, w, Activation::Linear).await;
    // y is [b][o] = W[o][b]: transpose to W's order.
    let mut out = vec![0f32; n_in * w.n_out];
    for b in 0..n_in {
        for o in 0..w.n_out {
            out[o * n_in + b] = y[b * w.n_out + o];
        }
    }
    out
}

/// The kernel read `cpu` as `gpu`: the same value (±0 alike), both NaN, or an f32 subnormal read as zero (WGSL
/// lets an implementation flush subnormals; SwiftShader in Chromium does, lavapipe does not).
fn decoded_as(gpu: f32, cpu: f32) -> bool {
    gpu == cpu || (gpu.is_nan() && cpu.is_nan()) || (cpu.is_subnormal() && gpu == 0.0)
}

/// Every element of `bytes` (packing `p`), read back through the kernel, equals the CPU dequantizer's value.
async fn check_decoder(gpu: &Gpu, p: Packing, bytes: &[u8], scale: f32, n: usize, full_unit_width: usize, what: &str) {
    let cpu = packed_values(p, bytes, scale, n).unwrap();
    for (kernel, path) in kernels(gpu, p) {
        // Partial units: every element its own row.
        let w = upload(gpu, p, bytes, scale, 1, n).await;
        let out = read_back(gpu, &kernel, &w).await;
        let bad: Vec<usize> = (0..n).filter(|&i| !decoded_as(out[i], cpu[i])).collect();
        assert!(
            bad.is_empty(),
            "{what} ({path}), partial units: {} wrong, first at {}: gpu {} cpu {}",
            bad.len(),
            bad[0],
            out[bad[0]],
            cpu[bad[0]]
        );
        // Whole units, finite values only (a one-hot row times ±Inf would be NaN).
        if cpu.iter().all(|v| v.is_finite()) && n.is_multiple_of(full_unit_width) {
            let w = upload(gpu, p, bytes, scale, full_unit_width, n / full_unit_width).await;
            let out = read_back(gpu, &kernel, &w).await;
            let bad: Vec<usize> = (0..n).filter(|&i| !decoded_as(out[i], cpu[i])).collect();
            assert!(
                bad.is_empty(),
                "{what} ({path}), whole units: {} wrong, first at {}: gpu {} cpu {}",
                bad.len(),
                bad[0],
                out[bad[0]],
                cpu[bad[0]]
            );
        }
        let flushed = (0..n).filter(|&i| out[i] != cpu[i] && cpu[i].is_subnormal()).count();
        note!("{what} ({path}): {n} values decoded exactly, {flushed} subnormals of them flushed to zero");
    }
}

fn le_bytes<T: Copy, const N: usize>(values: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|v| f(*v)).collect()
}

pub async fn decoders_are_exact(gpu: &Gpu) {
    // Every code of the 8-bit and smaller dtypes, with a scale that rounds.
    let s = 0.37f32;
    let all_bytes: Vec<u8> = (0..=255).collect();
    for dt in DType::ALL.into_iter().filter(|d| d.bits() <= 8) {
        check_decoder(
            gpu,
            Packing::Loom(dt),
            &all_bytes,
            s,
            dt.unpacked_len(256),
            64,
            &format!("{dt} codes"),
        )
        .await;
    }
    // Every half and bfloat16 (subnormals, Inf, NaN).
    let halves: Vec<u8> = le_bytes(&(0..=u16::MAX).collect::<Vec<_>>(), u16::to_le_bytes);
    let finite_halves: Vec<u8> = le_bytes(
        &(0..=u16::MAX).filter(|h| h & 0x7C00 != 0x7C00).collect::<Vec<_>>(),
        u16::to_le_bytes,
    );
    for dt in [DType::Float16, DType::BFloat16] {
        check_decoder(
            gpu,
            Packing::Loom(dt),
            &halves,
            s,
            65536,
            64,
            &format!("{dt} all codes"),
        )
        .await;
        let n = finite_halves.len() / 2 / 64 * 64;
        check_decoder(
            gpu,
            Packing::Loom(dt),
            &finite_halves[..2 * n],
            s,
            n,
            64,
            &format!("{dt} finite codes"),
        )
        .await;
    }
    // Wide integers: exact, rounding and overflow cases of the int → f32 conversion.
    let mut r = Rng(1);
    let mut i64s: Vec<i64> = vec![
        0,
        1,
        -1,
        127,
        -128,
        (1 << 24) + 1,
        (1 << 24) + 3,
        (1 << 25) + 2,
        (1 << 25) + 6,
        (1 << 53) + 1,
        i64::MAX,
        i64::MIN,
        i64::MIN + 1,
        -(1 << 40) - 1,
        0x7FFF_FF80_0000_0000,
        0x0000_0001_0000_0080,
        0x0000_0001_0000_0180,
    ];
    i64s.extend((0..4000).map(|k| (r.next() as i64) >> (k % 63)));
    let n64 = i64s.len() / 64 * 64;
    let u64s: Vec<u64> = i64s.iter().map(|v| *v as u64).collect();
    check_decoder(
        gpu,
        Packing::Loom(DType::Int64),
        &le_bytes(&i64s[..n64], i64::to_le_bytes),
        s,
        n64,
        64,
        "int64",
    )
    .await;
    check_decoder(
        gpu,
        Packing::Loom(DType::Uint64),
        &le_bytes(&u64s[..n64], u64::to_le_bytes),
        s,
        n64,
        64,
        "uint64",
    )
    .await;
    let i32s: Vec<i32> = i64s[..n64].iter().map(|v| *v as i32).collect();
    let u32s: Vec<u32> = i64s[..n64].iter().map(|v| (*v >> 7) as u32).collect();
    check_decoder(
        gpu,
        Packing::Loom(DType::Int32),
        &le_bytes(&i32s, i32::to_le_bytes),
        s,
        n64,
        64,
        "int32",
    )
    .await;
    check_decoder(
        gpu,
        Packing::Loom(DType::Uint32),
        &le_bytes(&u32s, u32::to_le_bytes),
        s,
        n64,
        64,
        "uint32",
    )
    .await;
    let i16s: Vec<i16> = (i16::MIN..=i16::MAX).collect();
    let u16s: Vec<u16> = (0..=u16::MAX).collect();
    check_decoder(
        gpu,
        Packing::Loom(DType::Int16),
        &le_bytes(&i16s, i16::to_le_bytes),
        s,
        65536,
        64,
        "int16",
    )
    .await;
    check_decoder(
        gpu,
        Packing::Loom(DType::Uint16),
        &le_bytes(&u16s, u16::to_le_bytes),
        s,
        65536,
        64,
        "uint16",
    )
    .await;
    // float64 → f32: normal, rounding ties, f32 subnormals, overflow, Inf, NaN, f64 subnormals.
    let mut f64s: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -2.5,
        1.0 + 2f64.powi(-24),
        1.0 + 3.0 * 2f64.powi(-24),
        1.0 + 2f64.powi(-24) + 2f64.powi(-50),
        f64::from(f32::MAX),
        f64::from(f32::MAX) * (1.0 + 2f64.powi(-25)),
        3.5e38,
        1e300,
        -1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e-40,
        -1e-40,
        1.4e-45,
        0.7e-45,
        0.71e-45,
        1e-46,
        f64::from(f32::MIN_POSITIVE) * (1.0 - 2f64.powi(-25)),
        f64::MIN_POSITIVE,
        5e-324,
    ];
    f64s.extend((0..4000).map(|k| f64::from_bits(r.next()) * if k % 2 == 0 { 1.0 } else { 0.0 }));
    f64s.extend((0..4000).map(|k| (r.f32() as f64) * 2f64.powi(k % 300 - 150) * (1.0 + 1e-9 * k as f64)));
    let n = f64s.len() / 64 * 64;
    check_decoder(
        gpu,
        Packing::Loom(DType::Float64),
        &le_bytes(&f64s[..n], f64::to_le_bytes),
        1.0,
        n,
        64,
        "float64",
    )
    .await;
    f64s.retain(|v| (*v as f32).is_finite());
    let n = f64s.len() / 64 * 64;
    let what = "float64 with finite f32 values";
    check_decoder(
        gpu,
        Packing::Loom(DType::Float64),
        &le_bytes(&f64s[..n], f64::to_le_bytes),
        1.0,
        n,
        64,
        what,
    )
    .await;
    // Block formats: random blocks (every nibble and byte value occurs).
    for t in GPU_GGML_TYPES {
        let bytes = random_blocks(t, 64, 3);
        let n = 64 * t.block_len();
        check_decoder(gpu, Packing::Ggml(t), &bytes, 1.0, n, 64, &format!("{t} blocks")).await;
    }
    let payload = q4_0::pack(&inputs(64 * 32, 8));
    check_decoder(gpu, Packing::LoomQ4_0, &payload, 1.0, 64 * 32, 64, "Loom Q4_0 blocks").await;
}

pub async fn more_rows_than_one_dispatch_dimension(gpu: &Gpu) {
    let (n_in, n_out) = (3, 70_001);
    let master = inputs(n_in * n_out, 4);
    let scale = loom_wasm::dtype::auto_scale(DType::Int8, &master);
    let bytes = loom_wasm::dtype::quantize(DType::Int8, &master, scale);
    let p = Packing::Loom(DType::Int8);
    let w = packed_values(p, &bytes, scale, n_in * n_out).unwrap();
    let x = inputs(n_in, 5);
    let mag = magnitudes(&x, &w, n_in, n_out);
    let cpu = dense_f32(w, n_in, n_out, Activation::Linear)
        .forward(&x, &[1, n_in])
        .unwrap();
    let kernel = MatVec::new(gpu, p, false).unwrap();
    let out = run(
        gpu,
        &kernel,
        &x,
        &upload(gpu, p, &bytes, scale, n_in, n_out).await,
        Activation::Linear,
    )
    .await;
    assert_close(&out, &cpu.data, &mag, rtol(p), "int8 3→70001");
}

pub async fn bad_inputs_are_errors(gpu: &Gpu) {
    let p = Packing::Loom(DType::Int4);
    // 5×3 int4 weights need 8 bytes.
    assert!(PackedWeights::upload(gpu, p, &[0; 7], 1.0, 5, 3).await.is_err());
    let w = upload(gpu, p, &[0; 8], 1.0, 5, 3).await;
    let other = MatVec::new(gpu, Packing::Loom(DType::Int8), false).unwrap();
    assert!(other.run(gpu, &[0.0; 5], &w, Activation::Linear.into()).await.is_err());
    let kernel = MatVec::new(gpu, p, false).unwrap();
    assert!(kernel.run(gpu, &[0.0; 7], &w, Activation::Linear.into()).await.is_err());
    assert!(PackedWeights::upload(gpu, Packing::LoomQ4_0, &[0; 12], 1.0, 5, 3)
        .await
        .is_err());
    assert!(
        PackedWeights::upload(gpu, Packing::Ggml(GgmlType::Q8_0), &[0; 33], 1.0, 32, 1)
            .await
            .is_err()
    );
}

/// The matvec's options against their CPU twin: RMSNorm of x folded into the product (`ops::rms_norm_into`, then
/// the product) and the residual add (`y +=`), apart and together, over every kernel variant, with batches of 1, 3
/// and 19 (1, 4 and 16 rows a workgroup). y starts out holding other values: without `accumulate` it must not read
/// them.
pub async fn norm_and_residual_add_match_the_cpu_ops(gpu: &Gpu) {
    let eps = 1e-5;
    let cases = [
        (Packing::Loom(DType::Float32), 70usize, 9usize),
        (Packing::Ggml(GgmlType::Q4_1), 96, 33),
        (Packing::Ggml(GgmlType::Q8_0), 64, 5),
        (Packing::Ggml(GgmlType::Q6_K), 256, 7),
    ];
    for (p, n_in, n_out) in cases {
        let bytes = match p {
            Packing::Ggml(t) => random_blocks(t, (n_in * n_out).div_ceil(t.block_len()), (n_in + n_out) as u64),
            _ => inputs(n_in * n_out, 5).iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let w = packed_values(p, &bytes, 1.0, n_in * n_out).unwrap();
        let packed = upload(gpu, p, &bytes, 1.0, n_in, n_out).await;
        let gamma: Vec<f32> = inputs(n_in, 3).iter().map(|g| 1.0 + 0.5 * g).collect();
        let gamma_buffer = upload_f32(gpu, "gamma", &gamma).await;
        for batch in [1usize, 3, 19] {
            // Rows of x far from unit scale, so that a missing norm shows.
            let x: Vec<f32> = inputs(n_in * batch, 11 + batch as u64)
                .iter()
                .map(|v| 4.0 * v)
                .collect();
            let y0 = inputs(n_out * batch, 13 + batch as u64);
            let mut xn = vec![0.0; x.len()];
            ops::rms_norm_into(&x, &gamma, eps, &mut xn);
            let product = dense_f32(w.clone(), n_in, n_out, Activation::Linear)
                .forward(&xn, &[batch, n_in])
                .unwrap()
                .data;
            let mag = magnitudes(&xn, &w, n_in, n_out);
            for (norm, accumulate) in [(true, false), (false, true), (true, true)] {
                let input = if norm { &x } else { &xn };
                let want: Vec<f32> = if accumulate {
                    product.iter().zip(&y0).map(|(a, b)| a + b).collect()
                } else {
                    product.clone()
                };
                let mag: Vec<f32> = mag.iter().zip(&y0).map(|(m, y)| m + y.abs()).collect();
                for (kernel, path) in batch_kernels(gpu, p, batch) {
                    let options = MatVecOptions {
                        norm: norm.then_some((&gamma_buffer, eps)),
                        accumulate,
                        glu: None,
                    };
                    let got = kernel
                        .run_with(gpu, input, &packed, &y0, Pointwise::Identity, options)
                        .await
                        .unwrap();
                    let what = format!(
                        "{:?} {n_in}→{n_out} ×{batch}, norm {norm}, add {accumulate} ({path})",
                        p
                    );
                    assert_close(&got, &want, &mag, 2.0 * rtol(p), &what);
                }
            }
        }
    }
}

/// x read as a gated unit's product from fused gate|up rows (`MatVecOptions::glu`: the down projection's input)
/// against the CPU's SwiGLU/GeGLU (`ops::silu_mul`, `ops::gelu_tanh_mul`) then the product, with and without the
/// residual add, over every kernel variant and batches of 1, 3 and 19 (1, 4 and 16 rows a workgroup, tiled on
/// GPUs); rows of the wrong width and a norm with it are refused.
pub async fn gated_unit_input_matches_the_cpu_product(gpu: &Gpu) {
    let cases = [
        (Packing::Loom(DType::Float32), 70usize, 9usize, Pointwise::Silu),
        (Packing::Ggml(GgmlType::Q4_1), 160, 70, Pointwise::Silu),
        (Packing::Ggml(GgmlType::Q8_0), 64, 5, Pointwise::Gelu),
        (Packing::Ggml(GgmlType::Q6_K), 512, 7, Pointwise::Gelu),
    ];
    for (p, n_in, n_out, glu) in cases {
        let bytes = match p {
            Packing::Ggml(t) => random_blocks(t, (n_in * n_out).div_ceil(t.block_len()), (n_in + n_out) as u64),
            _ => inputs(n_in * n_out, 5).iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let w = packed_values(p, &bytes, 1.0, n_in * n_out).unwrap();
        let packed = upload(gpu, p, &bytes, 1.0, n_in, n_out).await;
        for batch in [1usize, 3, 19] {
            let gate_up: Vec<f32> = inputs(2 * n_in * batch, 17 + batch as u64)
                .iter()
                .map(|v| 3.0 * v)
                .collect();
            let mut x = Vec::with_capacity(n_in * batch);
            for row in gate_up.chunks(2 * n_in) {
                let mut g = row[..n_in].to_vec();
                match glu {
                    Pointwise::Gelu => ops::gelu_tanh_mul(&mut g, &row[n_in..]),
                    _ => ops::silu_mul(&mut g, &row[n_in..]),
                }
                x.extend(g);
            }
            let product = dense_f32(w.clone(), n_in, n_out, Activation::Linear)
                .forward(&x, &[batch, n_in])
                .unwrap()
                .data;
            let y0 = inputs(n_out * batch, 13 + batch as u64);
            let mag: Vec<f32> = magnitudes(&x, &w, n_in, n_out)
                .iter()
                .zip(&y0)
                .map(|(m, y)| m + y.abs())
                .collect();
            for accumulate in [false, true] {
                let want: Vec<f32> = match accumulate {
                    true => product.iter().zip(&y0).map(|(a, b)| a + b).collect(),
                    false => product.clone(),
                };
                for (kernel, path) in batch_kernels(gpu, p, batch) {
                    let options = MatVecOptions {
                        norm: None,
                        accumulate,
                        glu: Some(glu),
                    };
                    let got = kernel
                        .run_with(gpu, &gate_up, &packed, &y0, Pointwise::Identity, options)
                        .await
                        .unwrap();
                    let what = format!("{p:?} {glu:?} {n_in}→{n_out} ×{batch}, add {accumulate} ({path})");
                    assert_close(&got, &want, &mag, 2.0 * rtol(p), &what);
                }
            }
        }
        // Rows of n_in values, or a norm besides, are refused.
        let xb = upload_f32(gpu, "x", &inputs(2 * n_in, 1)).await;
        let yb = upload_f32(gpu, "y", &inputs(n_out, 1)).await;
        let gamma = upload_f32(gpu, "gamma", &inputs(n_in, 1)).await;
        let kernel = &kernels(gpu, p)[0].0;
        let y_rows = Rows::new(&yb, 1, n_out as u32);
        for (cols, norm) in [(n_in, false), (2 * n_in, true)] {
            let options = MatVecOptions {
                norm: norm.then_some((&gamma, 1e-5)),
                accumulate: false,
                glu: Some(glu),
            };
            let mut recorder = Recorder::new(gpu);
            let x_rows = Rows::new(&xb, 1, cols as u32);
            assert!(kernel
                .encode_with(&mut recorder, x_rows, &packed, y_rows, Pointwise::Identity, options)
                .is_err());
        }
    }
}
