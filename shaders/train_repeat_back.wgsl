// repeat_back: dst[c] = sum of src0 over the tiles of dst's shape that repeat into src0's. One
// workgroup per dst element, its lanes over the tiles (a bias gradient sums a whole batch).
// Scalars: n (dst elements), tiles.
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = wg_index(wid, nwg);
    if (e >= su(0u)) { return; }
    let c = t_coords(0u, e);
    let d = vec4<u32>(t_ne(0u, 0u), t_ne(0u, 1u), t_ne(0u, 2u), t_ne(0u, 3u));
    let r0 = t_ne(1u, 0u) / d.x;
    let r1 = t_ne(1u, 1u) / d.y;
    let r2 = t_ne(1u, 2u) / d.z;
    var s = 0.0;
    for (var t = lid; t < su(1u); t = t + 256u) {
        var q = t;
        let t0 = q % r0;
        q = q / r0;
        let t1 = q % r1;
        q = q / r1;
        let t2 = q % r2;
        let t3 = q / r2;
        s = s + bitcast<f32>(src0[t_at(1u, c + vec4<u32>(t0, t1, t2, t3) * d)]);
    }
    red[lid] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k = k >> 1u) {
        if (lid < k) { red[lid] = red[lid] + red[lid + k]; }
        workgroupBarrier();
    }
    if (lid == 0u) { dst[t_at(0u, c)] = bitcast<u32>(red[0]); }
}
