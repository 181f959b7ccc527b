/**
 * ggweb — ggml-style tensors, graphs and GGUF files in the browser and in Node, on a Rust/wasm
 * engine (SIMD128 when available).
 *
 * ```ts
 * import { loadGGUF, Graph, Mnist } from 'ggweb';
 * ```
 */
export { type ErrorCode, type GgwebError } from './env.js';
export {
  init,
  simdSupported,
  relaxedSimdSupported,
  relaxedSimdCheck,
  threadsSupport,
  setThreads,
  wasmMemoryBytes,
  type InitOptions,
  type EngineInfo,
} from './wasm.js';
export { type Source, type Progress, type LoadOptions, readAll, gunzip } from './source.js';
export {
  GGUF,
  loadGGUF,
  inspectGGUF,
  type GGUFHeader,
  type GGUFTensorInfo,
  type GGUFValue,
  type LoadGGUFOptions,
} from './gguf.js';
export { webgpuDevice, chooseBackend, type Backend, type BackendInfo, type WebGPUInfo } from './backend.js';
export { benchMulMat, type MulMatBenchOptions, type MulMatBenchResult } from './bench.js';
export { Graph, Tensor, Optimizer, type DType, type Shape, type TensorInfo, type SoftMaxOptions, type GraphOptions, type OptimizerOptions } from './graph.js';
export {
  Mnist,
  preprocessDigit,
  imageDataToGray,
  parseIdx,
  loadMnistSet,
  softmax,
  argmax,
  MNIST_PIXELS,
  MNIST_CLASSES,
  type Prediction,
  type Evaluation,
  type EvaluateOptions,
  type Pixels,
  type Idx,
  type MnistSet,
  type MnistLoadOptions,
} from './mnist.js';
export {
  LLM,
  Generation,
  clearModelCache,
  type WorkerLLM,
  type LLMLoadOptions,
  type LLMProgress,
  type LLMInfo,
  type LoadInfo,
  type MemoryInfo,
  type ModelSource,
  type SamplingOptions,
  type GenerateOptions,
  type GenerationResult,
  type GenerationStats,
  type StopReason,
  type ChatMessage,
  type TokenizeOptions,
} from './llm.js';
export { inspectModel, describeModel, LLM_ARCHITECTURES, type ModelInspection } from './inspect.js';
export {
  Embedder,
  EmbeddingModel,
  WorkerEmbedder,
  cosineSimilarity,
  rankBySimilarity,
  type EmbedderLoadOptions,
  type EmbedderInfo,
} from './embed.js';
export {
  Trainer,
  LocalTrainer,
  type TrainerOptions,
  type TrainerCreateOptions,
  type TrainerInfo,
  type TrainData,
  type FitOptions,
  type FitResult,
  type StepStats,
  type EpochStats,
  type Score,
} from './train.js';
