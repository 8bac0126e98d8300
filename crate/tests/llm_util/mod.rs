//! Helpers shared by the LLM tests: the golden data in `../shared/golden` (numpy reference, never our output),
//! greedy decoding through the KV cache, and the tiny-llama check.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::model::LlmModel;
use serde_json::Value;

/// SmolLM2-135M-Instruct, the Q4_1 GGUF `scripts/setup.sh` fetches, opened once per test binary.
pub fn smollm2() -> &'static LlmModel {
    static MODEL: std::sync::OnceLock<LlmModel> = std::sync::OnceLock::new();
    MODEL.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
        assert!(path.exists(), "{} is missing: run scripts/setup.sh", path.display());
        LlmModel::open(&path).unwrap()
    })
}

pub fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/golden")
}

pub fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Greedy continuation through the KV cache: the first id from the prompt's last logits, then one token at a time.
pub fn greedy(engine: &mut dyn Engine, last_logits: &[f32], n: usize, eos: Option<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    let mut logits = last_logits.to_vec();
    for step in 0..n {
        let next = loom_wasm::cpu::ops::argmax(&logits) as u32;
        if Some(next) == eos {
            break;
        }
        out.push(next);
        if step + 1 < n {
            logits = engine.forward(&[next], false).unwrap();
        }
    }
    out
}

/// Bounds on |Δlogit| against tiny-llama's float64 goldens, from the largest error measured over every set, prompt
/// and position (this machine, AVX-512), with the margin after each:
/// - the CPU's integer dot products over activations rounded to 16 bits per block of 32 (block types): 6.8e-4
///   (Q4_1 decoded token by token with AVX-512) → 1e-3, the golden README's bound;
/// - the CPU's float paths: 8.6e-6, 6.4e-5 for a `.entity` of F32 weights → 1e-4;
/// - the GPU (f32 activations throughout): 9.3e-6 on every GGUF and safetensors set, 6.6e-5 on the Loom Q4_0
///   `.entity` → 2e-4.
pub const TINY_CPU_BLOCKS: f32 = 1e-3;
pub const TINY_CPU_FLOAT: f32 = 1e-4;
pub const TINY_GPU: f32 = 2e-4;

/// Checks one tiny-llama weight set on the CPU engine: every prompt's logits at every position and the greedy ids.
pub fn check_tiny(model: &LlmModel, set_name: &str, expected: &Value, prompts: &[Vec<u32>]) {
    let blocks = ["q4_0", "q4_1", "q8_0"].iter().any(|t| set_name.contains(t));
    let tol = if blocks { TINY_CPU_BLOCKS } else { TINY_CPU_FLOAT };
    check_tiny_on(model.config.vocab, set_name, expected, prompts, tol, &mut || {
        Box::new(model.cpu_engine())
    });
}

/// The largest |Δ| between one position's logits and the golden row `want`.
fn max_gap(want: &Value, logits: &[f32]) -> f32 {
    let want = want.as_array().unwrap();
    assert_eq!(want.len(), logits.len());
    want.iter()
        .zip(logits)
        .map(|(w, l)| (l - w.as_f64().unwrap() as f32).abs())
        .fold(0f32, f32::max)
}

/// [`check_tiny`] on the engines `new_engine` makes (one per prompt), logits within `tol` with the prompt taken
/// whole and one token at a time. The greedy ids are checked twice: from the
/// logits (argmax here), and through [`Engine::forward_greedy`] (the engine's own pick).
pub fn check_tiny_on(
    vocab: usize,
    set_name: &str,
    expected: &Value,
    prompts: &[Vec<u32>],
    tol: f32,
    new_engine: &mut dyn FnMut() -> Box<dyn Engine>,
) {
    for (p, (prompt, res)) in prompts.iter().zip(expected["results"].as_array().unwrap()).enumerate() {
        let mut engine = new_engine();
        let logits = engine.forward(prompt, true).unwrap();
        let want = res["logits"].as_array().unwrap();
        assert_eq!(want.len(), prompt.len());
        assert_eq!(logits.len(), prompt.len() * vocab);
        let worst = want
            .iter()
            .zip(logits.chunks_exact(vocab))
            .map(|(row, logits)| max_gap(row, logits))
            .fold(0f32, f32::max);
        assert!(
            worst <= tol,
            "{set_name} prompt {p}: max |Δlogit| {worst} (bound {tol})"
        );
        // The same prompt one token at a time: the decode kernels (16-bit activations with AVX-512 and in wasm),
        // each position's logits within `tol` too.
        let mut stepped = new_engine();
        for (pos, (&id, row)) in prompt.iter().zip(want).enumerate() {
            let logits = stepped.forward(&[id], false).unwrap();
            assert_eq!(logits.len(), vocab);
            let worst = max_gap(row, &logits);
            assert!(
                worst <= tol,
                "{set_name} prompt {p}, token by token, position {pos}: max |Δlogit| {worst} (bound {tol})"
            );
        }
        let want_ids = ids(&res["greedy_ids"]);
        let got = greedy(engine.as_mut(), &logits[(prompt.len() - 1) * vocab..], 16, None);
        assert_eq!(got, want_ids, "{set_name} prompt {p}: greedy ids");
        let mut engine = new_engine();
        let mut picked = vec![engine.forward_greedy(prompt).unwrap()];
        while picked.len() < want_ids.len() {
            let last = *picked.last().unwrap();
            picked.push(engine.forward_greedy(&[last]).unwrap());
        }
        assert_eq!(
            picked, want_ids,
            "{set_name} prompt {p}: greedy ids picked by the engine"
        );
    }
}

/// tiny-llama's expected.json and its prompts.
pub fn tiny_expected() -> (Value, Vec<Vec<u32>>) {
    let expected = json(&golden().join("tiny-llama/expected.json"));
    let prompts = expected["prompts"].as_array().unwrap().iter().map(ids).collect();
    (expected, prompts)
}

/// Bounds of [`check_cases`]: the family references (float64 numpy forwards, 7 significant digits) were met within
/// 6.2e-5 at every position of every case on both engines (lavapipe; this AVX-512 CPU), so `3e-4 + 1e-5·|logit|`,
/// about five times that.
pub const CASES_ABS: f32 = 3e-4;
pub const CASES_REL: f32 = 1e-5;

/// Every case's logits at every position within `CASES_ABS + CASES_REL·|logit|` of the reference
/// (`expected["cases"]`: ids, logits, greedy), and the greedy ids through the KV cache.
pub fn check_cases(model: &LlmModel, expected: &Value, new_engine: &dyn Fn() -> Box<dyn Engine>) {
    let vocab = model.config.vocab;
    for case in expected["cases"].as_array().unwrap() {
        let prompt = ids(&case["ids"]);
        let logits = new_engine().forward(&prompt, true).unwrap();
        let want: Vec<f32> = case["logits"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32))
            .collect();
        assert_eq!(logits.len(), want.len());
        for (i, (g, w)) in logits.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= CASES_ABS + CASES_REL * w.abs(),
                "prompt of {} tokens, position {}, token {}: {g} against {w}",
                prompt.len(),
                i / vocab,
                i % vocab
            );
        }
        let mut e = new_engine();
        e.forward(&prompt, false).unwrap();
        let last = &logits[logits.len() - vocab..];
        assert_eq!(greedy(e.as_mut(), last, 8, None), ids(&case["greedy"]));
    }
}

/// Bounds on SmolLM2's logits against the reference's top 20 (kept to 4 decimals, so ±5e-5), from the largest
/// error measured over every golden prompt, with the margin after each: the CPU engine (activations rounded to 8 or
/// 16 bits for its integer dot products) 3.4e-3 → 0.01, the golden README's bound; the GPU (f32 activations) 8.4e-5
/// → 5e-4.
pub const SMOL_CPU: f32 = 0.01;
pub const SMOL_GPU: f32 = 5e-4;

/// The logits against the reference's top 20: each within `tol`, and no other id above the 20th + `tol`.
pub fn check_top20(msg: &str, logits: &[f32], top20: &[Value], tol: f32) {
    let floor = top20[19][1].as_f64().unwrap() as f32;
    for pair in top20 {
        let (id, l) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap() as f32);
        assert!(
            (logits[id] - l).abs() <= tol,
            "{msg}: logit of {id} is {}, want {l}",
            logits[id]
        );
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    for &id in &order[..20] {
        let listed = top20.iter().any(|p| p[0].as_u64().unwrap() as usize == id);
        assert!(
            listed || logits[id] <= floor + tol,
            "{msg}: {id} ({}) is not in the reference top 20",
            logits[id]
        );
    }
}

/// Reads picked files by range, as the browser's streamed load does.
pub struct FileReader(pub Vec<PathBuf>);

impl loom_wasm::formats::source::RangeReader for FileReader {
    async fn read(&self, file: usize, offset: u64, len: u64) -> loom_wasm::Result<bytes::Bytes> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0; len as usize];
        std::fs::File::open(&self.0[file])?.read_exact_at(&mut buf, offset)?;
        Ok(buf.into())
    }
}
