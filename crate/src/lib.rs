//! loom-wasm: Loom v0.80 checkpoints (JSON, `.entity`, safetensors) in Rust, natively and in WebAssembly.
//!
//! Modules by concern: [`dtype`] holds the 21 Loom dtype codecs, [`network`] the grid and layer model,
//! [`formats`] the readers and writers, [`inspect`] header-only inspection, [`convert`] conversions with a
//! loss report. [`cli`] and [`conformance`] are native-only.

pub mod boundary;
pub mod convert;
pub mod cpu;
pub mod dtype;
pub mod error;
pub mod formats;
pub mod gpu;
pub mod inspect;
pub mod llm;
pub mod model;
pub mod network;
pub mod quant;
pub mod stats;

#[cfg(target_arch = "wasm32")]
pub mod wasm;
#[cfg(all(target_arch = "wasm32", feature = "chat"))]
pub mod wasm_chat;
#[cfg(all(target_arch = "wasm32", feature = "inspector"))]
pub mod wasm_inspector;

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
#[cfg(not(target_arch = "wasm32"))]
pub mod conformance;

pub use dtype::DType;
pub use error::{LoomError, Result};
