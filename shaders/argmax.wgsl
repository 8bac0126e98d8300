// Argmax over rows (greedy decoding), one 256-lane workgroup per row, each lane loading four values a step (a
// vocabulary of 128k in one 64-lane workgroup, one value at a time, took 0.7 ms on an H200): out[row] = the first index of the row's largest
// value, as a strict `>` scan from −∞ finds it: NaN and −∞ never win, a row of them gives 0, ties keep the lower
// index. WGSL has no constant −∞ (Tint refuses one), so "nothing found yet" is a flag and the first candidate is any
// value ≥ the lowest finite f32 (exactly the values > −∞). Rows over a 2-D grid as in norm.wgsl.
//
// argmax_slices + argmax_final: one long row (a decode step's logits) in two dispatches: a workgroup per slice of
// SLICE values writes its best (value bits, index, found) to `part`, then one workgroup picks among the slices'
// (262,144 values in one workgroup took 138 µs on an H200, its loads a chain of 256 steps).

struct Params {
    rows: u32,
    n: u32,
    // argmax_final: the slices of the row.
    slices: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
// argmax_slices, argmax_final: per slice its best value's bits, its index and whether it found one.
@group(0) @binding(3) var<storage, read_write> part: array<u32>;

const LANES: u32 = 256u;
const SLICE: u32 = 2048u;

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

// The lane's best over indices lo + lane, lo + lane + LANES, .. below hi (values at x[base + i]), four loads a step.
fn lane_best(base: u32, lo: u32, hi: u32, lane: u32, v: ptr<function, f32>, idx: ptr<function, u32>, found: ptr<function, bool>) {
    var i = lo + lane;
    for (; i + 3u * LANES < hi; i += 4u * LANES) {
        let x0 = x[base + i];
        let x1 = x[base + i + LANES];
        let x2 = x[base + i + 2u * LANES];
        let x3 = x[base + i + 3u * LANES];
        consider(x0, i, v, idx, found);
        consider(x1, i + LANES, v, idx, found);
        consider(x2, i + 2u * LANES, v, idx, found);
        consider(x3, i + 3u * LANES, v, idx, found);
    }
    for (; i < hi; i += LANES) {
        consider(x[base + i], i, v, idx, found);
    }
}

// The workgroup's best of the lanes' (lower index on ties), left in best_v[0], best_i[0], best_ok[0]. Every lane
// calls it.
fn workgroup_best(lane: u32, v: f32, idx: u32, found: bool) {
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
    var v = LOWEST;
    var idx = 0u;
    var found = false;
    lane_best(row * p.n, 0u, p.n, lane, &v, &idx, &found);
    workgroup_best(lane, v, idx, found);
    if lane == 0u {
        out[row] = best_i[0];
    }
}

// Workgroup wg.x: the best of values SLICE·wg.x .. of the one row.
@compute @workgroup_size(256)
fn argmax_slices(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let lo = wg.x * SLICE;
    var v = LOWEST;
    var idx = 0u;
    var found = false;
    lane_best(0u, lo, min(lo + SLICE, p.n), lane, &v, &idx, &found);
    workgroup_best(lane, v, idx, found);
    if lane == 0u {
        part[3u * wg.x] = bitcast<u32>(best_v[0]);
        part[3u * wg.x + 1u] = best_i[0];
        part[3u * wg.x + 2u] = best_ok[0];
    }
}

// The best of the slices': each lane visits its slices in increasing order, so that ties keep the lower index.
@compute @workgroup_size(256)
fn argmax_final(@builtin(local_invocation_index) lane: u32) {
    var v = LOWEST;
    var idx = 0u;
    var found = false;
    for (var s = lane; s < p.slices; s += LANES) {
        let sv = bitcast<f32>(part[3u * s]);
        if part[3u * s + 2u] != 0u && (!found || sv > v) {
            v = sv;
            idx = part[3u * s + 1u];
            found = true;
        }
    }
    workgroup_best(lane, v, idx, found);
    if lane == 0u {
        out[0] = best_i[0];
    }
}
