// Softmax variants over rows, one 64-lane workgroup per row (CPU twin: crate::cpu softmax.rs, f32 throughout with
// Go's exp rounded to f32). Rows start every n values and hold n values, except the last, which holds `last` (the
// CPU's chunks(cols) leaves a shorter last row). Rows over a 2-D grid as in norm.wgsl.
//   softmax: v = x / temperature, e = exp(v − max), y = e / Σe.
//   sparse:  sparsemax y = max(x − τ, 0) with τ such that Σ max(x − τ, 0) = 1; with `entmax` set, Loom's entmax:
//            b = (1 − w)·softmax(x) + w·sparsemax(x), y = b / Σb (w = α − 1).
//            τ by bisection rather than the CPU's sort: a sort needs the row in workgroup memory (rows here can be a
//            whole vocabulary) or a multi-pass global sort, while bisection needs only the 64-lane sums and no
//            scratch. g(τ) = Σ max(x − τ, 0) falls from ≥ 1 at max − 1 to 0 at max; 48 halvings shrink the bracket
//            [lo, hi) around the root to 2⁻⁴⁸ (or to adjacent floats), then τ = (Σ_{x > lo} x − 1) / |{x > lo}|,
//            the CPU's formula on the support it finds (an x inside the last bracket is ≈ τ either way, so whether it
//            counts changes τ by ≈ 0). The sums are tree sums where the CPU's are sequential.

struct Params {
    rows: u32,
    n: u32,
    temperature: f32,
    last: u32,
    w: f32,
    entmax: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// The lowest finite f32, not −∞: a constant −∞ is a shader-creation error in WGSL (Chromium's Tint refuses it).
const LOWEST: f32 = -0x1.fffffep+127f;

fn row_len(row: u32) -> u32 {
    return select(p.n, p.last, row + 1u == p.rows);
}

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
    let n = row_len(row);
    var m = LOWEST;
    for (var i = lane; i < n; i += 64u) {
        m = max(m, x[base + i] / p.temperature);
    }
    let mx = max64(m, lane);
    var s = 0.0;
    for (var i = lane; i < n; i += 64u) {
        let e = exp(x[base + i] / p.temperature - mx);
        y[base + i] = e;
        s += e;
    }
    let total = sum64(s, lane);
    for (var i = lane; i < n; i += 64u) {
        y[base + i] = y[base + i] / total;
    }
}

@compute @workgroup_size(64)
fn sparse(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wg.y * nwg.x + wg.x;
    if row >= p.rows {
        return;
    }
    let base = row * p.n;
    let n = row_len(row);
    var m = LOWEST;
    for (var i = lane; i < n; i += 64u) {
        m = max(m, x[base + i]);
    }
    let mx = max64(m, lane);
    // A fixed number of halvings keeps every lane in step (the reductions hold barriers) without a data-dependent
    // loop exit; once the bracket is two adjacent floats, mid equals lo or hi and nothing changes.
    var lo = mx - 1.0;
    var hi = mx;
    for (var it = 0u; it < 48u; it++) {
        let mid = lo + (hi - lo) * 0.5;
        var s = 0.0;
        for (var i = lane; i < n; i += 64u) {
            s += max(x[base + i] - mid, 0.0);
        }
        let above = sum64(s, lane) >= 1.0;
        lo = select(lo, mid, above);
        hi = select(mid, hi, above);
    }
    var cum = 0.0;
    var count = 0.0;
    for (var i = lane; i < n; i += 64u) {
        let v = x[base + i];
        if v > lo {
            cum += v;
            count += 1.0;
        }
    }
    let k = max(sum64(count, lane), 1.0);
    let tau = (sum64(cum, lane) - 1.0) / k;
    if p.entmax == 0u {
        for (var i = lane; i < n; i += 64u) {
            y[base + i] = max(x[base + i] - tau, 0.0);
        }
        return;
    }
    var es = 0.0;
    for (var i = lane; i < n; i += 64u) {
        es += exp(x[base + i] - mx);
    }
    let etotal = sum64(es, lane);
    var bs = 0.0;
    for (var i = lane; i < n; i += 64u) {
        let v = x[base + i];
        let b = (1.0 - p.w) * (exp(v - mx) / etotal) + p.w * max(v - tau, 0.0);
        y[base + i] = b;
        bs += b;
    }
    let btotal = sum64(bs, lane);
    for (var i = lane; i < n; i += 64u) {
        y[base + i] = y[base + i] / btotal;
    }
}
