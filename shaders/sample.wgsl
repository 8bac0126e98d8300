// Sampling the next token on the GPU, so that a decoded token costs one id read back instead of the logits. One
// 256-lane workgroup runs what `Sampler::sample_with` (crate/src/llm/sampler.rs) runs on the CPU, in its order:
//  1. the repetition penalty on the (unique) ids in `ids`, in place on the logits;
//  2. c = logit / temperature (temperature 0: c = logit, and k is 1: the argmax, lowest id on ties);
//  3. the k largest c (NaN left out; ties: lower id first), found by a radix select on the order-preserving bits of
//     c (4 passes of 8 bits: the k-th largest key T), then gathered in id order: every key above T, and the lowest
//     ids equal to T that complete k;
//  4. those k sorted (c descending, id ascending: a bitonic sort of 256 slots);
//  5. lane 0: softmax over them, top-p, min-p, and the pick of `u` (24 random bits from the CPU's seeded
//     generator) scaled by the kept mass, summed in the CPU's order.
// k is at most 256 (the host keeps larger k, or k = 0, on the CPU).

struct Params {
    n: u32,
    temperature: f32,
    k: u32,
    top_p: f32,
    min_p: f32,
    u: u32,
    penalty: f32,
    n_ids: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

const LANES: u32 = 256u;

var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> gt_count: array<u32, 256>;
var<workgroup> eq_count: array<u32, 256>;
var<workgroup> cand_key: array<u32, 256>;
var<workgroup> cand_id: array<u32, 256>;
var<workgroup> probs: array<f32, 256>;
var<workgroup> chosen: vec4<u32>; // prefix, still needed, bucket base, valid count

// c for element i, and whether it takes part (not NaN).
fn value(i: u32) -> f32 {
    let l = logits[i];
    if p.temperature == 0.0 {
        return l;
    }
    return l / p.temperature;
}

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// Bits that order as f32's total order does (−0 below +0), so a larger key is a larger value.
fn key_of(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if (b & 0x80000000u) != 0u {
        return ~b;
    }
    return b | 0x80000000u;
}

fn value_of(k: u32) -> f32 {
    if (k & 0x80000000u) != 0u {
        return bitcast<f32>(k & 0x7fffffffu);
    }
    return bitcast<f32>(~k);
}

// Slot a goes before slot b: larger key first, then lower id.
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

@compute @workgroup_size(256)
fn sample(@builtin(local_invocation_index) lane: u32) {
    let n = p.n;
    // 1. The penalty: the ids are unique, so no two lanes touch one logit.
    for (var j = lane; j < p.n_ids; j += LANES) {
        let t = ids[j];
        if t < n {
            let l = logits[t];
            if l > 0.0 {
                logits[t] = l / p.penalty;
            } else {
                logits[t] = l * p.penalty;
            }
        }
    }
    storageBarrier();
    workgroupBarrier();

    // Each lane owns a contiguous chunk, so gathering in lane order is gathering in id order.
    let chunk = (n + LANES - 1u) / LANES;
    let lo = min(lane * chunk, n);
    let hi = min(lo + chunk, n);

    // Valid (non-NaN) values, to bound k.
    var valid = 0u;
    for (var i = lo; i < hi; i++) {
        if !is_nan(value(i)) {
            valid++;
        }
    }
    gt_count[lane] = valid;
    workgroupBarrier();
    if lane == 0u {
        var total = 0u;
        for (var l = 0u; l < LANES; l++) {
            total += gt_count[l];
        }
        chosen = vec4<u32>(0u, min(p.k, total), 0u, total);
    }
    workgroupBarrier();
    let k = workgroupUniformLoad(&chosen).y;
    if k == 0u {
        if lane == 0u {
            out[0] = 0u;
        }
        return;
    }

    // 3. Radix select of the k-th largest key, 8 bits at a time from the top.
    for (var pass_ = 0u; pass_ < 4u; pass_++) {
        let shift = 24u - 8u * pass_;
        atomicStore(&hist[lane], 0u);
        workgroupBarrier();
        let prefix = chosen.x;
        // Bits above this pass's byte must match the prefix chosen so far.
        let mask = select(0u, 0xffffffffu << (shift + 8u), shift < 24u);
        for (var i = lo; i < hi; i++) {
            let c = value(i);
            if !is_nan(c) {
                let key = key_of(c);
                if (key & mask) == (prefix & mask) {
                    atomicAdd(&hist[(key >> shift) & 255u], 1u);
                }
            }
        }
        workgroupBarrier();
        if lane == 0u {
            var need = chosen.y;
            var b = 255i;
            loop {
                let h = atomicLoad(&hist[u32(b)]);
                if h >= need || b == 0i {
                    break;
                }
                need -= h;
                b--;
            }
            chosen.x = prefix | (u32(b) << shift);
            chosen.y = need;
        }
        workgroupBarrier();
    }
    let threshold = workgroupUniformLoad(&chosen).x;
    let take_eq = chosen.y;

    // Gather: keys above the threshold, then the first `take_eq` equal to it, each group in id order.
    var gt = 0u;
    var eq = 0u;
    for (var i = lo; i < hi; i++) {
        let c = value(i);
        if !is_nan(c) {
            let key = key_of(c);
            gt += u32(key > threshold);
            eq += u32(key == threshold);
        }
    }
    gt_count[lane] = gt;
    eq_count[lane] = eq;
    cand_key[lane] = 0u;
    cand_id[lane] = 0xffffffffu;
    workgroupBarrier();
    if lane == 0u {
        // Exclusive prefix sums, in place.
        var sg = 0u;
        var se = 0u;
        for (var l = 0u; l < LANES; l++) {
            let g = gt_count[l];
            let e = eq_count[l];
            gt_count[l] = sg;
            eq_count[l] = se;
            sg += g;
            se += e;
        }
        chosen.z = sg;
    }
    workgroupBarrier();
    let above = workgroupUniformLoad(&chosen).z;
    var at_gt = gt_count[lane];
    var at_eq = eq_count[lane];
    for (var i = lo; i < hi; i++) {
        let c = value(i);
        if !is_nan(c) {
            let key = key_of(c);
            if key > threshold {
                cand_key[at_gt] = key;
                cand_id[at_gt] = i;
                at_gt++;
            } else if key == threshold {
                if at_eq < take_eq {
                    cand_key[above + at_eq] = key;
                    cand_id[above + at_eq] = i;
                }
                at_eq++;
            }
        }
    }
    workgroupBarrier();

    // 4. Bitonic sort of the 256 slots (empty slots: key 0, id max, which sort last).
    for (var size = 2u; size <= LANES; size <<= 1u) {
        for (var stride = size >> 1u; stride > 0u; stride >>= 1u) {
            let other = lane ^ stride;
            if other > lane {
                let ka = cand_key[lane];
                let ia = cand_id[lane];
                let kb = cand_key[other];
                let ib = cand_id[other];
                let ascending_block = (lane & size) == 0u;
                // In an "ascending" block the slot order runs first-to-last by `before`.
                if before(kb, ib, ka, ia) == ascending_block {
                    cand_key[lane] = kb;
                    cand_id[lane] = ib;
                    cand_key[other] = ka;
                    cand_id[other] = ia;
                }
            }
            workgroupBarrier();
        }
    }

    // 5. The pick, as the CPU sums it.
    if lane == 0u {
        if p.temperature == 0.0 {
            out[0] = cand_id[0];
            return;
        }
        let top = value_of(cand_key[0]);
        var total = 0.0;
        for (var i = 0u; i < k; i++) {
            probs[i] = exp(value_of(cand_key[i]) - top);
            total += probs[i];
        }
        for (var i = 0u; i < k; i++) {
            probs[i] = probs[i] / total;
        }
        var keep = k;
        if p.top_p < 1.0 {
            var cum = 0.0;
            for (var i = 0u; i < k; i++) {
                cum += probs[i];
                if cum >= p.top_p {
                    keep = i + 1u;
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let floor = p.min_p * probs[0];
            var above_floor = 0u;
            for (var i = 0u; i < k; i++) {
                if probs[i] >= floor {
                    above_floor++;
                } else {
                    break;
                }
            }
            keep = min(keep, max(above_floor, 1u));
        }
        var mass = 0.0;
        for (var i = 0u; i < keep; i++) {
            mass += probs[i];
        }
        let u = f32(p.u) / 16777216.0 * mass;
        var cum = 0.0;
        var pick = cand_id[keep - 1u];
        for (var i = 0u; i < keep; i++) {
            cum += probs[i];
            if u < cum {
                pick = cand_id[i];
                break;
            }
        }
        out[0] = pick;
    }
}
