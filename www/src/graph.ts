/**
 * Tensors and graphs from JavaScript, ggml style: describe tensors, combine them with ops (nothing
 * runs yet), then `compute` the outputs you want and `read` them.
 *
 * ```ts
 * const g = await Graph.create();
 * const a = g.tensor('f32', [4, 3]).set(new Float32Array(12).fill(1));
 * const b = g.tensor('f32', [4, 3]).set(new Float32Array(12).fill(2));
 * const c = g.add(a, b).relu();
 * await g.compute(c);
 * console.log(await c.read()); // Float32Array(12) [3, 3, …]
 * ```
 *
 * Shapes are ggml's: `shape[0]` is the contiguous (innermost) dimension, up to 4 dims. Matrix
 * products follow `ggml_mul_mat`: `a: [k, m]`, `b: [k, n]` → `[m, n]` (both rows-of-k).
 *
 * `Graph.create({ backend: 'webgpu' | 'auto' })` computes on WebGPU, with the CPU for the ops
 * WebGPU lacks (the scheduler splits the graph and copies between them); `graph.backendInfo`
 * says what runs, why, and after each compute where every node ran.
 */
import { engine, engineSync } from './wasm.js';
import { GGUF, loadGGUF, type LoadGGUFOptions } from './gguf.js';
import type { Source } from './source.js';
import { coded, toError } from './env.js';
import { chooseBackend, type Backend, type BackendInfo } from './backend.js';
import type { GraphCore } from '../wasm/simd/ggweb.js';

export interface GraphOptions {
  /**
   * `cpu` (default), `webgpu` (rejects when WebGPU is unavailable) or `auto` (WebGPU when an
   * adapter exists). On WebGPU, `compute` and `read` are asynchronous only (the `*Sync` forms
   * throw).
   */
  backend?: Backend;
}

/** Element types a tensor can have (quantized types hold weights; results are f32). */
export type DType =
  | 'f32' | 'f16' | 'bf16' | 'i32' | 'i16' | 'i8'
  | 'q4_0' | 'q4_1' | 'q5_0' | 'q5_1' | 'q8_0'
  | 'q2_K' | 'q3_K' | 'q4_K' | 'q5_K' | 'q6_K';

export type Shape = readonly number[];

export interface TensorInfo {
  type: DType;
  shape: number[];
  /** Byte strides per dimension. */
  strides: number[];
  name: string;
  /** The op that produces it (`none` for leaves). */
  op: string;
  contiguous: boolean;
}

type Data = Float32Array | Int32Array | Uint8Array | ArrayLike<number>;

/** A tensor of a {@link Graph}. Ops return new tensors; nothing runs until `graph.compute`. */
export class Tensor {
  /** @internal */
  constructor(readonly graph: Graph, readonly id: number) {}

  /** Type, shape, strides, name and op. */
  get info(): TensorInfo {
    return this.graph._core().info(this.id) as TensorInfo;
  }
  get shape(): number[] {
    return this.info.shape;
  }
  get type(): DType {
    return this.info.type;
  }
  get name(): string {
    return this.info.name;
  }
  /** Number of elements. */
  get size(): number {
    return this.shape.reduce((a, b) => a * b, 1);
  }

  /** Name the tensor (≤ 63 bytes); returns `this`. */
  setName(name: string): this {
    this.graph._core().setName(this.id, name);
    return this;
  }

  /**
   * Write values: a `Float32Array` (converted to the tensor's type, quantizing if needed), an
   * `Int32Array` for i32 tensors, or raw bytes (`Uint8Array`) in the tensor's own layout.
   */
  set(data: Data): this {
    const core = this.graph._core();
    if (data instanceof Int32Array) core.setI32(this.id, data);
    else if (data instanceof Uint8Array) core.setBytes(this.id, data);
    else if (data instanceof Float32Array) core.setF32(this.id, data);
    else if (this.type === 'i32') core.setI32(this.id, Int32Array.from(data));
    else core.setF32(this.id, Float32Array.from(data));
    return this;
  }

  /** The values as f32 (dequantized); views are read through their strides. Compute first. */
  async read(): Promise<Float32Array> {
    if (!this.graph._gpu()) return this.readSync();
    return this.graph._queued((c) => c.readF32Async(this.id) as Promise<Float32Array>);
  }
  /** Synchronous `read` (CPU graphs, and tensors set from JS on WebGPU graphs). */
  readSync(): Float32Array {
    try {
      return this.graph._core().readF32(this.id);
    } catch (e) {
      throw toError(e);
    }
  }
  /** The values of an i32 tensor. */
  async readI32(): Promise<Int32Array> {
    if (!this.graph._gpu()) return this.graph._core().readI32(this.id);
    return this.graph._queued((c) => c.readI32Async(this.id) as Promise<Int32Array>);
  }

  // ---- training ----
  /** Mark this (an f32 tensor made by `graph.tensor`) as a trainable parameter; returns `this`. */
  setParam(): this {
    this.graph.setParam(this);
    return this;
  }
  /** This is the loss: build the backward pass (see {@link Graph.backward}). */
  backward(): void {
    this.graph.backward(this);
  }
  /** d(loss)/d(this) after `backward` (compute it like any tensor); `null` when the loss does not depend on it. */
  get grad(): Tensor | null {
    return this.graph.grad(this);
  }

  // ---- ops (see Graph for documentation) ----
  add(b: Tensor): Tensor { return this.graph.add(this, b); }
  sub(b: Tensor): Tensor { return this.graph.sub(this, b); }
  mul(b: Tensor): Tensor { return this.graph.mul(this, b); }
  div(b: Tensor): Tensor { return this.graph.div(this, b); }
  scale(s: number, bias = 0): Tensor { return this.graph.scale(this, s, bias); }
  mulMat(b: Tensor): Tensor { return this.graph.mulMat(this, b); }
  relu(): Tensor { return this.graph.relu(this); }
  gelu(): Tensor { return this.graph.gelu(this); }
  silu(): Tensor { return this.graph.silu(this); }
  tanh(): Tensor { return this.graph.tanh(this); }
  sigmoid(): Tensor { return this.graph.sigmoid(this); }
  exp(): Tensor { return this.graph.exp(this); }
  neg(): Tensor { return this.graph.neg(this); }
  abs(): Tensor { return this.graph.abs(this); }
  sqr(): Tensor { return this.graph.sqr(this); }
  sqrt(): Tensor { return this.graph.sqrt(this); }
  log(): Tensor { return this.graph.log(this); }
  sum(): Tensor { return this.graph.sum(this); }
  sumRows(): Tensor { return this.graph.sumRows(this); }
  mean(): Tensor { return this.graph.mean(this); }
  argmax(): Tensor { return this.graph.argmax(this); }
  softMax(opts?: SoftMaxOptions): Tensor { return this.graph.softMax(this, opts); }
  rmsNorm(eps?: number): Tensor { return this.graph.rmsNorm(this, eps); }
  norm(eps?: number): Tensor { return this.graph.norm(this, eps); }
  reshape(...shape: number[]): Tensor { return this.graph.reshape(this, shape); }
  view(shape: Shape, strides: Shape, offset = 0): Tensor { return this.graph.view(this, shape, strides, offset); }
  permute(a0: number, a1: number, a2 = 2, a3 = 3): Tensor { return this.graph.permute(this, [a0, a1, a2, a3]); }
  transpose(): Tensor { return this.graph.transpose(this); }
  cont(): Tensor { return this.graph.cont(this); }
  getRows(rows: Tensor): Tensor { return this.graph.getRows(this, rows); }
  repeat(like: Tensor): Tensor { return this.graph.repeat(this, like); }
  cast(type: DType): Tensor { return this.graph.cast(this, type); }
  crossEntropyLoss(labels: Tensor): Tensor { return this.graph.crossEntropyLoss(this, labels); }
}

/** Hyper-parameters of {@link Graph.optimizer} (AdamW: ggml-opt's semantics, with bias correction). */
export interface OptimizerOptions {
  /** `adamw` (default) or `sgd`. */
  type?: 'adamw' | 'sgd';
  /** Learning rate (default 1e-3). */
  lr?: number;
  /** AdamW (defaults 0.9, 0.999, 1e-8). */
  beta1?: number;
  beta2?: number;
  eps?: number;
  /** Weight decay (default 0; AdamW's is decoupled: `p *= 1 - lr * wd`). */
  weightDecay?: number;
}

/**
 * Optimizer steps as graph ops (`OPT_STEP_ADAMW` / `OPT_STEP_SGD`, one per parameter, updating it
 * in place), made by {@link Graph.optimizer} after `backward`. Each `step` computes the forward
 * pass, every gradient, then the updates.
 */
export class Optimizer {
  readonly type: 'adamw' | 'sgd';
  /** Steps taken (AdamW's t). */
  steps = 0;
  readonly #g: Graph;
  readonly #grads: Tensor[];
  readonly #nodes: Tensor[];
  readonly #hp: Tensor;
  readonly #o: Required<OptimizerOptions>;

  /** @internal */
  constructor(g: Graph, params: Tensor[], opts: OptimizerOptions) {
    const type = opts.type ?? 'adamw';
    if (type !== 'adamw' && type !== 'sgd') throw coded(`invalid argument: optimizer type must be 'adamw' or 'sgd', got '${String(type)}'`, 'invalid-argument');
    const o = { type, lr: opts.lr ?? 1e-3, beta1: opts.beta1 ?? 0.9, beta2: opts.beta2 ?? 0.999, eps: opts.eps ?? 1e-8, weightDecay: opts.weightDecay ?? 0 };
    const ok = (x: number, lo: number, hi: number) => typeof x === 'number' && Number.isFinite(x) && x >= lo && x < hi;
    if (!ok(o.lr, Number.MIN_VALUE, Infinity) || !ok(o.beta1, 0, 1) || !ok(o.beta2, 0, 1) || !ok(o.eps, 0, Infinity) || !ok(o.weightDecay, 0, Infinity)) {
      throw coded(`invalid argument: bad optimizer settings ${JSON.stringify(o)}`, 'invalid-argument');
    }
    if (params.length === 0) throw coded('invalid argument: the optimizer needs at least one parameter', 'invalid-argument');
    // The updates write the parameters in place, which the WebGPU scheduler's copies do not carry back yet.
    if (g._gpu()) throw coded('optimizer steps on a WebGPU graph are not supported yet: use a CPU graph', 'unsupported');
    this.type = type;
    this.#o = o;
    this.#g = g;
    this.#hp = g.tensor('f32', [type === 'adamw' ? 7 : 2]).setName('opt.hparams');
    this.#grads = [];
    this.#nodes = [];
    for (const p of params) {
      const grad = p instanceof Tensor && p.graph === g ? p.grad : null;
      if (!grad) throw coded(`invalid argument: tensor '${p?.name ?? p}' has no gradient (mark it with setParam before backward)`, 'invalid-argument');
      this.#grads.push(grad);
      if (type === 'adamw') {
        const state = g.tensor('f32', [p.size, 2]).setName(`opt.state.${p.id}`);
        this.#nodes.push(g._opOf('opt_step_adamw', [p, grad, state, this.#hp]));
      } else {
        this.#nodes.push(g._opOf('opt_step_sgd', [p, grad, this.#hp]));
      }
    }
  }

  #setHparams(): void {
    const t = this.steps + 1;
    const o = this.#o;
    this.#hp.set(
      o.type === 'adamw'
        ? [o.lr, o.beta1, o.beta2, o.eps, o.weightDecay, 1 / (1 - o.beta1 ** t), 1 / (1 - o.beta2 ** t)]
        : [o.lr, o.weightDecay],
    );
  }

  /**
   * One step: computes `also` (e.g. the loss, with the parameters before the update), every
   * gradient, then updates every parameter.
   */
  async step(...also: Tensor[]): Promise<void> {
    this.#setHparams();
    // The gradients before any update: an update in place must not feed another gradient.
    await this.#g.compute(...also, ...this.#grads, ...this.#nodes);
    this.steps++;
  }
  /** Synchronous `step` (CPU graphs). */
  stepSync(...also: Tensor[]): void {
    this.#setHparams();
    this.#g.computeSync(...also, ...this.#grads, ...this.#nodes);
    this.steps++;
  }
}

export interface SoftMaxOptions {
  /** Added to the scaled input before the softmax (e.g. a causal mask), broadcast over rows. */
  mask?: Tensor;
  /** Multiplies the input first (default 1). */
  scale?: number;
  /** ALiBi max bias (default 0). */
  maxBias?: number;
}

const CPU_INFO: BackendInfo = { requested: 'cpu', backend: 'cpu', adapter: null, f16: false, reason: 'the CPU was requested' };

/** A tensor graph on the CPU (wasm) or on WebGPU with the CPU for what WebGPU lacks. */
export class Graph {
  #core: GraphCore | null;
  #queue: Promise<unknown> = Promise.resolve();
  /** Where the graph computes and why; `placements` is filled in after each WebGPU compute. */
  readonly backendInfo: BackendInfo;

  /** A CPU graph. Needs the engine loaded: `await init()` first, or use {@link Graph.create}. */
  constructor(info: BackendInfo = CPU_INFO) {
    const m = engineSync();
    try {
      this.#core = new m.GraphCore(info.backend);
    } catch (e) {
      throw toError(e);
    }
    this.backendInfo = { ...info };
  }

  /**
   * Load the engine if needed and make a graph on `opts.backend` (default `cpu`; `webgpu`
   * rejects without WebGPU, `auto` falls back to the CPU with the reason).
   */
  static async create(opts: GraphOptions = {}): Promise<Graph> {
    await engine();
    const info = await chooseBackend(opts.backend);
    const g = new Graph(info);
    if (info.backend === 'webgpu') g.backendInfo.reason = `${info.reason}: ${g._core().backendReport}`;
    return g;
  }

  /** @internal */
  _core(): GraphCore {
    if (!this.#core) throw coded('this Graph was freed', 'invalid-argument');
    return this.#core;
  }

  /** @internal True when computes run on WebGPU (async only). */
  _gpu(): boolean {
    return this.backendInfo.backend === 'webgpu';
  }

  /**
   * @internal Run an async engine call after the ones before it: a WebGPU call in flight holds
   * the graph, and one started meanwhile would find it busy.
   */
  _queued<T>(f: (c: GraphCore) => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      try {
        return await f(this._core());
      } catch (e) {
        throw toError(e);
      }
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => {});
    return p;
  }

  #op(name: string, srcs: Tensor[], params: number[] = []): Tensor {
    for (const s of srcs) {
      if (!(s instanceof Tensor) || s.graph !== this) {
        throw coded(`${name}: every source must be a Tensor of this graph`, 'invalid-argument');
      }
    }
    const id = this._core().op(name, Uint32Array.from(srcs.map((s) => s.id)), Float64Array.from(params));
    return new Tensor(this, id);
  }

  /** @internal An op node (for the optimizer). */
  _opOf(name: string, srcs: Tensor[], params: number[] = []): Tensor {
    return this.#op(name, srcs, params);
  }

  // ---- training ----
  /** Mark `t` (an f32 tensor made by `tensor`, not an op result) as a trainable parameter. */
  setParam(t: Tensor): void {
    this.#own(t, 'setParam');
    try {
      this._core().setParam(t.id);
    } catch (e) {
      throw toError(e);
    }
  }
  /** A new f32 parameter tensor (zero-filled, or `data`). */
  param(shape: Shape, data?: Data): Tensor {
    return this.tensor('f32', shape, data).setParam();
  }
  /**
   * Build the backward pass of `loss` (a one-element f32 tensor, e.g. `mean`, `sum` or
   * `crossEntropyLoss`): afterwards `p.grad` is d(loss)/d(p) for every parameter the loss
   * depends on. A path through an op without a backward is an error naming it (`unsupported`).
   */
  backward(loss: Tensor): void {
    this.#own(loss, 'backward');
    try {
      this._core().backward(loss.id);
    } catch (e) {
      throw toError(e);
    }
  }
  /** The gradient of parameter `t` from the last `backward`, or `null`. */
  grad(t: Tensor): Tensor | null {
    this.#own(t, 'grad');
    const id = this._core().grad(t.id);
    return id === undefined || id === null ? null : new Tensor(this, id);
  }
  /** An optimizer over `params` (after `backward`): `await opt.step(loss)` per training step. */
  optimizer(params: Tensor[], opts: OptimizerOptions = {}): Optimizer {
    return new Optimizer(this, params, opts);
  }
  /** Cross-entropy of softmax(logits) against `labels` (probabilities, same shape), averaged over rows → [1]. */
  crossEntropyLoss(logits: Tensor, labels: Tensor): Tensor { return this.#op('cross_entropy_loss', [logits, labels]); }

  #own(t: Tensor, what: string): void {
    if (!(t instanceof Tensor) || t.graph !== this) throw coded(`${what}: the tensor must be a Tensor of this graph`, 'invalid-argument');
  }

  /** A new tensor (zero-filled), optionally with data. */
  tensor(type: DType, shape: Shape, data?: Data): Tensor {
    if (!Array.isArray(shape) || shape.length < 1 || shape.length > 4) {
      throw coded(`shape error: a tensor has 1 to 4 dimensions, got ${JSON.stringify(shape)}`, 'shape');
    }
    for (const n of shape) {
      if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw coded(`shape error: invalid dimension ${n}`, 'shape');
    }
    const t = new Tensor(this, this._core().tensor(type, Uint32Array.from(shape)));
    if (data !== undefined) t.set(data);
    return t;
  }

  /** An f32 tensor holding `data` (shape defaults to `[data.length]`). */
  fromArray(data: Float32Array | ArrayLike<number>, shape: Shape = [data.length]): Tensor {
    return this.tensor('f32', shape, data);
  }

  /**
   * Add every tensor of a GGUF (a loaded {@link GGUF} or any source, which is then loaded) as
   * weights; returns them by name. The file's bytes are used in place in wasm memory.
   */
  async weights(source: GGUF | Source, opts: LoadGGUFOptions = {}): Promise<Record<string, Tensor>> {
    const gguf = await loadGGUF(source, opts);
    const stream = gguf._take();
    try {
      const ids = this._core().weights(stream) as Record<string, number>;
      const out: Record<string, Tensor> = {};
      for (const [k, id] of Object.entries(ids)) out[k] = new Tensor(this, id);
      return out;
    } catch (e) {
      throw toError(e);
    } finally {
      stream.free();
    }
  }

  /**
   * Compute the given tensors and everything they depend on. On WebGPU, `backendInfo.placements`
   * then says where each node ran (and why any ran on the CPU). Every computed tensor stays
   * readable; computing again after `set` recomputes with the new values.
   */
  async compute(...outputs: Tensor[]): Promise<void> {
    if (!this._gpu()) return this.computeSync(...outputs);
    const ids = this.#ids(outputs);
    await this._queued(async (c) => {
      await c.computeAsync(ids);
      this.backendInfo.placements = c.placements() as BackendInfo['placements'];
    });
  }
  /** Synchronous `compute` (CPU graphs only: WebGPU results are read back asynchronously). */
  computeSync(...outputs: Tensor[]): void {
    const ids = this.#ids(outputs);
    try {
      this._core().compute(ids);
    } catch (e) {
      throw toError(e);
    }
  }

  #ids(outputs: Tensor[]): Uint32Array {
    if (outputs.length === 0) throw coded('compute: give at least one output tensor', 'invalid-argument');
    for (const t of outputs) if (!(t instanceof Tensor) || t.graph !== this) throw coded('compute: tensor of another graph', 'invalid-argument');
    return Uint32Array.from(outputs.map((t) => t.id));
  }

  /** Free the wasm memory of this graph (its tensors become unusable). */
  free(): void {
    this.#core?.free();
    this.#core = null;
  }

  // ---- elementwise (b is broadcast to a's shape when it divides it) ----
  /** a + b */
  add(a: Tensor, b: Tensor): Tensor { return this.#op('add', [a, b]); }
  /** a - b */
  sub(a: Tensor, b: Tensor): Tensor { return this.#op('sub', [a, b]); }
  /** a * b (elementwise) */
  mul(a: Tensor, b: Tensor): Tensor { return this.#op('mul', [a, b]); }
  /** a / b */
  div(a: Tensor, b: Tensor): Tensor { return this.#op('div', [a, b]); }
  /** a * s + bias */
  scale(a: Tensor, s: number, bias = 0): Tensor { return this.#op('scale', [a], [s, bias]); }
  relu(a: Tensor): Tensor { return this.#op('relu', [a]); }
  /** GELU, tanh approximation (ggml_gelu). */
  gelu(a: Tensor): Tensor { return this.#op('gelu', [a]); }
  silu(a: Tensor): Tensor { return this.#op('silu', [a]); }
  tanh(a: Tensor): Tensor { return this.#op('tanh', [a]); }
  sigmoid(a: Tensor): Tensor { return this.#op('sigmoid', [a]); }
  exp(a: Tensor): Tensor { return this.#op('exp', [a]); }
  neg(a: Tensor): Tensor { return this.#op('neg', [a]); }
  abs(a: Tensor): Tensor { return this.#op('abs', [a]); }
  sqr(a: Tensor): Tensor { return this.#op('sqr', [a]); }
  sqrt(a: Tensor): Tensor { return this.#op('sqrt', [a]); }
  log(a: Tensor): Tensor { return this.#op('log', [a]); }

  // ---- reductions ----
  /** Sum of all elements → [1]. */
  sum(a: Tensor): Tensor { return this.#op('sum', [a]); }
  /** Sum of each row → [1, ne1, ne2, ne3]. */
  sumRows(a: Tensor): Tensor { return this.#op('sum_rows', [a]); }
  /** Mean of each row → [1, ne1, ne2, ne3]. */
  mean(a: Tensor): Tensor { return this.#op('mean', [a]); }
  /** Index of the maximum of each row (i32) → [ne1]. */
  argmax(a: Tensor): Tensor { return this.#op('argmax', [a]); }

  // ---- normalisation ----
  /** softmax over rows of (a * scale + mask). */
  softMax(a: Tensor, opts: SoftMaxOptions = {}): Tensor {
    const srcs = opts.mask ? [a, opts.mask] : [a];
    return this.#op('soft_max', srcs, [opts.scale ?? 1, opts.maxBias ?? 0]);
  }
  /** x / sqrt(mean(x²) + eps) over rows. */
  rmsNorm(a: Tensor, eps = 1e-6): Tensor { return this.#op('rms_norm', [a], [eps]); }
  /** (x - mean) / sqrt(var + eps) over rows. */
  norm(a: Tensor, eps = 1e-5): Tensor { return this.#op('norm', [a], [eps]); }

  // ---- linear algebra ----
  /** ggml_mul_mat: a [k, m, …], b [k, n, …] → [m, n, …] (each result = dot of rows). */
  mulMat(a: Tensor, b: Tensor): Tensor { return this.#op('mul_mat', [a, b]); }
  /** Rows of `a` picked by the i32 indices in `rows` (embedding lookup). */
  getRows(a: Tensor, rows: Tensor): Tensor { return this.#op('get_rows', [a, rows]); }
  /** `a` and `b` joined along `dim`. */
  concat(a: Tensor, b: Tensor, dim: number): Tensor { return this.#op('concat', [a, b], [dim]); }
  /**
   * 2D convolution (ggml_conv_2d): kernel [KW, KH, IC, OC], input [W, H, IC, N] → [OW, OH, OC, N].
   */
  conv2d(kernel: Tensor, input: Tensor, opts: { stride?: [number, number]; padding?: [number, number]; dilation?: [number, number] } = {}): Tensor {
    const [s0, s1] = opts.stride ?? [1, 1], [p0, p1] = opts.padding ?? [0, 0], [d0, d1] = opts.dilation ?? [1, 1];
    return this.#op('conv_2d', [kernel, input], [s0, s1, p0, p1, d0, d1]);
  }
  /** 2D pooling over dims 0-1 (ggml_pool_2d). */
  pool2d(a: Tensor, op: 'max' | 'avg', kernel: [number, number], opts: { stride?: [number, number]; padding?: [number, number] } = {}): Tensor {
    const [s0, s1] = opts.stride ?? kernel, [p0, p1] = opts.padding ?? [0, 0];
    return this.#op('pool_2d', [a], [op === 'max' ? 0 : 1, kernel[0], kernel[1], s0, s1, p0, p1]);
  }
  /** GELU, exact erf form. */
  geluErf(a: Tensor): Tensor { return this.#op('gelu_erf', [a]); }
  /** `a` repeated (tiled) to the shape of `like`. */
  repeat(a: Tensor, like: Tensor): Tensor { return this.#op('repeat', [a, like]); }

  // ---- views and layout ----
  /** Same data, new shape (a must be contiguous). */
  reshape(a: Tensor, shape: Shape): Tensor { return this.#op('reshape', [a], [...shape]); }
  /** A view: `shape`, byte `strides` of dims 1.. (length shape.length - 1), byte `offset`. */
  view(a: Tensor, shape: Shape, strides: Shape, offset = 0): Tensor {
    return this.#op('view', [a], [shape.length, ...shape, ...strides, offset]);
  }
  /** Axis i of `a` becomes axis `axes[i]` (ggml_permute). */
  permute(a: Tensor, axes: readonly [number, number, number, number]): Tensor {
    return this.#op('permute', [a], [...axes]);
  }
  /** Swap the first two axes (a view). */
  transpose(a: Tensor): Tensor { return this.#op('transpose', [a]); }
  /** A contiguous copy. */
  cont(a: Tensor): Tensor { return this.#op('cont', [a]); }
  /** A contiguous copy converted to `type`. */
  cast(a: Tensor, type: DType): Tensor { return this.#op('cast', [a], [typeId(type)]); }
  /** Copy `a` into `b` (converting); the result is `b` after compute. */
  cpy(a: Tensor, b: Tensor): Tensor { return this.#op('cpy', [a, b]); }
}

const TYPE_IDS: Record<DType, number> = {
  f32: 0, f16: 1, q4_0: 2, q4_1: 3, q5_0: 6, q5_1: 7, q8_0: 8, q2_K: 10, q3_K: 11, q4_K: 12, q5_K: 13, q6_K: 14,
  i8: 24, i16: 25, i32: 26, bf16: 30,
};
function typeId(t: DType): number {
  const id = TYPE_IDS[t];
  if (id === undefined) throw coded(`unknown tensor type '${t}'`, 'unsupported');
  return id;
}
