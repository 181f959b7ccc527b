// get_rows_back: dst[i0, r, i2, i3] = sum of src0[i0, j, i2, i3] over the j with
// src1[j, i2, i3] == r (a gather: one invocation per dst element, so repeated rows add up
// without atomics; ids out of range add nowhere). Scalars: n.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    var acc = 0.0;
    for (var j = 0u; j < t_ne(1u, 1u); j = j + 1u) {
        let r = bitcast<i32>(src1[t_at(2u, vec4<u32>(j, c.z, c.w, 0u))]);
        if (r == i32(c.y)) {
            acc = acc + bitcast<f32>(src0[t_at(1u, vec4<u32>(c.x, j, c.z, c.w))]);
        }
    }
    dst[t_at(0u, c)] = bitcast<u32>(acc);
}
