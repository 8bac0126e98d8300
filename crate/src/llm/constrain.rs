//! Constrained decoding: a reply held to a JSON Schema, any JSON object, a regular expression or a Lark grammar by
//! llguidance (the engine behind llama.cpp's and OpenAI's structured output). Before each token is drawn the
//! grammar says which ids may come next; the others' logits become −∞, so the sampler (greedy or not) can only
//! pick a continuation the grammar accepts, and the reply ends where the grammar is complete.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

use super::tokenizer::Tokenizer;
use crate::error::{LoomError, Result};

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
    fn grammar(&self) -> Result<TopLevelGrammar> {
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
fn check_keywords(schema: &Value, at: &str) -> Result<()> {
    let map = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(map) => map,
        other => {
            return Err(constraint_err(format!(
                "{at}: a schema is an object or true/false, not {other}"
            )))
        }
    };
    for (key, value) in map {
        if !KEYWORDS.contains(&key.as_str()) {
            return Err(constraint_err(format!("{at}: unknown JSON Schema keyword {key:?}")));
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

fn constraint_err(m: impl std::fmt::Display) -> LoomError {
    LoomError::InvalidInput(format!("constraint: {m}"))
}

/// A tokenizer's vocabulary as the grammar engine sees it: built once per model (about 0.1 s for 49k tokens) and
/// shared by every constrained reply.
#[derive(Clone)]
pub struct GrammarVocab {
    factory: Arc<ParserFactory>,
    rows: usize,
}

impl GrammarVocab {
    /// The vocabulary of `tokenizer` over the model's `rows` logits, ending at any of `eos_ids`. A model that names
    /// no end token gets one past its rows that it can never draw: its replies end where the grammar completes.
    pub fn new(tokenizer: &Tokenizer, rows: usize, eos_ids: &[u32]) -> Result<GrammarVocab> {
        let mut words = tokenizer.token_bytes(rows);
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
        let mut factory = ParserFactory::new_simple(&env).map_err(constraint_err)?;
        factory.set_stderr_log_level(0);
        Ok(GrammarVocab {
            factory: Arc::new(factory),
            rows,
        })
    }

    /// A grammar for one reply: a schema, regex or grammar it cannot compile (an unknown keyword, a bad regex, a
    /// grammar over the engine's size limits) is an error now, before any token is generated.
    pub fn start(&self, c: &Constraint) -> Result<Grammar> {
        let parser = self.factory.create_parser(c.grammar()?);
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(constraint_err(e));
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
    /// Sets the logits of every id the grammar does not allow next to −∞.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let allowed: SimpleVob = self.matcher.compute_mask().map_err(constraint_err)?;
        if allowed.num_set() == 0 {
            return Err(constraint_err("no token can continue the reply"));
        }
        for (id, l) in logits.iter_mut().enumerate().take(self.rows) {
            if !allowed.is_allowed(id as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Takes the id that was drawn.
    pub fn accept(&mut self, id: u32) -> Result<()> {
        self.matcher.consume_token(id).map_err(constraint_err)
    }

    /// The grammar is complete and allows nothing more.
    pub fn is_done(&self) -> bool {
        self.matcher.is_stopped()
    }
}
