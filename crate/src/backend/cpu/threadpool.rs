//! SPMD execution on a persistent pool: every thread walks the same node list and meets the
//! others at a barrier after each node (ggml's CPU executor). The workers are started once, sleep
//! on a condition variable between graphs (no spinning while idle) and are woken per graph; the
//! caller is thread 0. Inside a graph the barrier spins briefly, then yields, because these
//! machines are small and shared. A panic on any thread poisons the barrier, so the others stop
//! waiting, and comes back to the caller as an error; the pool stays usable.
//!
//! The wasm threads build (wasm32 with `atomics`) has no `std::thread`: there the pool is
//! `webpool.rs`, the same executor on Web Workers started from JavaScript.

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
use std::any::Any;
use std::panic::resume_unwind;
#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
use std::thread::JoinHandle;

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
use crate::{Error, Result};

#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
#[path = "webpool.rs"]
mod webpool;
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
pub use webpool::{set_caller_may_wait, set_default_n_threads, worker_main, workers, ThreadPool};

/// A reusable sense-reversing barrier for `n` threads that can be poisoned: once poisoned, every
/// waiter unwinds (without running the panic hook) instead of waiting for a thread that is gone.
pub struct Barrier {
    n: usize,
    count: AtomicUsize,
    /// Its own cache line: the waiters spin on it while arrivals bump `count`.
    phase: Padded,
    poisoned: AtomicBool,
    /// Threads blocked in `memory.atomic.wait32` on `phase`: the last arrival notifies only when
    /// there are any (a notify costs more than a whole small node).
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    sleepers: AtomicUsize,
}

#[repr(align(64))]
struct Padded(AtomicUsize);

/// Spins at a barrier before a thread yields (native): a yield keeps the thread runnable, so a
/// short spin is enough.
#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
const SPINS: u32 = 2000;

/// In wasm the only way out of a spin is to block, and a blocked Web Worker takes tens to
/// hundreds of µs to wake, more than most nodes of a token take. So a thread spins up to its
/// budget, which doubles (to `MAX_SPINS`, some 0.4–0.8 ms) when a spin ends in time and shrinks
/// by an eighth (to `MIN_SPINS`) when one runs out: on a quiet machine nearly every barrier of a
/// token is met spinning; where the threads share a core with others (an oversubscribed
/// machine), a spinner would take the time the thread it waits for needs (measured 20x slower),
/// almost every spin runs out, and the budget falls back to a short spin. (Halving on a miss
/// was symmetric with the doubling: on a 2-vCPU Intel VM a few long waits per token drove the
/// budget down, short spins then missed too, and SmolLM2's 2-thread generation fell below its
/// 1-thread one, 31 vs 42 tok/s in Node; shrinking by an eighth: 2 threads 58–60.)
///
/// The ceiling is above a wake-up's cost (spin about as long as blocking costs, then block):
/// with 2^16 spins (50–100 µs) a prompt's barriers parked 160–190 times (SmolLM2, 120 tokens, 2
/// threads, Node 24), each waking late enough that the other thread parked at the next barrier
/// in turn; with 2^19, 7–26 times. Chromium 148 (2 threads, 6 rounds each load order, Zen 3):
/// SmolLM2 prompt 1.29× / 1.00× (medians per order), generation 1.16× / 1.13×; Qwen2.5 prompt
/// 1.05× / 1.03×, generation 0.96× / 0.98×. Oversubscribed (3 threads on 2 cores, Node):
/// generation 46–79 vs 34–51 tok/s, prompt level or better.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
const MIN_SPINS: u32 = 2000;
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
const MAX_SPINS: u32 = 1 << 19;

#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
thread_local! {
    static SPIN_BUDGET: std::cell::Cell<u32> = const { std::cell::Cell::new(MAX_SPINS) };
}

/// The unwind payload of a thread leaving a poisoned barrier (not the original panic).
struct Poisoned;

impl Barrier {
    pub fn new(n: usize) -> Self {
        Barrier {
            n: n.max(1),
            count: AtomicUsize::new(0),
            phase: Padded(AtomicUsize::new(0)),
            poisoned: AtomicBool::new(false),
            #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
            sleepers: AtomicUsize::new(0),
        }
    }

    pub fn n_threads(&self) -> usize {
        self.n
    }

    pub fn wait(&self) {
        if self.n == 1 {
            return;
        }
        self.check_poison();
        let phase = self.phase.0.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) == self.n - 1 {
            self.count.store(0, Ordering::Relaxed);
            // SeqCst with the sleepers count below (and its increment in a waiter): either the
            // waiter's wait32 sees the new phase or this thread sees the waiter and notifies.
            self.phase.0.fetch_add(1, Ordering::SeqCst);
            #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
            if self.sleepers.load(Ordering::SeqCst) > 0 {
                webpool::wake(&self.phase.0);
            }
        } else {
            #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
            self.wait_wasm(phase);
            #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
            {
                let mut spins = 0u32;
                while self.phase.0.load(Ordering::Acquire) == phase {
                    self.check_poison();
                    spins += 1;
                    if spins < SPINS {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }

    /// Wait for the phase to leave `phase`: spin up to this thread's budget, then block where
    /// the thread may (wasm has no yield), see [`MAX_SPINS`].
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    fn wait_wasm(&self, phase: usize) {
        let budget = SPIN_BUDGET.with(|b| b.get());
        for _ in 0..budget {
            if self.phase.0.load(Ordering::Acquire) != phase {
                SPIN_BUDGET.with(|b| b.set(budget.saturating_mul(2).min(MAX_SPINS)));
                return;
            }
            self.check_poison();
            std::hint::spin_loop();
        }
        SPIN_BUDGET.with(|b| b.set((budget - budget / 8).max(MIN_SPINS)));
        while self.phase.0.load(Ordering::Acquire) == phase {
            self.check_poison();
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            webpool::wait_while(&self.phase.0, phase);
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn check_poison(&self) {
        if self.poisoned.load(Ordering::Acquire) {
            resume_unwind(Box::new(Poisoned));
        }
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// Back to the initial state; only while no thread is inside `wait`.
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    fn reset(&self) {
        self.count.store(0, Ordering::Relaxed);
        self.poisoned.store(false, Ordering::Release);
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
/// The work of one [`ThreadPool::run`]: called as `f(ith, nth, barrier)` on every thread.
type Job = Arc<dyn Fn(usize, usize, &Barrier) + Send + Sync>;

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
/// What the caller and the workers share, behind one lock.
struct State {
    job: Option<Job>,
    /// Bumped per job; a worker runs each epoch once.
    epoch: u64,
    /// Workers still running the current job.
    running: usize,
    /// The first panic of the current job: thread and message.
    panic: Option<(usize, String)>,
    shutdown: bool,
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
struct Shared {
    state: Mutex<State>,
    /// Workers wait here for a job (or shutdown).
    wake: Condvar,
    /// The caller waits here for `running` to reach 0.
    done: Condvar,
    barrier: Barrier,
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
impl Shared {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Shared {
            state: Mutex::new(State {
                job: None,
                epoch: 0,
                running: 0,
                panic: None,
                shutdown: false,
            }),
            wake: Condvar::new(),
            done: Condvar::new(),
            barrier: Barrier::new(n),
        })
    }

    /// The lock; a panic never happens while it is held, so poisoning carries no meaning here.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Record a panic of thread `ith` (the first one wins) and release the others.
    fn record_panic(&self, ith: usize, payload: Box<dyn Any + Send>) {
        self.barrier.poison();
        if payload.is::<Poisoned>() {
            return;
        }
        let msg = panic_message(payload);
        self.lock().panic.get_or_insert((ith, msg));
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
fn panic_error(ith: usize, nth: usize, msg: &str) -> Error {
    Error::Backend(format!(
        "a CPU kernel panicked on thread {ith} of {nth}: {msg}"
    ))
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
/// Starts a named worker thread; injectable so tests can make a spawn fail (and so a platform
/// without `std::thread`, such as the browser, can bring its own).
type Spawner<'a> =
    &'a mut dyn FnMut(String, Box<dyn FnOnce() + Send>) -> std::io::Result<JoinHandle<()>>;

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
fn std_spawn(name: String, f: Box<dyn FnOnce() + Send>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f)
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
/// A persistent pool of `n_threads - 1` workers plus the caller.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
impl Default for ThreadPool {
    /// The caller alone: no workers.
    fn default() -> Self {
        ThreadPool {
            shared: Shared::new(1),
            workers: Vec::new(),
        }
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
impl ThreadPool {
    /// A pool of `n_threads` (at least 1); the error says which thread could not be started.
    pub fn new(n_threads: usize) -> Result<Self> {
        let mut pool = ThreadPool::default();
        pool.resize(n_threads)?;
        Ok(pool)
    }

    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Stop and join the workers, then start `n_threads - 1` new ones (nothing when the size is
    /// already right). On a failed start the pool is left with the caller alone.
    pub fn resize(&mut self, n_threads: usize) -> Result<()> {
        self.resize_with(n_threads, &mut std_spawn)
    }

    fn resize_with(&mut self, n_threads: usize, spawn: Spawner<'_>) -> Result<()> {
        let n = n_threads.max(1);
        if n == self.n_threads() {
            return Ok(());
        }
        self.stop();
        let shared = Shared::new(n);
        let mut workers = Vec::with_capacity(n - 1);
        for ith in 1..n {
            let s = Arc::clone(&shared);
            match spawn(
                format!("ggweb-cpu-{ith}"),
                Box::new(move || worker(&s, ith, n)),
            ) {
                Ok(h) => workers.push(h),
                Err(e) => {
                    // Join the ones already started before reporting.
                    *self = ThreadPool { shared, workers };
                    self.stop();
                    return Err(Error::Backend(format!(
                        "cannot start CPU thread {ith} of {n}: {e}"
                    )));
                }
            }
        }
        *self = ThreadPool { shared, workers };
        Ok(())
    }

    /// Ask the workers to exit, join them and fall back to the caller alone.
    fn stop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        for h in self.workers.drain(..) {
            // A worker catches its job's panics, so joining cannot fail.
            let _ = h.join();
        }
        self.shared = Shared::new(1);
    }

    /// Run `f(ith, nth, barrier)` on every thread of the pool (the caller is thread 0) and wait
    /// for all of them. A panic on any thread is returned as an error once all have stopped.
    pub fn run<F>(&mut self, f: F) -> Result<()>
    where
        F: Fn(usize, usize, &Barrier) + Send + Sync + 'static,
    {
        let nth = self.n_threads();
        let shared = &self.shared;
        shared.barrier.reset();
        if nth == 1 {
            // The caller alone: no job to share, no lock.
            return catch_unwind(AssertUnwindSafe(|| f(0, 1, &shared.barrier)))
                .map_err(|p| panic_error(0, 1, &panic_message(p)));
        }
        let job: Job = Arc::new(f);
        let mut st = shared.lock();
        st.job = Some(Arc::clone(&job));
        st.epoch += 1;
        st.running = nth - 1;
        st.panic = None;
        drop(st);
        shared.wake.notify_all();
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| job(0, nth, &shared.barrier))) {
            shared.record_panic(0, p);
        }
        let mut st = shared.lock();
        while st.running > 0 {
            st = shared.done.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        // Drop the job (and what it holds) now rather than at the next run.
        st.job = None;
        match st.panic.take() {
            Some((ith, msg)) => Err(panic_error(ith, nth, &msg)),
            None => Ok(()),
        }
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
/// A worker: sleep until a new epoch (or shutdown), run the job, report, repeat.
fn worker(shared: &Shared, ith: usize, nth: usize) {
    let mut seen = 0u64;
    loop {
        let job = {
            let mut st = shared.lock();
            while st.epoch == seen && !st.shutdown {
                st = shared.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            if st.shutdown {
                return;
            }
            seen = st.epoch;
            st.job.clone()
        };
        if let Some(job) = job {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| job(ith, nth, &shared.barrier))) {
                shared.record_panic(ith, p);
            }
        }
        let mut st = shared.lock();
        st.running -= 1;
        if st.running == 0 {
            shared.done.notify_one();
        }
    }
}

/// Number of threads to use by default: the machine's parallelism; in wasm 1, or in the threads
/// build the engine's Web Workers + the caller (unless `set_default_n_threads` set fewer).
pub fn default_n_threads() -> usize {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    {
        webpool::default_n_threads()
    }
    #[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
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

/// `n` capped to the machine's parallelism (more threads than cores only slow the barrier); in
/// the threads build, to the Web Workers + the caller.
pub fn capped_n_threads(n: usize) -> usize {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    {
        n.clamp(1, webpool::workers() + 1)
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    {
        n.clamp(1, default_n_threads())
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn runs_on_every_thread_and_is_reused() {
        let mut pool = ThreadPool::new(3).unwrap();
        for round in 1..=3u64 {
            let seen = Arc::new(AtomicU64::new(0));
            let s = Arc::clone(&seen);
            pool.run(move |ith, nth, barrier| {
                assert_eq!(nth, 3);
                barrier.wait();
                s.fetch_add(round << (8 * ith), Ordering::Relaxed);
                barrier.wait();
            })
            .unwrap();
            assert_eq!(seen.load(Ordering::Relaxed), round * 0x01_01_01);
        }
    }

    #[test]
    fn a_panic_on_any_thread_is_an_error_and_the_pool_stays_usable() {
        let mut pool = ThreadPool::new(3).unwrap();
        for k in 0..3 {
            let r = pool.run(move |ith, _, barrier| {
                barrier.wait();
                assert!(ith != k, "kernel failure on thread {k}");
                // The others are released from the barrier the panicking thread never reaches.
                barrier.wait();
                barrier.wait();
            });
            let msg = r.unwrap_err().to_string();
            assert!(
                msg.contains(&format!("thread {k} of 3"))
                    && msg.contains(&format!("kernel failure on thread {k}")),
                "{msg}"
            );
            let count = Arc::new(AtomicUsize::new(0));
            let c = Arc::clone(&count);
            pool.run(move |_, _, barrier| {
                barrier.wait();
                c.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
            assert_eq!(count.load(Ordering::Relaxed), 3);
        }
        // The caller alone, too.
        let mut one = ThreadPool::default();
        let e = one.run(|_, _, _| panic!("alone")).unwrap_err().to_string();
        assert!(e.contains("thread 0 of 1: alone"), "{e}");
        assert!(one.run(|_, _, _| ()).is_ok());
    }

    #[test]
    fn a_failed_spawn_is_an_error_and_joins_the_started_workers() {
        let mut pool = ThreadPool::default();
        let exited = Arc::new(AtomicUsize::new(0));
        let mut started = 0;
        let mut spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            started += 1;
            if started == 3 {
                return Err(std::io::Error::other("out of threads"));
            }
            let exited = Arc::clone(&exited);
            std_spawn(
                name,
                Box::new(move || {
                    f();
                    exited.fetch_add(1, Ordering::Relaxed);
                }),
            )
        };
        let e = pool.resize_with(4, &mut spawn).unwrap_err().to_string();
        assert!(
            e.contains("thread 3 of 4") && e.contains("out of threads"),
            "{e}"
        );
        assert_eq!(pool.n_threads(), 1);
        // The two workers started before the failure were stopped and joined.
        assert_eq!(exited.load(Ordering::Relaxed), 2);
        pool.resize(2).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&count);
        pool.run(move |_, _, _| {
            c.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }

    /// A small transformer-like graph (two independent quantized mul_mats with a work buffer,
    /// rms_norm, silu, add, soft_max) gives the same bits on 1, 2 and 3 threads, twice on the same backend: with 5
    /// columns (a token's shapes: element-wise nodes on thread 0 alone, src1 converted by every
    /// thread into its own copy) and with 300 (everything split, src1 converted in shares).
    #[test]
    fn graph_results_equal_the_single_thread_path() {
        for cols in [5, 300] {
            graph_results_equal(cols);
        }
    }

    fn graph_results_equal(cols: usize) {
        use crate::backend::cpu::{cpu_buffer_type, CpuBackend};
        use crate::{alloc, Context, DType, Graph};
        let mut ctx = Context::new();
        let w = ctx.new_tensor_2d(DType::Q8_0, 64, 37).unwrap();
        let x = ctx.new_tensor_2d(DType::F32, 64, cols).unwrap();
        let n = ctx.rms_norm(x, 1e-5).unwrap();
        let y = ctx.mul_mat(w, n).unwrap();
        // Independent of y (no barrier between the two mul_mats where src1 is small).
        let w2 = ctx.new_tensor_2d(DType::Q4_0, 64, 37).unwrap();
        let y2 = ctx.mul_mat(w2, n).unwrap();
        let s = ctx.silu(y).unwrap();
        let s = ctx.add(s, y2).unwrap();
        let out = ctx.soft_max(s).unwrap();
        let _buf = alloc::alloc_ctx_tensors(&mut ctx, &cpu_buffer_type()).unwrap();
        let vals = |n: usize, k: f32| (0..n).map(|i| (i as f32 * k).sin()).collect::<Vec<_>>();
        ctx.set_f32(w, &vals(64 * 37, 0.37)).unwrap();
        ctx.set_f32(w2, &vals(64 * 37, 0.71)).unwrap();
        ctx.set_f32(x, &vals(64 * cols, 1.3)).unwrap();
        let g = Graph::build(&ctx, &[out]);
        let bits = |be: &mut CpuBackend| {
            be.compute(&ctx, &g).unwrap();
            ctx.get_f32(out)
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        let want = bits(&mut CpuBackend::new(1));
        for nth in [1, 2, 3] {
            let mut be = CpuBackend::with_threads_forced(nth);
            assert_eq!(be.n_threads(), nth);
            assert_eq!(bits(&mut be), want, "{nth} threads, {cols} columns");
            assert_eq!(
                bits(&mut be),
                want,
                "{nth} threads, {cols} columns, second graph"
            );
        }
    }
}
