// cross_entropy_loss: dst[0] = -(1/rows) sum over rows of sum_i src1[i] (src0[i] - lse(src0)),
// lse the row's log-sum-exp. One workgroup; each lane takes whole rows (the classes of a row are
// few: MNIST has 10), then the lanes' sums are reduced. Scalars: rows.
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
    let rows = su(0u);
    let ne0 = t_ne(1u, 0u);
    let ne1 = t_ne(1u, 1u);
    let ne2 = t_ne(1u, 2u);
    let nx = t_nb(1u, 0u);
    let ny = t_nb(2u, 0u);
    var total = 0.0;
    for (var r = lid; r < rows; r = r + 256u) {
        let c = vec4<u32>(0u, r % ne1, (r / ne1) % ne2, r / (ne1 * ne2));
        let xb = t_at(1u, c);
        let yb = t_at(2u, c);
        var mx = bitcast<f32>(0xff7fffffu);
        for (var i = 0u; i < ne0; i = i + 1u) { mx = max(mx, bitcast<f32>(src0[xb + i * nx])); }
        var s = 0.0;
        for (var i = 0u; i < ne0; i = i + 1u) { s = s + exp(bitcast<f32>(src0[xb + i * nx]) - mx); }
        let lse = log(s) + mx;
        for (var i = 0u; i < ne0; i = i + 1u) {
            let y = bitcast<f32>(src1[yb + i * ny]);
            total = total + y * (bitcast<f32>(src0[xb + i * nx]) - lse);
        }
    }
    red[lid] = total;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k = k >> 1u) {
        if (lid < k) { red[lid] = red[lid] + red[lid + k]; }
        workgroupBarrier();
    }
    if (lid == 0u) { dst[t_off(0u)] = bitcast<u32>(-red[0] / f32(rows)); }
}
