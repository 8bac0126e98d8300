// Embedding gather (CPU twin: crate::cpu embedding.rs): output row t = act(table[int(ids[t])]), where int truncates
// toward zero and an id outside [0, vocab) (NaN included) gives act(0) in every column. One thread per output value,
// 256 lanes per workgroup over a 2-D grid. Tables larger than one storage binding are split into shards of rows
// [row0, row0 + rows); each shard's dispatch writes the rows it holds, and the one with write_zero set also writes
// the out-of-range ids' rows, so that every output value is written exactly once.

struct Params {
    tokens: u32,
    dim: u32,
    vocab: u32,
    row0: u32,
    rows: u32,
    act: u32,
    write_zero: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = gid.y * nwg.x * 256u + gid.x;
    if o >= p.tokens * p.dim {
        return;
    }
    let t = o / p.dim;
    let i = o % p.dim;
    let id = trunc(ids[t]);
    if id >= 0.0 && id < f32(p.vocab) {
        let r = u32(id);
        if r >= p.row0 && r - p.row0 < p.rows {
            y[o] = activate(table[(r - p.row0) * p.dim + i], p.act);
        }
    } else if p.write_zero != 0u {
        y[o] = activate(0.0, p.act);
    }
}
