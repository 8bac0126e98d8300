//! Readers and writers: Loom JSON, ENTITY v1, safetensors, training checkpoints, GGUF headers, format detection.

pub mod checkpoint;
pub mod detect;
pub mod entity;
pub mod gguf;
pub mod gojson;
pub mod loom_json;
pub mod safetensors;
pub mod tensors;
