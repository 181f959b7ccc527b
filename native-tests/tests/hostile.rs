//! Hostile sizes, offsets and parameters at graph-build time: each is a typed error, never a
//! wrapped size, a panic or a view outside its buffer (the reproductions of the hostile-inputs
//! issue that reach the core through the graph API, e.g. from JS).

use ggweb::tensor::PoolOp;
use ggweb::{Context, DType, Error};

#[test]
fn byte_sizes_that_wrap_are_rejected() {
    let mut ctx = Context::new();
    // 2^62 elements fit isize, their 2^64 bytes do not: the byte size used to wrap to 0.
    let e = ctx.new_tensor(DType::F32, &[1 << 61, 2]).unwrap_err();
    assert!(matches!(e, Error::Overflow(_)), "{e}");
    // A stride above the total wraps even when a later dimension is 0.
    let e = ctx.new_tensor(DType::F32, &[1 << 62, 0]).unwrap_err();
    assert!(matches!(e, Error::Overflow(_)), "{e}");
    // Quantized: bytes per block × blocks.
    let e = ctx.new_tensor(DType::Q8_0, &[32 << 58, 1]).unwrap_err();
    assert!(matches!(e, Error::Overflow(_)), "{e}");
    // Op results are checked the same way: the product of two legal shapes, 2^62 f32.
    let a = ctx.new_tensor(DType::F32, &[1, 1 << 31]).unwrap();
    let b = ctx.new_tensor(DType::F32, &[1, 1 << 31]).unwrap();
    let e = ctx.mul_mat(a, b).unwrap_err();
    assert!(matches!(e, Error::Overflow(_)), "{e}");
    // Found by fuzzing: an empty tensor whose other dims overflow made the strides of its
    // permutation (zero dim last) overflow.
    let e = ctx
        .new_tensor(DType::F32, &[0, 1 << 30, 1 << 30, 1 << 30])
        .unwrap_err();
    assert!(matches!(e, Error::Overflow(_)), "{e}");
    let ok = ctx.new_tensor(DType::F32, &[1024, 1024]).unwrap();
    assert_eq!(ctx.tensor(ok).nbytes(), 4 << 20);
}

#[test]
fn views_stay_inside_their_source() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[64]).unwrap();
    // An offset near 2^64: offset + size used to wrap below the source.
    let e = ctx.view(a, &[16], &[], usize::MAX - 63).unwrap_err();
    assert!(matches!(e, Error::Shape(_) | Error::Overflow(_)), "{e}");
    // Strides whose span overflows.
    let e = ctx.view(a, &[2, 2], &[usize::MAX / 2], 0).unwrap_err();
    assert!(matches!(e, Error::Shape(_) | Error::Overflow(_)), "{e}");
    // An empty view far past the end (found by fuzzing) is rejected too; at the end it is fine.
    assert!(ctx.view(a, &[0], &[], isize::MAX as usize).is_err());
    assert!(ctx.view(a, &[0], &[], 256).is_ok());
    // A view of a view: both offsets add up (checked).
    let v = ctx.view(a, &[32], &[], 128).unwrap();
    let e = ctx.view(v, &[1], &[], usize::MAX - 100).unwrap_err();
    assert!(matches!(e, Error::Shape(_) | Error::Overflow(_)), "{e}");
    let e = ctx.view(v, &[32], &[], 4).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    // The largest view that fits is accepted.
    let w = ctx.view(v, &[31], &[], 4).unwrap();
    assert_eq!(ctx.tensor(w).view_offs, 132);
}

#[test]
fn typed_views_stay_aligned() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[64]).unwrap();
    // Kernels read f32 through &[f32]: an odd byte offset or stride would be misaligned.
    let e = ctx.view(a, &[4], &[], 2).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    let e = ctx.view(a, &[4, 2], &[6], 0).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    ctx.view(a, &[4, 2], &[8], 4).unwrap();
    // Any stride for a dimension of size 1.
    ctx.view(a, &[4, 1], &[3], 0).unwrap();
    let h = ctx.new_tensor(DType::F16, &[64]).unwrap();
    ctx.view(h, &[4], &[], 2).unwrap();
    assert!(ctx.view(h, &[4], &[], 1).is_err());
}

#[test]
fn soft_max_mask_with_a_zero_dimension_is_an_error() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[8, 4, 2, 1]).unwrap();
    for ne in [[8, 4, 0, 1], [8, 4, 1, 0]] {
        let m = ctx.new_tensor(DType::F32, &ne).unwrap();
        let e = ctx.soft_max_ext(a, Some(m), 1.0, 0.0).unwrap_err();
        assert!(matches!(e, Error::Shape(_)), "{e}");
    }
    let m = ctx.new_tensor(DType::F32, &[8, 4, 1, 1]).unwrap();
    ctx.soft_max_ext(a, Some(m), 1.0, 0.0).unwrap();
}

#[test]
fn window_parameters_beyond_i32_are_errors() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[8, 8, 1, 1]).unwrap();
    let big = 1usize << 31;
    let e = ctx.pool_2d(a, PoolOp::Max, 2, 2, big, 1, 0, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = ctx.pool_2d(a, PoolOp::Avg, 2, 2, 1, 1, big, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    ctx.pool_2d(a, PoolOp::Avg, 2, 2, 2, 2, 0, 0).unwrap();
    let k = ctx.new_tensor(DType::F16, &[3, 3, 1, 4]).unwrap();
    let e = ctx
        .im2col(k, a, 1, 1, big, 0, 1, 1, true, DType::F32)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    ctx.im2col(k, a, 1, 1, 1, 1, 1, 1, true, DType::F32)
        .unwrap();
}

#[test]
fn cpy_into_a_read_only_weight_is_an_error() {
    use ggweb::alloc::GraphAllocator;
    use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend, CpuBuffer};
    use ggweb::backend::Buffer;
    use ggweb::tensor::TensorData;
    use ggweb::Graph;
    use std::sync::Arc;

    let mut ctx = Context::new();
    // A weight whose data is borrowed file bytes (as an mmap'd GGUF is): read-only. Writing
    // into it used to SIGSEGV natively.
    let w = ctx.new_tensor(DType::F32, &[16]).unwrap();
    let bytes: Arc<dyn ggweb::backend::cpu::HostBytes> = Arc::new(vec![0u8; 64]);
    let buf: Arc<dyn Buffer> = Arc::new(CpuBuffer::from_host_bytes(bytes, 0, 64).unwrap());
    assert!(buf.is_read_only());
    ctx.set_data(
        w,
        TensorData {
            buffer: buf,
            offset: 0,
        },
    );
    let x = ctx.new_tensor(DType::F32, &[16]).unwrap();
    ctx.set_input(x);
    let c = ctx.cpy(x, w).unwrap();
    ctx.set_output(c);
    let graph = Graph::build(&ctx, &[c]);
    let mut galloc = GraphAllocator::new(cpu_buffer_type());
    galloc.alloc_graph(&mut ctx, &graph).unwrap();
    ctx.set_f32(x, &[1.0; 16]).unwrap();
    let e = CpuBackend::new(1).compute(&ctx, &graph).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("read-only")),
        "{e}"
    );
}

/// A WordPiece vocab with one 1 MB token used to make every longest-match lookup hash up to
/// 1 MB substrings: a 20k-character word took > 20 s. Only lengths some token has are tried
/// now; the result is the same greedy longest match.
#[test]
fn wordpiece_with_a_huge_token_tokenizes_a_long_word() {
    use ggweb::models::tokenizer::{Tokenizer, TokenizerSpec};
    // GGUF's WordPiece convention: word starts carry "▁", continuations are bare.
    let mut tokens: Vec<String> = ["[UNK]", "[CLS]", "[SEP]", "\u{2581}a", "a", "aa"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    tokens.push("b".repeat(1 << 20));
    let tok = Tokenizer::from_spec(TokenizerSpec {
        model: "bert".into(),
        tokens,
        unk_id: Some(0),
        add_bos: Some(false),
        add_eos: Some(false),
        add_sep: Some(false),
        ..Default::default()
    })
    .unwrap();
    let word = "a".repeat(20_001);
    let ids = tok.tokenize(&word, false, false);
    // Greedy longest match: "▁a", then "aa" x 10,000.
    assert_eq!(ids.len(), 10_001);
    assert_eq!(ids[0], 3);
    assert!(ids[1..].iter().all(|&id| id == 5));
    let text: String = ids.iter().filter_map(|&id| tok.token_text(id)).collect();
    assert_eq!(text, format!("\u{2581}{word}"));
}

/// Found by fuzzing (crate/fuzz graph target): an empty tensor with a huge other dim made row
/// loops visit 2^40 empty rows (a hang) and `nrows` overflow.
#[test]
fn empty_tensors_with_huge_dims_compute_at_once() {
    use ggweb::alloc::GraphAllocator;
    use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
    use ggweb::Graph;
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[0, 1 << 40]).unwrap();
    ctx.set_input(a);
    let b = ctx
        .new_tensor(DType::F32, &[0, 1 << 20, 1 << 20, 1 << 20])
        .unwrap();
    ctx.set_input(b);
    assert_eq!(ctx.tensor(b).nrows(), 0);
    // Empty results of sources with a 2^32 ne0: no row buffer sized by it (was a 16 GB malloc).
    let wide = ctx.new_tensor(DType::F32, &[1 << 32, 0]).unwrap();
    ctx.set_input(wide);
    let sr = ctx.sum_rows(wide).unwrap();
    let sw = ctx.sum(wide).unwrap();
    let n = ctx.rms_norm(a, 1e-5).unwrap();
    let s = ctx.sum(b).unwrap();
    let out = ctx.add(s, s).unwrap();
    let n2 = ctx.scale(n, 2.0).unwrap();
    let g = Graph::build(&ctx, &[n2, out, sr, sw]);
    let mut ga = GraphAllocator::new(cpu_buffer_type());
    ga.alloc_graph(&mut ctx, &g).unwrap();
    let t = std::time::Instant::now();
    CpuBackend::with_threads_forced(2)
        .compute(&ctx, &g)
        .unwrap();
    // Not a timing assertion on the kernels: before the fix this took hours.
    assert!(t.elapsed().as_secs() < 60);
    assert_eq!(ctx.get_f32(out).unwrap(), vec![0.0]);
    assert_eq!(ctx.get_f32(sw).unwrap(), vec![0.0]);
}

/// Found by fuzzing (graph target, session 8): the backward pass of a broadcast add summed an
/// empty [0, 1, 1, 2^40] gradient into a [1, 1, 1, 1] tensor by looping over its 2^40 repeats.
#[test]
fn repeat_back_of_an_empty_tensor_is_zeros_at_once() {
    use ggweb::alloc::GraphAllocator;
    use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
    use ggweb::Graph;
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[0, 1, 1, 1 << 40]).unwrap();
    ctx.set_input(a);
    let r = ctx.repeat_back_to(a, [1, 1, 1, 1]).unwrap();
    let g = Graph::build(&ctx, &[r]);
    let mut ga = GraphAllocator::new(cpu_buffer_type());
    ga.alloc_graph(&mut ctx, &g).unwrap();
    let t = std::time::Instant::now();
    CpuBackend::with_threads_forced(2)
        .compute(&ctx, &g)
        .unwrap();
    // Not a timing assertion on the kernel: before the fix this ran for hours.
    assert!(t.elapsed().as_secs() < 60);
    assert_eq!(ctx.get_f32(r).unwrap(), vec![0.0]);
}

/// Found by fuzzing (graph target): a view's trailing strides were multiplied unchecked.
#[test]
fn view_strides_that_overflow_are_errors() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[64]).unwrap();
    let e = ctx
        .view(a, &[2, 1 << 40, 1 << 40], &[8, usize::MAX / 4], 0)
        .unwrap_err();
    assert!(matches!(e, Error::Shape(_) | Error::Overflow(_)), "{e}");
}

/// A gzip bomb (65 MB of zeros in 64 kB) is an error, not a 65 MB allocation; real files load.
#[test]
fn mnist_gzip_bombs_are_errors() {
    use ggweb::models::mnist::idx;
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut body = vec![0u8; 1 << 20];
    body[..4].copy_from_slice(&[0, 0, 8, 1]);
    gz.write_all(&body).unwrap();
    for _ in 0..64 {
        gz.write_all(&vec![0u8; 1 << 20]).unwrap();
    }
    let bomb = gz.finish().unwrap();
    let e = idx::parse_labels(&bomb).unwrap_err();
    assert!(e.to_string().contains("expands past"), "{e}");
    let labels = include_bytes!("../../crate/assets/t10k-labels-idx1-ubyte.gz");
    assert_eq!(idx::parse_labels(labels).unwrap().len(), 10_000);
}

/// Found by fuzzing (graph target with the backward pass): pool_2d's backward indexed past its
/// row when the padding was wider than the kernel (a window ending before column 0).
#[test]
fn pool_backward_with_padding_wider_than_the_kernel() {
    use ggweb::alloc::GraphAllocator;
    use ggweb::backend::cpu::{cpu_buffer_type, CpuBackend};
    use ggweb::Graph;
    for op in [PoolOp::Avg, PoolOp::Max] {
        let mut ctx = Context::new();
        let x = ctx.new_tensor(DType::F32, &[5, 5, 1, 1]).unwrap();
        ctx.set_input(x);
        ctx.set_param(x);
        let p = ctx.pool_2d(x, op, 2, 2, 1, 1, 3, 3).unwrap();
        let loss = ctx.sum(p).unwrap();
        ctx.set_output(loss);
        let mut g = Graph::build(&ctx, &[loss]);
        g.build_backward(&mut ctx, loss).unwrap();
        GraphAllocator::new(cpu_buffer_type())
            .alloc_graph(&mut ctx, &g)
            .unwrap();
        ctx.set_f32(x, &(0..25).map(|i| i as f32).collect::<Vec<_>>())
            .unwrap();
        ctx.set_f32(g.loss_grad().unwrap(), &[1.0]).unwrap();
        CpuBackend::with_threads_forced(2)
            .compute(&ctx, &g)
            .unwrap();
        let dx = ctx.get_f32(g.grad(x).unwrap()).unwrap();
        assert!(dx.iter().all(|v| v.is_finite()), "{op:?}: {dx:?}");
    }
}

/// Found by fuzzing (model_meta target): hyper-parameters whose products overflow, and unusable
/// floats, are `bad-model` errors at load, not wrapped sizes or NaN logits.
#[test]
fn hyper_parameters_beyond_reason_are_errors() {
    use ggweb::gguf::{Gguf, GgufWriter, Value};
    use ggweb::models::llama::HParams;
    let base = |k: &str, v: Value| {
        let mut w = GgufWriter::new();
        w.set("general.architecture", "llama");
        for (key, n) in [
            ("context_length", 32u32),
            ("embedding_length", 8),
            ("block_count", 1),
            ("feed_forward_length", 16),
            ("attention.head_count", 2),
            ("attention.head_count_kv", 1),
            ("vocab_size", 10),
        ] {
            w.set(format!("llama.{key}"), Value::U32(n));
        }
        w.set(format!("llama.{k}"), v);
        Gguf::parse(&w.to_bytes().unwrap()).unwrap()
    };
    assert!(HParams::from_gguf(&base("context_length", Value::U32(64))).is_ok());
    for (k, v) in [
        ("attention.value_length", Value::U64(1 << 40)),
        ("attention.key_length", Value::U64(1 << 24)),
        ("feed_forward_length", Value::U64(1 << 62)),
        ("rope.freq_base", Value::F32(f32::NAN)),
        (
            "attention.layer_norm_rms_epsilon",
            Value::F32(f32::INFINITY),
        ),
    ] {
        let e = HParams::from_gguf(&base(k, v)).unwrap_err();
        assert_eq!(e.code(), "bad-model", "{k}: {e}");
    }
}

/// Found by fuzzing (graph target): `cpy(x, permute(x))` copied a tensor onto a permutation of
/// itself: overlapping `copy_nonoverlapping` (undefined behaviour) and values read after being
/// overwritten. An overlapping destination is an error; disjoint views of one tensor are fine.
#[test]
fn cpy_onto_its_own_memory_is_an_error() {
    let mut ctx = Context::new();
    let x = ctx.new_tensor(DType::F32, &[3, 6, 5]).unwrap();
    let p = ctx.permute(x, [2, 0, 1, 3]).unwrap();
    let e = ctx.cpy(x, p).unwrap_err();
    assert_eq!(e.code(), "invalid-argument", "{e}");
    let e = ctx.cpy(p, x).unwrap_err();
    assert_eq!(e.code(), "invalid-argument", "{e}");
    let y = ctx.new_tensor(DType::F32, &[8]).unwrap();
    let lo = ctx.view(y, &[4], &[], 0).unwrap();
    let hi = ctx.view(y, &[4], &[], 16).unwrap();
    assert!(ctx.cpy(lo, hi).is_ok());
}

/// Found by fuzzing (graph target): a view with huge dims computed placeholder strides that
/// overflowed before its own were checked; it is an error, not a wrapped stride.
#[test]
fn views_with_huge_dims_are_errors() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[64]).unwrap();
    let e = ctx
        .view(a, &[1 << 40, 1 << 40, 1 << 40], &[4, 4], 0)
        .unwrap_err();
    assert!(matches!(e, Error::Shape(_) | Error::Overflow(_)), "{e}");
}

/// Found by fuzzing (graph target, session 11): an empty view ([0, n] rows) with a huge row
/// stride passed the bounds check (no element, no span), and row-wise kernels then formed
/// `i1 · nb1` row addresses that overflowed. An empty view's strides now count too.
#[test]
fn empty_view_with_out_of_range_row_strides_is_an_error() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[64]).unwrap();
    let e = ctx
        .view(a, &[0, 1 << 20], &[usize::MAX / 8], 0)
        .unwrap_err();
    assert!(matches!(e, Error::Shape(_) | Error::Overflow(_)), "{e}");
    // Empty views inside the base stay legal, also at its end.
    ctx.view(a, &[0, 16], &[16], 0).unwrap();
    ctx.view(a, &[4, 0], &[16], 256).unwrap();
}
