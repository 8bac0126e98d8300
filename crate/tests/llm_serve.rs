//! `loom serve` as OpenAI's own Python client (PyPI `openai`) sees it, on the real SmolLM2-135M-Instruct: a reply
//! and a streamed reply (the same greedy text), a JSON Schema reply that PyPI `jsonschema` finds valid, OpenAI-style
//! errors (400 for what cannot be honoured, 413 for an oversized body) after which the server keeps serving, and a
//! client that hangs up mid-stream ending its reply.

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
    for (e, says) in errors.iter().zip(["unknown role", "n:", "minLenght"]) {
        assert_eq!(e[0], 400, "{e}");
        assert!(e[1].as_str().unwrap().contains(says), "{says}: {e}");
    }
    assert_eq!(v["oversized"], 413);
    assert_eq!(v["after_hangup"], v["text"]);
    assert_eq!(v["models"], serde_json::json!(["SmolLM2-135M-Instruct.Q4_1.gguf"]));
}
