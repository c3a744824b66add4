//! One partition's device work, in order: copies ahead of the device lock,
//! the key (and its matrices) made resident, a, b and c computed on the
//! device where they were left to it, the H chain, and the MSMs (H, L, A,
//! B in G1, and B in G2 unless it runs on the host), each step timed with
//! CUDA events. A key streamed from the host holds two vectors of the
//! domain on the device at a time ([`Held::Two`]), and its MSMs read its
//! bases a chunk at a time.

use std::sync::MutexGuard;
use std::time::Instant;

use blstrs::{G1Projective, G2Projective, Scalar};
use group::Group;
use provd_kernels::{
    select_by_density, CopyLane, CudaSlice, FrRaw, G1Bases, G2Bases, Gpu, GpuError, Msm, Order, PageLocked,
    Timer, Unsatisfied,
};

use super::copy_plan::{
    copy_ahead, page_lock, upload_abc, upload_aux, Ahead, AssignmentOnDevice, Freeing, Prepared, Vectors,
};
use super::device_key::{h_order, DeviceKey, Large};
use super::h_chain::{quotient_on_device, Held, Quotient};
use super::residency::{self, DeviceMemory};
use super::{backend_error, BasesLayout, CudaBackend, DevicePeak, ProductsPlacement, State};
use crate::groth16::msm::filter;
use crate::groth16::pinned::PinnedQueries;
use crate::groth16::prover::{split, Assignment, G1Parts, PendingProof, StepTime};
use crate::groth16::synthesis::{Density, Evaluations, Products};
use crate::groth16::{HostProducts, ProveError, ProvingKey, Synthesized};

/// a, b, c computed on the device, and their a·b = c check, read once the
/// MSMs are queued behind it.
struct Check {
    unsatisfied: Unsatisfied,
    products: Products,
}

impl CudaBackend {
    /// All five MSMs and H on the device (B's G2 MSM too, unless
    /// `G2Placement::Cpu` leaves it to `prove_finish`). The aux assignment
    /// is copied once, during the H chain (or before, with a, b and c to
    /// compute from it), and the A and B queries' subsets are picked from it
    /// on the device.
    pub(super) fn start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError> {
        let log_n = key.domain_size().trailing_zeros();
        let (abc, abc_hold, asg, a_aux_density) = split(witness);
        // The inputs' subset in B is a handful of scalars: filtered here.
        let b_in = filter(&asg.input, &asg.b_input_density);
        let wall = Instant::now();
        // Declared first, so dropped last: every device buffer of this proof
        // is allocated on the lane and freed on it, never on another proof's.
        let lane = self.gpu.copy_lane().map_err(backend_error)?;
        // A key that will be streamed leaves the device little room: nothing
        // goes there before its room is checked, and a, b and c wait on the
        // host until the chain takes them, page-locked meanwhile (as is the
        // aux assignment, copied after the chain).
        let streams = residency::streams(&self.rules(), key, self.capacity);
        let ahead = match streams {
            true => Ahead::Nothing,
            false => Ahead::As(self.options.partitions_in_flight),
        };
        let prepared =
            copy_ahead(ahead, &self.gpu, &lane, log_n, abc, &asg.input, &asg.aux).map_err(backend_error)?;
        let host_aux = match streams {
            true => PageLocked::new(&self.gpu, asg.aux.as_slice()),
            false => PageLocked::pageable(asg.aux.as_slice()),
        };
        let copied = !matches!(
            prepared,
            Prepared::Evaluated(Vectors::OnHost(_)) | Prepared::Products { assignment: None, .. }
        );
        let copied = match (streams, copied) {
            (true, _) => Some(StepTime::on_host_since("page-locking (before the device lock)", wall)),
            (false, true) => Some(StepTime::on_host_since("copies (before the device lock)", wall)),
            (false, false) => None,
        };
        let (mut state, slot, prepared, waited) = self.hold_device(key, &lane, log_n, &asg, prepared)?;
        state.make_ntt_tables(&self.gpu, key).map_err(backend_error)?;
        let products = match prepared {
            Prepared::Products { .. } => ProductsPlacement::Gpu,
            Prepared::Evaluated(_) => ProductsPlacement::Cpu,
        };
        let l_schedule = self.l_schedule(&state, key, slot, products)?;
        let pool = PoolWatch::start(&self.gpu).map_err(backend_error)?;
        let State { ntts, residency, timer, last_peak } = &mut *state;
        let mut clock = StepClock::new(timer);
        clock.steps.extend(copied);
        clock.steps.extend(waited);
        let resident = residency.get(slot);
        let held = match resident.layout {
            BasesLayout::Streamed => Held::Two,
            BasesLayout::Plain | BasesLayout::Shifted => Held::Three,
        };
        let (vectors, check) = match prepared {
            Prepared::Products { products, assignment } => {
                let AssignmentOnDevice { input, aux } = match assignment {
                    Some(copied) => copied,
                    None => {
                        AssignmentOnDevice::upload(&lane, &asg.input, &host_aux).map_err(backend_error)?
                    }
                };
                let Some((_, matrices)) = &resident.matrices else {
                    let left = GpuError::Invalid("the circuit's matrices left the device".into());
                    return Err(backend_error(left));
                };
                let gpu = &*self.gpu;
                let rows = products.matrices.num_constraints();
                let [a_rows, b_rows, c_rows] = &matrices.0;
                let (vectors, unsatisfied) = clock
                    .time("products", || {
                        let a = a_rows.product(gpu, &input, aux.as_ref(), log_n)?;
                        let b = b_rows.product(gpu, &input, aux.as_ref(), log_n)?;
                        Ok(match held {
                            // c from C's rows in the chain, once a·b has freed b;
                            // checked here against a and b without a vector.
                            Held::Two => {
                                let unsatisfied = c_rows.unsatisfied(gpu, &input, aux.as_ref(), &a, &b)?;
                                let assignment = AssignmentOnDevice { input, aux };
                                (Vectors::ProductsTwoAtATime { ab: [a, b], c_rows, assignment }, unsatisfied)
                            }
                            Held::Three => {
                                let c = c_rows.product(gpu, &input, aux.as_ref(), log_n)?;
                                let unsatisfied = Unsatisfied::check(gpu, &a, &b, &c, rows)?;
                                (Vectors::OnDevice { abc: [a, b, c], aux }, unsatisfied)
                            }
                        })
                    })
                    .map_err(backend_error)?;
                (vectors, Some(Check { unsatisfied, products }))
            }
            Prepared::Evaluated(v) => (v, None),
        };
        let Quotient { h: mut h_scalars, aux, spent } = clock
            .time("copies + quotient", || {
                quotient_on_device(&self.gpu, &lane, ntts, key.reduction, log_n, vectors, &host_aux, held)
            })
            .map_err(backend_error)?;
        let freeing = Freeing::start(spent, abc_hold);
        let large = match &resident.bases.large {
            Large::OnDevice(q) => Queries::OnDevice {
                h: &q.h,
                l: &q.l,
                a_aux: &q.a_aux,
                b_aux: &q.b_aux,
                b_g2_aux: q.b_g2_aux.as_ref(),
            },
            Large::Streamed => {
                let pinned = key.pinned.get_or_register(key, &self.gpu).map_err(backend_error)?;
                Queries::Streamed {
                    pinned,
                    chunks: StreamChunks::for_domain(log_n),
                    inputs: key.vk.ic.len(),
                    b_inputs: resident.bases.b_inputs.len(),
                }
            }
        };
        let msms =
            Msms { backend: self, bases: &resident.bases, large, asg: &asg, b_in: &b_in, aux: aux.as_ref() };
        let mut h_msm = || match &msms.large {
            Queries::OnDevice { h, .. } => self.msm.run_device(h, h_scalars.raw(), h_scalars.len()),
            Queries::Streamed { pinned, chunks, .. } => {
                // The host's H bases are in the key's natural order.
                if h_order(key.reduction) == Order::BitReversed {
                    ntts.get(&key.reduction.root())
                        .expect("the H chain's engine")
                        .bit_reverse(&mut h_scalars)?;
                }
                let n = pinned.h.len().min(h_scalars.len());
                self.msm.run_streamed(pinned.h.view(..), chunks.g1, h_scalars.raw(), n)
            }
        };
        let (h, l) = match l_schedule {
            LSchedule::AfterH => (clock.time("msm h", h_msm).map_err(backend_error)?, None),
            // L on the second engine's stream while H runs on the device's.
            LSchedule::BesideH { .. } => {
                let (h, l) = clock
                    .time("msm h + l (beside)", || {
                        std::thread::scope(|s| {
                            let l = s.spawn(|| msms.l_on(&self.msm_beside));
                            let h = h_msm();
                            let l = l.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                            Ok((h?, l?))
                        })
                    })
                    .map_err(backend_error)?;
                (h, Some(l))
            }
        };
        drop(h_scalars);
        let (g1, b_g2) = msms.run(&mut clock, h, l, &a_aux_density).map_err(backend_error)?;
        // Every device buffer of this proof goes before the device is let
        // go: the next partition reads the free memory for its room check
        // as soon as it holds the lock, and the aux assignment (4 GiB at
        // 2^27) would otherwise live on through `freeing.wait()` below.
        drop(aux);
        let unsatisfied = match check {
            Some(c) => c
                .unsatisfied
                .first(&self.gpu)
                .map_err(backend_error)?
                .filter(|_| c.products.refuses_unsatisfied())
                .map(|_| c.products),
            None => None,
        };
        let (device_seconds, steps) = clock.into_parts();
        let asked = self.rules().proof_bytes(key, resident.layout, products) + l_schedule.extra_bytes();
        *last_peak = pool.finish(&self.gpu, asked).map_err(backend_error)?;
        // Naming the bad constraint re-runs the circuit: not while holding the device.
        drop(state);
        // The aux assignment, copied long ago: unlocked now that the device
        // is free. a, b and c were being freed meanwhile.
        drop(host_aux);
        freeing.wait();
        if let Some(products) = unsatisfied {
            return Err(products.unsatisfied());
        }
        Ok(PendingProof { g1, b_g2, assignment: asg, device_seconds, steps })
    }

    /// When this proof runs L's MSM ([`Rules::l_schedule`](residency::Rules::l_schedule)):
    /// the device's free memory is read (and its allocator's pool trimmed)
    /// only for a streamed key, the one that may run it beside H.
    fn l_schedule(
        &self,
        state: &State,
        key: &ProvingKey,
        slot: usize,
        products: ProductsPlacement,
    ) -> Result<LSchedule, ProveError> {
        let layout = state.residency.get(slot).layout;
        if layout != BasesLayout::Streamed {
            return Ok(LSchedule::AfterH);
        }
        let free = state.device_for(&self.gpu, key).free_bytes().map_err(backend_error)?;
        Ok(self.rules().l_schedule(key, layout, products, free))
    }

    /// Takes the device with `key` resident and, where a, b and c were left
    /// to it, the circuit's matrices beside it. With no room for the
    /// matrices, a, b and c are computed on the host's cores without holding
    /// the device, then the device is taken again; unless the caller
    /// released their host memory (the pipeline), which then makes the
    /// witness again (`ProveError::NoRoomForProducts`). Returns the locked
    /// state, the key's slot, the vectors as they now are, and the time
    /// spent waiting (and on the host).
    fn hold_device<'a>(
        &'a self,
        key: &ProvingKey,
        lane: &CopyLane,
        log_n: u32,
        asg: &Assignment,
        prepared: Prepared,
    ) -> Result<(MutexGuard<'a, State>, usize, Prepared, Vec<StepTime>), ProveError> {
        let b_inputs = asg.b_input_density.ones();
        let wall = Instant::now();
        let mut state = self.lock();
        let mut steps = vec![StepTime::on_host_since("wait for device", wall)];
        let device = state.device_for(&self.gpu, key);
        let slot = state.residency.make_resident(&device, key, b_inputs)?;
        let Prepared::Products { products, assignment } = prepared else {
            return Ok((state, slot, prepared, steps));
        };
        if state.residency.make_matrices_resident(&device, slot, key, &products.matrices)? {
            return Ok((state, slot, Prepared::Products { products, assignment }, steps));
        }
        let streamed = state.residency.get(slot).layout == BasesLayout::Streamed;
        drop(state);
        let wall = Instant::now();
        let abc = Evaluations::Products(products).on_host(&asg.input, &asg.aux, HostProducts::Ab)?;
        steps.push(StepTime::on_host_since(StepTime::PRODUCTS_ON_HOST, wall));
        let wall = Instant::now();
        let vectors = match streamed {
            // The aux assignment is copied after the chain.
            true => {
                let abc = page_lock(&self.gpu, abc);
                steps.push(StepTime::on_host_since("page-locking a, b and c", wall));
                Vectors::OnHost(abc)
            }
            false => {
                let aux = match assignment {
                    Some(copied) => copied.aux,
                    None => {
                        upload_aux(lane, &PageLocked::pageable(asg.aux.as_slice())).map_err(backend_error)?
                    }
                };
                let abc = upload_abc(lane, abc, log_n).map_err(backend_error)?;
                steps.push(StepTime::on_host_since("copies a, b, c and aux", wall));
                Vectors::OnDevice { abc, aux }
            }
        };
        let mut state = self.lock();
        let device = state.device_for(&self.gpu, key);
        let slot = state.residency.make_resident(&device, key, b_inputs)?;
        Ok((state, slot, Prepared::Evaluated(vectors), steps))
    }
}

/// The allocator pool's use when a proof took the device, for the proof's
/// own peak ([`DevicePeak`]).
struct PoolWatch(Option<provd_kernels::PoolUsage>);

impl PoolWatch {
    fn start(gpu: &Gpu) -> Result<Self, GpuError> {
        gpu.restart_pool_peak()?;
        Ok(Self(gpu.pool_usage()?))
    }

    /// The proof's peak against `asked`, logged; a warning where the room
    /// rule asked less than the proof took (other partitions' copies ahead
    /// of the lock, made meanwhile, count too: the rule asks for them).
    fn finish(self, gpu: &Gpu, asked: u64) -> Result<Option<DevicePeak>, GpuError> {
        let (Some(start), Some(now)) = (self.0, gpu.pool_usage()?) else { return Ok(None) };
        let peak = DevicePeak { used: now.peak.saturating_sub(start.live), asked };
        let device = gpu.info().ordinal;
        if peak.used > peak.asked {
            tracing::warn!(device, used = peak.used, asked = peak.asked,
                "a proof took more device memory than its room check asked: a smaller card could run out inside a kernel");
        } else {
            tracing::debug!(
                device,
                used = peak.used,
                asked = peak.asked,
                "a proof's device memory at its peak"
            );
        }
        Ok(Some(peak))
    }
}

/// Bases a streamed proof's MSMs read from the host at a time
/// ([`Msm::run_streamed`](provd_kernels::Msm::run_streamed)), two chunks on
/// the device with one chunk's MSM working memory: a sixteenth of the
/// domain, at most 2^22 G1 points (384 MiB) and 2^21 G2 (384 MiB), a 32
/// GiB partition's. Chunks sized for 32 GiB would ask a 512 MiB key
/// (2^23, 1.9 GiB of bases) for more room than its bases take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StreamChunks {
    pub g1: usize,
    pub g2: usize,
}

impl StreamChunks {
    pub fn for_domain(log_n: u32) -> Self {
        let g1 = 1 << log_n.saturating_sub(4).clamp(16, 22);
        Self { g1, g2: g1 / 2 }
    }
}

/// When a proof runs L's MSM: after H's, on the device's stream, or
/// beside it, on the backend's second engine ([`CudaBackend::msm_beside`]),
/// its device memory (`bytes`) asked beside the proof's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LSchedule {
    AfterH,
    BesideH { bytes: u64 },
}

impl LSchedule {
    /// Device bytes asked beyond the proof's own room.
    pub fn extra_bytes(self) -> u64 {
        match self {
            LSchedule::AfterH => 0,
            LSchedule::BesideH { bytes } => bytes,
        }
    }
}

/// A key's large G1 queries as this proof reads them.
enum Queries<'a> {
    OnDevice {
        h: &'a G1Bases,
        l: &'a G1Bases,
        a_aux: &'a G1Bases,
        b_aux: &'a G1Bases,
        b_g2_aux: Option<&'a G2Bases>,
    },
    /// The key's page-locked points, read `chunks` at a time; its A and B
    /// queries' aux parts start after their inputs.
    Streamed { pinned: &'a PinnedQueries, chunks: StreamChunks, inputs: usize, b_inputs: usize },
}

/// Which of the large queries an MSM sums over.
#[derive(Clone, Copy)]
enum Query {
    L,
    AAux,
    BAux,
}

/// The MSMs after H, over one key's bases and one assignment (its aux part
/// on the device).
struct Msms<'a> {
    backend: &'a CudaBackend,
    bases: &'a DeviceKey,
    large: Queries<'a>,
    asg: &'a Assignment,
    /// The inputs' subset in B.
    b_in: &'a [Scalar],
    aux: Option<&'a CudaSlice<FrRaw>>,
}

impl Msms<'_> {
    /// Σ over `query` of the aux subset `picked` (the scalars and their
    /// count), if any: from the device's bases, or streamed from the host's.
    fn over(
        &self,
        query: Query,
        picked: Option<(&CudaSlice<FrRaw>, usize)>,
    ) -> Result<G1Projective, GpuError> {
        self.over_on(&self.backend.msm, query, picked)
    }

    /// L's MSM on `msm` (the backend's second engine, beside H).
    fn l_on(&self, msm: &Msm) -> Result<G1Projective, GpuError> {
        self.over_on(msm, Query::L, self.aux.map(|s| (s, self.asg.aux.len())))
    }

    /// [`Msms::over`] on the engine `msm`.
    fn over_on(
        &self,
        msm: &Msm,
        query: Query,
        picked: Option<(&CudaSlice<FrRaw>, usize)>,
    ) -> Result<G1Projective, GpuError> {
        let Some((scalars, n)) = picked else { return Ok(G1Projective::identity()) };
        match &self.large {
            Queries::OnDevice { l, a_aux, b_aux, .. } => {
                let bases = match query {
                    Query::L => l,
                    Query::AAux => a_aux,
                    Query::BAux => b_aux,
                };
                msm.run_device(bases, scalars, n)
            }
            Queries::Streamed { pinned, chunks, inputs, b_inputs } => {
                let bases = match query {
                    Query::L => pinned.l.view(..),
                    Query::AAux => pinned.a.view(*inputs..),
                    Query::BAux => pinned.b_g1.view(*b_inputs..),
                };
                msm.run_streamed(bases, chunks.g1, scalars, n)
            }
        }
    }

    /// L (unless it ran beside H: `l`), A and B in G1 (and B in G2 where its
    /// bases are on the device), after H.
    fn run(
        &self,
        clock: &mut StepClock,
        h: G1Projective,
        l: Option<G1Projective>,
        a_aux_density: &Density,
    ) -> Result<(G1Parts, Option<G2Projective>), GpuError> {
        let (msm, gpu, dk, asg) = (&self.backend.msm, &*self.backend.gpu, self.bases, self.asg);
        let (naux, b_in) = (asg.aux.len(), self.b_in);
        let l = match l {
            Some(l) => l,
            None => clock.time("msm l", || self.l_on(msm))?,
        };
        let a = clock.time("msm a", || {
            let picked = pick(gpu, self.aux, naux, a_aux_density)?;
            Ok(msm.run(&dk.a_inputs, &asg.input)?
                + self.over(Query::AAux, picked.as_ref().map(|(s, n)| (s, *n)))?)
        })?;
        // B's aux subset serves both groups: picked once.
        let (b_g1, b_aux) = clock.time("msm b_g1", || {
            let picked = pick(gpu, self.aux, naux, &asg.b_aux_density)?;
            let sum = msm.run(&dk.b_inputs, b_in)?
                + self.over(Query::BAux, picked.as_ref().map(|(s, n)| (s, *n)))?;
            Ok((sum, picked))
        })?;
        let b_g2 = match &dk.b_g2_inputs {
            Some(g2_inputs) => Some(clock.time("msm b_g2", || {
                let mut sum = msm.run(g2_inputs, b_in)?;
                if let Some((scalars, n)) = &b_aux {
                    sum += match &self.large {
                        Queries::OnDevice { b_g2_aux: Some(bases), .. } => {
                            msm.run_device(bases, scalars, *n)?
                        }
                        Queries::OnDevice { b_g2_aux: None, .. } => {
                            return Err(GpuError::Invalid("B's G2 bases are not on the device".into()))
                        }
                        Queries::Streamed { pinned, chunks, b_inputs, .. } => {
                            msm.run_streamed(pinned.b_g2.view(*b_inputs..), chunks.g2, scalars, *n)?
                        }
                    };
                }
                Ok(sum)
            })?),
            None => None,
        };
        Ok((G1Parts { h, l, a, b_g1 }, b_g2))
    }
}

/// The subset of the aux assignment (on the device) that `density` selects,
/// and its length; `None` without aux variables.
fn pick(
    gpu: &Gpu,
    aux: Option<&CudaSlice<FrRaw>>,
    len: usize,
    density: &Density,
) -> Result<Option<(CudaSlice<FrRaw>, usize)>, GpuError> {
    aux.map(|aux| select_by_density(gpu, aux, len, density.words())).transpose()
}

/// Times each step of a proof: the device's part between two CUDA events on
/// the compute stream (its kernels, and the copies they wait for), the wall
/// time on the host around it.
pub(super) struct StepClock<'a> {
    timer: &'a Timer,
    steps: Vec<StepTime>,
}

impl<'a> StepClock<'a> {
    fn new(timer: &'a Timer) -> Self {
        Self { timer, steps: Vec::new() }
    }

    fn time<T>(
        &mut self,
        step: &'static str,
        run: impl FnOnce() -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        let wall = Instant::now();
        self.timer.start()?;
        let out = run()?;
        let device_ms = self.timer.stop()? as f64;
        self.steps.push(StepTime { step, wall_ms: wall.elapsed().as_secs_f64() * 1e3, device_ms });
        Ok(out)
    }

    /// The device's busy seconds over every step, and the steps.
    fn into_parts(self) -> (Option<f64>, Vec<StepTime>) {
        let ms: f64 = self.steps.iter().map(|s| s.device_ms).sum();
        (Some(ms / 1e3), self.steps)
    }
}

#[cfg(test)]
mod tests {
    use super::StreamChunks;

    /// A 32 GiB partition's chunks are the sizes measured; a smaller domain
    /// reads a sixteenth of itself at a time.
    #[test]
    fn stream_chunks_shrink_with_the_domain() {
        let chunks = |g1: u32| StreamChunks { g1: 1 << g1, g2: 1 << (g1 - 1) };
        assert_eq!(StreamChunks::for_domain(27), chunks(22));
        assert_eq!(StreamChunks::for_domain(26), chunks(22));
        assert_eq!(StreamChunks::for_domain(23), chunks(19));
        assert_eq!(StreamChunks::for_domain(10), chunks(16));
    }
}
