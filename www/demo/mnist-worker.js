// Evaluates an MNIST model on the 10,000 t10k images off the main thread.
import { init, Mnist, loadMnistSet } from '../dist/index.js';

self.onmessage = async ({ data }) => {
  const { kind, build, base, backend = 'cpu' } = data;
  try {
    const engine = await init(build === 'auto' ? {} : { simd: build === 'simd' });
    const [model, set] = await Promise.all([
      Mnist.load(new URL(`assets/mnist-${kind}-f32.gguf`, base), { backend }),
      loadMnistSet(new URL('assets/t10k-images-idx3-ubyte.gz', base), new URL('assets/t10k-labels-idx1-ubyte.gz', base)),
    ]);
    const info = model.backendInfo;
    const name = info.backend === 'webgpu'
      ? `WebGPU (${info.adapter.name}, ${info.f16 ? 'f16' : 'f32'} path)`
      : engine.relaxed ? 'wasm relaxed SIMD' : engine.simd ? 'wasm SIMD128' : 'wasm scalar';
    const result = await model.evaluate(set.images, set.labels, {
      onProgress: (p) => self.postMessage({ type: 'progress', kind, engine: name, ...p }),
    });
    self.postMessage({ type: 'result', kind, engine: name, backendInfo: info, result });
  } catch (e) {
    self.postMessage({ type: 'error', message: String(e?.message ?? e) });
  }
};
