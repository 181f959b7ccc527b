// unary_back: dst = src0 (the gradient) * f'(src1) for the unary function f (a UNARY_BACK_*
// code). One invocation per element. Scalars: n, op.
fn erf_approx(x: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7).
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
        + 0.254829592) * t * exp(-x * x);
    return select(-y, y, x >= 0.0);
}

fn sigmoid(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let c = t_coords(0u, i);
    let g = bitcast<f32>(src0[t_at(1u, c)]);
    let x = bitcast<f32>(src1[t_at(2u, c)]);
    var d: f32;
    switch su(1u) {
        case UNARY_BACK_ABS: { d = sign(x); }
        case UNARY_BACK_NEG: { d = -1.0; }
        case UNARY_BACK_RELU: { d = select(0.0, 1.0, x > 0.0); }
        case UNARY_BACK_GELU: {
            let k = 0.7978845608028654;
            let t = tanh(clamp(k * (x + 0.044715 * x * x * x), -10.0, 10.0));
            d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
        }
        case UNARY_BACK_GELU_ERF: {
            d = 0.5 * (1.0 + erf_approx(x * 0.7071067811865476))
                + x * exp(-0.5 * x * x) * 0.3989422804014327;
        }
        case UNARY_BACK_SILU: {
            let s = sigmoid(x);
            d = s * (1.0 + x * (1.0 - s));
        }
        case UNARY_BACK_TANH: {
            let t = tanh(clamp(x, -10.0, 10.0));
            d = 1.0 - t * t;
        }
        case UNARY_BACK_SIGMOID: {
            let s = sigmoid(x);
            d = s * (1.0 - s);
        }
        case UNARY_BACK_EXP, default: { d = exp(x); }
    }
    dst[t_at(0u, c)] = bitcast<u32>(g * d);
}
