// add / sub / mul / div with src1 broadcast to src0's shape. Scalars: n, op (a BINARY_* code,
// the constants generated from the planner's table).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    let cb = vec4<u32>(c.x % t_ne(2u, 0u), c.y % t_ne(2u, 1u), c.z % t_ne(2u, 2u), c.w % t_ne(2u, 3u));
    let a = bitcast<f32>(src0[t_at(1u, c)]);
    let b = bitcast<f32>(src1[t_at(2u, cb)]);
    var r: f32;
    switch su(1u) {
        case BINARY_ADD: { r = a + b; }
        case BINARY_SUB: { r = a - b; }
        case BINARY_MUL: { r = a * b; }
        case BINARY_DIV, default: { r = a / b; }
    }
    dst[t_at(0u, c)] = bitcast<u32>(r);
}
