//! What a network takes as input, read from its first layer: float values of a known width, or token ids below a
//! vocabulary size. The CPU and GPU forwards check an input against it first, so a wrong input is refused at the
//! input, naming the expected shape, and both devices word the refusal the same way.

use serde::Serialize;

use super::{Layer, LayerType, Network};
use crate::error::{LoomError, Result};

/// The input a network expects.
#[derive(Clone, Debug, PartialEq, Serialize, ts_rs::TS)]
pub struct InputSpec {
    /// `"float"` or `"token_ids"`.
    #[ts(type = r#""float" | "token_ids""#)]
    pub kind: &'static str,
    /// A shape that fits, batch 1 (for token ids: a sequence of `seq_length`, at least one).
    pub shape: Vec<usize>,
    /// Token ids must be integers below this (Embedding's `vocab_size`).
    pub vocab: Option<usize>,
    /// The first layer the spec comes from (`layers.0`, `layers.1.parallel_branches.0`).
    pub layer: String,
}

/// The first layer that sees the input: containers pass it to their first child (every parallel branch gets it).
fn first_layer(net: &Network) -> Option<(String, &Layer)> {
    let (i, mut layer) = net.layers.iter().enumerate().find(|(_, l)| !l.is_disabled)?;
    let mut path = format!("layers.{i}");
    while matches!(layer.layer_type, LayerType::Parallel | LayerType::Sequential) {
        let (seg, child) = layer.children().into_iter().next()?;
        path = format!("{path}.{seg}");
        layer = child;
    }
    Some((path, layer))
}

impl Network {
    /// The input this network takes, when its first layer says: Dense (`[batch, input_height]` floats) or Embedding
    /// (token ids). Other first layers give `None`: their forward checks the shape itself.
    pub fn input_spec(&self) -> Option<InputSpec> {
        let (layer_path, layer) = first_layer(self)?;
        let positive = |v: i64| usize::try_from(v).ok().filter(|&n| n > 0);
        match layer.layer_type {
            LayerType::Dense => Some(InputSpec {
                kind: "float",
                shape: vec![1, positive(layer.input_height)?],
                vocab: None,
                layer: layer_path,
            }),
            LayerType::Embedding => Some(InputSpec {
                kind: "token_ids",
                shape: vec![positive(layer.seq_length).unwrap_or(1)],
                vocab: Some(positive(layer.vocab_size)?),
                layer: layer_path,
            }),
            _ => None,
        }
    }

    /// Refuses an input whose shape a Dense first layer cannot take. Both forwards call this first, so CPU and GPU
    /// word the refusal the same way.
    pub fn check_input_shape(&self, shape: &[usize]) -> Result<()> {
        match self.input_spec() {
            Some(spec) if spec.vocab.is_none() => {
                let width = spec.shape[1];
                if shape.len() < 2 || shape.iter().skip(1).product::<usize>() != width {
                    return Err(LoomError::InvalidInput(format!(
                        "the input must be [batch, {width}] float values ({} is Dense with {width} inputs), got shape {shape:?}",
                        spec.layer
                    )));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// [`Network::check_input_shape`], and for an Embedding first layer token ids that are integers in `0..vocab`:
    /// for a person's input. The forward itself takes any value as Loom does (truncated; out of range gives a zero
    /// row), which Loom's corpus checks.
    pub fn check_input(&self, values: &[f32], shape: &[usize]) -> Result<()> {
        self.check_input_shape(shape)?;
        let Some((spec, vocab)) = self.input_spec().and_then(|s| s.vocab.map(|v| (s, v))) else {
            return Ok(());
        };
        let bad = values
            .iter()
            .enumerate()
            .find(|(_, v)| !(v.fract() == 0.0 && **v >= 0.0 && f64::from(**v) < vocab as f64));
        if let Some((i, v)) = bad {
            return Err(LoomError::InvalidInput(format!(
                "the input must be token ids, integers from 0 to {} ({} is an Embedding of {vocab} tokens); value {i} is {v}",
                vocab - 1,
                spec.layer
            )));
        }
        Ok(())
    }
}
