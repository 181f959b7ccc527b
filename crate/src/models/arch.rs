//! Decoder architectures as data: what each family llama.cpp names in `general.architecture`
//! does differently, read by the one decoder builder in [`crate::models::llama`].
//!
//! Only what the metadata or the tensor list cannot tell is in the table: the rope layout, the
//! activation, gemma's extra norms and embedding scale, its local/global layer pattern. Optional
//! tensors (q/k/v and output biases, per-head q/k norms, fused `attn_qkv`, fused gate+up
//! `ffn_up`, `rope_freqs`, a separate `output`) are used when the file has them, as llama.cpp's
//! loader does; the table says which of them a family must have.

use crate::tensor::RopeMode;
use crate::{Error, Result};

/// Supported decoder architectures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Gemma3,
    Qwen2,
    Qwen3,
    Phi3,
}

/// The gated feed-forward activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// SwiGLU: silu(gate) * up.
    Silu,
    /// GeGLU with the tanh approximation: gelu(gate) * up.
    Gelu,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct ArchSpec {
    pub arch: Arch,
    /// The `general.architecture` value (also the metadata key prefix).
    pub name: &'static str,
    pub rope: RopeMode,
    pub act: Act,
    /// q, k and v have biases (`blk.N.attn_{q,k,v}.bias`), required.
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k before rope (`attn_q_norm`, `attn_k_norm`), required.
    pub qk_norm: bool,
    /// RMSNorm after attention and after the FFN (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// The embeddings are scaled by sqrt(n_embd).
    pub embd_scale: bool,
    /// Every `swa_pattern`-th layer is global, the others use a sliding window of
    /// `attention.sliding_window` tokens and rope base `rope_base_swa`; 0 = all layers global.
    pub swa_pattern: usize,
    pub rope_base_swa: f32,
}

const BASE: ArchSpec = ArchSpec {
    arch: Arch::Llama,
    name: "llama",
    rope: RopeMode::Normal,
    act: Act::Silu,
    qkv_bias: false,
    qk_norm: false,
    post_norms: false,
    embd_scale: false,
    swa_pattern: 0,
    rope_base_swa: 0.0,
};

/// The families the decoder runs, by `general.architecture`.
pub const ARCHS: &[ArchSpec] = &[
    BASE,
    ArchSpec {
        arch: Arch::Gemma3,
        name: "gemma3",
        rope: RopeMode::Neox,
        act: Act::Gelu,
        qk_norm: true,
        post_norms: true,
        embd_scale: true,
        swa_pattern: 6,
        rope_base_swa: 10_000.0,
        ..BASE
    },
    ArchSpec {
        arch: Arch::Qwen2,
        name: "qwen2",
        rope: RopeMode::Neox,
        qkv_bias: true,
        ..BASE
    },
    ArchSpec {
        arch: Arch::Qwen3,
        name: "qwen3",
        rope: RopeMode::Neox,
        qk_norm: true,
        ..BASE
    },
    ArchSpec {
        arch: Arch::Phi3,
        name: "phi3",
        rope: RopeMode::Neox,
        ..BASE
    },
];

/// The names of the supported architectures, comma-separated (for error messages).
pub fn supported() -> String {
    ARCHS.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
}

impl ArchSpec {
    /// The row for a `general.architecture` value; an unknown one is
    /// [`Error::UnsupportedArch`] naming the supported ones.
    pub fn lookup(name: &str) -> Result<&'static ArchSpec> {
        ARCHS
            .iter()
            .find(|a| a.name == name)
            .ok_or_else(|| Error::UnsupportedArch {
                arch: name.to_string(),
                supported: supported(),
            })
    }
}
