// dst[:, i10, i11, i12] = src0[:, src1[i10, i11, i12], i11, i12] (dequantized to f32);
// an index outside src0's rows gives NaN. Scalars: n, r0, rows. The binding holds rows
// r0 .. r0 + ne01 of the `rows` rows of src0 (a matrix too large for one binding is gathered by
// several dispatches, each writing the rows it holds).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    let r = bitcast<i32>(src1[t_at(2u, vec4<u32>(c.y, c.z, c.w, 0u))]);
    let r0 = su(1u);
    if (r < 0 || u32(r) >= su(2u)) {
        // An index outside the rows gives NaN, as the CPU backend.
        if (r0 == 0u) { dst[t_at(0u, c)] = 0x7FC00000u; }
        return;
    }
    if (u32(r) < r0 || u32(r) - r0 >= t_ne(1u, 1u)) { return; }
    let row = u32(r) - r0;
    let base = t_off(1u) + row * t_nb(1u, 1u) + c.z * t_nb(1u, 2u) + c.w * t_nb(1u, 3u);
    dst[t_at(0u, c)] = bitcast<u32>(load_a(base, c.x));
}
