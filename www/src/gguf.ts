/** GGUF files: a streaming header reader and, optionally, the whole file kept in wasm memory. */
import { engine } from './wasm.js';
import { openSource, type LoadOptions, type Source } from './source.js';
import { coded, toError } from './env.js';
import type { GgufStream } from '../wasm/simd/ggweb.js';

/** A metadata value: numbers, `bigint` for 64-bit integers, strings, booleans, arrays of those. */
export type GGUFValue = number | bigint | string | boolean | GGUFValue[];

export interface GGUFTensorInfo {
  name: string;
  /** ggml type name: `f32`, `f16`, `q4_0`, `q8_0`, `q4_K`, … */
  type: string;
  /** GGUF type id. */
  typeId: number;
  /** Elements per dimension, innermost (contiguous) first, as in ggml. */
  shape: number[];
  nElements: number;
  /** Absolute byte offset of the data in the file. */
  offset: number;
  /** Offset relative to the data section (as stored in the file). */
  relativeOffset: number;
  byteSize: number;
}

export interface GGUFHeader {
  version: number;
  alignment: number;
  /** Absolute offset of the tensor data section. */
  dataOffset: number;
  /** File size in bytes, when known. */
  fileSize?: number;
  /** `general.architecture`, or null. */
  architecture: string | null;
  /** Metadata as plain JS values, in file order. */
  metadata: Record<string, GGUFValue>;
  /** GGUF type of every metadata value: `u32`, `string`, `array<f32>`, … */
  metadataTypes: Record<string, string>;
  tensors: GGUFTensorInfo[];
}

export interface LoadGGUFOptions extends LoadOptions {
  /**
   * Read only the header (metadata and tensor infos) and stop reading: for inspectors. The
   * resulting object cannot provide weights.
   */
  headerOnly?: boolean;
}

/** A parsed GGUF file. Unless loaded with `headerOnly`, its bytes live in wasm memory (one copy). */
export class GGUF implements GGUFHeader {
  version!: number;
  alignment!: number;
  dataOffset!: number;
  fileSize?: number;
  architecture!: string | null;
  metadata!: Record<string, GGUFValue>;
  metadataTypes!: Record<string, string>;
  tensors!: GGUFTensorInfo[];
  /** False when loaded with `headerOnly` (or after the data was handed to a model). */
  hasData: boolean;
  /** @internal */
  _stream: GgufStream | null;

  /** @internal */
  constructor(header: GGUFHeader, stream: GgufStream | null) {
    Object.assign(this, header);
    this._stream = stream;
    this.hasData = stream !== null;
  }

  /** The tensor info named `name`. */
  tensor(name: string): GGUFTensorInfo | undefined {
    return this.tensors.find((t) => t.name === name);
  }

  /** @internal The wasm-side file, for weights; it can be consumed once. */
  _take(): GgufStream {
    if (!this._stream) {
      throw coded(
        this.hasData
          ? 'this GGUF was already used'
          : 'this GGUF was loaded with headerOnly: its tensor data was not kept',
        'invalid-argument',
      );
    }
    const s = this._stream;
    this._stream = null;
    this.hasData = false;
    return s;
  }

  /** Release the wasm memory holding the file. */
  free(): void {
    this._stream?.free();
    this._stream = null;
    this.hasData = false;
  }
}

/**
 * Load a GGUF file. The header is parsed as the bytes stream in; with `headerOnly` reading stops
 * as soon as the header is complete (an inspector needs only the first kilobytes of a big model).
 * Rejects with an `Error` naming the problem for a malformed file.
 */
export async function loadGGUF(source: Source | GGUF, opts: LoadGGUFOptions = {}): Promise<GGUF> {
  if (source instanceof GGUF) return source;
  const m = await engine();
  const src = await openSource(source, opts.signal).catch((e) => {
    throw toError(e);
  });
  const headerOnly = opts.headerOnly ?? false;
  let stream: InstanceType<typeof m.GgufStream>;
  try {
    stream = new m.GgufStream(!headerOnly, src.total);
  } catch (e) {
    await src.chunks.return(undefined);
    throw toError(e);
  }
  let loaded = 0;
  try {
    for await (const chunk of src.chunks) {
      opts.signal?.throwIfAborted();
      const done = stream.push(chunk);
      loaded += chunk.length;
      opts.onProgress?.({ loaded, total: src.total });
      if (done && headerOnly) break;
    }
    opts.signal?.throwIfAborted();
    const header = (headerOnly && stream.done ? stream.header() : stream.finish()) as GGUFHeader;
    if (headerOnly) {
      stream.free();
      return new GGUF(header, null);
    }
    return new GGUF(header, stream);
  } catch (e) {
    stream.free();
    throw toError(e);
  }
}

/** `loadGGUF(source, { headerOnly: true })`: metadata and tensor infos only. */
export function inspectGGUF(source: Source, opts: LoadOptions = {}): Promise<GGUF> {
  return loadGGUF(source, { ...opts, headerOnly: true });
}
