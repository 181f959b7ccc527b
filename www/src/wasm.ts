/**
 * Loading the wasm engine. Three builds ship, and the best one `WebAssembly.validate` accepts is
 * loaded: `wasm/relaxed/` (SIMD128 + relaxed SIMD: integer dots of the 4/5-bit quantized tiles,
 * fused multiply-add in the f32 tile), else `wasm/simd/` (SIMD128), else `wasm/scalar/`.
 * `init({relaxed: false})` / `init({simd: false})` force the SIMD128 / scalar build.
 */
import type * as EngineModule from '../wasm/simd/ggweb.js';
import { isNode, nodeImport } from './env.js';

export type Engine = typeof EngineModule;

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

/** True when this JavaScript engine supports WebAssembly relaxed SIMD (Chrome 114+, Firefox 145+). */
export function relaxedSimdSupported(): boolean {
  try {
    return typeof WebAssembly === 'object' && WebAssembly.validate(RELAXED_PROBE);
  } catch {
    return false;
  }
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
  /** Where to load the `.wasm` from (a URL, a path in Node, or the bytes). Default: next to this package. */
  wasm?: string | URL | ArrayBuffer | Uint8Array | WebAssembly.Module;
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
}

let loading: Promise<Engine> | null = null;
let loaded: Engine | null = null;
let loadedSimd = false;
let loadedRelaxed = false;
let wasmMemory: WebAssembly.Memory | null = null;

/** Bytes of the engine's wasm linear memory (0 before `init`). */
export function wasmMemoryBytes(): number {
  return wasmMemory ? wasmMemory.buffer.byteLength : 0;
}

async function load(opts: InitOptions): Promise<Engine> {
  const simd = opts.simd ?? simdSupported();
  if (simd && !simdSupported()) throw new Error('this JavaScript engine does not support WebAssembly SIMD128');
  const relaxed = simd && (opts.relaxed ?? relaxedSimdSupported());
  if (relaxed && !relaxedSimdSupported()) throw new Error('this JavaScript engine does not support WebAssembly relaxed SIMD');
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
  let input: any = source;
  if (isNode && !(source instanceof WebAssembly.Module) && !(source instanceof ArrayBuffer) && !(source instanceof Uint8Array)) {
    const u = source instanceof URL ? source : /^[a-z]+:/i.test(source) ? new URL(source) : null;
    if (!u || u.protocol === 'file:') {
      const fs = await nodeImport<typeof import('node:fs/promises')>('fs/promises');
      const url = await nodeImport<typeof import('node:url')>('url');
      input = await fs.readFile(u ? url.fileURLToPath(u) : (source as string));
    }
  }
  const exports = (await mod.default({ module_or_path: input })) as unknown as { memory?: WebAssembly.Memory };
  wasmMemory = exports?.memory ?? null;
  loadedSimd = simd;
  loadedRelaxed = relaxed;
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
  return { version: m.version(), simd: loadedSimd, relaxed: loadedRelaxed, kernels: m.cpuFeatures() };
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
