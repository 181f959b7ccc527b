/** Reading a GGUF (or any file) from a URL, a Node path, a Blob/File or bytes, in chunks. */
import { coded, ioError, isNode, nodeImport } from './env.js';

/** What can be loaded: a URL (fetched, streamed), a file path (Node), a `Blob`/`File`, or bytes. */
export type Source = string | URL | Blob | ArrayBuffer | ArrayBufferView;

export interface Progress {
  /** Bytes read so far. */
  loaded: number;
  /** Total bytes, when known. */
  total?: number;
}

export interface LoadOptions {
  /** Called as bytes arrive. */
  onProgress?: (p: Progress) => void;
  /** Abort the read; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface OpenSource {
  total?: number;
  /** Chunks in file order; `return()` (break) stops reading early. */
  chunks: AsyncGenerator<Uint8Array, void, undefined>;
  name: string;
}

const CHUNK = 1 << 20;

function isPath(s: string): boolean {
  return isNode && !/^(https?|data|blob):/i.test(s);
}

export async function openSource(source: Source, signal?: AbortSignal): Promise<OpenSource> {
  signal?.throwIfAborted();
  if (source instanceof ArrayBuffer) {
    const bytes = new Uint8Array(source);
    return { total: bytes.length, chunks: once(bytes), name: 'ArrayBuffer' };
  }
  if (ArrayBuffer.isView(source)) {
    const bytes = new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
    return { total: bytes.length, chunks: once(bytes), name: 'bytes' };
  }
  if (typeof Blob !== 'undefined' && source instanceof Blob) {
    const name = (source as File).name ?? 'Blob';
    return { total: source.size, chunks: blobChunks(source, signal), name };
  }
  if (typeof source === 'string' && isPath(source)) return openPath(source, signal);
  if (source instanceof URL && source.protocol === 'file:' && isNode) {
    const url = await nodeImport<typeof import('node:url')>('url');
    return openPath(url.fileURLToPath(source), signal);
  }
  if (typeof source === 'string' || source instanceof URL) return openUrl(source, signal);
  throw coded(`cannot load from ${Object.prototype.toString.call(source)}: expected a URL, path, Blob or bytes`, 'invalid-argument');
}

/** The size of a source without reading it (a URL: a HEAD request's Content-Length), or
 * undefined when it cannot be known. */
export async function sourceSize(source: Source, signal?: AbortSignal): Promise<number | undefined> {
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) return source.byteLength;
  if (typeof Blob !== 'undefined' && source instanceof Blob) return source.size;
  try {
    if (typeof source === 'string' && isPath(source)) {
      const fs = await nodeImport<typeof import('node:fs/promises')>('fs/promises');
      return (await fs.stat(source)).size;
    }
    if (source instanceof URL && source.protocol === 'file:' && isNode) {
      const [fs, url] = await Promise.all([
        nodeImport<typeof import('node:fs/promises')>('fs/promises'),
        nodeImport<typeof import('node:url')>('url'),
      ]);
      return (await fs.stat(url.fileURLToPath(source))).size;
    }
    const base = typeof location !== 'undefined' ? location.href : undefined;
    const res = await fetch(new URL(String(source), base), { method: 'HEAD', signal });
    const len = res.ok && !res.headers.get('content-encoding') ? res.headers.get('content-length') : null;
    return len !== null ? Number(len) : undefined;
  } catch {
    return undefined; // the read itself reports what is wrong
  }
}

async function* once(bytes: Uint8Array): AsyncGenerator<Uint8Array, void, undefined> {
  yield bytes;
}

/** Blob slices growing from 64 KiB to 4 MiB: a header-only read touches little of a big file. */
async function* blobChunks(blob: Blob, signal?: AbortSignal): AsyncGenerator<Uint8Array, void, undefined> {
  let size = 64 << 10;
  for (let at = 0; at < blob.size; ) {
    signal?.throwIfAborted();
    const end = Math.min(blob.size, at + size);
    yield new Uint8Array(await blob.slice(at, end).arrayBuffer());
    at = end;
    size = Math.min(size * 2, CHUNK * 4);
  }
}

async function openPath(path: string, signal?: AbortSignal): Promise<OpenSource> {
  const fs = await nodeImport<typeof import('node:fs/promises')>('fs/promises');
  const total = (await fs.stat(path)).size;
  // Opened on the first read: a source refused before it is read leaves no handle open.
  async function* gen(): AsyncGenerator<Uint8Array, void, undefined> {
    const fh = await fs.open(path, 'r');
    try {
      let size = 64 << 10;
      for (let at = 0; at < total; ) {
        signal?.throwIfAborted();
        const buf = new Uint8Array(Math.min(size, total - at));
        size = Math.min(size * 2, CHUNK * 4);
        const { bytesRead } = await fh.read(buf, 0, buf.length, at);
        if (bytesRead === 0) break;
        at += bytesRead;
        yield bytesRead === buf.length ? buf : buf.subarray(0, bytesRead);
      }
    } finally {
      await fh.close();
    }
  }
  return { total, chunks: gen(), name: path };
}

/** GET `url`: the response body and its length when known; network failures and HTTP error
 * statuses are `io` errors (with `status`). */
export async function fetchBody(url: string | URL, signal?: AbortSignal): Promise<{ body: ReadableStream<Uint8Array> | null; total?: number; res: Response }> {
  let res: Response;
  try {
    res = await fetch(url, { signal });
  } catch (e) {
    throw ioError(e, `fetching ${url} failed`);
  }
  if (!res.ok) {
    await res.body?.cancel().catch(() => {});
    throw coded(`HTTP ${res.status} ${res.statusText} for ${url}`, 'io', { status: res.status });
  }
  const len = res.headers.get('content-length');
  const total = len !== null && !res.headers.get('content-encoding') ? Number(len) : undefined;
  return { body: res.body, total, res };
}

/** The chunks of a response body; a dropped connection or a body shorter than its
 * Content-Length is an `io` error; stopping early (`return()`) cancels the download. */
export async function* bodyChunks(body: ReadableStream<Uint8Array>, url: string | URL): AsyncGenerator<Uint8Array, void, undefined> {
  const reader = body.getReader();
  let finished = false;
  try {
    for (;;) {
      let step: ReadableStreamReadResult<Uint8Array>;
      try {
        step = await reader.read();
      } catch (e) {
        throw ioError(e, `reading ${url} failed`);
      }
      if (step.done) {
        finished = true;
        return;
      }
      yield step.value;
    }
  } finally {
    if (!finished) await reader.cancel().catch(() => {});
  }
}

async function openUrl(url: string | URL, signal?: AbortSignal): Promise<OpenSource> {
  const { body, total, res } = await fetchBody(url, signal);
  if (!body) {
    const bytes = new Uint8Array(await res.arrayBuffer());
    return { total: bytes.length, chunks: once(bytes), name: String(url) };
  }
  return { total, chunks: bodyChunks(body, url), name: String(url) };
}

/** Read a whole source into one `Uint8Array` (gunzipped when it starts with the gzip magic). */
export async function readAll(source: Source, opts: LoadOptions & { gunzip?: boolean } = {}): Promise<Uint8Array> {
  const src = await openSource(source, opts.signal);
  const parts: Uint8Array[] = [];
  let loaded = 0;
  for await (const c of src.chunks) {
    parts.push(c);
    loaded += c.length;
    opts.onProgress?.({ loaded, total: src.total });
  }
  let bytes = parts.length === 1 ? parts[0] : concat(parts, loaded);
  if (opts.gunzip !== false && bytes.length > 2 && bytes[0] === 0x1f && bytes[1] === 0x8b) bytes = await gunzip(bytes);
  return bytes;
}

function concat(parts: Uint8Array[], n: number): Uint8Array {
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** gunzip with the platform's `DecompressionStream` (browsers, workers and Node 20). */
export async function gunzip(bytes: Uint8Array): Promise<Uint8Array> {
  const ds = new DecompressionStream('gzip');
  const stream = new Blob([bytes as BlobPart]).stream().pipeThrough(ds);
  return new Uint8Array(await new Response(stream).arrayBuffer());
}
