//! wasm exports for the forward benchmark (`scripts/bench-forward.sh`, driven by `bench-wasm/run.cjs` in Node)
//! and the LLM benchmark (`scripts/bench-llm.sh`, driven by `bench-wasm/run-llm.cjs`).
//!
//! A `Bench` owns a `CpuModel` loaded from `.entity` bytes. `forward` returns one output (for the bit-identity
//! check against Loom); `time` runs `forward` `runs` times inside wasm and returns each run's milliseconds, wall
//! (`performance.now()`) and CPU (the host's `benchCpuMs()`), so no output crosses into JavaScript while timing.

use loom_wasm::cpu::ops::argmax;
use loom_wasm::cpu::CpuModel;
use loom_wasm::formats::entity;
use loom_wasm::llm::engine::{CpuEngine, Engine};
use loom_wasm::llm::model::LlmModel;
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = performance)]
    fn now() -> f64;
    /// The process's CPU time in ms; `run.cjs` defines it from Node's `process.cpuUsage()`.
    #[wasm_bindgen(js_name = benchCpuMs)]
    fn cpu_ms() -> f64;
}

/// Whether this module was compiled with wasm SIMD (`simd128`).
#[wasm_bindgen]
pub fn simd128() -> bool {
    cfg!(target_feature = "simd128")
}

#[wasm_bindgen]
pub struct Bench {
    model: CpuModel,
}

fn err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

#[wasm_bindgen]
impl Bench {
    /// Loads a network from `.entity` bytes.
    #[wasm_bindgen(constructor)]
    pub fn new(entity_bytes: &[u8]) -> Result<Bench, JsError> {
        Ok(Bench {
            model: CpuModel::new(entity::read(entity_bytes).map_err(err)?),
        })
    }

    /// One forward pass; the output values.
    pub fn forward(&mut self, input: &[f32], shape: &[u32]) -> Result<Vec<f32>, JsError> {
        let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        Ok(self.model.forward(input, &shape).map_err(err)?.data)
    }

    /// `runs` forward passes; for each, its wall then its CPU milliseconds (`2 × runs` values).
    pub fn time(&mut self, input: &[f32], shape: &[u32], runs: u32) -> Result<Vec<f64>, JsError> {
        let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let mut times = Vec::with_capacity(2 * runs as usize);
        for _ in 0..runs {
            let c = cpu_ms();
            let t = now();
            let y = self.model.forward(input, &shape).map_err(err)?;
            let wall = now() - t;
            times.extend([wall, cpu_ms() - c]);
            std::hint::black_box(y);
        }
        Ok(times)
    }
}

/// An LLM (GGUF bytes) and one CPU engine; the timings are taken inside wasm (`performance.now()`), so no logits
/// cross into JavaScript while timing.
#[wasm_bindgen]
pub struct LlmBench {
    _model: LlmModel,
    engine: CpuEngine,
}

#[wasm_bindgen]
impl LlmBench {
    /// Opens a GGUF file held in memory (the bytes are moved into wasm memory and shared by the weights).
    #[wasm_bindgen(constructor)]
    pub fn new(gguf: Vec<u8>) -> Result<LlmBench, JsError> {
        let model = LlmModel::from_gguf(bytes::Bytes::from(gguf)).map_err(err)?;
        Ok(LlmBench {
            engine: model.cpu_engine(),
            _model: model,
        })
    }

    /// `ids` into an empty KV cache, last-token logits and their argmax (prefill, or time to first token); its
    /// wall and CPU milliseconds.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f64>, JsError> {
        self.engine.truncate(0);
        let (c, t) = (cpu_ms(), now());
        let logits = self.engine.forward(ids, false).map_err(err)?;
        std::hint::black_box(argmax(&logits));
        Ok(vec![now() - t, cpu_ms() - c])
    }

    /// `prompt` into an empty KV cache (untimed), then `n` greedy steps of one token each; returns the wall and
    /// CPU milliseconds of the `n` steps followed by the ids chosen.
    pub fn decode(&mut self, prompt: &[u32], n: u32) -> Result<Vec<f64>, JsError> {
        self.engine.truncate(0);
        let mut logits = self.engine.forward(prompt, false).map_err(err)?;
        let mut ids = Vec::with_capacity(n as usize);
        let (c, t) = (cpu_ms(), now());
        for _ in 0..n {
            let next = argmax(&logits) as u32;
            ids.push(f64::from(next));
            logits = self.engine.forward(&[next], false).map_err(err)?;
        }
        let mut out = vec![now() - t, cpu_ms() - c];
        out.extend(ids);
        Ok(out)
    }

    /// `ids` into an empty KV cache one token at a time (every step a decode step), the last step's logits: how
    /// far the decode kernels move the logits from a reference (`scripts/llm-decode-accuracy.cjs`).
    #[wasm_bindgen(js_name = decodeLogits)]
    pub fn decode_logits(&mut self, ids: &[u32]) -> Result<Vec<f32>, JsError> {
        self.engine.truncate(0);
        let mut logits = Vec::new();
        for &id in ids {
            logits = self.engine.forward(&[id], false).map_err(err)?;
        }
        Ok(logits)
    }
}

/// Mean milliseconds of one decode matmul (`rows × cols`, one token) over pseudo-random blocks of the type named
/// `ty` (gguf-py's names), over `calls` calls after one warm-up: the kernels alone, per block type.
#[wasm_bindgen(js_name = matvecMs)]
pub fn matvec_ms(ty: &str, rows: usize, cols: usize, calls: u32) -> Result<f64, JsError> {
    use loom_wasm::quant::{self, GgmlType, QMatrix};
    let t = (0..64)
        .filter_map(|id| GgmlType::from_id(id).ok())
        .find(|t| t.name() == ty)
        .ok_or_else(|| err(format!("no type {ty}")))?;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let bytes = t.row_bytes(cols).map_err(err)? * rows;
    // Random bytes with every 16-bit scale word a small half (0x2000..0x27FF), so that no scale is ∞ or NaN.
    let data: Vec<u8> = (0..bytes)
        .map(|i| {
            if i % 2 == 1 {
                0x20 | (next() as u8 & 7)
            } else {
                next() as u8
            }
        })
        .collect();
    let w = QMatrix::new(t, rows, cols, &data).map_err(err)?;
    let x: Vec<f32> = (0..cols).map(|_| (next() % 2000) as f32 / 1000.0 - 1.0).collect();
    let mut y = vec![0.0; rows];
    quant::matmul(&w, &x, 1, &mut y).map_err(err)?;
    let start = now();
    for _ in 0..calls {
        quant::matmul(&w, &x, 1, &mut y).map_err(err)?;
    }
    Ok((now() - start) / f64::from(calls))
}
