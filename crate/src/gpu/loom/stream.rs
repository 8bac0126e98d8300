//! A `.entity` network built on the GPU from its header and then its blobs, one at a time, as they arrive from a
//! file or a download: each blob is decoded into its layer exactly as [`entity::read`] decodes it, the layer is
//! prepared on the GPU once all of its blobs are in, and its host copy is dropped. The host holds the topology and
//! at most the blobs of one layer, never the model (layers the GPU cannot run keep theirs, for their CPU forward).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::formats::entity::{self, BlobEntry, BlobTarget};
use crate::gpu::{Gpu, GpuModel};
use crate::network::{LayerType, Network};

/// One blob of the file: its table entry, where it lies in the file, and whether it has arrived.
struct Blob {
    entry: BlobEntry,
    /// Absolute byte range in the file.
    range: Range<u64>,
    target: BlobTarget,
    fed: bool,
}

/// A network whose weights arrive blob by blob (see the module docs).
pub struct GpuStream {
    model: GpuModel,
    blobs: Vec<Blob>,
    /// Blobs not yet fed, per layer path.
    pending: HashMap<String, usize>,
}

impl GpuStream {
    /// Starts from a prefix of a `file_len`-byte `.entity` file that holds its whole header ([`LoomError::NeedMore`]
    /// with the length needed when it does not). Every blob must lie inside the file and name a layer of the
    /// header's network.
    pub fn begin(gpu: Arc<Gpu>, prefix: &[u8], file_len: u64) -> Result<GpuStream> {
        let header = header_from_prefix(prefix, file_len)?;
        let payload_offset = header.payload_offset();
        let payload = file_len.saturating_sub(payload_offset);
        let mut blobs = Vec::with_capacity(header.blobs.len());
        let mut pending = HashMap::new();
        for entry in header.blobs {
            let range = entry.range(payload)?;
            let target = entry.target(&header.network)?;
            if let BlobTarget::Layer(path) = &target {
                *pending.entry(path.clone()).or_default() += 1;
            }
            let start = payload_offset + range.start as u64;
            blobs.push(Blob {
                range: start..start + entry.length,
                entry,
                target,
                fed: false,
            });
        }
        Ok(GpuStream {
            model: GpuModel::new(gpu, header.network)?,
            blobs,
            pending,
        })
    }

    /// Every blob's table entry and absolute byte range in the file, in the header's order.
    pub fn blobs(&self) -> impl Iterator<Item = (&BlobEntry, Range<u64>)> {
        self.blobs.iter().map(|b| (&b.entry, b.range.clone()))
    }

    /// The model as built so far (topology; host weights only for layers that run on the CPU).
    pub fn model(&self) -> &GpuModel {
        &self.model
    }

    /// Installs the bytes of blob `path` (the whole blob, as its range in the file holds it) into its layer with
    /// the checks [`entity::read`] makes; once every blob of the layer is in, the layer is prepared on the GPU and
    /// its host copy dropped. Transformer tensors are checked and not kept: no forward reads them.
    pub async fn feed(&mut self, path: &str, data: Bytes) -> Result<()> {
        let i = self.blob_index(path)?;
        let blob = &self.blobs[i];
        if blob.fed {
            return Err(LoomError::InvalidInput(format!("blob {path} was already fed")));
        }
        if data.len() as u64 != blob.entry.length {
            return Err(LoomError::InvalidInput(format!(
                "blob {path} is {} bytes long (bytes {}..{} of the file), {} were fed",
                blob.entry.length,
                blob.range.start,
                blob.range.end,
                data.len()
            )));
        }
        let BlobTarget::Layer(layer_path) = blob.target.clone() else {
            entity::check_transformer_blob(&blob.entry, &data)?;
            self.blobs[i].fed = true;
            return Ok(());
        };
        let layer = self.model.layer_mut(&layer_path)?;
        entity::apply_layer_blob(layer, &blob.entry, data)?;
        let combinator = matches!(
            layer.layer_type,
            LayerType::Parallel | LayerType::Sequential | LayerType::Residual | LayerType::Metacognition
        );
        self.blobs[i].fed = true;
        let left = self.pending.get_mut(&layer_path).expect("counted in begin");
        *left -= 1;
        // A combinator's own blobs (Loom writes none) stay until the forward prepares what is inside it.
        if *left > 0 || combinator {
            return Ok(());
        }
        if self.top_disabled(&layer_path) {
            // Never run: nothing to upload, nothing to keep.
            let layer = self.model.layer_mut(&layer_path)?;
            layer.weights = None;
            layer.extra_blobs.clear();
            return Ok(());
        }
        self.model.prepare_layer(&layer_path).await?;
        self.model.drop_host_weights();
        Ok(())
    }

    /// Runs the network as [`GpuModel::forward`] does, once every blob has been fed.
    pub async fn forward(&mut self, input: &[f32], shape: &[usize]) -> Result<Tensor> {
        let missing: Vec<&str> = (self.blobs.iter().filter(|b| !b.fed))
            .map(|b| b.entry.path.as_str())
            .collect();
        if let Some(first) = missing.first() {
            return Err(LoomError::InvalidInput(format!(
                "{} of {} blobs have not been fed (first: {first}); feed every blob before a forward",
                missing.len(),
                self.blobs.len()
            )));
        }
        self.model.forward(input, shape).await
    }

    /// The topology with only blob `path`'s bytes installed, decoded as [`GpuStream::feed`] decodes them: for
    /// statistics or a preview of one layer without holding the others.
    pub fn with_blob(&self, path: &str, data: Bytes) -> Result<Network> {
        let blob = &self.blobs[self.blob_index(path)?];
        if data.len() as u64 != blob.entry.length {
            return Err(LoomError::InvalidInput(format!(
                "blob {path} is {} bytes long, got {}",
                blob.entry.length,
                data.len()
            )));
        }
        let mut net = self.model.network().clone();
        entity::apply(&mut net, &blob.entry, data)?;
        Ok(net)
    }

    fn blob_index(&self, path: &str) -> Result<usize> {
        self.blobs
            .iter()
            .position(|b| b.entry.path == path)
            .ok_or_else(|| LoomError::InvalidInput(format!("the file's blob table has no blob {path:?}")))
    }

    /// Whether the top-level layer holding `path` is disabled (a forward skips it).
    fn top_disabled(&self, path: &str) -> bool {
        let top = path.split('.').nth(1).and_then(|i| i.parse::<usize>().ok());
        top.and_then(|i| self.model.network().layers.get(i))
            .is_some_and(|l| l.is_disabled)
    }
}

/// The header from a prefix of the file: [`LoomError::NeedMore`] with the bytes needed when it is too short.
fn header_from_prefix(prefix: &[u8], file_len: u64) -> Result<entity::EntityHeader> {
    let need = |needed: u64| {
        if needed > file_len {
            LoomError::Truncated {
                what: "ENTITY header".into(),
                needed,
                available: file_len,
            }
        } else {
            LoomError::NeedMore {
                needed,
                available: prefix.len() as u64,
            }
        }
    };
    if prefix.len() < entity::PREAMBLE_LEN {
        return Err(need(entity::PREAMBLE_LEN as u64));
    }
    let end = entity::PREAMBLE_LEN as u64 + entity::header_len(prefix)?;
    if (prefix.len() as u64) < end {
        return Err(need(end));
    }
    entity::read_header(prefix)
}
