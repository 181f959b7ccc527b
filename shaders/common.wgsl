// Shared by every kernel (prepended by crate/src/backend/webgpu/kernels.rs).
// Binding 0: 64 parameter words. Words 9t..9t+8 describe tensor slot t (0 = dst, 1 = src0, ...):
// element offset inside its binding, ne[4], nb[4] (in elements of the binding). Kernel scalars
// start at word 36.
struct Params {
    v: array<vec4<u32>, 16>,
};
@group(0) @binding(0) var<uniform> P: Params;

fn pu(i: u32) -> u32 { return P.v[i >> 2u][i & 3u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }
fn t_off(t: u32) -> u32 { return pu(t * 9u); }
fn t_ne(t: u32, d: u32) -> u32 { return pu(t * 9u + 1u + d); }
fn t_nb(t: u32, d: u32) -> u32 { return pu(t * 9u + 5u + d); }
fn su(i: u32) -> u32 { return pu(36u + i); }
fn sf(i: u32) -> f32 { return pf(36u + i); }

// Linear workgroup index of a 2-D grid (large dispatches are split over x and y).
fn wg_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return wid.y * nwg.x + wid.x; }

// Element index of tensor slot t at coordinates c.
fn t_at(t: u32, c: vec4<u32>) -> u32 {
    return t_off(t) + c.x * t_nb(t, 0u) + c.y * t_nb(t, 1u) + c.z * t_nb(t, 2u) + c.w * t_nb(t, 3u);
}

// Coordinates of the i-th element (row-major over ne) of tensor slot t.
fn t_coords(t: u32, i: u32) -> vec4<u32> {
    let n0 = t_ne(t, 0u);
    let n1 = t_ne(t, 1u);
    let n2 = t_ne(t, 2u);
    var r = i;
    let c0 = r % n0;
    r = r / n0;
    let c1 = r % n1;
    r = r / n1;
    let c2 = r % n2;
    let c3 = r / n2;
    return vec4<u32>(c0, c1, c2, c3);
}
