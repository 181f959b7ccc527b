/** `LLM.loadInWorker`: the LLM API, forwarded to a dedicated module Web Worker (llm-worker.ts). */
import {
  Generation,
  type ChatMessage,
  type GenerateOptions,
  type GenEvent,
  type GenerationResult,
  type LLMInfo,
  type LLMLoadOptions,
  type LoadInfo,
  type MemoryInfo,
  type ModelSource,
  type TokenizeOptions,
} from './llm.js';
import type { Source } from './source.js';
import type { InitOptions } from './wasm.js';

interface Pending {
  resolve: (v: any) => void;
  reject: (e: Error) => void;
  onMessage?: (m: any) => void;
}

/** Functions cannot cross to the worker. */
function plain(opts: GenerateOptions): GenerateOptions {
  const { signal: _s, onToken: _t, ...rest } = opts;
  return rest;
}

export class WorkerLLM {
  readonly worker: Worker;
  info!: LLMInfo;
  loadInfo!: LoadInfo;
  lastStats: GenerationResult['stats'] | null = null;
  #next = 1;
  #pending = new Map<number, Pending>();

  private constructor(worker: Worker) {
    this.worker = worker;
    worker.onmessage = (ev) => {
      const m = ev.data;
      const p = this.#pending.get(m.id);
      if (!p) return;
      if ('error' in m) {
        this.#pending.delete(m.id);
        p.reject(new Error(m.error));
      } else if ('value' in m) {
        this.#pending.delete(m.id);
        p.resolve(m.value);
      } else p.onMessage?.(m);
    };
    worker.onerror = (ev) => {
      const err = new Error(`LLM worker error: ${ev.message || 'failed to start'}`);
      for (const p of this.#pending.values()) p.reject(err);
      this.#pending.clear();
    };
  }

  #send(op: string, args: any[], onMessage?: (m: any) => void, transfer: Transferable[] = []): { id: number; done: Promise<any> } {
    const id = this.#next++;
    const done = new Promise<any>((resolve, reject) => this.#pending.set(id, { resolve, reject, onMessage }));
    this.worker.postMessage({ id, op, args }, transfer);
    return { id, done };
  }

  static async load(source: ModelSource, opts: LLMLoadOptions & { worker?: Worker; engine?: InitOptions } = {}): Promise<WorkerLLM> {
    const worker = opts.worker ?? new Worker(new URL('./llm-worker.js', import.meta.url), { type: 'module' });
    const w = new WorkerLLM(worker);
    const base = typeof location !== 'undefined' ? location.href : undefined;
    const abs = (s: Source): unknown => (typeof s === 'string' || s instanceof URL ? new URL(String(s), base).href : s);
    const src = Array.isArray(source) ? source.map(abs) : abs(source as Source);
    const { onProgress, signal, worker: _w, ...rest } = opts;
    signal?.throwIfAborted();
    const { done } = w.#send('load', [src, rest], (m) => m.progress && onProgress?.(m.progress));
    const onAbort = () => w.worker.postMessage({ id: 0, op: 'abortLoad', args: [] });
    signal?.addEventListener('abort', onAbort);
    try {
      const v = await done;
      w.info = v.info;
      w.loadInfo = v.loadInfo;
      return w;
    } catch (e) {
      worker.terminate();
      throw e;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  tokenize(text: string, opts: TokenizeOptions = {}): Promise<number[]> {
    return this.#send('tokenize', [text, opts]).done;
  }
  detokenize(ids: ArrayLike<number>): Promise<string> {
    return this.#send('detokenize', [Array.from(ids)]).done;
  }
  applyChatTemplate(messages: ChatMessage[], addGenerationPrompt = true): Promise<string> {
    return this.#send('applyChatTemplate', [messages, addGenerationPrompt]).done;
  }
  logits(input: string | ArrayLike<number>, opts: TokenizeOptions = {}): Promise<Float32Array> {
    return this.#send('logits', [typeof input === 'string' ? input : Array.from(input), opts]).done;
  }
  memory(): Promise<MemoryInfo> {
    return this.#send('memory', []).done;
  }
  reset(): Promise<void> {
    return this.#send('reset', []).done;
  }

  generate(prompt: string | ArrayLike<number>, opts: GenerateOptions = {}): Generation {
    return this.#gen('generate', typeof prompt === 'string' ? prompt : Array.from(prompt), opts);
  }
  chat(messages: ChatMessage[], opts: GenerateOptions = {}): Generation {
    return this.#gen('chat', messages, opts);
  }
  async complete(prompt: string | ArrayLike<number>, opts: GenerateOptions = {}): Promise<GenerationResult> {
    return this.generate(prompt, opts);
  }

  #gen(op: string, input: unknown, opts: GenerateOptions): Generation {
    const queue: GenEvent[] = [];
    let wake: (() => void) | null = null;
    let error: Error | null = null;
    let finished = false;
    const push = () => {
      wake?.();
      wake = null;
    };
    const { id, done } = this.#send(op, [input, plain(opts)], (m) => {
      if (typeof m.piece === 'string') {
        queue.push({ type: 'piece', piece: m.piece, token: -1 });
        push();
      }
    });
    done.then(
      (result: GenerationResult) => {
        this.lastStats = result.stats;
        queue.push({ type: 'done', result });
        finished = true;
        push();
      },
      (e) => {
        error = e;
        finished = true;
        push();
      },
    );
    const stop = () => this.worker.postMessage({ id: 0, op: 'stop', args: [id] });
    opts.signal?.addEventListener('abort', stop, { once: true });
    async function* events(): AsyncGenerator<GenEvent, void, undefined> {
      for (;;) {
        while (queue.length) {
          const ev = queue.shift()!;
          if (ev.type === 'piece') opts.onToken?.(-1, ev.piece);
          yield ev;
          if (ev.type === 'done') return;
        }
        if (error) throw error;
        if (finished && !queue.length) return;
        await new Promise<void>((r) => (wake = r));
      }
    }
    return new Generation(events(), stop);
  }

  /** Free the model and end the worker. */
  async free(): Promise<void> {
    try {
      await this.#send('free', []).done;
    } finally {
      this.worker.terminate();
    }
  }
}
