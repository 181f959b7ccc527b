// Row reductions, one workgroup per row: sum_rows, mean, argmax (i32, last maximum, as ggml), sum
// of all elements (one workgroup). Scalars: rows, op (a ROWS_* code, the constants generated from
// the planner's table).
var<workgroup> rv: array<f32, 256>;
var<workgroup> ri: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wg_index(wid, nwg);
    if (row >= su(0u)) { return; }
    let op = su(1u);
    let ne00 = t_ne(1u, 0u);
    let ne01 = t_ne(1u, 1u);
    let ne02 = t_ne(1u, 2u);
    var n = ne00;
    if (op == ROWS_SUM) { n = ne00 * ne01 * ne02 * t_ne(1u, 3u); }
    let c = vec4<u32>(0u, row % ne01, (row / ne01) % ne02, row / (ne01 * ne02));
    var acc = 0.0;
    var best = bitcast<f32>(0xff7fffffu);
    var besti = 0xFFFFFFFFu;
    for (var i = lid; i < n; i = i + 256u) {
        var x: f32;
        if (op == ROWS_SUM) {
            x = bitcast<f32>(src0[t_at(1u, t_coords(1u, i))]);
        } else {
            x = bitcast<f32>(src0[t_at(1u, c) + i * t_nb(1u, 0u)]);
        }
        acc = acc + x;
        if (x >= best || besti == 0xFFFFFFFFu) { best = x; besti = i; }
    }
    rv[lid] = select(acc, best, op == ROWS_ARGMAX);
    ri[lid] = besti;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            if (op == ROWS_ARGMAX) {
                let o = lid + s;
                if (ri[o] != 0xFFFFFFFFu && (ri[lid] == 0xFFFFFFFFu || rv[o] > rv[lid] || (rv[o] == rv[lid] && ri[o] > ri[lid]))) {
                    rv[lid] = rv[o];
                    ri[lid] = ri[o];
                }
            } else {
                rv[lid] = rv[lid] + rv[lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var out: u32;
        switch op {
            case ROWS_MEAN: { out = bitcast<u32>(rv[0] / f32(ne00)); }
            case ROWS_ARGMAX: { out = ri[0]; }
            case ROWS_SUM_ROWS, ROWS_SUM, default: { out = bitcast<u32>(rv[0]); }
        }
        if (op == ROWS_SUM) {
            dst[t_off(0u)] = out;
        } else if (op == ROWS_ARGMAX) {
            dst[t_off(0u) + row * t_nb(0u, 0u)] = out;
        } else {
            dst[t_at(0u, c) ] = out;
        }
    }
}
