//! The LLM runtime: Llama-family decoders (Llama, Mistral, SmolLM, Qwen2, Qwen3) from GGUF, HF folders and Loom
//! transformer `.entity` files; engines behind one interface; generation.

pub mod config;
pub mod engine;
pub mod entity;
pub mod generate;
pub mod gpu_engine;
pub mod model;
pub mod sampler;
pub mod sources;
pub mod streamed;
pub mod template;
pub mod tokenizer;
pub mod weights;
