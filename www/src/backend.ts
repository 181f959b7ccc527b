/**
 * Choosing where models run: `cpu` (the wasm engine), `webgpu` (WebGPU first, the CPU for ops
 * WebGPU does not run or tensors larger than one storage binding) or `auto` (WebGPU when an
 * adapter exists, else the CPU). The choice and its reasons are kept in a {@link BackendInfo}.
 */
import { engine, threadsLoaded } from './wasm.js';
import { toError } from './env.js';

export type Backend = 'cpu' | 'webgpu' | 'auto';

/** What the WebGPU adapter is and can do, and whether ggweb's kernels use `shader-f16`. */
export interface WebGPUInfo {
  /** Adapter name (e.g. "swiftshader" in headless Chromium, a CPU emulation). */
  name: string;
  backend: string;
  deviceType: string;
  driver: string;
  driverInfo: string;
  /** The adapter's optional features as wgpu names them (e.g. "SHADER_F16"). */
  features: string[];
  /** The adapter offers `shader-f16`. */
  shaderF16: boolean;
  /** ggweb's kernels use `shader-f16` (false: the f32 path, which always exists). */
  f16: boolean;
  maxBufferSize: number;
  /** Tensors larger than this run on the CPU (see `BackendInfo.placements`). */
  maxStorageBufferBindingSize: number;
  minStorageBufferOffsetAlignment: number;
  maxComputeWorkgroupsPerDimension: number;
  maxComputeInvocationsPerWorkgroup: number;
}

/** Where a model runs and why. */
export interface BackendInfo {
  /** What was asked for. */
  requested: Backend;
  /** What runs: `webgpu` (with the CPU for what WebGPU cannot run) or `cpu`. */
  backend: 'webgpu' | 'cpu';
  /** The WebGPU device when `backend` is `webgpu`. */
  adapter: WebGPUInfo | null;
  /** Kernels use `shader-f16`. */
  f16: boolean;
  /** Why this backend (e.g. why the CPU was chosen; `init()` says why this build). */
  reason: string;
  /**
   * Threads of the CPU backend (1 except in the threads build: see `init().threads`); set where the
   * backend was chosen by {@link chooseBackend} (models, `Graph.create`).
   */
  cpuThreads?: number;
  /**
   * After a computation on WebGPU: nodes per backend of the last graph, and each node that ran on
   * the CPU with the reason (an op WebGPU lacks, a tensor over max_storage_buffer_binding_size).
   */
  placements?: { nodes: Record<string, number>; elsewhere: string[] };
}

let probing: Promise<{ device: WebGPUInfo | null; reason: string }> | null = null;

/**
 * Open the WebGPU device once (later calls return the same result). Resolves to the device's
 * description, or `null` with the reason there is none (no `navigator.gpu`, no adapter, a build
 * without WebGPU).
 */
export async function webgpuDevice(): Promise<{ device: WebGPUInfo | null; reason: string }> {
  if (!probing) {
    probing = (async () => {
      const m = await engine();
      if (!m.webgpuCompiled()) {
        const why = threadsLoaded()
          ? 'the threads build of the ggweb engine has no WebGPU backend (init({ threads: false }) loads one that has)'
          : 'this build of the ggweb engine has no WebGPU backend';
        return { device: null, reason: why };
      }
      try {
        const device = (await m.webgpuInit()) as WebGPUInfo;
        return { device, reason: `WebGPU adapter '${device.name}' (${device.f16 ? 'f16' : 'f32'} path)` };
      } catch (e) {
        return { device: null, reason: toError(e).message };
      }
    })();
  }
  return probing;
}

/** Resolve a requested backend: `webgpu` rejects when there is no WebGPU, `auto` falls back. */
export async function chooseBackend(requested: Backend | undefined): Promise<BackendInfo> {
  const req = requested ?? 'cpu';
  if (req !== 'cpu' && req !== 'webgpu' && req !== 'auto') {
    throw new Error(`invalid argument: backend must be 'cpu', 'webgpu' or 'auto', got '${String(req)}'`);
  }
  const cpuThreads = (await engine()).cpuThreads();
  if (req === 'cpu') {
    return { requested: req, backend: 'cpu', adapter: null, f16: false, reason: 'the CPU was requested', cpuThreads };
  }
  const { device, reason } = await webgpuDevice();
  if (device) return { requested: req, backend: 'webgpu', adapter: device, f16: device.f16, reason, cpuThreads };
  if (req === 'webgpu') throw new Error(`backend 'webgpu' requested but WebGPU is unavailable: ${reason}`);
  return { requested: req, backend: 'cpu', adapter: null, f16: false, reason: `auto: no WebGPU (${reason}), so the CPU`, cpuThreads };
}
