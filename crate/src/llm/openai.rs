//! OpenAI's Chat Completions shape over a [`super::generate::Session`]: the request read and checked (every field
//! this runtime cannot honour is refused by name, never ignored), and the response, stream chunks and errors
//! written as OpenAI's clients parse them. `loom serve` speaks it over HTTP.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::generate::{GenerateOptions, Generation, StopReason};
use super::sampler::SamplingParams;
use crate::error::LoomError;

/// Most new tokens when a request sets no limit.
pub const DEFAULT_MAX_TOKENS: usize = 1024;

/// A `/v1/chat/completions` request, as far as it is read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<RequestMessage>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<usize>,
    pub max_completion_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub n: Option<usize>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<usize>,
    pub response_format: Option<ResponseFormat>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub user: Option<String>,
    pub logit_bias: Option<Value>,
    pub metadata: Option<Value>,
    pub store: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct RequestMessage {
    pub role: String,
    pub content: Option<Content>,
    pub name: Option<String>,
    pub tool_calls: Option<Value>,
    pub tool_call_id: Option<String>,
}

/// A message's content: text, or parts of which only text ones are read.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Value>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

#[derive(Debug, Deserialize)]
pub struct JsonSchemaFormat {
    pub name: Option<String>,
    pub schema: Option<Value>,
    pub strict: Option<bool>,
    pub description: Option<String>,
}

/// An error as OpenAI's API returns it: an HTTP status and `{"error": {message, type, param, code}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub param: Option<&'static str>,
    /// The package's error code for it ([`LoomError::code`]'s): `invalid_input`, `unsupported`, ….
    pub code: &'static str,
}

impl ApiError {
    pub fn bad(param: Option<&'static str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            param,
            code: "invalid_input",
        }
    }

    pub fn body(&self) -> Value {
        let kind = match self.status {
            400 | 413 | 422 => "invalid_request_error",
            404 => "not_found_error",
            _ => "server_error",
        };
        json!({"error": {"message": self.message, "type": kind, "param": self.param, "code": null}})
    }
}

impl From<LoomError> for ApiError {
    fn from(e: LoomError) -> ApiError {
        let status = match e.code() {
            "invalid_input" | "context_full" | "template" | "unsupported" => 400,
            _ => 500,
        };
        ApiError {
            status,
            message: e.to_string(),
            param: None,
            code: e.code(),
        }
    }
}

/// What a checked request asks of the session.
#[derive(Debug)]
pub struct ChatJob {
    /// The messages as the chat template reads them (transformers' convention: an assistant's `tool_calls` with
    /// their arguments as objects, a tool result's `tool_call_id` and `name`).
    pub messages: Vec<Value>,
    /// The function tools offered, for the template (`None`: no tools, or `tool_choice` "none").
    pub tools: Option<Value>,
    /// Must the reply be a call: `None` (the model chooses), any of the tools, or this one.
    pub must_call: Option<MustCall>,
    /// What `response_format` asks the reply to be (see [`ChatJob::constraint`]).
    pub format: Option<ConstraintText>,
    pub options: GenerateOptions,
    pub stream: bool,
    pub include_usage: bool,
}

/// `tool_choice` "required" or a named function.
#[derive(Debug, Clone, PartialEq)]
pub enum MustCall {
    Any,
    Named(String),
}

/// A function tool of a request: its name and the JSON Schema of its arguments.
#[derive(Debug, Clone)]
struct Tool {
    name: String,
    parameters: Value,
}

/// Reads a request body: malformed JSON, a field of the wrong type or one OpenAI does not define is a 400 naming it.
pub fn parse_chat_request(body: &[u8]) -> std::result::Result<ChatRequest, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(None, format!("the request body: {e}")))
}

impl ChatRequest {
    /// The job, or a 400 for what cannot be honoured: several choices, log-probabilities, penalties, logit biases,
    /// an unknown role, a malformed tool, tool choice or tool message.
    pub fn job(self) -> std::result::Result<ChatJob, ApiError> {
        let unsupported = |param: &'static str, what: &str| {
            Err(ApiError {
                code: "unsupported",
                ..ApiError::bad(Some(param), format!("{param}: {what} is not supported by loom-wasm"))
            })
        };
        if self.n.is_some_and(|n| n != 1) {
            return unsupported("n", "more than one choice");
        }
        let logprobs = match (self.logprobs, self.top_logprobs) {
            (Some(true), Some(n)) if n > MAX_TOP_LOGPROBS => {
                return Err(ApiError::bad(
                    Some("top_logprobs"),
                    format!("top_logprobs: at most {MAX_TOP_LOGPROBS}, got {n}"),
                ))
            }
            (Some(true), n) => Some(n.unwrap_or(0)),
            (_, Some(n)) if n > 0 => {
                return Err(ApiError::bad(
                    Some("top_logprobs"),
                    "top_logprobs: needs logprobs: true",
                ))
            }
            _ => None,
        };
        for (param, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if v.is_some_and(|v| v != 0.0) {
                return unsupported(param, "a penalty other than 0");
            }
        }
        if self
            .logit_bias
            .as_ref()
            .is_some_and(|b| b.as_object().is_some_and(|o| !o.is_empty()))
        {
            return unsupported("logit_bias", "a logit bias");
        }
        let tools = read_tools(self.tools.as_ref())?;
        let must_call = match (&self.tool_choice, tools.is_empty()) {
            (None, _) => None,
            (Some(Value::String(s)), _) if s == "none" || s == "auto" => None,
            (Some(Value::String(s)), false) if s == "required" => Some(MustCall::Any),
            (Some(Value::Object(o)), false) => {
                let name = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
                match name {
                    Some(n) if tools.iter().any(|t| t.name == n) => Some(MustCall::Named(n.to_string())),
                    _ => {
                        return Err(ApiError::bad(
                            Some("tool_choice"),
                            format!("tool_choice: {} names no tool of the request", Value::Object(o.clone())),
                        ))
                    }
                }
            }
            (Some(other), _) => {
                return Err(ApiError::bad(
                    Some("tool_choice"),
                    format!("tool_choice: {other} (with these tools)"),
                ))
            }
        };
        let offer = !tools.is_empty() && self.tool_choice.as_ref().and_then(Value::as_str) != Some("none");
        if self.messages.is_empty() {
            return Err(ApiError::bad(
                Some("messages"),
                "messages: at least one message is needed",
            ));
        }
        let mut messages = Vec::with_capacity(self.messages.len());
        for m in self.messages {
            let role = match m.role.as_str() {
                "system" | "user" | "assistant" | "tool" => m.role,
                // Newer clients send instructions as `developer`: the system role of models that have no other.
                "developer" => "system".into(),
                "function" => return unsupported("messages", "a function message (the deprecated form of tool)"),
                other => {
                    return Err(ApiError::bad(
                        Some("messages"),
                        format!("messages: unknown role {other:?}"),
                    ))
                }
            };
            if role == "tool" && m.tool_call_id.is_none() {
                return Err(ApiError::bad(
                    Some("messages"),
                    "messages: a tool result without tool_call_id",
                ));
            }
            if m.tool_calls.is_some() && role != "assistant" {
                return Err(ApiError::bad(
                    Some("messages"),
                    "messages: tool_calls outside an assistant message",
                ));
            }
            let content = match m.content {
                None => String::new(),
                Some(Content::Text(t)) => t,
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        match (
                            p.get("type").and_then(Value::as_str),
                            p.get("text").and_then(Value::as_str),
                        ) {
                            (Some("text"), Some(t)) => text.push_str(t),
                            (kind, _) => {
                                return Err(ApiError::bad(
                                    Some("messages"),
                                    format!(
                                        "messages: a content part of type {} (only text is read)",
                                        kind.map_or("none".to_string(), |k| format!("{k:?}"))
                                    ),
                                ))
                            }
                        }
                    }
                    text
                }
            };
            let mut message = json!({"role": role, "content": content});
            if let Some(calls) = &m.tool_calls {
                message["tool_calls"] = template_calls(calls)?;
            }
            if let Some(id) = m.tool_call_id {
                message["tool_call_id"] = id.into();
            }
            if let Some(name) = m.name {
                message["name"] = name.into();
            }
            messages.push(message);
        }
        // OpenAI's defaults (temperature 1, top_p 1), and no top-k or min-p: it has neither, so that
        // `temperature` and `top_p` mean what they say. Without a seed each request draws its own.
        let sampling = SamplingParams {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            top_k: 0,
            min_p: 0.0,
            seed: match self.seed {
                Some(seed) => seed as u64,
                None => fresh_seed(),
            },
            ..SamplingParams::default()
        };
        sampling.validate().map_err(|e| ApiError::bad(None, e.to_string()))?;
        let stop_strings = match self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s],
            Some(Stop::Many(v)) if v.len() <= 4 => v,
            Some(Stop::Many(_)) => return Err(ApiError::bad(Some("stop"), "stop: at most 4 sequences")),
        };
        let format = match (&must_call, self.response_format) {
            (None, f) => constraint(f)?,
            (Some(_), None | Some(ResponseFormat::Text)) => None,
            (Some(_), Some(_)) => {
                return Err(ApiError::bad(
                    Some("response_format"),
                    "response_format: a required tool call is its own format",
                ))
            }
        };
        let options = GenerateOptions {
            sampling,
            max_tokens: self
                .max_completion_tokens
                .or(self.max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS),
            stop_strings,
            logprobs,
            ..GenerateOptions::default()
        };
        Ok(ChatJob {
            messages,
            tools: offer.then(|| Value::Array(tools.iter().map(Tool::template).collect())),
            must_call,
            format,
            options,
            stream: self.stream,
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
        })
    }
}

/// A constraint as the grammar engine reads it: its kind (`json_schema`, `json_object`, `regex`, `lark`) and its text
/// (natively `Constraint::parse`; in the browser the grammar module, which the chat module does not link).
#[derive(Debug, Clone, PartialEq, serde::Serialize, ts_rs::TS)]
pub struct ConstraintText {
    #[ts(type = r#""json_schema" | "json_object" | "regex" | "lark""#)]
    pub kind: &'static str,
    pub source: String,
}

impl ConstraintText {
    fn json_schema(schema: &Value) -> ConstraintText {
        ConstraintText {
            kind: "json_schema",
            source: schema.to_string(),
        }
    }

    /// The constraint itself.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn parse(&self) -> crate::Result<super::constrain::Constraint> {
        super::constrain::Constraint::parse(self.kind, &self.source)
            .map_err(|e| LoomError::InvalidInput(format!("constraint: {e}")))
    }
}

fn constraint(f: Option<ResponseFormat>) -> std::result::Result<Option<ConstraintText>, ApiError> {
    Ok(match f {
        None | Some(ResponseFormat::Text) => None,
        Some(ResponseFormat::JsonObject) => Some(ConstraintText {
            kind: "json_object",
            source: String::new(),
        }),
        Some(ResponseFormat::JsonSchema { json_schema }) => match json_schema.schema {
            Some(schema) => Some(ConstraintText::json_schema(&schema)),
            None => {
                return Err(ApiError::bad(
                    Some("response_format"),
                    "response_format: json_schema without a schema",
                ))
            }
        },
    })
}

/// OpenAI's `finish_reason` for how a reply ended.
pub fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        // OpenAI has no reason for a reply cut by a lost device: the text so far is the reply, as for a cancel.
        StopReason::Eos
        | StopReason::StopString
        | StopReason::Complete
        | StopReason::Cancelled
        | StopReason::DeviceLost => "stop",
    }
}

fn usage(g: &Generation) -> Value {
    let (prompt, completion) = (g.prompt_ids.len(), g.ids.len());
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// The most alternatives a token's `top_logprobs` lists (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A token's log-probability and its likeliest alternatives', as OpenAI's `ChatCompletionTokenLogprob` (the bytes
/// are what the token adds to the text; `token` is them as UTF-8, lossily).
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[ts(rename = "ChatTokenLogprob")]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// One of a token's likeliest alternatives.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// A reply's new tokens with their log-probabilities and `top_logprobs` (`None` when not asked for).
pub fn token_logprobs(g: &Generation) -> Option<Vec<TokenLogprob>> {
    let token = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let seen = g.logprobs.as_ref()?;
    Some(
        seen.iter()
            .map(|t| TokenLogprob {
                token: token(&t.bytes),
                logprob: t.logprob,
                bytes: t.bytes.clone(),
                top_logprobs: t
                    .top
                    .iter()
                    .map(|(_, bytes, logprob)| TopLogprob {
                        token: token(bytes),
                        logprob: *logprob,
                        bytes: bytes.clone(),
                    })
                    .collect(),
            })
            .collect(),
    )
}

/// A reply's `logprobs` as OpenAI writes them (`null` when not asked for).
pub fn logprobs_json(g: &Generation) -> Value {
    match token_logprobs(g) {
        Some(content) => json!({"content": content, "refusal": null}),
        None => Value::Null,
    }
}

/// The whole reply as a `chat.completion`.
pub fn completion(id: &str, model: &str, created: u64, g: &Generation) -> Value {
    json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": g.text, "refusal": null},
            "logprobs": logprobs_json(g), "finish_reason": finish_reason(g.stop_reason)}],
        "usage": usage(g),
    })
}

/// One `chat.completion.chunk` of a stream: the first carries the role, the last the finish reason.
pub fn chunk(id: &str, model: &str, created: u64, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    })
}

/// The usage chunk a stream ends with when `stream_options.include_usage` asks for it.
pub fn usage_chunk(id: &str, model: &str, created: u64, g: &Generation) -> Value {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
        "usage": usage(g),
    })
}

/// A seed for a request that names none: the clock's nanoseconds.
fn fresh_seed() -> u64 {
    (super::generate::now_s().fract() * 1e9) as u64 ^ (super::generate::now_s() as u64).rotate_left(32)
}

/// The function tools of a request, checked: each `{"type": "function", "function": {"name", "parameters"?}}` with
/// a name of its own.
fn read_tools(tools: Option<&Value>) -> std::result::Result<Vec<Tool>, ApiError> {
    let bad = |m: String| ApiError::bad(Some("tools"), format!("tools: {m}"));
    let Some(tools) = tools else { return Ok(Vec::new()) };
    let list = tools.as_array().ok_or_else(|| bad("not a list".into()))?;
    let mut out: Vec<Tool> = Vec::with_capacity(list.len());
    for t in list {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(format!("{t} is not a function tool")));
        }
        let f = t.get("function").ok_or_else(|| bad(format!("{t} has no function")))?;
        let name = f.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
        let name = name.ok_or_else(|| bad(format!("{f} has no name")))?.to_string();
        if out.iter().any(|o| o.name == name) {
            return Err(bad(format!("two tools are called {name:?}")));
        }
        let parameters = f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        out.push(Tool { name, parameters });
    }
    Ok(out)
}

impl Tool {
    /// The tool as chat templates take it (OpenAI's shape is transformers' `get_json_schema` shape).
    fn template(&self) -> Value {
        json!({"type": "function", "function": {"name": self.name, "parameters": self.parameters}})
    }
}

/// An assistant's `tool_calls` as chat templates read them: each call's `arguments` an object (transformers'
/// convention), parsed from OpenAI's JSON text.
fn template_calls(calls: &Value) -> std::result::Result<Value, ApiError> {
    let bad = |m: String| ApiError::bad(Some("messages"), format!("messages: tool_calls: {m}"));
    let list = calls.as_array().ok_or_else(|| bad("not a list".into()))?;
    let mut out = Vec::with_capacity(list.len());
    for c in list {
        let f = c.get("function").ok_or_else(|| bad(format!("{c} has no function")))?;
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{f} has no name")))?;
        let arguments = match f.get("arguments") {
            Some(Value::String(text)) => serde_json::from_str::<Value>(text)
                .map_err(|e| bad(format!("the arguments of {name} are not JSON: {e}")))?,
            Some(v) => v.clone(),
            None => json!({}),
        };
        let mut call = json!({"type": "function", "function": {"name": name, "arguments": arguments}});
        if let Some(id) = c.get("id") {
            call["id"] = id.clone();
        }
        out.push(call);
    }
    Ok(Value::Array(out))
}

impl ChatJob {
    /// What the reply must be: a required call ([`call_constraint`]) or the response format's JSON.
    pub fn constraint(&self, tagged: bool) -> Option<ConstraintText> {
        call_constraint(self, tagged).or_else(|| self.format.clone())
    }
}

/// The constraint of a required call: one of the job's tools (or the one it names) as `{"name", "arguments"}` JSON
/// whose arguments follow that tool's schema, inside `<tool_call>` tags when the family writes calls so (`tagged`:
/// Hermes, Qwen).
pub fn call_constraint(job: &ChatJob, tagged: bool) -> Option<ConstraintText> {
    let must = job.must_call.as_ref()?;
    let tools = job.tools.as_ref()?.as_array()?;
    let schemas: Vec<Value> = tools
        .iter()
        .filter_map(|t| {
            let name = t["function"]["name"].as_str()?;
            let wanted = match must {
                MustCall::Any => true,
                MustCall::Named(n) => n == name,
            };
            wanted.then(|| {
                json!({"type": "object", "properties": {"name": {"const": name},
                    "arguments": t["function"]["parameters"]}, "required": ["name", "arguments"],
                    "additionalProperties": false, "x-guidance": {"whitespace_flexible": false}})
            })
        })
        .collect();
    let schema = match schemas.as_slice() {
        [one] => one.clone(),
        _ => json!({"anyOf": schemas, "x-guidance": {"whitespace_flexible": false}}),
    };
    Some(match tagged {
        true => ConstraintText {
            kind: "lark",
            source: format!("start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: %json {schema}\n"),
        },
        false => ConstraintText::json_schema(&schema),
    })
}

/// A function call the model made (`message.tool_calls`), as OpenAI writes one.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
#[ts(rename = "OpenAIToolCall")]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    #[ts(type = r#""function""#)]
    pub kind: &'static str,
    pub function: FunctionCall,
}

/// The function a [`ToolCall`] calls: `arguments` is JSON text.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// The tool calls in a reply: `<tool_call>{…}</tool_call>` blocks (Hermes, Qwen 2.5/3), or a reply that is one
/// `{"name", "arguments" | "parameters"}` object (Llama 3.x); each must name one of `tools`. Returns the text before
/// the first call and the calls, or `None` when the reply is not calls.
pub fn parse_tool_calls(text: &str, tools: &Value, id: &str) -> Option<(String, Vec<ToolCall>)> {
    let known = |name: &str| {
        tools
            .as_array()
            .is_some_and(|a| a.iter().any(|t| t["function"]["name"].as_str() == Some(name)))
    };
    let call = |v: &Value, i: usize| -> Option<ToolCall> {
        let name = v.get("name")?.as_str()?;
        let arguments = v.get("arguments").or_else(|| v.get("parameters"))?;
        let arguments = match arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        known(name).then(|| ToolCall {
            id: format!("call_{id}_{i}"),
            kind: "function",
            function: FunctionCall {
                name: name.to_string(),
                arguments,
            },
        })
    };
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<tool_call>") {
        let body = &rest[start + "<tool_call>".len()..];
        let end = body.find("</tool_call>").unwrap_or(body.len());
        let v: Value = serde_json::from_str(body[..end].trim()).ok()?;
        calls.push(call(&v, calls.len())?);
        rest = body.get(end + "</tool_call>".len()..).unwrap_or("");
    }
    if !calls.is_empty() {
        let before = text[..text.find("<tool_call>").unwrap_or(0)].trim().to_string();
        return Some((before, calls));
    }
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    Some((String::new(), vec![call(&v, 0)?]))
}

/// The reply as a `chat.completion` of tool calls (`content`: the text before them, if any).
pub fn completion_with_calls(
    id: &str,
    model: &str,
    created: u64,
    g: &Generation,
    before: &str,
    calls: &[ToolCall],
) -> Value {
    let content = if before.is_empty() { Value::Null } else { before.into() };
    json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": null,
            "tool_calls": calls}, "logprobs": logprobs_json(g), "finish_reason": "tool_calls"}],
        "usage": usage(g),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_in_each_familys_form() {
        let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]);
        let (before, calls) = parse_tool_calls(
            "Let me see.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            &tools,
            "x",
        )
        .unwrap();
        assert_eq!(before, "Let me see.");
        assert_eq!(calls[0].function.name, "get_weather");
        assert_eq!(calls[0].function.arguments, "{\"city\":\"Paris\"}");
        // Llama 3.x: the whole reply is one call, its arguments as `parameters`.
        let (_, calls) = parse_tool_calls(
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}",
            &tools,
            "y",
        )
        .unwrap();
        assert_eq!(calls[0].function.arguments, "{\"city\":\"Rome\"}");
        // Not calls: plain text, an unknown tool, broken JSON in the tags.
        assert!(parse_tool_calls("Paris is sunny.", &tools, "z").is_none());
        assert!(parse_tool_calls("{\"name\": \"other\", \"arguments\": {}}", &tools, "z").is_none());
        assert!(parse_tool_calls("<tool_call>{\"name\": </tool_call>", &tools, "z").is_none());
    }
}
