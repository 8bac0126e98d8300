//! Loom transformer `.entity` files as chat models: what `loom convert` writes reproduces the numpy goldens
//! (`loom_q4_0` for `--q4`, the source's own set for a lossless conversion), welvet (Loom itself) loads it, the
//! corpus's emulated entity runs, and hostile files are typed errors.

mod llm_util;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bytes::Bytes;
use llm_util::{check_tiny, golden, greedy, tiny_expected};
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::model::{LlmModel, ModelFormat};
use loom_wasm::quant::GgmlType;
use serde_json::Value;

fn loom(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loom")).args(args).output().unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loom-llm-entity-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tiny(file: &str) -> PathBuf {
    golden().join("tiny-llama").join(file)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `loom convert MODEL OUT args…`, asserting success.
fn convert(model: &Path, out: &Path, args: &[&str]) -> Output {
    let mut all = vec!["convert", model.to_str().unwrap(), out.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = loom(&all);
    assert!(
        o.status.success(),
        "loom {all:?}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

fn entity_of(model: &str, q4: bool) -> Vec<u8> {
    let (bytes, _) = LlmModel::open(&tiny(model)).unwrap().to_entity(q4).unwrap();
    bytes
}

#[test]
fn q4_entity_reproduces_the_loom_q4_0_golden() {
    let out = scratch("q4").join("tiny.q4.entity");
    convert(&tiny("model.f32.safetensors"), &out, &["--q4", "--allow-lossy"]);
    let model = LlmModel::open(&out).unwrap();
    assert_eq!(model.format, ModelFormat::Entity);
    // Rows of 64 and 128 are whole blocks: the matrices stay Loom Q4_0 blocks in memory.
    let b = &model.weights.blocks[0];
    for m in b.matrices() {
        assert_eq!(m.ty, GgmlType::LoomQ4_0);
    }
    let (expected, prompts) = tiny_expected();
    check_tiny(&model, "loom_q4_0", &expected["weight_sets"]["loom_q4_0"], &prompts);
}

/// The `.entity` header as JSON and the payload offset.
fn header(file: &[u8]) -> (Value, usize) {
    let n = u64::from_le_bytes(file[12..20].try_into().unwrap()) as usize;
    (serde_json::from_slice(&file[20..20 + n]).unwrap(), 20 + n)
}

fn blob<'a>(file: &'a [u8], path: &str) -> &'a [u8] {
    let (h, start) = header(file);
    let b = h["blobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["path"] == path)
        .unwrap();
    let (off, len) = (
        b["offset"].as_u64().unwrap() as usize,
        b["length"].as_u64().unwrap() as usize,
    );
    &file[start + off..start + off + len]
}

/// The packer against the reference's first two blocks of layer 0's q_proj: scales bit for bit, and the q
/// values read straight from the words (nibble m of word w is element 8w+m, spec §8).
#[test]
fn q4_packer_matches_the_golden_blocks() {
    let file = entity_of("model.f32.safetensors", true);
    let payload = blob(&file, "layers.1.q4_0.200");
    let (expected, _) = tiny_expected();
    let want = &expected["weight_sets"]["loom_q4_0"]["check_blocks_layer0_q_proj"];
    let word = |i: usize| u32::from_le_bytes(payload[i..i + 4].try_into().unwrap());
    let n_scales = word(0) as usize;
    assert_eq!(n_scales, want["n_blocks"].as_u64().unwrap() as usize);
    assert_eq!(word(4) as usize, 512, "words padded to max(512, roundup64(4·blocks))");
    for b in 0..2 {
        let hex = want["first_2_block_scales_f32_hex"][b].as_str().unwrap();
        assert_eq!(
            word(8 + 4 * b),
            u32::from_str_radix(hex, 16).unwrap(),
            "block {b} scale"
        );
        let words = 8 + 4 * n_scales;
        let q: Vec<i64> = (0..32)
            .map(|e| {
                let w = word(words + 4 * (4 * b + e / 8));
                (((w >> (4 * (e % 8))) & 0xF) as i32) << 28 >> 28
            })
            .map(i64::from)
            .collect();
        let want_q: Vec<i64> = want["first_2_block_q"][b]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(q, want_q, "block {b} q values");
    }
}

/// The inspector's tensor reads on a Q4 transformer `.entity`: every part the inspection lists for a layer kept as
/// Loom Q4_0 blocks reads back with its shape (layer 0's q_proj starting with the reference's two blocks, `q·s`
/// exactly; a bias the file does not store is a typed error), the whole layer reads, and the float32 globals
/// equal the F32 safetensors' tensors bit for bit. The corpus's emulated Q4 entity too.
#[test]
fn every_part_of_a_q4_transformer_entity_reads_back() {
    use loom_wasm::model::LoadedModel;
    let (expected, _) = tiny_expected();
    let want = &expected["weight_sets"]["loom_q4_0"]["check_blocks_layer0_q_proj"];
    let model =
        LoadedModel::from_bytes(Bytes::from(entity_of("model.f32.safetensors", true)), "tiny.q4.entity").unwrap();
    let q = model.tensor("layers.1#q_weight").unwrap();
    assert_eq!((q.dtype.as_str(), q.shape.as_slice()), ("Q4_0", &[64u64, 64][..]));
    let values = q.values(0, 64).unwrap();
    for b in 0..2 {
        let scale = want["first_2_block_scales"][b].as_f64().unwrap() as f32;
        for (e, qv) in want["first_2_block_q"][b].as_array().unwrap().iter().enumerate() {
            let v = qv.as_i64().unwrap() as f32 * scale;
            assert_eq!(values[32 * b + e].to_bits(), v.to_bits(), "block {b} element {e}");
        }
    }

    let st_bytes = std::fs::read(tiny("model.f32.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&st_bytes).unwrap();
    for (global, hf) in [
        ("embeddings", "model.embed_tokens.weight"),
        ("final_norm", "model.norm.weight"),
    ] {
        let t = model.tensor(&format!("transformer.{global}")).unwrap();
        let want: Vec<u32> = st
            .tensor(hf)
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let got: Vec<u32> = t.values(0, t.count).unwrap().iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want, "transformer.{global}");
    }

    let corpus = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/conformance/cases/q4_0_transformer_entity/emulated_q4.entity");
    let corpus = LoadedModel::from_bytes(Bytes::from(std::fs::read(corpus).unwrap()), "emulated_q4.entity").unwrap();
    for m in [&model, &corpus] {
        let mut read = 0;
        for row in m.inspection.layers.iter().filter(|r| r.dtype == "Q4_0") {
            let mut stored = 0;
            for part in &row.parts {
                let name = format!("{}#{}", row.path, part.name);
                match m.tensor(&name) {
                    Ok(t) => {
                        assert_eq!(t.shape, part.shape, "{name}");
                        assert_eq!(t.count as u64, part.shape.iter().product::<u64>(), "{name}");
                        assert!(m.tensor_stats(&name, 16).is_ok(), "{name}");
                        stored += t.count;
                        read += 1;
                    }
                    Err(e) => {
                        assert!(part.name.ends_with("_bias"), "{name}: {e}");
                        assert!(e.to_string().contains("stores no"), "{name}: {e}");
                    }
                }
            }
            assert_eq!(m.tensor(&row.path).unwrap().count, stored, "{}", row.path);
        }
        assert!(read > 0, "{}: no Q4_0 parts read", m.name);
        for t in &m.inspection.tensors {
            assert_eq!(
                m.tensor(&t.name).unwrap().count as u64,
                t.shape.iter().product::<u64>(),
                "{}",
                t.name
            );
        }
    }
}

/// Without `--q4` nothing changes: the F32 safetensors and the Q8_0 GGUF (dequantized exactly, its q/k rows
/// back in HF order) reproduce their own goldens.
#[test]
fn lossless_entities_reproduce_their_own_goldens() {
    let (expected, prompts) = tiny_expected();
    let dir = scratch("lossless");
    for (set, file) in [
        ("safetensors_f32", "model.f32.safetensors"),
        ("gguf_q8_0", "model.q8_0.gguf"),
    ] {
        // Each in its own folder: a converted model's tokenizer goes beside it.
        std::fs::create_dir_all(dir.join(set)).unwrap();
        let out = dir.join(set).join(format!("{set}.entity"));
        let o = convert(&tiny(file), &out, &[]);
        assert!(text(&o.stdout).contains("lossless"), "{set}: {}", text(&o.stdout));
        let model = LlmModel::open(&out).unwrap();
        assert_eq!(model.weights.blocks[0].wq.ty, GgmlType::F32);
        check_tiny(&model, set, &expected["weight_sets"][set], &prompts);
    }
}

/// Loom's own runtime (PyPI welvet, which scripts/setup.sh installs) must be there: a check against it never skips.
fn require_welvet() {
    let ok = Command::new("python3")
        .args(["-c", "import welvet"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "welvet is not importable: run scripts/setup.sh (pip install welvet==0.80.0)"
    );
}

/// Runs scripts/check_entity_welvet.py on `files` with `prompt` and 16 greedy steps: one JSON object per file.
fn welvet_check(files: &[PathBuf], prompt: &[u32]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/check_entity_welvet.py");
    let prompt: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let o = Command::new("python3")
        .arg(&script)
        .args(["--prompt", &prompt.join(","), "--greedy", "16"])
        .args(files)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn max_diff(a: &[f32], b: impl Iterator<Item = f32>) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Loom itself (welvet 0.80.0) loads every kind of file we write with `LoadEntityTransformer`, and its CPU
/// decoder runs the float32 ones to the numpy goldens of their sources: same logits (≤ 1e-3) at every prompt
/// position, same 16 greedy ids. (Loom's CPU path ignores Q4_0 blobs, so Q4 files are only loaded.)
#[test]
fn welvet_loads_and_runs_our_entities() {
    require_welvet();
    let (expected, prompts) = tiny_expected();
    let dir = scratch("welvet");
    let mut paths = Vec::new();
    for (name, model, args) in [
        ("q4", "model.f32.safetensors", &["--q4", "--allow-lossy"][..]),
        ("safetensors_f32", "model.f32.safetensors", &[][..]),
        ("gguf_q8_0", "model.q8_0.gguf", &[][..]),
    ] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        let out = dir.join(name).join(format!("{name}.entity"));
        convert(&tiny(model), &out, args);
        paths.push(out);
    }
    let p = 2;
    let results = welvet_check(&paths, &prompts[p]);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r["loaded"] == true));
    assert!(results[0]["logits"].is_null(), "a Q4 file is only loaded");
    for r in &results[1..] {
        let set = r["file"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .trim_end_matches(".entity");
        let want = &expected["weight_sets"][set]["results"][p];
        let loom: Vec<f32> = r["logits"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32))
            .collect();
        let golden = want["logits"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32));
        let d = max_diff(&loom, golden);
        assert!(d <= 1e-3, "{set}: Loom's logits differ from the golden by {d}");
        assert_eq!(r["greedy"], want["greedy_ids"], "{set}: Loom's greedy ids");
    }
}

#[test]
fn corpus_emulated_q4_entity_runs() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/conformance/cases/q4_0_transformer_entity/emulated_q4.entity");
    let model = LlmModel::open(&path).unwrap();
    let vocab = model.config.vocab;
    assert_eq!((vocab, model.config.hidden, model.config.n_layers), (12, 8, 1));
    // Rows of 8 are not whole 32-element blocks: these matrices are dequantized.
    assert_eq!(model.weights.blocks[0].wq.ty, GgmlType::F32);
    let prompt = [1u32, 5, 7];
    let run = || {
        let mut engine = model.cpu_engine();
        let logits = engine.forward(&prompt, true).unwrap();
        assert_eq!(logits.len(), prompt.len() * vocab);
        assert!(logits.iter().all(|x| x.is_finite()));
        let last = logits[(prompt.len() - 1) * vocab..].to_vec();
        greedy(&mut engine, &last, 8, None)
    };
    let first = run();
    assert_eq!(first.len(), 8);
    assert!(first.iter().all(|&t| (t as usize) < vocab));
    assert_eq!(first, run());
}

/// Rebuilds a file with its header JSON changed by `f` (blob offsets are relative to the payload, so they
/// stay valid).
fn with_header(file: &[u8], f: impl Fn(&mut Value)) -> Vec<u8> {
    let (mut h, start) = header(file);
    f(&mut h);
    let json = serde_json::to_vec(&h).unwrap();
    let mut out = file[..12].to_vec();
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&file[start..]);
    out
}

fn blob_entry<'a>(h: &'a mut Value, path: &str) -> &'a mut Value {
    h["blobs"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|b| b["path"] == path)
        .unwrap()
}

fn open_err(file: Vec<u8>) -> String {
    match LlmModel::from_entity(Bytes::from(file)) {
        Ok(_) => panic!("a hostile file opened"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hostile_entities_are_typed_errors() {
    let good = entity_of("model.f32.safetensors", true);
    assert!(LlmModel::from_entity(Bytes::from(good.clone())).is_ok());

    for cut in [10, 100, good.len() / 2, good.len() - 1] {
        let e = open_err(good[..cut].to_vec());
        assert!(
            e.contains("truncated") || e.contains("outside the payload"),
            "cut {cut}: {e}"
        );
    }

    // The dims disagree with the layers and blobs.
    let e = open_err(with_header(&good, |h| {
        h["transformer"]["dims"]["intermediate_size"] = 96.into()
    }));
    assert!(e.contains("output_height 128") && e.contains("96"), "{e}");
    let e = open_err(with_header(&good, |h| {
        h["transformer"]["dims"]["num_layers"] = 3.into()
    }));
    assert!(e.contains("layers"), "{e}");
    let e = open_err(with_header(&good, |h| h["transformer"]["hidden_size"] = (-64).into()));
    assert!(e.contains("hidden_size"), "{e}");
    let e = open_err(with_header(&good, |h| {
        h["transformer"]["dims"]["num_heads"] = (1 << 20).into();
        h["transformer"]["dims"]["head_dim"] = (1 << 20).into();
    }));
    assert!(e.contains("heads × head_dim"), "{e}");

    // A Q4_0 blob shorter than its counts say, and one whose counts fit another matrix.
    let e = open_err(with_header(&good, |h| {
        let b = blob_entry(h, "layers.1.q4_0.201");
        b["length"] = (b["length"].as_u64().unwrap() - 4).into();
    }));
    assert!(e.contains("Q4_0 payload"), "{e}");
    let mut fewer = good.clone();
    let (h, start) = header(&good);
    let off = start
        + h["blobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["path"] == "layers.1.q4_0.201")
            .unwrap()["offset"]
            .as_u64()
            .unwrap() as usize;
    // One scale fewer and one word more: the same length, but 31 blocks for a 32×64 matrix.
    let n = u32::from_le_bytes(good[off..off + 4].try_into().unwrap());
    let w = u32::from_le_bytes(good[off + 4..off + 8].try_into().unwrap());
    fewer[off..off + 4].copy_from_slice(&(n - 1).to_le_bytes());
    fewer[off + 4..off + 8].copy_from_slice(&(w + 1).to_le_bytes());
    let e = open_err(fewer);
    assert!(e.contains("layers.1.q4_0.201") && e.contains("blocks"), "{e}");

    // Missing globals and matrices.
    for (path, what) in [
        ("transformer.embeddings", "transformer.embeddings"),
        ("transformer.final_norm", "transformer.final_norm"),
        ("layers.5.q4_0.200", "layers.5 (q_proj)"),
    ] {
        let e = open_err(with_header(&good, |h| {
            h["blobs"].as_array_mut().unwrap().retain(|b| b["path"] != path)
        }));
        assert!(e.contains("missing") && e.contains(what), "{path}: {e}");
    }
    let e = open_err(with_header(&good, |h| h["transformer"]["lm_head_tied"] = false.into()));
    assert!(e.contains("transformer.lm_head"), "{e}");

    // A plain Loom network is not a language model.
    let plain =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance/cases/transformer_int8/loom.entity");
    let e = open_err(std::fs::read(plain).unwrap());
    assert!(e.contains("no transformer section"), "{e}");
}

#[test]
fn cli_refuses_lossy_q4_and_overwrites_and_names_the_tensors() {
    let dir = scratch("cli");
    let model = tiny("model.f32.safetensors");
    let out = dir.join("m.entity");
    let (m, o) = (model.to_str().unwrap(), out.to_str().unwrap());

    let r = loom(&["convert", m, o, "--q4"]);
    assert_eq!(r.status.code(), Some(1));
    let err = text(&r.stderr);
    assert!(err.contains("refused") && err.contains("--allow-lossy"), "{err}");
    for t in [
        "layers.1.q4_0.200 (block 0 q_proj)",
        "layers.7.q4_0.102 (block 1 down_proj)",
        "max abs error",
    ] {
        assert!(err.contains(t), "{t} not in {err}");
    }
    assert!(!out.exists());

    let r = loom(&["convert", m, o, "--q4", "--allow-lossy"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let said = text(&r.stdout);
    assert!(
        said.contains("lost precision") && said.contains("layers.3.q4_0.100 (block 0 gate_proj) (F32 → Q4_0)"),
        "{said}"
    );
    // 2 blocks × 7 matrices, nothing else.
    assert_eq!(said.lines().filter(|l| l.contains(".q4_0.")).count(), 14, "{said}");

    let r = loom(&["convert", m, o]);
    assert!(!r.status.success());
    assert!(text(&r.stderr).contains("--force"), "{}", text(&r.stderr));
    let r = loom(&["convert", m, o, "--force"]);
    assert!(
        r.status.success() && text(&r.stdout).contains("lossless"),
        "{}",
        text(&r.stderr)
    );

    // A float32 transformer .entity bakes to the same file as its source.
    let baked = dir.join("baked.entity");
    convert(&out, &baked, &["--q4", "--allow-lossy"]);
    assert!(std::fs::read(&baked).unwrap() == entity_of("model.f32.safetensors", true));

    // --q4 is for language models, --dtype for Loom networks.
    let r = loom(&["convert", m, dir.join("x.entity").to_str().unwrap(), "--dtype", "int8"]);
    assert!(
        !r.status.success() && text(&r.stderr).contains("language model"),
        "{}",
        text(&r.stderr)
    );
}

/// tiny-llama made a Qwen2 (q/k/v biases) or a Qwen3 (per-head q/k norms) in an HF folder: the F32 weights plus
/// deterministic extra tensors, which are returned per block in q, k(, v) order.
fn tiny_variant(dir: &Path, arch: &str) -> Vec<Vec<f32>> {
    let file = std::fs::read(tiny("model.f32.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&file).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.shape().to_vec(), t.data().to_vec()))
        .collect();
    let extra: &[(&str, usize, f32)] = match arch {
        "qwen2" => &[
            ("q_proj.bias", 64, 0.0),
            ("k_proj.bias", 32, 0.0),
            ("v_proj.bias", 32, 0.0),
        ],
        _ => &[("q_norm.weight", 16, 1.0), ("k_norm.weight", 16, 1.0)],
    };
    let mut added = Vec::new();
    for layer in 0..2 {
        for &(name, len, base) in extra {
            let v: Vec<f32> = (0..len)
                .map(|i| base + ((i * 7 + layer * 3 + len) as f32).sin() * 0.5)
                .collect();
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            tensors.push((format!("model.layers.{layer}.self_attn.{name}"), vec![len], bytes));
            added.push(v);
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    let mut config: Value = serde_json::from_slice(&std::fs::read(tiny("config.json")).unwrap()).unwrap();
    config["model_type"] = arch.into();
    config["architectures"] = serde_json::json!([if arch == "qwen2" {
        "Qwen2ForCausalLM"
    } else {
        "Qwen3ForCausalLM"
    }]);
    // Loom runs its final norm (and an .entity's q/k norms) at 1e-6 whatever the model says: Qwen's own eps.
    config["rms_norm_eps"] = 1e-6.into();
    std::fs::write(dir.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    added
}

/// Qwen2's q/k/v biases and Qwen3's q/k norms survive both conversions. Biases: float32 files keep them in the
/// MHA layer's bias slots, Q4 files in a `.biases` blob; norms go in `.q_norm` / `.k_norm`. Our reader gives every
/// value back exactly, Loom's loader accepts both files, and Loom's own forward on the float32 file gives our
/// logits (from the HF folder) and greedy ids.
#[test]
fn qwen2_biases_and_qwen3_norms_survive_both_conversions() {
    for arch in ["qwen2", "qwen3"] {
        let dir = scratch(arch);
        let hf = dir.join("hf");
        std::fs::create_dir_all(&hf).unwrap();
        let added = tiny_variant(&hf, arch);
        let source = LlmModel::open(&hf).unwrap();

        let (f32_file, q4_file) = (dir.join("f32.entity"), dir.join("q4.entity"));
        convert(&hf, &f32_file, &[]);
        convert(&hf, &q4_file, &["--q4", "--allow-lossy"]);
        if arch == "qwen2" {
            let q4 = std::fs::read(&q4_file).unwrap();
            assert_eq!(blob(&q4, "layers.1.biases").len(), 4 * (64 + 32 + 32 + 64));
        }
        for file in [&f32_file, &q4_file] {
            let m = LlmModel::open(file).unwrap();
            let per_block = added.len() / 2;
            for (b, blk) in m.weights.blocks.iter().enumerate() {
                let got = match arch {
                    "qwen2" => vec![&blk.bq, &blk.bk, &blk.bv],
                    _ => vec![&blk.q_norm, &blk.k_norm],
                };
                for (i, g) in got.into_iter().enumerate() {
                    assert_eq!(
                        g.as_ref(),
                        Some(&added[per_block * b + i]),
                        "{}: block {b} #{i}",
                        file.display()
                    );
                }
            }
        }

        require_welvet();
        let prompt = [84u32, 104, 101, 32, 113, 117, 105, 99, 107];
        let results = welvet_check(&[f32_file, q4_file], &prompt);
        assert!(results.iter().all(|r| r["loaded"] == true), "{arch}");
        let loom: Vec<f32> = results[0]["logits"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32))
            .collect();
        let mut engine = source.cpu_engine();
        let ours = engine.forward(&prompt, true).unwrap();
        let d = max_diff(&ours, loom.into_iter());
        assert!(d <= 1e-3, "{arch}: Loom's logits differ from ours by {d}");
        let vocab = source.config.vocab;
        let got = greedy(&mut engine, &ours[(prompt.len() - 1) * vocab..], 16, None);
        assert_eq!(
            results[0]["greedy"],
            serde_json::json!(got),
            "{arch}: Loom's greedy ids"
        );
    }
}

/// Our writer lays a model out as the corpus's transformer entity (built from the spec, accepted by Loom's
/// `LoadEntityTransformer`): read and written back with `--q4`, it is the same file, byte for byte (re-baking
/// dequantized Q4_0 values gives the same blocks).
#[test]
fn q4_layout_matches_the_corpus_entity() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/conformance/cases/q4_0_transformer_entity/emulated_q4.entity");
    let original = std::fs::read(&path).unwrap();
    let (ours, _) = LlmModel::open(&path).unwrap().to_entity(true).unwrap();
    let strip = |file: &[u8]| {
        let (mut h, _) = header(file);
        for b in h["blobs"].as_array_mut().unwrap() {
            let b = b.as_object_mut().unwrap();
            b.remove("offset");
            b.remove("length");
        }
        h
    };
    // The header first, as text (key order matters), for a readable failure; then every byte.
    assert_eq!(strip(&ours).to_string(), strip(&original).to_string());
    assert!(ours == original, "same header, different blob bytes");
}
