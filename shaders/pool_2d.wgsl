// pool_2d (max or avg; avg divides by k0*k1 including padding, as ggml). One invocation per
// output. Scalars: n, is_max, k0, k1, s0, s1, p0, p1.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    let is_max = su(1u) != 0u;
    let k0 = su(2u);
    let k1 = su(3u);
    let IW = i32(t_ne(1u, 0u));
    let IH = i32(t_ne(1u, 1u));
    let ix = i32(c.x * su(4u)) - i32(su(6u));
    let iy = i32(c.y * su(5u)) - i32(su(7u));
    var out = 0.0;
    if (is_max) { out = bitcast<f32>(0xff7fffffu); }
    for (var ky = 0u; ky < k1; ky = ky + 1u) {
        let y = iy + i32(ky);
        if (y < 0 || y >= IH) { continue; }
        for (var kx = 0u; kx < k0; kx = kx + 1u) {
            let x = ix + i32(kx);
            if (x < 0 || x >= IW) { continue; }
            let v = bitcast<f32>(src0[t_at(1u, vec4<u32>(u32(x), u32(y), c.z, c.w))]);
            if (is_max) { out = max(out, v); } else { out = out + v; }
        }
    }
    if (!is_max) { out = out / f32(k0 * k1); }
    dst[t_at(0u, c)] = bitcast<u32>(out);
}
