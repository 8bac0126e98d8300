//! OpenAI's Chat Completions shape over a [`super::generate::Session`]: the request read and checked (every field
//! this runtime cannot honour is refused by name, never ignored), and the response, stream chunks and errors
//! written as OpenAI's clients parse them. `loom serve` speaks it over HTTP.

use serde::Deserialize;
use serde_json::{json, Value};

use super::generate::{GenerateOptions, Generation, StopReason};
use super::sampler::SamplingParams;
use super::template::ChatMessage;
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
}

impl ApiError {
    pub fn bad(param: Option<&'static str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            param,
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
        }
    }
}

/// What a checked request asks of the session.
#[derive(Debug)]
pub struct ChatJob {
    pub messages: Vec<ChatMessage>,
    pub options: GenerateOptions,
    pub stream: bool,
    pub include_usage: bool,
}

/// Reads a request body: malformed JSON, a field of the wrong type or one OpenAI does not define is a 400 naming it.
pub fn parse_chat_request(body: &[u8]) -> std::result::Result<ChatRequest, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(None, format!("the request body: {e}")))
}

impl ChatRequest {
    /// The job, or a 400 for what cannot be honoured: several choices, log-probabilities, penalties, logit biases,
    /// tools (not yet), unknown roles, tool results.
    pub fn job(self) -> std::result::Result<ChatJob, ApiError> {
        let unsupported = |param: &'static str, what: &str| {
            Err(ApiError::bad(
                Some(param),
                format!("{param}: {what} is not supported by this server"),
            ))
        };
        if self.n.is_some_and(|n| n != 1) {
            return unsupported("n", "more than one choice");
        }
        if self.logprobs == Some(true) || self.top_logprobs.is_some_and(|n| n > 0) {
            return unsupported("logprobs", "log-probabilities");
        }
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
        if self
            .tools
            .as_ref()
            .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
        {
            return unsupported("tools", "tool calling");
        }
        if self.messages.is_empty() {
            return Err(ApiError::bad(
                Some("messages"),
                "messages: at least one message is needed",
            ));
        }
        let mut messages = Vec::with_capacity(self.messages.len());
        for m in self.messages {
            let role = match m.role.as_str() {
                "system" | "user" | "assistant" => m.role,
                // Newer clients send instructions as `developer`: the system role of models that have no other.
                "developer" => "system".into(),
                "tool" | "function" => return unsupported("messages", "a tool result"),
                other => {
                    return Err(ApiError::bad(
                        Some("messages"),
                        format!("messages: unknown role {other:?}"),
                    ))
                }
            };
            if m.tool_calls.is_some() || m.tool_call_id.is_some() {
                return unsupported("messages", "a tool call in a message");
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
                                    format!("messages: a content part of type {kind:?} (only text is read)"),
                                ))
                            }
                        }
                    }
                    text
                }
            };
            messages.push(ChatMessage { role, content });
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
        let options = GenerateOptions {
            sampling,
            max_tokens: self
                .max_completion_tokens
                .or(self.max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS),
            stop_strings,
            #[cfg(not(target_arch = "wasm32"))]
            constraint: constraint(self.response_format)?,
            ..GenerateOptions::default()
        };
        Ok(ChatJob {
            messages,
            options,
            stream: self.stream,
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn constraint(f: Option<ResponseFormat>) -> std::result::Result<Option<super::constrain::Constraint>, ApiError> {
    use super::constrain::Constraint;
    Ok(match f {
        None | Some(ResponseFormat::Text) => None,
        Some(ResponseFormat::JsonObject) => Some(Constraint::JsonObject),
        Some(ResponseFormat::JsonSchema { json_schema }) => match json_schema.schema {
            Some(schema) => Some(Constraint::JsonSchema(schema)),
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
        StopReason::Eos | StopReason::StopString | StopReason::Complete | StopReason::Cancelled => "stop",
    }
}

fn usage(g: &Generation) -> Value {
    let (prompt, completion) = (g.prompt_ids.len(), g.ids.len());
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// The whole reply as a `chat.completion`.
pub fn completion(id: &str, model: &str, created: u64, g: &Generation) -> Value {
    json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": g.text, "refusal": null},
            "logprobs": null, "finish_reason": finish_reason(g.stop_reason)}],
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
