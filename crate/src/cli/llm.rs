//! `loom chat | generate | logits | tokenize`: the LLM runtime from the command line. With `--json`, stdout
//! holds only the JSON document; progress and notices go to stderr.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::llm::constrain::Constraint;
use crate::llm::engine::{CpuEngine, Engine};
use crate::llm::generate::{now_s, ChatFormat, GenerateOptions, Generation, Session};
use crate::llm::gpu_engine::GpuEngine;
use crate::llm::model::LlmModel;
use crate::llm::sampler::SamplingParams;
use crate::llm::template::ChatMessage;
use crate::llm::tokenizer::Tokenizer;

/// Sampling flags shared by `chat` and `generate`.
#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// Always take the most likely token (same as --temperature 0).
    #[arg(long)]
    pub greedy: bool,
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalty on tokens already in the conversation (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Seed of the sampler (the same seed gives the same text); a new one each run when absent.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most new tokens.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// Text that ends the reply (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Hold the reply to the JSON Schema in FILE (valid JSON, ending where the value closes).
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub json_schema: Option<PathBuf>,
    /// Hold the reply to any JSON object.
    #[arg(long, group = "constraint")]
    pub json_object: bool,
    /// Hold the reply to a regular expression (matched whole).
    #[arg(long, value_name = "RE", group = "constraint")]
    pub regex: Option<String>,
    /// Hold the reply to the Lark grammar in FILE (llguidance's dialect).
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub grammar: Option<PathBuf>,
}

impl SamplingArgs {
    /// The constraint the flags ask for, its file read and a schema parsed.
    fn constraint(&self) -> Result<Option<Constraint>> {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|e| LoomError::Io(format!("{}: {e}", p.display())));
        Ok(if let Some(path) = &self.json_schema {
            let schema = serde_json::from_slice(&read(path)?)
                .map_err(|e| crate::error::json_err(&path.display().to_string(), e))?;
            Some(Constraint::JsonSchema(schema))
        } else if self.json_object {
            Some(Constraint::JsonObject)
        } else if let Some(rx) = &self.regex {
            Some(Constraint::Regex(rx.clone()))
        } else if let Some(path) = &self.grammar {
            let text = String::from_utf8(read(path)?)
                .map_err(|_| LoomError::InvalidInput(format!("{}: not UTF-8 text", path.display())))?;
            Some(Constraint::Lark(text))
        } else {
            None
        })
    }

    fn options(&self) -> Result<GenerateOptions> {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        Ok(GenerateOptions {
            sampling: SamplingParams {
                temperature: if self.greedy { 0.0 } else { self.temperature },
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repetition_penalty: self.repeat_penalty,
                seed,
                ..SamplingParams::default()
            },
            max_tokens: self.max_tokens,
            stop_strings: self.stop.clone(),
            constraint: self.constraint()?,
            ..GenerateOptions::default()
        })
    }
}

/// Where the decoder runs.
#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
pub enum LlmDevice {
    Cpu,
    Gpu,
}

/// Model, device and threads: shared by every LLM command.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A GGUF file, a Loom transformer .entity, an HF folder, or a .safetensors file with config.json beside it.
    pub model: PathBuf,
    #[arg(long, value_enum, default_value_t = LlmDevice::Cpu)]
    pub device: LlmDevice,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The prompt of `generate` and `logits`: text (templated as a user message unless --raw) or ids.
#[derive(Args, Clone)]
pub struct PromptArgs {
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    pub prompt: Option<String>,
    /// Use the text as it is, without the chat template.
    #[arg(long, requires = "prompt")]
    pub raw: bool,
    /// Prompt token ids, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub ids: Option<Vec<u32>>,
}

/// The model of `args` in a session on its engine. On the GPU a lost device is replaced, mid-reply too: a new
/// device with the weights uploaded again (or the CPU when none comes back), the conversation computed again.
pub(super) fn session(args: &ModelArgs) -> Result<Session> {
    let (model, engine) = load(args)?;
    let on_gpu = engine.device().starts_with("GPU");
    let mut session = Session::new(&model, engine)?;
    if let Some(name) = session.format().built_in_template() {
        eprintln!("loom: the model's files carry no chat template: using {name}'s format");
    }
    if on_gpu {
        let (cfg, weights) = (model.config.clone(), model.weights.clone());
        session.on_device_lost(Box::new(move || {
            eprintln!("loom: the GPU device was lost; opening a new one");
            let fresh = pollster::block_on(async {
                let gpu = Arc::new(Gpu::new().await?);
                let mut e = GpuEngine::new(gpu, &cfg, &weights, None).await?;
                e.self_test().await?;
                Ok::<_, LoomError>(e)
            });
            Ok(match fresh {
                Ok(e) => {
                    eprintln!("loom: decoding on {}", e.adapter());
                    Box::new(e)
                }
                Err(e) => {
                    eprintln!("loom: no GPU came back ({e}); going on on the CPU");
                    Box::new(CpuEngine::new(cfg.clone(), weights.clone()))
                }
            })
        }));
    }
    Ok(session)
}

pub(super) fn load(args: &ModelArgs) -> Result<(LlmModel, Box<dyn Engine>)> {
    if let Some(n) = args.threads {
        crate::quant::set_threads(n)?;
    }
    let t0 = now_s();
    let model = LlmModel::open(&args.model).map_err(|e| e.in_file(&args.model.display().to_string()))?;
    let c = &model.config;
    eprintln!(
        "loom: {} ({}, {} layers, hidden {}, vocab {}, {:.1} MiB of weights) loaded in {:.0} ms",
        args.model.display(),
        model.format.name(),
        c.n_layers,
        c.hidden,
        c.vocab,
        model.weights.bytes() as f64 / (1 << 20) as f64,
        (now_s() - t0) * 1e3
    );
    let engine: Box<dyn Engine> = match args.device {
        LlmDevice::Cpu => Box::new(model.cpu_engine()),
        LlmDevice::Gpu => match gpu_engine(&model) {
            Ok(e) => {
                eprintln!("loom: decoding on {}", e.adapter());
                Box::new(e)
            }
            // No adapter, or a kernel that computes wrong here: the CPU engine, with the reason. Other GPU errors
            // (out of memory naming the tensor, a block type the shaders lack) are the user's to see.
            Err(LoomError::NoGpu(why)) => {
                eprintln!("loom: no GPU ({why}); running on the CPU");
                Box::new(model.cpu_engine())
            }
            Err(e @ LoomError::GpuSelfTest(_)) => {
                eprintln!("loom: {e}; running on the CPU");
                Box::new(model.cpu_engine())
            }
            Err(e) => return Err(e),
        },
    };
    Ok((model, engine))
}

fn gpu_engine(model: &LlmModel) -> Result<GpuEngine> {
    let t0 = now_s();
    let gpu = Arc::new(pollster::block_on(Gpu::new())?);
    // Test hook: a kernel made wrong on purpose (its dispatches skipped), to see the self-test send the model to
    // the CPU.
    if let Ok(prefix) = std::env::var("LOOM_TEST_BREAK_GPU_KERNEL") {
        gpu.break_kernel(Some(&prefix));
    }
    let mut engine = pollster::block_on(GpuEngine::new(gpu, &model.config, &model.weights, None))?;
    eprintln!("loom: weights uploaded to the GPU in {:.0} ms", (now_s() - t0) * 1e3);
    let t0 = now_s();
    let checks = pollster::block_on(engine.self_test())?;
    eprintln!(
        "loom: GPU self-test passed ({} kernel checks and the first token's logits) in {:.0} ms",
        checks.len(),
        (now_s() - t0) * 1e3
    );
    Ok(engine)
}

fn prompt_ids(format: &ChatFormat, p: &PromptArgs) -> Result<Vec<u32>> {
    match (&p.ids, &p.prompt) {
        (Some(ids), _) => Ok(ids.clone()),
        (None, Some(text)) if p.raw => format.encode_prompt(text),
        (None, Some(text)) => format.chat_prompt(&messages(None, text)),
        (None, None) => Err(LoomError::InvalidInput("give --prompt or --ids".into())),
    }
}

fn messages(system: Option<&str>, user: &str) -> Vec<ChatMessage> {
    let mut m = Vec::new();
    if let Some(s) = system {
        m.push(ChatMessage {
            role: "system".into(),
            content: s.into(),
        });
    }
    m.push(ChatMessage {
        role: "user".into(),
        content: user.into(),
    });
    m
}

/// The JSON both `chat --json` and `generate --json` print (chat adds `seed` and `device`).
fn generation_json(g: &Generation) -> serde_json::Value {
    json!({
        "prompt_ids": g.prompt_ids,
        "ids": g.ids,
        "text": g.text,
        "tokens_per_s": g.tokens_per_s(),
        "prefill_tokens_per_s": g.prefill_tokens_per_s(),
        "stop_reason": g.stop_reason.name(),
    })
}

fn print_json(v: &serde_json::Value) -> Result<ExitCode> {
    println!(
        "{}",
        serde_json::to_string(v).map_err(|e| LoomError::Io(e.to_string()))?
    );
    Ok(ExitCode::SUCCESS)
}

/// Streams text to stdout as it comes.
fn stdout_sink(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_ok()
}

fn stats_line(g: &Generation) -> String {
    format!(
        "[{} prompt tokens ({} cached) at {:.1} tok/s, {} new at {:.1} tok/s, stop: {}]",
        g.prompt_ids.len(),
        g.reused_tokens,
        g.prefill_tokens_per_s(),
        g.ids.len(),
        g.tokens_per_s(),
        g.stop_reason.name()
    )
}

/// Ctrl-C ends the reply being generated, not the program; at the prompt it exits.
fn install_ctrl_c(cancel: Arc<AtomicBool>, generating: Arc<AtomicBool>) {
    let _ = ctrlc::set_handler(move || {
        if generating.load(Ordering::SeqCst) {
            cancel.store(true, Ordering::SeqCst);
        } else {
            std::process::exit(130);
        }
    });
}

pub fn run_chat(
    m: &ModelArgs,
    s: &SamplingArgs,
    system: Option<&str>,
    prompt: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let mut session = session(m)?;
    let mut opts = s.options()?;
    if let Some(sys) = system {
        session.conversation.history.push(ChatMessage {
            role: "system".into(),
            content: sys.into(),
        });
    }
    if let Some(text) = prompt {
        let mut sink = |t: &str| json || stdout_sink(t);
        let g = session.chat(text, &opts, false, &mut sink)?;
        if json {
            let mut v = generation_json(&g);
            // A greedy reply draws nothing: no seed made it.
            let greedy = opts.sampling.temperature == 0.0;
            v["seed"] = json!((!greedy).then_some(opts.sampling.seed));
            v["device"] = json!(session.engine().device());
            return print_json(&v);
        }
        println!();
        eprintln!("{}", stats_line(&g));
        return Ok(ExitCode::SUCCESS);
    }
    if json {
        return Err(LoomError::InvalidInput("--json needs --prompt (one reply)".into()));
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let generating = Arc::new(AtomicBool::new(false));
    install_ctrl_c(cancel.clone(), generating.clone());
    opts.cancel = Some(cancel.clone());
    eprintln!(
        "loom: chat on the {} (an empty line or Ctrl-D ends; Ctrl-C stops a reply)",
        session.engine().device()
    );
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        cancel.store(false, Ordering::SeqCst);
        generating.store(true, Ordering::SeqCst);
        let result = session.chat(line.trim_end_matches(['\n', '\r']), &opts, true, &mut stdout_sink);
        generating.store(false, Ordering::SeqCst);
        match result {
            Ok(g) => {
                println!();
                eprintln!("{}", stats_line(&g));
            }
            Err(e) => eprintln!("loom: {e}"),
        }
    }
}

pub fn run_generate(m: &ModelArgs, p: &PromptArgs, s: &SamplingArgs, json: bool) -> Result<ExitCode> {
    let mut session = session(m)?;
    let ids = prompt_ids(session.format(), p)?;
    let mut sink = |t: &str| json || stdout_sink(t);
    let g = session.generate(&ids, &s.options()?, &mut sink)?;
    if json {
        return print_json(&generation_json(&g));
    }
    if session.format().tokenizer().is_err() {
        // No text without a tokenizer: the new ids.
        let ids: Vec<String> = g.ids.iter().map(u32::to_string).collect();
        print!("{}", ids.join(","));
    }
    println!();
    eprintln!("{}", stats_line(&g));
    Ok(ExitCode::SUCCESS)
}

pub fn run_logits(m: &ModelArgs, p: &PromptArgs, top: usize, all_positions: bool) -> Result<ExitCode> {
    let (model, mut engine) = load(m)?;
    let ids = match &p.ids {
        Some(ids) => ids.clone(),
        None => prompt_ids(&ChatFormat::new(&model)?, p)?,
    };
    if ids.is_empty() {
        return Err(LoomError::InvalidInput("an empty prompt".into()));
    }
    let logits = engine.forward(&ids, all_positions)?;
    let vocab = model.config.vocab;
    if all_positions {
        let rows: Vec<&[f32]> = logits.chunks_exact(vocab).collect();
        return print_json(&json!({ "ids": ids, "logits": rows }));
    }
    let mut order: Vec<usize> = (0..vocab).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let top: Vec<(usize, f32)> = order.iter().take(top).map(|&i| (i, logits[i])).collect();
    print_json(&json!({ "ids": ids, "top": top }))
}

pub fn run_tokenize(path: &Path, text: &str, json: bool) -> Result<ExitCode> {
    let tokenizer = if path.extension().is_some_and(|e| e == "json") {
        Tokenizer::from_json(&std::fs::read(path)?)?
    } else {
        crate::llm::model::open_tokenizer(path)?
    };
    let ids = tokenizer.encode(text, false)?;
    if json {
        return print_json(&json!({ "ids": ids }));
    }
    let pieces: Vec<String> = ids
        .iter()
        .map(|&i| format!("{i}:{:?}", tokenizer.id_to_token(i).unwrap_or_default()))
        .collect();
    println!("{}", pieces.join(" "));
    Ok(ExitCode::SUCCESS)
}
