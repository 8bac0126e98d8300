// The matvec family: y[b][o] = act(scale · Σ_i x[b][i] · W[o][i] + scale · B[o]) with W row-major [n_out][n_in],
// read packed: W is the matrix starting at element `first` of a stored tensor (a layer's store may hold several
// matrices and their biases back to back), B the optional bias row at element `bias` of the same tensor.
//
// The weights stay in their stored bytes (Loom's native packing, Loom's Q4_0 payload, or llama.cpp blocks), bound
// as raw u32 words, possibly split across several bindings (`word(i)` hides the split). They are decoded in the
// kernel. The host (`crate/src/gpu/ops/matvec.rs`) assembles one module from the `// @@ name` sections below:
//
//   activation.wgsl · common · xv1 or xv4 with xv_vector, or xv16 · x_plain, x_norm or x_glu · x_direct or x_tile ·
//   word(i) and its bindings
//   (generated) · constants (generated) · helpers (half, ints, field_*) · the encoding's decode function (`code`, `code64`)
//   · its unit reader (packed, wide64, a block format) · body (or body_rows; or body, sg_* and body_subgroups)
//
// or, for float16 on the `shader-f16` path: enable f16; · activation.wgsl · common · the xv sections · x_plain or
// x_norm · word(i) over vec2<f16> bindings · float16_native · body.
//
// A "unit" is the smallest run of elements whose bytes are self-contained: one u32 word of 1–32 elements for
// Loom's dtypes up to 32 bits, two words for the 64-bit ones, a block of 32 for Q4_0 / Q4_1 / Q8_0. Each reader
// defines `EPU` (elements per unit), `SPU` (parts per unit: lanes that share a unit, so that short rows of wide
// units still occupy the lanes), `part_dot(u, t, xb)` (Σ x·value over part t of unit u, whose element 0 is x
// column xb) and `unit_value(u, k)` (one element, for the partial units where a row starts or ends inside a unit).
//
// Loom's `GetActive` multiplies every element by the layer scale; here the scale multiplies each row's sum once
// (`p.scale`, 1 for float32/16/64, bfloat16 and the block formats, whose scales are inside the blocks).
//
// One workgroup per (output row, BT batch rows): each weight decoded serves BT rows of x (BT = 1 for a batch of 1,
// 4 for up to 4, else 16; XV, the type of x values and sums, is f32, vec4<f32> or mat4x4<f32>). 64 lanes stride
// over the row's units and reduce in shared memory.

// @@ common
struct Params {
    n_in: u32,
    n_out: u32,
    act: u32,
    // Workgroups along x: row o = wg.x + wg.z · groups_x (more rows than one dispatch dimension allows).
    groups_x: u32,
    scale: f32,
    // Words per weight binding when the weights are split (all but the last binding hold exactly this many).
    words_per_part: u32,
    // Loom Q4_0: the number of scales (the packed words follow them).
    aux: u32,
    batch: u32,
    // Element of the stored tensor where W[0][0] is; rows may start inside a unit (a word of sub-byte codes).
    first: u32,
    // Element where the bias row starts, or NO_BIAS.
    bias: u32,
    // With the x_norm section: RMSNorm's epsilon (x is normalized row by row, times γ, as it is read).
    norm_eps: f32,
    // Not 0: y += the result (a residual add), instead of y = the result.
    accumulate: u32,
    // With the x_glu section: the gate's activation.
    glu_act: u32,
}

const NO_BIAS: u32 = 0xFFFFFFFFu;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

var<workgroup> partial: array<XV, 64>;
// Per-lane Σ x² of the batch rows, with the x_norm section.
var<workgroup> partial_squares: array<XV, 64>;
// The first of the BT batch rows this workgroup computes.
var<private> b0: u32;

// Σ x·value over the elements of row [start, end) that lie in partial units (where the row starts or ends inside a
// unit): elements first, first + step, ... of each end, so the lanes of a workgroup share them, or one lane takes all.
fn edge_dot(start: u32, end: u32, first: u32, step: u32) -> XV {
    let ua = (start + EPU - 1u) / EPU;
    let head_end = min(end, ua * EPU);
    var acc = XV();
    for (var e = start + first; e < head_end; e += step) {
        acc += xv(e - start) * unit_value(e / EPU, e % EPU);
    }
    for (var e = max(end / EPU * EPU, head_end) + first; e < end; e += step) {
        acc += xv(e - start) * unit_value(e / EPU, e % EPU);
    }
    return acc;
}

// Σ x² over columns first, first + step, ... of the batch rows (for the norm of x_norm; XV() without it).
fn lane_squares(first: u32, step: u32) -> XV {
    var acc = XV();
    if NORM {
        for (var i = first; i < p.n_in; i += step) {
            let v = xv_raw(i);
            acc += mul_rows(v, v);
        }
    }
    return acc;
}

// Writes output row o for this workgroup's batch rows: act(sum · scale + bias), or adds it to y with
// `p.accumulate`. `squares` is Σ x² of each batch row, which scales the sum under x_norm.
fn store_row(o: u32, acc: XV, squares: XV) {
    var sum = acc * p.scale;
    if NORM {
        sum = mul_rows(sum, rsqrt_rows(squares));
    }
    var b = 0.0;
    if p.bias != NO_BIAS {
        let e = p.bias + o;
        b = unit_value(e / EPU, e % EPU) * p.scale;
    }
    for (var r = 0u; r < BT; r++) {
        if b0 + r < p.batch {
            let i = (b0 + r) * p.n_out + o;
            let base = select(0.0, y[i], p.accumulate != 0u);
            y[i] = base + activate(component(sum, r) + b, p.act);
        }
    }
}

// @@ xv1
// A batch of 1: XV is f32 and xv(i) is x[b0][i].
alias XV = f32;
const BT: u32 = 1u;

fn xv_raw(i: u32) -> XV {
    return x[b0 * X_ROW * p.n_in + i];
}

fn component(v: XV, r: u32) -> f32 {
    return v;
}

fn act_rows(v: XV) -> XV {
    return activate(v, p.glu_act);
}

// @@ xv4
// Batches of 2 and more: 4 rows of x at a time, so that every weight decoded serves 4 batch rows; rows past the
// batch read 0.
alias XV = vec4<f32>;
const BT: u32 = 4u;

fn xv_raw(i: u32) -> XV {
    var v = XV();
    for (var r = 0u; r < BT; r++) {
        let row = min(b0 + r, p.batch - 1u);
        v[r] = select(0.0, x[row * X_ROW * p.n_in + i], b0 + r < p.batch);
    }
    return v;
}

fn component(v: XV, r: u32) -> f32 {
    return v[r];
}

fn act_rows(v: XV) -> XV {
    let a = p.glu_act;
    return XV(activate(v.x, a), activate(v.y, a), activate(v.z, a), activate(v.w, a));
}

// @@ xv_vector
// Row by row for xv1 and xv4, whose XV (f32, vec4) multiplies component by component.
fn mul_rows(a: XV, b: XV) -> XV {
    return a * b;
}

fn rsqrt_rows(squares: XV) -> XV {
    return inverseSqrt(squares / f32(p.n_in) + p.norm_eps);
}

// @@ xv16
// Prefill batches (more than 4 rows): 16 rows of x at a time, row b0 + r as component r % 4 of column r / 4 of a
// 4×4 matrix, so that every weight decoded serves 16 batch rows; rows past the batch read 0.
alias XV = mat4x4<f32>;
const BT: u32 = 16u;

fn xv_raw(i: u32) -> XV {
    var v = XV();
    for (var r = 0u; r < BT; r++) {
        let row = min(b0 + r, p.batch - 1u);
        v[r / 4u][r % 4u] = select(0.0, x[row * X_ROW * p.n_in + i], b0 + r < p.batch);
    }
    return v;
}

fn component(v: XV, r: u32) -> f32 {
    return v[r / 4u][r % 4u];
}

fn act_rows(v: XV) -> XV {
    var out = XV();
    for (var r = 0u; r < BT; r++) {
        out[r / 4u][r % 4u] = activate(v[r / 4u][r % 4u], p.glu_act);
    }
    return out;
}

// Component by component (`*` of matrices is their product).
fn mul_rows(a: XV, b: XV) -> XV {
    return XV(a[0] * b[0], a[1] * b[1], a[2] * b[2], a[3] * b[3]);
}

fn rsqrt_rows(squares: XV) -> XV {
    let n = f32(p.n_in);
    let e = p.norm_eps;
    return XV(
        inverseSqrt(squares[0] / n + e),
        inverseSqrt(squares[1] / n + e),
        inverseSqrt(squares[2] / n + e),
        inverseSqrt(squares[3] / n + e),
    );
}

// @@ x_plain
// x as it is.
const NORM: bool = false;
const X_ROW: u32 = 1u;

fn x_in(i: u32) -> XV {
    return xv_raw(i);
}

// @@ x_norm
// x under RMSNorm with gain γ, folded into the product: y = (Σ x_i·γ_i·W_i) / √(mean(x²) + eps), the sum of
// squares taken by the lanes beside the product (see `lane_squares`), so the norm costs no dispatch of its own.
const NORM: bool = true;
const X_ROW: u32 = 1u;

@group(0) @binding(7) var<storage, read> gamma: array<f32>;

fn x_in(i: u32) -> XV {
    return xv_raw(i) * gamma[i];
}

// @@ x_glu
// x is a gated unit's product, read from rows of 2·n_in that hold its gate then its up projection (the gate|up
// matvec's output): x_i = act(gate_i)·up_i, so the product costs no dispatch of its own.
const NORM: bool = false;
const X_ROW: u32 = 2u;

fn x_in(i: u32) -> XV {
    return mul_rows(act_rows(xv_raw(i)), xv_raw(p.n_in + i));
}

// @@ x_direct
// The product reads column i of x (plain or normalized) where it is.
fn xv(i: u32) -> XV {
    return x_in(i);
}

// @@ x_tile
// The product reads x from a tile of TILE columns staged in shared memory (`body_tiled`): column i is tile[i - k0].
const TILE: u32 = 128u;

var<workgroup> tile: array<XV, TILE>;
var<private> k0: u32;

fn xv(i: u32) -> XV {
    return tile[i - k0];
}

// @@ half
// IEEE half (low 16 bits of h) → f32 in integer ops: no shader-f16 needed (Chromium's SwiftShader has none).
// (Naga cannot bitcast a u32 to vec2<f16>, so the shader-f16 path binds float16 weights as vec2<f16> instead: see
// `float16_native`; the block formats' one scale per 32 elements always comes through here.)
fn half(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1Fu;
    let m = h & 0x3FFu;
    if e == 0u {
        // Zero or subnormal: m · 2^-24, exact in f32.
        return bitcast<f32>(sign | bitcast<u32>(f32(m) * 5.9604644775390625e-8));
    }
    if e == 31u {
        return bitcast<f32>(sign | 0x7F800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// @@ ints
// Integer → f32 with round-to-nearest-even, as Rust's `as f32` (and Go's float32()) converts, in 32-bit integer
// ops: WGSL has no 64-bit integers, and leaves the rounding of a wide int → f32 conversion to the implementation.

// (hi:lo) >> s rounded to nearest, ties to even; 1 ≤ s ≤ 63 and the result must fit in a u32.
fn shr_rne(lo: u32, hi: u32, s: u32) -> u32 {
    var q: u32;
    var rlo: u32;
    var rhi = 0u;
    var hlo = 0u;
    var hhi = 0u;
    if s < 32u {
        q = (lo >> s) | (hi << (32u - s));
        rlo = lo & ((1u << s) - 1u);
        hlo = 1u << (s - 1u);
    } else {
        let t = s - 32u;
        q = hi >> t;
        rlo = lo;
        rhi = hi & ((1u << t) - 1u);
        if t == 0u {
            hlo = 0x80000000u;
        } else {
            hhi = 1u << (t - 1u);
        }
    }
    let above = rhi > hhi || (rhi == hhi && rlo > hlo);
    let tie = rhi == hhi && rlo == hlo;
    return q + select(0u, 1u, above || (tie && (q & 1u) == 1u));
}

fn u64_to_f32(lo: u32, hi: u32) -> f32 {
    if hi == 0u && lo < 0x1000000u {
        return f32(lo);
    }
    // Bit length n ≥ 25: keep 24 bits, rounded; the carry of a round-up moves into the exponent.
    let n = select(32u - countLeadingZeros(lo), 64u - countLeadingZeros(hi), hi != 0u);
    let m = shr_rne(lo, hi, n - 24u);
    return bitcast<f32>(((n + 126u) << 23u) + m - 0x800000u);
}

fn i64_to_f32(lo: u32, hi: u32) -> f32 {
    if (hi & 0x80000000u) == 0u {
        return u64_to_f32(lo, hi);
    }
    let nlo = ~lo + 1u;
    let nhi = ~hi + select(0u, 1u, nlo == 0u);
    return -u64_to_f32(nlo, nhi);
}

fn i32_to_f32(v: u32) -> f32 {
    return i64_to_f32(v, select(0u, 0xFFFFFFFFu, (v & 0x80000000u) != 0u));
}

// IEEE double (hi:lo) → f32, round-to-nearest-even, f32 subnormals included; no f64 arithmetic.
fn f64_to_f32(lo: u32, hi: u32) -> f32 {
    let sign = hi & 0x80000000u;
    let e11 = (hi >> 20u) & 0x7FFu;
    let mhi = hi & 0xFFFFFu;
    if e11 == 0x7FFu {
        return bitcast<f32>(sign | 0x7F800000u | select(0u, 0x400000u, (mhi | lo) != 0u));
    }
    if e11 == 0u {
        // Zero, or an f64 subnormal: far below half of f32's smallest subnormal.
        return bitcast<f32>(sign);
    }
    let e = i32(e11) - 896; // the f32 biased exponent: e11 − 1023 + 127
    if e >= 255 {
        return bitcast<f32>(sign | 0x7F800000u);
    }
    let shi = mhi | 0x100000u; // the 53-bit significand is shi:lo
    if e >= 1 {
        return bitcast<f32>(sign | ((u32(e) << 23u) + shr_rne(lo, shi, 29u) - 0x800000u));
    }
    // An f32 subnormal (or zero): significand · 2^(e − 30) in units of 2^-149.
    let s = u32(30 - e);
    if s > 63u {
        return bitcast<f32>(sign);
    }
    return bitcast<f32>(sign | shr_rne(lo, shi, s));
}

// @@ code_float32
fn code(c: u32) -> f32 {
    return bitcast<f32>(c);
}

// @@ code_float16
fn code(c: u32) -> f32 {
    return half(c);
}

// @@ code_bfloat16
fn code(c: u32) -> f32 {
    return bitcast<f32>(c << 16u);
}

// @@ code_fp8e4m3
// Loom's E4M3: exponent 15 is an ordinary exponent (no NaN, max 480); exponent 0 reads 2^-7·(1 + m/8)·0.125.
fn code(c: u32) -> f32 {
    let sign = (c & 0x80u) << 24u;
    let e = (c >> 3u) & 0xFu;
    let m = c & 7u;
    let v = bitcast<f32>(sign | ((e + 120u) << 23u) | (m << 20u));
    if e == 0u {
        return select(v * 0.125, bitcast<f32>(sign), m == 0u);
    }
    return v;
}

// @@ code_fp8e5m2
// Loom's E5M2: exponent 31 is Inf/NaN; exponent 0 with a mantissa reads as a normal number.
fn code(c: u32) -> f32 {
    let sign = (c & 0x80u) << 24u;
    let e = (c >> 2u) & 0x1Fu;
    let m = c & 3u;
    if e == 31u {
        return bitcast<f32>(sign | 0x7F800000u | (m << 21u));
    }
    if e == 0u && m == 0u {
        return bitcast<f32>(sign);
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 21u));
}

// @@ code_int32
fn code(c: u32) -> f32 {
    return i32_to_f32(c);
}

// @@ code_uint32
fn code(c: u32) -> f32 {
    return u64_to_f32(c, 0u);
}

// @@ code_int16
fn code(c: u32) -> f32 {
    return f32(i32(c << 16u) >> 16u);
}

// @@ code_uint16
fn code(c: u32) -> f32 {
    return f32(c);
}

// @@ code_int8
fn code(c: u32) -> f32 {
    return f32(i32(c << 24u) >> 24u);
}

// @@ code_uint8
fn code(c: u32) -> f32 {
    return f32(c);
}

// @@ code_int4
fn code(c: u32) -> f32 {
    return f32(i32(c << 28u) >> 28u);
}

// @@ code_uint4
fn code(c: u32) -> f32 {
    return f32(c);
}

// @@ code_fp4
// Loom's FP4 table (not OCP E2M1): 0, 0.75, 1, 1.5, 2, 3, +Inf, NaN, then the same negated.
fn code(c: u32) -> f32 {
    let lo = vec4<u32>(0x0000u, 0x3F40u, 0x3F80u, 0x3FC0u);
    let hi = vec4<u32>(0x4000u, 0x4040u, 0x7F80u, 0x7FC0u);
    let t = select(lo[c & 3u], hi[c & 3u], (c & 4u) != 0u);
    return bitcast<f32>((t << 16u) | ((c & 8u) << 28u));
}

// @@ code_int2
fn code(c: u32) -> f32 {
    return f32(i32(c << 30u) >> 30u);
}

// @@ code_uint2
fn code(c: u32) -> f32 {
    return f32(c);
}

// @@ code_ternary
// Two's-complement 2-bit codes, as int2 (code 2 would read −2; Loom never writes it).
fn code(c: u32) -> f32 {
    return f32(i32(c << 30u) >> 30u);
}

// @@ code_binary
// Bit 1 → +1, bit 0 → −1.
fn code(c: u32) -> f32 {
    return f32(c) * 2.0 - 1.0;
}

// @@ code64_int64
fn code64(lo: u32, hi: u32) -> f32 {
    return i64_to_f32(lo, hi);
}

// @@ code64_uint64
fn code64(lo: u32, hi: u32) -> f32 {
    return u64_to_f32(lo, hi);
}

// @@ code64_float64
fn code64(lo: u32, hi: u32) -> f32 {
    return f64_to_f32(lo, hi);
}

// @@ field_le
// Loom's native packing from 8 bits up: element k of a word is little-endian at bit BITS·k.
fn field(v: u32, k: u32) -> u32 {
    return (v >> (BITS * k)) & MASK;
}

// @@ field_msb
// Loom's native packing below 8 bits fills each byte MSB-first: element 2k of int4 in the high nibble of byte k,
// 2-bit pairs from bit 7 down, binary bit 7 − j. Bytes are little-endian in the word.
fn field(v: u32, k: u32) -> u32 {
    return (v >> (8u * (k / PER_BYTE) + 8u - BITS * (k % PER_BYTE + 1u))) & MASK;
}

// @@ packed
// Loom's dtypes up to 32 bits: one word = EPU elements of BITS bits, split by `field`, decoded by `code`. Words of
// more than 8 elements are shared by SPU lanes, 8 elements each, so that short rows still occupy the lanes.
const SPU: u32 = max(EPU / 8u, 1u);
const EPP: u32 = EPU / SPU;

fn unit_value(u: u32, k: u32) -> f32 {
    return code(field(word(u), k));
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let v = word(u);
    var s = XV();
    for (var k = t * EPP; k < t * EPP + EPP; k++) {
        s += xv(xb + k) * code(field(v, k));
    }
    return s;
}

// @@ float16_native
// float16 through the hardware's f16 (`shader-f16`): the weight bindings are array<vec2<f16>>, so word(i) is a
// pair of halves (element 2i in .x, the low half of the little-endian word).
const EPU: u32 = 2u;
const SPU: u32 = 1u;

fn unit_value(u: u32, k: u32) -> f32 {
    return f32(word(u)[k]);
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let h = vec2<f32>(word(u));
    return xv(xb) * h.x + xv(xb + 1u) * h.y;
}

// @@ wide64
// 64-bit elements: two little-endian words each.
const EPU: u32 = 1u;
const SPU: u32 = 1u;

fn unit_value(u: u32, k: u32) -> f32 {
    return code64(word(2u * u), word(2u * u + 1u));
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    return xv(xb) * code64(word(2u * u), word(2u * u + 1u));
}

// @@ loom_q4_0
// Loom's Q4_0 payload (spec §8): u32 nScales | u32 nPacked | f32 scales[nScales] | u32 packed[nPacked]. Block u
// (elements 32u..32u+31) has scale word 2 + u and words 2 + nScales + 4u + t; nibble m of a word (low first) is
// element 8t + m, a signed 4-bit q; value q·s_u. Each of a block's 4 words is one lane's part.
const EPU: u32 = 32u;
const SPU: u32 = 4u;

fn q4_nibble(v: u32, m: u32) -> f32 {
    return f32(i32(v << (28u - 4u * m)) >> 28u);
}

fn unit_value(u: u32, k: u32) -> f32 {
    return q4_nibble(word(2u + p.aux + 4u * u + (k >> 3u)), k & 7u) * bitcast<f32>(word(2u + u));
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let v = word(2u + p.aux + 4u * u + t);
    var s = XV();
    for (var m = 0u; m < 8u; m++) {
        s += xv(xb + 8u * t + m) * q4_nibble(v, m);
    }
    return s * bitcast<f32>(word(2u + u));
}

// @@ ggml_bytes
// ggml blocks of 18 and 34 bytes are not word-aligned: block u starts 0 or 2 bytes into a word. These read at an
// even byte offset.
fn half_at(byte: u32) -> f32 {
    return half((word(byte >> 2u) >> (8u * (byte & 2u))) & 0xFFFFu);
}

fn word_at(byte: u32) -> u32 {
    let i = byte >> 2u;
    if (byte & 2u) == 0u {
        return word(i);
    }
    return (word(i) >> 16u) | (word(i + 1u) << 16u);
}

fn byte_at(byte: u32) -> u32 {
    return (word(byte >> 2u) >> (8u * (byte & 3u))) & 0xFFu;
}

// @@ ggml_q4_0
// llama.cpp Q4_0, 18-byte blocks: f16 d | 16 bytes qs; element j is the low nibble of qs[j], element j+16 its
// high nibble; value (q − 8)·d. Part t (a lane's share) is qs bytes 4t..4t+3: elements 4t.. and 16+4t.., 4 each.
const EPU: u32 = 32u;
const SPU: u32 = 4u;

fn unit_value(u: u32, k: u32) -> f32 {
    let j = k & 15u;
    let byte = word_at(18u * u + 2u + 4u * (j >> 2u)) >> (8u * (j & 3u));
    return half_at(18u * u) * (f32(select(byte & 0xFu, (byte >> 4u) & 0xFu, k >= 16u)) - 8.0);
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let v = word_at(18u * u + 2u + 4u * t);
    var s = XV();
    for (var m = 0u; m < 4u; m++) {
        let byte = v >> (8u * m);
        s += xv(xb + 4u * t + m) * (f32(byte & 0xFu) - 8.0) + xv(xb + 16u + 4u * t + m) * (f32((byte >> 4u) & 0xFu) - 8.0);
    }
    return half_at(18u * u) * s;
}

// @@ ggml_q4_1
// llama.cpp Q4_1, 20-byte (word-aligned) blocks: f16 d | f16 m | 16 bytes, nibbles as Q4_0; value q·d + m.
const EPU: u32 = 32u;
const SPU: u32 = 4u;

fn unit_value(u: u32, k: u32) -> f32 {
    let j = k & 15u;
    let byte = word(5u * u + 1u + (j >> 2u)) >> (8u * (j & 3u));
    let dm = word(5u * u);
    return half(dm & 0xFFFFu) * f32(select(byte & 0xFu, (byte >> 4u) & 0xFu, k >= 16u)) + half(dm >> 16u);
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let v = word(5u * u + 1u + t);
    var s = XV();
    var sx = XV();
    for (var m = 0u; m < 4u; m++) {
        let byte = v >> (8u * m);
        let xl = xv(xb + 4u * t + m);
        let xh = xv(xb + 16u + 4u * t + m);
        s += xl * f32(byte & 0xFu) + xh * f32((byte >> 4u) & 0xFu);
        sx += xl + xh;
    }
    let dm = word(5u * u);
    return half(dm & 0xFFFFu) * s + half(dm >> 16u) * sx;
}

// @@ ggml_q8_0
// llama.cpp Q8_0, 34-byte blocks: f16 d | 32 signed bytes; value q·d. Part t is elements 8t..8t+7.
const EPU: u32 = 32u;
const SPU: u32 = 4u;

fn q8(v: u32, m: u32) -> f32 {
    return f32(i32(v << (24u - 8u * m)) >> 24u);
}

fn unit_value(u: u32, k: u32) -> f32 {
    return q8(word_at(34u * u + 2u + 4u * (k >> 2u)), k & 3u) * half_at(34u * u);
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let lo = word_at(34u * u + 2u + 8u * t);
    let hi = word_at(34u * u + 6u + 8u * t);
    var s = XV();
    for (var m = 0u; m < 4u; m++) {
        s += xv(xb + 8u * t + m) * q8(lo, m) + xv(xb + 8u * t + 4u + m) * q8(hi, m);
    }
    return half_at(34u * u) * s;
}

// @@ ggml_q5_0
// llama.cpp Q5_0, 22-byte blocks: f16 d | u32 qh | 16 bytes qs; element j < 16 is the low nibble of qs[j] with bit
// j of qh as bit 4, element j + 16 the high nibble with bit j + 16; value (q − 16)·d. Parts as Q4_0.
const EPU: u32 = 32u;
const SPU: u32 = 4u;

fn unit_value(u: u32, k: u32) -> f32 {
    let base = 22u * u;
    let byte = byte_at(base + 6u + (k & 15u));
    let q = select(byte & 0xFu, byte >> 4u, k >= 16u) | (((word_at(base + 2u) >> k) & 1u) << 4u);
    return half_at(base) * (f32(q) - 16.0);
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let base = 22u * u;
    let qh = word_at(base + 2u);
    let v = word_at(base + 6u + 4u * t);
    var s = XV();
    for (var m = 0u; m < 4u; m++) {
        let j = 4u * t + m;
        let byte = v >> (8u * m);
        let lo = (byte & 0xFu) | (((qh >> j) & 1u) << 4u);
        let hi = ((byte >> 4u) & 0xFu) | (((qh >> (j + 16u)) & 1u) << 4u);
        s += xv(xb + j) * (f32(lo) - 16.0) + xv(xb + 16u + j) * (f32(hi) - 16.0);
    }
    return half_at(base) * s;
}

// @@ ggml_q5_1
// llama.cpp Q5_1, 24-byte (word-aligned) blocks: f16 d | f16 m | u32 qh | 16 bytes qs, codes as Q5_0; value
// q·d + m.
const EPU: u32 = 32u;
const SPU: u32 = 4u;

fn unit_value(u: u32, k: u32) -> f32 {
    let byte = word(6u * u + 2u + ((k & 15u) >> 2u)) >> (8u * (k & 3u));
    let q = select(byte & 0xFu, (byte >> 4u) & 0xFu, k >= 16u) | (((word(6u * u + 1u) >> k) & 1u) << 4u);
    let dm = word(6u * u);
    return half(dm & 0xFFFFu) * f32(q) + half(dm >> 16u);
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let qh = word(6u * u + 1u);
    let v = word(6u * u + 2u + t);
    var s = XV();
    var sx = XV();
    for (var m = 0u; m < 4u; m++) {
        let j = 4u * t + m;
        let byte = v >> (8u * m);
        let lo = (byte & 0xFu) | (((qh >> j) & 1u) << 4u);
        let hi = ((byte >> 4u) & 0xFu) | (((qh >> (j + 16u)) & 1u) << 4u);
        let xl = xv(xb + j);
        let xh = xv(xb + 16u + j);
        s += xl * f32(lo) + xh * f32(hi);
        sx += xl + xh;
    }
    let dm = word(6u * u);
    return half(dm & 0xFFFFu) * s + half(dm >> 16u) * sx;
}

// @@ ggml_kquant_scales
// Q4_K/Q5_K's 6-bit (scale, min) of sub-block j from the 12 bytes at byte `s` (gguf-py's `get_scale_min`).
fn scale_min_k4(s: u32, j: u32) -> vec2<f32> {
    if j < 4u {
        return vec2<f32>(f32(byte_at(s + j) & 63u), f32(byte_at(s + j + 4u) & 63u));
    }
    let sc = (byte_at(s + j + 4u) & 0xFu) | ((byte_at(s + j - 4u) >> 6u) << 4u);
    let mn = (byte_at(s + j + 4u) >> 4u) | ((byte_at(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}

// The (scale, min) of sub-blocks c and c + 1 (c even) as d·scale and dmin·min, from the super-block's first four
// words: f16 d | f16 dmin, then the 12 bytes of scales as words s0, s1, s2 (`scale_min_k4` unpacked from words
// already loaded).
fn scales_k4(dm: u32, s0: u32, s1: u32, s2: u32, c: u32) -> vec4<f32> {
    let d = half(dm & 0xFFFFu);
    let dmin = half(dm >> 16u);
    var lo: vec2<u32>;
    var hi: vec2<u32>;
    if c < 4u {
        lo = vec2<u32>((s0 >> (8u * c)) & 63u, (s1 >> (8u * c)) & 63u);
        hi = vec2<u32>((s0 >> (8u * c + 8u)) & 63u, (s1 >> (8u * c + 8u)) & 63u);
    } else {
        let a = 8u * (c - 4u);
        let b = a + 8u;
        lo = vec2<u32>(((s2 >> a) & 0xFu) | ((((s0 >> a) >> 6u) & 3u) << 4u),
                       ((s2 >> (a + 4u)) & 0xFu) | ((((s1 >> a) >> 6u) & 3u) << 4u));
        hi = vec2<u32>(((s2 >> b) & 0xFu) | ((((s0 >> b) >> 6u) & 3u) << 4u),
                       ((s2 >> (b + 4u)) & 0xFu) | ((((s1 >> b) >> 6u) & 3u) << 4u));
    }
    return vec4<f32>(d * f32(lo.x), dmin * f32(lo.y), d * f32(hi.x), dmin * f32(hi.y));
}

// @@ ggml_q4_k
// llama.cpp Q4_K, 144-byte (word-aligned) super-blocks of 256: f16 d | f16 dmin | 12 bytes of 6-bit scales and
// mins | 128 bytes qs. Sub-block c (32 elements) is nibble c % 2 of qs[32·(c/2) ..]; value d·sc·q − dmin·m.
// A part is one word t of qs: byte 4t + m holds elements 64·(t/8) + 4·(t%8) + m (low nibble, sub-block 2·(t/8)) and
// that + 32 (high nibble, the next sub-block), so that neighbouring lanes read neighbouring words.
const EPU: u32 = 256u;
const SPU: u32 = 32u;

fn unit_value(u: u32, k: u32) -> f32 {
    let base = 36u * u;
    let c = k >> 5u;
    let q = (byte_at(4u * (base + 4u) + 32u * (c >> 1u) + (k & 31u)) >> (4u * (c & 1u))) & 0xFu;
    let dm = word(base);
    let sm = scale_min_k4(4u * base + 4u, c);
    return half(dm & 0xFFFFu) * sm.x * f32(q) - half(dm >> 16u) * sm.y;
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let base = 36u * u;
    let v = word(base + 4u + t);
    let col = xb + 64u * (t >> 3u) + 4u * (t & 7u);
    let k = scales_k4(word(base), word(base + 1u), word(base + 2u), word(base + 3u), 2u * (t >> 3u));
    // The low nibbles (sub-block 2·(t/8)), then the high ones (the next sub-block, 32 columns on). One `xv` in the
    // loop body: x_glu's activations inline into every read, which a software adapter compiles slowly.
    var total = XV();
    for (var n = 0u; n < 2u; n++) {
        var s = XV();
        var sx = XV();
        for (var m = 0u; m < 4u; m++) {
            let xi = xv(col + 32u * n + m);
            s += xi * f32((v >> (8u * m + 4u * n)) & 0xFu);
            sx += xi;
        }
        let sm = select(k.xy, k.zw, n == 1u);
        total += sm.x * s - sm.y * sx;
    }
    return total;
}

// @@ ggml_q5_k
// llama.cpp Q5_K, 176-byte (word-aligned) super-blocks of 256: f16 d | f16 dmin | 12 bytes scales/mins | 32 bytes
// qh | 128 bytes qs. Sub-block c takes nibbles as Q4_K and bit c of qh[l] as bit 4; value d·sc·q − dmin·m.
// A part is one word t of qs, as Q4_K's, with qh's word t % 8.
const EPU: u32 = 256u;
const SPU: u32 = 32u;

fn unit_value(u: u32, k: u32) -> f32 {
    let base = 44u * u;
    let c = k >> 5u;
    let l = k & 31u;
    let lo = (byte_at(4u * (base + 12u) + 32u * (c >> 1u) + l) >> (4u * (c & 1u))) & 0xFu;
    let hi = (byte_at(4u * (base + 4u) + l) >> c) & 1u;
    let dm = word(base);
    let sm = scale_min_k4(4u * base + 4u, c);
    return half(dm & 0xFFFFu) * sm.x * f32(lo | (hi << 4u)) - half(dm >> 16u) * sm.y;
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let base = 44u * u;
    let v = word(base + 12u + t);
    // Bits 2·(t/8) and 2·(t/8) + 1 of each qh byte: the low and high nibbles' fifth bits.
    let h = word(base + 4u + (t & 7u)) >> (2u * (t >> 3u));
    let col = xb + 64u * (t >> 3u) + 4u * (t & 7u);
    let k = scales_k4(word(base), word(base + 1u), word(base + 2u), word(base + 3u), 2u * (t >> 3u));
    // The low nibbles, then the high ones, as Q4_K's.
    var total = XV();
    for (var n = 0u; n < 2u; n++) {
        var s = XV();
        var sx = XV();
        for (var m = 0u; m < 4u; m++) {
            let xi = xv(col + 32u * n + m);
            let q = ((v >> (8u * m + 4u * n)) & 0xFu) | (((h >> (8u * m + n)) & 1u) << 4u);
            s += xi * f32(q);
            sx += xi;
        }
        let sm = select(k.xy, k.zw, n == 1u);
        total += sm.x * s - sm.y * sx;
    }
    return total;
}

// @@ ggml_q6_k
// llama.cpp Q6_K, 210-byte super-blocks of 256: 128 bytes ql | 64 bytes qh | 16 int8 scales | f16 d. Sub-block c
// (32 elements, half h = c / 4): low 4 bits are nibble (c / 2) % 2 of ql[64h + 32·(c % 2) + l], high 2 bits are
// bits 2·(c % 4) of qh[32h + l]; q − 32 times d·scales[2c + l / 16].
// A part is one word r of qh (half h = r / 8, l = 4·(r % 8) + m): elements 128h + l + 32j for j = 0..3, from
// ql[64h + l] and ql[64h + 32 + l], so that neighbouring lanes read neighbouring words.
const EPU: u32 = 256u;
const SPU: u32 = 16u;

fn q6_scale(base: u32, i: u32) -> f32 {
    return f32(i32(byte_at(base + 192u + i) << 24u) >> 24u);
}

fn unit_value(u: u32, k: u32) -> f32 {
    let base = 210u * u;
    let c = k >> 5u;
    let l = k & 31u;
    let h = c >> 2u;
    let lo = (byte_at(base + 64u * h + 32u * (c & 1u) + l) >> (4u * ((c >> 1u) & 1u))) & 0xFu;
    let hi = (byte_at(base + 128u + 32u * h + l) >> (2u * (c & 3u))) & 3u;
    return half_at(base + 208u) * q6_scale(base, 2u * c + (l >> 4u)) * (f32(lo | (hi << 4u)) - 32.0);
}

fn part_dot(u: u32, r: u32, xb: u32) -> XV {
    let base = 210u * u;
    let h = r >> 3u;
    let l = 4u * (r & 7u);
    let vh = word_at(base + 128u + 32u * h + l);
    let v0 = word_at(base + 64u * h + l);
    let v1 = word_at(base + 64u * h + 32u + l);
    let d = half_at(base + 208u);
    // Element 128h + l + 32j + m: nibble j / 2 of byte m of v0 (j even) or v1 (j odd), bits 2j, 2j + 1 of byte m of
    // vh; its scale is scales[8h + l / 16 + 2j]. One `xv` in the loop body (see Q4_K's).
    var total = XV();
    for (var j = 0u; j < 4u; j++) {
        let v = select(v0, v1, (j & 1u) == 1u) >> (4u * (j >> 1u));
        let hb = vh >> (2u * j);
        var s = XV();
        for (var m = 0u; m < 4u; m++) {
            let q = ((v >> (8u * m)) & 0xFu) | (((hb >> (8u * m)) & 3u) << 4u);
            s += xv(xb + 128u * h + l + 32u * j + m) * (f32(q) - 32.0);
        }
        total += (d * q6_scale(base, 8u * h + (l >> 4u) + 2u * j)) * s;
    }
    return total;
}

// @@ ggml_loomq4_0
// Loom's Q4_0 regrouped per block (20 bytes, word-aligned): f32 scale | 16 bytes; element 2j is the low nibble of
// byte j, 2j + 1 its high nibble, each a signed 4-bit q; value q·s. Part t is word t of the codes.
const EPU: u32 = 32u;
const SPU: u32 = 4u;

fn loom_nibble(v: u32, m: u32) -> f32 {
    return f32(i32(v << (28u - 4u * m)) >> 28u);
}

fn unit_value(u: u32, k: u32) -> f32 {
    return loom_nibble(word(5u * u + 1u + (k >> 3u)), k & 7u) * bitcast<f32>(word(5u * u));
}

fn part_dot(u: u32, t: u32, xb: u32) -> XV {
    let v = word(5u * u + 1u + t);
    var s = XV();
    for (var m = 0u; m < 8u; m++) {
        s += xv(xb + 8u * t + m) * loom_nibble(v, m);
    }
    return s * bitcast<f32>(word(5u * u));
}

// @@ body
// Row o's sum over this lane's share of its units (lanes lane, lane + 64, ...).
fn lane_sum(o: u32, lane: u32) -> XV {
    var acc = XV();
    if o < p.n_out {
        // Row o is elements [start, end) of the stored tensor; xv(i) reads its column i of x.
        let start = p.first + o * p.n_in;
        let end = start + p.n_in;
        let ua = (start + EPU - 1u) / EPU; // first whole unit
        let ub = end / EPU; // one past the last whole unit
        // The whole units, SPU parts each, spread over the lanes.
        let parts = select(0u, (ub - ua) * SPU, ub > ua);
        for (var i = lane; i < parts; i += 64u) {
            let u = ua + i / SPU;
            acc += part_dot(u, i % SPU, u * EPU - start);
        }
        // The partial units at both ends (fewer than EPU elements each: up to 255 for K-quant super-blocks), one
        // element per lane at a time.
        acc += edge_dot(start, end, lane, 64u);
    }
    return acc;
}

@compute @workgroup_size(64)
fn matvec(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let o = wg.x + wg.z * p.groups_x;
    b0 = wg.y * BT;
    partial[lid.x] = lane_sum(o, lid.x);
    if NORM {
        partial_squares[lid.x] = lane_squares(lid.x, 64u);
    }
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if lid.x < s {
            partial[lid.x] += partial[lid.x + s];
            if NORM {
                partial_squares[lid.x] += partial_squares[lid.x + s];
            }
        }
        workgroupBarrier();
    }
    if lid.x == 0u && o < p.n_out {
        store_row(o, partial[0], partial_squares[0]);
    }
}

// @@ body_subgroups
// `body` with the lanes' sums added by subgroup operations (adapters with subgroups): each subgroup adds its lanes'
// at once into its slot, and lane 0 adds the slots: one barrier instead of seven. `sg_sum` adds XV across the
// subgroup (section sg_vector or sg_matrix).
@compute @workgroup_size(64)
fn matvec_subgroups(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) n_sg: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    let o = wg.x + wg.z * p.groups_x;
    b0 = wg.y * BT;
    let sum = sg_sum(lane_sum(o, lid.x));
    var squares = XV();
    if NORM {
        squares = sg_sum(lane_squares(lid.x, 64u));
    }
    if sg_lane == 0u {
        partial[sg] = sum;
        partial_squares[sg] = squares;
    }
    workgroupBarrier();
    if lid.x == 0u && o < p.n_out {
        var acc = XV();
        var all_squares = XV();
        for (var i = 0u; i < n_sg; i++) {
            acc += partial[i];
            all_squares += partial_squares[i];
        }
        store_row(o, acc, all_squares);
    }
}

// @@ sg_vector
fn sg_sum(v: XV) -> XV {
    return subgroupAdd(v);
}

// @@ sg_matrix
fn sg_sum(v: XV) -> XV {
    return XV(subgroupAdd(v[0]), subgroupAdd(v[1]), subgroupAdd(v[2]), subgroupAdd(v[3]));
}

// @@ body_rows
// The same product with one lane per output row (64 rows per workgroup, no shared memory, no barriers): for CPU
// adapters (lavapipe, SwiftShader), whose lanes are SIMD lanes, so that neighbouring rows run side by side instead of
// 64 lanes of one row waiting at barriers. Row o = (wg.x + wg.z · groups_x) · 64 + lane.
@compute @workgroup_size(64)
fn matvec_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let o = (wg.x + wg.z * p.groups_x) * 64u + lid.x;
    b0 = wg.y * BT;
    // x_norm: Σ x² of the batch rows, striped over the lanes and added in shared memory once for the workgroup's 64
    // rows (before any lane leaves, so that every lane reaches the barriers).
    var squares = XV();
    if NORM {
        partial_squares[lid.x] = lane_squares(lid.x, 64u);
        workgroupBarrier();
        for (var s = 32u; s > 0u; s >>= 1u) {
            if lid.x < s {
                partial_squares[lid.x] += partial_squares[lid.x + s];
            }
            workgroupBarrier();
        }
        squares = partial_squares[0];
    }
    if o >= p.n_out {
        return;
    }
    let start = p.first + o * p.n_in;
    let end = start + p.n_in;
    var acc = edge_dot(start, end, 0u, 1u);
    for (var u = (start + EPU - 1u) / EPU; u < end / EPU; u++) {
        for (var t = 0u; t < SPU; t++) {
            acc += part_dot(u, t, u * EPU - start);
        }
    }
    store_row(o, acc, squares);
}

// @@ body_tiled
// Prefill batches: 64 / lpr output rows per workgroup, lpr lanes each (taking every lpr-th part of the row), over x
// staged TILE columns at a time in shared memory, so that each column of the 16 batch rows is read from memory once
// per workgroup instead of once per row, and each weight decoded serves the 16 batch rows. `matvec_tiled` runs a
// lane a row (64 rows); `matvec_tiled_split` 4 lanes a row (16 rows, a quarter of a row's parts each), which the
// host picks for products too small to fill a GPU with 64-row workgroups; `matvec_tiled_rows2` and
// `matvec_tiled_rows4` a lane 2 or 4 rows (128 or 256 rows), so that each x value read from the tile serves every
// row of the lane (the reads of its rows' `part_dot`s are the same loads, which the compiler shares). CPU adapters
// also read a gated unit's product (x_glu) through the tiled body at every batch size: its activations are then
// computed once per tile, not once per row. The host picks these where every row starts at a whole unit (n_in and
// `first` multiples of EPU): then a part's columns never straddle a tile (units of up to 128 elements lie whole in
// one; the K-quants' 256-element units have parts of 32 consecutive columns).
@compute @workgroup_size(64)
fn matvec_tiled(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tiled(wg, lid.x, 1u, 1u);
}

@compute @workgroup_size(64)
fn matvec_tiled_split(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tiled(wg, lid.x, 4u, 1u);
}

@compute @workgroup_size(64)
fn matvec_tiled_rows2(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tiled(wg, lid.x, 1u, 2u);
}

@compute @workgroup_size(64)
fn matvec_tiled_rows4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tiled(wg, lid.x, 1u, 4u);
}

// `lpr` lanes a row, or (lpr = 1) `rpl` rows a lane (1, 2 or 4): rows o, o + 64, ... A row past the matrix reads
// its last row, so that every row's loads run unconditionally beside the others', and is not stored.
fn tiled(wg: vec3<u32>, lane: u32, lpr: u32, rpl: u32) {
    let sub = lane % lpr;
    let o = (wg.x + wg.z * p.groups_x) * (64u / lpr) * rpl + lane / lpr;
    b0 = wg.y * BT;
    var squares = XV();
    if NORM {
        partial_squares[lane] = lane_squares(lane, 64u);
        workgroupBarrier();
        for (var s = 32u; s > 0u; s >>= 1u) {
            if lane < s {
                partial_squares[lane] += partial_squares[lane + s];
            }
            workgroupBarrier();
        }
        squares = partial_squares[0];
    }
    // The first unit of each of the lane's rows.
    let last = p.n_out - 1u;
    let u0 = (p.first + min(o, last) * p.n_in) / EPU;
    let u1 = (p.first + min(o + 64u, last) * p.n_in) / EPU;
    let u2 = (p.first + min(o + 128u, last) * p.n_in) / EPU;
    let u3 = (p.first + min(o + 192u, last) * p.n_in) / EPU;
    var acc0 = XV();
    var acc1 = XV();
    var acc2 = XV();
    var acc3 = XV();
    // The loop counts in a local (uniform, for the barriers); xv reads the tile through the private k0.
    for (var k = 0u; k < p.n_in; k += TILE) {
        k0 = k;
        workgroupBarrier();
        // Column k0 + c of the BT batch rows (plain, normalized or gated); 0 past the row.
        for (var c = lane; c < TILE; c += 64u) {
            var v = XV();
            if k0 + c < p.n_in {
                v = x_in(k0 + c);
            }
            tile[c] = v;
        }
        workgroupBarrier();
        // This lane's parts q of its rows whose columns lie in [k0, k0 + TILE): unit q / SPU, part q % SPU.
        let q_end = min(k0 + TILE, p.n_in) * SPU / EPU;
        for (var q = k0 * SPU / EPU + sub; q < q_end; q += lpr) {
            let u = q / SPU;
            let t = q % SPU;
            acc0 += part_dot(u0 + u, t, u * EPU);
            if rpl > 1u {
                acc1 += part_dot(u1 + u, t, u * EPU);
            }
            if rpl > 2u {
                acc2 += part_dot(u2 + u, t, u * EPU);
                acc3 += part_dot(u3 + u, t, u * EPU);
            }
        }
    }
    if lpr == 1u {
        store_tiled(o, acc0, squares);
        if rpl > 1u {
            store_tiled(o + 64u, acc1, squares);
        }
        if rpl > 2u {
            store_tiled(o + 128u, acc2, squares);
            store_tiled(o + 192u, acc3, squares);
        }
        return;
    }
    // The row's lpr lane sums (partial_squares is free again: every lane read its total before the tiles).
    partial_squares[lane] = acc0;
    workgroupBarrier();
    if sub == 0u {
        var sum = acc0;
        for (var s = 1u; s < lpr; s++) {
            sum += partial_squares[lane + s];
        }
        store_tiled(o, sum, squares);
    }
}

fn store_tiled(o: u32, acc: XV, squares: XV) {
    if o < p.n_out {
        store_row(o, acc, squares);
    }
}

// @@ gather
// Rows of the matrix by id (a decoder's embedding lookup from its quantized table): y[b][i] = W[id_b][i] for the
// `batch` ids in x (u32 bits in the f32 binding), decoded by the encoding's `unit_value`. One thread per value.
@compute @workgroup_size(64)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = gid.y * nwg.x * 64u + gid.x;
    if id >= p.batch * p.n_in {
        return;
    }
    let b = id / p.n_in;
    let i = id % p.n_in;
    let row = min(bitcast<u32>(x[b]), p.n_out - 1u);
    let e = p.first + row * p.n_in + i;
    y[id] = unit_value(e / EPU, e % EPU) * p.scale;
}
