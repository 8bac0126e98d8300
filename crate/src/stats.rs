//! Weight statistics, previews and model diffs over dequantized values (for Loom layers, `GetActive`: what the CPU
//! forward reads). Tensors are read in chunks, so a large GGUF tensor is never dequantized whole.

use serde::Serialize;
use ts_rs::TS;

use crate::error::{LoomError, Result};
use crate::model::{LoadedModel, WeightTensor};
use crate::quant::CodeGroup;

/// Elements per chunk: a multiple of every ggml block size.
pub const CHUNK: usize = 1 << 16;

/// Counts of values in equal bins over `[min, max]` (numpy's `histogram`: the last bin includes `max`).
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct Histogram {
    pub min: f64,
    pub max: f64,
    pub counts: Vec<u64>,
}

/// A histogram of the values between two percentiles, for tensors whose few outliers would squeeze the rest into
/// one bin; `below` and `above` count the values left out.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct ClippedHistogram {
    /// The percentiles (0 to 100) the range was cut at.
    pub percentiles: [f64; 2],
    pub histogram: Histogram,
    pub below: u64,
    pub above: u64,
}

/// Summary of a tensor's values. Non-finite values are counted (`non_finite` = `nan` + `pos_inf` + `neg_inf`),
/// and left out of everything else.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct TensorStats {
    pub count: u64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Share of values that are exactly zero.
    pub sparsity: f64,
    pub non_finite: u64,
    pub nan: u64,
    pub pos_inf: u64,
    pub neg_inf: u64,
    /// Over every finite value, as numpy's `histogram`.
    pub histogram: Histogram,
    /// Present when outliers stretch the full range more than [`OUTLIER_SPREAD`] times the central range.
    pub clipped: Option<ClippedHistogram>,
}

/// Percentiles of the clipped histogram.
pub const CLIP_PERCENTILES: [f64; 2] = [0.1, 99.9];
/// How much wider than the central range the full range must be before a clipped histogram is drawn.
pub const OUTLIER_SPREAD: f64 = 8.0;

/// An order-preserving 16-bit bucket of a finite f32 (sign, exponent and 7 mantissa bits): percentiles of any
/// tensor in one pass and 256 KiB, to within 1/128 of the value.
fn bucket(v: f32) -> usize {
    let b = v.to_bits();
    let key = if b >> 31 == 1 { !b } else { b | 1 << 31 };
    (key >> 16) as usize
}

/// The smallest (`upper` false) or largest f32 in a bucket.
fn bucket_edge(bucket: usize, upper: bool) -> f64 {
    let key = (bucket as u32) << 16 | if upper { 0xffff } else { 0 };
    let bits = if key >> 31 == 1 { key & !(1 << 31) } else { !key };
    f64::from(f32::from_bits(bits))
}

/// The value range holding the percentiles `p` of `finite` values counted in `buckets`, widened to bucket edges.
fn percentile_range(buckets: &[u64], finite: u64, p: [f64; 2]) -> (f64, f64) {
    let find = |q: f64| {
        let rank = ((q / 100.0) * finite as f64).floor() as u64;
        let mut seen = 0;
        buckets
            .iter()
            .position(|&c| {
                seen += c;
                seen > rank.min(finite - 1)
            })
            .unwrap_or(buckets.len() - 1)
    };
    (bucket_edge(find(p[0]), false), bucket_edge(find(p[1]), true))
}

/// The first values of a tensor next to its stored codes.
/// In JavaScript `values` and `codes` are typed arrays, and `codes`/`groups` are absent rather than null.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[ts(rename = "TensorPreview")]
pub struct Preview {
    pub name: String,
    pub dtype: String,
    pub scale: Option<f32>,
    pub shape: Vec<u64>,
    /// Dequantized values.
    #[ts(type = "Float32Array")]
    pub values: Vec<f32>,
    /// The stored integer codes of narrow dtypes (int4 nibbles, fp8 bytes, f16 bits, ggml quants).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "Int32Array")]
    pub codes: Option<Vec<i32>>,
    /// For ggml block types, the block (or sub-block) scales and mins turning `codes` into `values`
    /// (value = scale·(code − zero) + min), in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub groups: Option<Vec<CodeGroup>>,
}

/// `bins + 1` edges from `lo` to `hi` as `numpy.linspace` computes them.
fn edges(lo: f64, hi: f64, bins: usize) -> Vec<f64> {
    let step = (hi - lo) / bins as f64;
    let mut e: Vec<f64> = (0..=bins)
        .map(|i| if step == 0.0 { i as f64 / bins as f64 * (hi - lo) } else { i as f64 * step } + lo)
        .collect();
    e[bins] = hi;
    e
}

/// The bin of `x` (within `[lo, hi]`), with numpy's corrections for values within an ulp of an edge.
fn bin_of(x: f64, lo: f64, hi: f64, edges: &[f64]) -> usize {
    let bins = edges.len() - 1;
    let mut i = ((x - lo) / (hi - lo) * bins as f64) as usize;
    if i >= bins {
        i = bins - 1;
    }
    if x < edges[i] {
        i = i.saturating_sub(1);
    } else if x >= edges[i + 1] && i != bins - 1 {
        i += 1;
    }
    i
}

/// Statistics of `tensor`'s values with a `bins`-bin histogram.
pub fn tensor_stats(tensor: &WeightTensor, bins: usize) -> Result<TensorStats> {
    if bins == 0 || bins > 1 << 16 {
        return Err(LoomError::InvalidInput(format!("{bins} histogram bins (1 to 65536)")));
    }
    let (mut finite, mut zeros, mut nan, mut pos_inf) = (0u64, 0u64, 0u64, 0u64);
    let (mut lo, mut hi, mut sum) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
    let mut buckets = vec![0u64; 1 << 16];
    for_each_chunk(tensor, |chunk| {
        for &x in chunk {
            let v = f64::from(x);
            zeros += u64::from(v == 0.0);
            if v.is_finite() {
                finite += 1;
                lo = lo.min(v);
                hi = hi.max(v);
                sum += v;
                buckets[bucket(x)] += 1;
            } else if v.is_nan() {
                nan += 1;
            } else if v > 0.0 {
                pos_inf += 1;
            }
        }
    })?;
    let count = tensor.count as u64;
    let neg_inf = count - finite - nan - pos_inf;
    if finite == 0 {
        return Ok(TensorStats {
            count,
            min: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
            std: f64::NAN,
            sparsity: if count == 0 { 0.0 } else { zeros as f64 / count as f64 },
            non_finite: count,
            nan: count - pos_inf - neg_inf,
            pos_inf,
            neg_inf,
            histogram: Histogram {
                min: f64::NAN,
                max: f64::NAN,
                counts: vec![0; bins],
            },
            clipped: None,
        });
    }
    let mean = sum / finite as f64;
    // numpy widens a zero-width range by 0.5 on each side.
    let (h_lo, h_hi) = if lo < hi { (lo, hi) } else { (lo - 0.5, hi + 0.5) };
    let e = edges(h_lo, h_hi, bins);
    let (p_lo, p_hi) = percentile_range(&buckets, finite, CLIP_PERCENTILES);
    let clip = p_lo < p_hi && hi - lo > OUTLIER_SPREAD * (p_hi - p_lo);
    let clip_edges = edges(p_lo, p_hi, bins);
    let mut counts = vec![0u64; bins];
    let mut clipped_counts = vec![0u64; bins];
    let (mut below, mut above) = (0u64, 0u64);
    let mut squares = 0f64;
    for_each_chunk(tensor, |chunk| {
        for &v in chunk {
            let v = f64::from(v);
            if v.is_finite() {
                squares += (v - mean) * (v - mean);
                counts[bin_of(v, h_lo, h_hi, &e)] += 1;
                if clip {
                    if v < p_lo {
                        below += 1;
                    } else if v > p_hi {
                        above += 1;
                    } else {
                        clipped_counts[bin_of(v, p_lo, p_hi, &clip_edges)] += 1;
                    }
                }
            }
        }
    })?;
    Ok(TensorStats {
        count,
        min: lo,
        max: hi,
        mean,
        std: (squares / finite as f64).sqrt(),
        sparsity: zeros as f64 / count as f64,
        non_finite: count - finite,
        nan,
        pos_inf,
        neg_inf,
        histogram: Histogram {
            min: h_lo,
            max: h_hi,
            counts,
        },
        clipped: clip.then_some(ClippedHistogram {
            percentiles: CLIP_PERCENTILES,
            histogram: Histogram {
                min: p_lo,
                max: p_hi,
                counts: clipped_counts,
            },
            below,
            above,
        }),
    })
}

fn for_each_chunk(tensor: &WeightTensor, mut f: impl FnMut(&[f32])) -> Result<()> {
    let mut start = 0;
    while start < tensor.count {
        let len = CHUNK.min(tensor.count - start);
        f(&tensor.values(start, len)?);
        start += len;
    }
    Ok(())
}

/// The first `n` values of `tensor` and, for narrow dtypes, their stored codes.
pub fn preview(tensor: &WeightTensor, n: usize) -> Result<Preview> {
    let n = n.min(tensor.count);
    Ok(Preview {
        name: tensor.name.clone(),
        dtype: tensor.dtype.clone(),
        scale: tensor.scale,
        shape: tensor.shape.clone(),
        values: tensor.values(0, n)?,
        codes: tensor.codes(n),
        groups: tensor.code_groups(n),
    })
}

/// How one layer or tensor differs between two models.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct DiffEntry {
    pub name: String,
    /// `same`, `changed`, `added` or `removed`.
    #[ts(type = r#""same" | "changed" | "added" | "removed""#)]
    pub status: &'static str,
    pub dtype_before: Option<String>,
    pub dtype_after: Option<String>,
    /// Largest and mean absolute difference of the values, when both sides have as many values and they can be
    /// dequantized.
    pub max_abs: Option<f64>,
    pub mean_abs: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[ts(rename = "ModelDiff")]
pub struct Diff {
    pub entries: Vec<DiffEntry>,
}

/// Compares the weights of two models, matching layers by path and tensors by name: entries in `before`'s order,
/// then those only `after` has. A GGUF against an HF safetensors file matches by HF name (`blk.0.attn_q.weight` is
/// `model.layers.0.self_attn.q_proj.weight`), with llama.cpp's permuted q/k rows put back in HF's order, so the
/// same model in both formats compares equal.
pub fn diff(before: &LoadedModel, after: &LoadedModel) -> Result<Diff> {
    let old = before.weight_tensors()?;
    let new = after.weight_tensors()?;
    let (keys_old, keys_new) = (Keys::of(before, &old, &new), Keys::of(after, &new, &old));
    let mut entries = Vec::new();
    for (i, a) in old.iter().enumerate() {
        let Some(j) = (0..new.len()).find(|&j| keys_new.key(&new, j) == keys_old.key(&old, i)) else {
            entries.push(DiffEntry {
                name: a.name.clone(),
                status: "removed",
                dtype_before: Some(a.dtype.clone()),
                dtype_after: None,
                max_abs: None,
                mean_abs: None,
            });
            continue;
        };
        entries.push(compare(a, &new[j], keys_old.rows(i), keys_new.rows(j))?);
    }
    for (j, b) in new.iter().enumerate() {
        if !(0..old.len()).any(|i| keys_old.key(&old, i) == keys_new.key(&new, j)) {
            entries.push(DiffEntry {
                name: b.name.clone(),
                status: "added",
                dtype_before: None,
                dtype_after: Some(b.dtype.clone()),
                max_abs: None,
                mean_abs: None,
            });
        }
    }
    Ok(Diff { entries })
}

/// The names one side's tensors are matched by: their own, or, for a GGUF diffed against HF names, the HF names
/// with the q/k row order to restore (`(heads, head_dim)`).
struct Keys {
    hf: Option<Vec<HfKey>>,
}

/// A GGUF tensor's HF name (`None`: not a decoder tensor) and the q/k rows to restore.
type HfKey = (Option<String>, Option<(usize, usize)>);

impl Keys {
    fn of(model: &LoadedModel, tensors: &[WeightTensor], other: &[WeightTensor]) -> Keys {
        use crate::llm::config::RopeStyle;
        use crate::llm::weights::Role;
        let crate::model::Contents::Gguf { header, .. } = &model.contents else {
            return Keys { hf: None };
        };
        if !other
            .iter()
            .any(|t| t.name.starts_with("model.layers.") || t.name == "model.embed_tokens.weight")
        {
            return Keys { hf: None };
        }
        // llama GGUFs hold q/k rows permuted for adjacent-pair RoPE (see llm::config).
        let permuted = crate::llm::model::gguf_config(header)
            .ok()
            .map(|(c, _)| c)
            .filter(|c| c.rope_style == RopeStyle::Adjacent);
        let hf = tensors
            .iter()
            .map(|t| match crate::llm::sources::hf_name_of_gguf(&t.name) {
                Some((name, role)) => {
                    let rows = match (&permuted, role) {
                        (Some(c), Some(Role::Q)) => Some((c.n_heads, c.head_dim)),
                        (Some(c), Some(Role::K)) => Some((c.n_kv_heads, c.head_dim)),
                        _ => None,
                    };
                    (Some(name), rows)
                }
                None => (None, None),
            })
            .collect();
        Keys { hf: Some(hf) }
    }

    fn key<'a>(&'a self, tensors: &'a [WeightTensor], i: usize) -> &'a str {
        match &self.hf {
            Some(hf) => hf[i].0.as_deref().unwrap_or(&tensors[i].name),
            None => &tensors[i].name,
        }
    }

    fn rows(&self, i: usize) -> Option<(usize, usize)> {
        self.hf.as_ref().and_then(|hf| hf[i].1)
    }
}

/// All of `t`'s values, with permuted q/k rows (`rows`: heads, head_dim) put back in HF's order.
fn reordered(t: &WeightTensor, rows: (usize, usize)) -> Result<Vec<f32>> {
    let values = t.values(0, t.count)?;
    let (heads, head_dim) = rows;
    let cols = t.shape.get(1).copied().unwrap_or(0) as usize;
    if t.shape.len() != 2 || heads * head_dim * cols != values.len() || head_dim % 2 != 0 {
        return Err(LoomError::InvalidNetwork(format!(
            "{}: shape {:?} is not {heads} heads of {head_dim} rows",
            t.name, t.shape
        )));
    }
    Ok(crate::llm::entity::unpermute_rows(&values, heads, head_dim, cols))
}

fn compare(
    a: &WeightTensor,
    b: &WeightTensor,
    rows_a: Option<(usize, usize)>,
    rows_b: Option<(usize, usize)>,
) -> Result<DiffEntry> {
    let mut entry = DiffEntry {
        name: a.name.clone(),
        status: "changed",
        dtype_before: Some(a.dtype.clone()),
        dtype_after: Some(b.dtype.clone()),
        max_abs: None,
        mean_abs: None,
    };
    if a.count != b.count || a.shape != b.shape {
        return Ok(entry);
    }
    // A reordered side is read whole (q/k matrices); the others in chunks.
    let whole = |t: &WeightTensor, rows: Option<(usize, usize)>| rows.map(|r| reordered(t, r)).transpose();
    let (whole_a, whole_b) = match (whole(a, rows_a), whole(b, rows_b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(LoomError::UnsupportedDType(_)), _) | (_, Err(LoomError::UnsupportedDType(_))) => return Ok(entry),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let values = |t: &WeightTensor, whole: &Option<Vec<f32>>, start: usize, len: usize| match whole {
        Some(v) => Ok(v[start..start + len].to_vec()),
        None => t.values(start, len),
    };
    let mut identical = a.dtype == b.dtype;
    let (mut max_abs, mut sum_abs) = (0f64, 0f64);
    let mut start = 0;
    while start < a.count {
        let len = CHUNK.min(a.count - start);
        let (va, vb) = match (values(a, &whole_a, start, len), values(b, &whole_b, start, len)) {
            (Ok(va), Ok(vb)) => (va, vb),
            // Values we cannot dequantize: compare what is stored.
            (Err(LoomError::UnsupportedDType(_)), _) | (_, Err(LoomError::UnsupportedDType(_))) => {
                if identical && a.stored_bytes() == b.stored_bytes() && a.stored_bytes().is_some() {
                    entry.status = "same";
                }
                return Ok(entry);
            }
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        for (x, y) in va.iter().zip(&vb) {
            if x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()) {
                identical = false;
            }
            let d = (f64::from(*x) - f64::from(*y)).abs();
            if d.is_finite() {
                max_abs = max_abs.max(d);
                sum_abs += d;
            }
        }
        start += len;
    }
    entry.max_abs = Some(max_abs);
    entry.mean_abs = Some(if a.count == 0 { 0.0 } else { sum_abs / a.count as f64 });
    if identical {
        entry.status = "same";
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_like_numpy_linspace() {
        assert_eq!(edges(0.0, 1.0, 4), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        // Values on interior edges go to the upper bin, the maximum to the last bin.
        let e = edges(-1.0, 1.0, 4);
        assert_eq!(bin_of(-0.5, -1.0, 1.0, &e), 1);
        assert_eq!(bin_of(1.0, -1.0, 1.0, &e), 3);
        assert_eq!(bin_of(-1.0, -1.0, 1.0, &e), 0);
    }

    #[test]
    fn buckets_keep_the_order_of_floats_and_their_edges_hold_them() {
        let values = [
            f32::MIN,
            -1e30,
            -2.5,
            -1e-40,
            -0.0,
            0.0,
            1e-40,
            1.0,
            3.25,
            1e30,
            f32::MAX,
        ];
        for w in values.windows(2) {
            assert!(bucket(w[0]) <= bucket(w[1]), "{} {}", w[0], w[1]);
        }
        for v in values {
            let b = bucket(v);
            assert!(
                bucket_edge(b, false) <= f64::from(v) && f64::from(v) <= bucket_edge(b, true),
                "{v}"
            );
        }
    }
}
