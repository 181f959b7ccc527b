/**
 * The Web Worker side of `Embedder.loadInWorker`: owns an {@link Embedder} and answers the
 * messages of `WorkerEmbedder` (embed.ts). Vectors go back as transferred buffers.
 */
import { Embedder } from './embed.js';

let model: Embedder | null = null;
const post = (msg: unknown, transfer: Transferable[] = []) => (self as unknown as Worker).postMessage(msg, transfer);

self.onmessage = async (ev: MessageEvent) => {
  const { id, op, args } = ev.data as { id: number; op: string; args: any[] };
  try {
    if (op === 'load') {
      const [source, opts] = args;
      model?.dispose();
      model = await Embedder.load(source, { ...opts, onProgress: (p) => post({ id, progress: p }) });
      post({ id, value: model.info });
      return;
    }
    if (!model) throw Object.assign(new Error('no model loaded'), { code: 'disposed' });
    if (op === 'tokenize') {
      post({ id, value: Array.from(model.tokenize(args[0])) });
    } else if (op === 'embed') {
      const vs = await model.embed(args[0]);
      post({ id, value: vs }, vs.map((v) => v.buffer));
    } else if (op === 'dispose') {
      model.dispose();
      model = null;
      post({ id, value: null });
    }
  } catch (e) {
    const err = e as { message?: string; code?: string };
    post({ id, error: { message: err?.message ?? String(e), code: err?.code ?? 'internal' } });
  }
};
