//! `loom serve` as OpenAI's own Python client (PyPI `openai`) sees it, on the real SmolLM2-135M-Instruct: a reply
//! and a streamed reply (the same greedy text), a JSON Schema reply that PyPI `jsonschema` finds valid, OpenAI-style
//! errors (400 for what cannot be honoured, 413 for an oversized body) after which the server keeps serving, a
//! client that hangs up mid-stream ending its reply, and tool calls (required, named and streamed, then their
//! results sent back) whose arguments `jsonschema` finds valid.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `loom serve MODEL --port 0` and the address its first line names.
fn serve() -> (Server, String) {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "{} is missing: run scripts/setup.sh", model.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_loom"))
        .args(["serve", model.to_str().unwrap(), "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    (Server(child), url)
}

const CLIENT: &str = r#"
import json, sys, threading
import http.client, urllib.parse
import jsonschema, openai
url = sys.argv[1]
host = urllib.parse.urlparse(url)
client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
out = {}
msgs = [{"role": "user", "content": "What is the capital of France?"}]
r = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=24)
out["text"] = r.choices[0].message.content
out["finish"] = r.choices[0].finish_reason
out["usage"] = [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens]
pieces, finish, usage = [], None, None
for c in client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=24, stream=True,
                                        stream_options={"include_usage": True}):
    if c.usage:
        usage = c.usage.completion_tokens
    for ch in c.choices:
        if ch.delta.content:
            pieces.append(ch.delta.content)
        finish = ch.finish_reason or finish
out["streamed"] = "".join(pieces)
out["pieces"] = len(pieces)
out["stream_finish"] = finish
out["stream_usage"] = usage
schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
          "population": {"type": "integer", "minimum": 0, "maximum": 99999999}},
          "required": ["city", "population"], "additionalProperties": False}
r = client.chat.completions.create(model="m", temperature=0, max_tokens=60,
    messages=[{"role": "user", "content": "The biggest city of Japan, as JSON."}],
    response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}})
value = json.loads(r.choices[0].message.content)
jsonschema.validate(value, schema)
out["schema_ok"] = True
errors = []
for kwargs in [dict(messages=[{"role": "wizard", "content": "x"}]),
               dict(messages=msgs, n=2),
               dict(messages=msgs, response_format={"type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "object", "minLenght": 3}}})]:
    try:
        client.chat.completions.create(model="m", **kwargs)
        errors.append("accepted")
    except openai.BadRequestError as e:
        errors.append([e.status_code, e.body.get("message", "") if isinstance(e.body, dict) else str(e.body)])
out["errors"] = errors
def post(body):
    c = http.client.HTTPConnection(host.hostname, host.port, timeout=120)
    c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    return c, c.getresponse()
c, r = post(b'{"messages": [' + b' ' * (5 << 20) + b']}')
out["oversized"] = r.status
c.close()
# A client that hangs up after the first content piece: the next request is answered at once.
c, r = post(json.dumps({"messages": msgs, "stream": True, "max_tokens": 400, "temperature": 1.0,
                        "seed": 1}).encode())
while True:
    line = r.readline().decode()
    if not line or ('"content":"' in line and '"content":""' not in line):
        break
c.close()
r = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=24)
out["after_hangup"] = r.choices[0].message.content
# Tools: a required call is a call of a tool of the request whose arguments its schema accepts, streamed or not;
# the call and its result then go back as messages, and the model answers.
weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
           "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": False}
tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather now.",
                                           "parameters": weather}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
          "properties": {"zone": {"type": "string", "maxLength": 24}}, "required": ["zone"]}}}]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
r = client.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="required", temperature=0,
                                   max_tokens=80)
call = r.choices[0].message.tool_calls[0]
args = json.loads(call.function.arguments)
jsonschema.validate(args, weather if call.function.name == "get_weather" else tools[1]["function"]["parameters"])
out["required"] = [r.choices[0].finish_reason, call.function.name in ("get_weather", "get_time")]
named = []
for c in client.chat.completions.create(model="m", messages=ask, tools=tools, temperature=0, max_tokens=80,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True):
    for ch in c.choices:
        for tc in ch.delta.tool_calls or []:
            named.append([tc.function.name, tc.function.arguments])
        if ch.finish_reason:
            named.append(ch.finish_reason)
jsonschema.validate(json.loads(named[0][1]), weather)
out["named_stream"] = [named[0][0], named[-1]]
follow = ask + [{"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}}]},
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})}]
r = client.chat.completions.create(model="m", messages=follow, tools=tools, temperature=0, max_tokens=30)
out["after_tool"] = [r.choices[0].finish_reason in ("stop", "length", "tool_calls")]
for kwargs in [dict(messages=ask, tools=tools, tool_choice={"type": "function", "function": {"name": "nope"}}),
               dict(messages=[{"role": "tool", "content": "21"}]),
               dict(messages=ask, tools=[{"type": "function", "function": {"description": "no name"}}])]:
    try:
        client.chat.completions.create(model="m", **kwargs)
        errors.append("accepted")
    except openai.BadRequestError as e:
        errors.append([e.status_code, e.body.get("message", "") if isinstance(e.body, dict) else str(e.body)])
out["models"] = [m.id for m in client.models.list().data]
print(json.dumps(out))
"#;

#[test]
fn the_openai_python_client_against_loom_serve() {
    let (_server, url) = serve();
    let out = Command::new("python3").args(["-c", CLIENT, &url]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["text"].as_str().unwrap().contains("Paris"), "{v}");
    assert_eq!(v["finish"], "stop");
    let usage: Vec<u64> = v["usage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(usage[0] + usage[1], usage[2]);
    // Greedy: the stream hands out, piece by piece, exactly the non-streamed text.
    assert_eq!(v["streamed"], v["text"]);
    assert!(v["pieces"].as_u64().unwrap() > 1);
    assert_eq!(
        (&v["stream_finish"], v["stream_usage"].as_u64()),
        (&v["finish"], Some(usage[1]))
    );
    assert_eq!(v["schema_ok"], true);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 6, "{v}");
    for (e, says) in errors.iter().zip([
        "unknown role",
        "n:",
        "minLenght",
        "names no tool",
        "tool_call_id",
        "no name",
    ]) {
        assert_eq!(e[0], 400, "{e}");
        assert!(e[1].as_str().unwrap().contains(says), "{says}: {e}");
    }
    assert_eq!(v["oversized"], 413);
    assert_eq!(v["after_hangup"], v["text"]);
    assert_eq!(v["models"], serde_json::json!(["SmolLM2-135M-Instruct.Q4_1.gguf"]));
    assert_eq!(v["required"], serde_json::json!(["tool_calls", true]));
    assert_eq!(v["named_stream"], serde_json::json!(["get_weather", "tool_calls"]));
    assert_eq!(v["after_tool"], serde_json::json!([true]));
}

const LOGPROBS_CLIENT: &str = r#"
import json, sys
import openai
client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none", max_retries=0)
msgs = [{"role": "user", "content": sys.argv[2]}]
r = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=16, logprobs=True,
                                   top_logprobs=5)
content = r.choices[0].logprobs.content
out = {"text": r.choices[0].message.content, "completion_tokens": r.usage.completion_tokens,
       "tokens": [[t.token, t.logprob, t.bytes, [[a.token, a.logprob, a.bytes] for a in t.top_logprobs]]
                  for t in content]}
r = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=16)
out["plain_logprobs"] = r.choices[0].logprobs
streamed = []
for c in client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=16, logprobs=True,
                                        top_logprobs=5, stream=True):
    for ch in c.choices:
        if ch.logprobs and ch.logprobs.content:
            streamed += [[t.token, t.logprob, t.bytes, [[a.token, a.logprob, a.bytes] for a in t.top_logprobs]]
                         for t in ch.logprobs.content]
out["streamed"] = streamed
errors = []
for kwargs in [dict(top_logprobs=3), dict(logprobs=True, top_logprobs=21)]:
    try:
        client.chat.completions.create(model="m", messages=msgs, max_tokens=4, **kwargs)
        errors.append("accepted")
    except openai.BadRequestError as e:
        errors.append([e.status_code, e.body.get("message", "") if isinstance(e.body, dict) else str(e.body)])
out["errors"] = errors
print(json.dumps(out))
"#;

/// `logprobs` through OpenAI's Python client: each token of the greedy reply to a golden prompt with its
/// log-probability and top 5. Against the reference (`../shared/golden/smollm2`, llama_ref's logits, not ours): the
/// first token's top 5 are the reference's top 5 in order, their log-probability differences are its logit
/// differences (the normalisation cancels), and the tokens are its greedy reply; streamed, the same. What cannot be
/// honoured is a 400.
#[test]
fn logprobs_are_the_models_through_the_openai_client() {
    let golden: serde_json::Value = serde_json::from_slice(
        &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/golden/smollm2/expected.json"))
            .unwrap(),
    )
    .unwrap();
    let case = &golden["cases"][0];
    let reference = &case["results"]["gguf_dequant_f32"];
    let (_server, url) = serve();
    let question = case["user_message"].as_str().unwrap();
    let out = Command::new("python3")
        .args(["-c", LOGPROBS_CLIENT, &url, question])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let model = loom_wasm::llm::model::LlmModel::open(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    )
    .unwrap();
    let tokenizer = model.tokenizer.as_ref().unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let bytes = |v: &serde_json::Value| -> Vec<u8> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u8)
            .collect()
    };

    // The reply's tokens are the reference's greedy ids, and spell its text.
    let tokens = v["tokens"].as_array().unwrap();
    let greedy = ids(&reference["greedy_ids"]);
    assert_eq!(tokens.len(), greedy.len());
    assert_eq!(v["completion_tokens"].as_u64().unwrap() as usize, greedy.len());
    for (t, want) in tokens.iter().zip(tokenizer.bytes_of(&greedy)) {
        assert_eq!(bytes(&t[2]), want, "{t}");
        let top = t[3].as_array().unwrap();
        assert_eq!(top.len(), 5);
        // Greedy: the token is the likeliest, alternatives most likely first, all below 0, together at most 1.
        assert_eq!((&t[0], &t[1]), (&top[0][0], &top[0][1]), "{t}");
        let lps: Vec<f64> = top.iter().map(|a| a[1].as_f64().unwrap()).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]) && lps[0] <= 0.0, "{t}");
        assert!(lps.iter().map(|l| l.exp()).sum::<f64>() <= 1.0 + 1e-6, "{t}");
    }
    let joined: String = tokens.iter().map(|t| t[0].as_str().unwrap()).collect();
    assert_eq!(joined, v["text"].as_str().unwrap());
    // The first token's top 5 against the reference's logits at the last prompt position: the same ids in the same
    // order (its margins are 0.08 and more), and the same differences within twice the golden bound of 0.01.
    let top20 = reference["top20_last_prompt_position"].as_array().unwrap();
    let want_ids: Vec<u32> = top20[..5].iter().map(|p| p[0].as_u64().unwrap() as u32).collect();
    let first = tokens[0][3].as_array().unwrap();
    for ((a, want), pair) in first.iter().zip(tokenizer.bytes_of(&want_ids)).zip(top20) {
        assert_eq!(bytes(&a[2]), want, "{a}");
        let ours = a[1].as_f64().unwrap() - first[0][1].as_f64().unwrap();
        let theirs = pair[1].as_f64().unwrap() - top20[0][1].as_f64().unwrap();
        assert!((ours - theirs).abs() <= 0.02, "{a}: {ours} against {theirs}");
    }
    assert_eq!(v["plain_logprobs"], serde_json::Value::Null);
    // Streamed, the same tokens and alternatives with the same log-probabilities (with the last chunk), within the
    // golden bound: this request reuses the cache of the last, whose prompt ran in another split of prefill steps.
    let streamed = v["streamed"].as_array().unwrap();
    assert_eq!(streamed.len(), tokens.len());
    let close =
        |a: &serde_json::Value, b: &serde_json::Value| (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() <= 0.01;
    for (s, t) in streamed.iter().zip(tokens) {
        assert_eq!((&s[0], &s[2]), (&t[0], &t[2]), "{s}");
        assert!(close(&s[1], &t[1]), "{s} against {t}");
        for (a, b) in s[3].as_array().unwrap().iter().zip(t[3].as_array().unwrap()) {
            assert_eq!((&a[0], &a[2]), (&b[0], &b[2]), "{s}");
            assert!(close(&a[1], &b[1]), "{a} against {b}");
        }
    }
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2);
    for (e, says) in errors.iter().zip(["needs logprobs", "at most 20"]) {
        assert_eq!(e[0], 400, "{e}");
        assert!(e[1].as_str().unwrap().contains(says), "{says}: {e}");
    }
}
