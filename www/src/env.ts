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

/**
 * What went wrong, on every error the package throws or rejects with (`error.code`). The engine's
 * codes come from the Rust side (`ggweb::Error::code`, `crate/wasm/src/lib.rs`):
 * - `bad-gguf`: the file is not valid GGUF (truncated, hostile sizes, bad values);
 * - `bad-model`: valid GGUF, but not a model this engine can run (missing or misshaped tensors);
 * - `shape`: tensor shapes, strides or views that do not fit; `too-large`: a size past the address space;
 * - `unsupported`: a type or op the backend does not compute; `out-of-memory`;
 * - `invalid-argument`: a bad option or id; `busy`: another call is in flight (await it first);
 * - `aborted`: the caller's AbortSignal fired; `io`: a read or download failed (an HTTP error status,
 *   a dropped connection, a body shorter than its Content-Length; HTTP errors carry `status`);
 * - `backend`; `internal`: a bug (a wasm trap).
 */
export type ErrorCode =
  | 'bad-gguf'
  | 'bad-model'
  | 'shape'
  | 'too-large'
  | 'unsupported'
  | 'out-of-memory'
  | 'invalid-argument'
  | 'busy'
  | 'aborted'
  | 'io'
  | 'backend'
  | 'internal';

/** An `Error` with its {@link ErrorCode}. */
export interface GgwebError extends Error {
  code: ErrorCode;
}

/** An `Error` with `code` (and any extra own properties, e.g. an HTTP `status`). */
export function coded(message: string, code: ErrorCode, extra: Record<string, unknown> = {}, cause?: unknown): GgwebError {
  const err = new Error(message, cause === undefined ? undefined : { cause }) as GgwebError;
  Object.defineProperty(err, 'code', { value: code, writable: true, configurable: true, enumerable: true });
  Object.assign(err, extra);
  return err;
}

/** A failed read (not an abort) as an `io` error; aborts pass through as they are. */
export function ioError(e: unknown, what: string): unknown {
  if (e instanceof Error && (e.name === 'AbortError' || typeof (e as { code?: unknown }).code === 'string')) return e;
  const detail = e instanceof Error ? (e.cause instanceof Error ? `${e.message} (${e.cause.message})` : e.message) : String(e);
  return coded(`${what}: ${detail}`, 'io', {}, e);
}

/**
 * Wrap anything thrown into an `Error` with a `code`: the engine's errors carry theirs already; an
 * aborted read is `aborted`, a wasm trap `internal`, anything else without one `invalid-argument`.
 */
export function toError(e: unknown): GgwebError {
  const err = (e instanceof Error ? e : new Error(String(e))) as Error & { code?: unknown };
  if (typeof err.code !== 'string') {
    const trap = typeof WebAssembly !== 'undefined' && err instanceof WebAssembly.RuntimeError;
    const code = err.name === 'AbortError' ? 'aborted' : trap ? 'internal' : 'invalid-argument';
    // An own property: DOMException (an abort's reason) has a numeric `code` getter.
    Object.defineProperty(err, 'code', { value: code, writable: true, configurable: true, enumerable: true });
  }
  return err as GgwebError;
}
