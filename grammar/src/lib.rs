//! Constrained decoding: a reply held to a JSON Schema, any JSON object, a regular expression or a Lark grammar by
//! llguidance (the engine behind llama.cpp's and OpenAI's structured output). Before each token is drawn the
//! grammar says which ids may come next; the others' logits become −∞, so the sampler (greedy or not) can only pick
//! a continuation the grammar accepts, and the reply ends where the grammar is complete.
//!
//! Natively the `loom-wasm` crate links this library (`llm::constrain`); in the browser it is a WebAssembly module
//! of its own (`wasm.rs`), loaded by the package on the first constrained reply, that hands each step's mask over
//! as a bitmask, so the chat module does not carry the grammar engine.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

#[cfg(target_arch = "wasm32")]
mod wasm;

/// Why a constraint cannot be compiled or continued (the caller adds that it is about a constraint).
#[derive(Clone, Debug, PartialEq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn err(m: impl std::fmt::Display) -> Error {
    Error(m.to_string())
}

/// What a reply must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// JSON valid against this schema (draft 2020-12 as llguidance implements it; a keyword it does not implement
    /// is refused by name, never ignored).
    JsonSchema(Value),
    /// Any JSON object.
    JsonObject,
    /// Text matching this regular expression, whole.
    Regex(String),
    /// Text of this Lark grammar (llguidance's dialect).
    Lark(String),
}

impl Constraint {
    /// A constraint from its kind (`json_schema`, `json_object`, `regex`, `lark`) and its text (the schema as JSON,
    /// the expression, the grammar; nothing for `json_object`).
    pub fn parse(kind: &str, source: &str) -> Result<Constraint, Error> {
        Ok(match kind {
            "json_schema" => Constraint::JsonSchema(
                serde_json::from_str(source).map_err(|e| err(format!("the JSON Schema is not JSON: {e}")))?,
            ),
            "json_object" => Constraint::JsonObject,
            "regex" => Constraint::Regex(source.to_string()),
            "lark" => Constraint::Lark(source.to_string()),
            other => {
                return Err(err(format!(
                    "unknown kind {other:?} (json_schema, json_object, regex, lark)"
                )))
            }
        })
    }

    fn grammar(&self) -> Result<TopLevelGrammar, Error> {
        Ok(match self {
            Constraint::JsonSchema(schema) => {
                check_keywords(schema, "#")?;
                TopLevelGrammar::from_json_schema(compact(schema.clone()))
            }
            Constraint::JsonObject => TopLevelGrammar::from_json_schema(compact(serde_json::json!({"type": "object"}))),
            Constraint::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Constraint::Lark(lark) => TopLevelGrammar::from_lark(lark.clone()),
        })
    }
}

/// The JSON Schema keywords (draft 2020-12 with draft 7's `definitions`, `dependencies` and `additionalItems`, and
/// llguidance's `x-guidance`): any other key of a schema is refused by name, since a validator would ignore it and a
/// misspelt constraint (`minLenght`) would silently not hold.
const KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "prefixItems",
    "items",
    "additionalItems",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "x-guidance",
];

/// Checks that `schema` (at JSON pointer `at`) and its subschemas use only [`KEYWORDS`].
fn check_keywords(schema: &Value, at: &str) -> Result<(), Error> {
    let map = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(map) => map,
        other => return Err(err(format!("{at}: a schema is an object or true/false, not {other}"))),
    };
    for (key, value) in map {
        if !KEYWORDS.contains(&key.as_str()) {
            return Err(err(format!("{at}: unknown JSON Schema keyword {key:?}")));
        }
        let here = format!("{at}/{key}");
        match (key.as_str(), value) {
            (
                "additionalProperties"
                | "items"
                | "contains"
                | "not"
                | "if"
                | "then"
                | "else"
                | "propertyNames"
                | "unevaluatedItems"
                | "unevaluatedProperties"
                | "additionalItems"
                | "contentSchema",
                Value::Object(_) | Value::Bool(_),
            ) => check_keywords(value, &here)?,
            ("allOf" | "anyOf" | "oneOf" | "prefixItems" | "items", Value::Array(list)) => {
                for (i, s) in list.iter().enumerate() {
                    check_keywords(s, &format!("{here}/{i}"))?;
                }
            }
            (
                "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" | "dependencies",
                Value::Object(subs),
            ) => {
                for (name, s) in subs {
                    // draft 7's `dependencies` also maps a property to the names it requires.
                    if !(key == "dependencies" && s.is_array()) {
                        check_keywords(s, &format!("{here}/{name}"))?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// JSON without free whitespace between its tokens (`x-guidance` `whitespace_flexible: false`) unless the schema
/// asks otherwise: with it, a model could pad a reply with newlines until its token limit.
fn compact(mut schema: Value) -> Value {
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({"whitespace_flexible": false}));
    }
    schema
}

/// A tokenizer's vocabulary as the grammar engine sees it: built once per model (about 0.1 s for 49k tokens) and
/// shared by every constrained reply.
#[derive(Clone)]
pub struct Vocab {
    factory: Arc<ParserFactory>,
    rows: usize,
}

impl Vocab {
    /// The vocabulary whose token `id` is `words[id]` (its bytes as the tokenizer writes them), over the model's
    /// `rows` logits, ending at any of `eos_ids`. A model that names no end token gets one past its rows that it can
    /// never draw: its replies end where the grammar completes.
    pub fn new(mut words: Vec<Vec<u8>>, rows: usize, eos_ids: &[u32]) -> Result<Vocab, Error> {
        let eos_ids = match eos_ids {
            [] => {
                words.push(Vec::new());
                vec![rows as u32]
            }
            ids => ids.to_vec(),
        };
        let info = TokRxInfo::new(words.len() as u32, eos_ids[0]);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos_ids);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(err)?;
        factory.set_stderr_log_level(0);
        Ok(Vocab {
            factory: Arc::new(factory),
            rows,
        })
    }

    /// A grammar for one reply: a schema, regex or grammar it cannot compile (an unknown keyword, a bad regex, a
    /// grammar over the engine's size limits) is an error now, before any token is generated.
    pub fn start(&self, c: &Constraint) -> Result<Grammar, Error> {
        let parser = self.factory.create_parser(c.grammar()?);
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(err(e));
        }
        Ok(Grammar {
            matcher,
            rows: self.rows,
        })
    }
}

/// One reply's grammar state.
pub struct Grammar {
    matcher: Matcher,
    rows: usize,
}

impl Grammar {
    fn allowed(&mut self) -> Result<SimpleVob, Error> {
        let allowed = self.matcher.compute_mask().map_err(err)?;
        if allowed.num_set() == 0 {
            return Err(err("no token can continue the reply"));
        }
        Ok(allowed)
    }

    /// The ids the grammar allows next as a bitmask over the model's rows: bit `id % 32` of word `id / 32`.
    pub fn mask_words(&mut self) -> Result<Vec<u32>, Error> {
        let allowed = self.allowed()?;
        let mut words = vec![0u32; self.rows.div_ceil(32)];
        for id in 0..self.rows {
            if allowed.is_allowed(id as u32) {
                words[id / 32] |= 1 << (id % 32);
            }
        }
        Ok(words)
    }

    /// Takes the id that was drawn.
    pub fn accept(&mut self, id: u32) -> Result<(), Error> {
        self.matcher.consume_token(id).map_err(err)
    }

    /// The grammar is complete and allows nothing more.
    pub fn is_done(&self) -> bool {
        self.matcher.is_stopped()
    }
}
