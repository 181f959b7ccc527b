//! RoPE (`rope.wgsl`): normal and NeoX pair layouts, YaRN, optional frequency factors (without
//! them src0 is bound in their place); rope_back is the same rotation by the negated angles.

use super::{Kernel, Planner, WG};
use crate::backend::webgpu::shader::{plain, ROPE};
use crate::tensor::{RopeMode, RopeParams};
use crate::Result;

/// `sin_sign`: 1 for rope, -1 for rope_back.
pub(super) fn rope<'a>(p: &mut Planner<'a>, rp: &RopeParams, sin_sign: f32) -> Result<Kernel<'a>> {
    let t = p.t();
    p.tensors(&[0, 1])?;
    p.tensor(t.src[2].unwrap_or(p.src(0)))?;
    let pairs = t.nelements() / 2;
    p.u(0, pairs as u32);
    p.u(1, rp.n_dims as u32);
    p.u(2, (rp.mode == RopeMode::Neox) as u32);
    p.f(3, rp.theta_scale());
    p.f(4, rp.freq_scale);
    p.f(5, rp.ext_factor);
    p.f(6, rp.attn_factor);
    let corr = rp.yarn_corr_dims();
    p.f(7, corr[0]);
    p.f(8, corr[1]);
    p.u(9, t.src[2].is_some() as u32);
    p.f(10, sin_sign);
    Ok(Kernel {
        key: "rope".into(),
        entry: "main",
        groups: p.grid(pairs, WG),
        make_src: rope_src(),
    })
}

pub(super) fn rope_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0", "src1", "src2"], String::new(), ROPE)
}
