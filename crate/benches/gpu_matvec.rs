//! Packed matvec kernels (`shaders/matvec.wgsl`) per weight encoding: effective GB/s of weights read and GFLOP/s
//! (2·n_in·n_out·batch per matvec), median of several runs, one queue submit (and a wait for it) per measurement.
//! Not a test:
//!
//! ```sh
//! XDG_RUNTIME_DIR=/tmp VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan \
//!   cargo bench -p loom-wasm --bench gpu_matvec [-- --runs N] [--batch B] [--shapes 576x1536,2048x8192] \
//!   [--only NAME,...]
//! ```
//!
//! It prints a Markdown table. Without `--bench` (as under `cargo test --all-targets`) it prints its usage and
//! exits successfully.

use std::time::Instant;

use loom_wasm::dtype::{auto_scale, q4_0, quantize, DType};
use loom_wasm::gpu::Recorder;
use loom_wasm::gpu::{Gpu, MatVec, PackedWeights, Packing, Rows, GPU_GGML_TYPES};
use loom_wasm::network::Activation;
use loom_wasm::quant::GgmlType;

const USAGE: &str = concat!(
    "usage: cargo bench -p loom-wasm --bench gpu_matvec ",
    "[-- --runs N] [--batch B] [--shapes 576x1536,2048x8192] [--only NAME,...]"
);

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// SplitMix64 → uniform in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Random ggml blocks (plausible f16 scales, random quants).
fn ggml_blocks(t: GgmlType, n: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = values(n.div_ceil(32) * t.block_bytes(), 9)
        .iter()
        .map(|v| (v.to_bits() >> 7) as u8)
        .collect();
    for b in bytes.chunks_exact_mut(t.block_bytes()) {
        b[..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        if t == GgmlType::Q4_1 {
            b[2..4].copy_from_slice(&half::f16::from_f32(-0.05).to_bits().to_le_bytes());
        }
    }
    bytes
}

struct Case {
    name: String,
    packing: Packing,
    shader_f16: bool,
}

fn cases(gpu: &Gpu) -> Vec<Case> {
    let loom = |dt: DType, shader_f16: bool| Case {
        name: format!("{dt}{}", if shader_f16 { " (shader-f16)" } else { "" }),
        packing: Packing::Loom(dt),
        shader_f16,
    };
    let mut out = vec![loom(DType::Float32, false), loom(DType::Float16, false)];
    if gpu.has_f16 {
        out.push(loom(DType::Float16, true));
    }
    for dt in [
        DType::BFloat16,
        DType::Float64,
        DType::Int64,
        DType::Int32,
        DType::Uint32,
        DType::Int16,
        DType::Int8,
        DType::Uint8,
        DType::Fp8E4M3,
        DType::Fp8E5M2,
        DType::Int4,
        DType::Fp4,
        DType::Int2,
        DType::Ternary,
        DType::Binary,
    ] {
        out.push(loom(dt, false));
    }
    out.push(Case {
        name: "Loom Q4_0".into(),
        packing: Packing::LoomQ4_0,
        shader_f16: false,
    });
    for t in GPU_GGML_TYPES {
        out.push(Case {
            name: format!("ggml {t}"),
            packing: Packing::Ggml(t),
            shader_f16: false,
        });
    }
    out
}

fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        println!("{USAGE}");
        return Ok(());
    }
    let mut runs = 9usize;
    let mut batch = 1usize;
    let mut only: Option<Vec<String>> = None;
    let mut shapes = vec![(576usize, 1536usize), (2048, 8192)];
    let mut it = args.iter().filter(|a| *a != "--bench");
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => runs = it.next().ok_or(USAGE)?.parse()?,
            "--batch" => batch = it.next().ok_or(USAGE)?.parse()?,
            "--only" => only = Some(it.next().ok_or(USAGE)?.split(',').map(str::to_string).collect()),
            "--shapes" => {
                shapes = it
                    .next()
                    .ok_or(USAGE)?
                    .split(',')
                    .map(|s| {
                        let (a, b) = s.split_once('x').ok_or(USAGE)?;
                        Ok((a.parse()?, b.parse()?))
                    })
                    .collect::<BoxResult<_>>()?;
            }
            _ => return Err(USAGE.into()),
        }
    }
    let gpu = pollster::block_on(Gpu::new())?;
    println!(
        "adapter: {} ({:?}), shader-f16 {}, median of {runs} runs, batch {batch}, one submit + wait per run\n",
        gpu.info.name, gpu.info.backend, gpu.has_f16
    );
    println!("| encoding | n_in×n_out | weight bytes | median ms | GB/s (weights) | GFLOP/s |");
    println!("|---|---|---:|---:|---:|---:|");
    for (n_in, n_out) in shapes {
        let n = n_in * n_out;
        let master = values(n, 1);
        let x = values(n_in * batch, 2);
        let xb = pollster::block_on(gpu.upload("x", bytemuck::cast_slice(&x)))?;
        let yb = pollster::block_on(gpu.output("y", (4 * n_out * batch) as u64))?;
        for case in cases(&gpu) {
            if only.as_ref().is_some_and(|o| !o.contains(&case.name)) {
                continue;
            }
            let (bytes, scale) = match case.packing {
                Packing::Loom(dt) => {
                    let scale = auto_scale(dt, &master);
                    (quantize(dt, &master, scale), scale)
                }
                Packing::LoomQ4_0 => (q4_0::pack(&master), 1.0),
                Packing::Ggml(t) => (ggml_blocks(t, n), 1.0),
            };
            let w = pollster::block_on(PackedWeights::upload(&gpu, case.packing, &bytes, scale, n_in, n_out))?;
            drop(bytes);
            let kernel = MatVec::new(&gpu, case.packing, case.shader_f16)?;
            let mut times = Vec::with_capacity(runs);
            for r in 0..runs + 2 {
                let t0 = Instant::now();
                let mut recorder = Recorder::new(&gpu);
                let (x, y) = (
                    Rows::new(&xb, batch as u32, n_in as u32),
                    Rows::new(&yb, batch as u32, n_out as u32),
                );
                kernel.encode(&mut recorder, x, &w, y, Activation::Linear.into())?;
                recorder.submit();
                gpu.device.poll(wgpu::PollType::wait_indefinitely())?;
                // The first two runs warm up (pipeline creation, caches).
                if r >= 2 {
                    times.push(t0.elapsed().as_secs_f64());
                }
            }
            times.sort_by(f64::total_cmp);
            let t = times[times.len() / 2];
            println!(
                "| {} | {n_in}×{n_out} | {} | {:.2} | {:.2} | {:.2} |",
                case.name,
                w.byte_len(),
                t * 1e3,
                w.byte_len() as f64 / t / 1e9,
                2.0 * (n * batch) as f64 / t / 1e9
            );
        }
    }
    Ok(())
}
