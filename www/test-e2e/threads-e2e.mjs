// The threads build in headless Chromium (puppeteer-core driving /usr/bin/chromium), served by
// scripts/serve.mjs: on a cross-origin isolated page init() picks the threads build; MNIST fc/cnn
// and SmolLM2 Q4_1 logits on 1, 2 and 3 threads equal the single-thread relaxed-SIMD build's bit
// for bit (both loaded in the page); MNIST accuracy and SmolLM2's greedy tokens through the
// package on the threads build, on the page and in a worker (LLM.loadInWorker: nested engine
// workers). A page without isolation (?coi=0) falls back to the single-thread build, says why, and
// still gives the golden results. Exit code 0 on success.
// THREADS_BENCH=1 instead measures SmolLM2 prompt / generation tok/s in a worker: the threads
// build at 1 and 2 threads vs the single-thread build (fresh page per run, 2 rounds); not a test.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { SMOLLM2, PROMPT_IDS, GREEDY_7, greedy7Matches, PROMPT } from '../test/helpers.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CHROME = process.env.CHROME || '/usr/bin/chromium';
const MODEL_URL = '/models/' + path.basename(SMOLLM2);
const PAGE = '/test-e2e/blank.html';

process.env.PORT = '0';
const { default: server } = await import(path.join(ROOT, 'scripts', 'serve.mjs'));
await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
const base = `http://localhost:${server.address().port}`;
const browser = await puppeteer.launch({
  executablePath: CHROME,
  headless: true,
  protocolTimeout: 900000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage'],
});
let failed = false;
const check = (cond, msg) => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${msg}`);
  if (!cond) failed = true;
};
async function open(query = '') {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.log(`[pageerror] ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && console.log(`[console] ${m.text()}`));
  await page.goto(`${base}${PAGE}${query}`);
  return page;
}

// A long prompt (~120 tokens, as in ../shared/notes/browser-anchor.md) for the benchmark.
const LONG_PROMPT =
  'The history of computing is a story of people who wanted to make machines think faster than they could. ' +
  'In the early days, engineers built enormous rooms full of vacuum tubes that consumed as much power as a small town, ' +
  'and a single mistake in the wiring could take weeks to find. Later, transistors replaced the tubes, and integrated ' +
  'circuits packed thousands of them onto a chip the size of a fingernail. Today a phone in your pocket is more powerful ' +
  'than all of the computers that sent astronauts to the moon. One morning, a young engineer named Lina opened her old laptop and discovered that';

try {
  if (process.env.THREADS_BENCH === '1') {
    const rows = [];
    for (let round = 1; round <= 2; round++) {
      for (const cfg of [{ name: 'single-thread (relaxed)', q: '?coi=0', engine: {} }, { name: 'threads, 1', q: '', engine: { threads: true, nThreads: 1 } }, { name: 'threads, 2', q: '', engine: { threads: true, nThreads: 2 } }]) {
        const page = await open(cfg.q);
        const r = await page.evaluate(async (url, prompt, engine) => {
          const { LLM } = await import('/dist/index.js');
          const llm = await LLM.loadInWorker(url, { nCtx: 512, cache: false, engine });
          await llm.complete('Hello', { maxTokens: 4, temperature: 0 }); // warm-up
          await llm.reset();
          const g = await llm.complete(prompt, { maxTokens: 32, temperature: 0 });
          const out = { stats: g.stats, kernels: llm.loadInfo.kernels, cpuThreads: llm.loadInfo.backendInfo.cpuThreads, text: g.text };
          await llm.free();
          return out;
        }, MODEL_URL, LONG_PROMPT, cfg.engine);
        await page.close();
        rows.push({ round, name: cfg.name, ...r });
        console.log(`round ${round} ${cfg.name}: prompt ${r.stats.promptTokens} tok ${r.stats.promptTokPerS.toFixed(1)} tok/s, gen ${r.stats.generatedTokens} tok ${r.stats.genTokPerS.toFixed(1)} tok/s (cpuThreads ${r.cpuThreads}) ${JSON.stringify(r.text.slice(0, 40))}`);
      }
    }
  } else {
    // ---- cross-origin isolated: the threads build, 1/2/3 threads vs the single-thread build ----
    let page = await open();
    const r = await page.evaluate(async (modelUrl, promptIds) => {
      const g = await import('/dist/index.js');
      const info = await g.init({ nThreads: 3 });
      const th = await import('/wasm/threads/ggweb.js');
      const st = await import('/wasm/relaxed/ggweb.js');
      await st.default({ module_or_path: '/wasm/relaxed/ggweb_bg.wasm' });
      const bits = (a) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));
      const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
      const set = await g.loadMnistSet('/demo/assets/t10k-images-idx3-ubyte.gz', '/demo/assets/t10k-labels-idx1-ubyte.gz');
      const images = set.images.subarray(0, 64 * 784);
      const mnist = {};
      for (const kind of ['fc', 'cnn']) {
        const bytes = new Uint8Array(await (await fetch(`/demo/assets/mnist-${kind}-f32.gguf`)).arrayBuffer());
        const s = st.MnistCore.fromBytes(bytes, 'cpu');
        const want = bits(s.predictBatch(images));
        s.free();
        mnist[kind] = [];
        for (const n of [1, 2, 3]) {
          await g.setThreads(n);
          const m = th.MnistCore.fromBytes(bytes, 'cpu');
          mnist[kind].push(same(bits(m.predictBatch(images)), want));
          m.free();
        }
      }
      const file = new Uint8Array(await (await fetch(modelUrl)).arrayBuffer());
      const load = (e) => {
        const s = new e.ModelStream(file.length);
        for (let o = 0; o < file.length; o += 1 << 22) s.push(file.subarray(o, o + (1 << 22)));
        return e.LlmCore.load(s, 64, 'cpu');
      };
      const run = (llm) => [bits(llm.logits(Uint32Array.from(promptIds))), bits(llm.logits(Uint32Array.of(761)))];
      const s = load(st);
      const want = run(s);
      s.free();
      const llm = [];
      // (1 thread: www/test/threads.test.mjs, in Node.)
      for (const n of [2, 3]) {
        await g.setThreads(n);
        const m = load(th);
        const got = run(m);
        m.free();
        llm.push(same(got[0], want[0]) && same(got[1], want[1]));
      }
      // Through the package on the threads build (3 threads).
      await g.setThreads(0);
      const fc = await g.Mnist.load('/demo/assets/mnist-fc-f32.gguf');
      const ev = await fc.evaluate(set.images.subarray(0, 2000 * 784), set.labels.subarray(0, 2000));
      const model = await g.LLM.load(modelUrl, { nCtx: 128, cache: false });
      const gen = await model.complete('Once upon a time, there was a little robot who', { maxTokens: 7, temperature: 0 });
      const backendInfo = model.loadInfo.backendInfo;
      model.free();
      const w = await g.LLM.loadInWorker(modelUrl, { nCtx: 128, cache: false, engine: { nThreads: 2 } });
      const wgen = await w.complete('Once upon a time, there was a little robot who', { maxTokens: 7, temperature: 0 });
      const wInfo = w.loadInfo.backendInfo;
      await w.free();
      return { isolated: self.crossOriginIsolated, info, mnist, llm, accuracy2000: ev.accuracy, correct: ev.correct, tokens: gen.tokens, backendInfo, wTokens: wgen.tokens, wInfo };
    }, MODEL_URL, PROMPT_IDS);
    check(r.isolated === true && r.info.build === 'threads' && r.info.threads === 3 && /^threads build, 3 threads: cross-origin isolated/.test(r.info.reason),
      `isolated page: ${r.info.build} build, ${r.info.threads} threads — ${r.info.reason}`);
    for (const kind of ['fc', 'cnn']) check(r.mnist[kind].every(Boolean), `mnist-${kind}: logits on 1/2/3 threads = single-thread build bit for bit: ${r.mnist[kind]}`);
    check(r.llm.every(Boolean), `SmolLM2: prompt + next-token logits on 2/3 threads = single-thread build bit for bit: ${r.llm}`);
    check(r.backendInfo.cpuThreads === 3, `LLM.load on the threads build: cpuThreads ${r.backendInfo.cpuThreads}`);
    check(greedy7Matches(r.tokens), `SmolLM2 greedy 7 on 3 threads: ${JSON.stringify(r.tokens)}`);
    check(greedy7Matches(r.wTokens) && r.wInfo.cpuThreads === 2, `SmolLM2 greedy 7 in a worker on 2 threads: ${JSON.stringify(r.wTokens)}`);
    check(r.accuracy2000 > 0.97, `mnist-fc on the threads build: ${r.correct}/2000`);
    await page.close();

    // ---- not isolated: the single-thread build, the same results ----
    page = await open('?coi=0');
    const f = await page.evaluate(async () => {
      const g = await import('/dist/index.js');
      const info = await g.init({ nThreads: 3 });
      const set = await g.loadMnistSet('/demo/assets/t10k-images-idx3-ubyte.gz', '/demo/assets/t10k-labels-idx1-ubyte.gz');
      const fc = await g.Mnist.load('/demo/assets/mnist-fc-f32.gguf');
      const ev = await fc.evaluate(set.images.subarray(0, 2000 * 784), set.labels.subarray(0, 2000));
      return { isolated: self.crossOriginIsolated, info, correct: ev.correct, support: g.threadsSupport() };
    });
    check(f.isolated === false && f.info.build === 'relaxed' && f.info.threads === 1 && /not cross-origin isolated/.test(f.info.reason) && !f.support.ok,
      `page without isolation: ${f.info.build} build — ${f.info.reason}`);
    check(f.correct === r.correct, `mnist-fc without isolation: ${f.correct}/2000 (threads build: ${r.correct})`);
    await page.close();
  }
} catch (e) {
  console.log(`FAIL ${e.stack ?? e}`);
  failed = true;
} finally {
  await browser.close();
  server.close();
}
if (failed) process.exit(1);
console.log('threads e2e: all passed');
