/**
 * What a GGUF model is, from its header alone: family, quantization, size, parameters, and
 * whether `LLM` runs it (with the reason when it does not). Reading stops once the header and
 * tensor infos parse, so a URL's body is cancelled after the first megabytes of a multi-GB file.
 */
import { inspectGGUF, type GGUFHeader } from './gguf.js';
import type { LoadOptions, Source } from './source.js';

/** The decoder families `LLM` runs (crate/src/models/arch.rs `ARCHS`, in its order). */
export const LLM_ARCHITECTURES = ['llama', 'gemma3', 'qwen2', 'qwen3', 'phi3'] as const;

/** llama.cpp's `general.file_type` names (enum llama_ftype). */
const FILE_TYPES: Record<number, string> = {
  0: 'F32', 1: 'F16', 2: 'Q4_0', 3: 'Q4_1', 7: 'Q8_0', 8: 'Q5_0', 9: 'Q5_1', 10: 'Q2_K', 11: 'Q3_K_S',
  12: 'Q3_K_M', 13: 'Q3_K_L', 14: 'Q4_K_S', 15: 'Q4_K_M', 16: 'Q5_K_S', 17: 'Q5_K_M', 18: 'Q6_K',
  19: 'IQ2_XXS', 20: 'IQ2_XS', 21: 'Q2_K_S', 22: 'IQ3_XS', 23: 'IQ3_XXS', 24: 'IQ1_S', 25: 'IQ4_NL',
  26: 'IQ3_S', 27: 'IQ3_M', 28: 'IQ2_S', 29: 'IQ2_M', 30: 'IQ4_XS', 31: 'IQ1_M', 32: 'BF16',
  36: 'TQ1_0', 37: 'TQ2_0', 38: 'MXFP4_MOE',
};

export interface ModelInspection {
  /** `general.architecture`, or null. */
  architecture: string | null;
  /** `general.name`, or null. */
  name: string | null;
  /** Whether `LLM.load` runs this family. */
  supported: boolean;
  /** Why not, when not supported. */
  reason: string | null;
  /** The tensor type holding most of the weight bytes (`q4_K`, `q4_1`, `f16`, …). */
  quant: string | null;
  /** `general.file_type` as llama.cpp names it (`Q4_K_M`), when the file says. */
  fileType: string | null;
  /** File size in bytes, when the source knows it. */
  fileSize: number | null;
  /** Parameters: the elements of every tensor. */
  nParams: number;
  nTensors: number;
  /** `<arch>.context_length`, when present. */
  contextLength: number | null;
  /** Whether the file has `tokenizer.chat_template` (rendered by ggweb's Jinja interpreter). */
  hasChatTemplate: boolean;
  /** Bytes read to parse the header. */
  bytesRead: number;
}

/** Summarise a parsed header (no I/O). */
export function describeModel(h: GGUFHeader, bytesRead = 0): ModelInspection {
  const md = h.metadata;
  const arch = h.architecture;
  const str = (k: string) => (typeof md[k] === 'string' ? (md[k] as string) : null);
  const num = (k: string) => (typeof md[k] === 'number' || typeof md[k] === 'bigint' ? Number(md[k]) : null);
  const bytesByType = new Map<string, number>();
  let nParams = 0;
  for (const t of h.tensors) {
    nParams += t.nElements;
    // Matrices are the weights; norms and biases (1-D) are f32 in every quantization.
    if (t.shape.filter((d) => d > 1).length >= 2) bytesByType.set(t.type, (bytesByType.get(t.type) ?? 0) + t.byteSize);
  }
  let quant: string | null = null;
  for (const [type, bytes] of bytesByType) if (quant === null || bytes > bytesByType.get(quant)!) quant = type;
  let reason: string | null = null;
  const list = LLM_ARCHITECTURES.join(', ');
  if (arch === null) reason = 'the file has no general.architecture: not a model GGUF';
  else if (arch === 'bert') reason = `'bert' is an embedding model: load it with Embedder (LLM runs ${list})`;
  else if (!(LLM_ARCHITECTURES as readonly string[]).includes(arch)) reason = `unsupported architecture '${arch}' (supported: ${list})`;
  else if (!h.tensors.some((t) => t.name === 'token_embd.weight')) reason = 'the file has no token_embd.weight: not a complete model';
  else if (!Array.isArray(md['tokenizer.ggml.tokens'])) reason = 'the file has no tokenizer (tokenizer.ggml.tokens)';
  const ft = num('general.file_type');
  return {
    architecture: arch,
    name: str('general.name'),
    supported: reason === null,
    reason,
    quant,
    fileType: ft === null ? null : FILE_TYPES[ft] ?? `file_type ${ft}`,
    fileSize: h.fileSize ?? null,
    nParams,
    nTensors: h.tensors.length,
    contextLength: arch ? num(`${arch}.context_length`) : null,
    hasChatTemplate: typeof md['tokenizer.chat_template'] === 'string',
    bytesRead,
  };
}

/**
 * Read only the header of `source` and say what model it is. Rejects (with a `code`) for a
 * source that is not a GGUF; an unsupported family resolves with `supported: false`.
 */
export async function inspectModel(source: Source, opts: LoadOptions = {}): Promise<ModelInspection> {
  let read = 0;
  const h = await inspectGGUF(source, {
    ...opts,
    onProgress: (p) => {
      read = p.loaded;
      opts.onProgress?.(p);
    },
  });
  return describeModel(h, read);
}
