//! A layer's weights: the float32 master, the scale and the quantized versions (spec §2–4).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::dtype::{self, DType};
use crate::error::{LoomError, Result};

/// Loom's `WeightStore`. Quantized versions are kept as Loom's native packed bytes exactly as read or morphed,
/// so a save writes them back verbatim (spec §9). The master is derived lazily from a loaded version.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightStore {
    count: usize,
    scale: f32,
    master: Option<Vec<f32>>,
    versions: BTreeMap<DType, Bytes>,
    /// The version the master unpacks from while it has not been materialised.
    source: Option<DType>,
}

impl WeightStore {
    /// A store holding float32 master weights with scale 1, as a freshly built Loom layer.
    pub fn from_master(master: Vec<f32>) -> WeightStore {
        WeightStore {
            count: master.len(),
            scale: 1.0,
            master: Some(master),
            versions: BTreeMap::new(),
            source: None,
        }
    }

    /// A store loaded from Loom's native bytes of `dtype` for a layer of `count` weights.
    /// The byte length must be exactly what Loom writes for `count` elements.
    /// `bytes` may be a slice of a larger buffer (e.g. the whole file): it is kept without copying.
    pub fn from_native(
        dtype: DType,
        bytes: impl Into<Bytes>,
        scale: f32,
        count: usize,
        path: &str,
    ) -> Result<WeightStore> {
        let bytes = bytes.into();
        check_len(dtype, bytes.len(), count, path)?;
        let mut versions = BTreeMap::new();
        versions.insert(dtype, bytes);
        Ok(WeightStore {
            count,
            scale,
            master: None,
            versions,
            source: Some(dtype),
        })
    }

    /// A store loaded through Loom's legacy path (`native: false`): float32 bytes become the master, then the
    /// layer is morphed to `dtype` with the given scale (auto-scaled when it is 1).
    pub fn from_legacy(dtype: DType, bytes: &[u8], scale: f32, count: usize, path: &str) -> Result<WeightStore> {
        check_len(DType::Float32, bytes.len(), count, path)?;
        let master = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let mut ws = WeightStore::from_master(master);
        ws.scale = scale;
        ws.morph(dtype);
        // Auto-scaling a master that holds ±Inf (or a sum beyond float32) gives a scale no file can hold.
        if !ws.scale.is_finite() {
            return Err(LoomError::InvalidScale {
                path: path.to_string(),
                scale: ws.scale,
            });
        }
        Ok(ws)
    }

    /// Number of weights.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when the store holds no weights.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The layer scale (sticky once auto-scaled).
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The float32 master, unpacked from the loaded version on first use (Loom's `Unpack`).
    pub fn master(&mut self) -> &[f32] {
        if self.master.is_none() {
            self.master = Some(self.compute_master());
            self.source = None;
        }
        self.master.as_deref().unwrap_or_default()
    }

    /// The master without caching it.
    pub fn master_values(&self) -> Vec<f32> {
        match &self.master {
            Some(m) => m.clone(),
            None => self.compute_master(),
        }
    }

    fn compute_master(&self) -> Vec<f32> {
        let dt = self.source.expect("a store without master has a source version");
        dtype::unpack(dt, &self.versions[&dt], self.scale, self.count)
    }

    /// The cached native bytes of `dt`, if that version exists.
    pub fn version(&self, dt: DType) -> Option<&[u8]> {
        self.versions.get(&dt).map(|b| &b[..])
    }

    /// [`WeightStore::version`] as a shared buffer (a slice of the file it was read from, not a copy).
    pub fn version_bytes(&self, dt: DType) -> Option<Bytes> {
        self.versions.get(&dt).cloned()
    }

    /// Loom's `Morph(dt)`: quantizes the master to `dt` unless that version is cached. Auto-scales first when
    /// the scale is still exactly 1 (spec §2). float32 needs no version: the master is used.
    pub fn morph(&mut self, dt: DType) {
        if dt == DType::Float32 || self.versions.contains_key(&dt) {
            return;
        }
        let scale = self.scale;
        let master = self.master();
        let scale = if scale == 1.0 && !master.is_empty() {
            dtype::auto_scale(dt, master)
        } else {
            scale
        };
        let bytes = dtype::quantize(dt, master, scale);
        self.scale = scale;
        self.versions.insert(dt, Bytes::from(bytes));
    }

    /// The bytes a save writes for `dt`: the cached version, or the float32 master encoded. Call
    /// [`WeightStore::morph`] first for other dtypes.
    pub fn native_bytes(&self, dt: DType) -> Option<std::borrow::Cow<'_, [u8]>> {
        if let Some(v) = self.versions.get(&dt) {
            return Some(std::borrow::Cow::Borrowed(v));
        }
        if dt != DType::Float32 {
            return None;
        }
        // A store loaded as another dtype has no master yet: encode the values it unpacks to.
        Some(std::borrow::Cow::Owned(match &self.master {
            Some(m) => f32_bytes(m),
            None => f32_bytes(&self.compute_master()),
        }))
    }

    /// The values forward reads for `dt` (Loom's `GetActive`): the dequantized version, or the master.
    pub fn active(&self, dt: DType) -> Vec<f32> {
        match self.versions.get(&dt) {
            // Loom's decoded int8 Version is unusable for GetActive, which falls back to the unpacked master.
            Some(v) if dt != DType::Float32 && !(dt == DType::Int8 && self.source == Some(dt)) => {
                dtype::dequantize(dt, v, self.scale, self.count)
            }
            _ => self.master_values(),
        }
    }
}

/// Little-endian bytes of float32 values (Loom's float32 encoding), in one allocation.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 * values.len());
    values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    out
}

/// Checks that `len` bytes are exactly Loom's native size for `count` elements of `dt`.
fn check_len(dt: DType, len: usize, count: usize, path: &str) -> Result<()> {
    let expected = dt.packed_len(count);
    if expected != Some(len) {
        return Err(LoomError::BlobLength {
            path: path.to_string(),
            dtype: dt.name().to_string(),
            count: count as u64,
            expected: expected.map_or(u64::MAX, |e| e as u64),
            actual: len as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_is_sticky_across_morphs() {
        let mut ws = WeightStore::from_master(vec![1.27, -0.5, 0.1]);
        ws.morph(DType::Int8);
        let s = ws.scale();
        assert_eq!(s, 1.27f32 / 127.0);
        ws.morph(DType::Int4);
        assert_eq!(ws.scale(), s);
        // 1.27/s = 127 clamps to 7 in int4.
        assert_eq!(ws.active(DType::Int4)[0], 7.0 * s);
    }

    #[test]
    fn native_load_keeps_bytes_and_unpacks_lazily() {
        let bytes = vec![0x7F, 0x81];
        let mut ws = WeightStore::from_native(DType::Int4, bytes.clone(), 0.5, 3, "layers.0").unwrap();
        assert_eq!(ws.version(DType::Int4), Some(&bytes[..]));
        assert_eq!(ws.master(), &[3.5, -0.5, -4.0]);
        assert!(WeightStore::from_native(DType::Int4, bytes, 0.5, 5, "layers.0").is_err());
    }
}
