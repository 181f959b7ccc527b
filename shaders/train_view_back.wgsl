// view_back: dst (contiguous, zeros) with src0 (the gradient of a view of it) added where the
// view lies. A gather, one invocation per dst element: the view elements landing on element e
// are the (i0..i3) with offset + sum i_k s_k = e; strides are not negative, so the loops over
// i3, i2, i1 stop once past e and i0 is solved for (every i0 when s0 is 0).
// Scalars: n, offset, s0, s1, s2, s3 (in f32 elements).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = wg_index(wid, nwg) * 256u + lid;
    if (e >= su(0u)) { return; }
    var acc = 0.0;
    let off = su(1u);
    let s = vec4<u32>(su(2u), su(3u), su(4u), su(5u));
    let ne = vec4<u32>(t_ne(1u, 0u), t_ne(1u, 1u), t_ne(1u, 2u), t_ne(1u, 3u));
    if (e >= off) {
        let r = e - off;
        for (var i3 = 0u; i3 < ne.w; i3 = i3 + 1u) {
            let p3 = i3 * s.w;
            if (p3 > r) { break; }
            for (var i2 = 0u; i2 < ne.z; i2 = i2 + 1u) {
                let p2 = p3 + i2 * s.z;
                if (p2 > r) { break; }
                for (var i1 = 0u; i1 < ne.y; i1 = i1 + 1u) {
                    let p1 = p2 + i1 * s.y;
                    if (p1 > r) { break; }
                    let rem = r - p1;
                    if (s.x == 0u) {
                        if (rem == 0u) {
                            for (var i0 = 0u; i0 < ne.x; i0 = i0 + 1u) {
                                acc = acc + bitcast<f32>(src0[t_at(1u, vec4<u32>(i0, i1, i2, i3))]);
                            }
                        }
                    } else if (rem % s.x == 0u && rem / s.x < ne.x) {
                        acc = acc + bitcast<f32>(src0[t_at(1u, vec4<u32>(rem / s.x, i1, i2, i3))]);
                    }
                }
            }
        }
    }
    dst[t_off(0u) + e] = bitcast<u32>(acc);
}
