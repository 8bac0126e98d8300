//! ENTITY load/save and header-only inspection benchmarks. Not a test: `scripts/bench-entity.sh` runs it through
//! `cargo bench -p loom-wasm --bench entity -- <mode> ...` and reads the JSON it prints on stdout.
//!
//! Modes:
//! - `entity [--runs N] FILE...`: times `entity::read` and `entity::write` on each file's bytes, already in memory
//!   (as Loom's `deserialize_entity(bytes)` gets them), and asserts that our re-save is byte-identical to the file.
//! - `inspect [--runs N] DIR`: writes (once) `DIR/inspect_1g.entity` and `DIR/inspect_1g.safetensors`, then times a
//!   header-only inspection of each, warm and with the file dropped from the page cache, counting the bytes read.
//!
//! Without a mode (as under `cargo test --all-targets`) it prints its usage and exits successfully.

mod common;

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{loadavg, median, ms_since};
use loom_wasm::formats::{entity, loom_json, safetensors};
use serde_json::{json, Value};

const USAGE: &str =
    "usage: cargo bench -p loom-wasm --bench entity -- entity [--runs N] FILE... | inspect [--runs N] DIR";

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> BoxResult<()> {
    let mut args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut runs = 7usize;
    if let Some(i) = args.iter().position(|a| a == "--runs") {
        runs = args.get(i + 1).ok_or(USAGE)?.parse()?;
        args.drain(i..i + 2);
    }
    let runs = runs.max(1);
    let report = match args.first().map(String::as_str) {
        Some("entity") if args.len() > 1 => bench_entity(&args[1..], runs)?,
        Some("inspect") if args.len() == 2 => bench_inspect(Path::new(&args[1]), runs)?,
        _ => {
            eprintln!("{USAGE}");
            return Ok(());
        }
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn bench_entity(files: &[String], runs: usize) -> BoxResult<Value> {
    let mut out = Vec::new();
    for path in files {
        let bytes = std::fs::read(path)?;
        let header = entity::read_header(&bytes)?;
        let dtype = header.blobs.first().map(|b| b.dtype.clone()).unwrap_or_default();

        // Floor for a load that owns its weights: one copy of the file into fresh memory.
        let mut copy_ms = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            let copy = std::hint::black_box(bytes.to_vec());
            copy_ms.push(ms_since(t));
            drop(copy);
        }

        // Load: one warm-up (reported as the first load in this process), then `runs` timed reads; dropping the
        // network is not timed.
        let t = Instant::now();
        let net = entity::read(&bytes)?;
        let first_read_ms = ms_since(t);
        drop(net);
        let mut read_ms = Vec::with_capacity(runs);
        let mut weights = 0;
        for _ in 0..runs {
            let t = Instant::now();
            let net = entity::read(&bytes)?;
            read_ms.push(ms_since(t));
            weights = net.total_weights();
            drop(net);
        }

        // Load from a buffer we own (a read or memory-mapped file): blobs stay slices of it, nothing is copied.
        let shared = bytes::Bytes::from(bytes.clone());
        let mut read_shared_ms = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            let net = entity::read_bytes(shared.clone())?;
            read_shared_ms.push(ms_since(t));
            drop(net);
        }

        // Save the loaded network: the first save is checked against Loom's bytes, then `runs` timed saves.
        let mut net = entity::read(&bytes)?;
        let t = Instant::now();
        let first = entity::write(&mut net)?;
        let first_write_ms = ms_since(t);
        let identical = first == bytes;
        if !identical {
            let at = first
                .iter()
                .zip(&bytes)
                .position(|(a, b)| a != b)
                .unwrap_or(first.len().min(bytes.len()));
            panic!(
                "{path}: our re-save differs from Loom's file (ours {} bytes, Loom's {}, first difference at byte {at})",
                first.len(),
                bytes.len()
            );
        }
        drop(first);
        let mut write_ms = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            let saved = entity::write(&mut net)?;
            write_ms.push(ms_since(t));
            assert_eq!(saved.len(), bytes.len());
            drop(saved);
        }
        out.push(json!({
            "file": path,
            "dtype": dtype,
            "file_bytes": bytes.len(),
            "header_bytes": entity::PREAMBLE_LEN as u64 + header.header_len,
            "weights": weights,
            "runs": runs,
            "copy_ms_median": median(&copy_ms),
            "first_read_ms": first_read_ms,
            "first_write_ms": first_write_ms,
            "read_ms": read_ms,
            "read_ms_median": median(&read_ms),
            "read_shared_ms_median": median(&read_shared_ms),
            "write_ms": write_ms,
            "write_ms_median": median(&write_ms),
            "resave_identical": identical,
        }));
    }
    Ok(json!({ "results": out, "loadavg_end": loadavg() }))
}

// ---------------------------------------------------------------------------------------------------------------
// Header-only inspection
// ---------------------------------------------------------------------------------------------------------------

const GIB: u64 = 1 << 30;
/// 256 Dense 1024×1024 float32 layers: exactly 1 GiB of payload.
const INSPECT_LAYERS: usize = 256;
const INSPECT_DIM: usize = 1024;

/// A reader that counts the bytes it hands out.
struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// This process's `rchar` (bytes returned by read-like syscalls), from `/proc/self/io`.
fn rchar() -> u64 {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// What one inspection found and cost.
struct Inspection {
    ms: f64,
    /// Bytes our reader returned from the file.
    counted: u64,
    /// Bytes the format says make up the header (preamble included).
    header_bytes: u64,
    /// Layers (ENTITY) or tensors (safetensors) listed in the header.
    entries: usize,
    blobs: usize,
}

fn inspect_entity(path: &Path) -> BoxResult<Inspection> {
    let t = Instant::now();
    let mut f = Counting {
        inner: File::open(path)?,
        read: 0,
    };
    let mut buf = vec![0u8; entity::PREAMBLE_LEN];
    f.read_exact(&mut buf)?;
    let n = entity::header_len(&buf)? as usize;
    buf.resize(entity::PREAMBLE_LEN + n, 0);
    f.read_exact(&mut buf[entity::PREAMBLE_LEN..])?;
    let header = entity::read_header(&buf)?;
    let ms = ms_since(t);
    Ok(Inspection {
        ms,
        counted: f.read,
        header_bytes: buf.len() as u64,
        entries: header.network.layers.len(),
        blobs: header.blobs.len(),
    })
}

fn inspect_safetensors(path: &Path) -> BoxResult<Inspection> {
    let t = Instant::now();
    let mut f = Counting {
        inner: File::open(path)?,
        read: 0,
    };
    let mut buf = vec![0u8; 8];
    f.read_exact(&mut buf)?;
    let n = safetensors::header_size(&buf)? as usize;
    buf.resize(n, 0);
    f.read_exact(&mut buf[8..])?;
    let header = safetensors::inspect(&buf)?;
    let tensors = header.tensors().len();
    let ms = ms_since(t);
    Ok(Inspection {
        ms,
        counted: f.read,
        header_bytes: n as u64,
        entries: tensors,
        blobs: tensors,
    })
}

/// The library's format-agnostic inspection, what `loom inspect` runs (bytes counted by the library).
fn inspect_library(path: &Path) -> BoxResult<Inspection> {
    let t = Instant::now();
    let i = loom_wasm::inspect::inspect(&mut loom_wasm::formats::source::FileSource::open(path)?)?;
    let ms = ms_since(t);
    Ok(Inspection {
        ms,
        counted: i.bytes_read,
        header_bytes: i.header_bytes,
        entries: i.layers.len().max(i.tensors.len()),
        blobs: i.layers.len().max(i.tensors.len()),
    })
}

/// Drops the file from the page cache (`posix_fadvise(DONTNEED)` through GNU dd), so the next read goes to disk.
fn drop_cache(path: &Path) -> bool {
    Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status()
        .is_ok_and(|s| s.success())
}

/// Bytes of the file in the page cache (`fincore`), or None when fincore is missing.
fn resident_bytes(path: &Path) -> Option<u64> {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

fn file_ok(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() >= GIB)
}

fn generate_entity(path: &Path) -> BoxResult<()> {
    let layers: Vec<Value> = (0..INSPECT_LAYERS)
        .map(|i| {
            json!({"z": 0, "y": 0, "x": i, "l": 0, "type": "Dense", "activation": "ReLU", "dtype": "float32",
                   "input_height": INSPECT_DIM, "output_height": INSPECT_DIM})
        })
        .collect();
    let spec = json!({"id": "inspect", "depth": 1, "rows": 1, "cols": INSPECT_LAYERS, "layers_per_cell": 1,
                      "layers": layers});
    let mut net = loom_json::build(spec.to_string().as_bytes())?;
    let bytes = entity::write(&mut net)?;
    drop(net);
    write_atomically(path, |tmp| Ok(std::fs::write(tmp, &bytes)?))
}

fn generate_safetensors(path: &Path) -> BoxResult<()> {
    use ::safetensors::tensor::{serialize_to_file, Dtype, TensorView};
    let data: Vec<u8> = (0..INSPECT_DIM * INSPECT_DIM)
        .flat_map(|i| ((i % 2001) as f32 / 1e4 - 0.1).to_le_bytes())
        .collect();
    let tensors = (0..INSPECT_LAYERS)
        .map(|i| {
            let view = TensorView::new(Dtype::F32, vec![INSPECT_DIM, INSPECT_DIM], &data)?;
            Ok((format!("layers.{i}.weight"), view))
        })
        .collect::<std::result::Result<Vec<_>, ::safetensors::SafeTensorError>>()?;
    write_atomically(path, |tmp| Ok(serialize_to_file(tensors, None, tmp)?))
}

fn write_atomically(path: &Path, write: impl FnOnce(&Path) -> BoxResult<()>) -> BoxResult<()> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    write(&tmp)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn bench_inspect(dir: &Path, runs: usize) -> BoxResult<Value> {
    std::fs::create_dir_all(dir)?;
    let ent = dir.join("inspect_1g.entity");
    let st = dir.join("inspect_1g.safetensors");
    if !file_ok(&ent) {
        eprintln!("writing {} ...", ent.display());
        generate_entity(&ent)?;
    }
    if !file_ok(&st) {
        eprintln!("writing {} ...", st.display());
        generate_safetensors(&st)?;
    }
    // rchar also counts the read of /proc/self/io itself: measure that baseline and subtract it.
    let base = {
        let a = rchar();
        rchar() - a
    };
    let mut results = Vec::new();
    type Inspect = fn(&Path) -> BoxResult<Inspection>;
    for (format, method, path, inspect) in [
        (
            "entity",
            "entity::header_len + read_header",
            &ent,
            inspect_entity as Inspect,
        ),
        (
            "safetensors",
            "safetensors::header_size + inspect",
            &st,
            inspect_safetensors as Inspect,
        ),
        (
            "entity",
            "inspect::inspect (as `loom inspect`)",
            &ent,
            inspect_library as Inspect,
        ),
        (
            "safetensors",
            "inspect::inspect (as `loom inspect`)",
            &st,
            inspect_library as Inspect,
        ),
    ] {
        inspect(path)?; // warm-up
        let mut warm = Vec::with_capacity(runs);
        let mut rchar_delta = 0;
        let mut last = None;
        for _ in 0..runs {
            let r0 = rchar();
            let i = inspect(path)?;
            rchar_delta = rchar() - r0 - base;
            warm.push(i.ms);
            last = Some(i);
        }
        // Cold: the file dropped from the page cache before each run. What the kernel then holds of it (the header
        // plus its readahead) is what a cold inspection read from disk.
        let mut cold = Vec::with_capacity(runs);
        let mut dropped = true;
        for _ in 0..runs {
            dropped &= drop_cache(path) && resident_bytes(path).is_none_or(|b| b == 0);
            cold.push(inspect(path)?.ms);
        }
        let cached_after_cold = resident_bytes(path);
        let i = last.expect("runs >= 1");
        results.push(json!({
            "format": format,
            "method": method,
            "file": path,
            "file_bytes": std::fs::metadata(path)?.len(),
            "header_bytes": i.header_bytes,
            "entries": i.entries,
            "blobs": i.blobs,
            "bytes_read_counted": i.counted,
            "bytes_read_rchar": rchar_delta,
            "bytes_read_beyond_header": i.counted.saturating_sub(i.header_bytes),
            "runs": runs,
            "warm_ms": warm,
            "warm_ms_median": median(&warm),
            "cold_ms": cold,
            "cold_ms_median": median(&cold),
            "cold_cache_dropped": dropped,
            "page_cache_bytes_after_cold": cached_after_cold,
        }));
    }
    Ok(json!({ "results": results, "loadavg_end": loadavg() }))
}
