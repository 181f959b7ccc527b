/**
 * Loading the wasm engine. Four builds ship. Where threads can run (a cross-origin isolated page,
 * or Node; `SharedArrayBuffer`, relaxed SIMD) the default is `wasm/threads/`: the relaxed-SIMD
 * kernels on shared memory, the CPU backend on `nThreads` threads (the caller + Web Workers, Node:
 * `worker_threads`; CPU only, no WebGPU). Otherwise the best single-thread build
 * `WebAssembly.validate` accepts: `wasm/relaxed/` (SIMD128 + relaxed SIMD: integer dots of the
 * 4/5-bit quantized tiles, fused multiply-add in the f32 tile), else `wasm/simd/` (SIMD128), else
 * `wasm/scalar/`. `init({threads: false})`, `init({relaxed: false})` / `init({simd: false})`
 * force a single-thread / the SIMD128 / the scalar build. `init()` says which and why.
 */
import type * as EngineModule from '../wasm/simd/ggweb.js';
import type * as ThreadsModule from '../wasm/threads/ggweb.js';
import { isNode, nodeImport, tick } from './env.js';

export type Engine = typeof EngineModule;
type Threads = typeof ThreadsModule;

/** A 31-byte module using `i8x16.splat` + `i8x16.popcnt` (wasm-feature-detect's SIMD probe). */
const SIMD_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0, 65, 0, 253, 15, 253, 98,
  11,
]);

/** A 36-byte module using `i8x16.relaxed_swizzle` (relaxed SIMD). */
const RELAXED_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 15, 1, 13, 0, 65, 0, 253, 15, 65, 0, 253,
  15, 253, 128, 2, 11,
]);

/**
 * A 92-byte module whose `f` returns lane 0 of `i32x4.relaxed_dot_i8x16_i7x16_add_s([-3, 1, 1, 1,
 * 0…], [1, 2, 3, 4, 0…], [10, 0, 0, 0])`: 16. The repacked GEMV of the relaxed builds sums with
 * it; V8 11.x's baseline compiler (Node 20 with `--experimental-wasm-relaxed-simd`, which runs
 * every function there first) returns 12.
 */
const RELAXED_DOT_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 127, 3, 2, 1, 0, 7, 5, 1, 1, 102, 0, 0, 10, 64, 1, 62, 0,
  253, 12, 253, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  253, 12, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  253, 12, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  253, 147, 2, 253, 27, 0, 11,
]);

let relaxedChecked: { ok: boolean; reason: string } | undefined;

/**
 * Whether this engine runs the relaxed builds correctly: it validates relaxed SIMD (Chrome 114+,
 * Firefox 145+; Node 20 behind `--experimental-wasm-relaxed-simd`) and its integer dot-add gives
 * the exact sum a run of it in the engine's first tier (checked once per process).
 */
export function relaxedSimdCheck(): { ok: boolean; reason: string } {
  if (relaxedChecked) return relaxedChecked;
  try {
    if (typeof WebAssembly !== 'object' || !WebAssembly.validate(RELAXED_PROBE)) {
      relaxedChecked = { ok: false, reason: 'no WebAssembly relaxed SIMD' };
    } else {
      const inst = new WebAssembly.Instance(new WebAssembly.Module(RELAXED_DOT_PROBE));
      const got = (inst.exports.f as () => number)();
      relaxedChecked =
        got === 16
          ? { ok: true, reason: 'relaxed SIMD' }
          : {
              ok: false,
              reason: `WebAssembly relaxed SIMD gives a wrong i32x4.relaxed_dot_i8x16_i7x16_add_s (${got}, not 16: V8 11's baseline compiler, e.g. Node 20; node --no-liftoff avoids it)`,
            };
    }
  } catch (e) {
    relaxedChecked = { ok: false, reason: `relaxed SIMD probe failed: ${String(e)}` };
  }
  return relaxedChecked;
}

/** True when this JavaScript engine runs the relaxed-SIMD builds correctly ([`relaxedSimdCheck`]). */
export function relaxedSimdSupported(): boolean {
  return relaxedSimdCheck().ok;
}

/** True when this JavaScript engine supports WebAssembly SIMD128. */
export function simdSupported(): boolean {
  try {
    return typeof WebAssembly === 'object' && WebAssembly.validate(SIMD_PROBE);
  } catch {
    return false;
  }
}

export interface InitOptions {
  /** `true`/`false` forces a SIMD or the scalar build; default: SIMD when supported. */
  simd?: boolean;
  /**
   * With SIMD: `true` forces the relaxed-SIMD build (an error where the engine lacks relaxed
   * SIMD), `false` the SIMD128 build; default: relaxed SIMD when supported (Chrome 114+,
   * Firefox 145+; Node 20 with `--experimental-wasm-relaxed-simd`). Its quantized kernels give
   * the SIMD128 build's results bit for bit; its f32 matrix kernel fuses multiply-add (FMA where
   * the CPU has it), so f32 results differ from the SIMD128 build's in the last bits.
   */
  relaxed?: boolean;
  /**
   * `true` forces the threads build (an error where it cannot run), `false` a single-thread build.
   * Default: threads where the page is cross-origin isolated (`crossOriginIsolated`: served with
   * `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`),
   * `SharedArrayBuffer` and relaxed SIMD exist, and `nThreads` > 1; always in Node (with relaxed
   * SIMD). The threads build has no WebGPU backend: `threads: false` where WebGPU is wanted.
   */
  threads?: boolean;
  /**
   * Threads of the CPU backend in the threads build (the calling thread + `nThreads - 1` workers,
   * started once here). Default: `navigator.hardwareConcurrency` (Node: `os.availableParallelism()`).
   */
  nThreads?: number;
  /** Where to load the `.wasm` from (a URL, a path in Node, or the bytes). Default: next to this package. */
  wasm?: string | URL | ArrayBuffer | Uint8Array | WebAssembly.Module;
  /**
   * SIMD builds: whether the CPU's token-generation kernels (GEMVs) touch the start of each page
   * 8 KiB ahead of the weights they stream — wasm has no prefetch instruction. Where the
   * hardware prefetchers stop at 4 KiB pages (Intel) the touch starts the next page's stream
   * early; where they do not (AMD Zen 3) it only stalls (GEMVs 1.25–1.3× faster from memory
   * without it). `true`/`false` sets it for this engine; default: chosen at the first
   * `LLM.load` on the CPU by timing a token both ways (`LoadInfo.pageTouch`). Results are the
   * same bits either way.
   */
  pageTouch?: boolean;
}

export interface EngineInfo {
  /** Crate version. */
  version: string;
  /** True when the SIMD128 build is running. */
  simd: boolean;
  /** True when the relaxed-SIMD build (fused multiply-add) is running. */
  relaxed: boolean;
  /** Which CPU kernels are in use. */
  kernels: string;
  /** The build running: `threads`, `relaxed`, `simd` or `scalar`. */
  build: 'threads' | 'relaxed' | 'simd' | 'scalar';
  /**
   * Threads of the CPU backend for what is created now (1 in the single-thread builds; see
   * {@link setThreads}).
   */
  threads: number;
  /** Why this build (e.g. why not the threads build). */
  reason: string;
  /**
   * The GEMVs' page touches ({@link InitOptions.pageTouch}): `null` while not chosen (they
   * touch) and in the scalar build.
   */
  pageTouch: boolean | null;
}

let loading: Promise<Engine> | null = null;
let loaded: Engine | null = null;
let loadedSimd = false;
let loadedRelaxed = false;
let loadedThreads = false;
let loadedReason = '';
let wasmMemory: WebAssembly.Memory | null = null;

/** Whether the threads build can run here, and if not why. */
export function threadsSupport(): { ok: boolean; reason: string } {
  const g = globalThis as { crossOriginIsolated?: boolean; Worker?: unknown };
  // Browsers define SharedArrayBuffer only on isolated pages: name the cause first.
  if (!isNode && g.crossOriginIsolated !== true) {
    return {
      ok: false,
      reason:
        'the page is not cross-origin isolated (serve it with Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp)',
    };
  }
  if (typeof SharedArrayBuffer !== 'function') return { ok: false, reason: 'no SharedArrayBuffer' };
  if (!isNode && typeof g.Worker !== 'function') return { ok: false, reason: 'no Web Workers here' };
  const relaxed = relaxedSimdCheck();
  if (!relaxed.ok) return { ok: false, reason: relaxed.reason };
  return { ok: true, reason: isNode ? 'Node (worker_threads)' : 'cross-origin isolated, SharedArrayBuffer' };
}

async function defaultThreads(): Promise<number> {
  if (isNode) return (await nodeImport<typeof import('node:os')>('os')).availableParallelism();
  const n = (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator?.hardwareConcurrency;
  return typeof n === 'number' && n >= 1 ? Math.floor(n) : 1;
}

/**
 * Start `n` engine workers (www/src/engine-worker.ts) on the threads build's module and memory and
 * wait until each has entered the engine's CPU pool. They live as long as the page / process
 * (Node: unref'd, so they keep nothing alive).
 */
async function startWorkers(m: Threads, module: WebAssembly.Module, memory: WebAssembly.Memory, n: number): Promise<void> {
  const url = new URL('./engine-worker.js', import.meta.url);
  const ready: Promise<void>[] = [];
  for (let i = 0; i < n; i++) {
    if (isNode) {
      const { Worker } = await nodeImport<typeof import('node:worker_threads')>('worker_threads');
      const w = new Worker(url);
      w.unref();
      ready.push(
        new Promise((resolve, reject) => {
          w.once('message', (r: { error?: string }) => (r.error ? reject(new Error(`ggweb engine worker: ${r.error}`)) : resolve()));
          w.once('error', reject);
        }),
      );
      w.postMessage({ module, memory });
    } else {
      const w = new Worker(url, { type: 'module', name: `ggweb-cpu-${i + 1}` });
      ready.push(
        new Promise((resolve, reject) => {
          w.onmessage = (e: MessageEvent<{ error?: string }>) =>
            e.data.error ? reject(new Error(`ggweb engine worker: ${e.data.error}`)) : resolve();
          w.onerror = (e) => reject(new Error(`ggweb engine worker failed: ${e.message}`));
        }),
      );
      w.postMessage({ module, memory });
    }
  }
  await Promise.all(ready);
  // Each posts 'ready' just before it enters the pool, which counts it.
  for (let t = 0; m.threadsWorkers() < n; t++) {
    if (t > 5000) throw new Error(`only ${m.threadsWorkers()} of ${n} ggweb engine workers started`);
    await tick();
  }
}

/** Bytes of a `wasm` source (a URL, a path in Node, or the bytes), or what `fetch` takes. */
async function wasmInput(source: NonNullable<InitOptions['wasm']>): Promise<any> {
  if (isNode && !(source instanceof WebAssembly.Module) && !(source instanceof ArrayBuffer) && !(source instanceof Uint8Array)) {
    const u = source instanceof URL ? source : /^[a-z]+:/i.test(source) ? new URL(source) : null;
    if (!u || u.protocol === 'file:') {
      const fs = await nodeImport<typeof import('node:fs/promises')>('fs/promises');
      const url = await nodeImport<typeof import('node:url')>('url');
      return fs.readFile(u ? url.fileURLToPath(u) : (source as string));
    }
  }
  return source;
}

async function compile(input: any): Promise<WebAssembly.Module> {
  if (input instanceof WebAssembly.Module) return input;
  if (input instanceof ArrayBuffer || ArrayBuffer.isView(input)) return WebAssembly.compile(input as BufferSource);
  const res = await fetch(input);
  if (!res.ok) throw new Error(`failed to fetch Wasm: ${res.status} ${res.statusText} fetching '${res.url}'`);
  return WebAssembly.compileStreaming ? WebAssembly.compileStreaming(res) : WebAssembly.compile(await res.arrayBuffer());
}

async function loadThreads(opts: InitOptions, n: number, reason: string): Promise<Engine> {
  const m = (await import('../wasm/threads/ggweb.js')) as Threads;
  const module = await compile(await wasmInput(opts.wasm ?? new URL('../wasm/threads/ggweb_bg.wasm', import.meta.url)));
  const exports = (await m.default({ module_or_path: module })) as unknown as { memory: WebAssembly.Memory };
  wasmMemory = exports.memory;
  // Atomics.wait traps on a page's main thread: there the caller spins at barriers instead.
  m.setCallerMayWait(isNode || typeof (globalThis as { document?: unknown }).document === 'undefined');
  await startWorkers(m, module, exports.memory, n - 1);
  loadedSimd = true;
  loadedRelaxed = true;
  loadedThreads = true;
  loadedReason = `threads build, ${n} threads: ${reason}`;
  return m as unknown as Engine;
}

/** Bytes of the engine's wasm linear memory (0 before `init`). */
export function wasmMemoryBytes(): number {
  return wasmMemory ? wasmMemory.buffer.byteLength : 0;
}

async function load(opts: InitOptions): Promise<Engine> {
  if (opts.nThreads !== undefined && !(Number.isInteger(opts.nThreads) && opts.nThreads >= 1 && opts.nThreads <= 256)) {
    throw new Error(`invalid argument: nThreads must be an integer in 1..=256, got ${String(opts.nThreads)}`);
  }
  const support = threadsSupport();
  const n = opts.nThreads ?? (await defaultThreads());
  let why: string;
  if (opts.threads === true) {
    if (!support.ok) throw new Error(`the threads build cannot run here: ${support.reason}`);
    if (opts.simd === false || opts.relaxed === false) throw new Error('the threads build is a relaxed-SIMD build: threads: true needs simd and relaxed');
    return loadThreads(opts, n, 'threads: true');
  } else if (opts.threads === false) {
    why = 'threads: false';
  } else if (opts.simd === false || opts.relaxed === false) {
    why = 'a SIMD128 or scalar build was asked for';
  } else if (!support.ok) {
    why = support.reason;
  } else if (n === 1) {
    why = 'nThreads is 1';
  } else {
    return loadThreads(opts, n, support.reason);
  }
  const simd = opts.simd ?? simdSupported();
  if (simd && !simdSupported()) throw new Error('this JavaScript engine does not support WebAssembly SIMD128');
  const relaxed = simd && (opts.relaxed ?? relaxedSimdSupported());
  if (relaxed && !relaxedSimdSupported()) throw new Error(`the relaxed-SIMD build cannot run here: ${relaxedSimdCheck().reason}`);
  // Literal specifiers so that bundlers see every build.
  const mod: Engine = relaxed
    ? ((await import('../wasm/relaxed/ggweb.js')) as unknown as Engine)
    : simd
      ? await import('../wasm/simd/ggweb.js')
      : ((await import('../wasm/scalar/ggweb.js')) as unknown as Engine);
  let source = opts.wasm;
  if (source === undefined) {
    source = relaxed
      ? new URL('../wasm/relaxed/ggweb_bg.wasm', import.meta.url)
      : simd
        ? new URL('../wasm/simd/ggweb_bg.wasm', import.meta.url)
        : new URL('../wasm/scalar/ggweb_bg.wasm', import.meta.url);
  }
  const exports = (await mod.default({ module_or_path: await wasmInput(source) })) as unknown as { memory?: WebAssembly.Memory };
  wasmMemory = exports?.memory ?? null;
  loadedSimd = simd;
  loadedRelaxed = relaxed;
  loadedThreads = false;
  loadedReason = `single-thread ${relaxed ? 'relaxed-SIMD' : simd ? 'SIMD128' : 'scalar'} build, not threads: ${why}`;
  return mod;
}

/**
 * Load and start the wasm engine (once; later calls return the same engine). Every other API
 * calls this itself; call it first to choose a build or to get a `Graph` synchronously.
 */
export async function init(opts: InitOptions = {}): Promise<EngineInfo> {
  if (!loading) {
    loading = load(opts).then(
      (m) => (loaded = m),
      (e) => {
        loading = null;
        throw e;
      },
    );
  }
  const m = await loading;
  if (opts.pageTouch !== undefined) m.setCpuPageTouch(opts.pageTouch);
  return {
    version: m.version(),
    simd: loadedSimd,
    relaxed: loadedRelaxed,
    kernels: m.cpuFeatures(),
    build: loadedThreads ? 'threads' : loadedRelaxed ? 'relaxed' : loadedSimd ? 'simd' : 'scalar',
    threads: m.cpuThreads(),
    reason: loadedReason,
    pageTouch: m.cpuPageTouch() ?? null,
  };
}

/**
 * The threads build: use `n` threads (1 ..= `nThreads`; 0: all) in the models and graphs created
 * from now on (those made before keep theirs). A no-op in the single-thread builds. Resolves to
 * the count now in use.
 */
export async function setThreads(n: number): Promise<number> {
  if (!(Number.isInteger(n) && n >= 0)) throw new Error(`invalid argument: threads must be an integer >= 0, got ${String(n)}`);
  const m = await engine();
  if (loadedThreads) (m as unknown as Threads).setThreads(n);
  return m.cpuThreads();
}

/** True when the threads build is loaded. */
export function threadsLoaded(): boolean {
  return loadedThreads;
}

/** The engine, loading it if needed. */
export async function engine(): Promise<Engine> {
  if (!loaded) await init();
  return loaded as Engine;
}

/** The engine if already loaded (synchronous APIs), else an error saying to `await init()`. */
export function engineSync(): Engine {
  if (!loaded) throw new Error('the ggweb engine is not loaded yet: `await init()` first (or use the async factory)');
  return loaded;
}
