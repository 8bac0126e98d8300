// RMSNorm and LayerNorm over rows, one 256-lane workgroup per row (CPU twin: crate::cpu norm.rs, which sums in f64;
// here the lanes stride the row and sum in f32 in a shared-memory tree). 256 lanes, not 64: a decode step's norm is
// one workgroup, whose time is the chain of loads each lane makes (27 µs for 2,048 values at 64 lanes on an H100).
//   RMSNorm:   y = x · 1/√(Σx²/n + eps) · γ[(row % gamma_rows)·n + i]   (gamma_rows 1: one γ for every row;
//              MHA's per-head Q/K norms use one γ row per head)
//   add + RMSNorm (add_rms_norm): h += x first (h, the residual stream, updated in place), then RMSNorm of h into y:
//              a decoder's residual add fused with the next norm, one dispatch for two.
//   LayerNorm: two passes (mean, then Σ(x−mean)²) for f32 accuracy; y = (x − mean)/√(var + eps) · γ[i] + β[i], with
//              β at w[beta_offset..].
// Rows are numbered across a 2-D grid (wg.y · num_workgroups.x + wg.x) so that more than 65535 fit.

struct Params {
    rows: u32,
    n: u32,
    gamma_rows: u32,
    beta_offset: u32,
    eps: f32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> h: array<f32>;


@compute @workgroup_size(256)
fn rms_norm(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wg.y * nwg.x + wg.x;
    if row >= p.rows {
        return;
    }
    let base = row * p.n;
    // Two values a step into separate sums, so that their loads overlap (one at a time, a GPU's compiler waited on
    // each load in turn).
    var ss = vec2<f32>(0.0);
    var i = lane;
    for (; i + 256u < p.n; i += 512u) {
        let v = vec2<f32>(x[base + i], x[base + i + 256u]);
        ss += v * v;
    }
    if i < p.n {
        ss.x += x[base + i] * x[base + i];
    }
    let inv = 1.0 / sqrt(sum256(ss.x + ss.y, lane) / f32(p.n) + p.eps);
    let g = (row % p.gamma_rows) * p.n;
    i = lane;
    for (; i + 256u < p.n; i += 512u) {
        let a = x[base + i] * w[g + i];
        let b = x[base + i + 256u] * w[g + i + 256u];
        y[base + i] = a * inv;
        y[base + i + 256u] = b * inv;
    }
    if i < p.n {
        y[base + i] = x[base + i] * w[g + i] * inv;
    }
}

@compute @workgroup_size(256)
fn add_rms_norm(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wg.y * nwg.x + wg.x;
    if row >= p.rows {
        return;
    }
    let base = row * p.n;
    var ss = vec2<f32>(0.0);
    // Each lane reads back only what it wrote: no barrier needed between the add and the scaling. Two values a step,
    // as in rms_norm.
    var i = lane;
    for (; i + 256u < p.n; i += 512u) {
        let v = vec2<f32>(h[base + i], h[base + i + 256u]) + vec2<f32>(x[base + i], x[base + i + 256u]);
        h[base + i] = v.x;
        h[base + i + 256u] = v.y;
        ss += v * v;
    }
    if i < p.n {
        let v = h[base + i] + x[base + i];
        h[base + i] = v;
        ss.x += v * v;
    }
    let inv = 1.0 / sqrt(sum256(ss.x + ss.y, lane) / f32(p.n) + p.eps);
    let g = (row % p.gamma_rows) * p.n;
    i = lane;
    for (; i + 256u < p.n; i += 512u) {
        let a = h[base + i] * w[g + i];
        let b = h[base + i + 256u] * w[g + i + 256u];
        y[base + i] = a * inv;
        y[base + i + 256u] = b * inv;
    }
    if i < p.n {
        y[base + i] = h[base + i] * w[g + i] * inv;
    }
}

@compute @workgroup_size(256)
fn layer_norm(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wg.y * nwg.x + wg.x;
    if row >= p.rows {
        return;
    }
    let base = row * p.n;
    var s = 0.0;
    for (var i = lane; i < p.n; i += 256u) {
        s += x[base + i];
    }
    let mean = sum256(s, lane) / f32(p.n);
    var sq = 0.0;
    for (var i = lane; i < p.n; i += 256u) {
        let d = x[base + i] - mean;
        sq += d * d;
    }
    let inv = 1.0 / sqrt(sum256(sq, lane) / f32(p.n) + p.eps);
    for (var i = lane; i < p.n; i += 256u) {
        y[base + i] = (x[base + i] - mean) * inv * w[i] + w[p.beta_offset + i];
    }
}
