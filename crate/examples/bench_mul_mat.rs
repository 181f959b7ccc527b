//! `cargo run --release --example bench_mul_mat [types] [threads]`: mul_mat GFLOP/s at
//! m = k = 4096, n = 1 and n = 512.

use ggweb::bench::bench_mul_mat;
use ggweb::DType;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let types: Vec<DType> = args
        .get(1)
        .map(|s| s.split(',').filter_map(DType::from_name).collect())
        .unwrap_or_else(|| {
            vec![
                DType::F32,
                DType::F16,
                DType::Q4_0,
                DType::Q8_0,
                DType::Q4_K,
            ]
        });
    let threads: Vec<usize> = args
        .get(2)
        .map(|s| s.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2]);
    let ns: Vec<usize> = args
        .get(3)
        .map(|s| s.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 512]);
    for &n in &ns {
        for &t in &threads {
            for &dt in &types {
                let c0 = cpu_seconds();
                match bench_mul_mat(dt, 4096, n, 4096, t, 1.0) {
                    Ok(r) => {
                        // The machine is shared: also show how much CPU the process got.
                        let cpu = cpu_seconds() - c0;
                        println!("{r}  [process CPU {cpu:.2} s]");
                    }
                    Err(e) => println!("{dt} n={n} threads={t}: {e}"),
                }
            }
        }
    }
}

/// User + system CPU seconds of this process so far (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ut: f64 = f.get(11)?.parse().ok()?;
            let st: f64 = f.get(12)?.parse().ok()?;
            Some((ut + st) / 100.0)
        })
        .unwrap_or(0.0)
}
