// mul_mat GFLOP/s of the wasm engine (Node, one thread as in the browser), side by side with the
// native CLI: weights W [K, M] of each type (random, quantized by the engine) times f32 X [K, N].
//
//   node bench/matmul.mjs [--native PATH/TO/ggweb] [--size 4096] [--n 1,16] [--types f32,q4_0,q8_0]
//                         [--variants simd,scalar] [--rounds 3] [--reps 5] [--clock wall|cpu] [--json]
//
// M = K = size on both sides (the native `ggweb bench` measures square weights). Each variant
// runs in its own Node process (the engine is loaded once per process) and the rounds interleave
// variants and the native CLI, so on a shared machine they see the same load; the figure kept is
// the best round (best of `reps` computes per round). A variant is `relaxed` (SIMD128 + relaxed
// SIMD's fused multiply-add), `simd`, `scalar`, or `NAME=KIND:path/to/ggweb_bg.wasm` (A/B of two
// builds of one kind).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import os from 'node:os';
import { RELAXED_FLAGS } from './node-flags.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const size = Number(opt('size', '4096'));
const ns = opt('n', '1,16').split(',').map(Number);
const types = opt('types', 'f32,q4_0,q8_0').split(',');
const reps = Number(opt('reps', '5'));

if (opt('child', null) !== null) {
  // Child: one engine build, every type × n; prints {type: {n: gflops}}.
  const { init, Graph } = await import('../dist/index.js');
  const spec = opt('child', 'simd');
  const [kind, path] = spec.includes(':') ? spec.split(/:(.*)/s) : [spec, undefined];
  // threads: false: the single-thread builds (Node would pick the threads build by default).
  const info = await init({ threads: false, simd: kind !== 'scalar', relaxed: kind === 'relaxed', ...(path ? { wasm: path } : {}) });
  // --clock cpu: this process's CPU time (ms) instead of wall time, for A/B runs on a loaded
  // machine (time slices lost to other processes do not count; cache and SMT sharing still do).
  const now = opt('clock', 'wall') === 'cpu'
    ? () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; }
    : () => performance.now();
  const K = size, M = size;
  const rand = (n, seed) => {
    let s = seed >>> 0;
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
    return out;
  };
  const W = rand(K * M, 1);
  const out = { kernels: info.kernels, results: {} };
  if (kind === 'relaxed' && !info.relaxed) throw new Error('the relaxed-SIMD build did not load');
  for (const type of types) {
    out.results[type] = {};
    for (const N of ns) {
      const g = new Graph();
      const a = g.tensor(type, [K, M], W), b = g.tensor('f32', [K, N], rand(K * N, 2));
      const c = g.mulMat(a, b);
      g.computeSync(c); // warm-up (allocates, compiles)
      let best = Infinity;
      for (let r = 0; r < reps; r++) {
        const t0 = now();
        g.computeSync(c);
        best = Math.min(best, now() - t0);
      }
      out.results[type][N] = (2 * K * M * N) / (best / 1000) / 1e9;
      g.free();
    }
  }
  console.log(JSON.stringify(out));
  process.exit(0);
}

const self = fileURLToPath(import.meta.url);
const variants = opt('variants', 'relaxed,simd,scalar').split(',').map((v) => {
  const eq = v.indexOf('=');
  return eq < 0 ? { name: v, spec: v } : { name: v.slice(0, eq), spec: v.slice(eq + 1) };
});
const native = opt('native', null);
const rounds = Number(opt('rounds', '3'));
const best = {}; // name -> type -> n -> gflops
const kernels = {};
const keep = (name, type, n, v) => {
  best[name] ??= {};
  best[name][type] ??= {};
  best[name][type][n] = Math.max(best[name][type][n] ?? 0, v);
};
const load = [];
for (let round = 0; round < rounds; round++) {
  load.push(os.loadavg()[0]);
  for (const v of variants) {
    const r = spawnSync(process.execPath, [...RELAXED_FLAGS, '--no-liftoff', self, '--child', v.spec, '--size', `${size}`, '--n', ns.join(','),
      '--types', types.join(','), '--reps', `${reps}`, '--clock', opt('clock', 'wall')], { encoding: 'utf8', maxBuffer: 1 << 24 });
    if (r.status !== 0) throw new Error(`variant ${v.name} failed:\n${r.stderr}`);
    const o = JSON.parse(r.stdout.trim().split('\n').pop());
    kernels[v.name] = o.kernels;
    for (const t of types) for (const n of ns) keep(v.name, t, n, o.results[t][n]);
  }
  if (native) {
    const r = spawnSync(native, ['bench', '--json', '--threads', '1', '--size', `${size}`, '--n', ns.join(','),
      '--types', types.join(','), '--seconds', '0.3'], { encoding: 'utf8', maxBuffer: 1 << 24 });
    if (r.status !== 0) throw new Error(`native bench failed:\n${r.stderr}`);
    for (const row of JSON.parse(r.stdout)) keep('native', row.type, row.n, row.gflops);
  }
}
load.push(os.loadavg()[0]);

const names = [...variants.map((v) => v.name), ...(native ? ['native'] : [])];
if (args.includes('--json')) {
  console.log(JSON.stringify({ M: size, K: size, rounds, reps, load, kernels, gflops: best }));
} else {
  console.log(`mul_mat GFLOP/s, M = K = ${size}, 1 thread, best of ${rounds} rounds × ${reps}; load average ${load.map((l) => l.toFixed(1)).join(' → ')}`);
  for (const v of variants) console.log(`  ${v.name}: ${kernels[v.name]}`);
  const head = ['type', 'n', ...names, ...variants.filter(() => native).map((v) => `${v.name}/native`)];
  console.log(head.join('\t'));
  for (const t of types) {
    for (const n of ns) {
      const row = [t, n, ...names.map((x) => best[x]?.[t]?.[n]?.toFixed(2) ?? '-')];
      if (native) for (const v of variants) row.push(`${((100 * best[v.name][t][n]) / best.native[t][n]).toFixed(0)} %`);
      console.log(row.join('\t'));
    }
  }
}
