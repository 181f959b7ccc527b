//! Choosing backends for a model and running its graphs through the scheduler: `cpu`, `webgpu`
//! (WebGPU first, the CPU for what it cannot run), `cuda` (the same with a CUDA device; feature
//! `cuda`) or `auto` (CUDA when a device exists, else WebGPU when an adapter exists). The
//! choice and its reasons are kept in [`Runner::report`] for the CLI and the JS API.

use std::sync::Arc;

use crate::backend::cpu::{cpu_buffer_type, CpuBackend};
use crate::backend::sched::Scheduler;
use crate::backend::{Backend, BufferType};
use crate::{Context, Error, Graph, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Cpu,
    WebGpu,
    Cuda,
    Auto,
}

impl std::str::FromStr for BackendChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(BackendChoice::Cpu),
            "webgpu" => Ok(BackendChoice::WebGpu),
            "cuda" => Ok(BackendChoice::Cuda),
            "auto" => Ok(BackendChoice::Auto),
            other => Err(Error::InvalidArgument(format!(
                "unknown backend '{other}' (cpu, webgpu, cuda or auto)"
            ))),
        }
    }
}

/// Where the nodes of a graph ran.
#[derive(Debug, Clone, Default)]
pub struct Placements {
    /// (backend name, node count) per backend, in priority order.
    pub nodes: Vec<(String, usize)>,
    /// "OP 'name': why" for each node not on the first backend.
    pub elsewhere: Vec<String>,
}

pub struct Runner {
    sched: Scheduler,
    weights_buft: Arc<dyn BufferType>,
    /// Which backends run, and why (e.g. "WebGPU: llvmpipe (Vulkan), f16; CPU for the rest").
    pub report: String,
    /// True when a GPU backend is in use.
    pub gpu: bool,
    /// Threads of the CPU backend.
    n_threads: usize,
    /// The WebGPU device in use, if any (adapter report, f16 or f32 path).
    #[cfg(feature = "webgpu")]
    pub webgpu: Option<Arc<crate::backend::webgpu::WebGpuDevice>>,
    /// The CUDA device in use, if any.
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    pub cuda: Option<Arc<crate::backend::cuda::CudaDevice>>,
}

impl Runner {
    pub fn new(choice: BackendChoice, n_threads: usize) -> Result<Runner> {
        // CUDA: asked for (an error says why there is none), or first under auto.
        #[allow(unused_mut)]
        let mut no_cuda = "built without the cuda feature".to_string();
        #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
        if matches!(choice, BackendChoice::Cuda | BackendChoice::Auto) {
            match crate::backend::cuda::probe() {
                Ok(dev) => return Self::with_cuda_device(dev, n_threads),
                Err(why) => no_cuda = why,
            }
        }
        if choice == BackendChoice::Cuda {
            return Err(Error::Backend(format!("no CUDA device: {no_cuda}")));
        }
        if choice != BackendChoice::Cpu {
            #[cfg(feature = "webgpu")]
            if let Some(dev) = crate::backend::webgpu::default_device() {
                return Self::with_webgpu_device(dev, n_threads);
            }
            if choice == BackendChoice::WebGpu {
                return Err(Error::Backend(
                    "no WebGPU adapter found (natively it needs a Vulkan, Metal or DX12 driver, e.g. Debian's mesa-vulkan-drivers)"
                        .into(),
                ));
            }
        }
        let report = match choice {
            BackendChoice::Cpu => format!("CPU ({n_threads} threads)"),
            _ => format!("CPU ({n_threads} threads): no WebGPU adapter found"),
        };
        Ok(Runner {
            sched: Scheduler::new(vec![cpu_backend(n_threads)])?,
            weights_buft: cpu_buffer_type(),
            report,
            gpu: false,
            n_threads,
            #[cfg(feature = "webgpu")]
            webgpu: None,
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            cuda: None,
        })
    }

    /// CUDA on `dev` first, the CPU for the rest.
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    pub fn with_cuda_device(
        dev: Arc<crate::backend::cuda::CudaDevice>,
        n_threads: usize,
    ) -> Result<Runner> {
        use crate::backend::Device as _;
        let report = format!(
            "CUDA: {}; CPU ({n_threads} threads) for ops CUDA does not run",
            dev.description()
        );
        let gpu: Box<dyn Backend> = Box::new(dev.backend());
        let buft: Arc<dyn BufferType> = dev.cuda_buffer_type();
        let sched = Scheduler::new(vec![gpu, cpu_backend(n_threads)])?;
        Ok(Runner {
            sched,
            weights_buft: buft,
            report,
            gpu: true,
            n_threads,
            #[cfg(feature = "webgpu")]
            webgpu: None,
            cuda: Some(dev),
        })
    }

    /// The GPU device in use (WebGPU or CUDA), if any.
    pub fn gpu_device(&self) -> Option<Arc<dyn crate::backend::Device>> {
        #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
        if let Some(d) = &self.cuda {
            return Some(d.clone());
        }
        #[cfg(feature = "webgpu")]
        if let Some(d) = &self.webgpu {
            return Some(d.clone());
        }
        None
    }

    /// WebGPU on `dev` first, the CPU for the rest (tests open devices with their own options).
    #[cfg(feature = "webgpu")]
    pub fn with_webgpu_device(
        dev: Arc<crate::backend::webgpu::WebGpuDevice>,
        n_threads: usize,
    ) -> Result<Runner> {
        let a = dev.adapter();
        let report = format!(
            "WebGPU: {} ({}), {} path; CPU ({n_threads} threads) for ops WebGPU does not run",
            a.name,
            a.backend,
            if dev.uses_f16() { "f16" } else { "f32" }
        );
        let gpu: Box<dyn Backend> = Box::new(dev.backend());
        let buft: Arc<dyn BufferType> = dev.webgpu_buffer_type();
        let sched = Scheduler::new(vec![gpu, cpu_backend(n_threads)])?;
        Ok(Runner {
            sched,
            weights_buft: buft,
            report,
            gpu: true,
            n_threads,
            webgpu: Some(dev),
            #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
            cuda: None,
        })
    }

    /// A second runner on the same backends (the same WebGPU device), for a second graph planned
    /// beside this one's.
    pub fn like(&self) -> Result<Runner> {
        let n_threads = self.n_threads;
        #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
        if let Some(dev) = &self.cuda {
            let mut r = Self::with_cuda_device(dev.clone(), n_threads)?;
            r.report = self.report.clone();
            return Ok(r);
        }
        #[cfg(feature = "webgpu")]
        if let Some(dev) = &self.webgpu {
            let mut r = Self::with_webgpu_device(dev.clone(), n_threads)?;
            r.report = self.report.clone();
            return Ok(r);
        }
        let mut r = Self::new(BackendChoice::Cpu, n_threads)?;
        r.report = self.report.clone();
        Ok(r)
    }

    /// Where model weights should live.
    pub fn weights_buffer_type(&self) -> &Arc<dyn BufferType> {
        &self.weights_buft
    }

    pub fn set_debug(&mut self, on: bool) {
        self.sched.set_debug(on);
    }

    pub fn set_n_threads(&mut self, n: usize) {
        self.n_threads = n;
        let last = self.sched.n_backends() - 1;
        if let Some(cpu) = self
            .sched
            .backend_mut(last)
            .as_any_mut()
            .downcast_mut::<CpuBackend>()
        {
            cpu.set_n_threads(n);
        }
    }

    /// Place and allocate `graph` (set its inputs afterwards, then [`Runner::compute`]).
    pub fn alloc(&mut self, ctx: &mut Context, graph: &Graph) -> Result<()> {
        self.sched.plan(ctx, graph).map(|_| ())
    }

    /// Compute the graph given to the last [`Runner::alloc`] and wait for it.
    pub fn compute(&mut self, ctx: &Context) -> Result<()> {
        self.sched.compute_planned(ctx)?;
        for i in 0..self.sched.n_backends() {
            self.sched.backend_mut(i).synchronize()?;
        }
        Ok(())
    }

    /// [`Runner::compute`] for the browser: copies out of device memory and the wait are async.
    pub async fn compute_async(&mut self, ctx: &Context) -> Result<()> {
        self.sched.compute_planned_async(ctx).await?;
        for i in 0..self.sched.n_backends() {
            self.sched.backend_mut(i).synchronize()?;
        }
        Ok(())
    }

    /// Where the nodes of the last planned graph run: (backend name, node count) per backend,
    /// and for each node not on the first backend "op 'name': why" (with the WebGPU device's
    /// own reason, e.g. a tensor larger than max_storage_buffer_binding_size).
    pub fn placements(&self, ctx: &Context) -> Placements {
        let (nodes, elsewhere) = self.sched.placement_summary(ctx);
        let notes = elsewhere
            .into_iter()
            .map(|(id, reason)| {
                let t = ctx.tensor(id);
                #[cfg(feature = "webgpu")]
                let reason = match self.webgpu.as_ref().and_then(|d| d.explain_op(ctx, id)) {
                    Some(why) => why,
                    None => reason,
                };
                #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
                let reason = match self.cuda.as_ref().and_then(|d| d.explain_op(ctx, id)) {
                    Some(why) => why,
                    None => reason,
                };
                format!("{} '{}': {reason}", t.op.name(), t.name)
            })
            .collect();
        Placements {
            nodes,
            elsewhere: notes,
        }
    }

    /// Bytes of compute buffers in host memory and in device memory.
    pub fn buffer_bytes_by_place(&self) -> (usize, usize) {
        self.sched.buffer_bytes_by_place()
    }

    /// Bytes of compute buffers per backend.
    pub fn buffer_sizes(&self) -> Vec<usize> {
        self.sched.buffer_sizes()
    }
}

fn cpu_backend(n_threads: usize) -> Box<dyn Backend> {
    Box::new(CpuBackend::new(n_threads))
}
