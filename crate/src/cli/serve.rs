//! `loom serve MODEL`: an OpenAI-compatible HTTP server for one model (`/v1/chat/completions` with SSE streaming,
//! `/v1/completions`, `/v1/models`, `/health`). One thread owns the engine and answers the requests one at a time,
//! in the order they came (its KV cache keeps the last conversation, so a follow-up recomputes only what changed);
//! a client that goes away ends its reply at the next token.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::mpsc as tmpsc;

use super::llm::{session, ModelArgs};
use crate::error::{LoomError, Result};
use crate::llm::generate::{GenerateOptions, Generation};
use crate::llm::openai::{self, ApiError, ChatJob};

/// Largest request body: far above any chat a small model's context holds; larger is a 413.
const MAX_BODY: usize = 4 << 20;

/// What the engine thread hands back while it answers: text as it comes, then the reply.
enum Piece {
    Text(String),
    Done(std::result::Result<Generation, ApiError>),
}

/// One request for the engine thread.
struct Job {
    /// A chat (templated messages) or a raw completion (the prompt as text).
    work: Work,
    out: tmpsc::UnboundedSender<Piece>,
}

enum Work {
    Chat(ChatJob),
    Completion { prompt: String, job: ChatJob },
}

#[derive(Clone)]
struct App {
    jobs: mpsc::Sender<Job>,
    model: String,
}

/// Serves `args`' model on `addr` until the process ends.
pub fn run(args: &ModelArgs, host: &str, port: u16) -> Result<std::process::ExitCode> {
    let name = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let (jobs, inbox) = mpsc::channel::<Job>();
    // The engine is not Send: it is made, lives and runs on its own thread, with the model.
    let (ready_tx, ready_rx) = mpsc::channel();
    let args = args.clone();
    std::thread::spawn(move || engine_thread(&args, inbox, ready_tx));
    ready_rx
        .recv()
        .map_err(|_| LoomError::InvalidInput("the engine thread ended".into()))??;
    let addr: SocketAddr = format!("{host}:{port}")
        .parse()
        .map_err(|e| LoomError::InvalidInput(format!("--host {host} --port {port}: {e}")))?;
    let app = Router::new()
        .route("/health", get(|| async { axum::Json(json!({"status": "ok"})) }))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .fallback(|| async {
            error(ApiError {
                status: 404,
                message: "no such endpoint".into(),
                param: None,
                code: "invalid_input",
            })
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(App { jobs, model: name });
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| LoomError::Io(format!("{addr}: {e}")))?;
        let local = listener.local_addr()?;
        // One line on stdout with the address, so that a caller that asked for port 0 learns the port.
        println!("loom serve: listening on http://{local}");
        eprintln!("loom serve: /v1/chat/completions, /v1/completions, /v1/models, /health (Ctrl-C ends)");
        axum::serve(listener, app)
            .await
            .map_err(|e| LoomError::Io(format!("server: {e}")))
    })?;
    Ok(std::process::ExitCode::SUCCESS)
}

fn engine_thread(args: &ModelArgs, inbox: mpsc::Receiver<Job>, ready: mpsc::Sender<Result<()>>) {
    let mut session = match session(args) {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    for job in inbox {
        let out = job.out.clone();
        // Text goes out as it comes; a closed channel (the client went away) ends the reply.
        let mut on_text = |t: &str| out.send(Piece::Text(t.to_string())).is_ok();
        let result = match job.work {
            Work::Chat(chat) => {
                // A required call is held to the tool's schema, in the family's tags where it has them.
                let constraint = chat.constraint(session.format().tags_tool_calls());
                constraint.map(|c| c.parse()).transpose().and_then(|constraint| {
                    let options = GenerateOptions {
                        constraint,
                        ..chat.options.clone()
                    };
                    let prompt = session.format().chat_prompt_json(&chat.messages, chat.tools.as_ref())?;
                    session.generate(&prompt, &options, &mut on_text)
                })
            }
            Work::Completion { prompt, job } => {
                job.format
                    .as_ref()
                    .map(|c| c.parse())
                    .transpose()
                    .and_then(|constraint| {
                        let options = GenerateOptions {
                            constraint,
                            ..job.options.clone()
                        };
                        let ids = session.format().encode_prompt(&prompt)?;
                        session.generate(&ids, &options, &mut on_text)
                    })
            }
        };
        let _ = job.out.send(Piece::Done(result.map_err(ApiError::from)));
    }
}

fn error(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(e.body())).into_response()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn request_id(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}-{nanos:x}")
}

async fn models(State(app): State<App>) -> Response {
    axum::Json(json!({"object": "list", "data": [
        {"id": app.model, "object": "model", "created": now(), "owned_by": "loom"}]}))
    .into_response()
}

/// Queues `work`; the receiver of its pieces.
fn submit(app: &App, work: Work) -> std::result::Result<tmpsc::UnboundedReceiver<Piece>, ApiError> {
    let (out, rx) = tmpsc::unbounded_channel();
    app.jobs.send(Job { work, out }).map_err(|_| ApiError {
        status: 500,
        message: "the engine thread ended".into(),
        param: None,
        code: "internal",
    })?;
    Ok(rx)
}

/// Waits for the whole reply (its text pieces dropped: the generation holds the text).
async fn finish(mut rx: tmpsc::UnboundedReceiver<Piece>) -> std::result::Result<Generation, ApiError> {
    while let Some(p) = rx.recv().await {
        if let Piece::Done(r) = p {
            return r;
        }
    }
    Err(ApiError {
        status: 500,
        message: "the reply ended without a result".into(),
        param: None,
        code: "internal",
    })
}

async fn chat_completions(State(app): State<App>, body: Bytes) -> Response {
    let job = match openai::parse_chat_request(&body).and_then(|r| r.job()) {
        Ok(job) => job,
        Err(e) => return error(e),
    };
    let (stream, include_usage) = (job.stream, job.include_usage);
    // With tools offered, the reply is read for calls once it is whole (a stream then comes in one piece).
    let tools = job.tools.clone();
    let rx = match submit(&app, Work::Chat(job)) {
        Ok(rx) => rx,
        Err(e) => return error(e),
    };
    let (id, created, model) = (request_id("chatcmpl"), now(), app.model.clone());
    if !stream {
        return match finish(rx).await {
            Ok(g) => {
                let calls = tools.as_ref().and_then(|t| openai::parse_tool_calls(&g.text, t, &id));
                let body = match calls {
                    Some((before, calls)) => openai::completion_with_calls(&id, &model, created, &g, &before, &calls),
                    None => openai::completion(&id, &model, created, &g),
                };
                axum::Json(body).into_response()
            }
            Err(e) => error(e),
        };
    }
    // The first chunk carries the role, each text piece a content delta, the last the finish reason (and usage
    // when asked for), then `[DONE]`. An error after the stream began ends it with an error event.
    let first = openai::chunk(&id, &model, created, json!({"role": "assistant", "content": ""}), None);
    let start = futures_util::stream::iter([Ok::<Event, std::convert::Infallible>(data(&first))]);
    let rest = futures_util::stream::unfold(Some(rx), move |rx| {
        let (id, model, tools) = (id.clone(), model.clone(), tools.clone());
        async move {
            let mut rx = rx?;
            let events = match rx.recv().await {
                Some(Piece::Text(_)) if tools.is_some() => return Some((vec![], Some(rx))),
                Some(Piece::Text(t)) => {
                    let c = openai::chunk(&id, &model, created, json!({"content": t}), None);
                    return Some((vec![Ok(data(&c))], Some(rx)));
                }
                Some(Piece::Done(Ok(g))) => {
                    let mut events = Vec::new();
                    let mut finish = openai::finish_reason(g.stop_reason);
                    if let Some(tools) = &tools {
                        let delta = match openai::parse_tool_calls(&g.text, tools, &id) {
                            Some((before, calls)) => {
                                finish = "tool_calls";
                                let calls: Vec<Value> = calls
                                    .iter()
                                    .enumerate()
                                    .map(|(i, c)| {
                                        let mut c = json!(c);
                                        c["index"] = i.into();
                                        c
                                    })
                                    .collect();
                                let content = if before.is_empty() { Value::Null } else { before.into() };
                                json!({"content": content, "tool_calls": calls})
                            }
                            None => json!({"content": g.text}),
                        };
                        events.push(Ok(data(&openai::chunk(&id, &model, created, delta, None))));
                    }
                    // Log-probabilities, when asked for, come whole with the last chunk: the text pieces before it
                    // are held back at stop strings, so they do not fall on token boundaries.
                    let mut last = openai::chunk(&id, &model, created, json!({}), Some(finish));
                    last["choices"][0]["logprobs"] = openai::logprobs_json(&g);
                    events.push(Ok(data(&last)));
                    if include_usage {
                        events.push(Ok(data(&openai::usage_chunk(&id, &model, created, &g))));
                    }
                    events.push(Ok(Event::default().data("[DONE]")));
                    events
                }
                Some(Piece::Done(Err(e))) => vec![Ok(data(&e.body()))],
                None => return None,
            };
            Some((events, None))
        }
    });
    let rest = futures_util::StreamExt::flat_map(rest, futures_util::stream::iter);
    Sse::new(futures_util::StreamExt::chain(start, rest)).into_response()
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// `/v1/completions`: the prompt as raw text (no chat template), the OpenAI legacy shape, not streamed.
async fn completions(State(app): State<App>, body: Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(ApiError::bad(None, format!("the request body: {e}"))),
    };
    let Some(prompt) = v.get("prompt").and_then(Value::as_str).map(str::to_string) else {
        return error(ApiError::bad(Some("prompt"), "prompt: a string is needed"));
    };
    if v.get("stream").and_then(Value::as_bool) == Some(true) {
        return error(ApiError::bad(
            Some("stream"),
            "stream: /v1/completions does not stream here",
        ));
    }
    // The chat request's reading of the shared fields, over one placeholder message.
    let mut chat = v.clone();
    if let Some(o) = chat.as_object_mut() {
        o.remove("prompt");
        o.remove("echo");
        o.remove("best_of");
        o.remove("suffix");
        o.insert("messages".into(), json!([{"role": "user", "content": ""}]));
    }
    let job = match serde_json::to_vec(&chat)
        .map_err(|e| ApiError::bad(None, e.to_string()))
        .and_then(|b| openai::parse_chat_request(&b))
        .and_then(|r| r.job())
    {
        Ok(job) => job,
        Err(e) => return error(e),
    };
    let rx = match submit(&app, Work::Completion { prompt, job }) {
        Ok(rx) => rx,
        Err(e) => return error(e),
    };
    match finish(rx).await {
        Ok(g) => {
            let (p, c) = (g.prompt_ids.len(), g.ids.len());
            axum::Json(json!({
                "id": request_id("cmpl"), "object": "text_completion", "created": now(), "model": app.model,
                "choices": [{"index": 0, "text": g.text, "logprobs": null,
                    "finish_reason": openai::finish_reason(g.stop_reason)}],
                "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
            }))
            .into_response()
        }
        Err(e) => error(e),
    }
}
