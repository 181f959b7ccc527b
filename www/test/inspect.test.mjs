import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { init, LLM, inspectModel, LLM_ARCHITECTURES } from '../dist/index.js';
import { initOptions, SMOLLM2, MODELS } from './helpers.mjs';

await init(initOptions);

/** `file`'s bytes with `general.architecture`'s value "llama" overwritten (same length). */
function withArchitecture(file, arch) {
  const bytes = new Uint8Array(fs.readFileSync(file));
  const key = new TextEncoder().encode('general.architecture');
  let at = -1;
  for (let i = 0; i + key.length < bytes.length && at < 0; i++) {
    if (bytes[i] === key[0] && key.every((b, j) => bytes[i + j] === b)) at = i + key.length;
  }
  // type u32 (8 = string), length u64, then the text.
  const v = new DataView(bytes.buffer, bytes.byteOffset);
  assert.equal(v.getUint32(at, true), 8);
  const len = Number(v.getBigUint64(at + 4, true));
  assert.equal(len, arch.length);
  bytes.set(new TextEncoder().encode(arch), at + 12);
  return bytes;
}

test('LLM.inspect: family, quantization, size and parameters from the header of a path', async () => {
  const r = await LLM.inspect(SMOLLM2);
  assert.equal(r.architecture, 'llama');
  assert.equal(r.supported, true);
  assert.equal(r.reason, null);
  assert.equal(r.quant, 'q4_1');
  assert.equal(r.fileType, 'Q4_1');
  assert.equal(r.fileSize, fs.statSync(SMOLLM2).size);
  assert.ok(r.nParams > 134e6 && r.nParams < 136e6, `${r.nParams}`);
  assert.equal(r.nTensors, 272);
  assert.equal(r.hasChatTemplate, true);
  // Only the header is read (a few MB of a 92 MB file).
  assert.ok(r.bytesRead > 0 && r.bytesRead < r.fileSize / 4, `${r.bytesRead} of ${r.fileSize}`);
});

test('LLM.inspect refuses an unsupported family with the reason LLM.load gives', async () => {
  const bytes = withArchitecture(SMOLLM2, 'mamba');
  const r = await inspectModel(bytes);
  assert.equal(r.supported, false);
  assert.equal(r.architecture, 'mamba');
  assert.equal(r.reason, `unsupported architecture 'mamba' (supported: ${LLM_ARCHITECTURES.join(', ')})`);
  // The same list as the engine's (crate/src/models/arch.rs), which names it when loading.
  await assert.rejects(LLM.load(bytes, { nCtx: 64 }), (e) => {
    assert.ok(e.message.includes(r.reason), e.message);
    return true;
  });
  const minilm = path.join(MODELS, 'all-MiniLM-L6-v2.f16.gguf');
  const b = await LLM.inspect(minilm);
  assert.equal(b.architecture, 'bert');
  assert.equal(b.supported, false);
  assert.match(b.reason, /Embedder/);
  assert.equal(b.quant, 'f16');
  await assert.rejects(LLM.inspect(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8])), (e) => e.code === 'bad-gguf');
});

test('LLM info says which chat format is used', async () => {
  const llm = await LLM.load(SMOLLM2, { nCtx: 64 });
  assert.equal(llm.info.chatFormat, 'jinja');
  assert.equal(llm.info.chatFormatNote, null);
  // The model's template, through the interpreter (SmolLM2's default system prompt).
  const p = await llm.applyChatTemplate([{ role: 'user', content: 'Hi' }]);
  assert.equal(p, '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
  llm.free();
});
