// Elementwise unary functions, scale, sqr/sqrt/log and repeat (src0 is indexed modulo its shape,
// so a smaller src0 is tiled). Scalars: n, op (a UNARY_* code, the constants generated from the
// planner's table), s, b.
fn erf_approx(x: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7).
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
        + 0.254829592) * t * exp(-x * x);
    return select(-y, y, x >= 0.0);
}

fn tanh_safe(x: f32) -> f32 { return tanh(clamp(x, -10.0, 10.0)); }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    let cs = vec4<u32>(c.x % t_ne(1u, 0u), c.y % t_ne(1u, 1u), c.z % t_ne(1u, 2u), c.w % t_ne(1u, 3u));
    let x = bitcast<f32>(src0[t_at(1u, cs)]);
    var r: f32;
    switch su(1u) {
        case UNARY_ABS: { r = abs(x); }
        case UNARY_NEG: { r = -x; }
        case UNARY_RELU: { r = max(x, 0.0); }
        case UNARY_GELU: {
            r = 0.5 * x * (1.0 + tanh_safe(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
        }
        case UNARY_GELU_ERF: { r = 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476)); }
        case UNARY_SILU: { r = x / (1.0 + exp(-x)); }
        case UNARY_TANH: { r = tanh_safe(x); }
        case UNARY_SIGMOID: { r = 1.0 / (1.0 + exp(-x)); }
        case UNARY_EXP: { r = exp(x); }
        case UNARY_SCALE: { r = x * sf(2u) + sf(3u); }
        case UNARY_SQR: { r = x * x; }
        case UNARY_SQRT: { r = sqrt(x); }
        case UNARY_LOG: { r = log(x); }
        case UNARY_REPEAT, default: { r = x; }
    }
    dst[t_at(0u, c)] = bitcast<u32>(r);
}
