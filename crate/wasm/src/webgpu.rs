//! WebGPU for JavaScript: opening the adapter (async: `navigator.gpu.requestAdapter`) and what it
//! is and can do. Models and graphs pick the device up once [`webgpu_init`] resolved.

use js_sys::{Object, Promise};
use wasm_bindgen::prelude::*;

use super::js::{array_of, set};
use super::js_err;
use ggweb::backend::webgpu::{self, AdapterReport, WebGpuDevice};
use ggweb::Error;

/// True when `navigator.gpu` exists here (browsers and their workers with WebGPU; not Node).
pub(crate) fn navigator_gpu() -> bool {
    let g = js_sys::global();
    js_sys::Reflect::get(&g, &JsValue::from_str("navigator"))
        .ok()
        .filter(|n| n.is_object())
        .and_then(|n| js_sys::Reflect::get(&n, &JsValue::from_str("gpu")).ok())
        .is_some_and(|gpu| gpu.is_object())
}

/// The adapter report as a plain JS object.
pub(crate) fn adapter_js(a: &AdapterReport) -> Object {
    let o = Object::new();
    set(&o, "name", a.name.as_str());
    set(&o, "backend", a.backend.as_str());
    set(&o, "deviceType", a.device_type.as_str());
    set(&o, "driver", a.driver.as_str());
    set(&o, "driverInfo", a.driver_info.as_str());
    set(
        &o,
        "features",
        array_of(a.features.iter(), |f| JsValue::from_str(f)),
    );
    set(&o, "shaderF16", a.shader_f16);
    set(&o, "maxBufferSize", a.max_buffer_size as f64);
    set(
        &o,
        "maxStorageBufferBindingSize",
        a.max_storage_buffer_binding_size as f64,
    );
    set(
        &o,
        "minStorageBufferOffsetAlignment",
        a.min_storage_buffer_offset_alignment,
    );
    set(
        &o,
        "maxComputeWorkgroupsPerDimension",
        a.max_compute_workgroups_per_dimension,
    );
    set(
        &o,
        "maxComputeInvocationsPerWorkgroup",
        a.max_compute_invocations_per_workgroup,
    );
    o
}

/// The device as a JS object: the adapter report plus `f16` (kernels use `shader-f16`).
pub(crate) fn device_js(d: &WebGpuDevice) -> Object {
    let o = adapter_js(d.adapter());
    set(&o, "f16", d.uses_f16());
    o
}

/// Open the default WebGPU adapter and device once. Resolves to the device's description
/// (`name`, `features`, limits, `f16`); rejects with the reason when there is none.
#[wasm_bindgen(js_name = webgpuInit)]
pub fn webgpu_init() -> Promise {
    wasm_bindgen_futures::future_to_promise(async {
        if !navigator_gpu() {
            return Err(js_err(Error::Backend(
                "navigator.gpu is missing: this JavaScript environment has no WebGPU".into(),
            ))
            .into());
        }
        match webgpu::init_default_device().await {
            Ok(d) => Ok(device_js(&d).into()),
            Err(e) => Err(js_err(e).into()),
        }
    })
}

/// The open device's description, or `undefined` before [`webgpu_init`] resolved.
#[wasm_bindgen(js_name = webgpuDevice)]
pub fn webgpu_device() -> JsValue {
    webgpu::default_device()
        .map(|d| device_js(&d).into())
        .unwrap_or(JsValue::UNDEFINED)
}

/// Every adapter the browser offers (it exposes one through `requestAdapter`); empty without
/// WebGPU.
#[wasm_bindgen(js_name = webgpuAdapters)]
pub fn webgpu_adapters() -> Promise {
    wasm_bindgen_futures::future_to_promise(async {
        if !navigator_gpu() {
            return Ok(js_sys::Array::new().into());
        }
        let list = webgpu::enumerate_adapters().await;
        Ok(array_of(list.iter(), |a| adapter_js(a).into()).into())
    })
}

/// Placements as `{ nodes: {backend: count}, elsewhere: ["OP 'name': why"] }`.
pub(crate) fn placements_js(p: &ggweb::models::runner::Placements) -> JsValue {
    let nodes = Object::new();
    for (name, n) in &p.nodes {
        set(&nodes, name, *n as u32);
    }
    let o = Object::new();
    set(&o, "nodes", nodes);
    set(
        &o,
        "elsewhere",
        array_of(p.elsewhere.iter(), |s| JsValue::from_str(s)),
    );
    o.into()
}
