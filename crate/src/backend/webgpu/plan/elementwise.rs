//! Elementwise kernels: binary (`binary.wgsl`), unary and scalar functions (`unary.wgsl`),
//! copies and conversions (`cpy.wgsl`), concat (`concat.wgsl`).

use super::{Kernel, Planner, WG};
use crate::backend::webgpu::shader::{
    elem, op_codes, plain, reader, shader, tname, writer, BINARY, CONCAT, CPY, UNARY,
};
use crate::tensor::{Op, UnaryOp};
use crate::{DType, Error, Result};

op_codes!(
    /// The operations of `binary.wgsl`.
    BinaryFn, "BINARY" { Add = "ADD", Sub = "SUB", Mul = "MUL", Div = "DIV" }
);

op_codes!(
    /// The functions of `unary.wgsl` (`Repeat` copies, tiling a smaller src0).
    UnaryFn, "UNARY" {
        Abs = "ABS",
        Neg = "NEG",
        Relu = "RELU",
        Gelu = "GELU",
        GeluErf = "GELU_ERF",
        Silu = "SILU",
        Tanh = "TANH",
        Sigmoid = "SIGMOID",
        Exp = "EXP",
        Scale = "SCALE",
        Sqr = "SQR",
        Sqrt = "SQRT",
        Log = "LOG",
        Repeat = "REPEAT",
    }
);

pub(super) fn binary<'a>(p: &mut Planner<'a>) -> Result<Kernel<'a>> {
    let t = p.t();
    let n = t.nelements();
    p.tensors(&[0, 1])?;
    p.u(0, n as u32);
    let f = match t.op {
        Op::Add => BinaryFn::Add,
        Op::Sub => BinaryFn::Sub,
        Op::Mul => BinaryFn::Mul,
        _ => BinaryFn::Div,
    };
    p.u(1, f.code());
    Ok(Kernel {
        key: "binary".into(),
        entry: "main",
        groups: p.grid(n, WG),
        make_src: binary_src(),
    })
}

pub(super) fn binary_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0", "src1"], BinaryFn::wgsl(), BINARY)
}

pub(super) fn unary<'a>(p: &mut Planner<'a>) -> Result<Kernel<'a>> {
    let t = p.t();
    let n = t.nelements();
    p.tensors(&[0])?;
    p.u(0, n as u32);
    let (f, s, b) = match t.op {
        Op::Unary(u) => (
            match u {
                UnaryOp::Abs => UnaryFn::Abs,
                UnaryOp::Neg => UnaryFn::Neg,
                UnaryOp::Relu => UnaryFn::Relu,
                UnaryOp::Gelu => UnaryFn::Gelu,
                UnaryOp::GeluErf => UnaryFn::GeluErf,
                UnaryOp::Silu => UnaryFn::Silu,
                UnaryOp::Tanh => UnaryFn::Tanh,
                UnaryOp::Sigmoid => UnaryFn::Sigmoid,
                UnaryOp::Exp => UnaryFn::Exp,
            },
            0.0,
            0.0,
        ),
        Op::Scale { s, b } => (UnaryFn::Scale, s, b),
        Op::Sqr => (UnaryFn::Sqr, 0.0, 0.0),
        Op::Sqrt => (UnaryFn::Sqrt, 0.0, 0.0),
        Op::Log => (UnaryFn::Log, 0.0, 0.0),
        _ => (UnaryFn::Repeat, 0.0, 0.0),
    };
    p.u(1, f.code());
    p.f(2, s);
    p.f(3, b);
    Ok(Kernel {
        key: "unary".into(),
        entry: "main",
        groups: p.grid(n, WG),
        make_src: unary_src(),
    })
}

pub(super) fn unary_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0"], UnaryFn::wgsl(), UNARY)
}

/// dup, cont and cpy: f32/f16 to f32/f16. On the f32 path an f16 destination is written in
/// pairs of halves per word (`main_pairs`).
pub(super) fn cpy<'a>(p: &mut Planner<'a>) -> Result<Kernel<'a>> {
    let t = p.t();
    let (n, d) = (t.nelements(), t.dtype);
    let s0 = p.ctx.tensor(p.src(0)).dtype;
    p.tensors(&[0])?;
    p.u(0, n as u32);
    let pairs = d == DType::F16 && !p.shared.use_f16;
    if pairs && !p.params[0].is_multiple_of(2) {
        return Err(Error::Backend(format!(
            "f16 destination '{}' is not 4-byte aligned (f32 path)",
            t.name
        )));
    }
    Ok(Kernel {
        key: cpy_key(s0, d, pairs),
        entry: cpy_entry(pairs),
        groups: p.grid(if pairs { n.div_ceil(2) } else { n }, WG),
        make_src: cpy_src(s0, d, pairs),
    })
}

pub(super) fn cpy_key(s0: DType, d: DType, pairs: bool) -> String {
    format!(
        "cpy_{}_{}{}",
        tname(s0),
        tname(d),
        if pairs { "_pairs" } else { "" }
    )
}

pub(super) fn cpy_entry(pairs: bool) -> &'static str {
    if pairs {
        "main_pairs"
    } else {
        "main"
    }
}

/// The copy from `s0` to `d`; `pairs`: the f32 path's f16 destination, two halves per word.
pub(super) fn cpy_src(s0: DType, d: DType, pairs: bool) -> Box<dyn Fn(bool) -> String> {
    Box::new(move |f16| {
        let (single, pairs_src) = CPY.split_once("// @@PAIRS@@\n").unwrap_or((CPY, ""));
        shader(
            f16,
            &[("dst", elem(d, f16)), ("src0", elem(s0, f16))],
            &[reader("read_src", "src0", s0, f16), writer(d, f16)].concat(),
            if pairs { pairs_src } else { single },
        )
    })
}

pub(super) fn concat<'a>(p: &mut Planner<'a>, dim: usize) -> Result<Kernel<'a>> {
    let n = p.t().nelements();
    p.tensors(&[0, 1])?;
    p.u(0, n as u32);
    p.u(1, dim as u32);
    Ok(Kernel {
        key: "concat".into(),
        entry: "main",
        groups: p.grid(n, WG),
        make_src: concat_src(),
    })
}

pub(super) fn concat_src() -> Box<dyn Fn(bool) -> String> {
    plain(&["dst", "src0", "src1"], String::new(), CONCAT)
}
