// cpy / cont / dup with type conversion: the i-th element of src0 (row-major) goes to the i-th
// element of dst. `read_src` and `write_dst` are generated per type. Scalars: n.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let v = read_src(t_at(1u, t_coords(1u, i)));
    write_dst(t_at(0u, t_coords(0u, i)), v);
}

// The rest is compiled only for the pairs variant.
// @@PAIRS@@
// f16 destination without shader-f16: dst is bound as u32 words; each invocation writes one word
// (two halves). dst is contiguous, or its rows are: an even number of halves each, every stride
// and the offset a whole number of words (a head-major KV cache's store), so elements 2w and
// 2w + 1 always share a word that no other invocation writes.
@compute @workgroup_size(256)
fn main_pairs(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let w = wg_index(wid, nwg) * 256u + lid;
    let n = su(0u);
    let e = 2u * w;
    if (e >= n) { return; }
    let word = t_at(0u, t_coords(0u, e)) >> 1u;
    let v0 = read_src(t_at(1u, t_coords(1u, e)));
    var v1: f32;
    if (e + 1u < n) {
        v1 = read_src(t_at(1u, t_coords(1u, e + 1u)));
    } else {
        v1 = unpack2x16float(dst[word]).y;
    }
    dst[word] = pack2x16float(vec2<f32>(v0, v1));
}
