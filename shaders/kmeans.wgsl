// KMeans soft assignment (CPU twin: crate::cpu embedding.rs `kmeans`). The whole input x is one point of d values;
// centers are k rows of d. One 64-lane workgroup: each lane computes the logits of clusters lane, lane + 64, ...
//   logit_c = −Σ_i (x_i − c_i)² / denom   (the distance summed in f32 in the CPU's order; 0 for integer dtypes)
//   p = softmax(logits)                    (f32, the CPU's exp is Go's, rounded to f32)
//   y = act(p), or with `features` y_f = act(Σ_c p_c · center_c,f) summed over c in the CPU's order.
// Prepended with activation.wgsl and reduce.wgsl.

struct Params {
    k: u32,
    d: u32,
    features: u32,
    integer: u32,
    act: u32,
    denom: f32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> centers: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> probs: array<f32>;

@compute @workgroup_size(64)
fn kmeans(@builtin(local_invocation_index) lane: u32) {
    // The lowest finite f32, not −∞ (see softmax.wgsl).
    var m = -0x1.fffffep+127f;
    for (var c = lane; c < p.k; c += 64u) {
        var dist = 0.0;
        if p.integer == 0u {
            for (var i = 0u; i < p.d; i++) {
                let diff = x[i] - centers[c * p.d + i];
                dist += diff * diff;
            }
        }
        let logit = -dist / p.denom;
        probs[c] = logit;
        m = max(m, logit);
    }
    let mx = max64(m, lane);
    var s = 0.0;
    for (var c = lane; c < p.k; c += 64u) {
        let e = exp(probs[c] - mx);
        probs[c] = e;
        s += e;
    }
    let total = sum64(s, lane);
    for (var c = lane; c < p.k; c += 64u) {
        probs[c] = probs[c] / total;
    }
    // The features read every cluster's probability.
    storageBarrier();
    if p.features != 0u {
        for (var f = lane; f < p.d; f += 64u) {
            var acc = 0.0;
            for (var c = 0u; c < p.k; c++) {
                acc += probs[c] * centers[c * p.d + f];
            }
            y[f] = activate(acc, p.act);
        }
    } else {
        for (var c = lane; c < p.k; c += 64u) {
            y[c] = activate(probs[c], p.act);
        }
    }
}
