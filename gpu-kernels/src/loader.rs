//! Finding the CUDA driver and NVRTC libraries before cudarc touches them
//! (cudarc panics when a library it needs is missing).

use std::path::{Path, PathBuf};
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
/// later loads of its soname (by cudarc) find it; but cudarc asks for
/// `libnvrtc.so` first, which a CUDA toolkit on the loader's path answers
/// with its own copy. Returns the file whose NVRTC the bindings call (found
/// from where its code is mapped), and refuses when that is not the file
/// `PROVD_NVRTC` names.
pub(crate) fn nvrtc() -> Result<&'static Path, String> {
    static RESULT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
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
                let Ok(lib) = (unsafe { libloading::Library::new(&c) }) else {
                    tried.push(c);
                    continue;
                };
                let ours = version_symbol(&lib);
                std::mem::forget(lib); // keep it loaded for the process
                preload_builtins(&c);
                if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                    continue;
                }
                // SAFETY: present, as just checked; cudarc keeps it loaded.
                let in_use = version_symbol(unsafe { cudarc::nvrtc::sys::culib() });
                let file = in_use.and_then(mapped_file).unwrap_or_else(|| PathBuf::from(&c));
                if explicit.as_deref() == Some(c.as_str()) && ours != in_use {
                    return Err(format!(
                        "PROVD_NVRTC names {c}, but the CUDA bindings load libnvrtc.so from the loader's path ({}); \
                         put {c}'s directory first in LD_LIBRARY_PATH, beside a libnvrtc.so link to it",
                        file.display()
                    ));
                }
                return Ok(file);
            }
            Err(format!(
                "NVRTC (libnvrtc.so.13) not found; install the CUDA toolkit or `pip install nvidia-cuda-nvrtc`, \
                 or set PROVD_NVRTC to the library (tried {})",
                tried.join(", ")
            ))
        })
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(Clone::clone)
}

/// Where `lib`'s `nvrtcVersion` is: the same address from two handles means
/// the same loaded library.
fn version_symbol(lib: &libloading::Library) -> Option<usize> {
    // SAFETY: the symbol's address is read, never called through this type.
    unsafe { lib.get::<*const std::ffi::c_void>(b"nvrtcVersion\0").ok().map(|s| *s as usize) }
}

/// The file mapped at `addr` in this process (`/proc/self/maps`).
fn mapped_file(addr: usize) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (lo, hi) = fields.next()?.split_once('-')?;
        let (lo, hi) = (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
        let path = fields.nth(4)?;
        (lo <= addr && addr < hi && path.starts_with('/')).then(|| PathBuf::from(path))
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_in_this_test_binary_maps_to_its_file() {
        let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
        let found = mapped_file(mapped_file as *const () as usize)
            .expect("this function's code is mapped from a file");
        assert_eq!(found.canonicalize().unwrap(), exe);
        assert_eq!(mapped_file(0), None, "nothing is mapped at address 0");
    }
}
