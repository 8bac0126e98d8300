//! `shaders/sample.wgsl` against its CPU twin `Sampler::sample_with` (repetition penalty, temperature, top-k,
//! top-p, min-p, then the draw of 24 random bits): the same id for every draw, over vocabularies up to Qwen's, with
//! ties at the top-k threshold, NaN and infinities. And `shaders/mask.wgsl` (a grammar's allowed ids) before the
//! argmax and the draw against its CPU twin `mask_logits` before theirs.

use loom_wasm::gpu::{first_argmax, mask_logits, Argmax, Gpu, LogitMask, Sample, SampleArgs};
use loom_wasm::llm::sampler::Sampler;

use super::harness::data;

on_each_device!(
    sampling_matches_the_cpu_twin,
    sampling_ties_nan_and_infinities,
    masked_picks_match_the_cpu_twin
);

fn args(
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    penalty: f32,
    penalized: Vec<u32>,
    u: u32,
) -> SampleArgs {
    SampleArgs {
        temperature,
        top_k,
        top_p,
        min_p,
        u,
        repetition_penalty: penalty,
        penalized,
    }
}

/// Draws from `logits` with every combination of the parameters (and several random draws each) on both devices.
async fn check(gpu: &Gpu, kernel: &Sample, name: &str, logits: &[f32]) -> usize {
    let n = logits.len();
    let us = data(n as u64, 3, 0.0, 1.0);
    let penalized: Vec<u32> = data(7, 48, 0.0, n as f32)
        .iter()
        .map(|&x| x as u32)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut checked = 0;
    let mut distinct = std::collections::HashSet::new();
    for temperature in [0.0, 0.3, 1.0, 2.5] {
        for top_k in [1, 7, 40, 256] {
            for (top_p, min_p) in [(1.0, 0.0), (0.9, 0.05), (0.5, 0.0), (1.0, 0.2)] {
                for penalty in [1.0, 1.3] {
                    for &u in &us {
                        let u = (u * (1u32 << 24) as f32) as u32;
                        let ids = if penalty == 1.0 { Vec::new() } else { penalized.clone() };
                        let a = args(temperature, top_k, top_p, min_p, penalty, ids, u);
                        let want = Sampler::sample_with(&mut logits.to_vec(), &a);
                        let got = kernel.run(gpu, logits, &a).await.unwrap();
                        assert_eq!(got, want, "{name}: {a:?}");
                        distinct.insert(want);
                        checked += 1;
                    }
                }
            }
        }
    }
    // The draws do spread over several ids: the comparison is not of one constant.
    assert!(distinct.len() > 10, "{name}: only {} distinct ids", distinct.len());
    checked
}

pub async fn sampling_matches_the_cpu_twin(gpu: &Gpu) {
    let kernel = Sample::new(gpu).unwrap();
    for n in [300, 1000, 49_152, 151_936] {
        let logits = data(n as u64 + 1, n, -8.0, 8.0);
        let checked = check(gpu, &kernel, &format!("uniform {n}"), &logits).await;
        note!("sample {n}: {checked} draws identical");
    }
}

/// Logits on a coarse grid (many ties, so the k-th value is shared by ids on both sides of the cut), with NaN,
/// +∞ and −∞ among them.
pub async fn sampling_ties_nan_and_infinities(gpu: &Gpu) {
    let kernel = Sample::new(gpu).unwrap();
    let n = 5000;
    let mut logits: Vec<f32> = data(3, n, -4.0, 4.0).iter().map(|x| (x * 2.0).round() / 2.0).collect();
    for i in (0..n).step_by(97) {
        logits[i] = f32::NAN;
    }
    logits[11] = f32::NEG_INFINITY;
    logits[4000] = -0.0;
    let checked = check(gpu, &kernel, "ties", &logits).await;
    logits[2500] = f32::INFINITY;
    let a = args(0.0, 40, 1.0, 0.0, 1.0, Vec::new(), 0);
    assert_eq!(kernel.run(gpu, &logits, &a).await.unwrap(), 2500);
    let all_nan = vec![f32::NAN; 100];
    let a = args(1.0, 40, 0.9, 0.05, 1.0, Vec::new(), 123);
    assert_eq!(
        kernel.run(gpu, &all_nan, &a).await.unwrap(),
        Sampler::sample_with(&mut all_nan.clone(), &a)
    );
    note!("ties: {checked} draws identical");
}

/// Masks of every density (one id, a few, a random half, all but one, all) over vocabularies up to Qwen's: the GPU's
/// argmax and draws after `mask.wgsl` are the CPU's after `mask_logits`, always an allowed id.
pub async fn masked_picks_match_the_cpu_twin(gpu: &Gpu) {
    let (mask, argmax, sample) = (
        LogitMask::new(gpu).unwrap(),
        Argmax::new(gpu).unwrap(),
        Sample::new(gpu).unwrap(),
    );
    let mut checked = 0;
    for n in [300, 49_152, 151_936] {
        let logits = data(n as u64 + 5, n, -8.0, 8.0);
        let words = n.div_ceil(32);
        let random = data(n as u64 + 6, n, 0.0, 1.0);
        let allow = |keep: &dyn Fn(usize) -> bool| -> Vec<u32> {
            let mut w = vec![0u32; words];
            for id in (0..n).filter(|&id| keep(id)) {
                w[id / 32] |= 1 << (id % 32);
            }
            w
        };
        let best = first_argmax(&logits) as usize;
        let masks = [
            ("one id", allow(&|id| id == n / 3)),
            ("a few", allow(&|id| id % 997 == 5)),
            ("half", allow(&|id| random[id] < 0.5)),
            ("all but the best", allow(&|id| id != best)),
            ("all", allow(&|_| true)),
        ];
        for (name, allowed) in &masks {
            let mut cpu = logits.clone();
            mask_logits(&mut cpu, allowed);
            let on_gpu = mask.run(gpu, &logits, allowed).await.unwrap();
            let ids = argmax.run(gpu, &on_gpu, n).await.unwrap();
            assert_eq!(ids, vec![first_argmax(&cpu)], "{name} {n}: argmax");
            for (temperature, top_k, top_p, min_p) in [(0.0, 1, 1.0, 0.0), (1.0, 40, 0.9, 0.05), (2.5, 256, 1.0, 0.0)] {
                for u in [0, 5_000_000, 16_777_215] {
                    let a = args(temperature, top_k, top_p, min_p, 1.3, vec![1, 7, (n / 3) as u32], u);
                    let want = Sampler::sample_with(&mut cpu.clone(), &a);
                    let got = sample.run(gpu, &on_gpu, &a).await.unwrap();
                    assert_eq!(got, want, "{name} {n}: {a:?}");
                    assert_eq!(
                        (allowed[got as usize / 32] >> (got % 32)) & 1,
                        1,
                        "{name} {n}: {got} is not allowed"
                    );
                    checked += 1;
                }
            }
        }
    }
    note!("masked argmax and draws: {checked} identical to the CPU twin");
}
