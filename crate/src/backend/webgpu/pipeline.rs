//! The pipeline cache: one compiled compute pipeline per (kernel, type, variant) key, and the
//! bind group layouts per number of tensor bindings.

use std::sync::Arc;

use super::plan::Dispatch;
use super::Shared;
use crate::{Error, Result};

/// A compiled pipeline and the number of tensor bindings it takes.
pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub n_storage: usize,
}

/// Get or build the pipeline for a dispatch.
pub(crate) fn pipeline(shared: &Shared, d: &Dispatch<'_>) -> Result<Arc<Pipeline>> {
    if let Some(p) = shared
        .pipelines
        .lock()
        .ok()
        .and_then(|m| m.get(&d.key).cloned())
    {
        return Ok(p);
    }
    let n_storage = d.binds.len();
    let layout = layout(shared, n_storage);
    let src = (d.make_src)(shared.use_f16);
    let module = shared
        .device
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&d.key),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
    let pipeline = shared
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&d.key),
            layout: Some(&layout.1),
            module: &module,
            entry_point: Some(d.entry),
            compilation_options: Default::default(),
            cache: None,
        });
    shared
        .take_error()
        .map_err(|e| Error::Backend(format!("building WebGPU kernel {}: {e}", d.key)))?;
    let p = Arc::new(Pipeline {
        pipeline,
        n_storage,
    });
    if let Ok(mut m) = shared.pipelines.lock() {
        m.insert(d.key.clone(), p.clone());
    }
    Ok(p)
}

/// The bind group and pipeline layouts for `n` tensor bindings (cached).
pub(crate) fn layout(
    shared: &Shared,
    n: usize,
) -> Arc<(wgpu::BindGroupLayout, wgpu::PipelineLayout)> {
    if let Some(l) = shared.layouts.lock().ok().and_then(|m| m.get(&n).cloned()) {
        return l;
    }
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }];
    for b in 1..=n {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: b as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    let bgl = shared
        .device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &entries,
        });
    let pl = shared
        .device
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
    let l = Arc::new((bgl, pl));
    if let Ok(mut m) = shared.layouts.lock() {
        m.insert(n, l.clone());
    }
    l
}
