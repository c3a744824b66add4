//! The devices the engine proves on, and whether each is in service.
//!
//! Each backend (a GPU, or the CPU) has a worker per partition it takes at
//! once ([`Backend::partitions_in_flight`]), each taking partitions from the
//! one GPU queue. A device fault (a backend error, a panic, a proof that
//! fails verification) counts against its device; after
//! `pipeline.device_fault_limit` faults in a row the device is taken out of
//! service with the reason, and its worker stops taking work, while the
//! others go on. The faulted partition is synthesized again for another try.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::backend::Backend;
use crate::telemetry::Metrics;

/// One backend and its health.
pub struct Device {
    pub backend: Arc<dyn Backend>,
    in_service: AtomicBool,
    faults_in_a_row: AtomicU32,
    /// Why it was taken out of service.
    reason: Mutex<Option<String>>,
    metrics: Arc<Metrics>,
}

/// A device's state as /v1/status shows it.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceStatus {
    pub name: String,
    pub in_service: bool,
    /// Why it is out of service.
    pub reason: Option<String>,
}

impl Device {
    pub fn new(backend: Arc<dyn Backend>, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics.device_in_service.with_label_values(&[backend.name()]).set(1);
        metrics.device_faults.with_label_values(&[backend.name()]);
        Arc::new(Self {
            backend,
            in_service: AtomicBool::new(true),
            faults_in_a_row: AtomicU32::new(0),
            reason: Mutex::new(None),
            metrics,
        })
    }

    pub fn name(&self) -> &str {
        self.backend.name()
    }

    pub fn in_service(&self) -> bool {
        self.in_service.load(Ordering::Acquire)
    }

    /// A partition went through: the fault streak ends.
    pub fn succeeded(&self) {
        self.faults_in_a_row.store(0, Ordering::Release);
    }

    /// Records a fault; takes the device out of service at the `limit`-th in
    /// a row. Returns whether it is still in service.
    pub fn fault(&self, what: &str, limit: u32) -> bool {
        self.metrics.device_faults.with_label_values(&[self.name()]).inc();
        let n = self.faults_in_a_row.fetch_add(1, Ordering::AcqRel) + 1;
        tracing::warn!(device = self.name(), faults_in_a_row = n, "device fault: {what}");
        if n >= limit && self.in_service.swap(false, Ordering::AcqRel) {
            let reason = format!("{n} faults in a row, the last: {what}");
            tracing::error!(device = self.name(), "device taken out of service: {reason}");
            *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
            self.metrics.device_in_service.with_label_values(&[self.name()]).set(0);
        }
        self.in_service()
    }

    pub fn status(&self) -> DeviceStatus {
        DeviceStatus {
            name: self.name().to_string(),
            in_service: self.in_service(),
            reason: self.reason.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

/// Why no device can take work, or `None` while one can.
pub fn none_in_service(devices: &[Arc<Device>]) -> Option<String> {
    if devices.iter().any(|d| d.in_service()) {
        return None;
    }
    let reasons: Vec<String> =
        devices.iter().map(|d| format!("{}: {}", d.name(), d.status().reason.unwrap_or_default())).collect();
    Some(format!("every device is out of service ({})", reasons.join("; ")))
}
