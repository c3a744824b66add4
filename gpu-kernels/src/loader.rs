//! Finding the CUDA driver and NVRTC libraries before cudarc touches them
//! (cudarc panics when a library it needs is missing).

use std::sync::OnceLock;

/// Where NVRTC is usually installed, besides the loader's own search path:
/// the CUDA toolkit, and the `nvidia-cuda-nvrtc` Python wheel.
const NVRTC_CANDIDATES: &[&str] = &[
    "/usr/local/cuda/lib64/libnvrtc.so.13",
    "/usr/local/cuda/lib64/libnvrtc.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13",
    "/usr/lib/x86_64-linux-gnu/libnvrtc.so.13",
];

/// Checks for the driver library and a working driver with at least one device.
pub(crate) fn driver() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            // SAFETY: only probes dlopen.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err("the CUDA driver library (libcuda.so) is not installed".into());
            }
            cudarc::driver::result::init()
                .map_err(|e| format!("the CUDA driver failed to initialise: {e}"))?;
            match cudarc::driver::result::device::get_count() {
                Ok(0) => Err("the CUDA driver reports no devices".into()),
                Ok(_) => Ok(()),
                Err(e) => Err(format!("cannot count CUDA devices: {e}")),
            }
        })
        .clone()
}

/// Makes NVRTC loadable: `PROVD_NVRTC` (a file) first, then the loader's path,
/// then the usual install locations. Loading a library by full path makes
/// later loads of its soname (by cudarc) find it.
pub(crate) fn nvrtc() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            let mut tried = Vec::new();
            let explicit = std::env::var("PROVD_NVRTC").ok();
            let wheel = python_wheel_dirs();
            let candidates = explicit
                .iter()
                .map(String::as_str)
                .chain(std::iter::once("libnvrtc.so.13"))
                .chain(std::iter::once("libnvrtc.so"))
                .chain(NVRTC_CANDIDATES.iter().copied())
                .map(String::from)
                .chain(wheel);
            for c in candidates {
                // SAFETY: loading NVRTC runs only its initialisers.
                match unsafe { libloading::Library::new(&c) } {
                    Ok(lib) => {
                        std::mem::forget(lib); // keep it loaded for the process
                        preload_builtins(&c);
                        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                            return Ok(());
                        }
                    }
                    Err(_) => tried.push(c),
                }
            }
            Err(format!(
                "NVRTC (libnvrtc.so.13) not found; install the CUDA toolkit or `pip install nvidia-cuda-nvrtc`, \
                 or set PROVD_NVRTC to the library (tried {})",
                tried.join(", ")
            ))
        })
        .clone()
}

/// NVRTC dlopens `libnvrtc-builtins.so.13.x` by name when it compiles; when
/// NVRTC itself was found by path, load its builtins from beside it first.
fn preload_builtins(nvrtc: &str) {
    let Some(dir) = std::path::Path::new(nvrtc).parent().filter(|d| !d.as_os_str().is_empty()) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("libnvrtc-builtins.so") && !name.contains(".alt.") {
            // SAFETY: NVRTC's own support library.
            if let Ok(lib) = unsafe { libloading::Library::new(e.path()) } {
                std::mem::forget(lib);
            }
        }
    }
}

/// `…/site-packages/nvidia/cu13/lib/libnvrtc.so.13` under the Python prefixes
/// named by the environment (a virtualenv, pyenv) and the system ones.
fn python_wheel_dirs() -> Vec<String> {
    let mut roots: Vec<std::path::PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(v.into());
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(std::path::Path::new(&home).join(".local"));
        if let Ok(entries) = std::fs::read_dir(std::path::Path::new(&home).join(".pyenv/versions")) {
            roots.extend(entries.flatten().map(|e| e.path()));
        }
    }
    roots.extend(["/usr", "/usr/local", "/opt/torch/.venv"].map(Into::into));
    let mut out = Vec::new();
    for root in roots {
        for lib in ["lib", "lib64"] {
            if let Ok(entries) = std::fs::read_dir(root.join(lib)) {
                for e in entries.flatten() {
                    for site in ["site-packages", "dist-packages"] {
                        let p = e.path().join(site).join("nvidia/cu13/lib/libnvrtc.so.13");
                        if p.exists() {
                            out.push(p.display().to_string());
                        }
                    }
                }
            }
        }
    }
    out
}
