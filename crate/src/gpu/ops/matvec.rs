//! Host for `shaders/matvec.wgsl`: `y = act(W·x)` per batch row with the weights kept packed on the GPU in their
//! stored bytes and decoded in the kernel. CPU twins: `crate::cpu` Dense (Loom's dtypes, bit-exact with Loom),
//! [`crate::dtype::q4_0::Q4Blocks::dequantize`] (Loom's Q4_0) and [`crate::quant::dequantize`] (llama.cpp).
//!
//! One kernel body serves every encoding: the WGSL is specialised by text, each encoding prepending its decode
//! function (see the shader's header). A tensor larger than the device's storage-binding limit is split across up
//! to [`MAX_WEIGHT_BINDINGS`] bindings.

use std::fmt::Write as _;
use std::sync::Arc;

use super::kernel::{dispatch, dispatch_3d, grid_for, u32_dim};
use super::tensor::check_values;
use super::{Pointwise, Rows, ACTIVATION_WGSL};
use crate::dtype::{q4_0, DType};
use crate::error::{LoomError, Result};
use crate::gpu::Recorder;
use crate::gpu::{Gpu, PipelineKey};
use crate::quant::{self, GgmlType};

const MATVEC_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/matvec.wgsl"));

/// The most weight bindings one kernel reads: larger tensors are refused.
pub const MAX_WEIGHT_BINDINGS: usize = 4;

/// The binding of x_norm's γ, after the weights' (`shaders/matvec.wgsl`).
const GAMMA_BINDING: u32 = 3 + MAX_WEIGHT_BINDINGS as u32;

/// What a matvec does around its product.
#[derive(Clone, Copy, Debug, Default)]
pub struct MatVecOptions<'a> {
    /// RMSNorm of each row of x with gain γ (`n_in` values) and epsilon, folded into the product: the norm costs no
    /// dispatch of its own. CPU twin: `cpu::ops::rms_norm_into`, then the product.
    pub norm: Option<(&'a wgpu::Buffer, f32)>,
    /// `y += act(W·x)` (a residual add) instead of `y = act(W·x)`.
    pub accumulate: bool,
    /// x is a gated unit's product `g(gate)·up`, read from rows of `2·n_in` holding gate then up (a fused gate|up
    /// matvec's output) with `g` this function: the product costs no dispatch of its own. CPU twin:
    /// `cpu::ops` SwiGLU/GeGLU, then the product. Not with `norm`.
    pub glu: Option<Pointwise>,
}

impl MatVecOptions<'_> {
    /// Values in a row of x for weights of `n_in` columns: gate and up side by side with a gated product.
    fn x_cols(&self, n_in: usize) -> usize {
        if self.glu.is_some() {
            2 * n_in
        } else {
            n_in
        }
    }
}

/// How the kernel reads x: as it is, under a folded RMSNorm, or as a gated unit's product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XRead {
    Plain,
    Norm,
    Glu,
}

impl XRead {
    pub(crate) fn name(self) -> &'static str {
        match self {
            XRead::Plain => "x",
            XRead::Norm => "norm",
            XRead::Glu => "glu",
        }
    }

    fn of(options: &MatVecOptions) -> XRead {
        match (options.norm, options.glu) {
            (Some(_), _) => XRead::Norm,
            (None, Some(_)) => XRead::Glu,
            (None, None) => XRead::Plain,
        }
    }
}

/// Workgroups of the tiled body's 64 rows from which it runs a lane a row on GPUs (4 lanes a row below).
pub const TILED_FULL_GROUPS: u32 = 128;
/// The fewest rows, and the widest, of a one-row product that runs tiled on GPUs (`MatVec::tiled_decode`).
const TILED_DECODE_ROWS: usize = 16384;
const TILED_DECODE_WIDTH: usize = 1024;

/// A section of `shaders/matvec.wgsl` (between `// @@ name` and the next marker).
fn section(name: &str) -> &'static str {
    let marker = format!("// @@ {name}\n");
    let start = MATVEC_WGSL
        .find(&marker)
        .unwrap_or_else(|| panic!("shaders/matvec.wgsl has no section {name}"))
        + marker.len();
    let end = MATVEC_WGSL[start..]
        .find("// @@ ")
        .map_or(MATVEC_WGSL.len(), |e| start + e);
    &MATVEC_WGSL[start..end]
}

/// How a weight tensor is stored, i.e. which decoder the kernel gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packing {
    /// Loom's native bytes of a dtype (spec §4), dequantized as Loom's `GetActive` does (value × layer scale).
    Loom(DType),
    /// Loom's Q4_0 blob payload (spec §8), header included.
    LoomQ4_0,
    /// llama.cpp blocks, back to back: one of [`GPU_GGML_TYPES`].
    Ggml(GgmlType),
}

/// The ggml block types the kernel decodes (F32/F16/BF16 tensors go through [`Packing::for_block_type`]).
pub const GPU_GGML_TYPES: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::LoomQ4_0,
];

impl Packing {
    /// The packing that reads a tensor of block type `t` as stored: float types as Loom's identical float codes,
    /// block types as themselves.
    pub fn for_block_type(t: GgmlType) -> Result<Packing> {
        match t {
            GgmlType::F32 => Ok(Packing::Loom(DType::Float32)),
            GgmlType::F16 => Ok(Packing::Loom(DType::Float16)),
            GgmlType::BF16 => Ok(Packing::Loom(DType::BFloat16)),
            t if GPU_GGML_TYPES.contains(&t) => Ok(Packing::Ggml(t)),
            t => Err(LoomError::UnsupportedDType(format!("{t} blocks on the GPU"))),
        }
    }

    /// Elements per unit (the shader's `EPU`): the smallest run of elements whose bytes are self-contained.
    fn unit_elements(self, shader_f16: bool) -> usize {
        match self {
            Packing::Loom(DType::Float16) if shader_f16 => 2,
            Packing::Loom(dt) if dt.bits() == 64 => 1,
            Packing::Loom(dt) => 32 / dt.bits(),
            Packing::LoomQ4_0 => q4_0::BLOCK,
            Packing::Ggml(t) => t.block_len(),
        }
    }

    pub(crate) fn key(self) -> String {
        match self {
            Packing::Loom(dt) => dt.name().to_string(),
            Packing::LoomQ4_0 => "loom_q4_0".into(),
            Packing::Ggml(t) => format!("ggml_{}", t.name().to_ascii_lowercase()),
        }
    }

    /// True when a `shader-f16` path exists: float16 weights. (The block formats' f16 scales, one per 32
    /// elements, are always decoded in integer ops.)
    pub fn has_halves(self) -> bool {
        self == Packing::Loom(DType::Float16)
    }

    /// The factor the kernel multiplies each row sum by, from the layer's scale: `GetActive` ignores the scale of
    /// float32/16/64 and bfloat16, and reads a zero scale as 1 for fp4 (and, through Loom's `Unpack`, for a
    /// loaded int8 layer; a quantized int8 layer with scale 0 has only zero codes, so 1 is right for it too).
    pub fn kernel_scale(self, scale: f32) -> f32 {
        match self {
            Packing::Loom(DType::Float32 | DType::Float16 | DType::BFloat16 | DType::Float64) => 1.0,
            Packing::Loom(DType::Fp4 | DType::Int8) if scale == 0.0 => 1.0,
            Packing::Loom(_) => scale,
            Packing::LoomQ4_0 | Packing::Ggml(_) => 1.0,
        }
    }

    /// Checks that `bytes` hold `n` elements; returns the kernel's `aux` parameter.
    fn check(self, bytes: &[u8], n: usize) -> Result<u32> {
        let short = |needed: Option<usize>| -> Result<u32> {
            match needed {
                Some(needed) if bytes.len() >= needed => Ok(0),
                _ => Err(LoomError::InvalidInput(format!(
                    "matvec {}: {} bytes do not hold {n} weights",
                    self.key(),
                    bytes.len()
                ))),
            }
        };
        match self {
            Packing::Loom(dt) => short(dt.packed_len(n)),
            Packing::Ggml(t) if !GPU_GGML_TYPES.contains(&t) => Err(LoomError::UnsupportedDType(format!(
                "matvec: ggml {t} blocks on the GPU"
            ))),
            Packing::Ggml(t) => short(n.div_ceil(t.block_len()).checked_mul(t.block_bytes())),
            Packing::LoomQ4_0 => {
                let blocks = q4_0::Q4Blocks::parse(bytes)?;
                if blocks.scales.len() * q4_0::BLOCK < n {
                    return Err(LoomError::InvalidInput(format!(
                        "matvec Loom Q4_0: {} blocks do not hold {n} weights",
                        blocks.scales.len()
                    )));
                }
                Ok(blocks.scales.len() as u32)
            }
        }
    }

    /// The module for this encoding with `parts` weight bindings, computing `bt` (1, 4 or 16) batch rows at a time, with
    /// `body` (the `matvec` or `gather` entry point).
    fn source(self, shader_f16: bool, parts: usize, bt: u32, x: XRead, body: &str) -> String {
        let mut s = String::new();
        if shader_f16 {
            s.push_str("enable f16;\n\n");
        }
        s.push_str(ACTIVATION_WGSL);
        s.push_str(section("common"));
        s.push_str(section(match bt {
            1 => "xv1",
            4 => "xv4",
            _ => "xv16",
        }));
        if bt != 16 {
            s.push_str(section("xv_vector"));
        }
        s.push_str(section(match x {
            XRead::Plain => "x_plain",
            XRead::Norm => "x_norm",
            XRead::Glu => "x_glu",
        }));
        s.push_str(section(if body == "body_tiled" { "x_tile" } else { "x_direct" }));
        // float16 on the shader-f16 path reads its words as pairs of halves.
        let ty = if shader_f16 { "vec2<f16>" } else { "u32" };
        for k in 0..parts {
            let _ = writeln!(s, "@group(0) @binding({}) var<storage, read> w{k}: array<{ty}>;", 3 + k);
        }
        if parts == 1 {
            let _ = writeln!(s, "fn word(i: u32) -> {ty} {{\n    return w0[i];\n}}");
        } else {
            let _ = writeln!(s, "fn word(i: u32) -> {ty} {{\n    let part = i / p.words_per_part;");
            s.push_str("    let j = i - part * p.words_per_part;\n");
            for k in 0..parts - 1 {
                let _ = writeln!(s, "    if part == {k}u {{\n        return w{k}[j];\n    }}");
            }
            let _ = writeln!(s, "    return w{}[j];\n}}", parts - 1);
        }
        if shader_f16 {
            s.push_str(section("float16_native"));
            push_body(&mut s, body, bt);
            return s;
        }
        s.push_str(section("half"));
        match self {
            Packing::Loom(dt) if dt.bits() == 64 => {
                s.push_str(section("ints"));
                s.push_str(section(&format!("code64_{}", dt.name())));
                s.push_str(section("wide64"));
            }
            Packing::Loom(dt) => {
                let bits = dt.bits();
                let mask = u32::MAX >> (32 - bits);
                let _ = writeln!(
                    s,
                    "const BITS: u32 = {bits}u;\nconst EPU: u32 = {}u;\nconst MASK: u32 = {mask:#x}u;",
                    32 / bits
                );
                if bits < 8 {
                    let _ = writeln!(s, "const PER_BYTE: u32 = {}u;", 8 / bits);
                    s.push_str(section("field_msb"));
                } else {
                    s.push_str(section("field_le"));
                }
                s.push_str(section("ints"));
                s.push_str(section(&format!("code_{}", dt.name())));
                s.push_str(section("packed"));
            }
            Packing::LoomQ4_0 => s.push_str(section("loom_q4_0")),
            Packing::Ggml(t) => {
                s.push_str(section("ggml_bytes"));
                if matches!(t, GgmlType::Q4_K | GgmlType::Q5_K) {
                    s.push_str(section("ggml_kquant_scales"));
                }
                s.push_str(section(&self.key()));
            }
        }
        push_body(&mut s, body, bt);
        s
    }
}

/// Marks "no bias" in the kernel's `bias` parameter.
const NO_BIAS: u32 = u32::MAX;

/// A stored weight tensor on the GPU in its packed bytes (split across bindings when it is too large for one), seen
/// as the `[n_out][n_in]` matrix that starts at element `first`, optionally with a bias row of `n_out` elements at
/// element `bias` of the same tensor (decoded and scaled as the weights are). Views of one tensor share its buffers,
/// so a layer whose store holds several matrices and biases (SwiGLU, MultiHeadAttention) uploads it once. Views
/// address elements, not bytes: a matrix of a sub-byte dtype may start inside a word.
#[derive(Clone)]
pub struct PackedWeights {
    pub packing: Packing,
    pub n_in: usize,
    pub n_out: usize,
    first: u32,
    bias: u32,
    /// Elements in the stored tensor.
    len: usize,
    scale: f32,
    aux: u32,
    words_per_part: u32,
    /// Buffer handles (cheap to clone): views of one tensor share the buffers.
    parts: Vec<wgpu::Buffer>,
    bytes: u64,
}

impl PackedWeights {
    /// The GPU buffers holding the tensor (views of one tensor share them).
    pub fn buffers(&self) -> &[wgpu::Buffer] {
        &self.parts
    }

    /// Uploads `bytes` (`scale` is Loom's layer scale; ignored by the encodings that have none), splitting them
    /// across bindings of at most the device's `max_storage_buffer_binding_size`.
    pub async fn upload(
        gpu: &Gpu,
        packing: Packing,
        bytes: &[u8],
        scale: f32,
        n_in: usize,
        n_out: usize,
    ) -> Result<PackedWeights> {
        let limit = gpu.limits.max_storage_buffer_binding_size;
        PackedWeights::upload_split(gpu, packing, bytes, scale, n_in, n_out, limit).await
    }

    /// [`PackedWeights::upload`] with bindings of at most `max_binding_bytes` (rounded down to whole words; tests
    /// force small splits with it). More than [`MAX_WEIGHT_BINDINGS`] bindings is an error.
    pub async fn upload_split(
        gpu: &Gpu,
        packing: Packing,
        bytes: &[u8],
        scale: f32,
        n_in: usize,
        n_out: usize,
        max_binding_bytes: u64,
    ) -> Result<PackedWeights> {
        let n = n_in.checked_mul(n_out).ok_or_else(|| too_many(n_in, n_out))?;
        let tensor = PackedWeights::upload_tensor_split(gpu, packing, bytes, scale, n, max_binding_bytes).await?;
        tensor.matrix(0, n_in, n_out, None)
    }

    /// Uploads a stored tensor of `len` elements (a layer's whole store), to be read through [`PackedWeights::matrix`]
    /// views.
    pub async fn upload_tensor(
        gpu: &Gpu,
        packing: Packing,
        bytes: &[u8],
        scale: f32,
        len: usize,
    ) -> Result<PackedWeights> {
        let limit = gpu.limits.max_storage_buffer_binding_size;
        PackedWeights::upload_tensor_split(gpu, packing, bytes, scale, len, limit).await
    }

    async fn upload_tensor_split(
        gpu: &Gpu,
        packing: Packing,
        bytes: &[u8],
        scale: f32,
        len: usize,
        max_binding_bytes: u64,
    ) -> Result<PackedWeights> {
        // The kernel indexes elements in u32, with room to round up to a whole unit.
        if len > (u32::MAX - 64) as usize {
            return Err(LoomError::Unsupported(format!(
                "matvec weights of {len} elements: more than 2^32"
            )));
        }
        let aux = packing.check(bytes, len)?;
        let words = bytes.len().div_ceil(4) as u64;
        if words > u64::from(u32::MAX) {
            return Err(LoomError::Unsupported("matvec weights over 16 GiB".into()));
        }
        let (words_per_part, n_parts) = binding_parts(max_binding_bytes, bytes.len() as u64);
        let n_parts = n_parts as usize;
        if n_parts > MAX_WEIGHT_BINDINGS {
            return Err(LoomError::Unsupported(format!(
                "matvec weights of {} bytes need {n_parts} bindings of {max_binding_bytes} bytes; at most \
                 {MAX_WEIGHT_BINDINGS} are supported",
                bytes.len()
            )));
        }
        let mut parts = Vec::with_capacity(n_parts);
        let chunk = (4 * words_per_part) as usize;
        for (k, c) in bytes.chunks(chunk).enumerate() {
            parts.push(gpu.upload(&format!("weights part {k}"), c).await?);
        }
        if parts.is_empty() {
            parts.push(gpu.upload("weights", &[]).await?);
        }
        Ok(PackedWeights {
            packing,
            n_in: len,
            n_out: 1,
            first: 0,
            bias: NO_BIAS,
            len,
            scale: packing.kernel_scale(scale),
            aux,
            words_per_part: words_per_part as u32,
            parts,
            bytes: bytes.len() as u64,
        })
    }

    /// The `[n_out][n_in]` matrix at element `first` of the same stored tensor, plus `n_out` bias values at element
    /// `bias` when given; both must lie inside the tensor.
    pub fn matrix(&self, first: usize, n_in: usize, n_out: usize, bias: Option<usize>) -> Result<PackedWeights> {
        let n = n_in.checked_mul(n_out).ok_or_else(|| too_many(n_in, n_out))?;
        let inside = |start: usize, n: usize| start.checked_add(n).is_some_and(|end| end <= self.len);
        if !inside(first, n) || bias.is_some_and(|b| !inside(b, n_out)) {
            return Err(LoomError::InvalidNetwork(format!(
                "a {n_out}×{n_in} matrix at element {first} (bias at {bias:?}) does not fit {} weights",
                self.len
            )));
        }
        Ok(PackedWeights {
            n_in,
            n_out,
            first: first as u32,
            bias: bias.map_or(NO_BIAS, |b| b as u32),
            parts: self.parts.clone(),
            ..*self
        })
    }

    /// The kernel's parameter words (`Params` in the shader).
    fn params(&self, act: u32, groups_x: u32, batch: u32, options: &MatVecOptions) -> [u32; 13] {
        [
            self.n_in as u32,
            self.n_out as u32,
            act,
            groups_x,
            self.scale.to_bits(),
            self.words_per_part,
            self.aux,
            batch,
            self.first,
            self.bias,
            options.norm.map_or(0.0, |(_, eps)| eps).to_bits(),
            u32::from(options.accumulate),
            options.glu.map_or(0, Pointwise::id),
        ]
    }

    /// The kernel's buffers: `x` and `y`, then the weight parts, then the norm's γ if there is one.
    fn bindings<'a>(
        &'a self,
        x: &'a wgpu::Buffer,
        y: &'a wgpu::Buffer,
        gamma: Option<&'a wgpu::Buffer>,
    ) -> Vec<(u32, &'a wgpu::Buffer)> {
        let mut buffers = vec![(1, x), (2, y)];
        buffers.extend(self.parts.iter().enumerate().map(|(k, b)| (3 + k as u32, b)));
        buffers.extend(gamma.map(|g| (GAMMA_BINDING, g)));
        buffers
    }

    /// Number of weight bindings.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Size of the stored weights in bytes.
    pub fn byte_len(&self) -> u64 {
        self.bytes
    }

    /// Bytes of the stored weights this view's matrix covers (its share of the tensor).
    fn view_bytes(&self) -> u64 {
        let n = (self.n_in * self.n_out) as f64;
        (self.bytes as f64 * n / self.len.max(1) as f64) as u64
    }
}

fn too_many(n_in: usize, n_out: usize) -> LoomError {
    LoomError::Unsupported(format!("matvec of {n_out}×{n_in} weights: more than 2^32 elements"))
}

/// Appends the entry point's section: `body_subgroups` builds on `body`'s per-lane sum and adds XV (a matrix for 16
/// batch rows) across a subgroup.
fn push_body(s: &mut String, body: &str, bt: u32) {
    if body == "body_subgroups" {
        s.push_str(section("body"));
        s.push_str(section(if bt == 16 { "sg_matrix" } else { "sg_vector" }));
    }
    s.push_str(section(body));
}

/// How a matvec spreads a row over lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowLayout {
    /// A 64-lane workgroup per output row, reduced in shared memory: GPUs without subgroups.
    Workgroup,
    /// A 64-lane workgroup per output row, reduced by subgroup operations: GPUs with subgroups (natively).
    Subgroups,
    /// One lane per output row, 64 rows per workgroup: CPU adapters (lavapipe, SwiftShader), whose lanes are SIMD
    /// lanes and whose barriers are costly.
    Lane,
}

impl RowLayout {
    /// The layout that suits `gpu`'s adapter.
    pub fn for_adapter(gpu: &Gpu) -> RowLayout {
        if gpu.info.device_type == wgpu::DeviceType::Cpu {
            RowLayout::Lane
        } else if gpu.has_subgroups {
            RowLayout::Subgroups
        } else {
            RowLayout::Workgroup
        }
    }
}

/// A matrix-vector kernel for one weight encoding.
pub struct MatVec {
    packing: Packing,
    shader_f16: bool,
    layout: RowLayout,
    /// Workgroups of 64 rows from which the tiled body runs a lane a row ([`MatVec::set_tiled_full_groups`]).
    full_groups: u32,
    /// Rows a lane of the tiled body takes where it runs a lane a row or more ([`MatVec::set_tiled_rows`]); none:
    /// the layout's choice.
    tiled_rows: Option<u32>,
}

impl MatVec {
    /// The float32 kernel.
    pub fn f32(gpu: &Gpu) -> Result<MatVec> {
        MatVec::new(gpu, Packing::Loom(DType::Float32), false)
    }

    /// The kernel for `packing`. `shader_f16` decodes halves with the `shader-f16` feature (an error where the
    /// device lacks it); without it halves are decoded in integer ops, which every WebGPU device runs.
    pub fn new(gpu: &Gpu, packing: Packing, shader_f16: bool) -> Result<MatVec> {
        if shader_f16 && !gpu.has_f16 {
            return Err(LoomError::Unsupported(
                "this GPU has no shader-f16; use the f32 path".into(),
            ));
        }
        let kernel = MatVec {
            packing,
            shader_f16: shader_f16 && packing.has_halves(),
            layout: RowLayout::for_adapter(gpu),
            full_groups: TILED_FULL_GROUPS,
            tiled_rows: None,
        };
        kernel.pipeline(gpu, 1, 1, XRead::Plain, None)?;
        Ok(kernel)
    }

    /// Workgroups of 64 rows a tiled product (prefill) must fill for a lane a row on GPUs; below, 4 lanes a row (16
    /// rows a workgroup, four times the workgroups). Default 128.
    pub fn set_tiled_full_groups(&mut self, groups: u32) {
        self.full_groups = groups;
    }

    /// Rows each lane of a tiled product takes where it runs a lane a row (1, 2 or 4): each x value read from the
    /// tile then serves that many rows, in workgroups of 64 × `rows` rows. None: the layout's choice, 4 for
    /// prefill batches on CPU adapters (SmolLM2's prefill ran 1.5× faster than at 1 on lavapipe, 1.3× on Chromium's
    /// SwiftShader; its decode, whose gated units run tiled there, the same speed, so they keep 1) and 1 on GPUs
    /// (not yet timed on one).
    pub fn set_tiled_rows(&mut self, rows: Option<u32>) -> Result<()> {
        if rows.is_some_and(|rows| ![1, 2, 4].contains(&rows)) {
            return Err(LoomError::InvalidInput(format!(
                "tiled rows a lane: {rows:?} (1, 2 or 4)"
            )));
        }
        self.tiled_rows = rows;
        Ok(())
    }

    /// The kernel for `packing`, with `shader-f16` where the device has it.
    pub fn auto(gpu: &Gpu, packing: Packing) -> Result<MatVec> {
        MatVec::new(gpu, packing, gpu.has_f16 && packing.has_halves())
    }

    pub fn packing(&self) -> Packing {
        self.packing
    }

    fn check_packing(&self, w: &PackedWeights) -> Result<()> {
        if w.packing != self.packing {
            return Err(LoomError::InvalidInput(format!(
                "a {} matvec kernel got {} weights",
                self.packing.key(),
                w.packing.key()
            )));
        }
        Ok(())
    }

    /// This kernel with rows spread over lanes as `layout` says (the adapter's choice otherwise).
    pub fn with_layout(self, layout: RowLayout) -> MatVec {
        MatVec { layout, ..self }
    }

    /// True when this kernel decodes halves through `shader-f16`.
    pub fn uses_shader_f16(&self) -> bool {
        self.shader_f16
    }

    /// Whether a product with `bt` batch rows a workgroup runs `body_tiled` (one lane per row over x staged in
    /// shared memory), where every row of `w` starts at a whole unit: prefill batches, on GPUs a single row of x
    /// through many short rows (an LM head: see [`tiled_decode`]), and on CPU adapters a gated unit's product
    /// (computed once per tile, not once per row: their lanes are rows).
    fn tiled(&self, w: &PackedWeights, bt: u32, x: XRead) -> bool {
        let epu = self.packing.unit_elements(self.shader_f16);
        (bt == 16 || self.layout == RowLayout::Lane && x == XRead::Glu || self.tiled_decode(w, bt))
            && w.n_in.is_multiple_of(epu)
            && (w.first as usize).is_multiple_of(epu)
    }

    /// Whether a product of one row of x runs `body_tiled` with 4 lanes a row: on GPUs, for at least
    /// [`TILED_DECODE_ROWS`] rows of at most [`TILED_DECODE_WIDTH`] (the LM heads of SmolLM2, Qwen2.5 and Gemma 3),
    /// whose workgroup a row spent more on starting and reducing than on the row (Q8_0 heads read 300-370 GB/s on an
    /// H200, the 2,048-wide Q6_K head of Llama-3.2-1B 805).
    fn tiled_decode(&self, w: &PackedWeights, bt: u32) -> bool {
        bt == 1 && self.layout != RowLayout::Lane && w.n_out >= TILED_DECODE_ROWS && w.n_in <= TILED_DECODE_WIDTH
    }

    /// The pipeline of `tiled`'s entry point in `body_tiled` if given, else of the layout's body.
    fn pipeline(
        &self,
        gpu: &Gpu,
        parts: usize,
        bt: u32,
        x: XRead,
        tiled: Option<&'static str>,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let (body, entry) = match (tiled, self.layout) {
            (Some(entry), _) => ("body_tiled", entry),
            (None, RowLayout::Workgroup) => ("body", "matvec"),
            (None, RowLayout::Subgroups) => ("body_subgroups", "matvec_subgroups"),
            (None, RowLayout::Lane) => ("body_rows", "matvec_rows"),
        };
        let key = PipelineKey::MatVec {
            packing: self.packing,
            shader_f16: self.shader_f16,
            parts,
            batch_rows: bt,
            x,
            entry,
        };
        gpu.pipeline_with(key, || self.packing.source(self.shader_f16, parts, bt, x, body), entry)
    }

    /// Records `y = act(W·x)` for each row of `x` (packed rows of `n_in` f32) into `y` (packed rows of `n_out`).
    pub fn encode(&self, rec: &mut Recorder, x: Rows, w: &PackedWeights, y: Rows, act: Pointwise) -> Result<()> {
        self.encode_with(rec, x, w, y, act, MatVecOptions::default())
    }

    /// [`MatVec::encode`] with `options`: x normalized as it is read, and `y +=` instead of `y =`.
    pub fn encode_with(
        &self,
        rec: &mut Recorder,
        x: Rows,
        w: &PackedWeights,
        y: Rows,
        act: Pointwise,
        options: MatVecOptions,
    ) -> Result<()> {
        let gpu = rec.gpu();
        self.check_packing(w)?;
        x.flat("matvec input")?;
        y.flat("matvec output")?;
        let batch = x.rows;
        let x_cols = options.x_cols(w.n_in);
        if options.norm.is_some() && options.glu.is_some() {
            return Err(LoomError::InvalidInput(
                "a matvec with both a norm and a gated unit on x".into(),
            ));
        }
        if (x.cols as usize, y.rows, y.cols as usize) != (x_cols, batch, w.n_out) {
            return Err(LoomError::InvalidInput(format!(
                "matvec of {} × {} weights: input {x}, output {y}",
                w.n_out, w.n_in
            )));
        }
        if let Some((gamma, _)) = options.norm {
            check_values("matvec norm γ", gamma, w.n_in as u64)?;
        }
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        let n_out = w.n_out as u32;
        // Batch rows per workgroup, each decoded weight serving all of them: 4 for a few rows, 16 for a prefill.
        let bt = match batch {
            0 | 1 => 1,
            2..=4 => 4,
            _ => 16,
        };
        let x_read = XRead::of(&options);
        let tiled = self.tiled(w, bt, x_read);
        let groups_y = batch.div_ceil(bt);
        // The tiled body runs a lane a row (64 rows a workgroup), or on GPUs 4 (16 rows) where 64-row workgroups
        // would not cover an H100's 132 SMs: 4 lanes a row sped SmolLM2's prefill by 10-15% there and slowed
        // Llama-3.2-1B's, whose products fill it either way, by 10-25%.
        let split_rows = tiled
            && self.layout != RowLayout::Lane
            && (n_out.div_ceil(64) * groups_y < self.full_groups || self.tiled_decode(w, bt));
        let rows_per_lane = match (tiled && !split_rows, self.tiled_rows, self.layout) {
            (false, _, _) => 1,
            (true, Some(rows), _) => rows,
            (true, None, RowLayout::Lane) if bt == 16 => 4,
            (true, None, _) => 1,
        };
        let row_groups = match self.layout {
            _ if split_rows => n_out.div_ceil(16),
            _ if tiled => n_out.div_ceil(64 * rows_per_lane),
            RowLayout::Workgroup | RowLayout::Subgroups => n_out,
            RowLayout::Lane => n_out.div_ceil(64),
        };
        let groups_x = row_groups.clamp(1, max);
        let groups_z = row_groups.div_ceil(groups_x).max(1);
        if groups_z > max || groups_y > max {
            return Err(LoomError::Unsupported(format!(
                "matvec of {n_out} rows × batch {batch} exceeds {max} workgroups per dimension"
            )));
        }
        if batch == 0 || n_out == 0 {
            return Ok(());
        }
        let gamma = options.norm.map(|(g, _)| g);
        let body = match (tiled, split_rows, rows_per_lane) {
            (true, true, _) => Some("matvec_tiled_split"),
            (true, false, 2) => Some("matvec_tiled_rows2"),
            (true, false, 4) => Some("matvec_tiled_rows4"),
            (true, false, _) => Some("matvec_tiled"),
            _ => None,
        };
        let pipeline = self.pipeline(gpu, w.parts.len(), bt, x_read, body)?;
        let words = w.params(act.id(), groups_x, batch, &options);
        let buffers = w.bindings(x.buffer, y.buffer, gamma);
        gpu.note_weight_bytes(w.view_bytes());
        dispatch_3d(rec, &pipeline, &words, &buffers, (groups_x, groups_y, groups_z));
        Ok(())
    }

    /// Records gathering rows of `w` by id: row `b` of `y` (packed rows of `n_in` f32) is `W[ids[b]]`, for each of
    /// the ids (u32) in `ids`: an embedding lookup from a table kept in its blocks. Ids past the last row read the
    /// last row (callers check ids first).
    pub fn encode_gather(&self, rec: &mut Recorder, ids: Rows, w: &PackedWeights, y: Rows) -> Result<()> {
        let gpu = rec.gpu();
        self.check_packing(w)?;
        let batch = ids.flat("gathered ids")?;
        y.flat("gathered rows")?;
        if (y.rows, y.cols as usize) != (batch, w.n_in) {
            return Err(LoomError::InvalidInput(format!(
                "gathering {batch} rows of {} into {y}",
                w.n_in
            )));
        }
        let n = u64::from(batch) * w.n_in as u64;
        if n == 0 {
            return Ok(());
        }
        let parts = w.parts.len();
        let key = PipelineKey::MatVec {
            packing: self.packing,
            shader_f16: false,
            parts,
            batch_rows: 1,
            x: XRead::Plain,
            entry: "gather",
        };
        let pipeline = gpu.pipeline_with(
            key,
            || self.packing.source(false, parts, 1, XRead::Plain, "gather"),
            "gather",
        )?;
        let g = grid_for(gpu, n, 64, "gather")?;
        let words = w.params(0, 0, batch, &MatVecOptions::default());
        let buffers = w.bindings(ids.buffer, y.buffer, None);
        dispatch(rec, &pipeline, &words, &buffers, g);
        Ok(())
    }

    /// One-shot `y = act(W·x)`: uploads `x`, runs and reads back (tests and tools; a forward pass keeps its
    /// buffers). The batch is `x.len() / n_in`.
    pub async fn run(&self, gpu: &Gpu, x: &[f32], w: &PackedWeights, act: Pointwise) -> Result<Vec<f32>> {
        if w.n_in == 0 || !x.len().is_multiple_of(w.n_in) {
            return Err(LoomError::InvalidInput(format!(
                "matvec: {} inputs are not rows of {}",
                x.len(),
                w.n_in
            )));
        }
        let y0 = vec![0.0; x.len() / w.n_in * w.n_out];
        self.run_with(gpu, x, w, &y0, act, MatVecOptions::default()).await
    }

    /// [`MatVec::run`] with `options` (x normalized or a gated product as read, `y +=`): y starts out as `y0`, whose
    /// rows of `n_out` set the batch; x holds as many rows (of `2·n_in` with a gated product).
    pub async fn run_with(
        &self,
        gpu: &Gpu,
        x: &[f32],
        w: &PackedWeights,
        y0: &[f32],
        act: Pointwise,
        options: MatVecOptions<'_>,
    ) -> Result<Vec<f32>> {
        let x_cols = options.x_cols(w.n_in);
        let batch = y0.len().checked_div(w.n_out).unwrap_or(0);
        if y0.len() != batch * w.n_out || x.len() != batch * x_cols {
            return Err(LoomError::InvalidInput(format!(
                "matvec: {} inputs and {} outputs are not {} rows of {x_cols} and {}",
                x.len(),
                y0.len(),
                batch,
                w.n_out
            )));
        }
        let xb = gpu.upload("x", bytemuck::cast_slice(x)).await?;
        let yb = gpu.upload("y", bytemuck::cast_slice(y0)).await?;
        let mut rec = Recorder::new(gpu);
        let rows = u32_dim(batch, "matvec batch")?;
        let (x_cols, n_out) = (u32_dim(x_cols, "matvec input")?, u32_dim(w.n_out, "matvec output")?);
        self.encode_with(
            &mut rec,
            Rows::new(&xb, rows, x_cols),
            w,
            Rows::new(&yb, rows, n_out),
            act,
            options,
        )?;
        rec.submit();
        let mut out = gpu.read_f32(&yb).await?;
        out.truncate(y0.len());
        Ok(out)
    }
}

/// How a tensor of `bytes` is split across storage bindings of `max_binding_bytes`: the 32-bit words in each part,
/// and the parts (at most [`MAX_WEIGHT_BINDINGS`] are accepted).
pub fn binding_parts(max_binding_bytes: u64, bytes: u64) -> (u64, u64) {
    let words_per_part = (max_binding_bytes / 4).clamp(1, u64::from(u32::MAX));
    (words_per_part, bytes.div_ceil(4).div_ceil(words_per_part).max(1))
}

/// The dequantized values a packing holds (the CPU twin's weights): `n` float32 values.
pub fn packed_values(packing: Packing, bytes: &[u8], scale: f32, n: usize) -> Result<Vec<f32>> {
    packing.check(bytes, n)?;
    Ok(match packing {
        Packing::Loom(dt) => crate::dtype::dequantize(dt, bytes, scale, n),
        Packing::LoomQ4_0 => q4_0::Q4Blocks::parse(bytes)?.dequantize(n),
        Packing::Ggml(t) => {
            // `check` made sure the bytes hold the blocks of `n` elements.
            let blocks = n.div_ceil(t.block_len());
            let mut values = vec![0.0; blocks * t.block_len()];
            quant::dequantize(t, &bytes[..blocks * t.block_bytes()], &mut values)?;
            values.truncate(n);
            values
        }
    })
}
