//! WGSL assembly: the kernel bodies of `shaders/`, the common header, a storage declaration per
//! tensor binding and the type-dependent helpers (readers, writers, dequantizers), plus the op
//! codes kernels switch on, emitted from Rust enums so that planner and shader cannot disagree.

use crate::DType;

pub(super) const COMMON: &str = include_str!("../../../../shaders/common.wgsl");
pub(super) const QUANTS: &str = include_str!("../../../../shaders/quants.wgsl");
pub(super) const BINARY: &str = include_str!("../../../../shaders/binary.wgsl");
pub(super) const UNARY: &str = include_str!("../../../../shaders/unary.wgsl");
pub(super) const CPY: &str = include_str!("../../../../shaders/cpy.wgsl");
pub(super) const MUL_MAT: &str = include_str!("../../../../shaders/mul_mat.wgsl");
pub(super) const GET_ROWS: &str = include_str!("../../../../shaders/get_rows.wgsl");
pub(super) const SOFT_MAX: &str = include_str!("../../../../shaders/soft_max.wgsl");
pub(super) const NORM: &str = include_str!("../../../../shaders/norm.wgsl");
pub(super) const ROPE: &str = include_str!("../../../../shaders/rope.wgsl");
pub(super) const CONCAT: &str = include_str!("../../../../shaders/concat.wgsl");
pub(super) const IM2COL: &str = include_str!("../../../../shaders/im2col.wgsl");
pub(super) const POOL_2D: &str = include_str!("../../../../shaders/pool_2d.wgsl");
pub(super) const ROWS: &str = include_str!("../../../../shaders/rows.wgsl");

/// An enum of the codes a kernel switches on (its scalar word 1). `wgsl()` gives the shader one
/// `const <PREFIX>_<NAME>: u32 = <code>u;` per variant; the shader names only those constants.
macro_rules! op_codes {
    ($(#[$m:meta])* $name:ident, $prefix:literal { $($v:ident = $w:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum $name {
            $($v),+
        }

        impl $name {
            pub(crate) fn code(self) -> u32 {
                self as u32
            }

            /// The WGSL constants of every code.
            pub(crate) fn wgsl() -> String {
                [$(format!("const {}_{}: u32 = {}u;\n", $prefix, $w, $name::$v.code())),+].concat()
            }
        }
    };
}
pub(super) use op_codes;

pub(super) fn tname(dtype: DType) -> String {
    format!("{dtype}").to_lowercase()
}

/// Storage declaration of binding `b` named `name` holding `elem`s.
fn decl(b: usize, name: &str, elem: &str) -> String {
    format!("@group(0) @binding({b}) var<storage, read_write> {name}: array<{elem}>;\n")
}

/// The element type a tensor of `dtype` is bound as.
pub(super) fn elem(dtype: DType, f16: bool) -> &'static str {
    if dtype == DType::F16 && f16 {
        "f16"
    } else {
        "u32"
    }
}

/// WGSL of `fn <name>(i: u32) -> f32` reading element i of binding `var` of type `dtype`.
pub(super) fn reader(name: &str, var: &str, dtype: DType, f16: bool) -> String {
    match dtype {
        DType::F16 if f16 => format!("fn {name}(i: u32) -> f32 {{ return f32({var}[i]); }}\n"),
        DType::F16 => format!(
            "fn {name}(i: u32) -> f32 {{ return unpack2x16float({var}[i >> 1u])[i & 1u]; }}\n"
        ),
        _ => format!("fn {name}(i: u32) -> f32 {{ return bitcast<f32>({var}[i]); }}\n"),
    }
}

/// WGSL of `fn write_dst(i: u32, v: f32)`.
pub(super) fn writer(dtype: DType, f16: bool) -> String {
    match dtype {
        DType::F16 if f16 => "fn write_dst(i: u32, v: f32) { dst[i] = f16(v); }\n".into(),
        _ => "fn write_dst(i: u32, v: f32) { dst[i] = bitcast<u32>(v); }\n".into(),
    }
}

/// WGSL of `fn load_a(base: u32, k: u32) -> f32`: element k of the row starting at `base`
/// (units of src0's binding) of a weight of `dtype`.
pub(super) fn load_a(dtype: DType, f16: bool) -> String {
    use DType::*;
    match dtype {
        F32 | F16 => format!(
            "{}fn load_a(base: u32, k: u32) -> f32 {{ return read_a(base + k); }}\n",
            reader("read_a", "src0", dtype, f16)
        ),
        q => format!(
            "{QUANTS}fn load_a(base: u32, k: u32) -> f32 {{ return deq_{}(base, k); }}\n",
            tname(q)
        ),
    }
}

fn header(f16: bool) -> String {
    let mut s = String::new();
    if f16 {
        s.push_str("enable f16;\n");
    }
    s.push_str(COMMON);
    s
}

/// WGSL of a kernel: the common header, a storage declaration per tensor binding (1.. in order,
/// (name, element type)), the type-dependent helpers `extra` (readers, writers, dequantizers,
/// op codes) and the body (`shaders/<kernel>.wgsl`).
pub(super) fn shader(f16: bool, binds: &[(&str, &str)], extra: &str, body: &str) -> String {
    let mut s = header(f16);
    for (i, (name, elem)) in binds.iter().enumerate() {
        s.push_str(&decl(i + 1, name, elem));
    }
    s.push_str(extra);
    s.push_str(body);
    s
}

/// The source builder of a kernel whose tensors are all bound as `u32` words, with the helpers
/// (e.g. op codes) `extra`.
pub(super) fn plain(
    names: &'static [&'static str],
    extra: String,
    body: &'static str,
) -> Box<dyn Fn(bool) -> String> {
    Box::new(move |f16| {
        let binds: Vec<(&str, &str)> = names.iter().map(|n| (*n, "u32")).collect();
        shader(f16, &binds, &extra, body)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::webgpu::plan::{BinaryFn, RowsFn, UnaryFn};

    /// Each kernel that switches on an op code names every generated constant and no literal
    /// code, so a code added on one side only fails to compile.
    #[test]
    fn shaders_switch_on_the_generated_codes() {
        for (consts, body) in [
            (BinaryFn::wgsl(), BINARY),
            (UnaryFn::wgsl(), UNARY),
            (RowsFn::wgsl(), ROWS),
        ] {
            for line in consts.lines() {
                let name = line.split_whitespace().nth(1).expect("const NAME: ...");
                let name = name.trim_end_matches(':');
                assert!(body.contains(name), "{name} unused in its shader");
            }
            assert!(!body.contains("case 0u"), "literal op code in a shader");
        }
    }
}
