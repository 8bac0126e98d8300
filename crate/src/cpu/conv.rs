//! CNN1/2/3 and ConvTransposed1D/2D/3D (spec §7).

use super::{State, Tensor};
use crate::error::{LoomError, Result};
use crate::network::Layer;

pub(crate) fn cnn(layer: &Layer, path: &str, _x: &Tensor, _state: &mut State) -> Result<Tensor> {
    Err(LoomError::Unsupported(format!(
        "{path}: CPU forward of {}",
        layer.layer_type
    )))
}

pub(crate) fn conv_transposed(layer: &Layer, path: &str, _x: &Tensor, _state: &mut State) -> Result<Tensor> {
    Err(LoomError::Unsupported(format!(
        "{path}: CPU forward of {}",
        layer.layer_type
    )))
}
