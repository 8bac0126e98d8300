//! Saved chats (`llm::saved`): a KV cache saved on one engine and restored on a fresh one (the CPU or the GPU on
//! lavapipe, either way) goes on to the logits of the references in `../shared/golden` (tiny-llama) and
//! `testdata/gemma3` (sliding windows) at the positions after the cut; a SmolLM2 chat saved and restored replies as
//! the uninterrupted one does without computing its cached prompt again; damaged, forged and foreign states are
//! refused with typed errors and change nothing.

mod llm_util;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use llm_util::{golden, ids, json, smollm2, tiny_expected, CASES_ABS, CASES_REL, TINY_CPU_BLOCKS, TINY_GPU};
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::generate::{GenerateOptions, Session};
use loom_wasm::llm::gpu_engine::GpuEngine;
use loom_wasm::llm::model::LlmModel;
use loom_wasm::llm::sampler::SamplingParams;
use loom_wasm::llm::saved::{Fingerprint, SavedChat};
use loom_wasm::LoomError;
use serde_json::{json, Value};

fn gpu_engine(model: &LlmModel) -> Box<dyn Engine> {
    static GPU: OnceLock<Arc<loom_wasm::gpu::Gpu>> = OnceLock::new();
    let gpu = GPU.get_or_init(|| Arc::new(pollster::block_on(loom_wasm::gpu::Gpu::new()).expect("a wgpu adapter")));
    Box::new(pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Device {
    Cpu,
    Gpu,
}

fn engine(model: &LlmModel, d: Device) -> Box<dyn Engine> {
    match d {
        Device::Cpu => Box::new(model.cpu_engine()),
        Device::Gpu => gpu_engine(model),
    }
}

fn fingerprint(model: &LlmModel) -> String {
    let mut f = Fingerprint::new(&model.config);
    for m in model.weights.matrices() {
        f.matrix(m);
    }
    f.finish()
}

/// Runs `ids[..cut]` on a `from` engine, saves its cache through the bytes, restores them on a fresh `to` engine and
/// returns its logits of `ids[cut..]` at every position.
fn logits_after_restore(model: &LlmModel, ids: &[u32], cut: usize, from: Device, to: Device) -> Vec<f32> {
    let mut a = engine(model, from);
    a.forward(&ids[..cut], false).unwrap();
    let fp = fingerprint(model);
    let saved = SavedChat::new(
        fp.clone(),
        vec![],
        ids[..cut].to_vec(),
        a.kv_rows().unwrap(),
        Value::Null,
    );
    let bytes = saved.encode(&model.config).unwrap();
    let read = SavedChat::decode(&bytes).unwrap();
    let mut b = engine(model, to);
    read.check(&fp, b.config(), b.config().context).unwrap();
    b.set_kv_rows(read.kv).unwrap();
    assert_eq!(b.cached(), cut);
    b.forward(&ids[cut..], true).unwrap()
}

const PAIRS: [(Device, Device); 4] = [
    (Device::Cpu, Device::Cpu),
    (Device::Cpu, Device::Gpu),
    (Device::Gpu, Device::Cpu),
    (Device::Gpu, Device::Gpu),
];

/// tiny-llama (Q4_0): cut anywhere in the longest prompt, saved on either engine, restored on either: the logits
/// after the cut are the golden ones, within the restoring engine's bound.
#[test]
fn tiny_llama_goes_on_from_a_restored_cache_on_either_engine() {
    let (expected, prompts) = tiny_expected();
    let set = &expected["weight_sets"]["gguf_q4_0"];
    let model = LlmModel::open(&golden().join("tiny-llama/model.q4_0.gguf")).unwrap();
    let vocab = model.config.vocab;
    let p = prompts.len() - 1;
    let prompt = &prompts[p];
    let want = set["results"][p]["logits"].as_array().unwrap();
    for cut in [1, prompt.len() / 2, prompt.len() - 1] {
        for (from, to) in PAIRS {
            let got = logits_after_restore(&model, prompt, cut, from, to);
            let tol = if to == Device::Gpu { TINY_GPU } else { TINY_CPU_BLOCKS };
            for (i, row) in want[cut..].iter().enumerate() {
                for (t, w) in row.as_array().unwrap().iter().enumerate() {
                    let (g, w) = (got[i * vocab + t], w.as_f64().unwrap() as f32);
                    assert!(
                        (g - w).abs() <= tol,
                        "cut {cut}, {from:?} → {to:?}, position {}, token {t}: {g} against {w}",
                        cut + i
                    );
                }
            }
        }
    }
}

fn gemma3_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/gemma3")
}

/// The tiny Gemma 3 (windows of 4 positions on two of its three layers): the longest case cut at several places
/// and restored across engines meets the transformers-following reference after the cut.
#[test]
fn gemma3_windows_go_on_from_a_restored_cache() {
    let expected = json(&gemma3_dir().join("expected.json"));
    let model = LlmModel::open(&gemma3_dir().join("model.f32.gguf")).unwrap();
    let vocab = model.config.vocab;
    let case = expected["cases"].as_array().unwrap().last().unwrap();
    let prompt = ids(&case["ids"]);
    assert!(prompt.len() > 8, "a case longer than the window");
    let want = case["logits"].as_array().unwrap();
    for cut in [3, 6, prompt.len() - 1] {
        for (from, to) in PAIRS {
            let got = logits_after_restore(&model, &prompt, cut, from, to);
            for (i, row) in want[cut..].iter().enumerate() {
                for (t, w) in row.as_array().unwrap().iter().enumerate() {
                    let (g, w) = (got[i * vocab + t], w.as_f64().unwrap() as f32);
                    assert!(
                        (g - w).abs() <= 1e-3 + 1e-4 * w.abs(),
                        "cut {cut}, {from:?} → {to:?}, position {}, token {t}: {g} against {w}",
                        cut + i
                    );
                }
            }
        }
    }
}

/// Long past the window (the CPU cache has dropped a windowed layer's old rows, the GPU's ring has wrapped): a
/// cache saved after 150 positions and restored on a fresh engine of either kind gives the next positions' logits
/// of the uninterrupted run.
#[test]
fn windowed_caches_restore_after_trimming_and_wrapping() {
    let model = LlmModel::open(&gemma3_dir().join("model.f32.gguf")).unwrap();
    let ids: Vec<u32> = (0..160).map(|i| (11 + 37 * i) % model.config.vocab as u32).collect();
    let cut = 150;
    for d in [Device::Cpu, Device::Gpu] {
        let whole = engine(&model, d).forward(&ids, true).unwrap();
        let tail = &whole[cut * model.config.vocab..];
        for (from, to) in PAIRS.into_iter().filter(|(_, to)| *to == d) {
            let got = logits_after_restore(&model, &ids, cut, from, to);
            for (i, (g, w)) in got.iter().zip(tail).enumerate() {
                assert!(
                    (g - w).abs() <= CASES_ABS + CASES_REL * w.abs(),
                    "{from:?} → {to:?}, position {}: {g} against {w}",
                    cut + i / model.config.vocab
                );
            }
        }
    }
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens,
        ..GenerateOptions::default()
    }
}

/// A SmolLM2 conversation saved after its first turn and restored in a new session replies to the second turn
/// with the ids of the uninterrupted session and of a session that computes the whole conversation afresh, having
/// computed only the new message; the messages and the caller's meta come back as saved.
#[test]
fn a_restored_chat_replies_as_the_uninterrupted_one() {
    let model = smollm2();
    let mut first = Session::new(model, Box::new(model.cpu_engine())).unwrap();
    let question = &json(&golden().join("smollm2/expected.json"))["cases"][0]["user_message"];
    first
        .chat(question.as_str().unwrap(), &greedy(24), true, &mut |_| true)
        .unwrap();
    let meta = json!({"temperature": 0.7, "name": "SmolLM2 ✓", "n": 12345678901234567890u64});
    let bytes = first.save(meta.clone()).unwrap();
    let saved_history = first.conversation.history.clone();
    let uninterrupted = first.chat("And of Italy?", &greedy(24), true, &mut |_| true).unwrap();

    let mut restored = Session::new(model, Box::new(model.cpu_engine())).unwrap();
    assert_eq!(restored.restore(&bytes).unwrap(), meta);
    assert_eq!(restored.conversation.history, saved_history);
    let cached = restored.engine().cached();
    assert!(cached > 40, "the first turn's prompt and reply are cached: {cached}");
    let reply = restored
        .chat("And of Italy?", &greedy(24), true, &mut |_| true)
        .unwrap();
    assert_eq!(reply.ids, uninterrupted.ids);
    assert_eq!(reply.text, uninterrupted.text);
    assert_eq!(reply.reused_tokens, uninterrupted.reused_tokens);
    assert!(
        reply.reused_tokens + 1 >= cached,
        "the restored cache is used, not computed again"
    );

    let mut afresh = Session::new(model, Box::new(model.cpu_engine())).unwrap();
    afresh.conversation.history = saved_history;
    let fresh = afresh.chat("And of Italy?", &greedy(24), true, &mut |_| true).unwrap();
    assert_eq!(fresh.reused_tokens, 0);
    assert_eq!(reply.ids, fresh.ids);
}

/// The error of restoring `bytes` on `s`, which must leave the session's conversation and cache as they were.
fn refused(s: &mut Session, bytes: &[u8]) -> LoomError {
    let history = s.conversation.history.clone();
    let cached = s.engine().cached();
    let e = s.restore(bytes).expect_err("refused");
    assert_eq!(s.conversation.history, history, "{e}");
    assert_eq!(s.engine().cached(), cached, "{e}");
    e
}

/// Damaged bytes (cut anywhere, any byte changed), a forged header under a valid checksum and another model's
/// chat are typed errors that change nothing, and the session still replies as before.
#[test]
fn damaged_forged_and_foreign_chats_are_refused() {
    let tiny = |t: &str| LlmModel::open(&golden().join(format!("tiny-llama/model.{t}.gguf"))).unwrap();
    let (q4, q8) = (tiny("q4_0"), tiny("q8_0"));
    let (_, prompts) = tiny_expected();
    let mut s = Session::new(&q4, Box::new(q4.cpu_engine())).unwrap();
    let reply = |s: &mut Session| s.generate(&prompts[2], &greedy(8), &mut |_| true).unwrap().ids;
    let before = reply(&mut s);
    let bytes = s.save(json!({"k": 1})).unwrap();
    assert!(s.engine().cached() > 0);

    // Cut short anywhere (in the magic, the header, the rows, the checksum).
    let header_end = 16 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut cuts: Vec<usize> = (0..bytes.len()).step_by(997).collect();
    cuts.extend([
        0,
        7,
        8,
        12,
        15,
        16,
        header_end - 1,
        header_end,
        header_end + 3,
        bytes.len() - 32,
        bytes.len() - 1,
    ]);
    for cut in cuts {
        let e = refused(&mut s, &bytes[..cut]);
        assert_eq!(e.code(), "bad_format", "cut at {cut}: {e}");
    }
    // Any changed byte.
    for at in (0..bytes.len())
        .step_by(501)
        .chain([9, 13, header_end, bytes.len() - 1])
    {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        let e = refused(&mut s, &b);
        assert!(["bad_format", "unsupported"].contains(&e.code()), "byte {at}: {e}");
    }
    // A header that lies under a valid checksum: more positions than ids, rows the header does not account for,
    // a layer keeping nothing the next position reads, a vast cache, ids past the vocabulary, unknown fields.
    let header: Value = serde_json::from_slice(&bytes[16..header_end]).unwrap();
    let rows = &bytes[header_end..bytes.len() - 32];
    let forge = |edit: &dyn Fn(&mut Value)| {
        let mut h = header.clone();
        edit(&mut h);
        let h = serde_json::to_vec(&h).unwrap();
        let mut out = bytes[..12].to_vec();
        out.extend_from_slice(&(h.len() as u32).to_le_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(rows);
        use sha2::Digest;
        let digest = sha2::Sha256::digest(&out);
        out.extend_from_slice(&digest);
        out
    };
    let len = header["len"].as_u64().unwrap();
    type Edit = Box<dyn Fn(&mut Value)>;
    let forged: [(&str, Edit); 7] = [
        ("more positions", Box::new(move |h| h["len"] = json!(len + 1))),
        ("vast cache", Box::new(|h| h["len"] = json!(u64::MAX / 2))),
        ("vast rows", Box::new(|h| h["kv_dim"] = json!(1u64 << 60))),
        (
            "a layer from past the end",
            Box::new(move |h| h["from"][0] = json!(len + 5)),
        ),
        ("a layer missing rows", Box::new(|h| h["from"][1] = json!(1))),
        (
            "an id past the vocabulary",
            Box::new(|h| h["cached"][0] = json!(1_000_000)),
        ),
        ("an unknown field", Box::new(|h| h["extra"] = json!(true))),
    ];
    for (what, edit) in &forged {
        let e = refused(&mut s, &forge(edit.as_ref()));
        assert_eq!(e.code(), "bad_format", "{what}: {e}");
    }
    // The forger's own bytes pass: the refusals above are the edits'.
    let mut t = Session::new(&q4, Box::new(q4.cpu_engine())).unwrap();
    t.restore(&forge(&|_| {})).unwrap();

    // Another model: the same shape with other weights, and another shape.
    let mut other = Session::new(&q8, Box::new(q8.cpu_engine())).unwrap();
    let e = refused(&mut other, &bytes);
    assert_eq!(e.code(), "model_mismatch", "{e}");
    assert!(e.to_string().contains("other weights"), "{e}");
    let smol = smollm2();
    let mut other = Session::new(smol, Box::new(smol.cpu_engine())).unwrap();
    let e = refused(&mut other, &bytes);
    assert_eq!(e.code(), "model_mismatch", "{e}");

    // Nothing above touched the session.
    assert_eq!(reply(&mut s), before);
}

/// A chat saved on the GPU engine restores on the CPU engine and back, and goes on with the same greedy ids.
#[test]
fn a_chat_moves_between_engines() {
    let model = LlmModel::open(&golden().join("tiny-llama/model.q4_0.gguf")).unwrap();
    let (expected, prompts) = tiny_expected();
    let want = ids(&expected["weight_sets"]["gguf_q4_0"]["results"][2]["greedy_ids"]);
    let prompt = &prompts[2];
    for (from, to) in PAIRS {
        let mut a = Session::new(&model, engine(&model, from)).unwrap();
        a.generate(&prompt[..prompt.len() - 4], &greedy(1), &mut |_| true)
            .unwrap();
        let bytes = a.save(Value::Null).unwrap();
        let mut b = Session::new(&model, engine(&model, to)).unwrap();
        b.restore(&bytes).unwrap();
        let g = b.generate(prompt, &greedy(want.len()), &mut |_| true).unwrap();
        assert_eq!(g.reused_tokens, prompt.len() - 4, "{from:?} → {to:?}");
        assert_eq!(g.ids, want, "{from:?} → {to:?}");
    }
}
