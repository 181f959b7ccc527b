import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const ASSETS = path.join(ROOT, 'crate', 'assets');
export const asset = (name) => path.join(ASSETS, name);
export const GOLDEN = path.join(ROOT, 'native-tests', 'data', 'mnist_logits_first16.json');
/** Set GGWEB_SIMD=0 to test the scalar build, 1 for SIMD (default: auto). */
export const initOptions = process.env.GGWEB_SIMD === undefined ? {} : { simd: process.env.GGWEB_SIMD === '1' };
