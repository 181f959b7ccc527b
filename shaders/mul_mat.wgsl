// dst[i, j] = sum_k src0[k, i] * src1[k, j], broadcast over dims 2 and 3 (src0's batch index is
// src1's divided by the ratios r2 = su(0), r3 = su(1)). `load_a(base, k)` reads (and dequantizes)
// element k of the src0 row starting at `base`; src1 and dst are f32.

fn a_row(i: u32, i12: u32, i13: u32) -> u32 {
    return t_off(1u) + i * t_nb(1u, 1u) + (i12 / su(0u)) * t_nb(1u, 2u) + (i13 / su(1u)) * t_nb(1u, 3u);
}

var<workgroup> red: array<f32, 64>;

// n == 1: one workgroup per output element (row i of src0 against one src1 column).
@compute @workgroup_size(64)
fn mat_vec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let g = wg_index(wid, nwg);
    let M = t_ne(1u, 1u);
    let K = t_ne(1u, 0u);
    let ne12 = t_ne(2u, 2u);
    let nb = ne12 * t_ne(2u, 3u);
    if (g >= M * nb) { return; }
    let i = g % M;
    let bidx = g / M;
    let i12 = bidx % ne12;
    let i13 = bidx / ne12;
    let abase = a_row(i, i12, i13);
    let bbase = t_off(2u) + i12 * t_nb(2u, 2u) + i13 * t_nb(2u, 3u);
    let nb10 = t_nb(2u, 0u);
    var acc = 0.0;
    for (var k = lid; k < K; k = k + 64u) {
        acc = acc + load_a(abase, k) * bitcast<f32>(src1[bbase + k * nb10]);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
        workgroupBarrier();
    }
    if (lid == 0u) {
        dst[t_off(0u) + i * t_nb(0u, 0u) + i12 * t_nb(0u, 2u) + i13 * t_nb(0u, 3u)] = bitcast<u32>(red[0]);
    }
}

// n > 1: 64 x 64 output tiles, 256 invocations each computing 4 x 4, K in steps of 16.
var<workgroup> As: array<f32, 1024>;
var<workgroup> Bs: array<f32, 1024>;

@compute @workgroup_size(256)
fn mat_mat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let M = t_ne(1u, 1u);
    let K = t_ne(1u, 0u);
    let N = t_ne(2u, 1u);
    let ne12 = t_ne(2u, 2u);
    let i12 = wid.z % ne12;
    let i13 = wid.z / ne12;
    let i0 = wid.x * 64u;
    let j0 = wid.y * 64u;
    let tx = lid % 16u;
    let ty = lid / 16u;
    let bbase = t_off(2u) + i12 * t_nb(2u, 2u) + i13 * t_nb(2u, 3u);
    let nb10 = t_nb(2u, 0u);
    let nb11 = t_nb(2u, 1u);
    var acc: array<f32, 16>;
    for (var q = 0u; q < 16u; q = q + 1u) { acc[q] = 0.0; }
    for (var k0 = 0u; k0 < K; k0 = k0 + 16u) {
        for (var t = 0u; t < 4u; t = t + 1u) {
            let e = lid + t * 256u;
            let r = e / 16u;
            let kk = e % 16u;
            let gk = k0 + kk;
            var va = 0.0;
            if (i0 + r < M && gk < K) { va = load_a(a_row(i0 + r, i12, i13), gk); }
            As[kk * 64u + r] = va;
            var vb = 0.0;
            if (j0 + r < N && gk < K) { vb = bitcast<f32>(src1[bbase + (j0 + r) * nb11 + gk * nb10]); }
            Bs[kk * 64u + r] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            let a = vec4<f32>(As[kk * 64u + ty * 4u], As[kk * 64u + ty * 4u + 1u],
                              As[kk * 64u + ty * 4u + 2u], As[kk * 64u + ty * 4u + 3u]);
            let b = vec4<f32>(Bs[kk * 64u + tx * 4u], Bs[kk * 64u + tx * 4u + 1u],
                              Bs[kk * 64u + tx * 4u + 2u], Bs[kk * 64u + tx * 4u + 3u]);
            for (var r = 0u; r < 4u; r = r + 1u) {
                acc[r * 4u + 0u] = acc[r * 4u + 0u] + a[r] * b.x;
                acc[r * 4u + 1u] = acc[r * 4u + 1u] + a[r] * b.y;
                acc[r * 4u + 2u] = acc[r * 4u + 2u] + a[r] * b.z;
                acc[r * 4u + 3u] = acc[r * 4u + 3u] + a[r] * b.w;
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < 4u; r = r + 1u) {
        let gi = i0 + ty * 4u + r;
        for (var c = 0u; c < 4u; c = c + 1u) {
            let gj = j0 + tx * 4u + c;
            if (gi < M && gj < N) {
                dst[t_off(0u) + gi * t_nb(0u, 0u) + gj * t_nb(0u, 1u) + i12 * t_nb(0u, 2u) + i13 * t_nb(0u, 3u)] =
                    bitcast<u32>(acc[r * 4u + c]);
            }
        }
    }
}

// n == 1 without workgroup memory: each invocation computes a whole output row (fits CPU
// emulations such as lavapipe, where barriers are expensive; chosen by the host per adapter).
@compute @workgroup_size(64)
fn mat_vec_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let g = wg_index(wid, nwg) * 64u + lid;
    let M = t_ne(1u, 1u);
    let K = t_ne(1u, 0u);
    let ne12 = t_ne(2u, 2u);
    let nb = ne12 * t_ne(2u, 3u);
    if (g >= M * nb) { return; }
    let i = g % M;
    let bidx = g / M;
    let i12 = bidx % ne12;
    let i13 = bidx / ne12;
    let abase = a_row(i, i12, i13);
    let bbase = t_off(2u) + i12 * t_nb(2u, 2u) + i13 * t_nb(2u, 3u);
    let nb10 = t_nb(2u, 0u);
    var acc = 0.0;
    for (var k = 0u; k < K; k = k + 1u) {
        acc = acc + load_a(abase, k) * bitcast<f32>(src1[bbase + k * nb10]);
    }
    dst[t_off(0u) + i * t_nb(0u, 0u) + i12 * t_nb(0u, 2u) + i13 * t_nb(0u, 3u)] = bitcast<u32>(acc);
}
