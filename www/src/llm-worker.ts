/**
 * The Web Worker side of `LLM.loadInWorker`: owns an {@link LLM} and answers the messages of
 * `WorkerLLM` (llm-client.ts). Streams generated pieces back as they come; `stop` messages are
 * handled between generation steps.
 */
import { LLM, type Generation } from './llm.js';
import { init } from './wasm.js';

interface Req {
  id: number;
  op: string;
  args: any[];
}

let llm: LLM | null = null;
const running = new Map<number, Generation>();
let loadAbort: AbortController | null = null;

const post = (msg: unknown, transfer: Transferable[] = []) => (self as unknown as Worker).postMessage(msg, transfer);
const fail = (id: number, e: unknown) => post({ id, error: e instanceof Error ? e.message : String(e) });

async function handle(req: Req): Promise<void> {
  const { id, op, args } = req;
  try {
    switch (op) {
      case 'load': {
        const [source, { engine, ...opts }] = args;
        loadAbort = new AbortController();
        llm?.free();
        // The worker's engine: `init` options (e.g. nThreads), before anything loads it.
        if (engine) await init(engine);
        llm = await LLM.load(source, {
          ...opts,
          signal: loadAbort.signal,
          onProgress: (p) => post({ id, progress: p }),
        });
        loadAbort = null;
        post({ id, value: { info: llm.info, loadInfo: llm.loadInfo } });
        return;
      }
      case 'abortLoad':
        loadAbort?.abort(new Error('load aborted'));
        return;
      case 'stop':
        running.get(args[0])?.stop();
        return;
    }
    if (!llm) throw new Error('no model loaded');
    switch (op) {
      case 'tokenize':
        post({ id, value: await llm.tokenize(args[0], args[1]) });
        return;
      case 'detokenize':
        post({ id, value: await llm.detokenize(args[0]) });
        return;
      case 'applyChatTemplate':
        post({ id, value: await llm.applyChatTemplate(args[0], args[1]) });
        return;
      case 'logits': {
        const l = await llm.logits(args[0], args[1]);
        post({ id, value: l }, [l.buffer]);
        return;
      }
      case 'memory':
        post({ id, value: llm.memory() });
        return;
      case 'reset':
        llm.reset();
        post({ id, value: null });
        return;
      case 'free':
        llm.free();
        llm = null;
        post({ id, value: null });
        return;
      case 'generate':
      case 'chat': {
        const g = op === 'chat' ? llm.chat(args[0], args[1]) : llm.generate(args[0], args[1]);
        running.set(id, g);
        try {
          let buf = '';
          for await (const piece of g) {
            buf += piece;
            post({ id, piece: buf });
            buf = '';
          }
          post({ id, value: g.result });
        } finally {
          running.delete(id);
        }
        return;
      }
      default:
        throw new Error(`unknown operation ${op}`);
    }
  } catch (e) {
    fail(id, e);
  }
}

self.onmessage = (ev: MessageEvent<Req>) => {
  void handle(ev.data);
};
post({ ready: true });
