// Elementwise kernels, one thread per output value, 256 lanes per workgroup over a 2-D grid (flat index
// gid.y · num_workgroups.x · 256 + gid.x). Prepended with activation.wgsl.
//   add:         y[i] = a[i] + b[i % nb]      (residual add with nb = n; a bias row broadcast with nb = row width)
//   add_inplace: y[i] += b[i % nb]            (bias after a matvec)
//   act:         y[i] = activate(a[i])
//   swiglu:      y[i] = act(a[i]) · b[i]      (a gated unit's gate·up product, a = gate, b = up: SwiGLU with
//                                            act = silu, GeGLU with act = tanh GELU)
//   swiglu_rows: the same with gate and up side by side in `a`, rows of 2·nb (one matvec computed both):
//                y[r·nb + j] = act(a[r·2nb + j]) · a[r·2nb + nb + j]
//   scale:       y[i] *= factor               (a Parallel layer's avg)
// f32 throughout: add is exact (the CPU adds in f32 too); act, swiglu and scale round differently from the CPU's f64.

struct Params {
    n: u32,
    nb: u32,
    act: u32,
    factor: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.y * nwg.x * 256u + gid.x;
}

@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i < p.n {
        y[i] = a[i] + b[i % p.nb];
    }
}

@compute @workgroup_size(256)
fn add_inplace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i < p.n {
        y[i] = y[i] + b[i % p.nb];
    }
}

@compute @workgroup_size(256)
fn act(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i < p.n {
        y[i] = activate(a[i], p.act);
    }
}

@compute @workgroup_size(256)
fn swiglu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i < p.n {
        y[i] = activate(a[i], p.act) * b[i];
    }
}

@compute @workgroup_size(256)
fn swiglu_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i < p.n {
        let at = (i / p.nb) * 2u * p.nb + i % p.nb;
        y[i] = activate(a[at], p.act) * a[at + p.nb];
    }
}

@compute @workgroup_size(256)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg);
    if i < p.n {
        y[i] = y[i] * p.factor;
    }
}
