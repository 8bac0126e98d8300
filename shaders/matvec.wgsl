// Matrix-vector products y[b][o] = act(Σ_i x[b][i] · W[o][i]) with W row-major [n_out][n_in].
// One workgroup per (output row, batch row); 64 lanes stride over the row and reduce in shared memory.
// Weights are bound as raw u32 words; `weight(o, i)` decodes one element (f32 here: a bitcast).

struct Params {
    n_in: u32,
    n_out: u32,
    act: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

var<workgroup> partial: array<f32, 64>;

fn weight(o: u32, i: u32) -> f32 {
    return bitcast<f32>(w[o * p.n_in + i]);
}

@compute @workgroup_size(64)
fn matvec_f32(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let o = wg.x;
    let b = wg.y;
    var acc = 0.0;
    for (var i = lid.x; i < p.n_in; i += 64u) {
        acc += x[b * p.n_in + i] * weight(o, i);
    }
    partial[lid.x] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if lid.x < s {
            partial[lid.x] += partial[lid.x + s];
        }
        workgroupBarrier();
    }
    if lid.x == 0u {
        y[b * p.n_out + o] = activate(partial[0], p.act);
    }
}
