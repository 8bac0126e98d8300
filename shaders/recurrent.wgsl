// RNN and LSTM (CPU twin: crate::cpu recurrent.rs): x [B][T][in], y [B][T][hidden]. One 64-lane workgroup per batch
// row (rows over a 2-D grid: wg.y · num_workgroups.x + wg.x) walks the T steps in order; each lane owns the hidden
// units lane, lane + 64, ... for the whole walk. h_{t−1} is read back from y (the previous step's output), so the
// lanes meet at a storage barrier after every step. Every row starts from zero state: nothing is carried between
// calls, as on the CPU. Weights per gate: Wih [hidden × in], Whh [hidden × hidden], b [hidden], gates one after
// another (LSTM: i, f, g, o).
//   rnn:  h_t = tanh(b + Σ Wih·x_t + Σ Whh·h_{t−1}), one f32 sum in that order (the CPU's is f64).
//   lstm: each gate's pre-activation starts at b and adds the input terms, then the hidden terms, in tiles of
//         `tile` terms summed from zero and added to the running value (the CPU's tiles are f64, rounded to f32 as
//         they are added; here everything is f32). c = σ(f)·c_prev + σ(i)·tanh(g), h = σ(o)·tanh(c); the lane keeps
//         its units' c in `cell` (the CPU carries h and c in f64; here in f32).

struct Params {
    batch: u32,
    steps: u32,
    input: u32,
    hidden: u32,
    tile: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> cell: array<f32>;

// tanh saturates to ±1 in f32 long before ±15; clamping keeps implementations that compute it from exp finite.
fn tanh_f32(v: f32) -> f32 {
    return tanh(clamp(v, -15.0, 15.0));
}

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

// The first weight of gate `g`'s block.
fn gate_start(g: u32) -> u32 {
    return g * p.hidden * (p.input + p.hidden + 1u);
}

@compute @workgroup_size(64)
fn rnn(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let b = wg.y * nwg.x + wg.x;
    if b >= p.batch {
        return;
    }
    let wih = 0u;
    let whh = p.hidden * p.input;
    let bias = whh + p.hidden * p.hidden;
    for (var t = 0u; t < p.steps; t++) {
        let xt = (b * p.steps + t) * p.input;
        let out = (b * p.steps + t) * p.hidden;
        for (var h = lane; h < p.hidden; h += 64u) {
            var sum = w[bias + h];
            for (var i = 0u; i < p.input; i++) {
                sum += x[xt + i] * w[wih + h * p.input + i];
            }
            if t > 0u {
                let prev = out - p.hidden;
                for (var j = 0u; j < p.hidden; j++) {
                    sum += y[prev + j] * w[whh + h * p.hidden + j];
                }
            }
            y[out + h] = tanh_f32(sum);
        }
        storageBarrier();
    }
}

// Gate `g`'s pre-activation for unit `h` at step t (input at x[xt..], previous output at y[prev..] when t > 0).
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
fn lstm(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let b = wg.y * nwg.x + wg.x;
    if b >= p.batch {
        return;
    }
    for (var t = 0u; t < p.steps; t++) {
        let xt = (b * p.steps + t) * p.input;
        let out = (b * p.steps + t) * p.hidden;
        let prev = out - select(p.hidden, 0u, t == 0u);
        for (var h = lane; h < p.hidden; h += 64u) {
            let gi = lstm_gate(0u, h, xt, prev, t == 0u);
            let gf = lstm_gate(1u, h, xt, prev, t == 0u);
            let gg = lstm_gate(2u, h, xt, prev, t == 0u);
            let go = lstm_gate(3u, h, xt, prev, t == 0u);
            let c_prev = select(cell[b * p.hidden + h], 0.0, t == 0u);
            let c = sigmoid(gf) * c_prev + sigmoid(gi) * tanh_f32(gg);
            cell[b * p.hidden + h] = c;
            y[out + h] = sigmoid(go) * tanh_f32(c);
        }
        storageBarrier();
    }
}
