// Rotary position embedding, rotate-half (CPU twin: the RoPE step of crate::cpu attention.rs): in each head of each
// token, the pair (j, j + hd/2) for j < hd/2 turns by angle pos / θ^(2j/hd):
//   x[j] ← x[j]·cos − x[j+hd/2]·sin,   x[j+hd/2] ← x[j]·sin + x[j+hd/2]·cos.
// With an odd head_dim the last element is not rotated. In place, one thread per pair (Loom's MHA; the LLM engine's
// attention turns its q and k itself, with the decoders' pairings: attention.wgsl).
// The cos/sin come from `table` ([tokens][hd/2] (cos, sin) pairs, one row per token of this dispatch), which the host
// computes in f64 and rounds once: Loom's angles reach 2^29 and beyond (small θ) where f32 sin/cos on a GPU are
// meaningless, and no accuracy is lost to f32 pow.

struct Params {
    tokens: u32,
    heads: u32,
    head_dim: u32,
    stride: u32,
    first: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;

@compute @workgroup_size(64)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let half = p.head_dim / 2u;
    let per_token = p.heads * half;
    let id = gid.y * nwg.x * 64u + gid.x;
    if id >= p.tokens * per_token {
        return;
    }
    let t = id / per_token;
    let r = id % per_token;
    let h = r / half;
    let j = r % half;
    let head = (p.first + t) * p.stride + h * p.head_dim;
    let i0 = head + j;
    let i1 = i0 + half;
    let c = table[2u * (t * half + j)];
    let s = table[2u * (t * half + j) + 1u];
    let v0 = x[i0];
    let v1 = x[i1];
    x[i0] = v0 * c - v1 * s;
    x[i1] = v0 * s + v1 * c;
}
