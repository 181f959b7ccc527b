//! Weights repacked for the CPU GEMV (`backend::cpu::repack`): mul_mat and get_rows of a
//! repacked tensor give the same bits as of the same weights in the GGUF layout (here natively
//! through the scratch copy; the wasm GEMV that reads the groups directly is checked the same
//! way in wasm-tests), its bytes read back in the GGUF layout, and any other op reading it is
//! a typed error.

mod support;

use ggweb::backend::cpu::repack;
use ggweb::{Context, DType, Error};
use support::matmul::*;

const TYPES: [DType; 5] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
];

/// (plain result, repacked result) of mul_mat [k, m] × [k, n] and of get_rows of `ids`.
fn pair(dt: DType, k: usize, m: usize, n: usize, threads: usize, seed: u64) -> [Vec<f32>; 4] {
    let mut rng = Rng::new(seed);
    let mut ctx = Context::new();
    let wp = ctx.new_tensor_2d(dt, k, m).unwrap();
    let wr = ctx.new_tensor_2d(dt, k, m).unwrap();
    let x = ctx.new_tensor_2d(DType::F32, k, n).unwrap();
    let ids = ctx.new_tensor_1d(DType::I32, 5).unwrap();
    let yp = ctx.mul_mat(wp, x).unwrap();
    let yr = ctx.mul_mat(wr, x).unwrap();
    let gp = ctx.get_rows(wp, ids).unwrap();
    let gr = ctx.get_rows(wr, ids).unwrap();
    alloc_all(&mut ctx);
    let w = rng.vec(k * m, -1.0, 1.0);
    ctx.set_f32(wp, &w).unwrap();
    ctx.set_f32(wr, &w).unwrap();
    let plain = ctx.get_bytes(wr).unwrap();
    assert!(repack::repack_tensor(&mut ctx, wr).unwrap(), "{dt} {m}x{k}");
    // Read back in the GGUF layout.
    assert_eq!(ctx.get_bytes(wr).unwrap(), plain);
    ctx.set_f32(x, &rng.vec(k * n, -1.0, 1.0)).unwrap();
    let rows = [
        0,
        m as i32 - 1,
        (m / 2) as i32,
        3.min(m as i32 - 1),
        (m as i32 - 2).max(0),
    ];
    ctx.set_i32(ids, &rows).unwrap();
    compute(&ctx, &[yp, yr, gp, gr], threads).unwrap();
    [yp, yr, gp, gr].map(|t| ctx.get_f32(t).unwrap())
}

#[test]
fn repacked_mul_mat_and_get_rows_match_plain_bits() {
    let mut seed = 1;
    for dt in TYPES {
        // Rows: whole groups only, a tail of three, a tail of one; n: GEMV, a small GEMM, one
        // past the integer-dot GEMM's 8 columns.
        let shapes: &[(usize, usize)] = if dt.block_size() == 256 {
            &[(256, 4), (512, 7), (768, 33)]
        } else {
            &[(32, 4), (96, 7), (576, 33), (160, 69)]
        };
        for &(k, m) in shapes {
            for n in [1, 3, 9] {
                for threads in [1, 2] {
                    seed += 1;
                    let [yp, yr, gp, gr] = pair(dt, k, m, n, threads, seed);
                    assert_eq!(
                        yp.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        yr.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "mul_mat {dt} k={k} m={m} n={n} threads={threads}"
                    );
                    assert_eq!(
                        gp.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        gr.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "get_rows {dt} k={k} m={m}"
                    );
                }
            }
        }
    }
}

#[test]
fn repacked_bytes_round_trip_through_set_and_get() {
    let mut rng = Rng::new(7);
    let mut ctx = Context::new();
    let w = ctx.new_tensor_2d(DType::Q5_1, 64, 10).unwrap();
    alloc_all(&mut ctx);
    ctx.set_f32(w, &rng.vec(640, -1.0, 1.0)).unwrap();
    assert!(repack::repack_tensor(&mut ctx, w).unwrap());
    // Twice is a no-op.
    assert!(!repack::repack_tensor(&mut ctx, w).unwrap());
    let v = rng.vec(640, -2.0, 2.0);
    ctx.set_f32(w, &v).unwrap();
    let mut plain = Context::new();
    let p = plain.new_tensor_2d(DType::Q5_1, 64, 10).unwrap();
    alloc_all(&mut plain);
    plain.set_f32(p, &v).unwrap();
    assert_eq!(ctx.get_bytes(w).unwrap(), plain.get_bytes(p).unwrap());
    assert_eq!(ctx.get_f32(w).unwrap(), plain.get_f32(p).unwrap());
}

#[test]
fn what_is_not_repacked_stays_as_it_is() {
    let mut ctx = Context::new();
    let f = ctx.new_tensor_2d(DType::F16, 32, 8).unwrap();
    let three = ctx.new_tensor_2d(DType::Q8_0, 32, 3).unwrap();
    let nan = ctx.new_tensor_2d(DType::Q8_0, 32, 8).unwrap();
    let batched = ctx.new_tensor(DType::Q4_0, &[32, 4, 2, 1]).unwrap();
    alloc_all(&mut ctx);
    // A q8_0 block whose d is NaN (f16 0x7e00) in row 5.
    let mut bytes = vec![0u8; 8 * 34];
    bytes[5 * 34] = 0x00;
    bytes[5 * 34 + 1] = 0x7e;
    ctx.set_bytes(nan, &bytes).unwrap();
    for t in [f, three, nan, batched] {
        let before = ctx.get_bytes(t).unwrap();
        assert!(!repack::repack_tensor(&mut ctx, t).unwrap());
        assert_eq!(ctx.get_bytes(t).unwrap(), before);
    }
}

#[test]
fn other_ops_on_repacked_weights_are_typed_errors() {
    let mut rng = Rng::new(3);
    let mut ctx = Context::new();
    let w = ctx.new_tensor_2d(DType::Q4_1, 64, 8).unwrap();
    let c = ctx.cast(w, DType::F32).unwrap();
    let v = ctx.view(w, &[64, 4], &[w_row(DType::Q4_1, 64)], 0).unwrap();
    let x = ctx.new_tensor_2d(DType::F32, 64, 1).unwrap();
    let y = ctx.mul_mat(v, x).unwrap();
    alloc_all(&mut ctx);
    ctx.set_f32(w, &rng.vec(512, -1.0, 1.0)).unwrap();
    ctx.set_f32(x, &rng.vec(64, -1.0, 1.0)).unwrap();
    assert!(repack::repack_tensor(&mut ctx, w).unwrap());
    for out in [c, y] {
        match compute(&ctx, &[out], 1) {
            Err(Error::UnsupportedOp(m)) => assert!(m.contains("repacked"), "{m}"),
            other => panic!("expected UnsupportedOp, got {other:?}"),
        }
    }
    // A view's bytes are not readable either (they would be the repacked layout).
    assert!(matches!(ctx.get_bytes(v), Err(Error::UnsupportedOp(_))));
}

fn w_row(dt: DType, k: usize) -> usize {
    dt.row_size(k).unwrap()
}
