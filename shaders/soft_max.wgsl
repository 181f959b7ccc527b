// soft_max(src0 * scale + slope * mask) per row; one workgroup per row. The mask (src1, f32 or
// f16 via `read_mask`) is indexed by row i01 and broadcast over dims 2 and 3. ALiBi slope from
// max_bias as ggml. Scalars: rows, scale, has_mask, max_bias, n_head_log2, m0, m1.
var<workgroup> red: array<f32, 256>;

fn sm_value(i0: u32, xb: u32, mb: u32, scale: f32, slope: f32, has_mask: bool) -> f32 {
    var v = bitcast<f32>(src0[xb + i0 * t_nb(1u, 0u)]) * scale;
    if (has_mask) { v = v + slope * read_mask(mb + i0 * t_nb(2u, 0u)); }
    return v;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wg_index(wid, nwg);
    if (row >= su(0u)) { return; }
    let ne00 = t_ne(1u, 0u);
    let ne01 = t_ne(1u, 1u);
    let ne02 = t_ne(1u, 2u);
    let i01 = row % ne01;
    let i02 = (row / ne01) % ne02;
    let i03 = row / (ne01 * ne02);
    let scale = sf(1u);
    let has_mask = su(2u) != 0u;
    let max_bias = sf(3u);
    var slope = 1.0;
    if (max_bias > 0.0) {
        let nhl = su(4u);
        if (i02 < nhl) {
            slope = pow(sf(5u), f32(i02 + 1u));
        } else {
            slope = pow(sf(6u), f32(2u * (i02 - nhl) + 1u));
        }
    }
    let xb = t_at(1u, vec4<u32>(0u, i01, i02, i03));
    let mb = t_at(2u, vec4<u32>(0u, i01, i02 % t_ne(2u, 2u), i03 % t_ne(2u, 3u)));
    let db = t_at(0u, vec4<u32>(0u, i01, i02, i03));
    let nb0 = t_nb(0u, 0u);

    var mx = bitcast<f32>(0xff7fffffu);
    for (var i0 = lid; i0 < ne00; i0 = i0 + 256u) {
        mx = max(mx, sm_value(i0, xb, mb, scale, slope, has_mask));
    }
    red[lid] = mx;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
        workgroupBarrier();
    }
    mx = red[0];
    workgroupBarrier();

    var sum = 0.0;
    for (var i0 = lid; i0 < ne00; i0 = i0 + 256u) {
        let e = exp(sm_value(i0, xb, mb, scale, slope, has_mask) - mx);
        sum = sum + e;
        dst[db + i0 * nb0] = bitcast<u32>(e);
    }
    red[lid] = sum;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
        workgroupBarrier();
    }
    let inv = 1.0 / red[0];
    for (var i0 = lid; i0 < ne00; i0 = i0 + 256u) {
        dst[db + i0 * nb0] = bitcast<u32>(bitcast<f32>(dst[db + i0 * nb0]) * inv);
    }
}
