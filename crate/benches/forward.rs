//! CPU forward benchmark against Loom. Not a test: `scripts/bench-forward.sh` runs it through
//! `cargo bench -p loom-wasm --bench forward -- [--runs N] LOOM_JSON` and reads the JSON it prints on stdout.
//!
//! LOOM_JSON is what `scripts/bench_forward.py loom` wrote: per case, Loom's `.entity` file, the input and Loom's
//! output (raw little-endian float32). For each case this loads the file with `entity::read` into a fresh
//! `CpuModel`, times the first `forward` (it dequantizes and caches the weights), then `runs` more, and compares
//! every output bit with Loom's. Each timed run also records this thread's CPU time (Linux), since the machine is
//! shared and wall time includes time-slicing. Loading is not timed. A layer we cannot run yet (`Unsupported`) is reported with
//! its error instead of timings. The process exits non-zero, after printing, if any output differs from Loom's.
//!
//! Without arguments (as under `cargo test --all-targets`) it prints its usage and exits successfully.

mod common;

use std::time::Instant;

use common::{loadavg, median, ms_since};
use loom_wasm::cpu::CpuModel;
use loom_wasm::formats::entity;
use serde_json::{json, Value};

const USAGE: &str = "usage: cargo bench -p loom-wasm --bench forward -- [--runs N] LOOM_JSON";

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> BoxResult<()> {
    let mut args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut runs = 15usize;
    if let Some(i) = args.iter().position(|a| a == "--runs") {
        runs = args.get(i + 1).ok_or(USAGE)?.parse()?;
        args.drain(i..i + 2);
    }
    let [loom_json] = args.as_slice() else {
        eprintln!("{USAGE}");
        return Ok(());
    };
    let loom: Value = serde_json::from_slice(&std::fs::read(loom_json)?)?;
    let mut out = Vec::new();
    let mut all_identical = true;
    for case in loom["cases"].as_array().ok_or("LOOM_JSON has no cases")? {
        let r = bench_case(case, runs.max(1))?;
        all_identical &= r["bit_identical"].as_bool() != Some(false);
        out.push(r);
    }
    let report = json!({
        "target": std::env::consts::ARCH,
        "target_features": target_features(),
        "threads": 1,
        "loadavg_end": loadavg(),
        "cases": out,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    if !all_identical {
        return Err("some outputs differ from Loom's (see bit_identical above)".into());
    }
    Ok(())
}

fn bench_case(case: &Value, runs: usize) -> BoxResult<Value> {
    let field = |k: &str| case[k].as_str().ok_or_else(|| format!("case without {k}"));
    let name = field("case")?;
    let bytes = std::fs::read(field("file")?)?;
    let input = read_f32(field("input")?)?;
    let expected = read_f32(field("loom_output")?)?;
    let shape: Vec<usize> = serde_json::from_value(case["shape"].clone())?;

    let mut model = CpuModel::new(entity::read(&bytes)?);
    drop(bytes);
    let t = Instant::now();
    let first = match model.forward(&input, &shape) {
        Ok(y) => y,
        Err(e) => {
            eprintln!("ours {name}: {e}");
            return Ok(json!({"case": name, "error": e.to_string()}));
        }
    };
    let first_ms = ms_since(t);
    let mismatches = if first.data.len() == expected.len() {
        first
            .data
            .iter()
            .zip(&expected)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count()
    } else {
        expected.len().max(first.data.len())
    };
    let max_abs_diff = first
        .data
        .iter()
        .zip(&expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);

    let mut times = Vec::with_capacity(runs);
    let mut cpu = Vec::with_capacity(runs);
    for _ in 0..runs {
        let c = thread_cpu_ns();
        let t = Instant::now();
        let y = std::hint::black_box(model.forward(std::hint::black_box(&input), &shape)?);
        times.push(ms_since(t));
        if let (Some(c0), Some(c1)) = (c, thread_cpu_ns()) {
            cpu.push((c1 - c0) as f64 / 1e6);
        }
        assert!(y.data == first.data, "{name}: output changed between calls");
    }
    let m = median(&times);
    eprintln!("ours {name}: {m:.3} ms (first {first_ms:.3} ms), {mismatches} outputs differ from Loom's");
    Ok(json!({
        "case": name,
        "shape": shape,
        "output_len": expected.len(),
        "output_shape": first.shape,
        "bit_identical": mismatches == 0,
        "mismatches": mismatches,
        "max_abs_diff": max_abs_diff,
        "runs": runs,
        "first_ms": first_ms,
        "forward_ms": times,
        "forward_ms_median": m,
        "forward_ms_min": times.iter().copied().fold(f64::INFINITY, f64::min),
        "cpu_ms": cpu,
        "cpu_ms_median": (!cpu.is_empty()).then(|| median(&cpu)),
    }))
}

fn read_f32(path: &str) -> BoxResult<Vec<f32>> {
    let b = std::fs::read(path)?;
    if b.len() % 4 != 0 {
        return Err(format!("{path}: {} bytes is not a whole number of float32", b.len()).into());
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn target_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    macro_rules! feature {
        ($($name:tt),*) => {
            $(if cfg!(target_feature = $name) {
                f.push($name);
            })*
        };
    }
    feature!("sse2", "sse4.1", "avx", "avx2", "fma", "avx512f", "neon", "simd128");
    f
}

/// CPU time of this thread in ns, from `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` (64-bit Linux; `None`
/// elsewhere), to tell time-slicing on the shared machine apart from the work itself. (`/proc/thread-self/schedstat`
/// only advances at scheduler ticks here, 4 ms.)
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn thread_cpu_ns() -> Option<u64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: glibc's clock_gettime with a valid clock id and a pointer to a live timespec (two 64-bit fields on
    // 64-bit Linux).
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn thread_cpu_ns() -> Option<u64> {
    None
}
