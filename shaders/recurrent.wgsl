// RNN and LSTM (CPU twin: crate::cpu recurrent.rs): x [B][T][in], y [B][T][hidden]. One dispatch per time step t,
// one thread per (batch row, hidden unit), 64 lanes per workgroup over a 2-D grid (flat index
// gid.y · num_workgroups.x · 64 + gid.x). h_{t−1} is read back from y (the previous step's output, written by the
// previous dispatch). Every row starts from zero state at t = 0: nothing is carried between calls, as on the CPU.
// Weights per gate: Wih [hidden × in], Whh [hidden × hidden], b [hidden], gates one after another (LSTM: i, f, g, o).
//   rnn:  h_t = tanh(b + Σ Wih·x_t + Σ Whh·h_{t−1}), one f32 sum in that order (the CPU's is f64).
//   lstm: each gate's pre-activation starts at b and adds the input terms, then the hidden terms, in tiles of
//         `tile` terms summed from zero and added to the running value (the CPU's tiles are f64, rounded to f32 as
//         they are added; here everything is f32). c = σ(f)·c_prev + σ(i)·tanh(g), h = σ(o)·tanh(c), with c kept in
//         `cell` [B][hidden] from step to step (the CPU carries h and c in f64; here in f32).

struct Params {
    batch: u32,
    steps: u32,
    input: u32,
    hidden: u32,
    tile: u32,
    t: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> cell: array<f32>;

// The first weight of gate `g`'s block.
fn gate_start(g: u32) -> u32 {
    return g * p.hidden * (p.input + p.hidden + 1u);
}

// The (batch row, hidden unit) of this thread; rows past the batch have nothing to do.
fn unit(gid: vec3<u32>, nwg: vec3<u32>) -> vec2<u32> {
    let i = gid.y * nwg.x * 64u + gid.x;
    return vec2<u32>(i / p.hidden, i % p.hidden);
}

@compute @workgroup_size(64)
fn rnn(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let bh = unit(gid, nwg);
    let b = bh.x;
    let h = bh.y;
    if b >= p.batch {
        return;
    }
    let whh = p.hidden * p.input;
    let bias = whh + p.hidden * p.hidden;
    let xt = (b * p.steps + p.t) * p.input;
    let out = (b * p.steps + p.t) * p.hidden;
    var sum = w[bias + h];
    for (var i = 0u; i < p.input; i++) {
        sum += x[xt + i] * w[h * p.input + i];
    }
    // h_{−1} is zero: its terms add nothing.
    if p.t > 0u {
        let prev = out - p.hidden;
        for (var j = 0u; j < p.hidden; j++) {
            sum += y[prev + j] * w[whh + h * p.hidden + j];
        }
    }
    y[out + h] = tanh_f32(sum);
}

// Gate `g`'s pre-activation for unit `h` (input at x[xt..], previous output at y[prev..] unless `first`).
fn lstm_gate(g: u32, h: u32, xt: u32, prev: u32, first: bool) -> f32 {
    let start = gate_start(g);
    let wih = start + h * p.input;
    let whh = start + p.hidden * p.input + h * p.hidden;
    var v = w[start + p.hidden * (p.input + p.hidden) + h];
    for (var i0 = 0u; i0 < p.input; i0 += p.tile) {
        var acc = 0.0;
        for (var i = i0; i < min(i0 + p.tile, p.input); i++) {
            acc += x[xt + i] * w[wih + i];
        }
        v += acc;
    }
    // h_{−1} is zero: its terms add nothing.
    if !first {
        for (var j0 = 0u; j0 < p.hidden; j0 += p.tile) {
            var acc = 0.0;
            for (var j = j0; j < min(j0 + p.tile, p.hidden); j++) {
                acc += y[prev + j] * w[whh + j];
            }
            v += acc;
        }
    }
    return v;
}

@compute @workgroup_size(64)
fn lstm(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let bh = unit(gid, nwg);
    let b = bh.x;
    let h = bh.y;
    if b >= p.batch {
        return;
    }
    let first = p.t == 0u;
    let xt = (b * p.steps + p.t) * p.input;
    let out = (b * p.steps + p.t) * p.hidden;
    let prev = out - select(p.hidden, 0u, first);
    let gi = lstm_gate(0u, h, xt, prev, first);
    let gf = lstm_gate(1u, h, xt, prev, first);
    let gg = lstm_gate(2u, h, xt, prev, first);
    let go = lstm_gate(3u, h, xt, prev, first);
    let c_prev = select(cell[b * p.hidden + h], 0.0, first);
    let c = sigmoid(gf) * c_prev + sigmoid(gi) * tanh_f32(gg);
    cell[b * p.hidden + h] = c;
    y[out + h] = sigmoid(go) * tanh_f32(c);
}
