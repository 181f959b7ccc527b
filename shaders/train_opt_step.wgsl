// The optimizer steps, in place on the parameter (dst; contiguous, as the gradient and the
// state). Bindings: dst, src1 = the gradient, the hyper-parameters, AdamW's state [n, 2] (the
// first moments, then the second). One invocation per element. Scalars: n.
//
// AdamW (ggml_opt_step_adamw), hp = [alpha, beta1, beta2, eps, wd, 1/(1-beta1^t), 1/(1-beta2^t)]:
// m = beta1 m + (1-beta1) g; v = beta2 v + (1-beta2) g^2;
// w = w (1 - alpha wd) - alpha (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps).
fn hp(k: u32) -> f32 { return bitcast<f32>(src2[t_off(2u) + k]); }

@compute @workgroup_size(256)
fn main_adamw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    let n = su(0u);
    if (i >= n) { return; }
    let alpha = hp(0u);
    let beta1 = hp(1u);
    let beta2 = hp(2u);
    let g = bitcast<f32>(src1[t_off(1u) + i]);
    let mi = t_off(3u) + i;
    let vi = mi + n;
    let m = bitcast<f32>(src3[mi]) * beta1 + g * (1.0 - beta1);
    let v = bitcast<f32>(src3[vi]) * beta2 + g * g * (1.0 - beta2);
    src3[mi] = bitcast<u32>(m);
    src3[vi] = bitcast<u32>(v);
    let mh = m * hp(5u);
    let vh = sqrt(v * hp(6u)) + hp(3u);
    let wi = t_off(0u) + i;
    let w = bitcast<f32>(dst[wi]);
    dst[wi] = bitcast<u32>(w * (1.0 - alpha * hp(4u)) - alpha * mh / vh);
}

// SGD, hp = [alpha, wd]: w = w (1 - alpha wd) - alpha g.
@compute @workgroup_size(256)
fn main_sgd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = wg_index(wid, nwg) * 256u + lid;
    if (i >= su(0u)) { return; }
    let alpha = hp(0u);
    let g = bitcast<f32>(src1[t_off(1u) + i]);
    let wi = t_off(0u) + i;
    let w = bitcast<f32>(dst[wi]);
    dst[wi] = bitcast<u32>(w * (1.0 - alpha * hp(1u)) - alpha * g);
}
