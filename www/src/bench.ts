/**
 * mul_mat throughput of the engine on a backend, for comparing the CPU (wasm) with WebGPU in the
 * same page: `y = W·x` with W [k, m] of a weight type and x [k, n] f32.
 */
import { engine } from './wasm.js';
import { toError } from './env.js';
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
}

export interface MulMatBenchResult {
  /** GFLOP/s of the median run (2·m·n·k per product). */
  gflops: number;
  /** Median seconds per product (submit and wait included on WebGPU). */
  secondsPerRun: number;
  runs: number;
}

/** Time `mul_mat` on the CPU (one thread) or on WebGPU (`webgpuDevice()` must find an adapter). */
export async function benchMulMat(o: MulMatBenchOptions): Promise<MulMatBenchResult> {
  const m = await engine();
  if (o.backend === 'webgpu') {
    const { device, reason } = await webgpuDevice();
    if (!device) throw new Error(`WebGPU is unavailable: ${reason}`);
  }
  let b;
  try {
    b = new m.MulMatBench(o.backend, o.type, o.m, o.n, o.k);
  } catch (e) {
    throw toError(e);
  }
  try {
    await b.run();
    const times: number[] = [];
    let total = 0;
    const budget = (o.seconds ?? 1) * 1000;
    while (times.length < 3 || total < budget) {
      const t0 = performance.now();
      await b.run();
      const dt = performance.now() - t0;
      times.push(dt);
      total += dt;
    }
    times.sort((x, y) => x - y);
    // Outside cross-origin isolation the clock is coarsened (~100 µs): a short run can read 0,
    // and so can the median; the mean over the whole budget cannot.
    const med = (times[times.length >> 1] || total / times.length) / 1000;
    return { gflops: b.flops / med / 1e9, secondsPerRun: med, runs: times.length };
  } catch (e) {
    throw toError(e);
  } finally {
    b.free();
  }
}
