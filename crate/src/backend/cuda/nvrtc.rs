//! Run-time compilation of `shaders/cuda/*.cu` with NVRTC into a CUBIN for one compute capability.
//! NVRTC needs no driver and no GPU, so the kernels are compile-checked on any machine that has
//! libnvrtc (the test `native-tests/tests/cuda.rs`).
//!
//! NVRTC is called through its stable C API (eight functions, the same in CUDA 11, 12 and 13),
//! opened here rather than through cudarc, whose loader knows only the sonames of one CUDA major
//! version and panics when none is found. libnvrtc is looked for, in order: `GGWEB_NVRTC_LIB` (a
//! file), the copy `scripts/setup-cuda.sh` installs from PyPI under `$GGWEB_CACHE/tools`, a CUDA
//! toolkit (`CUDA_HOME`, `CUDA_PATH`, /usr/local/cuda), then the dynamic loader's own search
//! (`LD_LIBRARY_PATH`, the system) by soname, newest major first.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

use libloading::Library;

use crate::{Error, Result};

/// The NVRTC wheel `scripts/setup-cuda.sh` installs (its folder under `$GGWEB_CACHE/tools`).
pub const NVRTC_WHEEL_DIR: &str = "nvrtc-cu12-12.9.86";

type Program = *mut c_void;

/// The NVRTC functions used (nvrtc.h), resolved once.
struct Api {
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    log: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut Program) -> c_int,
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    /// Where it was loaded from.
    origin: String,
    /// Kept loaded for the functions above.
    _lib: Library,
}

/// Candidate files of libnvrtc, most specific first.
fn candidate_files() -> Vec<PathBuf> {
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

/// Sonames tried through the loader's search when no file above exists.
const SONAMES: [&str; 4] = [
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so",
];

fn api() -> std::result::Result<&'static Api, String> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(|e| e.clone())
}

fn load() -> std::result::Result<Api, String> {
    let mut tried = Vec::new();
    let files = candidate_files().into_iter().filter(|p| p.is_file());
    let names = files
        .map(|p| p.display().to_string())
        .chain(SONAMES.iter().map(|s| s.to_string()));
    for name in names {
        // SAFETY: opening libnvrtc runs only its initialisers.
        match unsafe { Library::new(&name) } {
            Ok(lib) => return resolve(lib, name),
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    Err(format!(
        "libnvrtc not found (set GGWEB_NVRTC_LIB, run scripts/setup-cuda.sh, or install a CUDA toolkit); tried {}",
        tried.join("; ")
    ))
}

fn resolve(lib: Library, origin: String) -> std::result::Result<Api, String> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol has this C signature in every NVRTC since CUDA 11.1 (nvrtc.h);
            // the pointer stays valid while `lib` is kept in the Api.
            *unsafe { lib.get($name) }.map_err(|e| format!("{origin}: {e}"))?
        };
    }
    Ok(Api {
        create: sym!(b"nvrtcCreateProgram\0"),
        compile: sym!(b"nvrtcCompileProgram\0"),
        log_size: sym!(b"nvrtcGetProgramLogSize\0"),
        log: sym!(b"nvrtcGetProgramLog\0"),
        cubin_size: sym!(b"nvrtcGetCUBINSize\0"),
        cubin: sym!(b"nvrtcGetCUBIN\0"),
        destroy: sym!(b"nvrtcDestroyProgram\0"),
        version: sym!(b"nvrtcVersion\0"),
        error_string: sym!(b"nvrtcGetErrorString\0"),
        origin,
        _lib: lib,
    })
}

/// Whether NVRTC can be used, or why not (found once).
pub fn available() -> std::result::Result<(), String> {
    api().map(|_| ())
}

/// The library NVRTC was loaded from.
pub fn origin() -> Option<&'static str> {
    api().ok().map(|a| a.origin.as_str())
}

/// NVRTC's (major, minor) version.
pub fn version() -> Result<(i32, i32)> {
    let a = api().map_err(Error::Backend)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    let r = unsafe { (a.version)(&mut major, &mut minor) };
    check(a, r, "nvrtcVersion")?;
    Ok((major, minor))
}

/// NVRTC's name of result code `r`.
fn message(a: &Api, r: c_int) -> String {
    // SAFETY: nvrtcGetErrorString returns a static C string for any code.
    let msg = unsafe { CStr::from_ptr((a.error_string)(r)) }.to_string_lossy();
    format!("{msg} ({r})")
}

fn check(a: &Api, r: c_int, what: &str) -> Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Error::Backend(format!("{what}: {}", message(a, r))))
    }
}

/// Compile `source` (a complete translation unit) for `sm_<arch>` (e.g. 80, 90) into a CUBIN.
/// A compile error carries NVRTC's log.
pub fn compile(name: &str, source: &str, arch: u32) -> Result<Vec<u8>> {
    let a = api().map_err(Error::Backend)?;
    let src = CString::new(source).map_err(|_| Error::Backend(format!("{name}: NUL in source")))?;
    let cname = CString::new(name).map_err(|_| Error::Backend(format!("{name}: NUL in name")))?;
    let opts: Vec<CString> = [
        format!("--gpu-architecture=sm_{arch}"),
        "--std=c++17".into(),
    ]
    .into_iter()
    .map(|o| CString::new(o).expect("no NUL in the options"))
    .collect();
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: Program = std::ptr::null_mut();
    // SAFETY: valid C strings; no headers (count 0, null arrays).
    let r = unsafe {
        (a.create)(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    check(a, r, &format!("{name}: nvrtcCreateProgram"))?;
    // SAFETY: `prog` is live until the destroy below; `src`, `cname`, `opts` outlive it; the
    // buffers passed are sized by the matching *Size calls.
    let out = unsafe {
        let compiled = (a.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
        let mut log_len = 0usize;
        let mut log = String::new();
        if (a.log_size)(prog, &mut log_len) == 0 && log_len > 1 {
            let mut buf = vec![0u8; log_len];
            if (a.log)(prog, buf.as_mut_ptr().cast()) == 0 {
                log = String::from_utf8_lossy(&buf[..log_len - 1]).into_owned();
            }
        }
        let r = if compiled != 0 {
            Err(Error::Backend(format!(
                "{name}: NVRTC compile for sm_{arch} failed, {}:\n{log}",
                message(a, compiled)
            )))
        } else {
            let mut size = 0usize;
            check(a, (a.cubin_size)(prog, &mut size), "nvrtcGetCUBINSize").and_then(|()| {
                let mut bin = vec![0u8; size];
                check(a, (a.cubin)(prog, bin.as_mut_ptr().cast()), "nvrtcGetCUBIN").map(|()| bin)
            })
        };
        (a.destroy)(&mut prog);
        r
    };
    out
}
