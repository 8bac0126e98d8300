//! Readers and writers: Loom JSON, ENTITY v1, safetensors, training checkpoints, format detection.

pub mod checkpoint;
pub mod detect;
pub mod safetensors;
