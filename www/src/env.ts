/** Where we run: Node (read files with fs) or a browser / worker (fetch). */
export const isNode: boolean =
  typeof process !== 'undefined' &&
  typeof (process as { versions?: { node?: string } }).versions?.node === 'string' &&
  typeof (globalThis as { document?: unknown }).document === 'undefined' &&
  typeof (globalThis as { WorkerGlobalScope?: unknown }).WorkerGlobalScope === 'undefined';

/** Import a Node built-in without bundlers trying to resolve it for the browser. */
export async function nodeImport<T = any>(name: string): Promise<T> {
  const spec = 'node:' + name;
  return (await import(/* webpackIgnore: true */ /* @vite-ignore */ spec)) as T;
}

/** Yield to the event loop (lets progress callbacks paint and messages arrive). */
export function tick(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** Wrap anything thrown into an `Error` (wasm-bindgen already throws `Error`s for Rust errors). */
export function toError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}
