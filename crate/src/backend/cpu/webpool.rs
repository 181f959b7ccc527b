//! The CPU pool of the wasm threads build (wasm32 with `atomics`): the same SPMD + barrier
//! executor as natively, on Web Workers (Node: `worker_threads`) that share the module's memory.
//!
//! `std::thread::spawn` does not exist on wasm32-unknown-unknown, so JavaScript starts the
//! workers, once per engine; each instantiates the module on the shared memory and enters
//! [`worker_main`], which never returns. The workers belong to the engine, not to one pool: a
//! [`ThreadPool`] of `n` threads borrows workers 1..n for each `run` (runs never overlap: only
//! one JavaScript thread calls into an engine, and a second concurrent run is an error).
//!
//! Idle workers sleep in `std::thread::park` (`memory.atomic.wait32`; no spinning between
//! graphs) and the caller unparks the ones a run needs (`memory.atomic.notify`). At a barrier a
//! thread spins briefly, then blocks on the barrier's phase where it may (workers; the caller in
//! Node or a worker), since wasm has no `yield`.
//! The caller, thread 0, may be a browser's main thread, where waiting traps: there it never
//! waits, it only spins: for the workers to enter the job, at the barrier, and for them to leave
//! the job, which they do right after the last barrier. There is no unwinding on wasm32 (panics
//! abort): a panic on any thread poisons the run's barrier from the panic hook, so the others
//! trap too instead of waiting for a thread that is gone, and the JavaScript call fails with a
//! `RuntimeError`.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::thread::Thread;

use super::Barrier;
use crate::{Error, Result};

/// The work of one run: called as `f(ith, nth, barrier)` on every thread.
type Job = Box<dyn Fn(usize, usize, &Barrier) + Send + Sync>;

struct Run {
    /// The value of [`RUNS`] that announced this run.
    seq: u32,
    nth: usize,
    job: Job,
    barrier: Barrier,
    /// Participating workers (1..nth) still inside the job.
    running: AtomicUsize,
    /// Participating workers that have entered the job.
    started: AtomicUsize,
}

/// A lock for a few instructions, safe on a browser's main thread (it spins, never waits).
struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is only reached through `with`, which holds `locked`.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    const fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: the flag gives this thread exclusive access until it is released below.
        let r = f(unsafe { &mut *self.value.get() });
        self.locked.store(false, Ordering::Release);
        r
    }
}

/// Bumped once per run; idle workers wait on it.
static RUNS: AtomicU32 = AtomicU32::new(0);
/// The current run (None between runs).
static CURRENT: SpinLock<Option<Arc<Run>>> = SpinLock::new(None);
/// Workers that entered [`worker_main`]; worker `k` (1-based) is thread `k` of every run.
static WORKERS: AtomicUsize = AtomicUsize::new(0);
/// Their handles, in that order (for unparking).
static THREADS: SpinLock<Vec<Thread>> = SpinLock::new(Vec::new());
/// Set while a run is in progress (a second concurrent run is refused).
static BUSY: AtomicBool = AtomicBool::new(false);
/// The number of threads new backends use (0: all, the workers + the caller).
static WANTED: AtomicUsize = AtomicUsize::new(0);
static HOOK: Once = Once::new();
/// The calling thread (thread 0) may block in `memory.atomic.wait32`: not on a browser's main
/// thread, where it traps (set by JavaScript: true in Node and in workers).
static CALLER_MAY_WAIT: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set in [`worker_main`]: workers may always block.
    static IS_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread can block (see [`CALLER_MAY_WAIT`]).
pub fn set_caller_may_wait(yes: bool) {
    CALLER_MAY_WAIT.store(yes, Ordering::Release);
}

/// A barrier waiter past its spins: block until `word` is no longer `seen` (or 1 ms passed, so
/// a poisoned barrier is still seen) where this thread may block, else spin on.
pub(super) fn wait_while(word: &AtomicUsize, seen: usize) {
    if IS_WORKER.with(|w| w.get()) || CALLER_MAY_WAIT.load(Ordering::Relaxed) {
        // SAFETY: `word` is a live, aligned atomic (usize is 32 bits on wasm32); this thread
        // may block. The wait returns at once if the value already differs.
        unsafe {
            core::arch::wasm32::memory_atomic_wait32(
                word.as_ptr() as *mut i32,
                seen as i32,
                1_000_000,
            )
        };
    } else {
        std::hint::spin_loop();
    }
}

/// Wake the threads blocked in [`wait_while`] on `word`.
pub(super) fn wake(word: &AtomicUsize) {
    // SAFETY: `word` is a live, aligned atomic; notifying is allowed on every thread.
    unsafe { core::arch::wasm32::memory_atomic_notify(word.as_ptr() as *mut i32, u32::MAX) };
}

/// Chain a panic hook that poisons the current run's barrier, so that no thread waits for one
/// that has trapped.
fn install_hook() {
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            prev(info);
            if let Some(run) = current() {
                run.barrier.poison();
            }
        }));
    });
}

fn current() -> Option<Arc<Run>> {
    CURRENT.with(|c| c.clone())
}

/// Entered by each Web Worker after it instantiated the module on the shared memory; runs the
/// engine's jobs forever. The worker's index is the order of entry.
pub fn worker_main() -> ! {
    install_hook();
    IS_WORKER.with(|w| w.set(true));
    // Read before announcing this worker, so that no run it is counted for can be missed.
    let mut seen = RUNS.load(Ordering::Acquire);
    let ith = THREADS.with(|t| {
        t.push(std::thread::current());
        t.len()
    });
    WORKERS.fetch_add(1, Ordering::AcqRel);
    loop {
        let now = RUNS.load(Ordering::Acquire);
        if now == seen {
            // An unpark before this park is kept as a token, so a run is never missed; a
            // spurious return only loops.
            std::thread::park();
            continue;
        }
        seen = now;
        let Some(run) = current() else { continue };
        // A newer run than `now` may be current already; then it is the one to take part in.
        seen = run.seq;
        if ith < run.nth {
            run.started.fetch_add(1, Ordering::AcqRel);
            (run.job)(ith, run.nth, &run.barrier);
            run.running.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Workers started by JavaScript so far.
pub fn workers() -> usize {
    WORKERS.load(Ordering::Acquire)
}

/// Use `n` threads (at least 1, at most the workers + 1) in backends created from now on; 0: all.
pub fn set_default_n_threads(n: usize) {
    WANTED.store(n, Ordering::Release);
}

/// The threads new backends use: every worker plus the caller, unless set lower.
pub fn default_n_threads() -> usize {
    let all = workers() + 1;
    match WANTED.load(Ordering::Acquire) {
        0 => all,
        n => n.min(all),
    }
}

/// `n` threads (at least 1), run on the engine's Web Workers; see the module docs.
pub struct ThreadPool {
    n: usize,
}

impl Default for ThreadPool {
    /// The caller alone.
    fn default() -> Self {
        ThreadPool { n: 1 }
    }
}

impl ThreadPool {
    /// A pool of `n_threads`; an error when fewer than `n_threads - 1` workers were started.
    pub fn new(n_threads: usize) -> Result<Self> {
        let mut pool = ThreadPool::default();
        pool.resize(n_threads)?;
        Ok(pool)
    }

    pub fn n_threads(&self) -> usize {
        self.n
    }

    /// Use `n_threads` (at least 1); the workers exist already, so this only checks there are
    /// enough of them.
    pub fn resize(&mut self, n_threads: usize) -> Result<()> {
        let n = n_threads.max(1);
        let have = workers();
        if n > have + 1 {
            self.n = 1;
            return Err(Error::Backend(format!(
                "cannot start CPU thread {} of {n}: the engine has {have} web workers \
                 (init({{ nThreads }}) sets how many)",
                have + 1
            )));
        }
        self.n = n;
        Ok(())
    }

    /// Run `f(ith, nth, barrier)` on every thread of the pool (the caller is thread 0) and return
    /// when all have left it.
    pub fn run<F>(&mut self, f: F) -> Result<()>
    where
        F: Fn(usize, usize, &Barrier) + Send + Sync + 'static,
    {
        let nth = self.n;
        if nth == 1 {
            f(0, 1, &Barrier::new(1));
            return Ok(());
        }
        if BUSY.swap(true, Ordering::AcqRel) {
            return Err(Error::Backend(
                "the CPU workers are busy with another computation".into(),
            ));
        }
        install_hook();
        let seq = RUNS.load(Ordering::Acquire).wrapping_add(1);
        let run = Arc::new(Run {
            seq,
            nth,
            job: Box::new(f),
            barrier: Barrier::new(nth),
            running: AtomicUsize::new(nth - 1),
            started: AtomicUsize::new(0),
        });
        CURRENT.with(|c| *c = Some(Arc::clone(&run)));
        RUNS.store(seq, Ordering::Release);
        THREADS.with(|t| t[..nth - 1].iter().for_each(Thread::unpark));
        // Spin until every worker has woken and entered the job (100–300 µs from a park): met
        // at the job's first barrier instead, that wait ran past the caller's spin budget every
        // graph, which shrank it until the caller blocked at most barriers of a token.
        while run.started.load(Ordering::Acquire) < nth - 1 {
            run.barrier.check_poison();
            std::hint::spin_loop();
        }
        (run.job)(0, nth, &run.barrier);
        // The workers leave right after the job's last barrier: spin (no waiting on a main thread).
        while run.running.load(Ordering::Acquire) > 0 {
            run.barrier.check_poison();
            std::hint::spin_loop();
        }
        CURRENT.with(|c| *c = None);
        BUSY.store(false, Ordering::Release);
        Ok(())
    }
}
