//! The LLM runtime: decoders of the families `config::Arch` names from GGUF, HF folders and Loom transformer
//! `.entity` files; engines behind one interface; generation, constrained where asked.

pub mod config;
#[cfg(not(target_arch = "wasm32"))]
pub mod constrain;
pub mod engine;
pub mod entity;
pub mod generate;
pub mod gpu_engine;
pub mod model;
pub mod openai;
pub mod sampler;
pub mod saved;
pub mod sources;
pub mod streamed;
pub mod template;
pub mod tokenizer;
pub mod weights;
