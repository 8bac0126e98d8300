//! A file of any supported format held whole in memory, as the bindings and the inspector use it: a Loom network
//! (runnable and convertible) or named tensors only (safetensors without our topology, GGUF, a training
//! checkpoint), with its inspection.

use bytes::Bytes;

use crate::convert::{self, TOPOLOGY_KEY};
use crate::error::{LoomError, Result};
use crate::formats::checkpoint::Checkpoint;
use crate::formats::detect::{self, Format};
use crate::formats::safetensors::SafetensorsFile;
use crate::inspect::{self, Inspection};
use crate::network::Network;

/// What a loaded file holds.
pub enum Contents {
    /// A Loom network (`.entity`, Loom JSON, or safetensors carrying our topology).
    Network(Network),
    /// A safetensors file without Loom topology.
    Safetensors(SafetensorsFile<Bytes>),
    /// A training-checkpoint folder.
    Checkpoint(Checkpoint),
}

/// A loaded file: its contents and its inspection.
pub struct LoadedModel {
    pub name: String,
    pub contents: Contents,
    pub inspection: Inspection,
}

impl LoadedModel {
    /// Loads any supported file from its bytes (kept, not copied: `.entity` weights stay slices of them).
    pub fn from_bytes(bytes: Bytes, name: &str) -> Result<LoadedModel> {
        let inspection = inspect::inspect_bytes(&bytes)?;
        let contents = match detect::detect(&bytes) {
            Format::Safetensors if !inspection.metadata.contains_key(TOPOLOGY_KEY) => {
                Contents::Safetensors(SafetensorsFile::from_bytes(bytes)?)
            }
            _ => Contents::Network(convert::read_network(bytes)?),
        };
        Ok(LoadedModel {
            name: name.to_string(),
            contents,
            inspection,
        })
    }

    /// Loads a training-checkpoint folder from `(relative path, contents)` pairs.
    pub fn from_files(files: Vec<(String, Vec<u8>)>, name: &str) -> Result<LoadedModel> {
        let ckpt = Checkpoint::from_files(files)?;
        Ok(LoadedModel {
            name: name.to_string(),
            inspection: inspect::inspect_checkpoint(&ckpt),
            contents: Contents::Checkpoint(ckpt),
        })
    }

    /// The Loom network, for what only a network can do (run it, convert it).
    pub fn network(&self) -> Result<&Network> {
        match &self.contents {
            Contents::Network(net) => Ok(net),
            _ => Err(LoomError::Unsupported(format!(
                "{} holds tensors without a Loom topology: it can be inspected, not run or converted",
                self.inspection.format
            ))),
        }
    }
}
