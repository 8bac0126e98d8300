//! The sampler against llama.cpp's own samplers (`testdata/sampler/cases.json`, written by
//! `scripts/gen_sampler_cases.py` from llama.cpp b11434's `llama_sampler_init_penalties/top_k/top_p/min_p/temp` on
//! numpy-seeded logits): the penalised logits, and the ids top-k, top-p and min-p keep. We follow transformers'
//! order (penalty, temperature, top-k, top-p, min-p); llama.cpp's default chain applies the temperature last, so its
//! sets differ where the temperature is not 1 (the fixture holds both orders, run by llama.cpp's samplers). Then
//! the draw: every quantile of the uniform draw against the softmax of the kept logits (computed here in f64 from
//! the fixture), on the CPU and on the GPU kernel, and a chi-squared test of seeded draws through `Sampler`.

mod llm_util;

use std::sync::Arc;

use llm_util::ids;
use loom_wasm::gpu::{Gpu, Sample, GPU_SAMPLE_MAX};
use loom_wasm::llm::sampler::{SampleArgs, Sampler, SamplingParams};
use serde_json::Value;

fn cases() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/sampler/cases.json");
    let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    doc["cases"].as_array().unwrap().clone()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| match x {
            Value::String(s) => s.parse().unwrap(),
            x => x.as_f64().unwrap() as f32,
        })
        .collect()
}

fn args(c: &Value, u: u32) -> SampleArgs {
    SampleArgs {
        temperature: c["temperature"].as_f64().unwrap() as f32,
        top_k: c["top_k"].as_u64().unwrap() as usize,
        top_p: c["top_p"].as_f64().unwrap() as f32,
        min_p: c["min_p"].as_f64().unwrap() as f32,
        u,
        repetition_penalty: c["repetition_penalty"].as_f64().unwrap() as f32,
        penalized: ids(&c["penalized"]),
    }
}

/// `ours` and llama.cpp's ids are the same set, but for ids tied with the last kept logit (which of equal logits
/// a cut keeps is the implementation's choice: ours the lower id).
fn same_set(what: &str, ours: &[u32], theirs: &[u32], logits: &[f32]) {
    let (mut a, mut b) = (ours.to_vec(), theirs.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    if a == b {
        return;
    }
    assert_eq!(a.len(), b.len(), "{what}: ours {a:?}, llama.cpp {b:?}");
    let edge = theirs.iter().map(|&i| logits[i as usize]).fold(f32::INFINITY, f32::min);
    for id in a
        .iter()
        .filter(|i| !b.contains(i))
        .chain(b.iter().filter(|i| !a.contains(i)))
    {
        assert_eq!(
            logits[*id as usize], edge,
            "{what}: id {id} differs and is not a tie at the cut"
        );
    }
}

/// The softmax of the kept ids' penalised logits over the temperature, in f64: what each kept id must get.
fn reference(logits: &[f32], kept: &[u32], temperature: f32) -> Vec<(u32, f64)> {
    let z: Vec<f64> = kept
        .iter()
        .map(|&i| f64::from(logits[i as usize]) / f64::from(temperature))
        .collect();
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|z| (z - max).exp()).collect();
    let total: f64 = e.iter().sum();
    kept.iter().zip(e).map(|(&i, e)| (i, e / total)).collect()
}

/// The fraction of `n` evenly spaced draws (u = (k + ½)/n of the 24-bit range) each id gets from `pick`.
fn quantiles(n: u32, mut pick: impl FnMut(u32) -> u32) -> std::collections::HashMap<u32, f64> {
    let mut counts = std::collections::HashMap::new();
    for k in 0..n {
        let u = ((2 * u64::from(k) + 1) * (1 << 24) / (2 * u64::from(n))) as u32;
        *counts.entry(pick(u)).or_insert(0.0) += 1.0 / f64::from(n);
    }
    counts
}

/// Every draw lands in the kept set, each id as often as its probability within one quantile step (plus f32
/// rounding of the cumulative sums).
fn check_quantiles(what: &str, got: &std::collections::HashMap<u32, f64>, want: &[(u32, f64)], n: u32) {
    for id in got.keys() {
        assert!(want.iter().any(|(i, _)| i == id), "{what}: drew {id}, not kept");
    }
    for (id, p) in want {
        let f = got.get(id).copied().unwrap_or(0.0);
        assert!(
            (f - p).abs() <= 1.0 / f64::from(n) + 1e-5,
            "{what}: id {id} drawn {f}, probability {p}"
        );
    }
}

#[test]
fn filters_keep_what_llama_cpp_keeps_in_transformers_order() {
    let cases = cases();
    assert_eq!(cases.len(), 30);
    for (n, c) in cases.iter().enumerate() {
        let what = format!("case {n}");
        let a = args(c, 0);
        let r = &c["llama_cpp"];
        let mut logits = f32s(&c["logits"]);
        Sampler::penalize(&mut logits, &a);
        let penalised: Vec<f32> = a.penalized.iter().map(|&i| logits[i as usize]).collect();
        assert_eq!(penalised, f32s(&r["penalised"]), "{what}: penalised logits");

        let kept = Sampler::filter(&logits, &a).unwrap();
        let order = &r["transformers"];
        same_set(
            &format!("{what} top-k"),
            &kept.ids[..kept.after_top_k],
            &ids(&order["top_k"]),
            &logits,
        );
        same_set(
            &format!("{what} top-p"),
            &kept.ids[..kept.after_top_p],
            &ids(&order["top_p"]),
            &logits,
        );
        same_set(
            &format!("{what} min-p"),
            &kept.ids[..kept.after_min_p],
            &ids(&order["min_p"]),
            &logits,
        );
        // At temperature 1 llama.cpp's own order keeps the same sets.
        if a.temperature == 1.0 {
            assert_eq!(r["llama"], r["transformers"], "{what}");
        }
    }
}

#[test]
fn draws_follow_the_softmax_of_the_kept_logits_on_the_cpu() {
    for (n, c) in cases().iter().enumerate() {
        let mut logits = f32s(&c["logits"]);
        let a = args(c, 0);
        Sampler::penalize(&mut logits, &a);
        let want = reference(&logits, &ids(&c["llama_cpp"]["transformers"]["min_p"]), a.temperature);
        let steps = 8192;
        let got = quantiles(steps, |u| Sampler::sample_with(&mut f32s(&c["logits"]), &args(c, u)));
        check_quantiles(&format!("case {n}"), &got, &want, steps);
    }
}

/// The GPU kernel (`sample.wgsl`, top-k at most 256) over the same quantiles.
#[test]
fn draws_follow_the_softmax_of_the_kept_logits_on_the_gpu() {
    let gpu = Arc::new(pollster::block_on(Gpu::new()).expect("no wgpu adapter: run scripts/setup.sh"));
    let sample = Sample::new(&gpu).unwrap();
    let mut checked = 0;
    for (n, c) in cases().iter().enumerate() {
        let a = args(c, 0);
        if a.top_k == 0 || a.top_k > GPU_SAMPLE_MAX {
            continue;
        }
        let mut logits = f32s(&c["logits"]);
        Sampler::penalize(&mut logits, &a);
        let want = reference(&logits, &ids(&c["llama_cpp"]["transformers"]["min_p"]), a.temperature);
        let steps = 128;
        let raw = f32s(&c["logits"]);
        let got = quantiles(steps, |u| {
            pollster::block_on(sample.run(&gpu, &raw, &args(c, u))).unwrap()
        });
        check_quantiles(&format!("case {n} on the GPU"), &got, &want, steps);
        checked += 1;
    }
    assert_eq!(checked, 18);
}

/// Seeded draws through `Sampler` (ChaCha8 bits → the draw): a chi-squared test of 20,000 draws per case against
/// the kept softmax, bins under 5 expected merged, at p = 10⁻⁴ (Wilson–Hilferty's critical value).
#[test]
fn seeded_draws_pass_a_chi_squared_test() {
    let draws = 20_000;
    for (n, c) in cases().iter().enumerate().filter(|(n, _)| n % 3 == 0) {
        let a = args(c, 0);
        let mut logits = f32s(&c["logits"]);
        Sampler::penalize(&mut logits, &a);
        let want = reference(&logits, &ids(&c["llama_cpp"]["transformers"]["min_p"]), a.temperature);
        let mut sampler = Sampler::new(SamplingParams {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repetition_penalty: a.repetition_penalty,
            repeat_last_n: 0,
            seed: 7 + n as u64,
        })
        .unwrap();
        let mut counts = std::collections::HashMap::new();
        for _ in 0..draws {
            let id = sampler.sample(&mut f32s(&c["logits"]), &a.penalized);
            *counts.entry(id).or_insert(0u32) += 1;
        }
        for id in counts.keys() {
            assert!(want.iter().any(|(i, _)| i == id), "case {n}: drew {id}, not kept");
        }
        // Bins of at least 5 expected draws (the rest pooled into one).
        let (mut chi2, mut bins, mut pool) = (0.0, 0, (0.0, 0.0));
        for (id, p) in &want {
            let (e, o) = (p * f64::from(draws), f64::from(counts.get(id).copied().unwrap_or(0)));
            if e >= 5.0 {
                chi2 += (o - e).powi(2) / e;
                bins += 1;
            } else {
                pool = (pool.0 + e, pool.1 + o);
            }
        }
        if pool.0 >= 5.0 {
            chi2 += (pool.1 - pool.0).powi(2) / pool.0;
            bins += 1;
        }
        if bins < 2 {
            continue; // one bin: nothing to test (every draw is the one kept id, checked above)
        }
        let k = f64::from(bins - 1);
        let z = 3.719; // the normal quantile of 1 − 10⁻⁴
        let critical = k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3);
        assert!(
            chi2 < critical,
            "case {n}: χ² {chi2:.1} over {k} degrees of freedom (critical {critical:.1})"
        );
    }
}
