/**
 * The worker side of {@link Trainer} (train.ts): owns a {@link LocalTrainer} and answers the
 * messages of `Trainer` — in a module Web Worker or a Node `worker_threads` worker. Step and
 * epoch figures stream back as they come; a `stop` message is seen between slices of training.
 */
import { LocalTrainer, type TrainerOptions } from './train.js';
import { init, type InitOptions } from './wasm.js';
import { isNode, nodeImport } from './env.js';

interface Req {
  id: number;
  op: string;
  args: any[];
}

let trainer: LocalTrainer | null = null;
let post: (msg: unknown, transfer?: Transferable[]) => void = () => {};

async function handle(req: Req): Promise<void> {
  const { id, op, args } = req;
  try {
    if (op === 'stop') {
      trainer?.stop();
      return;
    }
    if (op === 'create') {
      const [opts, engineOpts] = args as [TrainerOptions, InitOptions];
      const e = await init(engineOpts);
      const t = await LocalTrainer.create(opts);
      trainer?.dispose();
      trainer = t;
      post({ id, value: { ...t.info, build: e.build, threads: e.threads } });
      return;
    }
    if (!trainer) throw Object.assign(new Error('this Trainer was disposed'), { code: 'invalid-argument' });
    switch (op) {
      case 'setData':
        trainer.setData(args[0]);
        post({ id, value: { stepsPerEpoch: trainer.stepsPerEpoch } });
        return;
      case 'fit': {
        let steps: unknown[] = [];
        let last = 0;
        const flush = () => {
          if (steps.length) post({ id, steps });
          steps = [];
          last = performance.now();
        };
        const r = await trainer.fit(args[0] ?? undefined, {
          sliceMs: args[1]?.sliceMs,
          // Steps go back in batches (at most one message per ~16 ms), epochs at once.
          onStep: (s) => {
            steps.push(s);
            if (performance.now() - last > 16) flush();
          },
          onEpoch: (e) => {
            flush();
            post({ id, epoch: e });
          },
        });
        flush();
        post({ id, value: r });
        return;
      }
      case 'evaluate':
        post({ id, value: await trainer.evaluateAsync(args[0], args[1]) });
        return;
      case 'toGGUF': {
        const bytes = await trainer.toGGUFAsync();
        post({ id, value: bytes }, [bytes.buffer as ArrayBuffer]);
        return;
      }
      case 'dispose':
        trainer.dispose();
        trainer = null;
        post({ id, value: null });
        return;
      default:
        throw Object.assign(new Error(`unknown operation ${op}`), { code: 'invalid-argument' });
    }
  } catch (e) {
    const err = e as { message?: string; code?: string };
    post({ id, error: { message: err?.message ?? String(e), code: typeof err?.code === 'string' ? err.code : 'internal' } });
  }
}

if (isNode) {
  const { parentPort } = await nodeImport<typeof import('node:worker_threads')>('worker_threads');
  if (parentPort) {
    post = (m, transfer) => parentPort.postMessage(m, transfer as any);
    parentPort.on('message', (m: Req) => void handle(m));
  }
} else {
  const scope = self as unknown as { onmessage: ((e: MessageEvent<Req>) => void) | null; postMessage(m: unknown, t?: Transferable[]): void };
  post = (m, transfer) => scope.postMessage(m, transfer ?? []);
  scope.onmessage = (e) => void handle(e.data);
}
