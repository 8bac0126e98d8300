//! LLM decoder benchmark (CPU engine) for `scripts/bench-llm.sh`, which compares it with llama.cpp
//! (`scripts/bench_llm_llamacpp.py`) on the same GGUF file. Not a test: it prints JSON on stdout.
//!
//!   cargo bench -p loom-wasm --bench llm -- MODEL [--threads N] [--runs R] [--what LIST]
//!       [--prefill-tokens 512] [--decode-tokens 128] [--ids IDS_JSON] [--simd all|avx512|avx2|none]
//!
//! `--simd avx2` caps the kernels at AVX2 (as a CPU without AVX-512 runs them), `--simd avx512` at AVX-512 without
//! VNNI; the JSON's `simd` says which ran.
//!
//! LIST is comma-separated (default `load,prefill,decode,ttft`):
//! - `ids`: writes nothing else; prints the token ids both sides use: `prefill_ids` (a fixed sequence of ordinary
//!   vocabulary ids) and `chat_ids` (a one-question chat through the model's own template and tokenizer, or the
//!   question as plain text for a model without a template). The
//!   script saves them and hands the file to both sides with `--ids`.
//! - `load`: `LlmModel::open` (memory-maps the file, parses the header and tokenizer) + `cpu_engine()`, `runs`
//!   times (the file is in the page cache after the first).
//! - `prefill`: the `prefill_ids` prompt into an empty KV cache, last-token logits only; tokens/s.
//! - `decode`: the chat prompt (untimed), then `decode-tokens` greedy steps of one token each (argmax included).
//! - `ttft`: time to first token: the chat prompt into an empty KV cache, its logits and their argmax.
//! - `accuracy`: the decode kernels against the exact path (see `accuracy`), up to 64 steps.
//! - `mem`: run alone in a fresh process: load, prefill, then decode `decode-tokens` steps; reports the peak
//!   resident set (`VmHWM`) against the file size and the KV cache's bytes.
//!
//! Each timed measurement follows one untimed warm-up and reports every run and the median, of wall-clock time
//! and of the process's CPU time.
//! Without arguments (as under `cargo test --all-targets`) it prints its usage and exits successfully.

mod common;

use std::path::Path;
use std::time::Instant;

use common::{loadavg, median, ms_since};
use loom_wasm::cpu::ops::argmax;
use loom_wasm::llm::engine::{CpuEngine, Engine};
use loom_wasm::llm::generate::ChatFormat;
use loom_wasm::llm::model::LlmModel;
use loom_wasm::llm::template::ChatMessage;
use serde_json::{json, Value};

const USAGE: &str = "usage: cargo bench -p loom-wasm --bench llm -- MODEL [--threads N] [--runs R] \
[--what ids|mem|accuracy|load,prefill,decode,ttft] [--prefill-tokens N] [--decode-tokens N] [--ids IDS_JSON] \
[--simd all|avx512|avx2|none]";

/// The question of the time-to-first-token and decode prompts.
const QUESTION: &str = "What is the capital of France?";

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Args {
    model: String,
    threads: usize,
    simd: loom_wasm::quant::Simd,
    runs: usize,
    what: Vec<String>,
    prefill_tokens: usize,
    decode_tokens: usize,
    ids: Option<String>,
}

fn parse_args() -> BoxResult<Option<Args>> {
    let mut args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut take = |name: &str| -> BoxResult<Option<String>> {
        match args.iter().position(|a| a == name) {
            Some(i) => {
                let v = args.get(i + 1).ok_or(USAGE)?.clone();
                args.drain(i..i + 2);
                Ok(Some(v))
            }
            None => Ok(None),
        }
    };
    let threads = take("--threads")?.map_or(Ok(1), |v| v.parse())?;
    let runs = take("--runs")?.map_or(Ok(5), |v| v.parse())?;
    let what = take("--what")?.unwrap_or_else(|| "load,prefill,decode,ttft".into());
    let prefill_tokens = take("--prefill-tokens")?.map_or(Ok(512), |v| v.parse())?;
    let decode_tokens = take("--decode-tokens")?.map_or(Ok(128), |v| v.parse())?;
    let ids = take("--ids")?;
    let simd = match take("--simd")?.as_deref() {
        None | Some("all") => loom_wasm::quant::Simd::All,
        Some("avx512") => loom_wasm::quant::Simd::Avx512,
        Some("avx2") => loom_wasm::quant::Simd::Avx2,
        Some("none") => loom_wasm::quant::Simd::None,
        Some(_) => return Err(USAGE.into()),
    };
    let [model] = args.as_slice() else {
        return Ok(None);
    };
    Ok(Some(Args {
        model: model.clone(),
        threads: threads.max(1),
        simd,
        runs: runs.max(1),
        what: what.split(',').map(str::to_string).collect(),
        prefill_tokens,
        decode_tokens,
        ids,
    }))
}

/// The fixed prompt of the prefill measurement: ordinary ids spread over the vocabulary (above the special
/// tokens at its start), the same on every run and for both sides.
fn prefill_ids(n: usize, vocab: usize) -> Vec<u32> {
    let span = (vocab - 1000).min(40_000);
    (0..n).map(|i| (1000 + (i * 7919) % span) as u32).collect()
}

fn chat_ids(model: &LlmModel) -> BoxResult<Vec<u32>> {
    let format = ChatFormat::new(model)?;
    // A base model without a chat template (Gemma 3 270M's GGUF): the question as plain text.
    if !format.has_template() {
        return Ok(format.encode_prompt(QUESTION)?);
    }
    Ok(format.chat_prompt(&[ChatMessage {
        role: "user".into(),
        content: QUESTION.into(),
    }])?)
}

fn ids_of(v: &Value, key: &str) -> BoxResult<Vec<u32>> {
    Ok(v[key]
        .as_array()
        .ok_or_else(|| format!("ids file without {key}"))?
        .iter()
        .map(|x| x.as_u64().map(|x| x as u32).ok_or("bad id"))
        .collect::<Result<_, _>>()?)
}

/// A field of `/proc/self/status` in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU time of the whole process (every thread, the matmul pool's included) in ms, from the scheduler's
/// nanosecond counters (`/proc/self/task/*/schedstat`). On a shared machine wall time includes waiting for a core;
/// CPU time does not (but it does include spin-waiting threads).
fn cpu_ms() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    let mut ns = 0u64;
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
            ns += s.split_whitespace().next().and_then(|x| x.parse().ok()).unwrap_or(0);
        }
    }
    ns as f64 / 1e6
}

/// A wall-clock and CPU-time stopwatch.
struct Watch(Instant, f64);

impl Watch {
    fn start() -> Watch {
        let cpu = cpu_ms();
        Watch(Instant::now(), cpu)
    }
    /// (wall ms, CPU ms) since the start.
    fn stop(&self) -> (f64, f64) {
        let wall = ms_since(self.0);
        (wall, cpu_ms() - self.1)
    }
}

/// Median wall and CPU time of runs, and tokens per second of each.
fn timings(runs: Vec<(f64, f64)>, tokens: usize) -> Value {
    let ms: Vec<f64> = runs.iter().map(|r| r.0).collect();
    let cpu: Vec<f64> = runs.iter().map(|r| r.1).collect();
    let (m, c) = (median(&ms), median(&cpu));
    let rate = |ms: f64| if tokens > 0 { tokens as f64 / (ms / 1e3) } else { 0.0 };
    json!({
        "tokens": tokens,
        "ms": ms,
        "ms_median": m,
        "tok_s_median": rate(m),
        "cpu_ms": cpu,
        "cpu_ms_median": c,
        "tok_per_cpu_s_median": rate(c),
    })
}

/// Greedy decode of `n` tokens after `logits` (the prompt's); returns the ids.
#[inline(never)]
fn decode(engine: &mut CpuEngine, mut logits: Vec<f32>, n: usize) -> BoxResult<Vec<u32>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let next = argmax(&logits) as u32;
        out.push(next);
        logits = engine.forward(&[next], false)?;
    }
    Ok(out)
}

fn main() -> BoxResult<()> {
    let Some(a) = parse_args()? else {
        eprintln!("{USAGE}");
        return Ok(());
    };
    let hwm_start = status_bytes("VmHWM");
    let load_start = loadavg();
    loom_wasm::quant::set_threads(a.threads)?;
    loom_wasm::quant::set_simd(a.simd);
    let path = Path::new(&a.model);
    let file_bytes = std::fs::metadata(path)?.len();
    let mut report = json!({
        "side": "ours (native)",
        "model": a.model,
        "file_bytes": file_bytes,
        "threads": a.threads,
        "simd": loom_wasm::quant::simd_in_use(),
        "runs": a.runs,
        "target": std::env::consts::ARCH,
        "avx2_fma": avx2_fma(),
        "loadavg_start": load_start,
    });

    let t = Instant::now();
    let model = LlmModel::open(path)?;
    let mut engine = model.cpu_engine();
    let first_load_ms = ms_since(t);
    let vocab = model.config.vocab;

    if a.what.iter().any(|w| w == "ids") {
        println!(
            "{}",
            serde_json::to_string(&json!({
                "prefill_ids": prefill_ids(a.prefill_tokens, vocab),
                "chat_ids": chat_ids(&model)?,
            }))?
        );
        return Ok(());
    }
    let (prefill, chat) = match &a.ids {
        Some(f) => {
            let v: Value = serde_json::from_slice(&std::fs::read(f)?)?;
            (ids_of(&v, "prefill_ids")?, ids_of(&v, "chat_ids")?)
        }
        None => (prefill_ids(a.prefill_tokens, vocab), chat_ids(&model)?),
    };
    report["prefill_tokens"] = json!(prefill.len());
    report["chat_tokens"] = json!(chat.len());

    if a.what.iter().any(|w| w == "mem") {
        // Alone in this process: the peak is the model, one engine, and the largest run (prefill, then decode).
        engine.forward(&prefill, false)?;
        let logits = engine.forward(&chat, false)?;
        decode(&mut engine, logits, a.decode_tokens)?;
        let c = &model.config;
        let positions = engine.cached();
        report["mem"] = json!({
            "vmhwm_bytes": status_bytes("VmHWM"),
            "vmhwm_at_start_bytes": hwm_start,
            "vmrss_bytes": status_bytes("VmRSS"),
            "positions": positions,
            "kv_cache_bytes": engine.cache_bytes(),
            "kv_cache_bytes_used": positions * c.n_layers * 2 * c.kv_dim() * 4,
            "weights_bytes": model.weights.bytes(),
        });
    }
    for w in &a.what {
        match w.as_str() {
            "load" => {
                let mut ms = Vec::new();
                for _ in 0..a.runs {
                    let t = Watch::start();
                    let m = LlmModel::open(path)?;
                    let e = m.cpu_engine();
                    ms.push(t.stop());
                    drop(e);
                    drop(m);
                }
                let mut v = timings(ms, 0);
                v["first_ms"] = json!(first_load_ms);
                report["load"] = v;
            }
            "prefill" => {
                let mut ms = Vec::new();
                for r in 0..=a.runs {
                    engine.truncate(0);
                    let t = Watch::start();
                    let logits = engine.forward(&prefill, false)?;
                    std::hint::black_box(argmax(&logits));
                    if r > 0 {
                        ms.push(t.stop());
                    }
                }
                report["prefill"] = timings(ms, prefill.len());
            }
            "decode" => {
                let mut ms = Vec::new();
                let mut ids = Vec::new();
                for r in 0..=a.runs.min(3) {
                    engine.truncate(0);
                    let logits = engine.forward(&chat, false)?;
                    let t = Watch::start();
                    ids = decode(&mut engine, logits, a.decode_tokens)?;
                    if r > 0 {
                        ms.push(t.stop());
                    }
                }
                let mut v = timings(ms, a.decode_tokens);
                v["first_ids"] = json!(ids.iter().take(16).collect::<Vec<_>>());
                report["decode"] = v;
            }
            "ttft" => {
                let mut ms = Vec::new();
                for r in 0..=a.runs {
                    engine.truncate(0);
                    let t = Watch::start();
                    let logits = engine.forward(&chat, false)?;
                    std::hint::black_box(argmax(&logits));
                    if r > 0 {
                        ms.push(t.stop());
                    }
                }
                report["ttft"] = timings(ms, chat.len());
            }
            "accuracy" => report["accuracy"] = accuracy(&mut engine, &chat, a.decode_tokens.min(64), a.simd)?,
            "mem" => {}
            other => return Err(format!("unknown measurement {other:?}; {USAGE}").into()),
        }
    }
    finish(report)
}

/// The decode kernels' rounding on this file: greedy steps after the chat prompt on the exact path (portable:
/// gguf-py's dequantized values in float32 dots), then the same ids through the kernels `simd` picks; per step the
/// largest |Δ| over the exact path's top 20 logits, and the steps whose argmax differs.
fn accuracy(engine: &mut CpuEngine, chat: &[u32], steps: usize, simd: loom_wasm::quant::Simd) -> BoxResult<Value> {
    let top20 = |logits: &[f32]| {
        let mut i: Vec<usize> = (0..logits.len()).collect();
        i.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        i.truncate(20);
        i
    };
    loom_wasm::quant::set_simd(loom_wasm::quant::Simd::None);
    engine.truncate(0);
    let mut exact = vec![engine.forward(chat, false)?];
    let mut ids = Vec::new();
    for _ in 0..steps {
        let next = argmax(exact.last().expect("one")) as u32;
        ids.push(next);
        exact.push(engine.forward(&[next], false)?);
    }
    loom_wasm::quant::set_simd(simd);
    let path = loom_wasm::quant::simd_in_use();
    engine.truncate(0);
    engine.forward(chat, false)?;
    let (mut max_delta, mut argmax_differs) = (0f32, Vec::new());
    for (step, (&id, exact)) in ids.iter().zip(&exact[1..]).enumerate() {
        let got = engine.forward(&[id], false)?;
        for i in top20(exact) {
            max_delta = max_delta.max((got[i] - exact[i]).abs());
        }
        if argmax(&got) != argmax(exact) {
            argmax_differs.push(step);
        }
    }
    Ok(json!({"path": path, "steps": steps, "max_abs_delta_top20": max_delta, "argmax_differs_at": argmax_differs}))
}

fn finish(mut report: Value) -> BoxResult<()> {
    report["loadavg_end"] = json!(loadavg());
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
