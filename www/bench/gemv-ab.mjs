// A/B of two wasm builds' GEMV (n = 1 over weights repacked as a model's load repacks them) in
// ONE Node process: both builds' modules side by side, their runs alternated in short bursts,
// each burst's A over the B burst beside it. A benchmark, not a test:
//
//   node --experimental-wasm-relaxed-simd --no-liftoff www/bench/gemv-ab.mjs --a www/wasm/relaxed
//        --b /tmp/old-relaxed [--shapes q8_0:896x256,...] [--bursts 30] [--runs 20] [--mib 0]
//        [--attn smollm2:150,qwen2.5:1024]   (--shapes '' for the attention alone)
//        [--page-touch on|off]
//
// --a / --b: directories of a single-thread build (ggweb.js + ggweb_bg.wasm, as build-wasm.sh
// writes www/wasm/relaxed). --mib 0 (default) re-reads one weight (the kernel from cache);
// above 0 each build rotates over copies holding more than that many MiB (from memory).
//
// Why in one process: on the shared 2-vCPU VMs the same GEMV in one process runs in one of two
// modes ~1.4x apart (q8_0 896x256 from L2: 9.5 or 14.5 GB/s, Zen 3, 2026-12-07), chosen per process
// or per weight and switching over seconds (host contention), so A and B in separate processes
// (gemv.mjs) compare modes as often as builds. Here both builds see the same mode burst by burst:
// the per-burst ratios are tight (0.9–1.1) where the per-process figures spread 1.5x. The build
// loaded second ran up to 1.2x faster from memory than the same build loaded first (the modules'
// memories lie differently), so the two builds run in two child processes, one per load order,
// and the result is the geometric mean of A/B over both (the order's bias cancels); each order's
// own median ratio is shown beside it.
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { RELAXED_FLAGS } from './node-flags.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const dirA = opt('a', null);
const dirB = opt('b', null);
if (!dirA || !dirB) throw new Error('usage: gemv-ab.mjs --a <build dir> --b <build dir> [--shapes ...]');
const shapes = opt('shapes', 'q4_1:576x1536,q8_0:896x256,q5_0:896x896,q4_K:4864x128,q6_K:4864x128')
  .split(',')
  .filter(Boolean)
  .map((s) => {
    const [type, dims] = s.split(':');
    const [k, m] = dims.split('x').map(Number);
    return { type, k, m };
  });
// Attention cases: model:positions[:queries] (ggweb::bench::LLM_ATTN's models), e.g.
// smollm2:150 (a generated token at position 150); none unless given.
const attn = (opt('attn', '') || '')
  .split(',')
  .filter(Boolean)
  .map((s) => {
    const [model, nkv, nt] = s.split(':');
    return { model, nkv: Number(nkv), nt: Number(nt ?? 1) };
  });
// --compare-attention 0: builds whose caches are laid out differently (the same random values
// land at other positions) are not compared.
const compareAttn = opt('compare-attention', '1') !== '0';
const bursts = Number(opt('bursts', '30'));
const runs = Number(opt('runs', '20'));
const mib = Number(opt('mib', '0'));
const BYTES = { q4_0: [18, 32], q4_1: [20, 32], q5_0: [22, 32], q5_1: [24, 32], q8_0: [34, 32], q4_K: [144, 256], q5_K: [176, 256], q6_K: [210, 256] };

async function load(dir) {
  const abs = path.resolve(dir);
  const g = await import(path.join(abs, 'ggweb.js'));
  await g.default({ module_or_path: fs.readFileSync(path.join(abs, 'ggweb_bg.wasm')) });
  return g;
}
const med = (v) => [...v].sort((x, y) => x - y)[v.length >> 1];
const f = (x) => x.toFixed(2);

if (opt('child', null) === null) {
  // Parent: one child per load order, then A/B over both.
  const self = fileURLToPath(import.meta.url);
  // The other options as given, --a and --b per child.
  const rest = args.filter((_, i) => !['--a', '--b'].includes(args[i]) && !['--a', '--b'].includes(args[i - 1]));
  const child = (first, second) => {
    const p = spawnSync(process.execPath, [...RELAXED_FLAGS, '--no-liftoff', self, ...rest, '--a', first, '--b', second, '--child', '1'], {
      encoding: 'utf8',
      maxBuffer: 1 << 24,
    });
    if (p.status !== 0) throw new Error(`child failed:\n${p.stderr}`);
    return JSON.parse(p.stdout.trim().split('\n').pop());
  };
  const ab = child(dirA, dirB);
  const ba = child(dirB, dirA);
  console.log(`A ${dirA}, B ${dirB}: GB/s of weights (attention: of KV cache), ${bursts} bursts of ${runs} runs a build, alternated, in each load order (${mib > 0 ? `from memory: > ${mib} MiB of copies` : 'one weight re-read'})`);
  console.log('| shape | A median | A best | B median | B best | A/B (A loaded first) | A/B (B loaded first) | A/B |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const key of Object.keys(ab)) {
    const [x, y] = [ab[key], ba[key]];
    const a = [...x.first, ...y.second];
    const b = [...x.second, ...y.first];
    const r1 = x.ratio;
    const r2 = 1 / y.ratio;
    console.log(`| ${key} | ${f(med(a))} | ${f(Math.max(...a))} | ${f(med(b))} | ${f(Math.max(...b))} | ${r1.toFixed(3)} | ${r2.toFixed(3)} | ${Math.sqrt(r1 * r2).toFixed(3)} |`);
  }
  process.exit(0);
}

const builds = [await load(dirA), await load(dirB)];
// --page-touch on|off: the GEMVs' page touches (`InitOptions.pageTouch`) in both builds (builds
// from before the choice existed keep touching); default as a build starts (touching).
const touch = opt('page-touch', null);
if (touch !== null) for (const g of builds) g.setCpuPageTouch?.(touch === 'on');
const out = {};

// One case: per build a set of benches to rotate over, the bytes one run reads, and a check.
const cases = [];
for (const s of shapes) {
  if (!BYTES[s.type]) throw new Error(`unknown type ${s.type}`);
  const bytes = (s.k / BYTES[s.type][1]) * BYTES[s.type][0] * s.m;
  const copies = mib > 0 ? Math.max(2, Math.ceil((mib * 2 ** 20) / bytes)) : 1;
  cases.push({
    key: `${s.type}:${s.k}x${s.m}`,
    bytes,
    make: (g) =>
      Array.from({ length: copies }, () => {
        const b = new g.MulMatBench('cpu', s.type, s.m, 1, s.k);
        b.repack();
        return b;
      }),
    // A kernel that is fast because it is wrong reports nothing: the first and the last
    // weight each build ran checked against the scalar reference.
    check: (sets, last) =>
      sets.forEach((set, x) => {
        for (const b of [set[0], set[last[x]]]) if (!b.verify()) throw new Error(`${s.type}: wrong products`);
      }),
  });
}
for (const a of attn) {
  cases.push({
    key: `attn ${a.model}@${a.nkv}x${a.nt}`,
    bytes: null,
    make: (g) => [new g.AttentionBench(a.model, a.nkv, a.nt)],
    // Both builds' outputs side by side (the attention's kernels keep their bits: any
    // difference is reported; one beyond f32 rounding fails).
    check: (sets) => {
      if (!compareAttn) return;
      const [x, y] = sets.map((set) => set[0].output());
      let worst = 0;
      for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs(x[i] - y[i]));
      if (!(worst <= 1e-4)) throw new Error(`attention ${a.model}: builds differ by ${worst}`);
      if (worst > 0) console.error(`attention ${a.model}: builds differ by ${worst} (not bit-identical)`);
    },
  });
}

for (const c of cases) {
  const sets = builds.map((g) => c.make(g));
  // One run's bytes: weights, or the KV cache the attention reads.
  const bytes = c.bytes ?? sets[0][0].kvBytes;
  const copies = sets[0].length;
  const next = [0, 0];
  const burst = async (x) => {
    const t0 = performance.now();
    for (let i = 0; i < runs; i++) {
      await sets[x][next[x]].run();
      next[x] = (next[x] + 1) % copies;
    }
    return (bytes * runs) / ((performance.now() - t0) / 1000) / 1e9;
  };
  await burst(0);
  await burst(1);
  const got = [[], []];
  for (let i = 0; i < bursts; i++) {
    // Which build goes first alternates, so neither always follows the other's cache state.
    const order = i % 2 ? [1, 0] : [0, 1];
    for (const x of order) got[x].push(await burst(x));
  }
  c.check(sets, next.map((n) => (n + copies - 1) % copies));
  for (const set of sets) for (const b of set) b.free();
  out[c.key] = { first: got[0], second: got[1], ratio: med(got[0].map((a, i) => a / got[1][i])) };
}
console.log(JSON.stringify(out));
