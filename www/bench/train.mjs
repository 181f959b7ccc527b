// MNIST training time per epoch of the wasm engine in Node and in headless Chromium (one thread,
// in the Trainer's worker), side by side with the native CLI (`ggweb train mnist --threads 1`),
// on the same data and settings:
//
//   node bench/train.mjs [--native PATH/TO/ggweb] [--model fc|cnn] [--images 6000] [--batch 32]
//                        [--physical N] [--lr 0.002] [--variants relaxed,simd,chromium] [--rounds 2] [--json]
//
// ggml mnist-train's settings: --images 60000 --batch 1000 --physical 500 --lr 0.001. One epoch per
// run; rounds interleave the native CLI and the variants so that they see the same machine load, and
// the best round is kept. Seconds per epoch include the validation pass (5 %) on every surface.
// `chromium` opens www/demo/train.html (after scripts/build-web.sh) in a fresh page per round.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { RELAXED_FLAGS } from './node-flags.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const WWW = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROOT = path.resolve(WWW, '..');
const DATA = path.join(ROOT, '..', 'shared', 'fixtures', 'mnist');
const cfg = {
  model: opt('model', 'fc'),
  images: Number(opt('images', 6000)),
  batch: Number(opt('batch', 32)),
  lr: Number(opt('lr', 0.002)),
};
cfg.physical = Number(opt('physical', cfg.batch));
const native = opt('native', path.join(ROOT, 'target', 'release', 'ggweb'));
const variants = opt('variants', 'relaxed,simd,chromium').split(',');
const rounds = Number(opt('rounds', 2));

if (process.env.GGWEB_TRAIN_CHILD) {
  // One run of the npm package in this process: its Trainer (worker_threads) on one build.
  const { Trainer } = await import('../dist/index.js');
  const v = process.env.GGWEB_TRAIN_CHILD;
  const t = await Trainer.create({
    model: cfg.model, epochs: 1, batchSize: cfg.batch, physicalBatchSize: cfg.physical, lr: cfg.lr,
    engine: { threads: false, relaxed: v === 'relaxed', simd: v !== 'scalar' },
  });
  const r = await t.fit({
    imagesIdx: fs.readFileSync(path.join(DATA, 'train-images-idx3-ubyte.gz')),
    labelsIdx: fs.readFileSync(path.join(DATA, 'train-labels-idx1-ubyte.gz')),
    limit: cfg.images,
  });
  await t.dispose();
  console.log(JSON.stringify({ seconds: r.epochs[0].seconds, validation: r.epochs[0].validation.accuracy, build: t.info.build }));
  process.exit(0);
}

function runNative() {
  const out = path.join(os.tmpdir(), `ggweb-train-bench-${process.pid}.gguf`);
  const r = spawnSync(native, ['train', 'mnist', '--model', cfg.model, '--data', DATA, '--epochs', '1', '--batch', String(cfg.batch),
    '--physical-batch', String(cfg.physical), '--lr', String(cfg.lr), '--limit', String(cfg.images), '--threads', '1', '--out', out, '--json'], { encoding: 'utf8' });
  fs.rmSync(out, { force: true });
  if (r.status !== 0) throw new Error(`native: ${r.stderr}`);
  const line = r.stdout.split('\n').find((l) => l.includes('"epoch"'));
  const j = JSON.parse(line);
  return { seconds: j.seconds, validation: j.val_accuracy };
}

function runNode(v) {
  const flags = v === 'relaxed' ? [...RELAXED_FLAGS, '--no-liftoff'] : [];
  const r = spawnSync(process.execPath, [...flags, fileURLToPath(import.meta.url), ...args], {
    encoding: 'utf8', env: { ...process.env, GGWEB_TRAIN_CHILD: v },
  });
  if (r.status !== 0) throw new Error(`node ${v}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

let server = null;
async function runChromium() {
  const { default: puppeteer } = await import('puppeteer-core');
  if (!server) {
    process.env.PORT = '0';
    server = (await import(path.join(ROOT, 'scripts', 'serve.mjs'))).default;
    await new Promise((r) => (server.listening ? r() : server.once('listening', r)));
  }
  const browser = await puppeteer.launch({ executablePath: process.env.CHROME || '/usr/bin/chromium', headless: true, protocolTimeout: 1_200_000, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  try {
    const page = await browser.newPage();
    const q = `n=${cfg.images}&epochs=1&batch=${cfg.batch}&pbatch=${cfg.physical}&lr=${cfg.lr}&model=${cfg.model}&autostart=1`;
    await page.goto(`http://localhost:${server.address().port}/demo/train.html?${q}`);
    await page.waitForFunction(() => window.__train?.done || window.__train?.error, { timeout: 1_200_000, polling: 500 });
    const s = await page.evaluate(() => window.__train);
    if (s.error) throw new Error(`chromium: ${s.error}`);
    return { seconds: s.epochs[0].seconds, validation: s.epochs[0].validation.accuracy, build: s.info.build };
  } finally {
    await browser.close();
  }
}

const best = {};
const keep = (k, r) => {
  if (!best[k] || r.seconds < best[k].seconds) best[k] = r;
};
for (let i = 0; i < rounds; i++) {
  keep('native', runNative());
  for (const v of variants) keep(v, v === 'chromium' ? await runChromium() : runNode(v));
}
server?.close();
if (args.includes('--json')) console.log(JSON.stringify({ cfg, best }));
else {
  console.log(`mnist-${cfg.model}, 1 epoch on ${cfg.images} images, batch ${cfg.batch} (${cfg.physical} per graph), lr ${cfg.lr}; best of ${rounds}, load ${os.loadavg()[0].toFixed(1)}`);
  for (const [k, r] of Object.entries(best)) {
    const rel = k === 'native' ? '' : `  ${((best.native.seconds / r.seconds) * 100).toFixed(0)} % of native`;
    console.log(`${k.padEnd(9)} ${r.build ? `(${r.build})`.padEnd(10) : ''.padEnd(10)} ${r.seconds.toFixed(2)} s/epoch  validation ${(r.validation * 100).toFixed(2)} %${rel}`);
  }
}
