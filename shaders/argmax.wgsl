// Argmax over rows (greedy decoding), one 64-lane workgroup per row: out[row] = the first index of the row's largest
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

var<workgroup> best_v: array<f32, 64>;
var<workgroup> best_i: array<u32, 64>;
var<workgroup> best_ok: array<u32, 64>;

// The lowest finite f32 (−3.40282347e38, which Tint refuses as a decimal: a hair past f32), as a hex literal.
const LOWEST: f32 = -0x1.fffffep+127f;

@compute @workgroup_size(64)
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
    for (var i = lane; i < p.n; i += 64u) {
        let xi = x[base + i];
        if (found && xi > v) || (!found && xi >= LOWEST) {
            v = xi;
            idx = i;
            found = true;
        }
    }
    best_v[lane] = v;
    best_i[lane] = idx;
    best_ok[lane] = u32(found);
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
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
