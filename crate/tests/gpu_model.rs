//! `GpuModel`: whole networks on the GPU (natively through wgpu → Vulkan, Mesa lavapipe) against `CpuModel`, which
//! is bit-exact with Loom. Checks the values (within the conformance tolerance, `GPU_TOLERANCE`, as errors compound
//! through the layers) and what the device did: one submit and one readback per forward for networks of
//! GPU layers, no bind group or buffer created by a forward that repeats an input shape (decode steps included),
//! layers packed as stored, and forwards that never read host weights once the layers are prepared.
#![cfg(not(target_arch = "wasm32"))]

mod gpu_util;

use std::sync::Arc;

use gpu_util::{close, data};
use loom_wasm::conformance::GPU_TOLERANCE;
use loom_wasm::cpu::CpuModel;
use loom_wasm::formats::loom_json;
use loom_wasm::gpu::{dense_weights, ForwardStats, Gpu, GpuModel, Packing};
use loom_wasm::network::{Network, WeightStore};
use loom_wasm::{DType, LoomError};

const ABS: f32 = GPU_TOLERANCE.0;
const REL: f32 = GPU_TOLERANCE.1;

/// A device of the test's own: the counts are the device's, and tests run in parallel.
fn gpu() -> Arc<Gpu> {
    Arc::new(gpu_util::gpu())
}

/// A network from a list of layer JSON objects (`"type"` and the rest), one cell, weights seeded by `build`.
fn network(layers: &[&str]) -> Network {
    let layers: Vec<String> = layers
        .iter()
        .enumerate()
        .map(|(l, body)| format!(r#"{{"z":0,"y":0,"x":0,"l":{l},{body}}}"#))
        .collect();
    let arch = format!(
        r#"{{"depth":1,"rows":1,"cols":1,"layers_per_cell":{},"layers":[{}]}}"#,
        layers.len(),
        layers.join(",")
    );
    loom_json::build(arch.as_bytes()).unwrap()
}

fn dense(n_in: usize, n_out: usize, act: &str) -> String {
    format!(r#""type":"Dense","activation":"{act}","input_height":{n_in},"output_height":{n_out}"#)
}

fn nested(kind: &str, mode: &str, children: &[String]) -> String {
    let children: Vec<String> = children
        .iter()
        .map(|c| format!(r#"{{"z":0,"y":0,"x":0,"l":0,{c}}}"#))
        .collect();
    match kind {
        "Parallel" => format!(
            r#""type":"Parallel","combine_mode":"{mode}","parallel_branches":[{}]"#,
            children.join(",")
        ),
        _ => format!(r#""type":"Sequential","sequential_layers":[{}]"#, children.join(",")),
    }
}

/// Every GPU layer family and combinator, on `[2, 16]` inputs.
fn every_gpu_family() -> Network {
    let swiglu = r#""type":"SwiGLU","input_height":16,"output_height":40"#.to_string();
    let rms = r#""type":"RMSNorm","input_height":24"#.to_string();
    let layer_norm = r#""type":"LayerNorm","input_height":16"#.to_string();
    let mut net = network(&[
        &dense(16, 24, "Silu"),
        // concat of a Dense and a Sequential whose Residual adds its previous sub-layer's input.
        &nested(
            "Parallel",
            "concat",
            &[
                dense(24, 8, "Tanh"),
                nested(
                    "Sequential",
                    "",
                    &[
                        dense(24, 24, "ReLU"),
                        r#""type":"Residual""#.into(),
                        rms,
                        dense(24, 8, "Linear"),
                    ],
                ),
            ],
        ),
        &nested(
            "Parallel",
            "add",
            &[dense(16, 16, "Linear"), swiglu, r#""type":"Metacognition""#.into()],
        ),
        &nested(
            "Parallel",
            "avg",
            &[dense(16, 16, "Sigmoid"), layer_norm, dense(16, 16, "LeakyReLU")],
        ),
        r#""type":"MultiHeadAttention","d_model":16,"num_heads":4,"num_kv_heads":2"#,
        &nested(
            "Parallel",
            "concat",
            &[
                nested("Parallel", "filter", &[dense(16, 4, "ReLU")]),
                dense(16, 12, "Tanh"),
            ],
        ),
        &nested(
            "Sequential",
            "",
            &[dense(16, 16, "ReLU2"), r#""type":"Residual""#.into()],
        ),
        // Rows of 5 over 32 values: the last row is short.
        r#""type":"Softmax","softmax_type":"Grid","softmax_rows":7,"softmax_cols":5"#,
    ]);
    // Architecture JSON has no observed layer: the Metacognition branch observes a Dense.
    let observed = network(&[&dense(16, 16, "GELU")]).layers.remove(0);
    net.layers[2].parallel_branches[2].meta_observed_layer = Some(Box::new(observed));
    net
}

fn stats(dispatches: u32, bind_groups: u32, buffers: u32, submits: u32, readbacks: u32) -> ForwardStats {
    ForwardStats {
        dispatches,
        bind_groups,
        buffers,
        submits,
        readbacks,
    }
}

fn check(what: &str, model: &mut GpuModel, cpu: &mut CpuModel, x: &[f32], shape: &[usize]) -> ForwardStats {
    let want = cpu.forward(x, shape).unwrap();
    let got = pollster::block_on(model.forward(x, shape)).unwrap();
    assert_eq!(got.shape, want.shape, "{what}");
    close(what, &got.data, &want.data, ABS, REL);
    let stats = model.stats();
    eprintln!("  {stats:?}");
    stats
}

#[test]
fn a_network_of_gpu_layers_submits_once_and_matches_the_cpu() {
    let net = every_gpu_family();
    let mut cpu = CpuModel::new(net.clone());
    let mut model = GpuModel::new(gpu(), net).unwrap();
    let x = data(1, 32, -1.0, 1.0);
    let first = check("every family, first forward", &mut model, &mut cpu, &x, &[2, 16]);
    assert!(model.cpu_layers().is_empty(), "{:?}", model.cpu_layers());
    // The figures BENCHMARKS.md states, counted at the wgpu calls (`Gpu::counts`): a dispatch and a bind group per
    // kernel, a uniform per kernel less the two whose words repeat an earlier dispatch's of their layer (they share
    // its block), a buffer per output, the readback's staging buffer; one submit, one readback.
    assert_eq!(first, stats(33, 33, 64, 1, 1));
    // The same shape again: every layer's plan is reused.
    let x = data(2, 32, -1.0, 1.0);
    let second = check("every family, same shape", &mut model, &mut cpu, &x, &[2, 16]);
    assert_eq!(second, stats(33, 0, 0, 1, 1));
    // A new shape gets its own plans (and a larger staging buffer), and the first shape's plans survive it.
    let x = data(3, 48, -1.0, 1.0);
    let third = check("every family, batch 3", &mut model, &mut cpu, &x, &[3, 16]);
    assert_eq!(third, stats(33, 33, 64, 1, 1));
    let x = data(4, 32, -1.0, 1.0);
    let fourth = check("every family, batch 2 again", &mut model, &mut cpu, &x, &[2, 16]);
    assert_eq!(fourth, stats(33, 0, 0, 1, 1));
}

#[test]
fn decode_steps_reuse_every_bind_group_and_buffer() {
    // Embedding → RMSNorm → MHA → SwiGLU → Dense over a prefill of 6 ids, then one id at a time: the KV cache carries
    // over on both sides, and after the first decode step the GPU creates nothing (the positions change only
    // uniform words and the RoPE table, rewritten in place).
    let net = network(&[
        r#""type":"Embedding","vocab_size":50,"embedding_dim":32"#,
        r#""type":"RMSNorm","input_height":32"#,
        r#""type":"MultiHeadAttention","d_model":32,"num_heads":4,"num_kv_heads":2"#,
        r#""type":"SwiGLU","input_height":32,"output_height":48"#,
        r#""type":"RMSNorm","input_height":32,"output_height":32"#,
    ]);
    let mut cpu = CpuModel::new(net.clone());
    let mut model = GpuModel::new(gpu(), net).unwrap();
    let ids = [3.0, 17.0, 42.0, 0.0, 9.0, 31.0];
    let prefill = check("prefill of 6", &mut model, &mut cpu, &ids, &[6]);
    assert_eq!(prefill, stats(15, 15, 30, 1, 1));
    for (step, id) in [5.0, 48.0, 12.0, 7.0].into_iter().enumerate() {
        let got = check(&format!("decode step {step}"), &mut model, &mut cpu, &[id], &[1]);
        // The first step plans its shape (the staging buffer is the prefill's); later ones create nothing.
        let want = if step == 0 {
            stats(15, 15, 29, 1, 1)
        } else {
            stats(15, 0, 0, 1, 1)
        };
        assert_eq!(got, want, "decode step {step}");
    }
}

#[test]
fn conv_recurrent_kmeans_and_sparse_softmax_layers_stay_on_the_gpu() {
    let net = network(&[
        r#""type":"CNN1","activation":"ReLU","input_channels":2,"input_height":6,"filters":2,"output_height":6,
        "kernel_size":3,"stride":1,"padding":1"#,
        r#""type":"RNN","activation":"Tanh","input_height":6,"output_height":4,"seq_length":2"#,
        r#""type":"LSTM","input_height":4,"output_height":3,"seq_length":2"#,
        &dense(6, 5, "Linear"),
        r#""type":"Softmax","softmax_type":"Sparse""#,
        r#""type":"KMeans","activation":"Linear","input_height":10,"num_clusters":3"#,
    ]);
    let mut cpu = CpuModel::new(net.clone());
    let mut model = GpuModel::new(gpu(), net).unwrap();
    let x = data(8, 24, -1.0, 1.0);
    let first = check(
        "CNN1 → RNN → LSTM → Dense → sparsemax → KMeans",
        &mut model,
        &mut cpu,
        &x,
        &[2, 12],
    );
    assert!(model.cpu_layers().is_empty(), "{:?}", model.cpu_layers());
    assert_eq!(first, stats(8, 8, 18, 1, 1));
    let x = data(9, 24, -1.0, 1.0);
    let again = check("again", &mut model, &mut cpu, &x, &[2, 12]);
    assert_eq!(again, stats(8, 0, 0, 1, 1));
}

#[test]
fn a_layer_the_device_cannot_hold_runs_on_the_cpu_between_gpu_layers() {
    // Storage bindings capped at 1 KiB: the 64→20 Dense's 5 KiB of weights would need 5 bindings (the matvec reads
    // at most 4), so it runs on the CPU; the forward submits and reads back before it, and uploads its output.
    let gpu = Arc::new(pollster::block_on(Gpu::with_max_binding(1024)).unwrap());
    let net = network(&[&dense(16, 64, "Tanh"), &dense(64, 20, "Silu"), &dense(20, 8, "Linear")]);
    let mut cpu = CpuModel::new(net.clone());
    let mut model = GpuModel::new(gpu, net).unwrap();
    let x = data(5, 32, -1.0, 1.0);
    let first = check("Dense → Dense (CPU) → Dense", &mut model, &mut cpu, &x, &[2, 16]);
    let reasons: Vec<(&String, &String)> = model.cpu_layers().iter().collect();
    assert_eq!(reasons.len(), 1);
    assert_eq!(reasons[0].0, "layers.1");
    assert!(reasons[0].1.contains("bindings"), "{}", reasons[0].1);
    assert_eq!(first, stats(2, 2, 7, 2, 2));
    // The CPU layer's upload reuses its plan too.
    let again = check("again", &mut model, &mut cpu, &x, &[2, 16]);
    assert_eq!(again, stats(2, 0, 0, 2, 2));
}

#[test]
fn swiglu_and_mha_packed_as_stored_match_the_cpu_for_sub_byte_and_wide_dtypes() {
    // Odd sizes, so that gate, up, down and the biases of one store start inside a word of codes (1, 2, 4-bit
    // dtypes) and the MHA projections at odd element offsets; 8, 16 and 64-bit dtypes for the other unit widths.
    let net = network(&[
        r#""type":"SwiGLU","input_height":13,"output_height":7"#,
        r#""type":"MultiHeadAttention","d_model":13,"num_heads":1,"num_kv_heads":1"#,
    ]);
    let x = data(6, 3 * 13, -1.0, 1.0);
    for dt in [
        DType::Binary,
        DType::Ternary,
        DType::Int2,
        DType::Uint4,
        DType::Int4,
        DType::Fp4,
        DType::Fp8E4M3,
        DType::Int8,
        DType::Float16,
        DType::BFloat16,
        DType::Int16,
        DType::Float64,
        DType::Int64,
    ] {
        let mut net = net.clone();
        for layer in &mut net.layers {
            layer.dtype = dt;
            layer.weights.as_mut().unwrap().morph(dt);
            // The GPU reads the dtype's packed version, not a float32 copy.
            assert_eq!(dense_weights(layer).unwrap().0, Packing::Loom(dt));
        }
        let mut cpu = CpuModel::new(net.clone());
        let mut model = GpuModel::new(gpu(), net).unwrap();
        check(&format!("{dt} SwiGLU → MHA"), &mut model, &mut cpu, &x, &[3, 13]);
    }
}

#[test]
fn prepared_layers_forward_without_their_host_weights() {
    let net = every_gpu_family();
    let x = data(7, 32, -1.0, 1.0);
    let want = CpuModel::new(net.clone()).forward(&x, &[2, 16]).unwrap();
    let weighted = |net: &Network| {
        let mut paths = Vec::new();
        net.for_each_layer(&mut |p, l| {
            if l.weights.is_some() {
                paths.push(p.to_string())
            }
        });
        paths
    };
    let before = weighted(&net);
    eprintln!("weighted layers: {before:?}");
    let mut model = GpuModel::new(gpu(), net).unwrap();
    pollster::block_on(model.prepare()).unwrap();
    assert_eq!(model.drop_host_weights(), before.len());
    assert!(weighted(model.network()).is_empty());
    let got = pollster::block_on(model.forward(&x, &[2, 16])).unwrap();
    close("every family after drop_host_weights", &got.data, &want.data, ABS, REL);

    // Streaming: a network whose layers arrive one at a time, each installed, prepared and dropped.
    let full = network(&[&dense(16, 16, "Tanh"), &dense(16, 8, "Silu")]);
    let want = CpuModel::new(full.clone()).forward(&x, &[2, 16]).unwrap();
    let mut empty = full.clone();
    empty.layers.iter_mut().for_each(|l| l.weights = None);
    let mut model = GpuModel::new(gpu(), empty).unwrap();
    for (i, layer) in full.layers.iter().enumerate() {
        let path = format!("layers.{i}");
        model.layer_mut(&path).unwrap().weights = layer.weights.clone();
        pollster::block_on(model.prepare_layer(&path)).unwrap();
        assert_eq!(model.drop_host_weights(), 1);
    }
    let got = pollster::block_on(model.forward(&x, &[2, 16])).unwrap();
    close("layers streamed in one at a time", &got.data, &want.data, ABS, REL);
}

#[test]
fn bad_networks_and_inputs_are_typed_errors() {
    let mut model = GpuModel::new(gpu(), network(&[&dense(16, 4, "ReLU")])).unwrap();
    let err = pollster::block_on(model.forward(&[0.5; 15], &[1, 15])).unwrap_err();
    // Refused at the input, naming the shape the first layer expects.
    assert!(
        matches!(err, LoomError::InvalidInput(ref m) if m.contains("[batch, 16]") && m.contains("layers.0")),
        "{err:?}"
    );
    let err = pollster::block_on(model.forward(&[0.5; 15], &[1, 16])).unwrap_err();
    assert!(matches!(err, LoomError::InvalidInput(_)), "{err:?}");
    assert!(matches!(model.layer_mut("layers.7"), Err(LoomError::InvalidInput(_))));
    assert!(matches!(
        model.layer_mut("layers.0.parallel_branches.0"),
        Err(LoomError::InvalidInput(_))
    ));

    let mut net = network(&[&dense(16, 4, "ReLU")]);
    net.layers[0].weights = None;
    let err = pollster::block_on(GpuModel::new(gpu(), net).unwrap().forward(&[0.5; 16], &[1, 16])).unwrap_err();
    assert!(matches!(err, LoomError::InvalidNetwork(_)), "{err:?}");

    // A SwiGLU store too short for its sizes.
    let mut net = network(&[r#""type":"SwiGLU","input_height":4,"output_height":6"#]);
    net.layers[0].weights = Some(WeightStore::from_master(vec![0.1; 50]));
    let err = pollster::block_on(GpuModel::new(gpu(), net).unwrap().forward(&[0.5; 4], &[1, 4])).unwrap_err();
    assert!(
        matches!(err, LoomError::InvalidNetwork(ref m) if m.contains("needs")),
        "{err:?}"
    );

    // An unknown combine mode.
    let mut net = network(&[&nested("Parallel", "add", &[dense(4, 4, "ReLU")])]);
    net.layers[0].combine_mode = "mean".into();
    let err = pollster::block_on(GpuModel::new(gpu(), net).unwrap().forward(&[0.5; 4], &[1, 4])).unwrap_err();
    assert!(matches!(err, LoomError::InvalidNetwork(_)), "{err:?}");
}

#[test]
fn a_shader_the_driver_rejects_is_a_typed_error() {
    let gpu = gpu();
    // A type error, and a valid module without the entry point asked for.
    let bad = "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }";
    let good = "@group(0) @binding(0) var<storage, read_write> y: array<f32>;\n\
                @compute @workgroup_size(1) fn main() { y[0] = 1.0; }";
    for (key, source, entry) in [("test/bad", bad, "main"), ("test/no-entry", good, "other")] {
        for _ in 0..2 {
            // Refused again on a second call: a rejected pipeline is not cached.
            let err = gpu.pipeline(key, source, entry).unwrap_err();
            assert!(
                matches!(err, LoomError::Gpu(ref m) if m.starts_with(&format!("{key}: shader rejected: "))),
                "{err:?}"
            );
        }
    }
    // The device is still usable.
    gpu.pipeline("test/good", good, "main").unwrap();
    let mut model = GpuModel::new(gpu, network(&[&dense(4, 3, "ReLU")])).unwrap();
    pollster::block_on(model.forward(&[0.5; 4], &[1, 4])).unwrap();
}
