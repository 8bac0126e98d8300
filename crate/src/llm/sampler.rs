//! Choosing the next token from logits: repetition penalty, then greedy (temperature 0) or temperature, top-k,
//! top-p and min-p with a seeded generator, so the same seed gives the same text on every platform. The order is
//! transformers' (`crate/tests/llm_sampler.rs` holds each filter to llama.cpp's own, run in that order).

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cpu::ops;
use crate::error::{LoomError, Result};
pub use crate::gpu::SampleArgs;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 is greedy (argmax, the lowest id on ties).
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities sum to at least p (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one (0: none).
    pub min_p: f32,
    /// HF's penalty on tokens already in the context: positive logits divided by it, negative multiplied (1: off).
    pub repetition_penalty: f32,
    /// How many recent tokens the penalty looks at (0: all).
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(LoomError::InvalidInput(m));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!("temperature {} (0 or more)", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p {} (above 0, at most 1)", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p {} (0 to 1)", self.min_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad(format!("repetition_penalty {} (above 0)", self.repetition_penalty));
        }
        Ok(())
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Sampler> {
        params.validate()?;
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        Ok(Sampler { params, rng })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// True when [`Sampler::sample`] is a plain argmax of the logits (no penalty, no randomness), which an engine
    /// may compute itself ([`super::engine::Engine::forward_greedy`]).
    pub fn is_plain_argmax(&self) -> bool {
        self.params.temperature == 0.0 && self.params.repetition_penalty == 1.0
    }

    /// The next token. `logits` is changed (penalised, scaled); `context` is the tokens so far.
    pub fn sample(&mut self, logits: &mut [f32], context: &[u32]) -> u32 {
        let args = self.draw(context);
        Sampler::sample_with(logits, &args)
    }

    /// The next draw's arguments: the parameters, the distinct ids the penalty applies to, and 24 random bits
    /// (drawn only when the temperature is above 0, so greedy replies leave the generator alone). An engine may
    /// run the draw on its device (the GPU's `sample.wgsl`), or hand the logits to [`Sampler::sample_with`].
    pub fn draw(&mut self, context: &[u32]) -> SampleArgs {
        let p = &self.params;
        let mut penalized = Vec::new();
        if p.repetition_penalty != 1.0 {
            let from = if p.repeat_last_n == 0 {
                0
            } else {
                context.len().saturating_sub(p.repeat_last_n)
            };
            let mut seen = std::collections::HashSet::new();
            penalized = context[from..].iter().copied().filter(|&t| seen.insert(t)).collect();
        }
        SampleArgs {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            u: if p.temperature == 0.0 {
                0
            } else {
                self.rng.next_u32() >> 8
            },
            repetition_penalty: p.repetition_penalty,
            penalized,
        }
    }

    /// The token `args` picks from `logits` (changed: penalised). The CPU twin of `shaders/sample.wgsl`.
    pub fn sample_with(logits: &mut [f32], args: &SampleArgs) -> u32 {
        Sampler::penalize(logits, args);
        if args.temperature == 0.0 {
            return ops::argmax(logits) as u32;
        }
        let Some(kept) = Sampler::filter(logits, args) else {
            return 0;
        };
        let probs = &kept.probs[..kept.after_min_p];
        let total: f32 = probs.iter().sum();
        // 24 random bits: a uniform f32 in [0, 1).
        let u = args.u as f32 / (1u32 << 24) as f32 * total;
        let mut cum = 0.0;
        for (i, &x) in probs.iter().enumerate() {
            cum += x;
            if u < cum {
                return kept.ids[i];
            }
        }
        kept.ids[probs.len() - 1]
    }

    /// HF's (and llama.cpp's) repetition penalty on `args.penalized`: positive logits divided by it, others
    /// multiplied.
    pub fn penalize(logits: &mut [f32], args: &SampleArgs) {
        for &t in &args.penalized {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = if *l > 0.0 {
                    *l / args.repetition_penalty
                } else {
                    *l * args.repetition_penalty
                };
            }
        }
    }

    /// The candidates a draw at a temperature above 0 chooses from, in transformers' order: the logits divided by
    /// the temperature, the top k, their softmax, the smallest most-likely prefix reaching top-p, then those at
    /// least min-p × the most likely. (llama.cpp applies the temperature last, after the filters; the sets differ
    /// when it is not 1.) `None` when every logit is NaN.
    pub fn filter(logits: &[f32], args: &SampleArgs) -> Option<Kept> {
        let p = args;
        // Candidates, most likely first (ties: lower id first, so the order is deterministic).
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_nan())
            .map(|(i, &l)| (i as u32, l / p.temperature))
            .collect();
        if cand.is_empty() {
            return None;
        }
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && p.top_k < cand.len() {
            cand.select_nth_unstable_by(p.top_k - 1, order);
            cand.truncate(p.top_k);
        }
        cand.sort_unstable_by(order);
        let max = cand[0].1;
        let mut probs: Vec<f32> = cand.iter().map(|c| (c.1 - max).exp()).collect();
        let total: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= total);
        let mut after_top_p = probs.len();
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, &x) in probs.iter().enumerate() {
                cum += x;
                if cum >= p.top_p {
                    after_top_p = i + 1;
                    break;
                }
            }
        }
        let mut after_min_p = after_top_p;
        if p.min_p > 0.0 {
            let floor = p.min_p * probs[0];
            after_min_p = after_min_p.min(probs.iter().take_while(|&&x| x >= floor).count().max(1));
        }
        Some(Kept {
            after_top_k: cand.len(),
            ids: cand.into_iter().map(|c| c.0).collect(),
            probs,
            after_top_p,
            after_min_p,
        })
    }
}

/// What [`Sampler::filter`] keeps: the top-k candidates most likely first with their softmax, and how many of them
/// each later filter keeps (prefixes of `ids`).
#[derive(Clone, Debug, PartialEq)]
pub struct Kept {
    pub ids: Vec<u32>,
    pub probs: Vec<f32>,
    pub after_top_k: usize,
    pub after_top_p: usize,
    pub after_min_p: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.5, -1.0, 0.0, 2.9]
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.sample(&mut logits(), &[]), 1);
    }

    #[test]
    fn same_seed_same_tokens_and_filters_hold() {
        let params = SamplingParams {
            temperature: 1.0,
            top_k: 3,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..SamplingParams::default()
        };
        let draw = |params: &SamplingParams| {
            let mut s = Sampler::new(params.clone()).unwrap();
            (0..200).map(|_| s.sample(&mut logits(), &[])).collect::<Vec<_>>()
        };
        let a = draw(&params);
        assert_eq!(a, draw(&params));
        // top-k 3 keeps ids 1, 5, 2 only, and all three appear in 200 draws.
        for id in [1, 5, 2] {
            assert!(a.contains(&id), "{id} never drawn");
        }
        assert!(a.iter().all(|t| [1, 5, 2].contains(t)));
        // top-p 0.5: p(1) ≈ 0.37, p(5) ≈ 0.33 → ids 1 and 5 only.
        let b = draw(&SamplingParams {
            top_k: 0,
            top_p: 0.5,
            ..params.clone()
        });
        assert!(b.iter().all(|t| [1, 5].contains(t)) && b.contains(&5));
        // min-p 0.9: only tokens within 90 % of the best: 1 and 5 (e^-0.1 ≈ 0.905).
        let c = draw(&SamplingParams {
            top_k: 0,
            min_p: 0.9,
            ..params.clone()
        });
        assert!(c.iter().all(|t| [1, 5].contains(t)));
        assert_ne!(a, draw(&SamplingParams { seed: 8, ..params }));
    }

    #[test]
    fn repetition_penalty_is_hf_s() {
        let mut s = Sampler::new(SamplingParams {
            repetition_penalty: 2.0,
            ..SamplingParams::greedy()
        })
        .unwrap();
        let mut l = logits();
        // 3.0 / 2 = 1.5 < 2.9: the penalised token loses; negative -1.0 becomes -2.0.
        assert_eq!(s.sample(&mut l, &[1, 3, 1]), 5);
        assert_eq!((l[1], l[3]), (1.5, -2.0));
    }

    #[test]
    fn bad_params_are_errors() {
        for p in [
            SamplingParams {
                temperature: -1.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                top_p: 0.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                min_p: 2.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                repetition_penalty: f32::NAN,
                ..SamplingParams::default()
            },
        ] {
            assert!(Sampler::new(p).is_err());
        }
    }
}
