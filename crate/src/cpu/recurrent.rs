//! RNN and LSTM (spec §7).

use super::{State, Tensor};
use crate::error::{LoomError, Result};
use crate::network::Layer;

pub(crate) fn rnn(_layer: &Layer, path: &str, _x: &Tensor, _state: &mut State) -> Result<Tensor> {
    Err(LoomError::Unsupported(format!("{path}: CPU forward of RNN")))
}

pub(crate) fn lstm(_layer: &Layer, path: &str, _x: &Tensor, _state: &mut State) -> Result<Tensor> {
    Err(LoomError::Unsupported(format!("{path}: CPU forward of LSTM")))
}
