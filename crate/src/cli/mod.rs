//! The `loom` command-line tool (native only): inspect, convert, export, run, conformance, the LLM commands chat,
//! generate, logits, tokenize (`llm`), and serve (an OpenAI-compatible server, `serve`).

mod llm;
mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::conformance::{self, CheckKind, Outcome};
use crate::convert::{self, OutputFormat};
use std::sync::Arc;

use crate::cpu::CpuModel;
use crate::dtype::DType;
use crate::error::{LoomError, Result};
use crate::formats::checkpoint::{self, Checkpoint};
use crate::formats::safetensors::Dtype;
use crate::formats::source::FileSource;
use crate::gpu::{Gpu, GpuModel};
use crate::inspect::{self, Inspection};

#[derive(Parser)]
#[command(
    name = "loom",
    about = "Inspect, convert and run Loom checkpoints; chat with language models (GGUF, HF folders, Loom transformer \
             .entity)",
    version
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a checkpoint's format, grid, layers and sizes (reads only the header of .entity / .safetensors).
    Inspect {
        /// A .entity, Loom .json or .safetensors file, or a training-checkpoint directory.
        path: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Convert between Loom JSON, .entity and safetensors (chosen by OUT's extension or --format), or a language
    /// model (GGUF, HF folder, .safetensors with config.json beside it) to a Loom transformer .entity.
    Convert {
        input: PathBuf,
        output: PathBuf,
        /// Re-quantize every layer with weights to this Loom dtype (for safetensors: float32, float16, bfloat16).
        #[arg(long)]
        dtype: Option<String>,
        /// For a language model: bake q,k,v,o,gate,up,down into Loom Q4_0 (lossy) instead of exact float32.
        #[arg(long)]
        q4: bool,
        /// Output format, when OUT's extension does not say.
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Write even if some weights change; the changes are reported.
        #[arg(long)]
        allow_lossy: bool,
        /// Replace OUT if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Write an inference-only copy of a training checkpoint (meta.json + weights.safetensors, no optimizer state).
    Export {
        checkpoint_dir: PathBuf,
        out_dir: PathBuf,
        /// Store weights as F16.
        #[arg(long)]
        half: bool,
        /// Replace files in a non-empty OUT_DIR.
        #[arg(long)]
        force: bool,
    },
    /// Run a network on the CPU: `loom run FILE --input '[0.1, 0.2]' --shape 1,2`.
    Run {
        path: PathBuf,
        /// Input values as a JSON array.
        #[arg(long, conflicts_with = "input_file")]
        input: Option<String>,
        /// A file holding the input as a JSON array, or raw little-endian f32 when it ends in .bin / .f32.
        #[arg(long)]
        input_file: Option<PathBuf>,
        /// Input shape, comma separated (the first dimension is the batch).
        #[arg(long, value_delimiter = ',', required = true)]
        shape: Vec<usize>,
        /// Print JSON (`{"shape": [...], "output": [...]}`) instead of plain text.
        #[arg(long)]
        json: bool,
        /// `gpu` runs on WebGPU/Vulkan through wgpu, falling back to the CPU (with the reason) without an adapter.
        #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
        device: DeviceArg,
    },
    /// Chat with an LLM: one reply with --prompt, else an interactive session (Ctrl-C stops a reply).
    Chat {
        #[command(flatten)]
        model: llm::ModelArgs,
        /// A system message that opens the conversation.
        #[arg(long)]
        system: Option<String>,
        /// Send this message, print the reply and exit.
        #[arg(long)]
        prompt: Option<String>,
        #[command(flatten)]
        sampling: llm::SamplingArgs,
        /// With --prompt: print {"prompt_ids", "ids", "text", "tokens_per_s", ...} only.
        #[arg(long)]
        json: bool,
    },
    /// Generate a continuation of a prompt (templated as a user message unless --raw) or of token ids.
    Generate {
        #[command(flatten)]
        model: llm::ModelArgs,
        #[command(flatten)]
        prompt: llm::PromptArgs,
        #[command(flatten)]
        sampling: llm::SamplingArgs,
        /// Print {"prompt_ids", "ids", "text", ...} only.
        #[arg(long)]
        json: bool,
    },
    /// Serve a language model over HTTP as OpenAI's API does (/v1/chat/completions with streaming,
    /// /v1/completions, /v1/models, /health), one request at a time.
    Serve {
        #[command(flatten)]
        model: llm::ModelArgs,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// 0 picks a free port (the first line on stdout says which).
        #[arg(long, default_value_t = 8080)]
        port: u16,
    },
    /// Logits of a prompt: the top K at the last position, or every logit at every position.
    Logits {
        #[command(flatten)]
        model: llm::ModelArgs,
        #[command(flatten)]
        prompt: llm::PromptArgs,
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Every logit at every prompt position ({"ids", "logits": [[...], ...]}).
        #[arg(long)]
        all_positions: bool,
        /// JSON output (the only output this command has).
        #[arg(long, required = true)]
        json: bool,
    },
    /// Token ids of a text, from a model's tokenizer or a tokenizer.json.
    Tokenize {
        model_or_tokenizer: PathBuf,
        text: String,
        #[arg(long)]
        json: bool,
    },
    /// Run a Loom-written conformance corpus (manifest.json + cases/) and compare our output with Loom's.
    Conformance {
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = Check::Formats)]
        check: Check,
        /// Where forward checks run: `cpu` is bit-exact; `gpu` is compared within a tolerance.
        #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
        device: DeviceArg,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Check {
    Formats,
    Forward,
    All,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum DeviceArg {
    Cpu,
    Gpu,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Entity,
    Json,
    Safetensors,
}

/// Entry point of the `loom` binary.
pub fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Inspect { path, json } => run_inspect(&path, json),
        Command::Convert {
            input,
            output,
            dtype,
            format,
            q4,
            allow_lossy,
            force,
        } => run_convert(&input, &output, dtype.as_deref(), format, q4, allow_lossy, force),
        Command::Export {
            checkpoint_dir,
            out_dir,
            half,
            force,
        } => Checkpoint::open(&checkpoint_dir)
            .and_then(|c| checkpoint::export(&c, &out_dir, half, force))
            .map(|()| {
                println!("wrote {}", out_dir.display());
                ExitCode::SUCCESS
            }),
        Command::Run {
            path,
            input,
            input_file,
            shape,
            json,
            device,
        } => run_forward(&path, input.as_deref(), input_file.as_deref(), &shape, json, device),
        Command::Conformance { dir, check, device } => run_conformance(&dir, check, device),
        Command::Chat {
            model,
            system,
            prompt,
            sampling,
            json,
        } => llm::run_chat(&model, &sampling, system.as_deref(), prompt.as_deref(), json),
        Command::Generate {
            model,
            prompt,
            sampling,
            json,
        } => llm::run_generate(&model, &prompt, &sampling, json),
        Command::Logits {
            model,
            prompt,
            top,
            all_positions,
            json: _,
        } => llm::run_logits(&model, &prompt, top, all_positions),
        Command::Serve { model, host, port } => serve::run(&model, &host, port),
        Command::Tokenize {
            model_or_tokenizer,
            text,
            json,
        } => llm::run_tokenize(&model_or_tokenizer, &text, json),
    };
    result.unwrap_or_else(|e| {
        eprintln!("loom: {e}");
        ExitCode::from(2)
    })
}

fn run_inspect(path: &Path, json: bool) -> Result<ExitCode> {
    let report = if path.is_dir() && path.join("config.json").exists() {
        inspect::inspect_hf_folder(&crate::llm::model::hf_files(path, None)?)?
    } else if path.is_dir() {
        inspect::inspect_checkpoint(&Checkpoint::open(path)?)
    } else {
        inspect::inspect(&mut FileSource::open(path)?).map_err(|e| e.in_file(&path.display().to_string()))?
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| LoomError::Io(e.to_string()))?
        );
    } else {
        print!("{}", render_table(path, &report));
    }
    Ok(ExitCode::SUCCESS)
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The human-readable table `loom inspect` prints.
fn render_table(path: &Path, r: &Inspection) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{}  ({})", path.display(), r.format);
    if r.file_bytes > 0 {
        let _ = writeln!(
            s,
            "file {}  header {}  weights {}  (read {} of it)",
            human_bytes(r.file_bytes),
            human_bytes(r.header_bytes),
            human_bytes(r.weight_bytes),
            human_bytes(r.bytes_read)
        );
    }
    if let Some(g) = &r.grid {
        let _ = writeln!(
            s,
            "grid depth {} × rows {} × cols {} × {} layers per cell",
            g.depth, g.rows, g.cols, g.layers_per_cell
        );
    }
    let _ = writeln!(s, "parameters {}", r.total_params);
    if let Some(l) = &r.llm {
        let _ = writeln!(
            s,
            "decoder {}: {} layers, hidden {}, {} heads ({} kv) × {}, intermediate {}, vocab {}, context {}, \
             rope θ {}{}",
            l.architecture,
            l.layers,
            l.hidden,
            l.heads,
            l.kv_heads,
            l.head_dim,
            l.intermediate,
            l.vocab,
            l.context,
            l.rope_theta,
            if l.tied_embeddings { ", tied embeddings" } else { "" }
        );
        let mix: Vec<String> = l.quantization.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
        let _ = writeln!(
            s,
            "tensors by block type: {}; chat template: {}",
            mix.join(", "),
            if l.chat_template { "yes" } else { "no" }
        );
        let _ = writeln!(s, "runs: yes (loom chat / generate / logits)");
    }
    if let Some(why) = &r.llm_unsupported {
        let _ = writeln!(s, "runs: no: {why}");
    }
    let by_dtype: Vec<String> = r
        .bytes_by_dtype
        .iter()
        .map(|(d, b)| format!("{d} {}", human_bytes(*b)))
        .collect();
    if !by_dtype.is_empty() {
        let _ = writeln!(s, "bytes by dtype: {}", by_dtype.join(", "));
    }
    if !r.layers.is_empty() {
        let w = r
            .layers
            .iter()
            .map(|l| 2 * l.nesting + l.path.len())
            .max()
            .unwrap_or(0)
            .max(8);
        let _ = writeln!(
            s,
            "\n{:<w$} {:>12} {:<18} {:<10} {:<9} {:>13} {:>12} {:>10}",
            "layer", "(z,y,x,l)", "type", "activation", "dtype", "scale", "params", "bytes"
        );
        for l in &r.layers {
            let name = format!("{}{}", "  ".repeat(l.nesting), l.path);
            let cell = if l.nesting == 0 {
                format!("({},{},{},{})", l.z, l.y, l.x, l.l)
            } else {
                String::new()
            };
            let scale = l.scale.map_or(String::new(), |s| format!("{s}"));
            let ty = if l.disabled {
                format!("{} (off)", l.layer_type)
            } else {
                l.layer_type.clone()
            };
            let _ = writeln!(
                s,
                "{name:<w$} {cell:>12} {ty:<18} {:<10} {:<9} {scale:>13} {:>12} {:>10}",
                l.activation, l.dtype, l.params, l.bytes
            );
        }
    }
    if !r.tensors.is_empty() {
        let _ = writeln!(
            s,
            "\n{:<48} {:<8} {:<20} {:>12} {:>12}",
            "tensor", "dtype", "shape", "bytes", "offset"
        );
        for t in &r.tensors {
            let _ = writeln!(
                s,
                "{:<48} {:<8} {:<20} {:>12} {:>12}",
                t.name,
                t.dtype,
                format!("{:?}", t.shape),
                t.bytes,
                t.offset
            );
        }
    }
    for (k, v) in &r.metadata {
        let v = if v.chars().count() > 100 {
            format!("{}…", v.chars().take(100).collect::<String>())
        } else {
            v.clone()
        };
        let _ = writeln!(s, "metadata {k}: {v}");
    }
    s
}

/// True for what `LlmModel::open` takes rather than a Loom network: an HF folder, a GGUF file, a safetensors file
/// without Loom's topology that has a config.json beside it, or (to bake it with `--q4`) a transformer `.entity`;
/// without `--q4` an `.entity` converts as a network, which keeps its bytes.
fn is_language_model(input: &Path, q4: bool) -> Result<bool> {
    use crate::formats::Header;
    if input.is_dir() {
        return Ok(true);
    }
    Ok(match crate::formats::open(&mut FileSource::open(input)?)?.header {
        Header::Gguf(_) => true,
        Header::Safetensors(h) => {
            input.with_file_name("config.json").exists() && !h.metadata().contains_key(convert::TOPOLOGY_KEY)
        }
        Header::Entity(h) => q4 && h.network.transformer.is_some(),
        Header::LoomJson(_) => false,
    })
}

/// The tensor type to re-export to and the file's bytes, when a safetensors file without a Loom topology (an HF
/// checkpoint) goes to safetensors: its tensors change float type, whatever lies beside it.
fn foreign_safetensors_to(input: &Path, out_format: OutputFormat, q4: bool) -> Result<Option<(Dtype, bytes::Bytes)>> {
    let OutputFormat::Safetensors(dtype) = out_format else {
        return Ok(None);
    };
    if q4 || input.is_dir() {
        return Ok(None);
    }
    let foreign = match crate::formats::open(&mut FileSource::open(input)?)?.header {
        crate::formats::Header::Safetensors(h) => !h.metadata().contains_key(convert::TOPOLOGY_KEY),
        _ => false,
    };
    Ok(match foreign {
        true => Some((dtype, crate::llm::model::map_file(input)?)),
        false => None,
    })
}

fn run_convert(
    input: &Path,
    output: &Path,
    dtype: Option<&str>,
    format: Option<Format>,
    q4: bool,
    allow_lossy: bool,
    force: bool,
) -> Result<ExitCode> {
    let mut out_format = match format {
        Some(Format::Entity) => OutputFormat::Entity,
        Some(Format::Json) => OutputFormat::Json,
        Some(Format::Safetensors) => OutputFormat::Safetensors(Dtype::F32),
        None => OutputFormat::from_extension(&output.to_string_lossy()).ok_or_else(|| {
            LoomError::InvalidInput(format!(
                "cannot tell the output format of {}: use .entity, .json or .safetensors, or --format",
                output.display()
            ))
        })?,
    };
    let mut loom_dtype = dtype.map(DType::parse).transpose()?;
    // For safetensors, --dtype picks the tensor type.
    if let OutputFormat::Safetensors(_) = out_format {
        if let Some(dt) = loom_dtype.take() {
            out_format = OutputFormat::Safetensors(match dt {
                DType::Float32 => Dtype::F32,
                DType::Float16 => Dtype::F16,
                DType::BFloat16 => Dtype::BF16,
                other => {
                    return Err(LoomError::InvalidInput(format!(
                        "safetensors output is float32, float16 or bfloat16, not {other}"
                    )))
                }
            });
        }
    }
    if output.exists() && !force {
        return Err(LoomError::InvalidInput(format!(
            "{} exists; pass --force to replace it",
            output.display()
        )));
    }
    // What a language model's .entity needs beside it (its tokenizer), written with it.
    let mut beside: Vec<(&str, Vec<u8>)> = Vec::new();
    let (out, report) = if let Some((st_dtype, file)) = foreign_safetensors_to(input, out_format, q4)? {
        if loom_dtype.is_some() {
            return Err(LoomError::InvalidInput(
                "safetensors output takes --dtype float32, float16 or bfloat16".into(),
            ));
        }
        convert::retype_safetensors(&file, st_dtype)?
    } else if is_language_model(input, q4)? {
        if out_format != OutputFormat::Entity || loom_dtype.is_some() {
            return Err(LoomError::InvalidInput(format!(
                "{} is a language model: it converts to a transformer .entity (float32, or Loom Q4_0 with --q4)",
                input.display()
            )));
        }
        let model = crate::llm::model::LlmModel::open(input)?;
        beside = model.tokenizer_files()?;
        model.to_entity(q4)?
    } else {
        if q4 {
            return Err(LoomError::InvalidInput(format!(
                "--q4 bakes a language model's matrices; {} is a Loom network (use --dtype)",
                input.display()
            )));
        }
        let bytes = std::fs::read(input).map_err(|e| LoomError::Io(format!("{}: {e}", input.display())))?;
        let mut net = convert::read_network(bytes.into())?;
        convert::convert(&mut net, out_format, loom_dtype)?
    };
    if !report.is_lossless() && !allow_lossy {
        eprintln!(
            "loom convert: refused, this conversion would change weights:\n{}",
            report.describe()
        );
        eprintln!("pass --allow-lossy to write it anyway");
        return Ok(ExitCode::from(1));
    }
    // A file of the same name already beside OUT is kept unless it holds the same bytes or --force says so.
    let dir = output
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut files = Vec::new();
    for (name, bytes) in beside {
        let path = dir.join(name);
        match std::fs::read(&path) {
            Ok(old) if old == bytes => continue,
            Ok(_) if !force => {
                return Err(LoomError::InvalidInput(format!(
                    "{} exists with other contents; pass --force to replace it with the model's",
                    path.display()
                )))
            }
            _ => files.push((path, bytes)),
        }
    }
    files.push((output.to_path_buf(), out));
    for (path, bytes) in &files {
        // Write beside the target, then rename: an interrupted write never leaves a half file under its name.
        let tmp = path.with_extension("loom-tmp");
        std::fs::write(&tmp, bytes).map_err(|e| LoomError::Io(format!("{}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, path).map_err(|e| LoomError::Io(format!("{}: {e}", path.display())))?;
    }
    let (_, out) = files.pop().expect("the output");
    if report.is_lossless() {
        println!("wrote {} ({} bytes), lossless", output.display(), out.len());
    } else {
        println!(
            "wrote {} ({} bytes); lost precision:\n{}",
            output.display(),
            out.len(),
            report.describe()
        );
    }
    for (path, _) in &files {
        println!(
            "wrote {} beside it (the model's tokenizer: a .entity holds none)",
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn run_forward(
    path: &Path,
    input: Option<&str>,
    input_file: Option<&Path>,
    shape: &[usize],
    json: bool,
    device: DeviceArg,
) -> Result<ExitCode> {
    let values: Vec<f32> = match (input, input_file) {
        (Some(text), _) => parse_values(text)?,
        (None, Some(file)) => {
            let bytes = std::fs::read(file).map_err(|e| LoomError::Io(format!("{}: {e}", file.display())))?;
            let name = file.to_string_lossy();
            if name.ends_with(".bin") || name.ends_with(".f32") {
                if !bytes.len().is_multiple_of(4) {
                    return Err(LoomError::InvalidInput(format!(
                        "{name}: not a whole number of f32 values"
                    )));
                }
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            } else {
                parse_values(&String::from_utf8_lossy(&bytes))?
            }
        }
        (None, None) => return Err(LoomError::InvalidInput("give --input '[...]' or --input-file".into())),
    };
    let bytes = std::fs::read(path).map_err(|e| LoomError::Io(format!("{}: {e}", path.display())))?;
    let net = convert::read_network(bytes.into())?;
    net.check_input(&values, shape)?;
    let gpu = match device {
        DeviceArg::Gpu => match pollster::block_on(Gpu::new()) {
            Ok(gpu) => Some(gpu),
            Err(e) => {
                eprintln!("loom run: {e}; running on the CPU instead");
                None
            }
        },
        DeviceArg::Cpu => None,
    };
    let out = match gpu {
        Some(gpu) => {
            eprintln!("loom run: GPU {} ({:?})", gpu.info.name, gpu.info.backend);
            let mut model = GpuModel::new(Arc::new(gpu), net)?;
            let out = pollster::block_on(model.forward(&values, shape))?;
            for (path, reason) in model.cpu_layers() {
                eprintln!("loom run: {path} ran on the CPU: {reason}");
            }
            out
        }
        None => CpuModel::new(net).forward(&values, shape)?,
    };
    if json {
        let v = serde_json::json!({"shape": out.shape, "output": out.data});
        println!("{v}");
    } else {
        println!("shape {:?}", out.shape);
        println!("{:?}", out.data);
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_values(text: &str) -> Result<Vec<f32>> {
    let v: Vec<f64> = serde_json::from_str(text)
        .map_err(|e| LoomError::InvalidInput(format!("input must be a JSON array of numbers: {e}")))?;
    Ok(v.into_iter().map(|x| x as f32).collect())
}

fn run_conformance(dir: &Path, check: Check, device: DeviceArg) -> Result<ExitCode> {
    let kind = match check {
        Check::Formats => CheckKind::Formats,
        Check::Forward => CheckKind::Forward,
        Check::All => CheckKind::All,
    };
    let device = match device {
        DeviceArg::Cpu => conformance::Device::Cpu,
        DeviceArg::Gpu => conformance::Device::Gpu(Arc::new(pollster::block_on(Gpu::new())?)),
    };
    let report = conformance::run_on(dir, kind, &device)?;
    if let conformance::Device::Gpu(gpu) = &device {
        let (abs, rel) = conformance::GPU_TOLERANCE;
        println!(
            "GPU {}: forward within |gpu − loom| ≤ {abs:e} + {rel:e}·|loom|; max abs error {:e}, max rel error {:e}",
            gpu.info.name, report.max_error.0, report.max_error.1
        );
        // A layer the GPU handed to the CPU passes bit-exact without the GPU having been checked: say so and fail.
        for layer in &report.cpu_layers {
            println!("FAIL ran on the CPU, not checked on the GPU: {layer}");
        }
    }
    for (id, outcome) in &report.cases {
        if let Outcome::Failed(reason) = outcome {
            println!("FAIL {id}: {reason}");
        }
    }
    println!("{}", report.summary());
    Ok(if report.failed() > 0 || !report.cpu_layers.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
