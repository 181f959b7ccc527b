/**
 * An engine worker of the threads build (started by `init`, www/src/wasm.ts): instantiates the
 * engine on the main instance's shared memory, says so, and enters the CPU pool, where it waits
 * for the engine's jobs (`Atomics.wait` in a worker only) and never returns.
 */
import { isNode, nodeImport } from './env.js';

interface Start {
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
}

/** Posts `{ ready: true }`, or `{ error }` when the engine cannot start here. */
async function start(msg: Start, post: (m: { ready?: true; error?: string }) => void): Promise<void> {
  let m: typeof import('../wasm/threads/ggweb.js');
  try {
    m = await import('../wasm/threads/ggweb.js');
    m.initSync({ module: msg.module, memory: msg.memory });
  } catch (e) {
    post({ error: e instanceof Error ? e.message : String(e) });
    return;
  }
  post({ ready: true });
  m.threadsWorkerMain();
}

if (isNode) {
  const { parentPort } = await nodeImport<typeof import('node:worker_threads')>('worker_threads');
  parentPort?.once('message', (msg: Start) => void start(msg, (m) => parentPort.postMessage(m)));
} else {
  const scope = self as unknown as {
    onmessage: ((e: MessageEvent<Start>) => void) | null;
    postMessage(m: unknown): void;
  };
  scope.onmessage = (e) => {
    scope.onmessage = null;
    void start(e.data, (m) => scope.postMessage(m));
  };
}
