// ggweb beside wllama (llama.cpp compiled to wasm) in one headless Chromium session: SmolLM2-135M
// Q4_1 (or $MODEL, a file in the model cache), a ~119-token prompt, 32 greedy tokens; a fresh
// cross-origin isolated page per run, interleaved, $ROUNDS rounds (default 2). Issue 15's anchor,
// measured as ../shared/notes/browser-anchor.md describes. A benchmark, not a test:
//   node www/bench/wllama.mjs            (after scripts/build-web.sh; fetches nothing but wllama)
// wllama 3.13.0 comes from npm into ~/.cache/ggweb/tools/wllama-3.13.0 (once). Prints one line per
// run and a summary of tok/s with ggweb / wllama ratios at the same thread count.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const WLLAMA_VERSION = '3.13.0';
const cache = process.env.GGWEB_CACHE || path.join(os.homedir(), '.cache', 'ggweb');
const wdir = path.join(cache, 'tools', `wllama-${WLLAMA_VERSION}`);
const pkg = path.join(wdir, 'node_modules', '@wllama', 'wllama');
if (!fs.existsSync(path.join(pkg, 'esm', 'index.js'))) {
  fs.mkdirSync(wdir, { recursive: true });
  execFileSync('npm', ['install', '--prefix', wdir, '--no-audit', '--no-fund', '--loglevel=error', `@wllama/wllama@${WLLAMA_VERSION}`], { stdio: 'inherit' });
}
process.env.GGWEB_VENDOR_WLLAMA = path.join(pkg, 'esm');
const MODEL = process.env.MODEL || 'SmolLM2-135M-Instruct.Q4_1.gguf';
const ROUNDS = Number(process.env.ROUNDS || 2);
const PROMPT =
  'The history of computing is a story of people who wanted to make machines think faster than they could. ' +
  'In the early days, engineers built enormous rooms full of vacuum tubes that consumed as much power as a small town, ' +
  'and a single mistake in the wiring could take weeks to find. Later, transistors replaced the tubes, and integrated ' +
  'circuits packed thousands of them onto a chip the size of a fingernail. Today a phone in your pocket is more powerful ' +
  'than all of the computers that sent astronauts to the moon. One morning, a young engineer named Lina opened her old laptop and discovered that';

process.env.PORT = '0';
const { default: server } = await import(path.join(ROOT, 'scripts', 'serve.mjs'));
await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
const base = `http://localhost:${server.address().port}`;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROME || '/usr/bin/chromium', headless: true, protocolTimeout: 900000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage'],
});

const configs = [
  { engine: 'ggweb', threads: 1, label: 'ggweb threads build, 1 thread' },
  { engine: 'wllama', threads: 1, label: 'wllama, 1 thread' },
  { engine: 'ggweb', threads: 2, label: 'ggweb threads build, 2 threads' },
  { engine: 'wllama', threads: 2, label: 'wllama, 2 threads' },
  { engine: 'ggweb-st', threads: 1, label: 'ggweb relaxed-SIMD build (no threads), 1 thread' },
];
const rows = [];
try {
  for (let round = 1; round <= ROUNDS; round++) {
    for (const cfg of configs) {
      const page = await browser.newPage();
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(`${base}/test-e2e/blank.html${cfg.engine === 'ggweb-st' ? '?coi=0' : ''}`);
      const r = await page.evaluate(async (cfg, url, prompt) => {
        const t0 = performance.now();
        if (cfg.engine === 'wllama') {
          const { Wllama } = await import('/vendor/wllama/index.js');
          const w = new Wllama({ default: '/vendor/wllama/wasm/wllama.wasm' }, { suppressNativeLog: true });
          await w.loadModelFromUrl(url, { n_threads: cfg.threads, n_ctx: 512 });
          const load = (performance.now() - t0) / 1000;
          const out = await w.createCompletion({ prompt, max_tokens: 32, temperature: 0 });
          const t = out.timings ?? {};
          const text = out.choices?.[0]?.text ?? '';
          await w.exit();
          return { load, prompt: t.prompt_per_second, gen: t.predicted_per_second, promptN: t.prompt_n, genN: t.predicted_n, text, isolated: self.crossOriginIsolated };
        }
        const { LLM } = await import('/dist/index.js');
        const engine = cfg.engine === 'ggweb-st' ? {} : { threads: true, nThreads: cfg.threads };
        const llm = await LLM.loadInWorker(url, { nCtx: 512, cache: false, engine });
        const load = (performance.now() - t0) / 1000;
        const g = await llm.complete(prompt, { maxTokens: 32, temperature: 0 });
        const cpuThreads = llm.loadInfo.backendInfo.cpuThreads;
        await llm.free();
        return { load, prompt: g.stats.promptTokPerS, gen: g.stats.genTokPerS, promptN: g.stats.promptEvaluated, genN: g.stats.generatedTokens, text: g.text, cpuThreads, isolated: self.crossOriginIsolated };
      }, cfg, `/models/${MODEL}`, PROMPT);
      await page.close();
      rows.push({ round, ...cfg, ...r, errors });
      console.log(`round ${round} ${cfg.label}: load ${r.load.toFixed(2)} s, prompt ${r.promptN} tok ${r.prompt?.toFixed(1)} tok/s, gen ${r.genN} tok ${r.gen?.toFixed(1)} tok/s` +
        `${r.cpuThreads ? ` (cpuThreads ${r.cpuThreads})` : ''} ${JSON.stringify(r.text.slice(0, 48))}${errors.length ? ` errors: ${errors.join(' | ')}` : ''}`);
    }
  }
  const range = (v) => `${Math.min(...v).toFixed(1)}–${Math.max(...v).toFixed(1)}`;
  console.log(`\n${MODEL}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model}), Chromium ${(await browser.version())}`);
  console.log('| engine | prompt tok/s | generation tok/s | load s |\n|---|---|---|---|');
  for (const cfg of configs) {
    const rs = rows.filter((r) => r.label === cfg.label);
    console.log(`| ${cfg.label} | ${range(rs.map((r) => r.prompt))} | ${range(rs.map((r) => r.gen))} | ${range(rs.map((r) => r.load))} |`);
  }
  const med = (v) => v.sort((a, b) => a - b)[Math.floor(v.length / 2)];
  for (const n of [1, 2]) {
    const g = rows.filter((r) => r.engine === 'ggweb' && r.threads === n);
    const w = rows.filter((r) => r.engine === 'wllama' && r.threads === n);
    console.log(`ggweb / wllama at ${n} thread${n > 1 ? 's' : ''}: prompt ${(med(g.map((r) => r.prompt)) / med(w.map((r) => r.prompt))).toFixed(2)}×, generation ${(med(g.map((r) => r.gen)) / med(w.map((r) => r.gen))).toFixed(2)}×`);
  }
  fs.mkdirSync(path.join(ROOT, 'test-output'), { recursive: true });
  fs.writeFileSync(path.join(ROOT, 'test-output', 'wllama-bench.json'), JSON.stringify(rows, null, 2));
} finally {
  await browser.close();
  server.close();
}
