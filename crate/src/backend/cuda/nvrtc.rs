//! Run-time compilation of `shaders/cuda/*.cu` with NVRTC into a CUBIN for one compute capability.
//! NVRTC needs no driver and no GPU, so the kernels are compile-checked on any machine that has
//! libnvrtc (the test `native-tests/tests/cuda.rs`).
//!
//! libnvrtc is found, in order: `GGWEB_NVRTC_LIB` (a file), the copy `scripts/setup-cuda.sh`
//! installs from PyPI under `$GGWEB_CACHE/tools`, a CUDA toolkit (`CUDA_HOME`, `CUDA_PATH`,
//! /usr/local/cuda), then the dynamic loader's own search (`LD_LIBRARY_PATH`, the system). A file
//! found by path is opened first, so that cudarc's later look-up by its soname finds it loaded.

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

use cudarc::nvrtc::{result, sys};

use crate::{Error, Result};

/// The NVRTC wheel `scripts/setup-cuda.sh` installs (its folder under `$GGWEB_CACHE/tools`).
pub const NVRTC_WHEEL_DIR: &str = "nvrtc-cu12-12.9.86";

/// Candidate paths of libnvrtc, most specific first.
fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("GGWEB_NVRTC_LIB") {
        out.push(PathBuf::from(p));
    }
    let cache = std::env::var_os("GGWEB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ggweb")));
    if let Some(c) = cache {
        out.push(
            c.join("tools")
                .join(NVRTC_WHEEL_DIR)
                .join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12"),
        );
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = std::env::var_os(var) {
            out.push(PathBuf::from(h).join("lib64/libnvrtc.so"));
        }
    }
    out.push(PathBuf::from("/usr/local/cuda/lib64/libnvrtc.so"));
    out
}

/// Whether NVRTC can be used, or why not (computed once).
pub fn available() -> std::result::Result<(), String> {
    static STATE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    STATE.get_or_init(load).clone()
}

fn load() -> std::result::Result<(), String> {
    let mut tried = Vec::new();
    for path in candidates() {
        if !path.is_file() {
            continue;
        }
        // SAFETY: loading libnvrtc runs only its initialisers; the handle is leaked on purpose
        // so that the library stays loaded for cudarc's look-up by soname.
        match unsafe { libloading::Library::new(&path) } {
            Ok(lib) => {
                std::mem::forget(lib);
                break;
            }
            Err(e) => tried.push(format!("{}: {e}", path.display())),
        }
    }
    // cudarc panics when it cannot load the library; ask it first, and catch any panic anyway.
    // SAFETY: is_culib_present only tries to open the library by its names.
    let present = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return Err(format!(
            "libnvrtc not found (set GGWEB_NVRTC_LIB, run scripts/setup-cuda.sh, or install a CUDA 12 toolkit){}",
            if tried.is_empty() { String::new() } else { format!("; {}", tried.join("; ")) }
        ));
    }
    match std::panic::catch_unwind(version) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("libnvrtc found but unusable: {e}")),
        Err(_) => Err("libnvrtc found but a symbol is missing".into()),
    }
}

/// NVRTC's (major, minor) version.
pub fn version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::Backend(format!("nvrtcVersion: {e}")))?;
    Ok((major, minor))
}

/// Compile `source` (a complete translation unit) for `sm_<arch>` (e.g. 80, 90) into a CUBIN.
/// A compile error carries NVRTC's log.
pub fn compile(name: &str, source: &str, arch: u32) -> Result<Vec<u8>> {
    available().map_err(Error::Backend)?;
    let src = CString::new(source).map_err(|_| Error::Backend(format!("{name}: NUL in source")))?;
    let cname = CString::new(name).map_err(|_| Error::Backend(format!("{name}: NUL in name")))?;
    let prog = result::create_program(&src, Some(&cname))
        .map_err(|e| Error::Backend(format!("{name}: nvrtcCreateProgram: {e}")))?;
    let opts = [
        format!("--gpu-architecture=sm_{arch}"),
        "--std=c++17".to_string(),
    ];
    // SAFETY: `prog` was created above and is destroyed once, at the end; `src` and `cname`
    // outlive it.
    let out = unsafe {
        let compiled = result::compile_program(prog, &opts);
        let log = result::get_program_log(prog)
            .map(|l| CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
            .unwrap_or_default();
        let r = match compiled {
            Err(e) => Err(Error::Backend(format!(
                "{name}: NVRTC compile for sm_{arch} failed ({e}):\n{log}"
            ))),
            Ok(()) => {
                cubin(prog).map_err(|e| Error::Backend(format!("{name}: nvrtcGetCUBIN: {e}")))
            }
        };
        let _ = result::destroy_program(prog);
        r
    };
    out
}

/// The CUBIN of a compiled program.
///
/// # Safety
/// `prog` is a live program compiled for a real architecture (`sm_XY`).
unsafe fn cubin(prog: sys::nvrtcProgram) -> std::result::Result<Vec<u8>, result::NvrtcError> {
    let mut size = 0usize;
    sys::nvrtcGetCUBINSize(prog, &mut size).result()?;
    let mut out = vec![0u8; size];
    sys::nvrtcGetCUBIN(prog, out.as_mut_ptr().cast()).result()?;
    Ok(out)
}
