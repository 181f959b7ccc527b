/**
 * Language models (GGUF: llama family, gemma3) in the browser and in Node.
 *
 * ```ts
 * const llm = await LLM.load('/models/SmolLM2-135M-Instruct.Q4_1.gguf', { onProgress: (p) => … });
 * for await (const piece of llm.generate('Once upon a time', { maxTokens: 64 })) out += piece;
 * const reply = await llm.chat([{ role: 'user', content: 'Hi!' }]);   // or `for await` it
 * ```
 *
 * On the CPU the GGUF streams from its source into ONE wasm-side allocation of the final size
 * and the model uses those bytes in place (no second copy); on WebGPU each weight goes to a GPU
 * buffer as its bytes arrive and the file never sits in the wasm heap. A split GGUF loads from
 * the list of its parts. A URL-loaded model is stored in the Cache API
 * (`ggweb-models`) and loaded from there next time. `LLM.loadInWorker` runs the same API in a
 * Web Worker so a page never blocks.
 */
import { engine, wasmMemoryBytes } from './wasm.js';
import { coded, isNode, tick, toError } from './env.js';
import { bodyChunks, fetchBody, openSource, sourceSize, type OpenSource, type Source } from './source.js';
import { chooseBackend, type Backend, type BackendInfo } from './backend.js';
import type { LlmCore } from '../wasm/simd/ggweb.js';
import { inspectModel, type ModelInspection } from './inspect.js';

export type { Backend };

/** One GGUF, or the parts of a split model in order (URLs, paths, Files, bytes). */
export type ModelSource = Source | readonly Source[];

function isSourceList(s: ModelSource): s is readonly Source[] {
  return Array.isArray(s);
}

/** The parts of a split model named by its first part's URL or path (`…-00001-of-0000N.gguf`,
 * as llama.cpp opens them); any other source alone. */
function splitParts(s: Source): Source[] {
  if (typeof s !== 'string' && !(s instanceof URL)) return [s];
  const str = String(s);
  const m = /-00001-of-(\d{5})\.gguf(?=$|[?#])/.exec(str);
  const n = m ? Number(m[1]) : 1;
  if (!m || n < 2) return [s];
  const name = (i: number) => `-${String(i + 1).padStart(5, '0')}-of-${m[1]}.gguf`;
  return Array.from({ length: n }, (_, i) => str.slice(0, m.index) + name(i) + str.slice(m.index + m[0].length));
}

type Engine = Awaited<ReturnType<typeof engine>>;
type Stream = InstanceType<Engine['ModelStream']>;

/**
 * Stream a model's file, or every part of a split model in order, into one `ModelStream`
 * (`toDevice`: its weights to GPU buffers) and hand it to `build` once complete. The parts'
 * `split.*` count is checked after part 1's header, before the rest downloads; a failure aborts
 * the downloads (the Cache API's copy too) and frees the stream.
 */
export async function streamModel<T>(
  m: Engine,
  source: ModelSource,
  opts: { onProgress?: (p: LLMProgress) => void; signal?: AbortSignal; cache?: boolean },
  toDevice: boolean,
  build: (stream: Stream, st: { loaded: number; fromCache: boolean; parts: number }) => T,
): Promise<T> {
  const sources: Source[] = isSourceList(source) ? [...source] : splitParts(source);
  if (sources.length === 0) throw coded('no model files given', 'invalid-argument');
  // Progress over the whole model: every part's size when all are known.
  const sizes = sources.length > 1 ? await Promise.all(sources.map((s) => sourceSize(s, opts.signal))) : [];
  const grand = sizes.every((n) => n !== undefined) && sizes.length ? sizes.reduce((a, b) => a! + b!, 0) : undefined;
  const ctl = new AbortController();
  const onAbort = () => ctl.abort(opts.signal?.reason);
  opts.signal?.addEventListener('abort', onAbort);
  const openOpts = { ...opts, signal: ctl.signal };
  let stream: Stream | null = null;
  try {
    let loaded = 0;
    let fromCache = true;
    for (let i = 0; i < sources.length; i++) {
      const src = await openModel(sources[i], openOpts);
      fromCache &&= src.fromCache;
      if (stream) stream.nextPart(src.total);
      else stream = new m.ModelStream(src.total, toDevice ? 'webgpu' : 'cpu');
      let checked = i > 0;
      for await (const chunk of src.chunks) {
        opts.signal?.throwIfAborted();
        const parsed = stream.push(chunk);
        loaded += chunk.length;
        if (parsed && !checked) {
          checked = true;
          const n = stream.nParts ?? 1;
          if (n !== sources.length) {
            throw coded(`the model is split in ${n} parts, ${sources.length} given (pass every part, in order)`, 'invalid-argument');
          }
        }
        const total = sources.length > 1 ? grand : (src.total ?? stream.total);
        opts.onProgress?.({ loaded, total, fromCache: src.fromCache });
      }
      if (src.cached) await src.cached;
    }
    opts.signal?.throwIfAborted();
    return build(stream!, { loaded, fromCache, parts: sources.length });
  } catch (e) {
    ctl.abort(e);
    throw e;
  } finally {
    opts.signal?.removeEventListener('abort', onAbort);
    stream?.free();
  }
}

export interface LLMProgress {
  /** Bytes read so far. */
  loaded: number;
  /** Total bytes when known. */
  total?: number;
  /** True when the bytes come from the Cache API. */
  fromCache: boolean;
}

export interface LLMLoadOptions {
  onProgress?: (p: LLMProgress) => void;
  signal?: AbortSignal;
  /** Context size in tokens (default 2048, at most the model's training context). */
  nCtx?: number;
  /**
   * `cpu` (default), `webgpu` (rejects when WebGPU is unavailable) or `auto` (WebGPU when an
   * adapter exists). On WebGPU the weights are uploaded to GPU buffers and every graph runs there,
   * with the CPU for any op WebGPU lacks; `loadInfo.backendInfo` says what runs and why, and
   * `backendInfo.placements` where the nodes of the last evaluation ran.
   */
  backend?: Backend;
  /** Use the Cache API for URLs (default true where it exists). */
  cache?: boolean;
  /**
   * WebGPU: keep the whole file in the wasm heap and upload the weights from it (the path before
   * weights streamed to the GPU; for comparisons). Default false.
   */
  keepFile?: boolean;
  /**
   * Evaluate two tokens at load and forget them, as llama.cpp's warm-up run does, so that the
   * first request does not pay for what a first evaluation does once (graph plans, buffers, V8
   * compiling and optimizing the kernels on every thread). Default: on the CPU with more than one
   * thread (the threads build), where it measured faster first generations in Chromium (1.08–1.13×
   * at 2 threads) for 0.1–0.5 s more load time; with one thread it measured no gain.
   */
  warmUp?: boolean;
  /**
   * CPU, SIMD builds: while the engine's page touches are not chosen (`init({ pageTouch })`),
   * run the warm-up (whatever `warmUp` says: the timing needs the optimized kernels), then
   * evaluate one token three times with them and three times without and keep the faster for
   * the engine; later loads reuse the choice. Default true: 0.1–0.5 s more at the first load, generation 1.3–1.5× faster in
   * Chromium on an AMD Zen 3 where the touches only stall (`LoadInfo.pageTouchProbe`).
   */
  tuneCpu?: boolean;
}

export interface LLMInfo {
  architecture: string;
  name: string | null;
  chatTemplate: string | null;
  /** `jinja` (the model's own template), or the hand-written format used instead: `chatml-fallback`, … */
  chatFormat: string;
  /** Why the model's template is not used, when `chatFormat` is a fallback. */
  chatFormatNote: string | null;
  nCtx: number;
  nCtxTrain: number;
  nVocab: number;
  nLayer: number;
  nEmbd: number;
  nHead: number;
  nHeadKv: number;
  nParams: number;
  fileBytes: number;
  bos: number | null;
  eos: number | null;
}

export interface LoadInfo {
  seconds: number;
  bytes: number;
  fromCache: boolean;
  /** The backend that runs the model. */
  backend: 'cpu' | 'webgpu';
  /** Why it is the CPU when something else was asked for. */
  backendNote?: string;
  /** The backend choice in the same shape as `Mnist.backendInfo`. */
  backendInfo: BackendInfo;
  /** CPU kernels: `wasm32 simd128` or `scalar`. */
  kernels: string;
  /** Files the model was loaded from (the parts of a split model). */
  parts: number;
  /** True when the weights streamed to GPU buffers without the file in the wasm heap. */
  weightsStreamed: boolean;
  /**
   * Weight matrices rewritten in place at load into the CPU GEMV's layout (four rows
   * interleaved, ggml's CPU "repack"): in the SIMD builds on the CPU, every matrix read only by
   * matrix products and row lookups; 0 on WebGPU and in the scalar build.
   */
  repackedWeights: number;
  /** Seconds of `seconds` spent on the warm-up run and the page-touch timing (0 without them). */
  warmUpSeconds: number;
  /**
   * Whether the CPU GEMVs touch pages ahead (`init`'s `pageTouch`) after this load; null on
   * WebGPU and in the scalar build.
   */
  pageTouch: boolean | null;
  /** When this load chose `pageTouch`: its best single-token evaluation each way, in ms. */
  pageTouchProbe: { onMs: number; offMs: number } | null;
}

export interface MemoryInfo {
  /** Bytes holding weights, host + GPU. */
  weights: number;
  /**
   * Weight bytes in the wasm heap: on the CPU path the GGUF bytes (used in place); on WebGPU
   * only weights too large for one GPU buffer (with `keepFile`, the whole file as well).
   */
  weightsHost: number;
  /** Weight bytes in GPU buffers. */
  weightsGpu: number;
  /** KV cache bytes (f16 keys and values), host + GPU. */
  kvCache: number;
  /** The part of `kvCache` in GPU buffers. */
  kvCacheGpu: number;
  /** Compute buffers planned so far, all backends. */
  compute: number;
  /** The part of `compute` in GPU buffers. */
  computeGpu: number;
  /** The whole wasm linear memory (it never shrinks: the peak since the engine started). */
  wasmHeap: number;
  /** `performance.memory.usedJSHeapSize` where the browser has it. */
  jsHeap?: number;
}

export interface SamplingOptions {
  /** 0 = greedy. Default 0.8. */
  temperature?: number;
  /** Default 40 (0 = off). */
  topK?: number;
  /** Default 0.95 (1 = off). */
  topP?: number;
  /** Default 0.05 (0 = off). */
  minP?: number;
  /** Default 1 (off). */
  repeatPenalty?: number;
  repeatLastN?: number;
  seed?: number;
}

export interface GenerateOptions extends SamplingOptions {
  /** Tokens to generate at most (default 256). */
  maxTokens?: number;
  /** Stop generating (the iterator ends; `stopReason` is `aborted`). */
  signal?: AbortSignal;
  /** For a string prompt: add BOS/EOS as the model says (default true). */
  addSpecial?: boolean;
  /** Called with each token id and its text. */
  onToken?: (id: number, piece: string) => void;
}

export type StopReason = 'eog' | 'length' | 'context' | 'aborted';

export interface GenerationStats {
  promptTokens: number;
  /** Prompt tokens evaluated (the rest came from the KV cache). */
  promptEvaluated: number;
  promptSeconds: number;
  promptTokPerS: number;
  generatedTokens: number;
  genSeconds: number;
  genTokPerS: number;
}

export interface GenerationResult {
  text: string;
  tokens: number[];
  promptTokens: number[];
  stopReason: StopReason;
  stats: GenerationStats;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | (string & {});
  content: string;
}

export interface TokenizeOptions {
  addSpecial?: boolean;
  parseSpecial?: boolean;
}

/** An event of the step-wise generator (internal, shared with the worker). */
export type GenEvent =
  | { type: 'piece'; piece: string; token: number }
  | { type: 'done'; result: GenerationResult };

/**
 * A generation: iterate it for text pieces as they come (`for await`), or `await` it for the
 * whole result. `stop()` ends it early.
 */
export class Generation implements AsyncIterable<string>, PromiseLike<GenerationResult> {
  #events: AsyncGenerator<GenEvent, void, undefined>;
  #stop: () => void;
  #result: Promise<GenerationResult>;
  #resolve!: (r: GenerationResult) => void;
  #reject!: (e: unknown) => void;
  #started = false;
  /** The result once finished. */
  result: GenerationResult | null = null;

  /** @internal */
  constructor(events: AsyncGenerator<GenEvent, void, undefined>, stop: () => void) {
    this.#events = events;
    this.#stop = stop;
    this.#result = new Promise((res, rej) => {
      this.#resolve = res;
      this.#reject = rej;
    });
    this.#result.catch(() => {});
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<string, void, undefined> {
    if (this.#started) throw coded('a Generation can be iterated once', 'invalid-argument');
    this.#started = true;
    try {
      for await (const ev of this.#events) {
        if (ev.type === 'piece') {
          if (ev.piece) yield ev.piece;
        } else {
          this.result = ev.result;
          this.#resolve(ev.result);
        }
      }
      if (!this.result) throw coded('generation ended without a result', 'internal');
    } catch (e) {
      this.#reject(e);
      throw e;
    } finally {
      if (!this.result) this.#stop();
    }
  }

  then<A = GenerationResult, B = never>(
    ok?: ((r: GenerationResult) => A | PromiseLike<A>) | null,
    fail?: ((e: unknown) => B | PromiseLike<B>) | null,
  ): Promise<A | B> {
    if (!this.#started) {
      (async () => {
        for await (const _ of this) void _;
      })().catch(() => {});
    }
    return this.#result.then(ok, fail);
  }

  /** Stop generating; the result's `stopReason` is `aborted`. */
  stop(): void {
    this.#stop();
  }
}

/** A fast yield to the event loop (no 4 ms setTimeout clamp). */
function yieldNow(): Promise<void> {
  if (isNode) return new Promise((r) => setImmediate(r));
  return new Promise((r) => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => {
      ch.port1.close();
      r();
    };
    ch.port2.postMessage(0);
  });
}

const CACHE_NAME = 'ggweb-models';

function isUrlSource(s: Source): s is string | URL {
  if (s instanceof URL) return s.protocol === 'http:' || s.protocol === 'https:';
  if (typeof s !== 'string') return false;
  return isNode ? /^https?:/i.test(s) : true;
}

/** Open a model source; URLs go through the Cache API when it exists (also used by embed.ts). */
export async function openModel(
  source: Source,
  opts: LLMLoadOptions,
): Promise<OpenSource & { fromCache: boolean; cached?: Promise<void> }> {
  const useCache = opts.cache !== false && typeof caches !== 'undefined' && isUrlSource(source);
  if (!useCache) return { ...(await openSource(source, opts.signal)), fromCache: false };
  const base = typeof location !== 'undefined' ? location.href : undefined;
  const url = new URL(String(source), base).href;
  let cache: Cache | null = null;
  try {
    cache = await caches.open(CACHE_NAME);
  } catch {
    cache = null; // e.g. an opaque origin
  }
  const hit = cache ? await cache.match(url) : undefined;
  if (hit && hit.body) {
    const len = hit.headers.get('content-length');
    return { total: len ? Number(len) : undefined, chunks: bodyChunks(hit.body, url), name: url, fromCache: true };
  }
  const { body: resBody, total } = await fetchBody(url, opts.signal);
  if (!resBody) throw coded(`no response body for ${url}`, 'io');
  let body = resBody;
  let cached: Promise<void> | undefined;
  if (cache) {
    const [a, b] = body.tee();
    body = a;
    const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
    if (total !== undefined) headers['content-length'] = String(total);
    cached = cache.put(url, new Response(b, { headers })).catch(() => {});
  }
  return { total, chunks: bodyChunks(body, url), name: url, fromCache: false, cached };
}

/** Remove cached models (all, or the one at `url`). Returns true when something was removed. */
export async function clearModelCache(url?: string): Promise<boolean> {
  if (typeof caches === 'undefined') return false;
  if (url === undefined) return caches.delete(CACHE_NAME);
  const c = await caches.open(CACHE_NAME);
  const base = typeof location !== 'undefined' ? location.href : undefined;
  return c.delete(new URL(url, base).href);
}

function now(): number {
  return performance.now();
}

/** A language model running on this thread. See also {@link LLM.loadInWorker}. */
export class LLM {
  #core: LlmCore | null;
  #busy = false;
  readonly info: LLMInfo;
  readonly loadInfo: LoadInfo;
  /** Statistics of the last generation. */
  lastStats: GenerationStats | null = null;

  private constructor(core: LlmCore, loadInfo: LoadInfo) {
    this.#core = core;
    this.info = core.info() as LLMInfo;
    this.loadInfo = loadInfo;
  }

  /**
   * What model `source` is (family, quantization, size, parameters) and whether `LLM.load` runs
   * it, from the header alone: the rest of a URL's body is not downloaded.
   */
  static inspect(source: Source, opts: { signal?: AbortSignal } = {}): Promise<ModelInspection> {
    return inspectModel(source, opts);
  }

  /**
   * Load a GGUF from a URL, a path (Node), a File/Blob, or bytes; or a split model
   * (`*-00001-of-0000N.gguf` …) from the list of its parts in order, or from the URL or path of
   * part 1 alone (the others named alike). Its `split.*` keys are checked: a wrong count or order
   * is refused after part 1's header, before the rest downloads.
   * On WebGPU the weights go to GPU buffers as their bytes arrive (the file never sits in the wasm
   * heap, so a model larger than wasm32 memory can run); on the CPU a file that cannot fit the
   * heap is an `out-of-memory` error as soon as its size or header says so.
   */
  static async load(source: ModelSource, opts: LLMLoadOptions = {}): Promise<LLM> {
    const t0 = now();
    const m = await engine();
    const backendInfo = await chooseBackend(opts.backend);
    const toDevice = backendInfo.backend === 'webgpu' && !opts.keepFile;
    try {
      const llm = await streamModel(m, source, opts, toDevice, (stream, st) => {
        const core = m.LlmCore.load(stream, Math.max(1, Math.floor(opts.nCtx ?? 2048)), backendInfo.backend);
        // The engine's one-line report says what really runs (and which weights stayed on the host).
        if (backendInfo.backend === 'webgpu') backendInfo.reason = `${backendInfo.reason}: ${core.backendReport}`;
        const info: LoadInfo = {
          seconds: (now() - t0) / 1000,
          bytes: st.loaded,
          fromCache: st.fromCache,
          backend: backendInfo.backend,
          kernels: m.cpuFeatures(),
          backendInfo,
          parts: st.parts,
          weightsStreamed: toDevice,
          repackedWeights: core.repackedWeights,
          warmUpSeconds: 0,
          pageTouch: null,
          pageTouchProbe: null,
        };
        if (backendInfo.requested !== backendInfo.backend) info.backendNote = backendInfo.reason;
        return new LLM(core, info);
      });
      if (backendInfo.backend === 'cpu') {
        const simd = m.simdEnabled();
        const tune = simd && (opts.tuneCpu ?? true) && m.cpuPageTouch() === undefined;
        if (tune || (opts.warmUp ?? (backendInfo.cpuThreads ?? 1) > 1)) {
          const t1 = now();
          await llm.#warmUp(tune ? m : null);
          llm.loadInfo.warmUpSeconds = (now() - t1) / 1000;
          llm.loadInfo.seconds = (now() - t0) / 1000;
        }
        llm.loadInfo.pageTouch = simd ? (m.cpuPageTouch() ?? true) : null;
      }
      return llm;
    } catch (e) {
      throw toError(e);
    }
  }

  /**
   * Two single-token steps (the generation kernels), yielding between them so that the
   * optimizing tier can finish, then the KV cache cleared: the model is as loaded. Token ids:
   * BOS and EOS where the model has them. With `tune` (the engine), then the page-touch timing
   * of {@link LLMLoadOptions.tuneCpu}.
   */
  async #warmUp(tune: Engine | null): Promise<void> {
    const core = this.#c();
    const n = this.info.nVocab;
    const a = this.info.bos ?? 0;
    const b = this.info.eos ?? Math.min(1, n - 1);
    const ids = [a, b];
    try {
      for (const len of [1, 2]) {
        if (len > this.info.nCtx) break;
        core.logits(new Uint32Array(ids.slice(0, len)));
        await tick();
      }
      if (tune) {
        // The page touches (`InitOptions.pageTouch`): the same token at position 0, alternated,
        // the best of three each way (the machines are shared: a slow run is noise, not the mode).
        const best = { on: Infinity, off: Infinity };
        try {
          for (let i = 0; i < 3; i++) {
            for (const on of [true, false]) {
              core.reset();
              tune.setCpuPageTouch(on);
              const t = now();
              core.logits(new Uint32Array([a]));
              const ms = now() - t;
              if (on) best.on = Math.min(best.on, ms);
              else best.off = Math.min(best.off, ms);
              await tick();
            }
          }
        } catch (e) {
          tune.setCpuPageTouch(undefined);
          throw e;
        }
        tune.setCpuPageTouch(best.on <= best.off);
        this.loadInfo.pageTouchProbe = { onMs: +best.on.toFixed(3), offMs: +best.off.toFixed(3) };
      }
    } finally {
      core.reset();
    }
  }

  /**
   * Load in a dedicated Web Worker: the same API, nothing blocks the calling thread. `engine`: the
   * worker's `init` options (e.g. `{ nThreads: 4 }`; the threads build runs where the page is
   * cross-origin isolated).
   */
  static async loadInWorker(
    source: ModelSource,
    opts: LLMLoadOptions & { worker?: Worker; engine?: import('./wasm.js').InitOptions } = {},
  ): Promise<WorkerLLM> {
    const { WorkerLLM } = await import('./llm-client.js');
    return WorkerLLM.load(source, opts);
  }

  #c(): LlmCore {
    if (!this.#core) throw coded('this LLM was freed', 'invalid-argument');
    return this.#core;
  }

  #call<T>(f: (c: LlmCore) => T): T {
    try {
      return f(this.#c());
    } catch (e) {
      throw toError(e);
    }
  }

  /** Token ids of `text` (default: special tokens added and parsed). */
  async tokenize(text: string, opts: TokenizeOptions = {}): Promise<number[]> {
    return this.tokenizeSync(text, opts);
  }
  tokenizeSync(text: string, opts: TokenizeOptions = {}): number[] {
    return Array.from(this.#call((c) => c.tokenize(text, opts.addSpecial ?? true, opts.parseSpecial ?? true)));
  }

  async detokenize(ids: ArrayLike<number>): Promise<string> {
    return this.#call((c) => c.detokenize(Uint32Array.from(ids)));
  }

  /** The prompt text of `messages` in the model's chat format. */
  async applyChatTemplate(messages: ChatMessage[], addGenerationPrompt = true): Promise<string> {
    return this.#call((c) => c.applyChatTemplate(messages, addGenerationPrompt));
  }

  /** Last-position logits after `input` (text or ids; for tests and scoring). */
  async logits(input: string | ArrayLike<number>, opts: TokenizeOptions = {}): Promise<Float32Array> {
    this.#guard();
    const ids = typeof input === 'string' ? this.tokenizeSync(input, opts) : Uint32Array.from(input);
    if (!this.#gpu()) return this.#call((c) => c.logits(Uint32Array.from(ids)));
    this.#busy = true;
    try {
      const c = this.#c();
      const out = (await c.logitsAsync(Uint32Array.from(ids))) as Float32Array;
      this.#placed(c);
      return out;
    } catch (e) {
      throw toError(e);
    } finally {
      this.#busy = false;
    }
  }

  #gpu(): boolean {
    return this.loadInfo.backendInfo.backend === 'webgpu';
  }

  /** After a WebGPU evaluation: where its nodes ran. */
  #placed(c: LlmCore): void {
    this.loadInfo.backendInfo.placements = c.placements() as BackendInfo['placements'];
  }

  /** Bytes held by the model and the wasm heap. */
  memory(): MemoryInfo {
    const m = this.#call((c) => c.memory()) as MemoryInfo;
    m.wasmHeap = wasmMemoryBytes();
    const pm = (performance as { memory?: { usedJSHeapSize: number } }).memory;
    if (pm) m.jsHeap = pm.usedJSHeapSize;
    return m;
  }

  /** Tokens in the KV cache. */
  get nPast(): number {
    return this.#c().nPast;
  }

  /** Forget the conversation. */
  reset(): void {
    this.#call((c) => c.reset());
  }

  /** Generate after `prompt` (text or token ids). */
  generate(prompt: string | ArrayLike<number>, opts: GenerateOptions = {}): Generation {
    let stopped = false;
    const stop = () => (stopped = true);
    return new Generation(this.#run(prompt, opts, () => stopped), stop);
  }

  /** Chat: render `messages` with the model's template and generate the assistant's reply. */
  chat(messages: ChatMessage[], opts: GenerateOptions = {}): Generation {
    let stopped = false;
    const stop = () => (stopped = true);
    const self = this;
    async function* run(): AsyncGenerator<GenEvent, void, undefined> {
      const text = await self.applyChatTemplate(messages, true);
      yield* self.#run(text, { maxTokens: 512, ...opts }, () => stopped);
    }
    return new Generation(run(), stop);
  }

  /** Generate and return everything at once. */
  async complete(prompt: string | ArrayLike<number>, opts: GenerateOptions = {}): Promise<GenerationResult> {
    return this.generate(prompt, opts);
  }

  #guard(): void {
    if (this.#busy) throw coded('this LLM is busy with another generation (stop it first)', 'busy');
  }

  async *#run(
    prompt: string | ArrayLike<number>,
    opts: GenerateOptions,
    stopped: () => boolean,
  ): AsyncGenerator<GenEvent, void, undefined> {
    this.#guard();
    this.#busy = true;
    const c = this.#c();
    try {
      const ids =
        typeof prompt === 'string'
          ? this.tokenizeSync(prompt, { addSpecial: opts.addSpecial ?? true, parseSpecial: true })
          : Array.from(prompt);
      const maxTokens = Math.max(0, Math.floor(opts.maxTokens ?? 256));
      this.#call(() => c.begin(Uint32Array.from(ids), maxTokens, opts));
      const stats: GenerationStats = {
        promptTokens: ids.length,
        promptEvaluated: 0,
        promptSeconds: 0,
        promptTokPerS: 0,
        generatedTokens: 0,
        genSeconds: 0,
        genTokPerS: 0,
      };
      const tokens: number[] = [];
      let text = '';
      let reason: StopReason | null = null;
      while (reason === null) {
        if (stopped() || opts.signal?.aborted) {
          c.stop();
          reason = 'aborted';
          break;
        }
        const t0 = now();
        let raw: unknown;
        if (this.#gpu()) {
          try {
            raw = await c.stepAsync();
          } catch (e) {
            throw toError(e);
          }
          this.#placed(c);
        } else {
          raw = this.#call(() => c.step());
        }
        const ev = raw as {
          phase: 'prompt' | 'token' | 'done';
          piece?: string;
          token?: number;
          nEvaluated?: number;
          reason?: StopReason;
        };
        const dt = (now() - t0) / 1000;
        if (ev.phase === 'prompt') {
          stats.promptEvaluated = ev.nEvaluated ?? 0;
          stats.promptSeconds = dt;
        } else {
          stats.genSeconds += dt;
          if (ev.phase === 'token') {
            tokens.push(ev.token!);
            text += ev.piece ?? '';
            opts.onToken?.(ev.token!, ev.piece ?? '');
            yield { type: 'piece', piece: ev.piece ?? '', token: ev.token! };
          } else {
            if (ev.piece) {
              text += ev.piece;
              yield { type: 'piece', piece: ev.piece, token: -1 };
            }
            reason = ev.reason ?? 'eog';
          }
        }
        await yieldNow();
      }
      stats.generatedTokens = tokens.length;
      stats.promptTokPerS = stats.promptSeconds > 0 ? stats.promptEvaluated / stats.promptSeconds : 0;
      stats.genTokPerS = stats.genSeconds > 0 ? tokens.length / stats.genSeconds : 0;
      this.lastStats = stats;
      yield { type: 'done', result: { text, tokens, promptTokens: ids, stopReason: reason, stats } };
    } finally {
      if (c.generating) c.stop();
      this.#busy = false;
    }
  }

  free(): void {
    this.#core?.free();
    this.#core = null;
  }
}

/** The worker-backed LLM (same API, every method async). */
export type WorkerLLM = import('./llm-client.js').WorkerLLM;
