/**
 * MNIST digit classification with ggml's `mnist-fc` / `mnist-cnn` GGUF models, plus the helpers
 * a page needs: MNIST-style preprocessing of a drawing, idx file parsing, the test set loader.
 */
import { engine } from './wasm.js';
import { GGUF, loadGGUF, type LoadGGUFOptions } from './gguf.js';
import { readAll, type LoadOptions, type Source } from './source.js';
import { coded, tick, toError } from './env.js';
import { chooseBackend, type Backend, type BackendInfo } from './backend.js';
import type { MnistCore } from '../wasm/simd/ggweb.js';

export interface MnistLoadOptions extends LoadGGUFOptions {
  /**
   * `cpu` (default), `webgpu` (rejects when WebGPU is unavailable) or `auto` (WebGPU when an
   * adapter exists). `mnist.backendInfo` says what runs and why.
   */
  backend?: Backend;
  /**
   * Run a few small batches at load (default true on the CPU): V8 first runs wasm in its
   * baseline tier and optimizes a function only for later calls, so without it a page's first
   * evaluation ran several times slower than the rest.
   */
  warmUp?: boolean;
}

export const MNIST_PIXELS = 784;
export const MNIST_CLASSES = 10;
// Two batches of the size `evaluate` uses: the first also sizes the graph buffers for it.
const WARM_UP_BATCH = 500;
const WARM_UP_RUNS = 2;

export interface Prediction {
  /** The most probable digit. */
  label: number;
  /** Softmax probabilities of the ten digits. */
  probabilities: Float32Array;
  /** The raw logits. */
  logits: Float32Array;
}

export interface EvaluateOptions {
  /** Called after each batch with the images done so far and the accuracy so far. */
  onProgress?: (p: { done: number; total: number; correct: number }) => void;
  /** Images per forward pass (default 500). */
  batchSize?: number;
  signal?: AbortSignal;
}

export interface Evaluation {
  accuracy: number;
  correct: number;
  total: number;
  seconds: number;
  imagesPerSecond: number;
}

/** Pixels as 784 floats in [0, 1], or a 28×28 `ImageData` (grayscale from luminance × alpha). */
export type Pixels = Float32Array | ImageData;

/** A loaded MNIST model (fully connected or convolutional, from the GGUF's architecture). */
export class Mnist {
  #core: MnistCore | null;
  #queue: Promise<unknown> = Promise.resolve();
  /** `fc` or `cnn`. */
  readonly kind: 'fc' | 'cnn';
  /** Where the model runs and why; `placements` is filled in after each WebGPU computation. */
  readonly backendInfo: BackendInfo;

  private constructor(core: MnistCore, info: BackendInfo) {
    this.#core = core;
    this.kind = core.kind as 'fc' | 'cnn';
    this.backendInfo = info;
  }

  /** Load `mnist-fc-f32.gguf` or `mnist-cnn-f32.gguf` from a URL, path, Blob, bytes or a GGUF. */
  static async load(source: Source | GGUF, opts: MnistLoadOptions = {}): Promise<Mnist> {
    const m = await engine();
    const info = await chooseBackend(opts.backend);
    const gguf = await loadGGUF(source, { ...opts, headerOnly: false });
    const stream = gguf._take();
    let model: Mnist;
    try {
      model = new Mnist(m.MnistCore.load(stream, info.backend), info);
    } catch (e) {
      throw toError(e);
    } finally {
      stream.free();
    }
    if (info.backend === 'cpu' && opts.warmUp !== false) await model.#warmUp();
    return model;
  }

  /** Small batches of blank images, yielding between them so the optimizing tier can finish. */
  async #warmUp(): Promise<void> {
    const x = new Float32Array(WARM_UP_BATCH * MNIST_PIXELS);
    for (let i = 0; i < WARM_UP_RUNS; i++) {
      this.logitsSync(x);
      await tick();
    }
  }

  #c(): MnistCore {
    if (!this.#core) throw coded('this Mnist model was freed', 'invalid-argument');
    return this.#core;
  }

  /** Logits (n × 10) of `n` images given as n × 784 floats in [0, 1]. Calls run one at a time. */
  async logits(images: Float32Array): Promise<Float32Array> {
    if (!(images instanceof Float32Array)) throw coded('invalid argument: images must be a Float32Array', 'invalid-argument');
    if (this.backendInfo.backend === 'cpu') return this.logitsSync(images);
    const run = async (): Promise<Float32Array> => {
      const core = this.#c();
      try {
        const out = (await core.predictBatchAsync(images)) as Float32Array;
        this.backendInfo.placements = core.placements() as BackendInfo['placements'];
        return out;
      } catch (e) {
        throw toError(e);
      }
    };
    // WebGPU calls await the device: queue them so that none finds the model busy.
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => {});
    return p;
  }
  /** Synchronous `logits` (CPU models only: WebGPU results are read back asynchronously). */
  logitsSync(images: Float32Array): Float32Array {
    if (!(images instanceof Float32Array)) throw coded('invalid argument: images must be a Float32Array', 'invalid-argument');
    if (this.backendInfo.backend !== 'cpu') throw coded('logitsSync needs a CPU model: this one runs on WebGPU (use logits)', 'unsupported');
    try {
      return this.#c().predictBatch(images);
    } catch (e) {
      throw toError(e);
    }
  }

  /** Classify one image. */
  async predict(pixels: Pixels): Promise<Prediction> {
    const x = toPixels(pixels);
    const logits = await this.logits(x);
    return { label: argmax(logits), probabilities: softmax(logits), logits };
  }

  /**
   * Classify `images` (n × 784 floats in [0, 1], or raw idx bytes 0..255) and compare with
   * `labels`: accuracy and throughput. Yields between batches so progress can be shown.
   */
  async evaluate(images: Float32Array | Uint8Array, labels: ArrayLike<number>, opts: EvaluateOptions = {}): Promise<Evaluation> {
    const n = labels.length;
    if (images.length !== n * MNIST_PIXELS) {
      throw coded(`shape error: ${n} labels need ${n * MNIST_PIXELS} pixels, got ${images.length}`, 'shape');
    }
    const bs = Math.max(1, Math.floor(opts.batchSize ?? 500));
    let correct = 0;
    let busy = 0;
    const buf = new Float32Array(bs * MNIST_PIXELS);
    for (let i = 0; i < n; i += bs) {
      opts.signal?.throwIfAborted();
      const m = Math.min(bs, n - i);
      let x: Float32Array;
      if (images instanceof Float32Array) x = images.subarray(i * MNIST_PIXELS, (i + m) * MNIST_PIXELS);
      else {
        x = buf.subarray(0, m * MNIST_PIXELS);
        const src = images.subarray(i * MNIST_PIXELS, (i + m) * MNIST_PIXELS);
        for (let j = 0; j < src.length; j++) x[j] = src[j] / 255;
      }
      const t0 = performance.now();
      const logits = await this.logits(x);
      busy += performance.now() - t0;
      for (let j = 0; j < m; j++) {
        if (argmax(logits.subarray(j * 10, j * 10 + 10)) === labels[i + j]) correct++;
      }
      opts.onProgress?.({ done: i + m, total: n, correct });
      if (opts.onProgress) await tick();
    }
    const seconds = busy / 1000;
    return { accuracy: n ? correct / n : 0, correct, total: n, seconds, imagesPerSecond: seconds > 0 ? n / seconds : 0 };
  }

  free(): void {
    this.#core?.free();
    this.#core = null;
  }
}

function toPixels(p: Pixels): Float32Array {
  if (p instanceof Float32Array) {
    if (p.length !== MNIST_PIXELS) throw coded(`shape error: an MNIST image has 784 pixels, got ${p.length}`, 'shape');
    return p;
  }
  if (typeof p === 'object' && p && 'data' in p && 'width' in p) {
    if (p.width !== 28 || p.height !== 28) {
      throw coded(`shape error: ImageData must be 28x28 (use preprocessDigit), got ${p.width}x${p.height}`, 'shape');
    }
    return imageDataToGray(p);
  }
  throw coded('invalid argument: pixels must be a Float32Array(784) or a 28x28 ImageData', 'invalid-argument');
}

/** Grayscale in [0, 1] of an RGBA image: luminance × alpha (white-on-black or opaque drawings). */
export function imageDataToGray(img: ImageData): Float32Array {
  const n = img.width * img.height;
  const out = new Float32Array(n);
  const d = img.data;
  for (let i = 0; i < n; i++) {
    const r = d[4 * i], g = d[4 * i + 1], b = d[4 * i + 2], a = d[4 * i + 3];
    out[i] = ((0.299 * r + 0.587 * g + 0.114 * b) / 255) * (a / 255);
  }
  return out;
}

export function argmax(v: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
  return best;
}

export function softmax(v: ArrayLike<number>): Float32Array {
  let max = -Infinity;
  for (let i = 0; i < v.length; i++) max = Math.max(max, v[i]);
  const out = new Float32Array(v.length);
  let sum = 0;
  for (let i = 0; i < v.length; i++) sum += out[i] = Math.exp(v[i] - max);
  for (let i = 0; i < v.length; i++) out[i] /= sum;
  return out;
}

/**
 * MNIST's own preprocessing for a drawing: take the bounding box of the ink, scale it (keeping
 * the aspect ratio, bilinear area sampling) so its longer side is 20 pixels, and place it in a 28×28
 * image so that its centre of mass is at the centre. `gray`: width × height values in [0, 1]
 * (ink = 1). Returns 784 floats; all zeros for an empty drawing.
 */
export function preprocessDigit(gray: Float32Array, width: number, height: number): Float32Array {
  const out = new Float32Array(MNIST_PIXELS);
  let x0 = width, y0 = height, x1 = -1, y1 = -1;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (gray[y * width + x] > 0.05) {
        if (x < x0) x0 = x;
        if (x > x1) x1 = x;
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
    }
  }
  if (x1 < 0) return out;
  const bw = x1 - x0 + 1, bh = y1 - y0 + 1;
  const s = 20 / Math.max(bw, bh);
  const w = Math.max(1, Math.round(bw * s)), h = Math.max(1, Math.round(bh * s));
  // Box-filter downscale (area average) of the bounding box into w × h.
  const small = new Float32Array(w * h);
  for (let y = 0; y < h; y++) {
    const sy0 = y0 + (y * bh) / h, sy1 = y0 + ((y + 1) * bh) / h;
    for (let x = 0; x < w; x++) {
      const sx0 = x0 + (x * bw) / w, sx1 = x0 + ((x + 1) * bw) / w;
      let acc = 0, area = 0;
      for (let yy = Math.floor(sy0); yy < Math.ceil(sy1); yy++) {
        const wy = Math.min(sy1, yy + 1) - Math.max(sy0, yy);
        if (wy <= 0) continue;
        for (let xx = Math.floor(sx0); xx < Math.ceil(sx1); xx++) {
          const wx = Math.min(sx1, xx + 1) - Math.max(sx0, xx);
          if (wx <= 0) continue;
          acc += gray[yy * width + xx] * wx * wy;
          area += wx * wy;
        }
      }
      small[y * w + x] = area > 0 ? Math.min(1, acc / area) : 0;
    }
  }
  // Centre of mass of the small image.
  let m = 0, cx = 0, cy = 0;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const v = small[y * w + x];
      m += v;
      cx += v * x;
      cy += v * y;
    }
  }
  cx = m > 0 ? cx / m : (w - 1) / 2;
  cy = m > 0 ? cy / m : (h - 1) / 2;
  const ox = Math.round(13.5 - cx), oy = Math.round(13.5 - cy);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const tx = x + ox, ty = y + oy;
      if (tx >= 0 && tx < 28 && ty >= 0 && ty < 28) out[ty * 28 + tx] = small[y * w + x];
    }
  }
  return out;
}

export interface Idx {
  dims: number[];
  data: Uint8Array;
}

/** Parse an idx file (MNIST's format: big-endian magic 0x0000080N, N u32 dims, u8 data). */
export function parseIdx(bytes: Uint8Array): Idx {
  if (bytes.length < 4 || bytes[0] !== 0 || bytes[1] !== 0 || bytes[2] !== 0x08) {
    throw coded('invalid idx file: bad magic (expected 0x000008NN, unsigned bytes)', 'invalid-argument');
  }
  const nd = bytes[3];
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 4 + 4 * nd) throw coded('invalid idx file: truncated header', 'invalid-argument');
  const dims: number[] = [];
  for (let i = 0; i < nd; i++) dims.push(dv.getUint32(4 + 4 * i, false));
  const n = dims.reduce((a, b) => a * b, 1);
  const start = 4 + 4 * nd;
  if (bytes.length - start !== n) {
    throw coded(`invalid idx file: dims ${dims.join('x')} need ${n} bytes of data, got ${bytes.length - start}`, 'invalid-argument');
  }
  return { dims, data: bytes.subarray(start) };
}

export interface MnistSet {
  /** n × 784 floats in [0, 1]. */
  images: Float32Array;
  labels: Uint8Array;
  count: number;
}

/** Load idx image and label files (optionally gzipped) from URLs, paths, Blobs or bytes. */
export async function loadMnistSet(images: Source, labels: Source, opts: LoadOptions = {}): Promise<MnistSet> {
  const [ib, lb] = await Promise.all([readAll(images, opts), readAll(labels, { signal: opts.signal })]);
  const img = parseIdx(ib), lab = parseIdx(lb);
  if (img.dims.length !== 3 || img.dims[1] !== 28 || img.dims[2] !== 28) {
    throw coded(`invalid MNIST images: dims ${img.dims.join('x')}, expected Nx28x28`, 'invalid-argument');
  }
  if (lab.dims.length !== 1 || lab.dims[0] !== img.dims[0]) {
    throw coded(`invalid MNIST labels: ${lab.dims.join('x')} for ${img.dims[0]} images`, 'invalid-argument');
  }
  const out = new Float32Array(img.data.length);
  for (let i = 0; i < out.length; i++) out[i] = img.data[i] / 255;
  return { images: out, labels: lab.data, count: img.dims[0] };
}
