//! NVRTC compilation of the kernel sources to a cubin for one architecture,
//! cached on disk by source hash, architecture and driver/NVRTC versions.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::GpuError;
use crate::loader;

/// The kernel sources, in layer order (one translation unit).
const SOURCES: &[(&str, &str)] = &[
    ("prelude.cuh", include_str!("../cuda/prelude.cuh")),
    ("field.cuh", include_str!("../cuda/field.cuh")),
    ("fields.cuh", include_str!("../cuda/fields.cuh")),
    ("curve.cuh", include_str!("../cuda/curve.cuh")),
    ("ntt.cu", include_str!("../cuda/ntt.cu")),
    ("msm.cu", include_str!("../cuda/msm.cu")),
    ("select.cu", include_str!("../cuda/select.cu")),
    ("sparse.cu", include_str!("../cuda/sparse.cu")),
    ("field_tests.cu", include_str!("../cuda/field_tests.cu")),
];

/// The whole kernel translation unit, with `#line` markers so that compiler
/// messages name the original file.
pub fn kernel_source() -> String {
    let mut src = String::new();
    for (name, text) in SOURCES {
        src.push_str(&format!("#line 1 \"{name}\"\n"));
        src.push_str(text);
        src.push('\n');
    }
    src
}

fn options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "--std=c++17".into(), "-DNVRTC=1".into()]
}

/// Compiles the kernels to a cubin for `arch` (e.g. "sm_90"). Needs only NVRTC,
/// no device.
pub fn compile_cubin(arch: &str) -> Result<Vec<u8>, GpuError> {
    loader::nvrtc().map_err(GpuError::Unavailable)?;
    use cudarc::nvrtc::sys;
    let src = CString::new(kernel_source()).expect("kernel source has no NUL");
    let name = CString::new("provd_kernels.cu").unwrap();
    let opts: Vec<CString> = options(arch).into_iter().map(|o| CString::new(o).unwrap()).collect();
    let opt_ptrs: Vec<*const std::ffi::c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let nvrtc_err = |what: &str, r: sys::nvrtcResult| GpuError::Compile {
        arch: arch.into(),
        log: format!("{what} returned {r:?}"),
    };
    // SAFETY: plain NVRTC calls on a program owned here and destroyed below.
    unsafe {
        let mut prog = std::ptr::null_mut();
        let r = sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(nvrtc_err("nvrtcCreateProgram", r));
        }
        let compiled = sys::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr());
        let result = if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
            let mut size = 0usize;
            sys::nvrtcGetProgramLogSize(prog, &mut size);
            let mut log = vec![0u8; size.max(1)];
            sys::nvrtcGetProgramLog(prog, log.as_mut_ptr().cast());
            let log = CStr::from_bytes_until_nul(&log)
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default();
            Err(GpuError::Compile { arch: arch.into(), log })
        } else {
            let mut size = 0usize;
            let r = sys::nvrtcGetCUBINSize(prog, &mut size);
            if r != sys::nvrtcResult::NVRTC_SUCCESS {
                Err(nvrtc_err("nvrtcGetCUBINSize", r))
            } else {
                let mut cubin = vec![0u8; size];
                let r = sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast());
                if r != sys::nvrtcResult::NVRTC_SUCCESS {
                    Err(nvrtc_err("nvrtcGetCUBIN", r))
                } else {
                    Ok(cubin)
                }
            }
        };
        sys::nvrtcDestroyProgram(&mut prog);
        result
    }
}

/// NVRTC's version, e.g. (13, 0).
pub fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    loader::nvrtc().map_err(GpuError::Unavailable)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    Ok((major, minor))
}

/// A directory of compiled cubins.
pub struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.to_path_buf() }
    }

    /// The cubin for `arch` under driver `driver_version`: from the cache when
    /// present, else compiled and stored (a cache that cannot be written only
    /// costs a recompile next time).
    pub fn cubin(&self, arch: &str, driver_version: i32) -> Result<(Vec<u8>, bool), GpuError> {
        let (major, minor) = nvrtc_version()?;
        let mut h = Sha256::new();
        h.update(kernel_source());
        h.update(options(arch).join(" "));
        h.update(format!("driver {driver_version} nvrtc {major}.{minor}"));
        let digest: String = h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
        let path = self.dir.join(format!("provd-{arch}-{digest}.cubin"));
        if let Ok(bytes) = std::fs::read(&path) {
            return Ok((bytes, true));
        }
        let t = std::time::Instant::now();
        let cubin = compile_cubin(arch)?;
        let nvrtc = loader::nvrtc().map_err(GpuError::Unavailable)?;
        tracing::info!(arch, secs = t.elapsed().as_secs_f64(), nvrtc = %nvrtc.display(), "compiled CUDA kernels with NVRTC");
        let tmp = path.with_extension("partial");
        let stored = std::fs::create_dir_all(&self.dir)
            .and_then(|_| std::fs::write(&tmp, &cubin))
            .and_then(|_| std::fs::rename(&tmp, &path));
        if let Err(e) = stored {
            tracing::warn!(path = %path.display(), "cannot cache compiled kernels: {e}");
        }
        Ok((cubin, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI has no GPU but has NVRTC (from PyPI): every kernel must compile for
    /// the architectures provd targets. Set PROVD_REQUIRE_NVRTC=1 to make a
    /// missing NVRTC a failure rather than a skip.
    #[test]
    fn kernels_compile_with_nvrtc() {
        if let Err(e) = loader::nvrtc() {
            assert!(std::env::var_os("PROVD_REQUIRE_NVRTC").is_none(), "NVRTC required but missing: {e}");
            eprintln!("skipped: {e}");
            return;
        }
        // Each architecture on its own thread: one compile is ~45 s on the
        // CI machine's core, and CI has two.
        std::thread::scope(|s| {
            for arch in ["sm_90", "sm_80"] {
                s.spawn(move || {
                    let cubin = compile_cubin(arch).unwrap_or_else(|e| panic!("{e}"));
                    assert!(cubin.starts_with(b"\x7fELF"), "{arch}: a cubin is an ELF image");
                    // The kernels whose names are chosen at run time are all there.
                    for name in crate::sparse::KERNELS.iter().flatten() {
                        let found = cubin
                            .windows(name.len() + 1)
                            .any(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0);
                        assert!(found, "{arch}: {name} is not in the cubin");
                    }
                });
            }
        });
    }

    #[test]
    fn compile_errors_carry_the_log() {
        if loader::nvrtc().is_err() {
            eprintln!("skipped: no NVRTC");
            return;
        }
        let err = compile_cubin("sm_1").unwrap_err();
        assert!(err.to_string().contains("sm_1"), "{err}");
    }
}
