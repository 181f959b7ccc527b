/**
 * Sentence embeddings (BERT GGUFs in llama.cpp's `bert` layout, e.g. all-MiniLM-L6-v2) in the
 * browser and in Node.
 *
 * ```ts
 * const model = await Embedder.load('/models/all-MiniLM-L6-v2.f16.gguf');
 * const [a, b] = await model.embed(['A man is eating food.', 'A man is eating a piece of bread.']);
 * cosineSimilarity(a, b); // ≈ 0.755
 * ```
 *
 * Loading works as for {@link LLM.load}: a URL (through the Cache API), a path in Node, a
 * File/Blob or bytes, or the parts of a split GGUF, each streamed into one wasm allocation that
 * the model uses in place.
 * Vectors are pooled as the model's `bert.pooling_type` says and L2-normalised.
 */
import { engine } from './wasm.js';
import { toError } from './env.js';
import type { Source } from './source.js';
import { chooseBackend, type Backend, type BackendInfo } from './backend.js';
import { streamModel, type LLMProgress, type ModelSource } from './llm.js';
import type { EmbedderCore } from '../wasm/simd/ggweb.js';

export interface EmbedderLoadOptions {
  onProgress?: (p: LLMProgress) => void;
  signal?: AbortSignal;
  /** `cpu` (default), `webgpu` or `auto`, as for {@link LLM.load}. */
  backend?: Backend;
  /** Use the Cache API for URLs (default true where it exists). */
  cache?: boolean;
}

export interface EmbedderInfo {
  /** Vector length. */
  nEmbd: number;
  /** `mean`, `cls`, `last` or `none`. */
  pooling: string;
  /** Longest input in tokens, [CLS] and [SEP] included. */
  maxTokens: number;
  backendInfo: BackendInfo;
  /** The engine's report of which backends run. */
  backendReport: string;
}

/** A BERT embedding model on this thread. */
export class Embedder {
  #core: EmbedderCore | null;
  #queue: Promise<unknown> = Promise.resolve();
  readonly info: EmbedderInfo;

  private constructor(core: EmbedderCore, info: EmbedderInfo) {
    this.#core = core;
    this.info = info;
  }

  /** Load in a dedicated Web Worker (browsers): see {@link WorkerEmbedder}. */
  static loadInWorker(source: ModelSource, opts: Omit<EmbedderLoadOptions, 'signal'> & { worker?: Worker } = {}): Promise<WorkerEmbedder> {
    return WorkerEmbedder.load(source, opts);
  }

  /**
   * Load a BERT GGUF from a URL, a path (Node), a File/Blob, or bytes; or a split model from the
   * list of its parts in order, or from the URL or path of part 1 alone (as {@link LLM.load}).
   */
  static async load(source: ModelSource, opts: EmbedderLoadOptions = {}): Promise<Embedder> {
    const m = await engine();
    const backendInfo = await chooseBackend(opts.backend);
    try {
      return await streamModel(m, source, opts, false, (stream) => {
        const core = m.EmbedderCore.load(stream, backendInfo.backend);
        return new Embedder(core, {
          nEmbd: core.nEmbd,
          pooling: core.pooling,
          maxTokens: core.maxTokens,
          backendInfo,
          backendReport: core.backendReport,
        });
      });
    } catch (e) {
      throw toError(e);
    }
  }

  #live(): EmbedderCore {
    if (!this.#core) throw Object.assign(new Error('this Embedder was disposed'), { code: 'disposed' });
    return this.#core;
  }

  /** Token ids of `text` as the model sees it ([CLS] … [SEP]). */
  tokenize(text: string): Uint32Array {
    try {
      return this.#live().tokenize(text);
    } catch (e) {
      throw toError(e);
    }
  }

  /**
   * One vector per text (pooled, L2-normalised, `info.nEmbd` floats). Calls are queued, so
   * concurrent `embed`s run one after the other.
   */
  embed(texts: string | readonly string[]): Promise<Float32Array[]> {
    const list = typeof texts === 'string' ? [texts] : [...texts];
    const run = async (): Promise<Float32Array[]> => {
      try {
        const core = this.#live();
        return (await core.embedAsync(list)) as Float32Array[];
      } catch (e) {
        throw toError(e);
      }
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => {});
    return p;
  }

  /** Free the model's memory; the object is unusable afterwards. */
  dispose(): void {
    this.#core?.free();
    this.#core = null;
  }
}

/**
 * The {@link Embedder} API in a dedicated Web Worker (browsers): the same calls, answered as
 * Promises, so loading and embedding never block the page. Errors keep their `code`.
 */
export class WorkerEmbedder {
  readonly worker: Worker;
  info!: EmbedderInfo;
  #next = 1;
  #pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void; onProgress?: (p: LLMProgress) => void }>();

  private constructor(worker: Worker) {
    this.worker = worker;
    worker.onmessage = (ev) => {
      const m = ev.data;
      const p = this.#pending.get(m.id);
      if (!p) return;
      if ('error' in m) {
        this.#pending.delete(m.id);
        p.reject(Object.assign(new Error(m.error.message), { code: m.error.code }));
      } else if ('value' in m) {
        this.#pending.delete(m.id);
        p.resolve(m.value);
      } else if (m.progress) p.onProgress?.(m.progress);
    };
    worker.onerror = (ev) => {
      const err = Object.assign(new Error(`embedding worker error: ${ev.message || 'failed to start'}`), { code: 'internal' });
      for (const p of this.#pending.values()) p.reject(err);
      this.#pending.clear();
    };
  }

  #send(op: string, args: unknown[], onProgress?: (p: LLMProgress) => void): Promise<any> {
    const id = this.#next++;
    const done = new Promise<any>((resolve, reject) => this.#pending.set(id, { resolve, reject, onProgress }));
    this.worker.postMessage({ id, op, args });
    return done;
  }

  /** Start a worker and load the model there (`signal` is not supported across the worker). */
  static async load(source: ModelSource, opts: Omit<EmbedderLoadOptions, 'signal'> & { worker?: Worker } = {}): Promise<WorkerEmbedder> {
    const worker = opts.worker ?? new Worker(new URL('./embed-worker.js', import.meta.url), { type: 'module' });
    const w = new WorkerEmbedder(worker);
    // URLs resolved against the page: the worker's base is its script.
    const abs = (s: Source): unknown =>
      typeof s === 'string' || s instanceof URL ? new URL(String(s), typeof location !== 'undefined' ? location.href : undefined).href : s;
    const src = Array.isArray(source) ? source.map(abs) : abs(source as Source);
    const { onProgress, worker: _w, ...rest } = opts as EmbedderLoadOptions & { worker?: Worker };
    try {
      w.info = await w.#send('load', [src, { ...rest, signal: undefined }], onProgress);
      return w;
    } catch (e) {
      worker.terminate();
      throw e;
    }
  }

  tokenize(text: string): Promise<number[]> {
    return this.#send('tokenize', [text]);
  }
  embed(texts: string | readonly string[]): Promise<Float32Array[]> {
    return this.#send('embed', [typeof texts === 'string' ? [texts] : [...texts]]);
  }
  /** Free the model and stop the worker. */
  async dispose(): Promise<void> {
    await this.#send('dispose', []).catch(() => {});
    this.worker.terminate();
  }
}

/** `EmbeddingModel` is the same class (the name some callers expect). */
export { Embedder as EmbeddingModel };

/** Cosine similarity of two vectors (0 when either is all zeros). */
export function cosineSimilarity(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw Object.assign(new Error(`vectors of ${a.length} and ${b.length} values`), { code: 'invalid-argument' });
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return aa === 0 || bb === 0 ? 0 : ab / Math.sqrt(aa * bb);
}

/** Rank `docs` by cosine similarity to `query` (all vectors from the same model), best first. */
export function rankBySimilarity(query: ArrayLike<number>, docs: readonly ArrayLike<number>[]): { index: number; score: number }[] {
  return docs.map((d, index) => ({ index, score: cosineSimilarity(query, d) })).sort((x, y) => y.score - x.score);
}
