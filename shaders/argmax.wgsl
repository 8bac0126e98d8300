// Argmax over rows (greedy decoding), one 256-lane workgroup per row, each lane loading four values a step (a
// vocabulary of 128k in one 64-lane workgroup, one value at a time, took 0.7 ms on an H200): out[row] = the first index of the row's largest
// value, as a strict `>` scan from −∞ finds it: NaN and −∞ never win, a row of them gives 0, ties keep the lower
// index. WGSL has no constant −∞ (Tint refuses one), so "nothing found yet" is a flag and the first candidate is any
// value ≥ the lowest finite f32 (exactly the values > −∞). Rows over a 2-D grid as in norm.wgsl.

struct Params {
    rows: u32,
    n: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

const LANES: u32 = 256u;

var<workgroup> best_v: array<f32, LANES>;
var<workgroup> best_i: array<u32, LANES>;
var<workgroup> best_ok: array<u32, LANES>;

// The lowest finite f32 (−3.40282347e38, which Tint refuses as a decimal: a hair past f32), as a hex literal.
const LOWEST: f32 = -0x1.fffffep+127f;

// Takes x[base + i] if it beats the lane's best (the lane visits its indices in increasing order). NaN is told by its
// bits, not by comparisons, which a compiler may assume NaN-free (a grammar's mask writes NaN: mask.wgsl).
fn consider(xi: f32, i: u32, v: ptr<function, f32>, idx: ptr<function, u32>, found: ptr<function, bool>) {
    if (bitcast<u32>(xi) & 0x7fffffffu) > 0x7f800000u {
        return;
    }
    if (*found && xi > *v) || (!*found && xi >= LOWEST) {
        *v = xi;
        *idx = i;
        *found = true;
    }
}

@compute @workgroup_size(256)
fn argmax(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wg.y * nwg.x + wg.x;
    if row >= p.rows {
        return;
    }
    let base = row * p.n;
    var v = LOWEST;
    var idx = 0u;
    var found = false;
    var i = lane;
    for (; i + 3u * LANES < p.n; i += 4u * LANES) {
        let x0 = x[base + i];
        let x1 = x[base + i + LANES];
        let x2 = x[base + i + 2u * LANES];
        let x3 = x[base + i + 3u * LANES];
        consider(x0, i, &v, &idx, &found);
        consider(x1, i + LANES, &v, &idx, &found);
        consider(x2, i + 2u * LANES, &v, &idx, &found);
        consider(x3, i + 3u * LANES, &v, &idx, &found);
    }
    for (; i < p.n; i += LANES) {
        consider(x[base + i], i, &v, &idx, &found);
    }
    best_v[lane] = v;
    best_i[lane] = idx;
    best_ok[lane] = u32(found);
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if lane < s && best_ok[lane + s] != 0u {
            let ov = best_v[lane + s];
            let oi = best_i[lane + s];
            let mine = best_ok[lane] != 0u;
            if !mine || ov > best_v[lane] || (ov == best_v[lane] && oi < best_i[lane]) {
                best_v[lane] = ov;
                best_i[lane] = oi;
                best_ok[lane] = 1u;
            }
        }
        workgroupBarrier();
    }
    if lane == 0u {
        out[row] = best_i[0];
    }
}
