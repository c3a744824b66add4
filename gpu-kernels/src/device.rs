//! One CUDA device: its context, a stream, and the compiled kernel module.

use std::path::Path;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaViewMut,
};

use crate::compile::CompileCache;
use crate::error::{During, GpuError};
use crate::field::{as_raw, as_raw_mut, DeviceField};
use crate::loader;
use crate::locked::PageLocked;
use crate::staging::Staging;

/// What a device is, for logs, metrics and benchmark reports.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// e.g. "sm_90"
    pub arch: String,
    pub multiprocessors: u32,
    pub total_memory: usize,
    /// e.g. 13000 for CUDA 13.0
    pub driver_version: i32,
    /// Whether the kernels came from the on-disk cache rather than NVRTC.
    pub kernels_cached: bool,
}

/// A CUDA device with provd's kernels loaded.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Streams for host-to-device copies that overlap the kernels on
    /// `stream` ([`CopyLane`]), through `staging`; free ones, made as needed.
    lanes: Mutex<Vec<Arc<CudaStream>>>,
    pub(crate) staging: Mutex<Staging>,
    module: Arc<CudaModule>,
    info: DeviceInfo,
}

impl Gpu {
    /// Opens device `ordinal`, compiling the kernels (or taking them from
    /// `cache_dir`). Every reason a GPU cannot be used, including a missing
    /// driver or NVRTC, is a [`GpuError::Unavailable`], never a panic.
    pub fn open(ordinal: usize, cache_dir: &Path) -> Result<Self, GpuError> {
        loader::driver().map_err(GpuError::Unavailable)?;
        loader::nvrtc().map_err(GpuError::Unavailable)?;
        match std::panic::catch_unwind(|| Self::open_inner(ordinal, cache_dir)) {
            Ok(r) => r,
            Err(p) => Err(GpuError::Unavailable(format!(
                "CUDA initialisation panicked: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ))),
        }
    }

    /// How many CUDA devices the driver lists (an error where there is no
    /// driver, as for [`Gpu::open`]).
    pub fn count() -> Result<usize, GpuError> {
        loader::driver().map_err(GpuError::Unavailable)?;
        loader::nvrtc().map_err(GpuError::Unavailable)?;
        match std::panic::catch_unwind(CudaContext::device_count) {
            Ok(r) => r.map(|n| n.max(0) as usize).during("counting devices"),
            Err(_) => {
                Err(GpuError::Unavailable("CUDA initialisation panicked while counting devices".into()))
            }
        }
    }

    fn open_inner(ordinal: usize, cache_dir: &Path) -> Result<Self, GpuError> {
        let count = CudaContext::device_count().during("counting devices")?;
        if ordinal >= count as usize {
            return Err(GpuError::Unavailable(format!("device {ordinal} requested, {count} present")));
        }
        let ctx = CudaContext::new(ordinal).during("creating a context")?;
        let (major, minor) = ctx.compute_capability().during("reading the compute capability")?;
        let arch = format!("sm_{major}{minor}");
        let mut driver_version = 0;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) };
        let (cubin, kernels_cached) = CompileCache::new(cache_dir).cubin(&arch, driver_version)?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).during("loading the kernels")?;
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().during("reading the device name")?,
            arch,
            multiprocessors: ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .during("reading the SM count")? as u32,
            total_memory: ctx.total_mem().during("reading the memory size")?,
            driver_version,
            kernels_cached,
        };
        let stream = ctx.new_stream().during("creating a stream")?;
        let lanes = Mutex::new(vec![ctx.new_stream().during("creating a stream")?]);
        let staging = Mutex::new(Staging::new(&ctx)?);
        tracing::info!(
            device = %info.name, arch = %info.arch, sms = info.multiprocessors, cached = kernels_cached,
            "CUDA device ready"
        );
        Ok(Self { ctx, stream, lanes, staging, module, info })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Another stream on this device (for copies that overlap kernels).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, GpuError> {
        self.ctx.new_stream().during("creating a stream")
    }

    /// Page-locks `bytes` of host memory at `ptr` in place and maps it for
    /// every device of the process (portable), for DMA, until the
    /// registration drops. The caller keeps the memory alive meanwhile.
    pub(crate) fn register_host(
        &self,
        ptr: *const std::ffi::c_void,
        bytes: usize,
    ) -> Result<Registration, GpuError> {
        self.ctx.bind_to_thread().during("binding the context")?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: registers memory the caller owns and keeps alive; the
        // driver only reads it (copies to the device).
        let r = unsafe { sys::cuMemHostRegister_v2(ptr.cast_mut(), bytes, flags) };
        r.result().during("page-locking host memory (cuMemHostRegister)")?;
        Ok(Registration { ctx: self.ctx.clone(), ptr })
    }

    /// A kernel by name, for this crate's tests.
    #[doc(hidden)]
    pub fn function_for_tests(&self, name: &str) -> Result<CudaFunction, GpuError> {
        self.function(name)
    }

    pub(crate) fn function(&self, name: &str) -> Result<CudaFunction, GpuError> {
        self.module.load_function(name).during("looking up a kernel")
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        self.ctx.mem_get_info().during("reading memory use")
    }

    /// [`Gpu::memory`] once the allocator's pool has handed back what it
    /// keeps of buffers already freed: for deciding whether a proof fits.
    /// Buffers are allocated stream-ordered (`cuMemAllocAsync`), so a
    /// buffer dropped after a proof's last synchronisation stays in the
    /// pool, counted as used, until the next one; a room check read then
    /// saw a 16 GiB card short by a whole proof's vectors (7.5 GiB at a
    /// 32 GiB sector's shape). Waits for every stream of the context first,
    /// copy lanes included: the pool keeps a buffer freed on a stream until
    /// the host has seen that stream reach the free, and a proof's vectors
    /// are allocated and freed on its lane (waiting on the compute stream
    /// alone left some of them counted as used, and a 16 GiB card refused
    /// the next 32 GiB proof). A
    /// pool that cannot be trimmed is logged and read as it is: the check
    /// is then only as conservative as before, never wrong the other way.
    pub fn memory_reclaimed(&self) -> Result<(usize, usize), GpuError> {
        self.ctx.synchronize().during("waiting for the device")?;
        if self.ctx.has_async_alloc() {
            if let Err(e) = self.trim_pool() {
                tracing::warn!(device = self.info.ordinal, "free memory read untrimmed: {e}");
            }
        }
        self.memory()
    }

    /// What the stream-ordered allocator's pool has handed to live buffers:
    /// now, and at most since the last [`Gpu::restart_pool_peak`]. Every
    /// buffer of a proof comes from it, so the peak less what was live
    /// before is the proof's own peak, to set against what its room check
    /// asked. `None` on a device without the pool.
    pub fn pool_usage(&self) -> Result<Option<PoolUsage>, GpuError> {
        if !self.ctx.has_async_alloc() {
            return Ok(None);
        }
        use sys::CUmemPool_attribute::{CU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_HIGH};
        Ok(Some(PoolUsage {
            live: self.pool_attribute(CU_MEMPOOL_ATTR_USED_MEM_CURRENT, "reading the memory pool's use")?,
            peak: self.pool_attribute(CU_MEMPOOL_ATTR_USED_MEM_HIGH, "reading the memory pool's peak")?,
        }))
    }

    /// Restarts [`PoolUsage::peak`] (the driver resets the mark only to
    /// zero; it then rises with the next allocation). A proof's peak is
    /// read as the mark less what was live at the restart, which a proof
    /// that allocates anything leaves the same either way.
    pub fn restart_pool_peak(&self) -> Result<(), GpuError> {
        if !self.ctx.has_async_alloc() {
            return Ok(());
        }
        let high = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH;
        self.set_pool_attribute(high, 0, "restarting the memory pool's peak")
    }

    /// Hands back to the driver what the stream-ordered allocator's pool
    /// keeps of freed buffers.
    fn trim_pool(&self) -> Result<(), GpuError> {
        let pool = self.pool()?;
        // SAFETY: the pool is this context's device's; trimming frees only
        // memory no allocation holds.
        unsafe { sys::cuMemPoolTrimTo(pool, 0).result().during("trimming the device's memory pool") }
    }

    /// Lets the stream-ordered allocator's pool keep up to `bytes` of freed
    /// buffers mapped across synchronisations. The driver's default, 0,
    /// unmaps every freed buffer at each synchronisation, so that each MSM
    /// (which synchronises to read its sums back) maps its scratch afresh.
    /// [`Gpu::memory_reclaimed`] trims the pool whatever this is. A device
    /// without the pool ignores it.
    pub fn keep_freed_memory(&self, bytes: u64) -> Result<(), GpuError> {
        if !self.ctx.has_async_alloc() {
            return Ok(());
        }
        let threshold = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        self.set_pool_attribute(threshold, bytes, "setting the memory pool's release threshold")
    }

    /// One of the default pool's cuuint64_t attributes.
    fn pool_attribute(
        &self,
        attribute: sys::CUmemPool_attribute,
        what: &'static str,
    ) -> Result<u64, GpuError> {
        let pool = self.pool()?;
        let mut value = 0u64;
        // SAFETY: every attribute read here is a cuuint64_t, written by the driver.
        unsafe { sys::cuMemPoolGetAttribute(pool, attribute, (&mut value as *mut u64).cast()) }
            .result()
            .during(what)?;
        Ok(value)
    }

    /// Sets one of the default pool's cuuint64_t attributes.
    fn set_pool_attribute(
        &self,
        attribute: sys::CUmemPool_attribute,
        mut value: u64,
        what: &'static str,
    ) -> Result<(), GpuError> {
        let pool = self.pool()?;
        // SAFETY: every attribute set here is a cuuint64_t, read by the
        // driver during the call.
        unsafe { sys::cuMemPoolSetAttribute(pool, attribute, (&mut value as *mut u64).cast()) }
            .result()
            .during(what)
    }

    /// The device's default stream-ordered memory pool.
    fn pool(&self) -> Result<sys::CUmemoryPool, GpuError> {
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `pool` is written by the driver; the device is this context's.
        unsafe { sys::cuDeviceGetMemPool(&mut pool, self.ctx.cu_device()) }
            .result()
            .during("reading the device's memory pool")?;
        Ok(pool)
    }

    /// Copies field elements to a new device buffer.
    pub fn upload<F: DeviceField>(&self, v: &[F]) -> Result<CudaSlice<F::Raw>, GpuError> {
        self.stream.clone_htod(as_raw(v)).during("copying to the device")
    }

    /// A copy stream of this device, held until the guard drops; see
    /// [`CopyLane`].
    pub fn copy_lane(&self) -> Result<CopyLane<'_>, GpuError> {
        let free = self.lanes.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let stream = match free {
            Some(s) => s,
            None => self.ctx.new_stream().during("creating a stream")?,
        };
        Ok(CopyLane { gpu: self, stream: Some(stream) })
    }

    /// [`CopyLane::upload`] on a lane held for this one copy.
    pub fn upload_async<F: DeviceField>(&self, v: &[F]) -> Result<CudaSlice<F::Raw>, GpuError> {
        self.copy_lane()?.upload(v)
    }

    /// Copies a device buffer back.
    pub fn download<F: DeviceField + Default>(&self, d: &CudaSlice<F::Raw>) -> Result<Vec<F>, GpuError> {
        let mut out = vec![F::default(); d.len()];
        self.stream.memcpy_dtoh(d, as_raw_mut(&mut out)).during("copying from the device")?;
        self.synchronize()?;
        Ok(out)
    }

    /// A device buffer of `len` elements, zeroed.
    pub fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, GpuError> {
        self.stream.alloc_zeros(len).during("allocating device memory")
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.stream.synchronize().during("waiting for the device")
    }

    /// A pair of timing events on this device's stream.
    pub fn timer(&self) -> Result<Timer, GpuError> {
        self.timer_on(&self.stream)
    }

    /// A pair of timing events on `stream`, one of this device's.
    pub fn timer_on(&self, stream: &Arc<CudaStream>) -> Result<Timer, GpuError> {
        let flag = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(Timer {
            start: self.ctx.new_event(flag).during("creating an event")?,
            end: self.ctx.new_event(flag).during("creating an event")?,
            stream: stream.clone(),
        })
    }
}

/// Bytes of the device's stream-ordered pool held by live buffers
/// ([`Gpu::pool_usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    pub live: u64,
    pub peak: u64,
}

/// A stream for host-to-device copies that overlap the kernels on the
/// compute stream, held by one user (a proof) at a time and given back to
/// the device when dropped.
///
/// Why a proof holds its own: cudarc frees a buffer on the stream that
/// allocated it, after making that stream wait for the kernels that read
/// the buffer. On a copy stream shared by two proofs in flight, the first
/// one's frees would make the second one's copies, queued after them, wait
/// for the first one's kernels.
pub struct CopyLane<'a> {
    gpu: &'a Gpu,
    /// Always `Some` until dropped.
    stream: Option<Arc<CudaStream>>,
}

impl CopyLane<'_> {
    /// Copies field elements to a new device buffer on this lane, through
    /// page-locked staging (at the link's rate rather than the driver's
    /// pageable path). Returns once the host data is staged (the host slice
    /// may then be freed); kernels launched afterwards that read the buffer
    /// wait for the copy (cudarc orders the two streams by the buffer's
    /// events). `v` must not be empty.
    pub fn upload<F: DeviceField>(&self, v: &[F]) -> Result<CudaSlice<F::Raw>, GpuError> {
        self.upload_locked(&PageLocked::pageable(v))
    }

    /// As [`CopyLane::upload`], out of `v` page-locked where it is (one
    /// DMA at the link's rate, waited for before this returns, so that `v`
    /// may be unlocked and freed after), through the staging slots where
    /// it is not.
    pub fn upload_locked<F: DeviceField, V: AsRef<[F]>>(
        &self,
        v: &PageLocked<V>,
    ) -> Result<CudaSlice<F::Raw>, GpuError> {
        let src = v.data().as_ref();
        if src.is_empty() {
            return Err(GpuError::Invalid("an upload of no elements".into()));
        }
        // SAFETY: every element is written by the copy below before any read.
        let mut d = unsafe { self.stream().alloc::<F::Raw>(src.len()) }.during("allocating device memory")?;
        self.upload_locked_into(v, &mut d.slice_mut(..))?;
        Ok(d)
    }

    /// As [`CopyLane::upload_locked`], into `dst` (of `v`'s length), which
    /// this lane's stream must be allowed to write.
    pub(crate) fn upload_locked_into<F: DeviceField, V: AsRef<[F]>>(
        &self,
        v: &PageLocked<V>,
        dst: &mut CudaViewMut<F::Raw>,
    ) -> Result<(), GpuError> {
        let src = v.data().as_ref();
        if !v.is_locked() {
            let mut staging = self.gpu.staging.lock().unwrap_or_else(|e| e.into_inner());
            return staging.copy(self.stream(), as_raw(src), dst);
        }
        if dst.len() != src.len() {
            return Err(GpuError::Invalid(format!("a copy of {} elements into {}", src.len(), dst.len())));
        }
        // The driver knows the pages are locked: an asynchronous DMA, which
        // must finish before `v` may be unlocked, hence the wait.
        self.stream().memcpy_htod(as_raw(src), dst).during("copying to the device")?;
        self.stream().synchronize().during("waiting for a copy to the device")
    }

    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        self.stream.as_ref().expect("a lane holds its stream until dropped")
    }
}

impl Drop for CopyLane<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            self.gpu.lanes.lock().unwrap_or_else(|e| e.into_inner()).push(s);
        }
    }
}

/// Times device work with CUDA events (not host clocks).
pub struct Timer {
    start: CudaEvent,
    end: CudaEvent,
    stream: Arc<CudaStream>,
}

impl Timer {
    pub fn start(&self) -> Result<(), GpuError> {
        self.start.record(&self.stream).during("recording an event")
    }

    /// Milliseconds since `start`, waiting for the work in between.
    pub fn stop(&self) -> Result<f32, GpuError> {
        self.end.record(&self.stream).during("recording an event")?;
        self.end.synchronize().during("waiting for an event")?;
        self.start.elapsed_ms(&self.end).during("reading an event")
    }
}

/// Host memory page-locked by [`Gpu::register_host`], unlocked when dropped
/// (from any thread: the context is bound first).
pub(crate) struct Registration {
    ctx: Arc<CudaContext>,
    ptr: *const std::ffi::c_void,
}

// SAFETY: the pointer is only handed back to the driver, which registered it
// for the whole process.
unsafe impl Send for Registration {}
unsafe impl Sync for Registration {}

impl Drop for Registration {
    fn drop(&mut self) {
        let r = self.ctx.bind_to_thread().and_then(|()| {
            // SAFETY: `ptr` was registered by `Gpu::register_host` and not since unregistered.
            unsafe { sys::cuMemHostUnregister(self.ptr.cast_mut()) }.result()
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "unregistering page-locked host memory");
        }
    }
}
