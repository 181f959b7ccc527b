// im2col: dst[(ic*KH + kh)*KW + kw, ow, oh, n] = src1[ow*s0 + kw*d0 - p0, oh*s1 + kh*d1 - p1, ic, n]
// (0 outside). The 1-D case arrives folded into this one (KH = IH = OH = 1). Tensor slot 1 is
// src1 with strides (w, h, c, n). Scalars: n, KW, KH, IC, IW, IH, OW, OH, N, s0, s1, p0, p1, d0, d1.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let KW = su(1u);
    let KH = su(2u);
    let IW = su(4u);
    let IH = su(5u);
    let OW = su(6u);
    let OH = su(7u);
    let CHW = su(3u) * KH * KW;
    var r = i;
    let col = r % CHW;
    r = r / CHW;
    let ow = r % OW;
    r = r / OW;
    let oh = r % OH;
    let n = r / OH;
    let kw = col % KW;
    let kh = (col / KW) % KH;
    let ic = col / (KW * KH);
    let iw = i32(ow * su(9u) + kw * su(13u)) - i32(su(11u));
    let ih = i32(oh * su(10u) + kh * su(14u)) - i32(su(12u));
    var v = 0.0;
    if (iw >= 0 && iw < i32(IW) && ih >= 0 && ih < i32(IH)) {
        v = bitcast<f32>(src1[t_at(1u, vec4<u32>(u32(iw), u32(ih), ic, n))]);
    }
    write_dst(t_at(0u, vec4<u32>(col, ow, oh, n)), v);
}
