// pool_2d_back: the gradient of pool_2d's input (dst, the shape of src1 = x) from the pooled
// gradient src0. Each input element gathers from the windows covering it: avg adds g / (k0 k1),
// max adds g where it is the window's pick (the first strict maximum in scan order, as the CPU).
// Scalars: n, is_max, k0, k1, s0, s1, p0, p1.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    let is_max = su(1u) != 0u;
    let k0 = i32(su(2u));
    let k1 = i32(su(3u));
    let s0 = i32(su(4u));
    let s1 = i32(su(5u));
    let p0 = i32(su(6u));
    let p1 = i32(su(7u));
    let iw = i32(t_ne(2u, 0u));
    let ih = i32(t_ne(2u, 1u));
    let pw = i32(t_ne(1u, 0u));
    let ph = i32(t_ne(1u, 1u));
    let ix = i32(c.x);
    let iy = i32(c.y);
    let area = f32(k0 * k1);
    var acc = 0.0;
    // Windows oy with oy*s1 - p1 <= iy < oy*s1 - p1 + k1 (the same for x).
    let oy_hi = min((iy + p1) / s1, ph - 1);
    let ox_hi = min((ix + p0) / s0, pw - 1);
    let oy_lo = max(0, (iy + p1 - k1 + s1) / s1);
    let ox_lo = max(0, (ix + p0 - k0 + s0) / s0);
    for (var oy = oy_lo; oy <= oy_hi; oy = oy + 1) {
        let y0 = oy * s1 - p1;
        for (var ox = ox_lo; ox <= ox_hi; ox = ox + 1) {
            let x0 = ox * s0 - p0;
            let g = bitcast<f32>(src0[t_at(1u, vec4<u32>(u32(ox), u32(oy), c.z, c.w))]);
            if (!is_max) {
                acc = acc + g / area;
                continue;
            }
            var best = bitcast<f32>(0xff7fffffu);
            var bx = -1;
            var by = -1;
            for (var y = max(y0, 0); y < min(y0 + k1, ih); y = y + 1) {
                for (var x = max(x0, 0); x < min(x0 + k0, iw); x = x + 1) {
                    let v = bitcast<f32>(src1[t_at(2u, vec4<u32>(u32(x), u32(y), c.z, c.w))]);
                    if (v > best) {
                        best = v;
                        bx = x;
                        by = y;
                    }
                }
            }
            if (bx == ix && by == iy) { acc = acc + g; }
        }
    }
    dst[t_at(0u, c)] = bitcast<u32>(acc);
}
