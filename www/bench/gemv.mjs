// The wasm GEMV (n = 1, the kernel of token generation) over LLM-shaped weights repacked as a
// model's load repacks them, in Node: GB/s of weights read, from cache (one weight, re-read) and
// from memory (rotating over copies that hold more than --mib MiB, the next copy read cold as
// in a model). The wasm side of `ggweb bench --llm`, for A/B runs of two builds. A benchmark,
// not a test:
//
//   node --experimental-wasm-relaxed-simd --no-liftoff www/bench/gemv.mjs [--builds relaxed,old=relaxed:path/to/ggweb_bg.wasm]
//        [--shapes q4_1:576x1536,...] [--mib 128] [--rounds 3] [--seconds 0.3] [--native target/release/ggweb]
//        [--page-touch on|off]
//
// --page-touch: the GEMVs' page touches (`InitOptions.pageTouch`), which a model's load times and
// chooses per machine (`loadInfo.pageTouch`); unset, a build keeps its start's (touching). Where
// the load chooses off, the touches' stalls make the memory figures low (q6_K 4864x896 on an AMD
// Zen 3: 4.4 GB/s touching, 7.6-8.4 without).
//
// Each build runs in its own Node process; the rounds interleave builds (and the native CLI's
// `bench --llm` of the same models, 1 thread, when --native is given), so on a shared machine
// they see the same load. Prints the median over rounds of each (shape, build).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { RELAXED_FLAGS } from './node-flags.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
// type:KxM — SmolLM2 (q4_1 layers, q8_0 tied output) and Qwen2.5-0.5B Q4_K_M's (q5_0, q8_0,
// q4_K / q6_K ffn_down).
const SHAPES = 'q4_1:576x576,q4_1:576x1536,q4_1:1536x576,q8_0:576x49152,q5_0:896x896,q5_0:896x4864,q4_K:4864x896,q6_K:4864x896,q8_0:896x151936';
const shapes = opt('shapes', SHAPES).split(',').map((s) => {
  const [type, dims] = s.split(':');
  const [k, m] = dims.split('x').map(Number);
  return { type, k, m };
});
const mib = Number(opt('mib', '128'));
const seconds = Number(opt('seconds', '0.3'));
const BYTES = { q4_0: [18, 32], q4_1: [20, 32], q5_0: [22, 32], q5_1: [24, 32], q8_0: [34, 32], q4_K: [144, 256], q5_K: [176, 256], q6_K: [210, 256] };
const weightBytes = ({ type, k, m }) => (k / BYTES[type][1]) * BYTES[type][0] * m;

if (opt('child', null) !== null) {
  const spec = opt('child', 'relaxed');
  const [kind, path] = spec.includes(':') ? spec.split(/:(.*)/s) : [spec, undefined];
  const { init, benchMulMat } = await import('../dist/index.js');
  const touch = opt('page-touch', null);
  await init({
    threads: false,
    simd: kind !== 'scalar',
    relaxed: kind === 'relaxed',
    ...(path ? { wasm: path } : {}),
    ...(touch !== null ? { pageTouch: touch === 'on' } : {}),
  });
  const out = {};
  for (const s of shapes) {
    const bytes = weightBytes(s);
    const key = `${s.type}:${s.k}x${s.m}`;
    const cold = Math.max(2, Math.ceil((mib * 2 ** 20) / bytes));
    const o = { backend: 'cpu', type: s.type, m: s.m, n: 1, k: s.k, seconds, repack: true };
    const hot = await benchMulMat({ ...o, copies: 1 });
    const mem = await benchMulMat({ ...o, copies: cold });
    out[key] = { cache: bytes / hot.secondsPerRun / 1e9, memory: bytes / mem.secondsPerRun / 1e9, repacked: hot.repacked };
  }
  console.log(JSON.stringify(out));
  process.exit(0);
}

const self = fileURLToPath(import.meta.url);
const builds = opt('builds', 'relaxed').split(',').map((v) => {
  const eq = v.indexOf('=');
  return eq < 0 ? { name: v, spec: v } : { name: v.slice(0, eq), spec: v.slice(eq + 1) };
});
const native = opt('native', null);
const rounds = Number(opt('rounds', '3'));
const pageTouch = opt('page-touch', null);
if (pageTouch !== null && pageTouch !== 'on' && pageTouch !== 'off') throw new Error(`--page-touch must be on or off, not ${pageTouch}`);
const runs = {}; // name -> key -> {cache: [], memory: []}
const add = (name, key, where, v) => {
  runs[name] ??= {};
  runs[name][key] ??= { cache: [], memory: [] };
  runs[name][key][where].push(v);
};
for (let r = 0; r < rounds; r++) {
  for (const b of builds) {
    const p = spawnSync(process.execPath, [...RELAXED_FLAGS, '--no-liftoff', self, '--child', b.spec, '--shapes',
      shapes.map((s) => `${s.type}:${s.k}x${s.m}`).join(','), '--mib', `${mib}`, '--seconds', `${seconds}`,
      ...(pageTouch !== null ? ['--page-touch', pageTouch] : [])], { encoding: 'utf8', maxBuffer: 1 << 24 });
    if (p.status !== 0) throw new Error(`build ${b.name} failed:\n${p.stderr}`);
    const o = JSON.parse(p.stdout.trim().split('\n').pop());
    for (const [key, v] of Object.entries(o)) {
      add(b.name, key, 'cache', v.cache);
      add(b.name, key, 'memory', v.memory);
    }
  }
  if (native) {
    for (const where of ['cache', 'memory']) {
      const p = spawnSync(native, ['bench', '--llm', '--json', '--threads', '1', '--n', '1', '--seconds', `${seconds}`, '--stream-mib', where === 'cache' ? '0' : `${mib}`,
        '--as-types', [...new Set(shapes.map((s) => s.type))].join(',')], { encoding: 'utf8', maxBuffer: 1 << 24 });
      if (p.status !== 0) throw new Error(`native bench failed:\n${p.stderr}`);
      for (const row of JSON.parse(p.stdout)) {
        if (row.op !== 'mul_mat' || !row.gbps) continue;
        const key = `${row.type}:${row.k}x${row.m}`;
        if (shapes.some((s) => `${s.type}:${s.k}x${s.m}` === key)) add('native', key, where, row.gbps);
      }
    }
  }
}
const med = (a) => {
  if (!a || !a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[s.length >> 1];
};
const names = Object.keys(runs);
console.log(`wasm GEMV over repacked weights, 1 thread, GB/s of weights (median of ${rounds} rounds; cache: one weight re-read, memory: > ${mib} MiB of copies; page touches ${pageTouch ?? "as a build starts (on)"})`);
console.log(`| shape | ${names.map((n) => `${n} cache | ${n} memory`).join(' | ')} |`);
console.log(`|---|${names.map(() => '---|---').join('|')}|`);
for (const s of shapes) {
  const key = `${s.type}:${s.k}x${s.m}`;
  console.log(`| ${key} | ${names.map((n) => `${med(runs[n][key]?.cache).toFixed(2)} | ${med(runs[n][key]?.memory).toFixed(2)}`).join(' | ')} |`);
}
