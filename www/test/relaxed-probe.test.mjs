// The loader's relaxed-SIMD gate (www/src/wasm.ts `relaxedSimdCheck`): besides validating a
// relaxed instruction it runs `i32x4.relaxed_dot_i8x16_i7x16_add_s` once, in the engine's first
// tier, and refuses the relaxed builds (threads included) when the sum is wrong, falling back to
// the SIMD128 build with the reason. Node 20's V8 (11.3) has that bug in its baseline compiler
// (Liftoff): there the default init() must not pick a relaxed build, and with --no-liftoff it must.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from './helpers.mjs';

const index = pathToFileURL(path.join(ROOT, 'www', 'dist', 'index.js')).href;
const script = `const m = await import(${JSON.stringify(index)});
const c = m.relaxedSimdCheck();
const i = await m.init({ nThreads: 2 });
console.log(JSON.stringify({ check: c, build: i.build, why: i.reason }));
process.exit(0);`;

// A file, not -e: the threads build's worker_threads inherit the process's flags.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ggweb-probe-'));
const file = path.join(dir, 'init.mjs');
fs.writeFileSync(file, script);
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function run(flags) {
  const r = spawnSync(process.execPath, [...flags, file], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

const v8major = Number(process.versions.v8.split('.')[0]);

test('relaxed SIMD with the baseline compiler: refused where its dot-add is wrong (V8 11), with the reason', () => {
  const r = run(['--experimental-wasm-relaxed-simd']);
  if (v8major === 11) {
    assert.equal(r.check.ok, false);
    assert.match(r.check.reason, /relaxed_dot_i8x16_i7x16_add_s \(\d+, not 16/);
    assert.equal(r.build, 'simd');
    assert.match(r.why, /relaxed_dot_i8x16_i7x16_add_s/);
  } else {
    // A fixed engine: the probe passes and the default is a relaxed build.
    assert.equal(r.check.ok, true, r.check.reason);
    assert.ok(['threads', 'relaxed'].includes(r.build), r.build);
  }
});

test('relaxed SIMD optimized only (--no-liftoff): accepted, the threads build is the default', () => {
  const r = run(['--experimental-wasm-relaxed-simd', '--no-liftoff']);
  assert.equal(r.check.ok, true, r.check.reason);
  assert.equal(r.build, 'threads');
});
