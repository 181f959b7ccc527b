//! The Metal path is wgpu's Metal backend, which translates WGSL to MSL with naga before Metal
//! compiles it. No Mac runs here, so this test does that translation for every kernel variant the
//! WebGPU backend can build (`kernel_variants`: op family × types × f16/f32 path, each entry
//! point), with the validation capabilities and MSL options wgpu-hal's Metal backend uses: a
//! shader naga cannot validate or write as MSL fails here instead of on a Mac. Whether Metal's own
//! compiler accepts the MSL is not checked (that needs the Apple toolchain).

use ggweb::backend::webgpu::kernel_variants;
use naga::back::msl;
use naga::valid::{Capabilities, ValidationFlags, Validator};

/// MSL versions: macOS 11 (the oldest on Apple silicon) and macOS 15, as wgpu-hal picks them.
const MSL_VERSIONS: [(u8, u8); 2] = [(2, 3), (3, 2)];

/// Parse and validate `src` (with `shader-f16` when `f16`, as the device requests it) and write
/// entry point `entry` as MSL `version`; the MSL or why not.
fn to_msl(src: &str, f16: bool, entry: &str, version: (u8, u8)) -> Result<String, String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    // What wgpu grants on Metal (wgpu-naga-bridge's mapping): `pack2x16float` and friends on
    // every device (the Metal adapter's downlevel flags include SHADER_F16_IN_F32), f16 types
    // only with the `shader-f16` feature.
    let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if f16 {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| e.emit_to_string(src))?;
    let stage = naga::ShaderStage::Compute;
    // As wgpu-hal: keep only the pipeline's entry point (no overrides are set).
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((stage, entry)),
        &Default::default(),
    )
    .map_err(|e| format!("overrides: {e:?}"))?;
    // The layout of `pipeline.rs`: binding 0 the uniform, 1..=n the storage tensors, then
    // wgpu-hal's buffer of runtime array sizes.
    let n = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| g.binding.as_ref().map(|b| b.binding))
        .max()
        .unwrap_or(0);
    let resources = (0..=n)
        .map(|b| {
            (
                naga::ResourceBinding {
                    group: 0,
                    binding: b,
                },
                msl::BindTarget {
                    buffer: Some(b as u8),
                    mutable: b > 0,
                    ..Default::default()
                },
            )
        })
        .collect();
    let restrict = naga::proc::BoundsCheckPolicy::Restrict;
    let options = msl::Options {
        lang_version: version,
        per_entry_point_map: msl::EntryPointResourceMap::from([(
            entry.to_string(),
            msl::EntryPointResources {
                resources,
                immediates_buffer: None,
                sizes_buffer: Some(n as u8 + 1),
            },
        )]),
        fake_missing_bindings: false,
        // wgpu's defaults for a module created from WGSL: runtime checks on.
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: restrict,
            buffer: restrict,
            image_load: restrict,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: true,
        force_loop_bounding: true,
        ..Default::default()
    };
    let pipeline = msl::PipelineOptions {
        entry_point: Some((stage, entry.to_string())),
        ..Default::default()
    };
    let (out, tinfo) = msl::write_string(&module, &info, &options, &pipeline)
        .map_err(|e| format!("MSL: {e:?}"))?;
    match tinfo.entry_point_names.first() {
        Some(Ok(_)) => Ok(out),
        Some(Err(e)) => Err(format!("MSL entry point: {e}")),
        None => Err("MSL: no entry point written".into()),
    }
}

#[test]
fn every_webgpu_kernel_translates_to_msl() {
    let variants = kernel_variants();
    let mut failures = Vec::new();
    let mut translated = 0;
    for v in &variants {
        for entry in &v.entries {
            for version in MSL_VERSIONS {
                match to_msl(&v.source, v.f16, entry, version) {
                    Ok(msl) => {
                        assert!(msl.contains("kernel void"), "{}: no kernel", v.key);
                        translated += 1;
                    }
                    Err(e) => failures.push(format!(
                        "{}:{entry} ({} path, MSL {}.{}): {e}",
                        v.key,
                        if v.f16 { "f16" } else { "f32" },
                        version.0,
                        version.1
                    )),
                }
            }
        }
    }
    let pipelines: usize = variants.iter().map(|v| v.entries.len()).sum();
    println!(
        "{} kernel sources, {pipelines} pipelines (entry points), {translated} MSL translations \
         over MSL {MSL_VERSIONS:?}",
        variants.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Both paths and the quantized weights are enumerated (a shrunken list would pass vacuously).
    for key in [
        "mul_mat_q4_k",
        "get_rows_q8_0",
        "cpy_f32_f16_pairs",
        "im2col_f16",
    ] {
        assert!(
            variants.iter().any(|v| v.key == key),
            "{key} not enumerated"
        );
    }
    assert!(variants.iter().any(|v| v.f16) && variants.iter().any(|v| !v.f16));
}

/// The check rejects what Metal could not take: a type error, an f16 kernel on a device without
/// `shader-f16`, an entry point the module lacks.
#[test]
fn broken_shaders_are_rejected() {
    let variants = kernel_variants();
    let f16 = variants
        .iter()
        .find(|v| v.f16 && v.key == "cpy_f16_f16")
        .expect("the f16 copy");
    assert!(to_msl(&f16.source, true, "main", (2, 3)).is_ok());
    assert!(to_msl(&f16.source, false, "main", (2, 3)).is_err());
    assert!(to_msl(&f16.source, true, "mat_mat", (2, 3)).is_err());
    let bad = format!("{}\nfn broken() -> f32 {{ return 1u; }}\n", f16.source);
    assert!(to_msl(&bad, true, "main", (2, 3)).is_err());
}
