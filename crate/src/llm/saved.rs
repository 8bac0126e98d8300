//! A conversation saved with the KV cache that holds it, so that a chat continues after a page reload (or on
//! another engine of the same model) without computing its prompt again.
//!
//! The bytes: `LOOMCHAT`, a u32 version, a u32 header length, the header (JSON: the model's fingerprint and
//! shape, the messages, the cached ids, the first position each layer keeps, the caller's `meta`), then each
//! layer's kept keys and values as little-endian f32 rows (`[position][kv_heads × head_dim]`, keys then values),
//! then the SHA-256 of everything before it (the rows are copied as they lie in memory: every target this builds for
//! is little-endian). Rows are the same whichever engine wrote them, so a chat saved on the GPU restores on the CPU
//! and back.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::config::ModelConfig;
use super::template::ChatMessage;
use super::weights::Matrix;
use crate::error::{json_err, LoomError, Result};

const MAGIC: &[u8; 8] = b"LOOMCHAT";
const _: () = assert!(
    cfg!(target_endian = "little"),
    "saved chats copy f32 rows as little-endian bytes"
);
const VERSION: u32 = 1;
/// The header holds the messages: far below this however long a conversation gets within a context.
const MAX_HEADER: u64 = 64 << 20;

/// Keys and values of every layer, as a saved chat carries them.
#[derive(Clone, Debug, PartialEq)]
pub struct KvRows {
    /// Positions cached: the next token goes at this position.
    pub len: usize,
    /// Values per row (`kv_heads × head_dim`).
    pub kv_dim: usize,
    pub layers: Vec<LayerRows>,
}

/// One layer's rows for positions `from..len` (a layer with a sliding window keeps only the recent ones).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerRows {
    pub from: usize,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

impl KvRows {
    /// No positions, for `layers` layers of rows of `kv_dim`.
    pub fn empty(layers: usize, kv_dim: usize) -> KvRows {
        KvRows {
            len: 0,
            kv_dim,
            layers: (0..layers)
                .map(|_| LayerRows {
                    from: 0,
                    k: Vec::new(),
                    v: Vec::new(),
                })
                .collect(),
        }
    }

    /// Checks the rows fit a model of `cfg` in an engine of `context` positions: each layer holds what the next
    /// position reads (every position, or its window).
    pub fn check(&self, cfg: &ModelConfig, context: usize) -> Result<()> {
        let bad = |m: String| Err(LoomError::SavedChat(m));
        if self.layers.len() != cfg.n_layers || self.kv_dim != cfg.kv_dim() {
            return bad(format!(
                "its KV cache has {} layers of rows of {}, the model {} of {}",
                self.layers.len(),
                self.kv_dim,
                cfg.n_layers,
                cfg.kv_dim()
            ));
        }
        if self.len > context {
            return Err(LoomError::ContextFull {
                needed: self.len,
                limit: context,
            });
        }
        for (l, r) in self.layers.iter().enumerate() {
            let needed_from = cfg.window(l).map_or(0, |w| (self.len + 1).saturating_sub(w));
            if r.from > needed_from {
                return bad(format!(
                    "layer {l} keeps positions from {}, the next position reads from {needed_from}",
                    r.from
                ));
            }
            let values = (self.len - r.from) * self.kv_dim;
            if r.k.len() != values || r.v.len() != values {
                return bad(format!("layer {l} has {} values, {values} expected", r.k.len()));
            }
        }
        Ok(())
    }
}

/// What identifies a model to a saved chat: its shape, and every weight matrix's block type, shape, length and
/// bytes sampled at four places (a few KiB a matrix: cheap when the model opens, and different for any fine-tune of
/// the same shape, whose every matrix changes). Not the family's name: a streamed `.entity` learns it from its
/// first block.
pub struct Fingerprint(Sha256);

/// Bytes hashed at each of a matrix's four sample places.
const SAMPLE: usize = 1024;

impl Fingerprint {
    pub fn new(cfg: &ModelConfig) -> Fingerprint {
        let mut h = Sha256::new();
        h.update(b"loom-chat-fingerprint-1");
        for n in [
            cfg.n_layers,
            cfg.hidden,
            cfg.n_heads,
            cfg.n_kv_heads,
            cfg.head_dim,
            cfg.ffn,
            cfg.vocab,
        ] {
            h.update((n as u64).to_le_bytes());
        }
        Fingerprint(h)
    }

    /// Adds the next weight matrix (the embedding, the head when it has its own, then each block's, in order).
    pub fn matrix(&mut self, m: &Matrix) {
        let h = &mut self.0;
        h.update(m.ty.name().as_bytes());
        for n in [m.rows, m.cols, m.data.len()] {
            h.update((n as u64).to_le_bytes());
        }
        let len = m.data.len();
        if len <= 4 * SAMPLE {
            h.update(&m.data);
        } else {
            for at in [0, len / 3, 2 * len / 3, len - SAMPLE] {
                h.update(&m.data[at..at + SAMPLE]);
            }
        }
    }

    pub fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The header's account of the model, for the error that names a mismatch.
#[derive(Clone, Debug, PartialEq)]
struct ModelShape {
    arch: String,
    layers: usize,
    hidden: usize,
    vocab: usize,
}

impl ModelShape {
    fn of(cfg: &ModelConfig) -> ModelShape {
        ModelShape {
            arch: cfg.arch.name().into(),
            layers: cfg.n_layers,
            hidden: cfg.hidden,
            vocab: cfg.vocab,
        }
    }
}

/// The header, written and read through `serde_json::Value` by hand: a derived (de)serializer would add more to the
/// wasm than the whole of this module.
struct Header {
    fingerprint: String,
    model: ModelShape,
    history: Vec<ChatMessage>,
    cached: Vec<u32>,
    len: usize,
    kv_dim: usize,
    from: Vec<usize>,
    meta: Value,
}

const FIELDS: [&str; 8] = [
    "fingerprint",
    "model",
    "history",
    "cached",
    "len",
    "kv_dim",
    "from",
    "meta",
];

impl Header {
    fn to_json(&self) -> Value {
        let object =
            |pairs: Vec<(&str, Value)>| Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        let m = &self.model;
        let messages = self.history.iter().map(|c| {
            object(vec![
                ("role", c.role.clone().into()),
                ("content", c.content.clone().into()),
            ])
        });
        object(vec![
            ("fingerprint", self.fingerprint.clone().into()),
            (
                "model",
                object(vec![
                    ("arch", m.arch.clone().into()),
                    ("layers", m.layers.into()),
                    ("hidden", m.hidden.into()),
                    ("vocab", m.vocab.into()),
                ]),
            ),
            ("history", Value::Array(messages.collect())),
            ("cached", self.cached.iter().map(|&id| Value::from(id)).collect()),
            ("len", self.len.into()),
            ("kv_dim", self.kv_dim.into()),
            ("from", self.from.iter().map(|&f| Value::from(f)).collect()),
            ("meta", self.meta.clone()),
        ])
    }

    fn from_json(v: Value) -> Result<Header> {
        let bad = |what: &str| LoomError::SavedChat(format!("its header's {what} is missing or malformed"));
        let Value::Object(o) = v else {
            return Err(bad("object"));
        };
        if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(LoomError::SavedChat(format!("its header has an unknown field \"{k}\"")));
        }
        let count = |v: &Value| v.as_u64().and_then(|n| usize::try_from(n).ok());
        let field = |o: &Map<String, Value>, k: &str| o.get(k).and_then(count).ok_or_else(|| bad(k));
        let text = |o: &Map<String, Value>, k: &str| o.get(k).and_then(Value::as_str).map(String::from);
        let list = |k: &str| match o.get(k) {
            Some(Value::Array(a)) => Ok(a),
            _ => Err(bad(k)),
        };
        let cached = list("cached")?
            .iter()
            .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| bad("cached"))?;
        let from = list("from")?
            .iter()
            .map(count)
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| bad("from"))?;
        let history = list("history")?
            .iter()
            .map(|m| {
                let m = m.as_object()?;
                let message = ChatMessage {
                    role: text(m, "role")?,
                    content: text(m, "content")?,
                };
                (m.len() == 2).then_some(message)
            })
            .collect::<Option<Vec<ChatMessage>>>()
            .ok_or_else(|| bad("history"))?;
        let model = match o.get("model") {
            Some(Value::Object(m)) => ModelShape {
                arch: text(m, "arch").ok_or_else(|| bad("model"))?,
                layers: field(m, "layers")?,
                hidden: field(m, "hidden")?,
                vocab: field(m, "vocab")?,
            },
            _ => return Err(bad("model")),
        };
        Ok(Header {
            fingerprint: text(&o, "fingerprint").ok_or_else(|| bad("fingerprint"))?,
            model,
            history,
            cached,
            len: field(&o, "len")?,
            kv_dim: field(&o, "kv_dim")?,
            from,
            meta: o.get("meta").cloned().ok_or_else(|| bad("meta"))?,
        })
    }
}

/// A saved chat: the conversation, the ids its KV cache holds and those keys and values.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedChat {
    pub fingerprint: String,
    pub history: Vec<ChatMessage>,
    /// Ids whose keys and values `kv` holds, in order (`kv.len` of them).
    pub cached: Vec<u32>,
    pub kv: KvRows,
    /// The caller's own (an app's settings), kept as given.
    pub meta: Value,
    /// The model it was read as saved from (none for one built here).
    saved_from: Option<ModelShape>,
}

impl SavedChat {
    pub fn new(fingerprint: String, history: Vec<ChatMessage>, cached: Vec<u32>, kv: KvRows, meta: Value) -> SavedChat {
        SavedChat {
            fingerprint,
            history,
            cached,
            kv,
            meta,
            saved_from: None,
        }
    }

    /// The bytes of the chat, for a model of `cfg`.
    pub fn encode(&self, cfg: &ModelConfig) -> Result<Vec<u8>> {
        let header = Header {
            fingerprint: self.fingerprint.clone(),
            model: ModelShape::of(cfg),
            history: self.history.clone(),
            cached: self.cached.clone(),
            len: self.kv.len,
            kv_dim: self.kv.kv_dim,
            from: self.kv.layers.iter().map(|l| l.from).collect(),
            meta: self.meta.clone(),
        };
        let header = serde_json::to_vec(&header.to_json()).map_err(|e| json_err("saved chat header", e))?;
        let values: usize = self.kv.layers.iter().map(|l| l.k.len() + l.v.len()).sum();
        let mut out = Vec::with_capacity(16 + header.len() + 4 * values + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        for l in &self.kv.layers {
            out.extend_from_slice(bytemuck::cast_slice(&l.k));
            out.extend_from_slice(bytemuck::cast_slice(&l.v));
        }
        let digest = Sha256::digest(&out);
        out.extend_from_slice(&digest);
        Ok(out)
    }

    /// A saved chat from its bytes, every length and the checksum checked before anything is allocated for it or
    /// used. (Whether it fits the model at hand is [`SavedChat::check`].)
    pub fn decode(bytes: &[u8]) -> Result<SavedChat> {
        let truncated = |needed: u64| LoomError::Truncated {
            what: "saved chat".into(),
            needed,
            available: bytes.len() as u64,
        };
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(LoomError::BadMagic { format: "saved chat" });
        }
        if bytes.len() < 16 + 32 {
            return Err(truncated(16 + 32));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(LoomError::UnsupportedVersion {
                format: "saved chat",
                version: version.into(),
            });
        }
        let header_len = u64::from(u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")));
        if header_len > MAX_HEADER {
            return Err(LoomError::TooLarge {
                what: "saved chat header".into(),
                len: header_len,
                max: MAX_HEADER,
            });
        }
        let body_end = bytes.len() - 32;
        if 16 + header_len > body_end as u64 {
            return Err(truncated(16 + header_len + 32));
        }
        if Sha256::digest(&bytes[..body_end])[..] != bytes[body_end..] {
            return Err(LoomError::SavedChat(
                "its checksum does not match its bytes (the file is damaged or was cut short)".into(),
            ));
        }
        let header_end = 16 + header_len as usize;
        let h: Value = serde_json::from_slice(&bytes[16..header_end]).map_err(|e| json_err("saved chat header", e))?;
        let h = Header::from_json(h)?;
        let bad = |m: String| Err(LoomError::SavedChat(m));
        if h.cached.len() != h.len {
            return bad(format!("{} cached ids for {} positions", h.cached.len(), h.len));
        }
        if let Some(&from) = h.from.iter().find(|&&f| f > h.len) {
            return bad(format!(
                "a layer keeps positions from {from}, past the {} cached",
                h.len
            ));
        }
        let values = h
            .from
            .iter()
            .try_fold(0u64, |sum, &f| {
                ((h.len - f) as u64)
                    .checked_mul(h.kv_dim as u64)
                    .and_then(|n| n.checked_mul(2))
                    .and_then(|n| sum.checked_add(n))
            })
            .and_then(|n| n.checked_mul(4))
            .ok_or_else(|| LoomError::SavedChat("its KV cache size overflows".into()))?;
        let data = &bytes[header_end..body_end];
        if data.len() as u64 != values {
            return bad(format!(
                "its header describes {values} bytes of keys and values, it has {}",
                data.len()
            ));
        }
        let mut at = 0;
        let mut take = |n: usize| {
            let rows: Vec<f32> = bytemuck::pod_collect_to_vec(&data[at..at + 4 * n]);
            at += 4 * n;
            rows
        };
        let layers = h
            .from
            .iter()
            .map(|&from| {
                let n = (h.len - from) * h.kv_dim;
                let k = take(n);
                LayerRows { from, k, v: take(n) }
            })
            .collect();
        Ok(SavedChat {
            fingerprint: h.fingerprint,
            history: h.history,
            cached: h.cached,
            kv: KvRows {
                len: h.len,
                kv_dim: h.kv_dim,
                layers,
            },
            meta: h.meta,
            saved_from: Some(h.model),
        })
    }

    /// Checks the chat was saved from the model of `fingerprint` and `cfg` and fits an engine of `context`
    /// positions.
    pub fn check(&self, fingerprint: &str, cfg: &ModelConfig, context: usize) -> Result<()> {
        if self.fingerprint != fingerprint {
            let from = match &self.saved_from {
                Some(m) => format!("{}, {} layers, {} wide, {} tokens", m.arch, m.layers, m.hidden, m.vocab),
                None => "unknown".into(),
            };
            let this = ModelShape::of(cfg);
            return Err(LoomError::ModelMismatch(format!(
                "this chat was saved from another model ({from}; this one: {}, {} layers, {} wide, {} tokens{})",
                this.arch,
                this.layers,
                this.hidden,
                this.vocab,
                if self.saved_from.as_ref() == Some(&this) {
                    ", other weights"
                } else {
                    ""
                }
            )));
        }
        if let Some(&id) = self.cached.iter().find(|&&id| id as usize >= cfg.vocab) {
            return Err(LoomError::SavedChat(format!(
                "token id {id} is past the model's {} tokens",
                cfg.vocab
            )));
        }
        self.kv.check(cfg, context)
    }
}
