/**
 * Training ggml's MNIST models (`fc`, `cnn`) from random initialisation or from a GGUF, off the
 * calling thread: {@link Trainer} runs the engine in a dedicated Worker (browsers: a module Web
 * Worker; Node: `worker_threads`), so a page stays responsive while it trains.
 *
 * ```ts
 * const trainer = await Trainer.create({ model: 'fc', epochs: 1, batchSize: 32, lr: 2e-3 });
 * const run = await trainer.fit(
 *   { imagesIdx, labelsIdx },                 // idx files (gzip or not), or {images, labels}
 *   { onStep: (s) => plot(s.loss), onEpoch: (e) => console.log(e.validation.accuracy) },
 * );
 * const gguf = await trainer.toGGUF();       // ggml's MNIST layout: Mnist.load(gguf) reads it
 * await trainer.dispose();
 * ```
 *
 * One static training graph (forward, cross-entropy loss, backward, AdamW or SGD as graph ops)
 * is planned once and re-run per step, as ggml-opt does. The worker trains a few steps at a
 * time and then yields, so `stop()` and an AbortSignal are seen within a step or two; `fit`
 * without data continues a stopped run. Errors reject with a `code` (`shape`,
 * `invalid-argument`, `bad-gguf`, `bad-model`, `unsupported`, `aborted`, `busy`, …) and the
 * trainer stays usable. `backend: 'webgpu'` trains on WebGPU (in the page or its Worker: Chromium's
 * Workers have `navigator.gpu`), `auto` where an adapter exists; `backendInfo` says what runs
 * and why (with the graph's placements on WebGPU). The threads build has no WebGPU: on a
 * cross-origin-isolated page give `engine: { threads: false }` (the default).
 */
import { engine, type InitOptions } from './wasm.js';
import { coded, isNode, nodeImport, toError, type GgwebError } from './env.js';
import { chooseBackend, type Backend, type BackendInfo } from './backend.js';
import type { TrainerCore } from '../wasm/simd/ggweb.js';

export interface TrainerOptions {
  /** `fc` (default; 784-500-10) or `cnn` (two 3×3 convolutions + pooling, ggml's). Ignored with `resume`. */
  model?: 'fc' | 'cnn';
  /** Epochs per `fit` run (default 30, as ggml's mnist-train). */
  epochs?: number;
  /** Images per optimizer step (default 1000). */
  batchSize?: number;
  /**
   * Images per graph evaluation; divides `batchSize` (gradients of the parts are accumulated).
   * Default: 500 with the default batch size, else `batchSize`.
   */
  physicalBatchSize?: number;
  /** `adamw` (default, ggml-opt's semantics) or `sgd`. */
  optimizer?: 'adamw' | 'sgd';
  /** Learning rate (default 1e-3). */
  lr?: number;
  /** AdamW's betas and epsilon (defaults 0.9, 0.999, 1e-8). */
  beta1?: number;
  beta2?: number;
  eps?: number;
  /** Weight decay (default 0). */
  weightDecay?: number;
  /** Fraction of the data held out (the last images) for validation (default 0.05). */
  valSplit?: number;
  /** Seeds the initialisation and the shuffling (default 42). */
  seed?: number;
  /** Continue training these weights (a GGUF in ggml's MNIST layout; fresh optimizer state). */
  resume?: Uint8Array;
  /**
   * `cpu` (default), `webgpu` (rejects with `unsupported` where there is no WebGPU, e.g. Node) or
   * `auto` (WebGPU when an adapter exists, else the CPU).
   */
  backend?: Backend;
}

/** One optimizer step's figures (over its batch). */
export interface StepStats {
  epoch: number;
  step: number;
  stepsPerEpoch: number;
  loss: number;
  accuracy: number;
}

/** Loss and accuracy over some images. */
export interface Score {
  loss: number;
  accuracy: number;
  images: number;
}

/** One epoch's figures: training (running, over its steps), validation (after it). */
export interface EpochStats {
  epoch: number;
  train: Score;
  validation: Score;
  /** Wall time of the epoch, validation included. */
  seconds: number;
}

/** Training data: n × 784 floats in [0, 1] and n digits, or MNIST idx files (gzip or not). */
export type TrainData =
  | { images: Float32Array; labels: Uint8Array | ArrayLike<number> }
  | { imagesIdx: Uint8Array; labelsIdx: Uint8Array; /** Use the first `limit` images only. */ limit?: number };

export interface FitOptions {
  onStep?: (s: StepStats) => void;
  onEpoch?: (e: EpochStats) => void;
  /** Aborting stops training after the step under way and rejects with code `aborted` (the weights stay as trained so far). */
  signal?: AbortSignal;
  /** Milliseconds of training between looks at the worker's messages (default 30). */
  sliceMs?: number;
}

export interface FitResult {
  epochs: EpochStats[];
  /** Steps taken in this call. */
  steps: number;
  /** True when `stop()` ended the run early (`fit()` without data continues it). */
  stopped: boolean;
  /** All epochs of the run are done. */
  done: boolean;
  seconds: number;
}

export interface TrainerInfo {
  model: 'fc' | 'cnn';
  /** Bytes of the planned training graph (forward + backward + optimizer). */
  graphBytes: number;
  /** Where training runs and why; `placements`: where the training graph's nodes run (WebGPU). */
  backend: BackendInfo;
  /** The engine build in the worker (`simd`, `relaxed`, …) and its threads. */
  build: string;
  threads: number;
}

const ADAMW = { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8 };

function num(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw coded(`invalid argument: ${what} must be a finite number, got ${String(v)}`, 'invalid-argument');
  return v;
}

/** The engine's positional config from the options (defaults filled in, types checked). */
function coreArgs(o: TrainerOptions): [number, number, number, string, number, number, number, number, number, number, number] {
  const batch = num(o.batchSize ?? 1000, 'batchSize');
  const physical = num(o.physicalBatchSize ?? (o.batchSize === undefined ? 500 : batch), 'physicalBatchSize');
  const opt = o.optimizer ?? 'adamw';
  if (opt !== 'adamw' && opt !== 'sgd') throw coded(`invalid argument: optimizer must be 'adamw' or 'sgd', got '${String(opt)}'`, 'invalid-argument');
  return [
    num(o.epochs ?? 30, 'epochs'),
    batch,
    physical,
    opt,
    num(o.lr ?? ADAMW.lr, 'lr'),
    num(o.beta1 ?? ADAMW.beta1, 'beta1'),
    num(o.beta2 ?? ADAMW.beta2, 'beta2'),
    num(o.eps ?? ADAMW.eps, 'eps'),
    num(o.weightDecay ?? 0, 'weightDecay'),
    num(o.valSplit ?? 0.05, 'valSplit'),
    num(o.seed ?? 42, 'seed'),
  ];
}

/** Yield to the event loop without timer clamping (nested `setTimeout`s wait ≥ 4 ms). */
function yieldTask(): Promise<void> {
  if (typeof setImmediate === 'function') return new Promise((r) => setImmediate(r));
  return new Promise((r) => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => {
      ch.port1.close();
      r();
    };
    ch.port2.postMessage(0);
  });
}

/**
 * The trainer on the calling thread (what the worker runs; usable directly where blocking the
 * thread for a step at a time is fine, e.g. Node scripts). See {@link Trainer}.
 */
export class LocalTrainer {
  #core: TrainerCore | null;
  #stop = false;
  #running = false;
  readonly model: 'fc' | 'cnn';
  /** Where training runs and why (`placements`: the training graph's nodes per backend, on WebGPU). */
  readonly backendInfo: BackendInfo;

  private constructor(core: TrainerCore, info: BackendInfo) {
    this.#core = core;
    this.model = core.kind as 'fc' | 'cnn';
    this.backendInfo = info;
    if (info.backend === 'webgpu') info.placements = core.placements() as BackendInfo['placements'];
  }

  /** On WebGPU every call goes through the engine's async entry points (device reads are async). */
  get #gpu(): boolean {
    return this.backendInfo.backend === 'webgpu';
  }

  static async create(opts: TrainerOptions = {}): Promise<LocalTrainer> {
    const m = await engine();
    if (opts.backend !== undefined && opts.backend !== 'cpu' && opts.backend !== 'webgpu' && opts.backend !== 'auto') {
      throw coded(`invalid argument: backend must be 'cpu', 'webgpu' or 'auto', got '${String(opts.backend)}'`, 'invalid-argument');
    }
    const args = coreArgs(opts);
    let info: BackendInfo;
    try {
      info = await chooseBackend(opts.backend);
    } catch (e) {
      throw coded(toError(e).message, 'unsupported');
    }
    try {
      if (opts.resume !== undefined) {
        if (!(opts.resume instanceof Uint8Array)) throw coded('invalid argument: resume must be the bytes of a GGUF (Uint8Array)', 'invalid-argument');
        return new LocalTrainer(m.TrainerCore.fromGguf(opts.resume, ...args, info.backend), info);
      }
      const kind = opts.model ?? 'fc';
      return new LocalTrainer(new m.TrainerCore(kind, ...args, info.backend), info);
    } catch (e) {
      throw toError(e);
    }
  }

  #c(): TrainerCore {
    if (!this.#core) throw coded('this Trainer was disposed', 'invalid-argument');
    if (this.#running) throw coded('this Trainer is busy training (await fit or stop it first)', 'busy');
    return this.#core;
  }

  get info(): Omit<TrainerInfo, 'build' | 'threads'> {
    return { model: this.model, graphBytes: this.#get(() => this.#c().graphBytes), backend: this.backendInfo };
  }

  /** Optimizer steps per epoch on the data set last given (0 before). */
  get stepsPerEpoch(): number {
    return this.#get(() => this.#c().stepsPerEpoch);
  }

  /** A getter of the engine's (busy while an async call is in flight), its errors coded. */
  #get<T>(f: () => T): T {
    try {
      return f();
    } catch (e) {
      throw toError(e);
    }
  }

  /** Start a run on new data (epoch 0); the next `fit()` trains on it. */
  setData(data: TrainData): void {
    const core = this.#c();
    try {
      if (data && typeof data === 'object' && 'imagesIdx' in data) {
        if (!(data.imagesIdx instanceof Uint8Array) || !(data.labelsIdx instanceof Uint8Array)) {
          throw coded('invalid argument: imagesIdx and labelsIdx must be Uint8Arrays', 'invalid-argument');
        }
        const limit = data.limit === undefined ? undefined : num(data.limit, 'limit');
        if (limit !== undefined && !(Number.isInteger(limit) && limit >= 0 && limit <= 0xffffffff)) {
          throw coded(`invalid argument: limit must be a non-negative integer, got ${limit}`, 'invalid-argument');
        }
        core.setDataIdx(data.imagesIdx, data.labelsIdx, limit);
      } else if (data && typeof data === 'object' && 'images' in data) {
        if (!(data.images instanceof Float32Array)) throw coded('invalid argument: images must be a Float32Array (n × 784 in [0, 1])', 'invalid-argument');
        const labels = data.labels instanceof Uint8Array ? data.labels : Uint8Array.from(data.labels ?? []);
        core.setData(data.images, labels);
      } else {
        throw coded('invalid argument: data must be {images, labels} or {imagesIdx, labelsIdx}', 'invalid-argument');
      }
    } catch (e) {
      throw toError(e);
    }
  }

  /** Ask a running `fit` to end after the step under way (it resolves with `stopped: true`). */
  stop(): void {
    if (this.#running) this.#stop = true;
  }

  /**
   * Train (on `data` from epoch 0, or without it continuing the current run) until the run's
   * epochs are done or `stop()`: `onStep` after every optimizer step, `onEpoch` after every
   * epoch. Yields to the event loop every `sliceMs`.
   */
  async fit(data?: TrainData, opts: FitOptions = {}): Promise<FitResult> {
    if (data !== undefined) this.setData(data);
    const core = this.#c();
    if (this.stepsPerEpoch === 0) throw coded('no training data: give fit data, or call setData first', 'invalid-argument');
    const slice = num(opts.sliceMs ?? 30, 'sliceMs');
    this.#running = true;
    this.#stop = false;
    const t0 = performance.now();
    let epochStart = t0;
    const epochs: EpochStats[] = [];
    let steps = 0;
    let done = false;
    try {
      for (;;) {
        const s0 = performance.now();
        do {
          if (this.#stop || opts.signal?.aborted) break;
          let r: { steps: StepStats[]; epoch?: Omit<EpochStats, 'seconds'>; done: boolean };
          try {
            r = (this.#gpu ? await core.runStepsAsync(1) : core.runSteps(1)) as typeof r;
          } catch (e) {
            throw toError(e);
          }
          steps += r.steps.length;
          for (const s of r.steps) opts.onStep?.(s);
          if (r.epoch) {
            const now = performance.now();
            const e = { ...r.epoch, seconds: (now - epochStart) / 1000 };
            epochStart = now;
            epochs.push(e);
            opts.onEpoch?.(e);
          }
          done = r.done;
        } while (!done && performance.now() - s0 < slice);
        if (done || this.#stop) break;
        if (opts.signal?.aborted) throw coded('training aborted', 'aborted', {}, opts.signal.reason);
        await yieldTask();
      }
    } finally {
      this.#running = false;
    }
    return { epochs, steps, stopped: !done, done, seconds: (performance.now() - t0) / 1000 };
  }

  /**
   * Loss and accuracy of the current weights on `images` (n × 784 in [0, 1]) / `labels`. CPU
   * trainers only (WebGPU weights are read back asynchronously: use `evaluateAsync`).
   */
  evaluate(images: Float32Array, labels: Uint8Array | ArrayLike<number>): Score {
    const core = this.#c();
    if (!(images instanceof Float32Array)) throw coded('invalid argument: images must be a Float32Array', 'invalid-argument');
    if (this.#gpu) throw coded('evaluate needs a CPU trainer: this one trains on WebGPU (use evaluateAsync)', 'unsupported');
    try {
      return core.evaluate(images, labels instanceof Uint8Array ? labels : Uint8Array.from(labels)) as Score;
    } catch (e) {
      throw toError(e);
    }
  }

  /** `evaluate` on every backend (the forward pass runs on the CPU). */
  async evaluateAsync(images: Float32Array, labels: Uint8Array | ArrayLike<number>): Promise<Score> {
    const core = this.#c();
    if (!(images instanceof Float32Array)) throw coded('invalid argument: images must be a Float32Array', 'invalid-argument');
    try {
      return (await core.evaluateAsync(images, labels instanceof Uint8Array ? labels : Uint8Array.from(labels))) as Score;
    } catch (e) {
      throw toError(e);
    }
  }

  /**
   * The current weights as GGUF bytes in ggml's MNIST layout (`Mnist.load` and ggml's mnist-eval
   * read them). CPU trainers only (use `toGGUFAsync` on WebGPU).
   */
  toGGUF(): Uint8Array {
    const core = this.#c();
    if (this.#gpu) throw coded('toGGUF needs a CPU trainer: this one trains on WebGPU (use toGGUFAsync)', 'unsupported');
    try {
      return core.toGguf();
    } catch (e) {
      throw toError(e);
    }
  }

  /** `toGGUF` on every backend. */
  async toGGUFAsync(): Promise<Uint8Array> {
    const core = this.#c();
    try {
      return (await core.toGgufAsync()) as Uint8Array;
    } catch (e) {
      throw toError(e);
    }
  }

  dispose(): void {
    this.#core?.free();
    this.#core = null;
  }
}

// ---- the Worker-backed Trainer ----

/** What both kinds of worker can do (a Web Worker, or Node's worker_threads Worker). */
interface Port {
  post(msg: unknown, transfer?: Transferable[]): void;
  terminate(): void;
  /** Node: let the process exit while nothing is pending. */
  hold(on: boolean): void;
}

interface Pending {
  resolve: (v: any) => void;
  reject: (e: Error) => void;
  onEvent?: (m: any) => void;
}

export interface TrainerCreateOptions extends TrainerOptions {
  /** `init` options of the worker's engine (default `{ threads: false }`: a single-thread build). */
  engine?: InitOptions;
  /** A Worker started on `train-worker.js` (browsers; default: one made here). */
  worker?: Worker;
}

/**
 * An MNIST trainer in a dedicated worker: every call is a Promise answered by the worker, and
 * the step and epoch callbacks of `fit` fire here as the worker reports them.
 */
export class Trainer {
  #port: Port;
  #next = 1;
  #pending = new Map<number, Pending>();
  #fitId = 0;
  #dead: GgwebError | null = null;
  info!: TrainerInfo;

  private constructor(port: Port) {
    this.#port = port;
  }

  #onMessage(m: any): void {
    const p = this.#pending.get(m.id);
    if (!p) return;
    if ('error' in m) {
      this.#pending.delete(m.id);
      this.#hold();
      p.reject(coded(m.error.message, m.error.code ?? 'internal'));
    } else if ('value' in m) {
      this.#pending.delete(m.id);
      this.#hold();
      p.resolve(m.value);
    } else p.onEvent?.(m);
  }

  #onError(message: string): void {
    this.#dead = coded(`training worker error: ${message}`, 'internal');
    for (const p of this.#pending.values()) p.reject(this.#dead);
    this.#pending.clear();
    this.#hold();
  }

  #hold(): void {
    this.#port.hold(this.#pending.size > 0);
  }

  #send(op: string, args: unknown[], onEvent?: (m: any) => void, transfer: Transferable[] = []): { id: number; done: Promise<any> } {
    const id = this.#next++;
    if (this.#dead) return { id, done: Promise.reject(this.#dead) };
    const done = new Promise<any>((resolve, reject) => this.#pending.set(id, { resolve, reject, onEvent }));
    this.#hold();
    this.#port.post({ id, op, args }, transfer);
    return { id, done };
  }

  /** Start a worker and make the model there (random initialisation, or `resume`'s weights). */
  static async create(opts: TrainerCreateOptions = {}): Promise<Trainer> {
    const { engine: engineOpts, worker, ...rest } = opts;
    const t = new Trainer(await startWorker(worker, (m) => t.#onMessage(m), (e) => t.#onError(e)));
    try {
      t.info = await t.#send('create', [rest, engineOpts ?? { threads: false }]).done;
      return t;
    } catch (e) {
      t.#port.terminate();
      throw e;
    }
  }

  /** Where training runs and why (`info.backend`). */
  get backendInfo(): BackendInfo {
    return this.info.backend;
  }

  /** Start a run on new data (epoch 0) without training yet. */
  setData(data: TrainData): Promise<{ stepsPerEpoch: number }> {
    return this.#send('setData', [data]).done;
  }

  /**
   * Train in the worker (on `data` from epoch 0, or without it continuing the current run).
   * Resolves when the run's epochs are done or after `stop()` (`stopped: true`); rejects with
   * `aborted` when `opts.signal` fires (the weights stay as trained so far).
   */
  async fit(data?: TrainData, opts: FitOptions = {}): Promise<FitResult> {
    opts.signal?.throwIfAborted();
    const { done, id } = this.#send('fit', [data, { sliceMs: opts.sliceMs }], (m) => {
      if (m.steps) for (const s of m.steps as StepStats[]) opts.onStep?.(s);
      if (m.epoch) opts.onEpoch?.(m.epoch as EpochStats);
    });
    this.#fitId = id;
    const onAbort = () => this.#port.post({ id: 0, op: 'stop', args: [] });
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const r = (await done) as FitResult;
      if (opts.signal?.aborted) throw coded('training aborted', 'aborted', {}, opts.signal.reason);
      return r;
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
      if (this.#fitId === id) this.#fitId = 0;
    }
  }

  /** End a running `fit` after the step under way (it resolves with `stopped: true`). */
  stop(): void {
    if (this.#fitId) this.#port.post({ id: 0, op: 'stop', args: [] });
  }

  /** Loss and accuracy of the current weights (n × 784 floats in [0, 1], n digits). */
  evaluate(images: Float32Array, labels: Uint8Array | ArrayLike<number>): Promise<Score> {
    return this.#send('evaluate', [images, labels instanceof Uint8Array ? labels : Uint8Array.from(labels)]).done;
  }

  /** The trained weights as GGUF bytes (ggml's MNIST layout: `Mnist.load(bytes)` reads them). */
  toGGUF(): Promise<Uint8Array> {
    return this.#send('toGGUF', []).done;
  }

  /** Free the model and end the worker. */
  async dispose(): Promise<void> {
    try {
      if (!this.#dead) await this.#send('dispose', []).done;
    } catch {
      // The worker ends below either way.
    } finally {
      this.#port.terminate();
      this.#dead = coded('this Trainer was disposed', 'invalid-argument');
    }
  }
}

async function startWorker(given: Worker | undefined, onMessage: (m: any) => void, onError: (e: string) => void): Promise<Port> {
  const url = new URL('./train-worker.js', import.meta.url);
  if (isNode && !given) {
    const { Worker } = await nodeImport<typeof import('node:worker_threads')>('worker_threads');
    const w = new Worker(url);
    w.on('message', onMessage);
    w.on('error', (e) => onError(e instanceof Error ? e.message : String(e)));
    w.on('exit', (code) => code !== 0 && onError(`exited with code ${code}`));
    return {
      post: (m, transfer) => w.postMessage(m, transfer as any),
      terminate: () => {
        w.removeAllListeners('exit');
        void w.terminate();
      },
      hold: (on) => (on ? w.ref() : w.unref()),
    };
  }
  const w = given ?? new Worker(url, { type: 'module', name: 'ggweb-train' });
  w.onmessage = (ev) => onMessage(ev.data);
  w.onerror = (ev) => onError(ev.message || 'failed to start');
  return { post: (m, transfer) => w.postMessage(m, transfer ?? []), terminate: () => w.terminate(), hold: () => {} };
}
