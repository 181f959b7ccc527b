//! SPMD execution: every thread walks the same node list and meets the others at a barrier
//! after each node (ggml's CPU executor). Threads spin briefly, then yield, because these
//! machines are small and shared.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A reusable sense-reversing barrier for `n` threads.
pub struct Barrier {
    n: usize,
    count: AtomicUsize,
    phase: AtomicUsize,
}

impl Barrier {
    pub fn new(n: usize) -> Self {
        Barrier {
            n: n.max(1),
            count: AtomicUsize::new(0),
            phase: AtomicUsize::new(0),
        }
    }

    pub fn n_threads(&self) -> usize {
        self.n
    }

    pub fn wait(&self) {
        if self.n == 1 {
            return;
        }
        let phase = self.phase.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) == self.n - 1 {
            self.count.store(0, Ordering::Relaxed);
            self.phase.fetch_add(1, Ordering::Release);
        } else {
            let mut spins = 0u32;
            while self.phase.load(Ordering::Acquire) == phase {
                spins += 1;
                if spins < 2000 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// Run `f(ith, nth)` on `nth` threads (the caller is thread 0) and wait for all of them.
pub fn run_spmd<F>(nth: usize, f: F)
where
    F: Fn(usize, usize) + Sync,
{
    #[cfg(not(target_arch = "wasm32"))]
    {
        if nth > 1 {
            std::thread::scope(|s| {
                for ith in 1..nth {
                    let f = &f;
                    s.spawn(move || f(ith, nth));
                }
                f(0, nth);
            });
            return;
        }
    }
    let _ = nth;
    f(0, 1);
}

/// Number of threads to use by default: the machine's parallelism, 1 in wasm.
pub fn default_n_threads() -> usize {
    #[cfg(target_arch = "wasm32")]
    {
        1
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}
