// A grammar's mask on one row of logits, before the argmax or the draw: every id whose bit is clear (bit id % 32 of
// word id / 32 of `allowed`) becomes NaN, which argmax.wgsl and sample.wgsl both leave out, as their CPU twins leave
// out the −∞ that `mask_logits` (crate/src/gpu/ops/sample.rs) writes: such an id never wins and takes no
// probability. The NaN's bits come in the parameters: WGSL has no NaN constant, and Tint refuses one made by a
// constant bitcast. One thread an id, over a 2-D grid.

struct Params {
    n: u32,
    nan_bits: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read> allowed: array<u32>;

@compute @workgroup_size(256)
fn mask(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let id = (wg.y * nwg.x + wg.x) * 256u + lane;
    if id >= p.n {
        return;
    }
    if ((allowed[id / 32u] >> (id % 32u)) & 1u) == 0u {
        logits[id] = bitcast<f32>(p.nan_bits);
    }
}
