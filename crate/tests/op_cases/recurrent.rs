//! `shaders/recurrent.wgsl` (RNN, LSTM) against its CPU twin, `CpuModel` on a one-layer network (bit-exact with
//! Loom): sizes past the workgroup, long sequences, tiles and dtypes; no state carried between calls; bad inputs as
//! typed errors.
//!
//! Tolerance: |gpu − cpu| ≤ 1e-5·(1 + T/8) + 1e-4·|cpu| for T steps. The CPU sums in f64 (LSTM: f64 tiles rounded
//! to f32) and carries the LSTM state in f64; the GPU does everything in f32 with its own exp/tanh, and each step
//! feeds its error into the next (measured on lavapipe: at most 5e-7 up to 6 steps, 7e-6 after 40 steps of an RNN
//! whose unsigned weights amplify the state).

use loom_wasm::cpu::Tensor;
use loom_wasm::gpu::{Gpu, GpuTensor, Recorder, Recurrent};
use loom_wasm::{DType, LoomError};

use super::harness::{close, cpu, data, one_layer, with_dtype, with_weights};

const ABS: f32 = 1e-5;
const REL: f32 = 1e-4;

on_each_device!(
    sizes_past_the_workgroup_long_sequences_tiles_and_dtypes_match_the_cpu,
    no_state_is_carried_between_calls,
    recurrent_bad_inputs_are_typed_errors,
);

pub async fn sizes_past_the_workgroup_long_sequences_tiles_and_dtypes_match_the_cpu(gpu: &Gpu) {
    let rec = Recurrent::new(gpu).unwrap();
    // (input, hidden, steps, batch, tile_size): hidden below, at and past the 64 lanes; long sequences; odd tiles.
    let sizes = [
        (5, 3, 4, 1, 0),
        (16, 64, 6, 3, 0),
        (33, 70, 5, 2, 3),
        (100, 129, 3, 2, 16),
        (8, 20, 40, 4, 1),
    ];
    let dtypes = [
        DType::Float32,
        DType::Float16,
        DType::Fp8E5M2,
        DType::Int8,
        DType::Uint4,
    ];
    for ty in ["RNN", "LSTM"] {
        let gates = if ty == "RNN" { 1 } else { 4 };
        for (i, (n_in, hidden, steps, batch, tile)) in sizes.into_iter().enumerate() {
            let json = format!(
                r#""type":"{ty}","activation":"Sigmoid","input_height":{n_in},"output_height":{hidden},"seq_length":{steps},"tile_size":{tile}"#
            );
            // Weights scaled so that pre-activations stay in tanh's and σ's responsive range.
            let scale = 1.5 / ((n_in + hidden) as f32).sqrt();
            let w = data(i as u64, gates * hidden * (n_in + hidden + 1), -scale, scale);
            let net = with_weights(one_layer(&json), w);
            let shape = vec![batch, steps, n_in];
            let x = data(50 + i as u64, batch * steps * n_in, -1.0, 1.0);
            for dt in dtypes {
                let net = with_dtype(net.clone(), dt);
                let want = cpu(&net, &x, &shape);
                let xt = Tensor::new(x.clone(), shape.clone()).unwrap();
                let got = rec.forward(gpu, &net.layers[0], "layers.0", &xt).await.unwrap();
                assert_eq!(got.shape, vec![batch, steps, hidden]);
                let what = format!("{ty} {n_in}→{hidden} ×{steps} steps ×{batch} tile {tile} {}", dt.name());
                close(&what, &got.data, &want.data, ABS * (1.0 + steps as f32 / 8.0), REL);
            }
        }
    }
}

pub async fn no_state_is_carried_between_calls(gpu: &Gpu) {
    // Loom starts every call from zero state: the same input twice gives the same output, on the GPU as on the CPU,
    // also when the two calls are recorded into one encoder.
    let rec = Recurrent::new(gpu).unwrap();
    let net = with_weights(
        one_layer(r#""type":"LSTM","input_height":6,"output_height":9,"seq_length":5"#),
        data(1, 4 * 9 * 16, -0.4, 0.4),
    );
    let layer = &net.layers[0];
    let x = Tensor::new(data(2, 2 * 5 * 6, -1.0, 1.0), vec![2, 5, 6]).unwrap();
    let want = cpu(&net, &x.data, &x.shape);
    let (a, b) = async {
        let w = rec.prepare(gpu, layer, "layers.0").await?;
        let xg = GpuTensor::upload(gpu, &x).await?;
        let mut recorder = Recorder::new(gpu);
        let a = rec.encode(&mut recorder, layer, "layers.0", &w, &xg)?;
        let b = rec.encode(&mut recorder, layer, "layers.0", &w, &xg)?;
        recorder.submit();
        Ok::<_, LoomError>((a.read(gpu).await?, b.read(gpu).await?))
    }
    .await
    .unwrap();
    close("LSTM first call", &a.data, &want.data, ABS, REL);
    assert_eq!(a.data, b.data, "the second call must not see the first one's state");
}

pub async fn recurrent_bad_inputs_are_typed_errors(gpu: &Gpu) {
    let rec = Recurrent::new(gpu).unwrap();
    let net = with_weights(
        one_layer(r#""type":"RNN","input_height":4,"output_height":3,"seq_length":5"#),
        data(1, 3 * 8, -0.4, 0.4),
    );
    let layer = &net.layers[0];
    let run = async |l: &loom_wasm::network::Layer, x: Tensor| rec.forward(gpu, l, "layers.0", &x).await.unwrap_err();
    // Batch 2 needs 2·5·4 values; a scalar has no batch.
    let err = run(layer, Tensor::new(vec![0.5; 38], vec![2, 19]).unwrap()).await;
    assert!(
        matches!(&err, LoomError::InvalidInput(m) if m.contains("[batch, 5, 4]")),
        "{err:?}"
    );
    let err = run(layer, Tensor::new(vec![0.5], vec![]).unwrap()).await;
    assert!(
        matches!(&err, LoomError::InvalidInput(m) if m.contains("scalar")),
        "{err:?}"
    );
    // Too few weights; a layer without weights; not a recurrent layer.
    let x = Tensor::new(vec![0.5; 20], vec![1, 5, 4]).unwrap();
    let short = with_weights(net.clone(), vec![0.1; 3 * 8 - 1]);
    assert!(matches!(
        run(&short.layers[0], x.clone()).await,
        LoomError::InvalidNetwork(_)
    ));
    let mut bare = net.clone();
    bare.layers[0].weights = None;
    assert!(matches!(
        run(&bare.layers[0], x.clone()).await,
        LoomError::InvalidNetwork(_)
    ));
    let dense = one_layer(r#""type":"Dense","input_height":4,"output_height":2"#);
    assert!(matches!(run(&dense.layers[0], x).await, LoomError::InvalidInput(_)));
}
