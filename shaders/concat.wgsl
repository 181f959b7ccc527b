// concat along dimension `dim` of two tensors of one 4-byte type. Scalars: n, dim.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    let dim = su(1u);
    let n0 = t_ne(1u, dim);
    var v: u32;
    if (c[dim] < n0) {
        v = src0[t_at(1u, c)];
    } else {
        var c1 = c;
        c1[dim] = c[dim] - n0;
        v = src1[t_at(2u, c1)];
    }
    dst[t_at(0u, c)] = v;
}
