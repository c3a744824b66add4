//! Log output that can fail without taking the worker down: a closed stderr
//! pipe or a full log disk drops lines (counted, and exported as
//! `provd_log_lines_dropped_total`) instead of panicking in the middle of a
//! stage; panics anywhere are counted (`provd_panics_total`) and logged.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

static LINES_DROPPED: AtomicU64 = AtomicU64::new(0);
static PANICS: AtomicU64 = AtomicU64::new(0);

/// Log lines that could not be written since the process started.
pub fn lines_dropped() -> u64 {
    LINES_DROPPED.load(Ordering::Relaxed)
}

/// Panics caught or not since the process started (each one's thread,
/// stage or request failed; the process kept running).
pub fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Counts one panic (the panic hook and thread pools' panic handlers call it).
pub fn count_panic() {
    PANICS.fetch_add(1, Ordering::Relaxed);
}

/// A writer to stderr whose failures drop the line: for `tracing_subscriber`'s
/// `with_writer(LossyStderr)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if std::io::stderr().write_all(buf).is_err() {
            LINES_DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        // The line is handled either way: the caller must never see the error.
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Writes a line to stdout, dropping it (counted) if stdout is gone: where
/// `println!` would panic.
pub fn stdout_line(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        LINES_DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// A panic's message, from its payload (a `&str` or a `String`).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Counts every panic and logs it through tracing (which cannot fail), in
/// place of the default hook's direct write to stderr.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        count_panic();
        let thread = std::thread::current();
        let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        let message = panic_message(info.payload());
        tracing::error!(thread = thread.name().unwrap_or("unnamed"), %location, "panic: {message}");
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_are_counted_and_the_thread_alone_fails() {
        install_panic_hook();
        let before = panics();
        let r = std::thread::spawn(|| panic!("injected")).join();
        assert!(r.is_err());
        assert!(panics() > before);
    }
}
