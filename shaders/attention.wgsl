// Causal multi-head attention against a KV cache (CPU twin: crate::cpu attention.rs).
//
// The cache holds `max_seq` rows per KV head, laid out [kv_head][max_seq][head_dim]; timeline position `pos` lives in
// row pos % max_seq (Loom's 512-row cache wraps the same way).
//
// kv_update: copies `tokens` new K and V rows (kv_heads·head_dim values each, from token `first`: token t's K at
//   `(first + t)·kv_stride + k_offset` of k, its V likewise at v_offset of v, so that K and V may sit inside a fused
//   q/k/v row) into the cache at positions pos0.. . When a dispatch wraps the cache, only the last token to reach a
//   row writes it, as the CPU's sequential writes leave it. With `rope_pairs` the K rows are turned by RoPE on the
//   way (a prompt's chunk, whose attention then turns only its queries).
// attend: one 64-lane workgroup per (head, token, chunk of 256 head dims): the query of token `first + t` at position
//   pos0 + t attends to the positions 0..=pos0 + t (causal; prefill and one-token decode are the same kernel), or
//   with a sliding `window` to the latest `window` of them. GQA:
//   head h reads KV head h / (heads / kv_heads). Scores q·k · scale; softmax from an initial max of −1e9 as Loom's,
//   computed online over chunks of 256 positions (rescaling the running sum and output when the max grows);
//   out = Σ e·v / Σ e (the dot products and the weighted sums in four interleaved partial sums, whose loads
//   overlap: one sum at a time was latency-bound on GPUs). Any head_dim: the scores sum the query in chunks of 256
//   dims staged in shared memory, and workgroup z writes output dims 256·z .. 256·z + 255 (wider heads recompute
//   the scores once per chunk). A head past the last KV head (heads not a multiple of kv_heads) reads the cache as
//   Loom's flat [pos][kv_heads·head_dim] layout would, i.e. into the next position's row.
// attend_split + attend_combine: the same, each query's positions split into `splits` runs, each run a workgroup of
//   its own writing its softmax state (max, sum, weighted values), then combined (flash-decoding).
// attend and attend_split with `update`: the dispatch's tokens' K and V rows are read from where kv_update would
//   copy them (positions pos0.. of each query) and written into the cache by the first head of each KV group, so that
//   the LLM engine needs no kv_update dispatch (the host does this only where no query reads a cache row the
//   dispatch writes); with `rope_pairs` the queries and those K rows are turned by RoPE as they are read, so that it
//   needs no RoPE dispatch either.

struct Params {
    tokens: u32,
    first: u32,
    pos0: u32,
    max_seq: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    q_stride: u32,
    out_stride: u32,
    scale: f32,
    // attend: a sliding window (each query sees its latest `window` positions, its own included); 0 for all.
    window: u32,
    // attend: soft-capped scores (Gemma 2), cap · tanh(score / cap); 0 for none.
    softcap: f32,
    kv_stride: u32,
    k_offset: u32,
    v_offset: u32,
    // attend_split, attend_combine: the runs each query's positions are split into.
    splits: u32,
    // attend, attend_split: not 0 when the dispatch also writes its tokens' K and V rows (k_new, v_new at
    // kv_stride, k_offset, v_offset, token t at row first + t, as kv_update reads them) into the cache: the queries
    // read positions pos0.. from those rows, the earlier ones from the cache.
    update: u32,
    // The queries and (with `update`, or in kv_update) the tokens' K rows are read unrotated and turned here by
    // RoPE: `rope_pairs` pairs per head (0: none), paired (j, j + rope_pairs) or, with `rope_adjacent`,
    // (2j, 2j + 1); token t's (cos, sin) of pair j at table[2·(t·rope_pairs + j)] (rope.wgsl's rotation and table).
    rope_pairs: u32,
    rope_adjacent: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// kv_update, and attend with `update`
@group(0) @binding(1) var<storage, read> k_new: array<f32>;
@group(0) @binding(2) var<storage, read> v_new: array<f32>;
// the caches (written by kv_update and by attend with `update`)
@group(0) @binding(3) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<f32>;
// attend
@group(0) @binding(5) var<storage, read> q: array<f32>;
@group(0) @binding(11) var<storage, read> rope_table: array<f32>;
@group(0) @binding(8) var<storage, read_write> out: array<f32>;
// split attention's per-split softmax states
@group(0) @binding(9) var<storage, read_write> part_w: array<f32>;
@group(0) @binding(10) var<storage, read> part_r: array<f32>;

const CHUNK: u32 = 256u;
const HEAD_CHUNK: u32 = 256u;

@compute @workgroup_size(64)
fn kv_update(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let kv_w = p.kv_heads * p.head_dim;
    let id = gid.y * nwg.x * 64u + gid.x;
    if id >= p.tokens * kv_w {
        return;
    }
    let t = id / kv_w;
    let e = id % kv_w;
    if t + p.max_seq < p.tokens {
        return; // a later token of this dispatch writes the same row
    }
    let row = (p.pos0 + t) % p.max_seq;
    let dst = ((e / p.head_dim) * p.max_seq + row) * p.head_dim + e % p.head_dim;
    let src = (p.first + t) * p.kv_stride + e;
    var k = k_new[src + p.k_offset];
    if p.rope_pairs != 0u {
        let i = e % p.head_dim;
        k = rope_value(i, k, k_new[src - i + rope_partner(i) + p.k_offset], t);
    }
    k_cache[dst] = k;
    v_cache[dst] = v_new[src + p.v_offset];
}

var<workgroup> qs: array<f32, HEAD_CHUNK>;
var<workgroup> sc: array<f32, CHUNK>;
// A one-token dispatch's new K row (with `update`), turned by RoPE once as the query is staged.
var<workgroup> kn: array<f32, HEAD_CHUNK>;
// The lanes' shares of a short chunk's dot products, `lpp` lanes a position.
var<workgroup> part: array<f32, 64>;

// Start of the row of KV head `kvh` (< kv_heads) at timeline position `pos`: its head_dim values follow.
fn kv_row(pos: u32, kvh: u32) -> u32 {
    return (kvh * p.max_seq + pos % p.max_seq) * p.head_dim;
}

// Index of element i of KV head `kvh` at timeline position `pos`.
fn kv_at(pos: u32, kvh: u32, i: u32) -> u32 {
    let row = pos % p.max_seq;
    if kvh < p.kv_heads {
        return (kvh * p.max_seq + row) * p.head_dim + i;
    }
    let kv_w = p.kv_heads * p.head_dim;
    let f = row * kv_w + kvh * p.head_dim + i;
    let e = f % kv_w;
    return ((e / p.head_dim) * p.max_seq + f / kv_w) * p.head_dim + e % p.head_dim;
}

// Element i of a head after RoPE at token t's angles (as is without RoPE or outside the rotated pairs), from its
// value x and the value of the element it pairs with (read through `partner`, the pair's other index).
fn rope_value(i: u32, x: f32, partner: f32, t: u32) -> f32 {
    let r = p.rope_pairs;
    if i >= 2u * r {
        return x;
    }
    let j = select(i % r, i / 2u, p.rope_adjacent != 0u);
    let first = select(i < r, (i & 1u) == 0u, p.rope_adjacent != 0u);
    let at = 2u * (t * r + j);
    let c = rope_table[at];
    let s = rope_table[at + 1u];
    return select(partner * s + x * c, x * c - partner * s, first);
}

// The index of the element head element i pairs with under RoPE (i itself outside the rotated pairs).
fn rope_partner(i: u32) -> u32 {
    let r = p.rope_pairs;
    if i >= 2u * r {
        return i;
    }
    if p.rope_adjacent != 0u {
        return i ^ 1u;
    }
    return select(i + r, i - r, i >= r);
}

// Query element i (of the head starting at qb) of token t, turned by RoPE where the dispatch applies it.
fn q_value(qb: u32, i: u32, t: u32) -> f32 {
    return rope_value(i, q[qb + i], q[qb + rope_partner(i)], t);
}

// K element i of KV head `kvh` at position `pos` ≥ pos0, from the tokens' rows, turned by RoPE where applied.
fn k_new_value(pos: u32, kvh: u32, i: u32) -> f32 {
    let b = new_row(pos, kvh) + p.k_offset;
    return rope_value(i, k_new[b + i], k_new[b + rope_partner(i)], pos - p.pos0);
}

// Whether position `pos` is one of this dispatch's tokens, read from their rows (attend with `update`).
fn is_new(pos: u32) -> bool {
    return p.update != 0u && pos >= p.pos0;
}

// Start of KV head `kvh`'s part of the row of position `pos` (≥ pos0) in the tokens' K or V rows.
fn new_row(pos: u32, kvh: u32) -> u32 {
    return (p.first + pos - p.pos0) * p.kv_stride + kvh * p.head_dim;
}

// Value dim d of KV head `kvh` at position `pos`: from the tokens' rows or the cache.
fn v_value(pos: u32, kvh: u32, d: u32) -> f32 {
    if is_new(pos) {
        return v_new[new_row(pos, kvh) + p.v_offset + d];
    }
    return v_cache[kv_at(pos, kvh, d)];
}

// With `update`: the first head of each KV head's group writes token t's K and V rows for that KV head into the
// cache (every query of this dispatch reads them from the tokens' rows, and none reads the cache row they replace:
// that position is older than any query's window).
fn write_new(h: u32, t: u32, lane: u32) {
    let group = p.heads / p.kv_heads;
    if p.update == 0u || h % group != 0u || t + p.max_seq < p.tokens {
        return;
    }
    let kvh = h / group;
    let dst = kv_row(p.pos0 + t, kvh);
    let src = new_row(p.pos0 + t, kvh);
    for (var e = lane; e < p.head_dim; e += 64u) {
        k_cache[dst + e] = k_new_value(p.pos0 + t, kvh, e);
        v_cache[dst + e] = v_new[src + p.v_offset + e];
    }
}

// Softmax state of one query over a run of its positions: the running max, the sum of e^(score − m), and the
// e-weighted sums of the values for output dims d0 + lane + 64·k.
struct Partial {
    m: f32,
    l: f32,
    acc: vec4<f32>,
}

// Query `t` of head `h` over its positions [lo, hi) (chunks of CHUNK, the online softmax across them), for output
// dims d0 + lane + 64·k.
fn attend_positions(h: u32, t: u32, d0: u32, lo: u32, hi: u32, lane: u32) -> Partial {
    let hd = p.head_dim;
    let kvh = h / (p.heads / p.kv_heads);
    let qb = (p.first + t) * p.q_stride + h * hd;
    var m = -1e9;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    // A decode step's new row is turned once into `kn` (its one query at pos0 sees it; it is staged only by
    // workgroups whose run holds pos0).
    let one_new = p.update != 0u && p.tokens == 1u && hi > p.pos0;
    for (var c0 = lo; c0 < hi; c0 += CHUNK) {
        let cn = min(CHUNK, hi - c0);
        // Scores of this chunk's positions, the query staged HEAD_CHUNK dims at a time (one stage when hd ≤ 256).
        for (var j = lane; j < cn; j += 64u) {
            sc[j] = 0.0;
        }
        for (var h0 = 0u; h0 < hd; h0 += HEAD_CHUNK) {
            let hn = min(HEAD_CHUNK, hd - h0);
            workgroupBarrier();
            for (var i = lane; i < hn; i += 64u) {
                qs[i] = q_value(qb, h0 + i, t);
                if one_new {
                    kn[i] = k_new_value(p.pos0, kvh, h0 + i);
                }
            }
            workgroupBarrier();
            // A chunk of at most 32 positions (a decode step's run): the dot products with cached rows are taken by
            // `lpp` lanes a position, each over a strided share of the dims, so that a row's loads are spread over
            // lanes and adjacent in memory (a lane a position walked its whole row: 16 steps of loads at 256 dims).
            let lpp = select(1u, min(16u, 64u >> (32u - countLeadingZeros(cn - 1u))), cn <= 32u);
            if lpp > 1u {
                let j = lane / lpp;
                var dot = 0.0;
                if j < cn && kvh < p.kv_heads && !is_new(c0 + j) {
                    let b = kv_row(c0 + j, kvh) + h0;
                    var d = vec4<f32>(0.0);
                    var d2 = vec4<f32>(0.0);
                    var i = lane % lpp;
                    for (; i + 7u * lpp < hn; i += 8u * lpp) {
                        let k0 = vec4<f32>(k_cache[b + i], k_cache[b + i + lpp], k_cache[b + i + 2u * lpp], k_cache[b + i + 3u * lpp]);
                        let k1 = vec4<f32>(k_cache[b + i + 4u * lpp], k_cache[b + i + 5u * lpp], k_cache[b + i + 6u * lpp], k_cache[b + i + 7u * lpp]);
                        d += vec4<f32>(qs[i], qs[i + lpp], qs[i + 2u * lpp], qs[i + 3u * lpp]) * k0;
                        d2 += vec4<f32>(qs[i + 4u * lpp], qs[i + 5u * lpp], qs[i + 6u * lpp], qs[i + 7u * lpp]) * k1;
                    }
                    d += d2;
                    for (; i < hn; i += lpp) {
                        d.x += qs[i] * k_cache[b + i];
                    }
                    dot = (d.x + d.y) + (d.z + d.w);
                }
                part[lane] = dot;
                workgroupBarrier();
            }
            for (var j = lane; j < cn; j += 64u) {
                var dot = 0.0;
                var i = 0u;
                if lpp > 1u && kvh < p.kv_heads && !is_new(c0 + j) {
                    for (var s = 0u; s < lpp; s++) {
                        dot += part[j * lpp + s];
                    }
                    i = hn;
                } else if one_new && c0 + j == p.pos0 {
                    var d = vec4<f32>(0.0);
                    for (; i + 4u <= hn; i += 4u) {
                        d += vec4<f32>(qs[i], qs[i + 1u], qs[i + 2u], qs[i + 3u])
                            * vec4<f32>(kn[i], kn[i + 1u], kn[i + 2u], kn[i + 3u]);
                    }
                    dot = (d.x + d.y) + (d.z + d.w);
                    for (; i < hn; i++) {
                        dot += qs[i] * kn[i];
                    }
                } else if is_new(c0 + j) {
                    // Four independent sums, as below: one at a time, each turned K value's loads waited on the
                    // last (a decode step's new position took 64 load latencies for 64 dims: 30 µs on an H200).
                    var d = vec4<f32>(0.0);
                    for (; i + 4u <= hn; i += 4u) {
                        let qv = vec4<f32>(qs[i], qs[i + 1u], qs[i + 2u], qs[i + 3u]);
                        let e = h0 + i;
                        d += qv * vec4<f32>(
                            k_new_value(c0 + j, kvh, e),
                            k_new_value(c0 + j, kvh, e + 1u),
                            k_new_value(c0 + j, kvh, e + 2u),
                            k_new_value(c0 + j, kvh, e + 3u),
                        );
                    }
                    dot = (d.x + d.y) + (d.z + d.w);
                    for (; i < hn; i++) {
                        dot += qs[i] * k_new_value(c0 + j, kvh, h0 + i);
                    }
                } else if kvh < p.kv_heads {
                    // Independent sums over the contiguous row, sixteen loads a step: a GPU issues one step's loads
                    // together but waits for them before the next step's, so a step costs a load latency.
                    let b = kv_row(c0 + j, kvh) + h0;
                    var d = vec4<f32>(0.0);
                    var d2 = vec4<f32>(0.0);
                    for (; i + 16u <= hn; i += 16u) {
                        let k0 = vec4<f32>(k_cache[b + i], k_cache[b + i + 1u], k_cache[b + i + 2u], k_cache[b + i + 3u]);
                        let k1 = vec4<f32>(k_cache[b + i + 4u], k_cache[b + i + 5u], k_cache[b + i + 6u], k_cache[b + i + 7u]);
                        let k2 = vec4<f32>(k_cache[b + i + 8u], k_cache[b + i + 9u], k_cache[b + i + 10u], k_cache[b + i + 11u]);
                        let k3 = vec4<f32>(k_cache[b + i + 12u], k_cache[b + i + 13u], k_cache[b + i + 14u], k_cache[b + i + 15u]);
                        d += vec4<f32>(qs[i], qs[i + 1u], qs[i + 2u], qs[i + 3u]) * k0;
                        d2 += vec4<f32>(qs[i + 4u], qs[i + 5u], qs[i + 6u], qs[i + 7u]) * k1;
                        d += vec4<f32>(qs[i + 8u], qs[i + 9u], qs[i + 10u], qs[i + 11u]) * k2;
                        d2 += vec4<f32>(qs[i + 12u], qs[i + 13u], qs[i + 14u], qs[i + 15u]) * k3;
                    }
                    d += d2;
                    for (; i + 4u <= hn; i += 4u) {
                        let qv = vec4<f32>(qs[i], qs[i + 1u], qs[i + 2u], qs[i + 3u]);
                        d += qv * vec4<f32>(k_cache[b + i], k_cache[b + i + 1u], k_cache[b + i + 2u], k_cache[b + i + 3u]);
                    }
                    dot = (d.x + d.y) + (d.z + d.w);
                }
                for (; i < hn; i++) {
                    dot += qs[i] * k_cache[kv_at(c0 + j, kvh, h0 + i)];
                }
                sc[j] += dot;
            }
        }
        var local_max = -1e9;
        for (var j = lane; j < cn; j += 64u) {
            var s = sc[j] * p.scale;
            if p.softcap > 0.0 {
                // tanh saturates to ±1 in f32 well before ±15 (the clamp keeps exp-based tanh finite).
                s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0));
            }
            sc[j] = s;
            local_max = max(local_max, s);
        }
        let m_new = max(m, max64(local_max, lane));
        let alpha = exp(m - m_new);
        var local_sum = 0.0;
        for (var j = lane; j < cn; j += 64u) {
            let e = exp(sc[j] - m_new);
            sc[j] = e;
            local_sum += e;
        }
        l = l * alpha + sum64(local_sum, lane);
        for (var k = 0u; k < 4u; k++) {
            let d = d0 + lane + 64u * k;
            if d < hd {
                var a = vec4<f32>(acc[k] * alpha, 0.0, 0.0, 0.0);
                var j = 0u;
                if kvh < p.kv_heads {
                    // Eight positions a step, each its own sum, so that loads overlap (as the scores' above).
                    var a2 = vec4<f32>(0.0);
                    for (; j + 8u <= cn; j += 8u) {
                        let v0 = vec4<f32>(
                            v_value(c0 + j, kvh, d),
                            v_value(c0 + j + 1u, kvh, d),
                            v_value(c0 + j + 2u, kvh, d),
                            v_value(c0 + j + 3u, kvh, d),
                        );
                        let v1 = vec4<f32>(
                            v_value(c0 + j + 4u, kvh, d),
                            v_value(c0 + j + 5u, kvh, d),
                            v_value(c0 + j + 6u, kvh, d),
                            v_value(c0 + j + 7u, kvh, d),
                        );
                        a += vec4<f32>(sc[j], sc[j + 1u], sc[j + 2u], sc[j + 3u]) * v0;
                        a2 += vec4<f32>(sc[j + 4u], sc[j + 5u], sc[j + 6u], sc[j + 7u]) * v1;
                    }
                    a += a2;
                    for (; j + 4u <= cn; j += 4u) {
                        let e = vec4<f32>(sc[j], sc[j + 1u], sc[j + 2u], sc[j + 3u]);
                        a += e * vec4<f32>(
                            v_value(c0 + j, kvh, d),
                            v_value(c0 + j + 1u, kvh, d),
                            v_value(c0 + j + 2u, kvh, d),
                            v_value(c0 + j + 3u, kvh, d),
                        );
                    }
                }
                for (; j < cn; j++) {
                    a.x += sc[j] * v_value(c0 + j, kvh, d);
                }
                acc[k] = (a.x + a.y) + (a.z + a.w);
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    return Partial(m, l, vec4<f32>(acc[0], acc[1], acc[2], acc[3]));
}

// The positions query t sees: [first, n).
fn query_span(t: u32) -> vec2<u32> {
    let n = p.pos0 + t + 1u;
    let first = select(0u, n - p.window, p.window != 0u && n > p.window);
    return vec2<u32>(first, n);
}

// One workgroup per (head, token, chunk of output dims): each query over all its positions.
@compute @workgroup_size(64)
fn attend(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let span = query_span(wg.y);
    let d0 = wg.z * HEAD_CHUNK;
    let r = attend_positions(wg.x, wg.y, d0, span.x, span.y, lane);
    if wg.z == 0u {
        write_new(wg.x, wg.y, lane);
    }
    let ob = (p.first + wg.y) * p.out_stride + wg.x * p.head_dim;
    for (var k = 0u; k < 4u; k++) {
        let d = d0 + lane + 64u * k;
        if d < p.head_dim {
            out[ob + d] = r.acc[k] / r.l;
        }
    }
}

// Split attention (flash-decoding): one workgroup per (head, token, split, chunk of output dims), workgroup z being
// split · chunks + chunk. Each takes one of `splits` equal runs of the query's positions and writes its softmax
// state to `part_w`: per (token, head, split) a record of m, l and head_dim weighted sums. A decode step's one
// query thus spreads over heads × splits workgroups instead of one per head walking every position.
@compute @workgroup_size(64)
fn attend_split(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let chunks = (p.head_dim + HEAD_CHUNK - 1u) / HEAD_CHUNK;
    let s = wg.z / chunks;
    let d0 = (wg.z % chunks) * HEAD_CHUNK;
    let span = query_span(wg.y);
    let run = (span.y - span.x + p.splits - 1u) / p.splits;
    let lo = min(span.x + s * run, span.y);
    let r = attend_positions(wg.x, wg.y, d0, lo, min(lo + run, span.y), lane);
    if wg.z == 0u {
        write_new(wg.x, wg.y, lane);
    }
    let rb = ((wg.y * p.heads + wg.x) * p.splits + s) * (p.head_dim + 2u);
    if d0 == 0u && lane == 0u {
        part_w[rb] = r.m;
        part_w[rb + 1u] = r.l;
    }
    for (var k = 0u; k < 4u; k++) {
        let d = d0 + lane + 64u * k;
        if d < p.head_dim {
            part_w[rb + 2u + d] = r.acc[k];
        }
    }
}

// Combines the splits' states of each (head, token): out = Σ e^(m_s − M)·acc_s / Σ e^(m_s − M)·l_s with M the
// largest m_s (an empty run has m = −1e9, l = 0 and adds nothing). One workgroup per (head, token, chunk of dims).
@compute @workgroup_size(64)
fn attend_combine(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let hd = p.head_dim;
    let rb = (wg.y * p.heads + wg.x) * p.splits * (hd + 2u);
    var big = -1e9;
    for (var s = 0u; s < p.splits; s++) {
        big = max(big, part_r[rb + s * (hd + 2u)]);
    }
    var l = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        let b = rb + s * (hd + 2u);
        l += exp(part_r[b] - big) * part_r[b + 1u];
    }
    let ob = (p.first + wg.y) * p.out_stride + wg.x * hd;
    for (var d = wg.z * HEAD_CHUNK + lane; d < min(hd, (wg.z + 1u) * HEAD_CHUNK); d += 64u) {
        var acc = 0.0;
        for (var s = 0u; s < p.splits; s++) {
            let b = rb + s * (hd + 2u);
            acc += exp(part_r[b] - big) * part_r[b + 2u + d];
        }
        out[ob + d] = acc / l;
    }
}
