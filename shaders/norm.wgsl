// norm (op 0: (x - mean) / sqrt(var + eps)) and rms_norm (op 1: x / sqrt(mean(x^2) + eps)) per
// row; one workgroup per row. Scalars: rows, op, eps.
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
    let ne00 = t_ne(1u, 0u);
    let ne01 = t_ne(1u, 1u);
    let ne02 = t_ne(1u, 2u);
    let c = vec4<u32>(0u, row % ne01, (row / ne01) % ne02, row / (ne01 * ne02));
    let xb = t_at(1u, c);
    let db = t_at(0u, c);
    let nx = t_nb(1u, 0u);
    let nd = t_nb(0u, 0u);
    let eps = sf(2u);
    let n = f32(ne00);
    if (su(1u) == 1u) {
        var s = 0.0;
        for (var i = lid; i < ne00; i = i + 256u) {
            let x = bitcast<f32>(src0[xb + i * nx]);
            s = s + x * x;
        }
        let scale = 1.0 / sqrt(reduce_sum(lid, s) / n + eps);
        for (var i = lid; i < ne00; i = i + 256u) {
            dst[db + i * nd] = bitcast<u32>(bitcast<f32>(src0[xb + i * nx]) * scale);
        }
    } else {
        var s = 0.0;
        for (var i = lid; i < ne00; i = i + 256u) {
            s = s + bitcast<f32>(src0[xb + i * nx]);
        }
        let mean = reduce_sum(lid, s) / n;
        var s2 = 0.0;
        for (var i = lid; i < ne00; i = i + 256u) {
            let d = bitcast<f32>(src0[xb + i * nx]) - mean;
            s2 = s2 + d * d;
        }
        let scale = 1.0 / sqrt(reduce_sum(lid, s2) / n + eps);
        for (var i = lid; i < ne00; i = i + 256u) {
            dst[db + i * nd] = bitcast<u32>((bitcast<f32>(src0[xb + i * nx]) - mean) * scale);
        }
    }
}
