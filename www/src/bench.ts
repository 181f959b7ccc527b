/**
 * mul_mat throughput of the engine on a backend, for comparing the CPU (wasm) with WebGPU in the
 * same page: `y = W·x` with W [k, m] of a weight type and x [k, n] f32.
 */
import { engine } from './wasm.js';
import { coded, toError } from './env.js';
import { webgpuDevice } from './backend.js';

export interface MulMatBenchOptions {
  backend: 'cpu' | 'webgpu';
  /** Weight type: 'f32', 'f16', 'q4_0', 'q8_0', 'q4_K', … */
  type: string;
  m: number;
  n: number;
  k: number;
  /** Time to spend after one warm-up run (default 1 s; at least 3 runs). */
  seconds?: number;
  /**
   * CPU: repack the weight as an LLM's load does (four rows interleaved for the GEMV), so that
   * n = 1 times the kernel token generation runs (default false; `repacked` says whether it was).
   */
  repack?: boolean;
  /**
   * Rotate over this many weights of the same shape (default 1), each run the next one: with
   * enough of them (more than the last-level cache) every run reads its weight from memory, as
   * token generation does.
   */
  copies?: number;
}

export interface MulMatBenchResult {
  /** GFLOP/s of the median run (2·m·n·k per product). */
  gflops: number;
  /** Median seconds per product (submit and wait included on WebGPU). */
  secondsPerRun: number;
  runs: number;
  /** Whether the weights were repacked (`repack`; false where this build or type keeps them plain). */
  repacked: boolean;
  /**
   * Whether the products were checked against the scalar reference (sampled rows of the first
   * and the last weight; a mismatch rejects): true on the CPU, false on WebGPU.
   */
  verified: boolean;
}

/** Time `mul_mat` on the CPU (one thread) or on WebGPU (`webgpuDevice()` must find an adapter). */
export async function benchMulMat(o: MulMatBenchOptions): Promise<MulMatBenchResult> {
  const m = await engine();
  if (o.backend === 'webgpu') {
    const { device, reason } = await webgpuDevice();
    if (!device) throw new Error(`WebGPU is unavailable: ${reason}`);
  }
  const copies = o.copies ?? 1;
  if (!Number.isInteger(copies) || copies < 1 || copies > 4096) {
    throw coded(`copies must be an integer in 1..4096, not ${copies}`, 'invalid-argument');
  }
  const bs: InstanceType<typeof m.MulMatBench>[] = [];
  let repacked = false;
  try {
    for (let i = 0; i < copies; i++) {
      const b = new m.MulMatBench(o.backend, o.type, o.m, o.n, o.k);
      bs.push(b);
      if (o.repack) repacked = b.repack();
    }
  } catch (e) {
    for (const b of bs) b.free();
    throw toError(e);
  }
  const b = bs[0];
  try {
    for (const c of bs) await c.run();
    const times: number[] = [];
    let total = 0;
    const budget = (o.seconds ?? 1) * 1000;
    // In reverse, as a model's weights are read: the next run's weight is not the one after
    // this one's end in memory, which a prefetch past the end would have fetched already.
    let next = 0;
    while (times.length < 3 || total < budget) {
      const c = bs[bs.length - 1 - next];
      next = (next + 1) % bs.length;
      const t0 = performance.now();
      await c.run();
      const dt = performance.now() - t0;
      times.push(dt);
      total += dt;
    }
    // The CPU products checked against the scalar reference (sampled rows; the first and the
    // last weight): a kernel that is fast because it is wrong rejects instead of timing.
    let verified = true;
    for (const c of bs.length > 1 ? [bs[0], bs[bs.length - 1]] : bs) verified = c.verify() && verified;
    times.sort((x, y) => x - y);
    // Outside cross-origin isolation the clock is coarsened (~100 µs): a short run can read 0,
    // and so can the median; the mean over the whole budget cannot.
    const med = (times[times.length >> 1] || total / times.length) / 1000;
    return { gflops: b.flops / med / 1e9, secondsPerRun: med, runs: times.length, repacked, verified };
  } catch (e) {
    throw toError(e);
  } finally {
    for (const c of bs) c.free();
  }
}
