//! `loom chat | generate | logits | tokenize | inspect` on real files, against the goldens in `../shared/golden`:
//! with `--json`, stdout is exactly one JSON document.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn smollm2() -> String {
    let p = root().join("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.exists(), "{} is missing: run scripts/setup.sh", p.display());
    p.display().to_string()
}

fn tiny(name: &str) -> String {
    root()
        .join("../shared/golden/tiny-llama")
        .join(name)
        .display()
        .to_string()
}

fn golden(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(root().join("../shared/golden").join(path)).unwrap()).unwrap()
}

fn loom(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loom")).args(args).output().unwrap()
}

/// Runs a command that must succeed and print one JSON document.
fn loom_json(args: &[&str]) -> Value {
    let out = loom(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "loom {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout of {args:?} is not one JSON document ({e}): {:?}", out.stdout))
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[test]
fn chat_json_answers_paris_with_the_templated_prompt() {
    let case = &golden("smollm2/expected.json")["cases"][0];
    let v = loom_json(&[
        "chat",
        &smollm2(),
        "--prompt",
        case["user_message"].as_str().unwrap(),
        "--greedy",
        "--json",
    ]);
    assert_eq!(ids(&v["prompt_ids"]), ids(&case["prompt_ids"]));
    assert!(v["text"].as_str().unwrap().contains("Paris"), "{v}");
    assert!(v["tokens_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["stop_reason"], "eos");
    // A greedy reply draws nothing: no seed.
    assert!(v["seed"].is_null(), "{v}");
}

#[test]
fn generate_and_logits_on_tiny_llama() {
    let expected = golden("tiny-llama/expected.json");
    let set = &expected["weight_sets"]["gguf_q4_0"];
    let prompt: Vec<String> = ids(&expected["prompts"][1]).iter().map(u64::to_string).collect();
    let prompt = prompt.join(",");
    let file = tiny("model.q4_0.gguf");
    let v = loom_json(&[
        "generate",
        &file,
        "--ids",
        &prompt,
        "--greedy",
        "--max-tokens",
        "16",
        "--json",
    ]);
    assert_eq!(ids(&v["ids"]), ids(&set["results"][1]["greedy_ids"]));
    assert_eq!(ids(&v["prompt_ids"]).len(), 7);

    let v = loom_json(&["logits", &file, "--ids", &prompt, "--all-positions", "--json"]);
    let want = set["results"][1]["logits"].as_array().unwrap();
    let got = v["logits"].as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        for (a, b) in g.as_array().unwrap().iter().zip(w.as_array().unwrap()) {
            assert!((a.as_f64().unwrap() - b.as_f64().unwrap()).abs() <= 1e-3);
        }
    }
    let v = loom_json(&["logits", &file, "--ids", &prompt, "--top", "3", "--json"]);
    let top = v["top"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    assert_eq!(
        top[0][0].as_u64(),
        set["results"][1]["argmax"].as_array().unwrap().last().unwrap().as_u64()
    );
}

#[test]
fn logits_of_a_templated_prompt_match_the_reference_top20() {
    let case = &golden("smollm2/expected.json")["cases"][0];
    let v = loom_json(&[
        "logits",
        &smollm2(),
        "--prompt",
        case["user_message"].as_str().unwrap(),
        "--json",
    ]);
    assert_eq!(ids(&v["ids"]), ids(&case["prompt_ids"]));
    let want = case["results"]["gguf_dequant_f32"]["top20_last_prompt_position"]
        .as_array()
        .unwrap();
    let got = v["top"].as_array().unwrap();
    assert_eq!(got.len(), 20);
    for (g, w) in got.iter().zip(want).take(5) {
        assert_eq!(g[0], w[0]);
        assert!((g[1].as_f64().unwrap() - w[1].as_f64().unwrap()).abs() <= 0.01);
    }
}

#[test]
fn tokenize_from_the_gguf_and_from_tokenizer_json() {
    let cases = golden("smollm2/tokenizer_cases.json");
    let case = cases["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["text"].as_str().is_some_and(|t| t.contains("<|im_start|>")))
        .expect("a case with a special token");
    let text = case["text"].as_str().unwrap();
    let tokenizer_json = root().join("models/smollm2-hf/tokenizer.json").display().to_string();
    for source in [smollm2(), tokenizer_json] {
        let v = loom_json(&["tokenize", &source, text, "--json"]);
        assert_eq!(ids(&v["ids"]), ids(&case["ids"]), "{source}");
    }
}

#[test]
fn inspect_says_what_decoder_a_file_holds() {
    let v = loom_json(&["inspect", &smollm2(), "--json"]);
    let llm = &v["llm"];
    assert_eq!(llm["architecture"], "llama");
    assert_eq!((llm["layers"].as_u64(), llm["kv_heads"].as_u64()), (Some(30), Some(3)));
    assert_eq!(llm["quantization"]["Q4_1"], 210);
    assert_eq!(llm["quantization"]["Q8_0"], 1);
    assert_eq!(llm["chat_template"], true);
    let hf = root().join("models/smollm2-hf").display().to_string();
    let v = loom_json(&["inspect", &hf, "--json"]);
    assert_eq!(v["format"], "hf");
    assert_eq!(v["llm"]["quantization"]["F16"], 272);
    assert_eq!(v["llm"]["tied_embeddings"], true);
}

#[test]
fn gpu_device_decodes_and_bad_models_are_clear_errors() {
    let expected = golden("tiny-llama/expected.json");
    let prompt: Vec<String> = ids(&expected["prompts"][2]).iter().map(u64::to_string).collect();
    let model = tiny("model.f16.gguf");
    let args = [
        "generate",
        &model,
        "--ids",
        &prompt.join(","),
        "--greedy",
        "--max-tokens",
        "16",
        "--device",
        "gpu",
        "--json",
    ];
    let want = &expected["weight_sets"]["gguf_f16"]["results"][2]["greedy_ids"];
    let out = loom(&args);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("GPU self-test passed") && stderr.contains("decoding on"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&v["ids"]), ids(want));
    // A kernel made wrong on purpose (the test hook): the self-test names it and the CPU decodes instead.
    let out = Command::new(env!("CARGO_BIN_EXE_loom"))
        .args(args)
        .env("LOOM_TEST_BREAK_GPU_KERNEL", "attention_attend")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("GPU self-test failed: the attention_attend kernel differs")
            && stderr.contains("running on the CPU")
            && !stderr.contains("decoding on"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&v["ids"]), ids(want));

    let out = loom(&["chat", &tiny("expected.json"), "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a model"), "{out:?}");
    let out = loom(&["chat", &tiny("model.f32.gguf"), "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no chat template"),
        "{out:?}"
    );
    let out = loom(&["generate", &tiny("model.f32.gguf"), "--ids", "72", "--temperature=-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("temperature -1"),
        "{out:?}"
    );
}

/// `loom convert` of a GGUF to a `.entity` writes the model's tokenizer beside it (a `.entity` holds none), so the
/// converted file chats as the GGUF does; a different `tokenizer.json` already there is kept (the conversion is
/// refused, nothing written) unless `--force`. Without a tokenizer a `.entity` still generates from ids.
#[test]
fn convert_keeps_the_tokenizer_and_ids_need_none() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_convert_tokenizer");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let gguf = tiny("model.f32.gguf");
    let entity = dir.join("t.entity").display().to_string();
    let out = loom(&["convert", &gguf, &entity]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("tokenizer.json beside it"),
        "{out:?}"
    );
    for name in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        assert!(dir.join(name).exists(), "{name}");
    }
    let run = |model: &str| {
        loom_json(&[
            "generate",
            model,
            "--prompt",
            "Hello",
            "--raw",
            "--greedy",
            "--max-tokens",
            "6",
            "--json",
        ])
    };
    let (a, b) = (run(&gguf), run(&entity));
    assert_eq!(
        (&a["prompt_ids"], &a["ids"], &a["text"]),
        (&b["prompt_ids"], &b["ids"], &b["text"])
    );

    // Another tokenizer.json beside the output is the user's: kept, and nothing is written.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("tokenizer.json"), "{}").unwrap();
    let out = loom(&["convert", &gguf, &other.join("t.entity").display().to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"), "{out:?}");
    assert_eq!(std::fs::read(other.join("tokenizer.json")).unwrap(), b"{}");
    assert!(!other.join("t.entity").exists());

    // The .entity alone: ids in, ids out; text asks for the tokenizer by name.
    let alone = dir.join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    std::fs::copy(dir.join("t.entity"), alone.join("t.entity")).unwrap();
    let alone = alone.join("t.entity").display().to_string();
    let ids_run = |model: &str| {
        loom_json(&[
            "generate",
            model,
            "--ids",
            "72,101,108",
            "--greedy",
            "--max-tokens",
            "4",
            "--json",
        ])
    };
    assert_eq!(ids_run(&alone)["ids"], ids_run(&gguf)["ids"]);
    let out = loom(&[
        "generate",
        &alone,
        "--ids",
        "72,101,108",
        "--greedy",
        "--max-tokens",
        "4",
    ]);
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let want: Vec<String> = ids(&ids_run(&gguf)["ids"]).iter().map(u64::to_string).collect();
    assert_eq!(printed, want.join(","));
    let out = loom(&["generate", &alone, "--prompt", "Hello"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no tokenizer"),
        "{out:?}"
    );
}

/// A reply cut by --max-tokens never ends with half a character: the bytes of one the cut left unfinished stay in
/// the ids, not in the text (the tiny model's first tokens here are single bytes that form no character yet).
#[test]
fn a_cut_reply_ends_on_a_whole_character() {
    for n in 1..=4 {
        let v = loom_json(&[
            "generate",
            &tiny("model.f32.gguf"),
            "--prompt",
            "Hello",
            "--raw",
            "--greedy",
            "--max-tokens",
            &n.to_string(),
            "--json",
        ]);
        assert_eq!(v["stop_reason"], "max_tokens");
        assert!(!v["text"].as_str().unwrap().ends_with('\u{FFFD}'), "{n} tokens: {v}");
    }
}

/// The CLI says what it does: `--help` names chat; `inspect` says whether a GGUF's decoder runs, and why not.
#[test]
fn help_and_inspect_say_what_runs() {
    let out = loom(&["--help"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap()
            .contains("chat"),
        "{out:?}"
    );
    let unsupported = root().join("testdata/families/unsupported.gguf").display().to_string();
    let out = loom(&["inspect", &unsupported]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("runs: no: unsupported: GGUF architecture \"phi2\""),
        "{out:?}"
    );
    let out = loom(&["inspect", &tiny("model.q4_0.gguf")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("runs: yes"), "{out:?}");
}
