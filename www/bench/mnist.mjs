// MNIST t10k evaluation throughput (images/s) of the wasm engine in Node (one thread, as in the
// browser), side by side with the native CLI (`ggweb mnist --threads 1`).
//
//   node bench/mnist.mjs [--native PATH/TO/ggweb] [--models fc,cnn] [--variants relaxed,simd,scalar,chromium]
//                        [--rounds 3] [--json]
//
// Each variant runs in its own Node process; rounds interleave variants and the native CLI so they
// see the same machine load; the best round is kept. Each process evaluates twice: the first
// figure is what a fresh page gets (wasm tier-up included), "(2nd)" the steady state. Variants as in bench/matmul.mjs
// (`relaxed`, `simd`, `scalar`, `NAME=KIND:path/to/ggweb_bg.wasm`); `chromium` runs the same two
// evaluations in a fresh headless Chromium page per round (/usr/bin/chromium through puppeteer-core,
// the package's default build for that engine, main thread), after `scripts/build-web.sh`.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import os from 'node:os';
import path from 'node:path';
import { RELAXED_FLAGS } from './node-flags.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const models = opt('models', 'fc,cnn').split(',');
const here = path.dirname(fileURLToPath(import.meta.url));
const assets = path.join(here, '../../crate/assets');

if (opt('child', null) !== null) {
  const { init, Mnist, loadMnistSet } = await import('../dist/index.js');
  const spec = opt('child', 'simd');
  const [kind, wasm] = spec.includes(':') ? spec.split(/:(.*)/s) : [spec, undefined];
  const info = await init({ simd: kind !== 'scalar', relaxed: kind === 'relaxed', ...(wasm ? { wasm } : {}) });
  const set = await loadMnistSet(path.join(assets, 't10k-images-idx3-ubyte.gz'), path.join(assets, 't10k-labels-idx1-ubyte.gz'));
  const out = { relaxed: info.relaxed, simd: info.simd, results: {} };
  for (const m of models) {
    const model = await Mnist.load(path.join(assets, `mnist-${m}-f32.gguf`));
    // The first evaluation includes the engine's tier-up (baseline → optimized wasm code); later
    // ones show the steady state.
    const r = await model.evaluate(set.images, set.labels);
    const again = await model.evaluate(set.images, set.labels);
    out.results[m] = { imagesPerSecond: r.imagesPerSecond, warm: again.imagesPerSecond, accuracy: r.accuracy };
    model.free();
  }
  console.log(JSON.stringify(out));
  process.exit(0);
}

// One fresh Chromium page: the default build, both models, two evaluations each (as the children).
async function chromiumRun() {
  const { default: puppeteer } = await import('puppeteer-core');
  process.env.PORT = '0';
  // Imported once (module cache): the server stays up for every round and is closed at the end.
  const { default: server } = await import(path.join(here, '../../scripts/serve.mjs'));
  if (!server.listening) await new Promise((r) => server.once('listening', r));
  chromiumServer = server;
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROME || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`http://localhost:${server.address().port}/demo/index.html`);
    return await page.evaluate(async (models) => {
      const { init, Mnist, loadMnistSet } = await import('/dist/index.js');
      const info = await init();
      const set = await loadMnistSet('/demo/assets/t10k-images-idx3-ubyte.gz', '/demo/assets/t10k-labels-idx1-ubyte.gz');
      const out = { relaxed: info.relaxed, simd: info.simd, results: {} };
      for (const m of models) {
        const model = await Mnist.load(`/demo/assets/mnist-${m}-f32.gguf`);
        const r = await model.evaluate(set.images, set.labels);
        const again = await model.evaluate(set.images, set.labels);
        out.results[m] = { imagesPerSecond: r.imagesPerSecond, warm: again.imagesPerSecond, accuracy: r.accuracy };
        model.free();
      }
      return out;
    }, models);
  } finally {
    await browser.close();
  }
}
let chromiumServer = null;

const self = fileURLToPath(import.meta.url);
const variants = opt('variants', 'relaxed,simd,scalar').split(',').map((v) => {
  const eq = v.indexOf('=');
  return eq < 0 ? { name: v, spec: v } : { name: v.slice(0, eq), spec: v.slice(eq + 1) };
});
const native = opt('native', null);
const rounds = Number(opt('rounds', '3'));
const best = {};
const keep = (name, m, v) => {
  best[name] ??= {};
  best[name][m] = Math.max(best[name][m] ?? 0, v);
};
const load = [];
for (let round = 0; round < rounds; round++) {
  load.push(os.loadavg()[0]);
  for (const v of variants) {
    let o;
    if (v.spec === 'chromium') {
      o = await chromiumRun();
    } else {
      const r = spawnSync(process.execPath, [...RELAXED_FLAGS, '--no-liftoff', self, '--child', v.spec, '--models', models.join(',')],
        { encoding: 'utf8', maxBuffer: 1 << 24 });
      if (r.status !== 0) throw new Error(`variant ${v.name} failed:\n${r.stderr}`);
      o = JSON.parse(r.stdout.trim().split('\n').pop());
    }
    if (v.spec === 'relaxed' && !o.relaxed) throw new Error('the relaxed-SIMD build did not load');
    if (v.spec === 'chromium' && round === 0) console.error(`chromium loaded the ${o.relaxed ? 'relaxed-SIMD' : o.simd ? 'SIMD128' : 'scalar'} build`);
    for (const m of models) {
      keep(v.name, m, o.results[m].imagesPerSecond);
      keep(`${v.name} (2nd)`, m, o.results[m].warm);
    }
  }
  if (native) {
    for (const m of models) {
      const r = spawnSync(native, ['mnist', '--model', m, '--threads', '1', '--json'], { encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`native mnist failed:\n${r.stderr}`);
      keep('native', m, JSON.parse(r.stdout).images_per_s);
    }
  }
}
load.push(os.loadavg()[0]);
if (chromiumServer) {
  chromiumServer.closeAllConnections?.();
  await new Promise((r) => chromiumServer.close(r));
}
const names = [...variants.flatMap((v) => [v.name, `${v.name} (2nd)`]), ...(native ? ['native'] : [])];
if (args.includes('--json')) {
  console.log(JSON.stringify({ rounds, load, imagesPerSecond: best }));
} else {
  console.log(`MNIST t10k images/s, 1 thread, best of ${rounds} rounds; load average ${load.map((l) => l.toFixed(1)).join(' → ')}`);
  console.log(['model', ...names, ...(native ? variants.map((v) => `${v.name}/native`) : [])].join('\t'));
  for (const m of models) {
    const row = [m, ...names.map((x) => Math.round(best[x][m]))];
    if (native) for (const v of variants) row.push(`${((100 * best[v.name][m]) / best.native[m]).toFixed(0)} % (2nd ${((100 * best[`${v.name} (2nd)`][m]) / best.native[m]).toFixed(0)} %)`);
    console.log(row.join('\t'));
  }
}
