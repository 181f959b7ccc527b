// im2col_back: the gradient of the input of im2col (dst [IW, IH, IC, N]; 1-D folded in with
// IH = KH = OH = 1) from the columns' gradient src0 [IC*KH*KW, OW, OH, N]: each input element
// gathers the column entries that read it, o * s + k * d - p == i per axis. Each axis starts at
// the first tap an output can reach (k * d > i + p - O * s), as the CPU kernel does: scanning
// every tap of a wide dilated kernel costs KW per element.
// Scalars: n, KW, KH, OW, OH, s0, s1, p0, p1, d0, d1.
// The first tap k with k * d > hi - span (hi = i + p, span = O * s); 0 when hi < span.
fn first_tap(hi: i32, span: i32, d: u32) -> u32 {
    let over = hi - span;
    if (over < 0) { return 0u; }
    return u32(over) / d + 1u;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    let kw = su(1u);
    let kh = su(2u);
    let ow = i32(su(3u));
    let oh = i32(su(4u));
    let s0 = i32(su(5u));
    let s1 = i32(su(6u));
    var acc = 0.0;
    let ky0 = first_tap(i32(c.y + su(8u)), oh * s1, su(10u));
    let kx0 = first_tap(i32(c.x + su(7u)), ow * s0, su(9u));
    for (var ky = ky0; ky < kh; ky = ky + 1u) {
        let ny = i32(c.y + su(8u)) - i32(ky * su(10u));
        if (ny < 0) { break; }
        if (ny % s1 != 0 || ny / s1 >= oh) { continue; }
        let oy = u32(ny / s1);
        for (var kx = kx0; kx < kw; kx = kx + 1u) {
            let nx = i32(c.x + su(7u)) - i32(kx * su(9u));
            if (nx < 0) { break; }
            if (nx % s0 != 0 || nx / s0 >= ow) { continue; }
            let k = (c.z * kh + ky) * kw + kx;
            acc = acc + bitcast<f32>(src0[t_at(1u, vec4<u32>(k, u32(nx / s0), oy, c.w))]);
        }
    }
    dst[t_at(0u, c)] = bitcast<u32>(acc);
}
