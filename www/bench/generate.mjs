// LLM prompt and generation speed of one wasm build in Node (the npm package's LLM class on the
// CPU), for A/B runs of two builds and for `node --cpu-prof` profiles of generation. A benchmark,
// not a test:
//
//   node --experimental-wasm-relaxed-simd --no-liftoff www/bench/generate.mjs [--build relaxed|simd|threads]
//        [--threads N] [--wasm path/to/ggweb_bg.wasm] [--model FILE] [--reps 5] [--tokens 32]
//        [--rounds 3] [--warm-up 0|1] [--temp 0] [--page-touch on|off]
//
// The prompt is one sentence repeated --reps times (5: ~116 tokens); --tokens greedy tokens
// follow unless the model ends first (`generated` says how many). Each round prints one JSON line; rounds after the first
// reuse the KV cache's prompt (promptEvaluated 1). --wasm loads another build of the same kind
// (e.g. a copy of www/wasm/relaxed from before a change). Run after scripts/build-web.sh.
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const build = opt('build', 'relaxed');
if (!['relaxed', 'simd', 'threads'].includes(build)) throw new Error(`--build must be relaxed, simd or threads, not ${build}`);
const model = opt('model', path.join(os.homedir(), '.cache', 'ggweb', 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf'));
const reps = Number(opt('reps', '5'));
const tokens = Number(opt('tokens', '32'));
const rounds = Number(opt('rounds', '3'));
const wasm = opt('wasm', undefined);
const threads = opt('threads', undefined);
const warmUp = opt('warm-up', '1') !== '0';
// The GEMVs' page touches (`InitOptions.pageTouch`): forced, or (default) timed at the load.
const pageTouch = opt('page-touch', undefined);
// 0: greedy; above 0 the package's default sampling chain (top-k 40, top-p 0.95, min-p 0.05).
const temperature = Number(opt('temp', '0'));

const { init, LLM } = await import(path.join(ROOT, 'www', 'dist', 'index.js'));
const info = await init({
  threads: build === 'threads',
  ...(threads ? { nThreads: Number(threads) } : {}),
  simd: true,
  relaxed: build !== 'simd',
  ...(wasm ? { wasm } : {}),
  ...(pageTouch ? { pageTouch: pageTouch === 'on' } : {}),
});
const llm = await LLM.load(model, { nCtx: 1024, backend: 'cpu', warmUp });
const prompt =
  'The history of the printing press begins in the fifteenth century, when Johannes Gutenberg developed a system of movable metal type. '.repeat(
    reps,
  );
for (let r = 0; r < rounds; r++) {
  const { stats: s } = await llm.complete(prompt, { maxTokens: tokens, temperature });
  console.log(
    JSON.stringify({
      build: info.build,
      threads: info.threads,
      promptEvaluated: s.promptEvaluated,
      promptTokPerS: +s.promptTokPerS.toFixed(1),
      generated: s.generatedTokens,
      genTokPerS: +s.genTokPerS.toFixed(1),
      ...(r === 0 ? { warmUpSeconds: +llm.loadInfo.warmUpSeconds.toFixed(3), pageTouch: llm.loadInfo.pageTouch, pageTouchProbe: llm.loadInfo.pageTouchProbe } : {}),
    }),
  );
}
process.exit(0);
