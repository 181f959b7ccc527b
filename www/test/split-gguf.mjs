// Write a GGUF v3 file as a split model in llama.cpp's `gguf-split` layout (for the tests): part
// i of n holds a run of the tensors with their data, and `split.no` (u16), `split.count` (u16)
// and `split.tensors.count` (i32); part 1 also holds all the metadata. Parses just enough of the
// header to copy its key/value bytes and rewrite the tensor offsets.
import fs from 'node:fs';
import path from 'node:path';

// Byte sizes of the fixed-size GGUF value types (by type id); 8 = string, 9 = array.
const FIXED = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

function reader(buf) {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let at = 0;
  const r = {
    get at() { return at; },
    u32: () => { const v = dv.getUint32(at, true); at += 4; return v; },
    u64: () => { const v = Number(dv.getBigUint64(at, true)); at += 8; return v; },
    str: () => { const n = r.u64(); const s = buf.subarray(at, at + n).toString('utf8'); at += n; return s; },
    skip: (type) => {
      if (type === 8) { const n = r.u64(); at += n; return; }
      if (type === 9) {
        const t = r.u32();
        const n = r.u64();
        if (t === 8 || t === 9) for (let i = 0; i < n; i++) r.skip(t);
        else at += FIXED[t] * n;
        return;
      }
      if (!(type in FIXED)) throw new Error(`GGUF value type ${type}`);
      at += FIXED[type];
    },
  };
  return r;
}

function kvU16(key, v) { return Buffer.concat([str(key), u32(2), Buffer.from(new Uint16Array([v]).buffer)]); }
function kvI32(key, v) { return Buffer.concat([str(key), u32(5), Buffer.from(new Int32Array([v]).buffer)]); }
function str(s) { const b = Buffer.from(s, 'utf8'); return Buffer.concat([u64(b.length), b]); }
function u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; }
function u64(v) { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; }
const alignUp = (n, a) => Math.ceil(n / a) * a;

/**
 * Split `file` (a GGUF path) into `n` parts written to `dir` as `PREFIX-0000i-of-0000n.gguf`;
 * `tensorCount` overrides `split.tensors.count` (to make a bad split). Returns the paths.
 */
export function splitGguf(file, dir, n, prefix = 'model', tensorCount) {
  const buf = fs.readFileSync(file);
  const r = reader(buf);
  if (buf.toString('latin1', 0, 4) !== 'GGUF' || (r.u32(), r.u32()) !== 3) throw new Error('not GGUF v3');
  const nTensors = r.u64();
  const nKv = r.u64();
  let align = 32;
  for (let i = 0; i < nKv; i++) {
    const key = r.str();
    const type = r.u32();
    if (key === 'general.alignment') align = buf.readUInt32LE(r.at);
    r.skip(type);
  }
  const kvBytes = buf.subarray(24, r.at);
  const infos = [];
  for (let i = 0; i < nTensors; i++) {
    const start = r.at;
    r.str();
    const nd = r.u32();
    for (let d = 0; d < nd; d++) r.u64();
    r.u32();
    const offStart = r.at;
    infos.push({ head: buf.subarray(start, offStart), offset: r.u64() });
  }
  const dataOffset = alignUp(r.at, align);
  // Each tensor's span runs to the next tensor (its padding included), the last to the end.
  const byOffset = [...infos].sort((a, b) => a.offset - b.offset);
  byOffset.forEach((t, i) => { t.end = i + 1 < byOffset.length ? byOffset[i + 1].offset : buf.length - dataOffset; });
  const per = Math.ceil(nTensors / n);
  const paths = [];
  for (let p = 0; p < n; p++) {
    const mine = infos.slice(p * per, (p + 1) * per);
    const kvs = [kvU16('split.no', p), kvU16('split.count', n), kvI32('split.tensors.count', tensorCount ?? nTensors)];
    const head = [Buffer.from('GGUF'), u32(3), u64(mine.length), u64((p === 0 ? nKv : 0) + kvs.length)];
    if (p === 0) head.push(kvBytes);
    head.push(...kvs);
    let at = 0;
    const data = [];
    for (const t of mine) {
      head.push(t.head, u64(at));
      const span = buf.subarray(dataOffset + t.offset, dataOffset + t.end);
      data.push(span, Buffer.alloc(alignUp(span.length, align) - span.length));
      at += alignUp(span.length, align);
    }
    let h = Buffer.concat(head);
    h = Buffer.concat([h, Buffer.alloc(alignUp(h.length, align) - h.length)]);
    const out = path.join(dir, `${prefix}-${String(p + 1).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.gguf`);
    fs.writeFileSync(out, Buffer.concat([h, ...data]));
    paths.push(out);
  }
  return paths;
}
