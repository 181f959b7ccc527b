// norm_back (op 0) and rms_norm's (op 1): the gradient of y = (x - mean) / sqrt(var + eps) (mean
// 0 for rms_norm) given dy = src0, x = src1, per row:
// dx = (dy - mean(dy) - y mean(dy y)) / sqrt(var + eps), without the mean(dy) term for rms_norm.
// One workgroup per row. Scalars: rows, op, eps.
var<workgroup> red: array<f32, 256>;

fn reduce_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wg_index(wid, nwg);
    if (row >= su(0u)) { return; }
    let ne0 = t_ne(0u, 0u);
    let ne1 = t_ne(0u, 1u);
    let ne2 = t_ne(0u, 2u);
    let c = vec4<u32>(0u, row % ne1, (row / ne1) % ne2, row / (ne1 * ne2));
    let db = t_at(0u, c);
    let gb = t_at(1u, c);
    let xb = t_at(2u, c);
    let nd = t_nb(0u, 0u);
    let ng = t_nb(1u, 0u);
    let nx = t_nb(2u, 0u);
    let n = f32(ne0);
    let rms = su(1u) == 1u;
    var mean = 0.0;
    if (!rms) {
        var s = 0.0;
        for (var i = lid; i < ne0; i = i + 256u) { s = s + bitcast<f32>(src1[xb + i * nx]); }
        mean = reduce_sum(lid, s) / n;
    }
    var s2 = 0.0;
    var sg = 0.0;
    for (var i = lid; i < ne0; i = i + 256u) {
        let d = bitcast<f32>(src1[xb + i * nx]) - mean;
        s2 = s2 + d * d;
        sg = sg + bitcast<f32>(src0[gb + i * ng]);
    }
    let inv = 1.0 / sqrt(reduce_sum(lid, s2) / n + sf(2u));
    var gm = reduce_sum(lid, sg) / n;
    if (rms) { gm = 0.0; }
    var sgy = 0.0;
    for (var i = lid; i < ne0; i = i + 256u) {
        let y = (bitcast<f32>(src1[xb + i * nx]) - mean) * inv;
        sgy = sgy + bitcast<f32>(src0[gb + i * ng]) * y;
    }
    let gy = reduce_sum(lid, sgy) / n;
    for (var i = lid; i < ne0; i = i + 256u) {
        let y = (bitcast<f32>(src1[xb + i * nx]) - mean) * inv;
        let g = bitcast<f32>(src0[gb + i * ng]);
        dst[db + i * nd] = bitcast<u32>(inv * (g - gm - y * gy));
    }
}
