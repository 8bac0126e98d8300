//! `shaders/conv.wgsl` (CNN1/2/3, ConvTransposed1D/2D/3D) against its CPU twin, `CpuModel` on a one-layer network
//! (bit-exact with Loom): every family, dimensionality, stride, padding and dtype, two layers chained in one submit,
//! and bad inputs as typed errors.
//!
//! Tolerance: |gpu − cpu| ≤ 1e-5 + 1e-4·|cpu|. CNN sums in f32 where the CPU sums in f64 and the activations are the
//! GPU's f32 maths; ConvTransposed adds the CPU's f32 products in the CPU's order, so a float32 layer with a Linear
//! or ReLU activation matches bit for bit on CPU adapters (asserted below). GPU compilers contract `sum += x·w` into
//! fused multiply-adds (one rounding instead of two: an H200 differed in the last bit), so there the tolerance holds.

use loom_wasm::cpu::Tensor;
use loom_wasm::gpu::{Conv, Gpu, GpuTensor, Recorder};
use loom_wasm::{DType, LoomError};

use super::harness::{close, cpu, data, exact, one_layer, with_dtype, with_weights};

const ABS: f32 = 1e-5;
const REL: f32 = 1e-4;

on_each_device!(
    every_family_dimensionality_stride_padding_and_dtype_matches_the_cpu,
    encode_chains_layers_in_one_submit,
    conv_bad_inputs_are_typed_errors,
);

/// One layer: type, channels, filters, input extents (the type's own: L, H·W or D·H·W), kernel, stride, padding,
/// batch, activation.
struct Shape {
    ty: &'static str,
    c: usize,
    f: usize,
    input: &'static [usize],
    k: usize,
    s: usize,
    p: usize,
    batch: usize,
    act: &'static str,
}

const SHAPES: [Shape; 12] = [
    Shape {
        ty: "CNN1",
        c: 3,
        f: 5,
        input: &[37],
        k: 3,
        s: 1,
        p: 1,
        batch: 2,
        act: "ReLU",
    },
    Shape {
        ty: "CNN1",
        c: 2,
        f: 4,
        input: &[64],
        k: 5,
        s: 2,
        p: 2,
        batch: 3,
        act: "GELU",
    },
    Shape {
        ty: "CNN2",
        c: 3,
        f: 8,
        input: &[17, 13],
        k: 3,
        s: 2,
        p: 1,
        batch: 2,
        act: "Tanh",
    },
    Shape {
        ty: "CNN2",
        c: 1,
        f: 2,
        input: &[9, 9],
        k: 4,
        s: 3,
        p: 0,
        batch: 1,
        act: "Linear",
    },
    Shape {
        ty: "CNN3",
        c: 2,
        f: 3,
        input: &[6, 7, 5],
        k: 3,
        s: 1,
        p: 1,
        batch: 2,
        act: "Sigmoid",
    },
    Shape {
        ty: "CNN3",
        c: 4,
        f: 2,
        input: &[8, 8, 8],
        k: 2,
        s: 2,
        p: 0,
        batch: 1,
        act: "Silu",
    },
    Shape {
        ty: "ConvTransposed1D",
        c: 3,
        f: 2,
        input: &[10],
        k: 4,
        s: 2,
        p: 1,
        batch: 2,
        act: "Linear",
    },
    Shape {
        ty: "ConvTransposed1D",
        c: 2,
        f: 3,
        input: &[7],
        k: 3,
        s: 3,
        p: 0,
        batch: 3,
        act: "ReLU",
    },
    Shape {
        ty: "ConvTransposed2D",
        c: 2,
        f: 4,
        input: &[5, 6],
        k: 3,
        s: 2,
        p: 1,
        batch: 2,
        act: "Tanh",
    },
    Shape {
        ty: "ConvTransposed2D",
        c: 3,
        f: 2,
        input: &[4, 4],
        k: 5,
        s: 1,
        p: 2,
        batch: 1,
        act: "LeakyReLU",
    },
    Shape {
        ty: "ConvTransposed3D",
        c: 2,
        f: 2,
        input: &[3, 4, 3],
        k: 3,
        s: 2,
        p: 1,
        batch: 2,
        act: "Sigmoid",
    },
    Shape {
        ty: "ConvTransposed3D",
        c: 1,
        f: 3,
        input: &[4, 4, 4],
        k: 2,
        s: 2,
        p: 0,
        batch: 1,
        act: "Linear",
    },
];

impl Shape {
    fn transposed(&self) -> bool {
        self.ty.starts_with("ConvTransposed")
    }

    /// The natural output extent for input extent `n`.
    fn out(&self, n: usize) -> usize {
        if self.transposed() {
            (n - 1) * self.s + self.k - 2 * self.p
        } else {
            (n + 2 * self.p - self.k) / self.s + 1
        }
    }

    /// The layer JSON: the size fields the type reads (ConvTransposed1D reads width, CNN1 height).
    fn json(&self) -> String {
        let names: &[&str] = match (self.input.len(), self.transposed()) {
            (1, false) => &["height"],
            (1, true) => &["width"],
            (2, _) => &["height", "width"],
            _ => &["depth", "height", "width"],
        };
        let sizes: String = names
            .iter()
            .zip(self.input)
            .map(|(name, n)| format!(r#","input_{name}":{n},"output_{name}":{}"#, self.out(*n)))
            .collect();
        format!(
            r#""type":"{}","activation":"{}","input_channels":{},"filters":{},"kernel_size":{},"stride":{},"padding":{}{sizes}"#,
            self.ty, self.act, self.c, self.f, self.k, self.s, self.p
        )
    }

    fn weights(&self) -> usize {
        self.f * self.c * self.k.pow(self.input.len() as u32)
    }
}

pub async fn every_family_dimensionality_stride_padding_and_dtype_matches_the_cpu(gpu: &Gpu) {
    let conv = Conv::new(gpu).unwrap();
    let dtypes = [
        DType::Float32,
        DType::Float64,
        DType::BFloat16,
        DType::Fp8E4M3,
        DType::Int8,
        DType::Int4,
        DType::Ternary,
    ];
    for (i, s) in SHAPES.iter().enumerate() {
        let net = with_weights(one_layer(&s.json()), data(i as u64, s.weights(), -0.5, 0.5));
        let shape: Vec<usize> = [s.batch, s.c].into_iter().chain(s.input.iter().copied()).collect();
        let x = data(100 + i as u64, shape.iter().product(), -2.0, 2.0);
        for dt in dtypes {
            let net = with_dtype(net.clone(), dt);
            let want = cpu(&net, &x, &shape);
            let xt = Tensor::new(x.clone(), shape.clone()).unwrap();
            let got = conv.forward(gpu, &net.layers[0], "layers.0", &xt).await.unwrap();
            assert_eq!(got.shape, want.shape);
            let what = format!(
                "{} {:?} k{} s{} p{} ×{} {} {}",
                s.ty,
                s.input,
                s.k,
                s.s,
                s.p,
                s.batch,
                s.act,
                dt.name()
            );
            let separate_roundings = matches!(gpu.info.device_type, wgpu::DeviceType::Cpu | wgpu::DeviceType::Other);
            if s.transposed() && dt == DType::Float32 && matches!(s.act, "Linear" | "ReLU") && separate_roundings {
                exact(&what, &got.data, &want.data);
            } else {
                close(&what, &got.data, &want.data, ABS, REL);
            }
            if s.transposed() && !matches!(dt, DType::Float32 | DType::Float64) {
                assert!(
                    got.data.iter().all(|v| *v == 0.0),
                    "{what}: Loom's ConvTransposed gives zeros"
                );
            }
        }
    }
}

pub async fn encode_chains_layers_in_one_submit(gpu: &Gpu) {
    // CNN2 then ConvTransposed2D recorded into one encoder, the activation staying on the GPU between them.
    let conv = Conv::new(gpu).unwrap();
    let down = &SHAPES[2];
    let up = Shape {
        ty: "ConvTransposed2D",
        c: 8,
        f: 3,
        input: &[9, 7],
        k: 3,
        s: 2,
        p: 1,
        batch: 2,
        act: "Linear",
    };
    assert_eq!((down.out(17), down.out(13)), (9, 7));
    let a = with_weights(one_layer(&down.json()), data(1, down.weights(), -0.5, 0.5));
    let b = with_weights(one_layer(&up.json()), data(2, up.weights(), -0.5, 0.5));
    let shape = vec![2, 3, 17, 13];
    let x = data(3, shape.iter().product(), -1.0, 1.0);
    let mid = cpu(&a, &x, &shape);
    let want = cpu(&b, &mid.data, &mid.shape);
    let got = async {
        let wa = conv.prepare(gpu, &a.layers[0], "layers.0").await?;
        let wb = conv.prepare(gpu, &b.layers[0], "layers.1").await?;
        let xg = GpuTensor::upload(gpu, &Tensor::new(x, shape).unwrap()).await?;
        let mut recorder = Recorder::new(gpu);
        let h = conv.encode(&mut recorder, &a.layers[0], "layers.0", &wa, &xg)?;
        let y = conv.encode(&mut recorder, &b.layers[0], "layers.1", &wb, &h)?;
        recorder.submit();
        y.read(gpu).await
    }
    .await
    .unwrap();
    assert_eq!(got.shape, vec![2, 3, 17, 13]);
    close("CNN2 → ConvTransposed2D", &got.data, &want.data, ABS, REL);
}

pub async fn conv_bad_inputs_are_typed_errors(gpu: &Gpu) {
    let conv = Conv::new(gpu).unwrap();
    let s = &SHAPES[2];
    let net = with_weights(one_layer(&s.json()), data(1, s.weights(), -0.5, 0.5));
    let layer = &net.layers[0];
    let forward = async |x: Tensor| conv.forward(gpu, layer, "layers.0", &x).await.unwrap_err();
    // Two values short of [2, 3, 17, 13], and a scalar: the CPU's messages.
    let err = forward(Tensor::new(vec![0.5; 2 * (3 * 17 * 13 - 1)], vec![2, 3 * 17 * 13 - 1]).unwrap()).await;
    assert!(
        matches!(&err, LoomError::InvalidInput(m) if m.contains("[batch, 3, 17, 13]")),
        "{err:?}"
    );
    let err = forward(Tensor::new(vec![0.5], vec![]).unwrap()).await;
    assert!(
        matches!(&err, LoomError::InvalidInput(m) if m.contains("scalar")),
        "{err:?}"
    );
    // Too few weights for the geometry.
    let short = with_weights(net.clone(), vec![0.1; s.weights() - 1]);
    let x = Tensor::new(vec![0.5; 3 * 17 * 13], vec![1, 3, 17, 13]).unwrap();
    let err = conv.forward(gpu, &short.layers[0], "layers.0", &x).await.unwrap_err();
    assert!(matches!(err, LoomError::InvalidNetwork(_)), "{err:?}");
    // Not a conv layer.
    let dense = one_layer(r#""type":"Dense","input_height":4,"output_height":2"#);
    let err = conv.forward(gpu, &dense.layers[0], "layers.0", &x).await.unwrap_err();
    assert!(matches!(err, LoomError::InvalidInput(_)), "{err:?}");
    // A stride whose positions overflow the GPU's 32-bit arithmetic (the CPU wraps in 64 bits): refused, not wrong.
    let mut huge = net.clone();
    huge.layers[0].stride = 1 << 40;
    let err = conv.forward(gpu, &huge.layers[0], "layers.0", &x).await.unwrap_err();
    assert!(matches!(err, LoomError::Unsupported(_)), "{err:?}");
}
