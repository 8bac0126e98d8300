// Softmax over rows, one 64-lane workgroup per row (CPU twin: crate::cpu softmax.rs `softmax_f32`, f32 with Go's
// exp rounded to f32): v = x / temperature, e = exp(v − max), y = e / Σe. Rows over a 2-D grid as in norm.wgsl.

struct Params {
    rows: u32,
    n: u32,
    temperature: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;


@compute @workgroup_size(64)
fn softmax(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wg.y * nwg.x + wg.x;
    if row >= p.rows {
        return;
    }
    let base = row * p.n;
    // The lowest finite f32, not −∞: a constant −∞ is a shader-creation error in WGSL (Chromium's Tint refuses it).
    var m = -0x1.fffffep+127f;
    for (var i = lane; i < p.n; i += 64u) {
        m = max(m, x[base + i] / p.temperature);
    }
    let mx = max64(m, lane);
    var s = 0.0;
    for (var i = lane; i < p.n; i += 64u) {
        let e = exp(x[base + i] / p.temperature - mx);
        y[base + i] = e;
        s += e;
    }
    let total = sum64(s, lane);
    for (var i = lane; i < p.n; i += 64u) {
        y[base + i] = y[base + i] / total;
    }
}
