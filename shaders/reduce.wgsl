// Workgroup reductions (64 and 256 lanes), prepended to the kernels that reduce a row with one workgroup (norm,
// softmax, attention). Every lane must call them: they contain barriers.

var<workgroup> red: array<f32, 64>;

fn max64(v: f32, lane: u32) -> f32 {
    red[lane] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if lane < s {
            red[lane] = max(red[lane], red[lane + s]);
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

fn sum64(v: f32, lane: u32) -> f32 {
    red[lane] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if lane < s {
            red[lane] += red[lane + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

var<workgroup> red256: array<f32, 256>;

fn sum256(v: f32, lane: u32) -> f32 {
    red256[lane] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if lane < s {
            red256[lane] += red256[lane + s];
        }
        workgroupBarrier();
    }
    let total = red256[0];
    workgroupBarrier();
    return total;
}
