//! MultiHeadAttention with RoPE, GQA, causal masking and Loom's shared KV timeline (spec §7).

use super::{State, Tensor};
use crate::error::{LoomError, Result};
use crate::network::Layer;

pub(crate) fn mha(_layer: &Layer, path: &str, _x: &Tensor, _state: &mut State) -> Result<Tensor> {
    Err(LoomError::Unsupported(format!(
        "{path}: CPU forward of MultiHeadAttention"
    )))
}
