// RoPE (ggml_rope_ext with YaRN): one invocation per pair. Normal mode rotates (2i, 2i+1), NeoX
// rotates (i, i + n_dims/2); dimensions past n_dims are copied. src1: i32 positions (one per
// ne2), src2: optional frequency factors. Scalars: pairs, n_dims, neox, theta_scale, freq_scale,
// ext_factor, attn_factor, corr_dims[2], has_ff, sin_sign (-1: rope_back, the rotation by the
// negated angles).
fn yarn_ramp(low: f32, high: f32, i0: u32) -> f32 {
    let y = (f32(i0 / 2u) - low) / max(0.001, high - low);
    return 1.0 - min(1.0, max(0.0, y));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let half = t_ne(0u, 0u) / 2u;
    let ic = i % half;
    let r = i / half;
    let ne1 = t_ne(0u, 1u);
    let ne2 = t_ne(0u, 2u);
    let i1 = r % ne1;
    let i2 = (r / ne1) % ne2;
    let i3 = r / (ne1 * ne2);
    let n_dims = su(1u);
    let i0 = 2u * ic;
    if (i0 >= n_dims) {
        let ca = vec4<u32>(i0, i1, i2, i3);
        let cb = vec4<u32>(i0 + 1u, i1, i2, i3);
        dst[t_at(0u, ca)] = src0[t_at(1u, ca)];
        dst[t_at(0u, cb)] = src0[t_at(1u, cb)];
        return;
    }
    let pos = f32(bitcast<i32>(src1[t_off(2u) + i2 * t_nb(2u, 0u)]));
    var theta = pos;
    let theta_scale = sf(3u);
    for (var k = 0u; k < ic; k = k + 1u) { theta = theta * theta_scale; }
    var ff = 1.0;
    if (su(9u) != 0u) { ff = bitcast<f32>(src2[t_off(3u) + ic * t_nb(3u, 0u)]); }
    let theta_extrap = theta / ff;
    let freq_scale = sf(4u);
    let ext_factor = sf(5u);
    var mscale = sf(6u);
    let theta_interp = freq_scale * theta_extrap;
    var th = theta_interp;
    if (ext_factor != 0.0) {
        let ramp_mix = yarn_ramp(sf(7u), sf(8u), i0) * ext_factor;
        th = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
        mscale = mscale * (1.0 + 0.1 * log(1.0 / freq_scale));
    }
    let cos_t = cos(th) * mscale;
    let sin_t = sin(th) * mscale * sf(10u);
    var a = i0;
    var b = i0 + 1u;
    if (su(2u) != 0u) {
        a = ic;
        b = ic + n_dims / 2u;
    }
    let x0 = bitcast<f32>(src0[t_at(1u, vec4<u32>(a, i1, i2, i3))]);
    let x1 = bitcast<f32>(src0[t_at(1u, vec4<u32>(b, i1, i2, i3))]);
    dst[t_at(0u, vec4<u32>(a, i1, i2, i3))] = bitcast<u32>(x0 * cos_t - x1 * sin_t);
    dst[t_at(0u, vec4<u32>(b, i1, i2, i3))] = bitcast<u32>(x0 * sin_t + x1 * cos_t);
}
