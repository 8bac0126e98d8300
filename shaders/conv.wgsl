// CNN1/2/3 and ConvTransposed1D/2D/3D, one thread per output value, 64 lanes per workgroup over a 2-D grid (flat
// index gid.y · num_workgroups.x · 64 + gid.x). Prepended with activation.wgsl. CPU twin: crate::cpu conv.rs.
// Every layer is a 3-D one: a 1-D or 2-D layer has leading extents 1, kernel 1, stride 1 and no padding.
// Layouts: x [B][C][D][H][W], w [F][C][kD][kH][kW], y [B][F][D'][H'][W']. A tap's position is
// pos·stride + k − padding in i32 (the host refuses geometries where that could overflow).
//   cnn:             y = act(Σ_{c, kd, kh, kw} x · w) over the taps inside the input (zero padding), summed in f32
//                    in the CPU's order (the CPU sums in f64).
//   conv_transposed: the gather form of Loom's scatter. Output position q receives x[p] · w[k] from every input
//                    position p whose tap k = q + padding − p·stride lies in the kernel; there is one such k per p, so
//                    walking c, then p in (d, h, w) order adds the products in the CPU's order, each rounded to f32
//                    and summed in f32 as the CPU does. Then the activation.

struct Params {
    total: u32,
    channels: u32,
    filters: u32,
    act: u32,
    in_d: u32,
    in_h: u32,
    in_w: u32,
    _p: u32,
    out_d: u32,
    out_h: u32,
    out_w: u32,
    _p0: u32,
    k_d: u32,
    k_h: u32,
    k_w: u32,
    _p1: u32,
    stride_d: i32,
    stride_h: i32,
    stride_w: i32,
    _p2: u32,
    pad_d: i32,
    pad_h: i32,
    pad_w: i32,
    _p3: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// The output value this thread computes, unflattened: (b, f, d, h, w).
struct Out {
    b: u32,
    f: u32,
    d: u32,
    h: u32,
    w: u32,
}

fn unflatten(i: u32) -> Out {
    var o: Out;
    o.w = i % p.out_w;
    var r = i / p.out_w;
    o.h = r % p.out_h;
    r = r / p.out_h;
    o.d = r % p.out_d;
    r = r / p.out_d;
    o.f = r % p.filters;
    o.b = r / p.filters;
    return o;
}

// pos·stride + k − padding if it lies inside 0..len, else −1.
fn tap(pos: u32, stride: i32, k: u32, pad: i32, len: u32) -> i32 {
    let t = i32(pos) * stride + i32(k) - pad;
    return select(-1, t, t >= 0 && t < i32(len));
}

// The kernel tap that carries input position `pos` to output position `q`: q + padding − pos·stride if it lies
// inside 0..k, else −1.
fn tap_back(q: u32, stride: i32, pos: u32, pad: i32, k: u32) -> i32 {
    let t = i32(q) + pad - i32(pos) * stride;
    return select(-1, t, t >= 0 && t < i32(k));
}

@compute @workgroup_size(64)
fn cnn(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 64u + gid.x;
    if i >= p.total {
        return;
    }
    let o = unflatten(i);
    var sum = 0.0;
    for (var c = 0u; c < p.channels; c++) {
        let plane = (o.b * p.channels + c) * p.in_d;
        let wc = (o.f * p.channels + c) * p.k_d;
        for (var kd = 0u; kd < p.k_d; kd++) {
            let xd = tap(o.d, p.stride_d, kd, p.pad_d, p.in_d);
            if xd < 0 {
                continue;
            }
            for (var kh = 0u; kh < p.k_h; kh++) {
                let xh = tap(o.h, p.stride_h, kh, p.pad_h, p.in_h);
                if xh < 0 {
                    continue;
                }
                let row = ((plane + u32(xd)) * p.in_h + u32(xh)) * p.in_w;
                let wrow = ((wc + kd) * p.k_h + kh) * p.k_w;
                for (var kw = 0u; kw < p.k_w; kw++) {
                    let xw = tap(o.w, p.stride_w, kw, p.pad_w, p.in_w);
                    if xw >= 0 {
                        sum += x[row + u32(xw)] * w[wrow + kw];
                    }
                }
            }
        }
    }
    y[i] = activate(sum, p.act);
}

@compute @workgroup_size(64)
fn conv_transposed(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 64u + gid.x;
    if i >= p.total {
        return;
    }
    let o = unflatten(i);
    var sum = 0.0;
    for (var c = 0u; c < p.channels; c++) {
        let plane = (o.b * p.channels + c) * p.in_d;
        let wc = (o.f * p.channels + c) * p.k_d;
        for (var pd = 0u; pd < p.in_d; pd++) {
            let kd = tap_back(o.d, p.stride_d, pd, p.pad_d, p.k_d);
            if kd < 0 {
                continue;
            }
            for (var ph = 0u; ph < p.in_h; ph++) {
                let kh = tap_back(o.h, p.stride_h, ph, p.pad_h, p.k_h);
                if kh < 0 {
                    continue;
                }
                let row = ((plane + pd) * p.in_h + ph) * p.in_w;
                let wrow = ((wc + u32(kd)) * p.k_h + u32(kh)) * p.k_w;
                for (var pw = 0u; pw < p.in_w; pw++) {
                    let kw = tap_back(o.w, p.stride_w, pw, p.pad_w, p.k_w);
                    if kw >= 0 {
                        sum += x[row + pw] * w[wrow + u32(kw)];
                    }
                }
            }
        }
    }
    y[i] = activate(sum, p.act);
}
