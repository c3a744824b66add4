//! Prometheus metrics: one registry per engine (so tests can run several),
//! named `provd_*` in base units, with the process collector for RSS.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use super::labels::BufferClass;

/// Every metric provd exports.
pub struct Metrics {
    pub registry: Registry,
    pub buffers_in_flight: IntGaugeVec,
    pub buffer_bytes: IntGaugeVec,
    pub memory_reserved_bytes: IntGauge,
    pub witness_bytes: IntGauge,
    pub log_lines_dropped: IntCounter,
    pub connections_refused: IntCounter,
    pub connections_closed: IntCounterVec,
    pub panics: IntCounter,
    pub memory_budget_bytes: IntGauge,
    pub memory_limit_bytes: IntGauge,
    pub backend_fallback: IntGauge,
    pub gpu_queue_depth: IntGauge,
    pub gpu_queue_capacity: IntGauge,
    pub partitions_waiting: IntGauge,
    pub partitions_queued: IntGaugeVec,
    pub gpu_queue_depth_by_priority: IntGaugeVec,
    pub partition_wait: HistogramVec,
    pub critical_permits: IntGauge,
    pub critical_permits_in_use: IntGauge,
    pub memory_critical_headroom_bytes: IntGauge,
    pub partitions_in_stage: IntGaugeVec,
    pub stage_duration: HistogramVec,
    pub job_duration: HistogramVec,
    pub jobs: IntCounterVec,
    /// Submissions by front door and answer.
    pub requests: IntCounterVec,
    pub partitions: IntCounterVec,
    pub gpu_busy_seconds: prometheus::CounterVec,
    pub prove_start_thread_seconds: prometheus::CounterVec,
    pub gpu_memory_used_bytes: IntGaugeVec,
    pub gpu_memory_total_bytes: IntGaugeVec,
    pub srs_bytes: IntGaugeVec,
    pub proofs_invalid: IntCounterVec,
    pub verify_duration: Histogram,
    pub key_uploads: IntCounterVec,
    pub key_layout: IntGaugeVec,
    pub key_evictions: IntCounterVec,
    pub build_info: IntGaugeVec,
    pub partition_permits: IntGauge,
    pub partition_permits_in_use: IntGauge,
    pub memory_reserved_peak_bytes: IntGauge,
    pub memory_promised_bytes: IntGauge,
    pub partition_failures: IntCounterVec,
    pub device_in_service: IntGaugeVec,
    pub device_faults: IntCounterVec,
    pub partition_retries: prometheus::IntCounter,
}

/// The commit this binary was built from ("unknown" outside a git checkout).
pub const COMMIT: &str = env!("PROVD_COMMIT");

/// The sum of `counts`' series (by circuit and outcome) whose outcome is
/// `outcome`, or of all of them.
fn ended(counts: &IntCounterVec, outcome: Option<super::labels::Outcome>) -> u64 {
    use prometheus::core::Collector;
    counts
        .collect()
        .iter()
        .flat_map(|family| family.get_metric())
        .filter(|m| {
            outcome
                .is_none_or(|o| m.get_label().iter().any(|l| l.name() == "outcome" && l.value() == o.name()))
        })
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let r = &registry;
        fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
            r.register(Box::new(c.clone())).expect("metric names are unique");
            c
        }
        let class = &["class"];
        let m = Self {
            buffers_in_flight: reg(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "provd_buffers_in_flight",
                        "Large buffers alive, by class (synth, abc, aux, density, pending).",
                    ),
                    class,
                )
                .unwrap(),
            ),
            buffer_bytes: reg(
                r,
                IntGaugeVec::new(
                    Opts::new("provd_buffer_bytes", "Bytes held by live large buffers, by class."),
                    class,
                )
                .unwrap(),
            ),
            memory_reserved_bytes: reg(
                r,
                IntGauge::new(
                    "provd_memory_reserved_bytes",
                    "Bytes reserved against the memory budget (estimates).",
                )
                .unwrap(),
            ),
            log_lines_dropped: reg(
                r,
                IntCounter::new(
                    "provd_log_lines_dropped_total",
                    "Log lines that could not be written (closed stderr, full disk); the worker kept running.",
                )
                .unwrap(),
            ),
            connections_refused: reg(
                r,
                IntCounter::new(
                    "provd_connections_refused_total",
                    "Connections closed as they arrived because server.max_connections were open.",
                )
                .unwrap(),
            ),
            connections_closed: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "provd_connections_closed_total",
                        "Connections the worker closed on a client that waited: reason=write_timeout (it read \
                         nothing for server.write_timeout_seconds), reason=displaced (it gave its slot to a new \
                         connection while server.max_connections were open).",
                    ),
                    &["reason"],
                )
                .unwrap(),
            ),
            requests: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "provd_requests_total",
                        "Job submissions by front door (http, grpc, in-process) and answer: accepted (a new \
                         job), replayed (an idempotency key's earlier job), refused.",
                    ),
                    &["door", "answer"],
                )
                .unwrap(),
            ),
            panics: reg(
                r,
                IntCounter::new(
                    "provd_panics_total",
                    "Panics in any thread; each failed only its partition, request or task.",
                )
                .unwrap(),
            ),
            witness_bytes: reg(
                r,
                IntGauge::new(
                    "provd_witness_bytes",
                    "Bytes of received witnesses held until their partitions end (part of the reserved bytes).",
                )
                .unwrap(),
            ),
            memory_budget_bytes: reg(
                r,
                IntGauge::new(
                    "provd_memory_budget_bytes",
                    "The memory budget partitions are admitted against.",
                )
                .unwrap(),
            ),
            memory_limit_bytes: reg(
                r,
                IntGauge::new(
                    "provd_memory_limit_bytes",
                    "The memory the process may use before the kernel acts: its cgroup's memory.max (the lowest \
                     on its path) where there is one, else the machine's memory.",
                )
                .unwrap(),
            ),
            backend_fallback: reg(
                r,
                IntGauge::new(
                    "provd_backend_fallback",
                    "1 when the worker looked for a GPU (--backend auto or cuda) and proves on the CPU instead \
                     (/v1/status says why); 0 otherwise.",
                )
                .unwrap(),
            ),
            gpu_queue_depth: reg(
                r,
                IntGauge::new("provd_gpu_queue_depth", "Synthesized partitions waiting for a GPU worker.")
                    .unwrap(),
            ),
            gpu_queue_capacity: reg(
                r,
                IntGauge::new(
                    "provd_gpu_queue_capacity",
                    "Capacity of the queue between synthesis and the GPU.",
                )
                .unwrap(),
            ),
            partitions_waiting: reg(
                r,
                IntGauge::new(
                    "provd_partitions_waiting",
                    "Accepted partitions not yet admitted to synthesis.",
                )
                .unwrap(),
            ),
            partitions_queued: reg(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "provd_partitions_queued",
                        "Accepted partitions not yet admitted to synthesis, by their job's priority.",
                    ),
                    &["priority"],
                )
                .unwrap(),
            ),
            gpu_queue_depth_by_priority: reg(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "provd_gpu_queue_depth_by_priority",
                        "Synthesized partitions waiting for a GPU worker, by their job's priority.",
                    ),
                    &["priority"],
                )
                .unwrap(),
            ),
            partition_wait: reg(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "provd_partition_wait_seconds",
                        "Time a partition waited in a queue (admission; products: for the memory of the a, b and c \
                         it computes on the host; gpu; finalize) before it was served, by its job's priority.",
                    )
                    // 1 ms to 2.3 h, as the stages.
                    .buckets(prometheus::exponential_buckets(0.001, 2.0, 24).unwrap()),
                    &["priority", "queue"],
                )
                .unwrap(),
            ),
            critical_permits: reg(
                r,
                IntGauge::new(
                    "provd_critical_permits",
                    "The critical lane's partition permits (pipeline.critical_permits).",
                )
                .unwrap(),
            ),
            critical_permits_in_use: reg(
                r,
                IntGauge::new(
                    "provd_critical_permits_in_use",
                    "Critical lane permits held: critical partitions from admission until the GPU queue accepts them.",
                )
                .unwrap(),
            ),
            memory_critical_headroom_bytes: reg(
                r,
                IntGauge::new(
                    "provd_memory_critical_headroom_bytes",
                    "Bytes of the memory budget that every class but critical leaves free \
                     (pipeline.critical_headroom).",
                )
                .unwrap(),
            ),
            partitions_in_stage: reg(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "provd_partitions_in_stage",
                        "Admitted partitions by stage: synthesis, gpu_queue (waiting for a GPU), prove_start, prove_finish (waiting for or in it).",
                    ),
                    &["stage"],
                )
                .unwrap(),
            ),
            stage_duration: reg(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "provd_stage_duration_seconds",
                        "Time a partition spends in each stage.",
                    )
                    // 1 ms to 2.3 h: a 32 GiB sector's stages take minutes.
                    .buckets(prometheus::exponential_buckets(0.001, 2.0, 24).unwrap()),
                    &["circuit", "stage"],
                )
                .unwrap(),
            ),
            job_duration: reg(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "provd_job_duration_seconds",
                        "Time from acceptance to the end of a job, by circuit.",
                    )
                    // 10 ms to 23 h: a job of many large partitions takes hours.
                    .buckets(prometheus::exponential_buckets(0.01, 2.0, 24).unwrap()),
                    &["circuit"],
                )
                .unwrap(),
            ),
            jobs: reg(
                r,
                IntCounterVec::new(
                    Opts::new("provd_jobs_total", "Jobs ended, by circuit and outcome."),
                    &["circuit", "outcome"],
                )
                .unwrap(),
            ),
            partitions: reg(
                r,
                IntCounterVec::new(
                    Opts::new("provd_partitions_total", "Partitions ended, by circuit and outcome."),
                    &["circuit", "outcome"],
                )
                .unwrap(),
            ),
            gpu_busy_seconds: reg(
                r,
                prometheus::CounterVec::new(
                    Opts::new("provd_gpu_busy_seconds_total",
                        "Time each GPU was busy with proofs, measured on the device (CUDA events around its copies and kernels).",
                    ),
                    &["device"],
                )
                .unwrap(),
            ),
            prove_start_thread_seconds: reg(
                r,
                prometheus::CounterVec::new(
                    Opts::new(
                        "provd_prove_start_thread_seconds_total",
                        "Time each device's worker threads spent in prove_start, host work included (not GPU utilisation).",
                    ),
                    &["device"],
                )
                .unwrap(),
            ),
            gpu_memory_used_bytes: reg(
                r,
                IntGaugeVec::new(
                    Opts::new("provd_gpu_memory_used_bytes", "Device memory in use, per GPU."),
                    &["device"],
                )
                .unwrap(),
            ),
            gpu_memory_total_bytes: reg(
                r,
                IntGaugeVec::new(
                    Opts::new("provd_gpu_memory_total_bytes", "Device memory, per GPU."),
                    &["device"],
                )
                .unwrap(),
            ),
            srs_bytes: reg(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "provd_srs_bytes",
                        "Proving-key bytes resident, per circuit and location (host, device).",
                    ),
                    &["circuit", "location"],
                )
                .unwrap(),
            ),
            proofs_invalid: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "provd_proofs_invalid_total",
                        "Proofs that failed verification before leaving (their partitions failed), by the device that made them.",
                    ),
                    &["device"],
                )
                .unwrap(),
            ),
            verify_duration: reg(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "provd_proof_verify_seconds",
                        "Time to check one proof before it is returned.",
                    )
                    .buckets(prometheus::exponential_buckets(0.0005, 2.0, 12).unwrap()),
                )
                .unwrap(),
            ),
            key_uploads: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "provd_key_uploads_total",
                        "Times a circuit's proving-key bases were copied to a GPU (once while they stay resident).",
                    ),
                    &["circuit", "device"],
                )
                .unwrap(),
            ),
            key_layout: reg(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "provd_key_layout",
                        "1 for how a circuit's proving key is held on a GPU now (layout: shifted or plain, \
                         resident on the device; streamed, read from the host's memory by each MSM), 0 for \
                         the others; all 0 once evicted.",
                    ),
                    &["circuit", "device", "layout"],
                )
                .unwrap(),
            ),
            key_evictions: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "provd_key_evictions_total",
                        "Resident proving keys evicted from a GPU to make room for another.",
                    ),
                    &["device"],
                )
                .unwrap(),
            ),
            build_info: reg(
                r,
                IntGaugeVec::new(
                    Opts::new("provd_build_info", "1, labelled with this build's version and commit and the backend in use."),
                    &["version", "commit", "backend"],
                )
                .unwrap(),
            ),
            partition_permits: reg(
                r,
                IntGauge::new("provd_partition_permits", "Partition permits (pipeline.partition_permits).").unwrap(),
            ),
            partition_permits_in_use: reg(
                r,
                IntGauge::new(
                    "provd_partition_permits_in_use",
                    "Permits held: partitions from admission until the GPU queue accepts them.",
                )
                .unwrap(),
            ),
            memory_reserved_peak_bytes: reg(
                r,
                IntGauge::new(
                    "provd_memory_reserved_peak_bytes",
                    "The most ever reserved against the memory budget at once since start.",
                )
                .unwrap(),
            ),
            memory_promised_bytes: reg(
                r,
                IntGauge::new(
                    "provd_memory_promised_bytes",
                    "Bytes promised to partitions in synthesis for the a, b and c they compute on the host after \
                     their witness; reserved then, left free by everything else meanwhile.",
                )
                .unwrap(),
            ),
            partition_failures: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "provd_partition_failures_total",
                        "Partitions failed, by reason (witness, key, backend, invalid_proof, panic).",
                    ),
                    &["reason"],
                )
                .unwrap(),
            ),
            device_in_service: reg(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "provd_device_in_service",
                        "1 while a device (GPU, or the CPU backend) takes work; 0 once faults took it out of service.",
                    ),
                    &["device"],
                )
                .unwrap(),
            ),
            device_faults: reg(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "provd_device_faults_total",
                        "Device faults: backend errors, panics and proofs failing verification, per device.",
                    ),
                    &["device"],
                )
                .unwrap(),
            ),
            partition_retries: reg(
                r,
                prometheus::IntCounter::new(
                    "provd_partition_retries_total",
                    "Partitions synthesized again: for another try after a device fault, or with a, b, c on the host after a device had no room for the circuit's matrices.",
                )
                .unwrap(),
            ),
            registry,
        };
        for c in BufferClass::ALL {
            m.buffers_in_flight.with_label_values(&[c.name()]).set(0);
            m.buffer_bytes.with_label_values(&[c.name()]).set(0);
        }
        for stage in super::labels::Stage::IN_PIPELINE {
            m.partitions_in_stage.with_label_values(&[stage.name()]).set(0);
        }
        for reason in super::labels::FailureReason::ALL {
            m.partition_failures.with_label_values(&[reason.name()]);
        }
        #[cfg(target_os = "linux")]
        m.registry
            .register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))
            .expect("process collector registers once");
        m
    }

    /// Exports a served circuit's job and partition counts at zero from the
    /// start, so that a rate over them is defined before its first job ends.
    /// The `circuit` label takes the names of the circuits served (set at
    /// start-up: a bounded set).
    pub fn serve_circuit(&self, circuit: &str) {
        for o in ["succeeded", "failed", "cancelled"] {
            self.jobs.with_label_values(&[circuit, o]);
            self.partitions.with_label_values(&[circuit, o]);
        }
    }

    /// Partitions ended so far with `outcome` (with any, where `None`),
    /// every circuit's together.
    pub fn partitions_ended(&self, outcome: Option<super::labels::Outcome>) -> u64 {
        ended(&self.partitions, outcome)
    }

    /// Jobs ended so far with `outcome`, every circuit's together.
    pub fn jobs_ended(&self, outcome: super::labels::Outcome) -> u64 {
        ended(&self.jobs, Some(outcome))
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        use prometheus::Encoder;
        prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding");
        String::from_utf8(out).expect("exposition is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// For tests: panics unless `promtool check metrics` accepts the exposition.
/// Without promtool it says the check is skipped, or fails when
/// PROVD_REQUIRE_PROMTOOL is set (as CI sets it).
#[doc(hidden)]
pub fn assert_promtool_accepts(exposition: &str) {
    match promtool_check(exposition) {
        Some(verdict) => {
            verdict.unwrap_or_else(|problems| panic!("promtool check metrics failed:\n{problems}"))
        }
        None => {
            assert!(
                std::env::var_os("PROVD_REQUIRE_PROMTOOL").is_none(),
                "promtool required but not on PATH"
            );
            eprintln!("skipped: promtool not installed (Debian package `prometheus`)");
        }
    }
}

/// Runs `promtool check metrics` on an exposition. `None` when promtool is
/// not installed (Debian package `prometheus`); otherwise its verdict.
fn promtool_check(exposition: &str) -> Option<Result<(), String>> {
    use std::io::Write;
    let promtool = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("promtool")).find(|p| p.exists()))?;
    let run = || -> std::io::Result<std::process::Output> {
        let mut child = std::process::Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child.stdin.take().expect("piped stdin").write_all(exposition.as_bytes())?;
        child.wait_with_output()
    };
    Some(match run() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
        }
        Err(e) => Err(format!("cannot run promtool: {e}")),
    })
}
