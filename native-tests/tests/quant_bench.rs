//! Throughput smoke test of the vec_dot kernels (ignored by default; run with
//! `cargo test --release -p ggweb-native-tests --test quant_bench -- --ignored --nocapture`).

use ggweb::backend::cpu::type_traits;
use ggweb::quant::{quantize_row, type_traits_scalar};
use ggweb::DType;
use std::time::Instant;

/// Seconds this thread has been on a CPU (Linux schedstat; wall time elsewhere), so that a busy
/// shared machine distorts the figures less.
fn cpu_seconds(wall: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map(|ns| ns as f64 * 1e-9)
        .unwrap_or_else(|| wall.elapsed().as_secs_f64())
}

#[test]
#[ignore]
fn vec_dot_throughput() {
    const N: usize = 4096;
    const ROWS: usize = 1024;
    let x: Vec<f32> = (0..N * ROWS)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let y: Vec<f32> = (0..N)
        .map(|i| ((i * 104729) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    for t in [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ] {
        let rs = t.row_size(N).unwrap();
        let mut qx = vec![0u8; rs * ROWS];
        for r in 0..ROWS {
            quantize_row(t, &x[r * N..(r + 1) * N], &mut qx[r * rs..(r + 1) * rs]).unwrap();
        }
        let fast = type_traits(t).unwrap();
        let vd = fast.vec_dot_type;
        let mut qy = vec![0u8; vd.row_size(N).unwrap()];
        quantize_row(vd, &y, &mut qy).unwrap();
        let mut line = format!("{t:>5}:");
        for (name, tt) in [("fast", fast), ("scalar", type_traits_scalar(t).unwrap())] {
            let wall = Instant::now();
            let start = cpu_seconds(wall);
            let mut s = 0f32;
            let reps = 5;
            for _ in 0..reps {
                for r in 0..ROWS {
                    s += (tt.vec_dot)(N, &qx[r * rs..(r + 1) * rs], &qy);
                }
            }
            let secs = cpu_seconds(wall) - start;
            let gbs = (qx.len() * reps) as f64 / secs / 1e9;
            line += &format!("  {name} {gbs:6.2} GB/s ({s:.1})");
        }
        eprintln!("{line}");
    }
}
