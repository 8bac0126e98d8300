//! `loom conformance`: runs a Loom-written corpus (`manifest.json` + `cases/`) and compares every
//! re-serialisation we produce with the bytes Loom wrote.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::cpu::CpuModel;
use crate::dtype::{q4_0, DType};
use crate::error::{json_err, LoomError, Result};
use crate::formats::{entity, loom_json, safetensors, tensors};
use crate::network::Network;

/// Which checks to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckKind {
    Formats,
    Forward,
    All,
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

/// Outcomes of a corpus run, one per case in manifest order.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub cases: Vec<(String, Outcome)>,
    /// Largest difference from Loom's forward outputs: absolute where |loom| ≤ 1, relative to |loom| beyond (0 on
    /// the bit-exact CPU).
    pub max_error: (f32, f32),
    /// Layers a GPU forward ran on the CPU instead (`case id from file: layer path: why`), in case order; empty on the CPU.
    pub cpu_layers: Vec<String>,
}

impl Report {
    pub fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.cases.iter().filter(|(_, o)| f(o)).count()
    }

    pub fn passed(&self) -> usize {
        self.count(|o| *o == Outcome::Passed)
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed(_)))
    }

    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skipped(_)))
    }

    /// The closing line: `N passed, M failed` (`, K skipped` when any were).
    pub fn summary(&self) -> String {
        let mut s = format!("{} passed, {} failed", self.passed(), self.failed());
        if self.skipped() > 0 {
            s.push_str(&format!(", {} skipped", self.skipped()));
        }
        s
    }
}

/// Where forward checks run.
pub enum Device {
    Cpu,
    /// On the GPU, compared with Loom's output within [`GPU_TOLERANCE`].
    Gpu(std::sync::Arc<crate::gpu::Gpu>),
}

pub use crate::gpu::GPU_TOLERANCE;

/// Runs every case of the corpus in `dir`, forward checks on the CPU (bit-exact).
pub fn run(dir: &Path, kind: CheckKind) -> Result<Report> {
    run_on(dir, kind, &Device::Cpu)
}

/// Runs every case of the corpus in `dir`, forward checks on `device`.
pub fn run_on(dir: &Path, kind: CheckKind, device: &Device) -> Result<Report> {
    let manifest = loom_json::parse_json(&read(&dir.join("manifest.json"))?, "manifest.json")?;
    let cases = manifest
        .get("cases")
        .and_then(Value::as_array)
        .ok_or_else(|| json_err("manifest.json", "no \"cases\" array"))?;
    let mut report = Report::default();
    for case in cases {
        let id = case.get("id").and_then(Value::as_str).unwrap_or("?").to_string();
        let outcome = match kind {
            CheckKind::Formats => check_formats(dir, case),
            CheckKind::Forward => check_forward(dir, case, device, &id, &mut report),
            CheckKind::All => match check_formats(dir, case) {
                Outcome::Failed(reason) => Outcome::Failed(reason),
                formats => match (formats, check_forward(dir, case, device, &id, &mut report)) {
                    (_, Outcome::Failed(reason)) => Outcome::Failed(reason),
                    (Outcome::Passed, _) | (_, Outcome::Passed) => Outcome::Passed,
                    (skipped, _) => skipped,
                },
            },
        };
        report.cases.push((id, outcome));
    }
    Ok(report)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| LoomError::Io(format!("{}: {e}", path.display())))
}

/// A case's files, by their manifest name.
struct Files<'a> {
    dir: &'a Path,
    map: Option<&'a serde_json::Map<String, Value>>,
}

impl Files<'_> {
    fn path(&self, name: &str) -> Option<PathBuf> {
        let rel = self.map?.get(name)?.as_str()?;
        Some(self.dir.join(rel))
    }

    fn get(&self, name: &str) -> std::result::Result<Option<Vec<u8>>, String> {
        match self.path(name) {
            None => Ok(None),
            Some(p) => read(&p).map(Some).map_err(|e| e.to_string()),
        }
    }

    fn need(&self, name: &str) -> std::result::Result<Vec<u8>, String> {
        self.get(name)?.ok_or_else(|| format!("case lists no {name}"))
    }
}

type Check = std::result::Result<(), String>;

fn same(what: &str, ours: &[u8], loom: &[u8]) -> Check {
    if ours == loom {
        return Ok(());
    }
    let at = ours
        .iter()
        .zip(loom)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(loom.len()));
    let context =
        |b: &[u8]| String::from_utf8_lossy(&b[at.saturating_sub(40).min(b.len())..(at + 40).min(b.len())]).into_owned();
    Err(format!(
        "{what}: {} bytes vs Loom's {}, first difference at byte {at}: ours …{:?}… Loom …{:?}…",
        ours.len(),
        loom.len(),
        context(ours),
        context(loom)
    ))
}

fn flag(case: &Value, name: &str) -> bool {
    case.pointer(&format!("/roundtrip/{name}"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn err(e: LoomError) -> String {
    e.to_string()
}

fn check_formats(dir: &Path, case: &Value) -> Outcome {
    let files = Files {
        dir,
        map: case.get("files").and_then(Value::as_object),
    };
    let result = match case.get("load_mode").and_then(Value::as_str).unwrap_or("") {
        "persist" => check_persisted(case, &files),
        "build" => check_build(case, &files),
        "q4pack" => check_q4_vectors(dir, case),
        "q4entity" => check_q4_entity(&files),
        "st_read" => check_safetensors_read(case, &files),
        "st_write" => check_safetensors_write(&files),
        other => Err(format!("unknown load_mode {other:?}")),
    };
    match result {
        Ok(()) => Outcome::Passed,
        Err(reason) => Outcome::Failed(reason),
    }
}

/// The morphs an `apimorph_*` case applies after loading its float32 spec (named in the case id).
fn api_morphs(case: &Value) -> std::result::Result<Vec<DType>, String> {
    let id = case.get("id").and_then(Value::as_str).unwrap_or("");
    let rest = id.strip_prefix("apimorph_").unwrap_or("");
    let names: Vec<&str> = match rest.strip_prefix("chain_") {
        Some(chain) => chain.split('_').collect(),
        None => rest.rsplit('_').take(1).collect(),
    };
    names.iter().map(|n| DType::parse(n).map_err(err)).collect()
}

fn check_persisted(case: &Value, files: &Files) -> Check {
    let spec = files.need("spec.json")?;
    let loom_json_bytes = files.need("loom.json")?;
    let loom_entity = files.need("loom.entity")?;
    let rt_json = files.get("rt.json")?;
    let rt_entity = files.get("rt.entity")?;
    let rt_from_entity = files.get("rt_from_entity.json")?;
    let api = case.get("category").and_then(Value::as_str) == Some("api_morph");

    // spec.json (legacy float32 masters) → Loom's first JSON and ENTITY saves.
    let from_spec = || -> std::result::Result<Network, String> {
        let mut net = loom_json::read(&spec).map_err(err)?;
        if api {
            for dt in api_morphs(case)? {
                net.layers[0].dtype = dt;
                if let Some(ws) = net.layers[0].weights.as_mut() {
                    ws.morph(dt);
                }
            }
        }
        Ok(net)
    };
    same(
        "spec.json → JSON",
        &loom_json::write(&mut from_spec()?).map_err(err)?,
        &loom_json_bytes,
    )?;
    same(
        "spec.json → entity",
        &entity::write(&mut from_spec()?).map_err(err)?,
        &loom_entity,
    )?;

    // Reload Loom's JSON: JSON and ENTITY re-saves.
    let json_reload = || loom_json::read(&loom_json_bytes).map_err(err);
    if let Some(expected) = rt_json
        .as_deref()
        .or(flag(case, "json_reserialize_identical").then_some(&loom_json_bytes[..]))
    {
        same(
            "loom.json → JSON",
            &loom_json::write(&mut json_reload()?).map_err(err)?,
            expected,
        )?;
    }
    if flag(case, "entity_from_reloaded_json_identical") {
        same(
            "loom.json → entity",
            &entity::write(&mut json_reload()?).map_err(err)?,
            &loom_entity,
        )?;
    }

    // Reload Loom's ENTITY: ENTITY and JSON re-saves.
    let entity_reload = || entity::read(&loom_entity).map_err(err);
    if let Some(expected) = rt_entity
        .as_deref()
        .or(flag(case, "entity_reserialize_identical").then_some(&loom_entity[..]))
    {
        same(
            "loom.entity → entity",
            &entity::write(&mut entity_reload()?).map_err(err)?,
            expected,
        )?;
    }
    if let Some(expected) = rt_from_entity
        .as_deref()
        .or(flag(case, "json_from_reloaded_entity_identical").then_some(&loom_json_bytes[..]))
    {
        same(
            "loom.entity → JSON",
            &loom_json::write(&mut entity_reload()?).map_err(err)?,
            expected,
        )?;
    }

    check_entity_header(case, &loom_entity)?;
    if let Some(p) = case.get("layer_persistence_from_entity_0") {
        let (bytes, scale, native) = entity::layer_blob(&loom_entity, 0)
            .map_err(err)?
            .ok_or("no layers.0 blob")?;
        let sha: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
        if Some(sha.as_str()) != p.get("weights_sha256").and_then(Value::as_str)
            || Some(scale) != p.get("scale").and_then(Value::as_f64).map(|s| s as f32)
            || Some(native) != p.get("native").and_then(Value::as_bool)
        {
            return Err(format!(
                "layers.0 blob: sha256 {sha}, scale {scale}, native {native} differ from {p}"
            ));
        }
    }
    Ok(())
}

/// Header-only parse of Loom's `.entity`: the blob table and sizes equal the manifest's.
fn check_entity_header(case: &Value, loom_entity: &[u8]) -> Check {
    let n = entity::header_len(loom_entity).map_err(err)? as usize;
    let header = entity::read_header(&loom_entity[..entity::PREAMBLE_LEN + n]).map_err(err)?;
    if let Some(size) = case.pointer("/sizes/entity_header_json").and_then(Value::as_u64) {
        if size != header.header_len {
            return Err(format!("header length {} vs manifest {size}", header.header_len));
        }
    }
    let expected = case
        .get("blobs")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if expected.len() != header.blobs.len() {
        return Err(format!("{} blobs vs manifest {}", header.blobs.len(), expected.len()));
    }
    for (b, e) in header.blobs.iter().zip(expected) {
        let ok = Some(b.path.as_str()) == e.get("path").and_then(Value::as_str)
            && Some(b.offset) == e.get("offset").and_then(Value::as_u64)
            && Some(b.length) == e.get("length").and_then(Value::as_u64)
            && Some(b.dtype.as_str()) == e.get("dtype").and_then(Value::as_str)
            && b.scale == e.get("scale").and_then(Value::as_f64).unwrap_or(0.0) as f32
            && Some(b.native) == e.get("native").and_then(Value::as_bool);
        if !ok {
            return Err(format!("blob entry {b:?} differs from manifest {e}"));
        }
    }
    Ok(())
}

/// Replaces every `"weights": "…"` value with `"<random>"`, as the corpus does for Loom's random init.
fn blank_weights(json: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(json);
    let mut out = String::with_capacity(text.len());
    let mut rest: &str = &text;
    const KEY: &str = "\"weights\": \"";
    while let Some(i) = rest.find(KEY) {
        out.push_str(&rest[..i + KEY.len()]);
        out.push_str("<random>");
        rest = &rest[i + KEY.len()..];
        rest = &rest[rest.find('"').unwrap_or(rest.len())..];
    }
    out.push_str(rest);
    out.into_bytes()
}

fn check_build(case: &Value, files: &Files) -> Check {
    let spec = files.need("spec.json")?;
    let mut net = loom_json::build(&spec).map_err(err)?;
    let first = loom_json::write(&mut net).map_err(err)?;
    same(
        "build → JSON (weights blanked)",
        &blank_weights(&first),
        &files.need("loom.blanked.json")?,
    )?;
    let second = loom_json::write(&mut net).map_err(err)?;
    let first_equals_second = case.get("first_write_equals_second").and_then(Value::as_bool);
    if first_equals_second.is_some() && Some(first == second) != first_equals_second {
        return Err(format!(
            "first save == second save is {}, Loom: {first_equals_second:?}",
            first == second
        ));
    }
    if case.get("weights_equal_between_writes").and_then(Value::as_bool) == Some(true)
        && blank_weights(&first).len() != first.len()
        && blank_weights(&second) == blank_weights(&first)
    {
        // Only the scale may differ between the two writes: the weights themselves must not.
        let weights = |j: &[u8]| -> Vec<String> {
            let text = String::from_utf8_lossy(j).into_owned();
            text.lines()
                .filter(|l| l.contains("\"weights\""))
                .map(str::to_string)
                .collect()
        };
        if weights(&first) != weights(&second) {
            return Err("weights changed between the first and second save".into());
        }
    }
    if let Some(expected) = files.get("loom.entity.header")? {
        let ours = entity::write(&mut net).map_err(err)?;
        let n = entity::header_len(&ours).map_err(err)? as usize;
        same("build → entity header", &ours[..entity::PREAMBLE_LEN + n], &expected)?;
    }
    Ok(())
}

/// Little-endian f32 values from their bytes in hex, as the corpora store inputs and outputs.
pub fn hex_f32s(hex: &str) -> std::result::Result<Vec<f32>, String> {
    let bytes = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
        .collect::<std::result::Result<Vec<u8>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

fn check_q4_vectors(dir: &Path, case: &Value) -> Check {
    let vectors = case.get("vectors").and_then(Value::as_object).ok_or("no vectors")?;
    for (name, v) in vectors {
        let input = hex_f32s(v.get("input_f32_hex").and_then(Value::as_str).ok_or("no input")?)?;
        let file = v.get("file").and_then(Value::as_str).ok_or("no file")?;
        let expected = read(&dir.join(file)).map_err(err)?;
        same(&format!("Q4_0 pack {name}"), &q4_0::pack(&input), &expected)?;
        let blocks = q4_0::Q4Blocks::parse(&expected).map_err(err)?;
        same(&format!("Q4_0 re-encode {name}"), &blocks.to_bytes(), &expected)?;
    }
    Ok(())
}

/// Loom cannot write transformer entities (the corpus file is emulated from the spec), and its loader gives the
/// MHA layer `seq_length: 1`, so a re-save differs in that header field. What must hold: every blob comes back
/// byte for byte with the same table, and the second generation is stable.
fn check_q4_entity(files: &Files) -> Check {
    let bytes = files.need("emulated_q4.entity")?;
    let saved = entity::write(&mut entity::read(&bytes).map_err(err)?).map_err(err)?;
    let header =
        |b: &[u8]| -> std::result::Result<entity::EntityHeader, String> { entity::read_header(b).map_err(err) };
    let (before, after) = (header(&bytes)?, header(&saved)?);
    if before.blobs != after.blobs || before.network.transformer != after.network.transformer {
        return Err("blob table or transformer section changed on re-save".into());
    }
    same(
        "Q4 transformer entity payload",
        &saved[after.payload_offset() as usize..],
        &bytes[before.payload_offset() as usize..],
    )?;
    let again = entity::write(&mut entity::read(&saved).map_err(err)?).map_err(err)?;
    same("Q4 transformer entity, second generation", &again, &saved)
}

/// Loom's `LoadSafetensorsFromBytes` decoding of every tensor equals the manifest's `loom_decoded`.
fn check_safetensors_read(case: &Value, files: &Files) -> Check {
    let file = safetensors::SafetensorsFile::from_bytes(files.need("input.safetensors")?).map_err(err)?;
    let expected = case
        .get("loom_decoded")
        .and_then(Value::as_object)
        .ok_or("no loom_decoded")?;
    for (name, values) in expected {
        let ours = file
            .tensor(name)
            .map_err(err)?
            .to_f32(safetensors::Semantics::Loom)
            .map_err(err)?;
        let loom: Vec<f32> = values
            .as_array()
            .ok_or("loom_decoded entry is not an array")?
            .iter()
            .map(|v| v.as_f64().map(|x| x as f32).ok_or("not a number"))
            .collect::<std::result::Result<_, _>>()?;
        // Compared as numbers: Loom's output passes through JSON, where Go's `-0` reads back as 0.
        if ours != loom {
            return Err(format!("tensor {name}: ours {ours:?}, Loom {loom:?}"));
        }
    }
    Ok(())
}

/// spec.json → Loom's `SaveSafetensorsToBytes` bytes.
fn check_safetensors_write(files: &Files) -> Check {
    let net = loom_json::read(&files.need("spec.json")?).map_err(err)?;
    same(
        "spec.json → safetensors",
        &tensors::write_loom_safetensors(&net).map_err(err)?,
        &files.need("loom.safetensors")?,
    )
}

/// Loom's forward output for the case input, bit for bit: from the reloaded JSON (or the spec when Loom's JSON
/// reload changes the output), and from the reloaded `.entity` when Loom's own reload keeps the output.
fn check_forward(dir: &Path, case: &Value, device: &Device, id: &str, report: &mut Report) -> Outcome {
    let max_error = &mut report.max_error;
    let cpu_layers = &mut report.cpu_layers;
    let (Some(input), Some(expected)) = (
        case.get("input_f32_hex").and_then(Value::as_str),
        case.get("expected_output_f32_hex").and_then(Value::as_str),
    ) else {
        return Outcome::Skipped("no forward data".into());
    };
    let files = Files {
        dir,
        map: case.get("files").and_then(Value::as_object),
    };
    let result = (|| -> Check {
        let input = hex_f32s(input)?;
        let expected = hex_f32s(expected)?;
        let shape: Vec<usize> = case
            .get("input_shape")
            .and_then(Value::as_array)
            .ok_or("no input_shape")?
            .iter()
            .map(|d| d.as_u64().map(|d| d as usize).ok_or("bad input_shape"))
            .collect::<std::result::Result<_, _>>()?;
        let json_source = if flag(case, "forward_after_json_reload_identical") {
            "loom.json"
        } else {
            "spec.json"
        };
        let mut sources = vec![(json_source, loom_json::read(&files.need(json_source)?).map_err(err)?)];
        if flag(case, "forward_after_entity_reload_identical") {
            sources.push(("loom.entity", entity::read(&files.need("loom.entity")?).map_err(err)?));
        }
        for (name, net) in sources {
            let out = match device {
                Device::Cpu => CpuModel::new(net).forward(&input, &shape),
                Device::Gpu(gpu) => crate::gpu::GpuModel::new(gpu.clone(), net).and_then(|mut m| {
                    let out = pollster::block_on(m.forward(&input, &shape));
                    for (path, why) in m.cpu_layers() {
                        cpu_layers.push(format!("{id} from {name}: {path}: {why}"));
                    }
                    out
                }),
            }
            .map_err(|e| format!("forward from {name}: {e}"))?;
            if let Device::Gpu(_) = device {
                let (abs, rel) = GPU_TOLERANCE;
                if out.data.len() != expected.len() {
                    return Err(format!(
                        "forward from {name}: {} values, Loom {}",
                        out.data.len(),
                        expected.len()
                    ));
                }
                for (i, (g, l)) in out.data.iter().zip(&expected).enumerate() {
                    let err = (g - l).abs();
                    if !(err <= abs + rel * l.abs() || (g.is_nan() && l.is_nan())) {
                        return Err(format!("forward from {name}: value {i} is {g} on the GPU, {l} in Loom"));
                    }
                    if l.abs() <= 1.0 {
                        max_error.0 = max_error.0.max(err);
                    } else {
                        max_error.1 = max_error.1.max(err / l.abs());
                    }
                }
                continue;
            }
            if out
                .data
                .iter()
                .map(|x| x.to_bits())
                .ne(expected.iter().map(|x| x.to_bits()))
            {
                let diffs = out
                    .data
                    .iter()
                    .zip(&expected)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                return Err(format!(
                    "forward from {name}: {diffs} of {} values differ from Loom's (ours {:?}…, Loom {:?}…)",
                    expected.len(),
                    &out.data[..out.data.len().min(4)],
                    &expected[..expected.len().min(4)]
                ));
            }
        }
        Ok(())
    })();
    match result {
        Ok(()) => Outcome::Passed,
        Err(reason) => Outcome::Failed(reason),
    }
}
