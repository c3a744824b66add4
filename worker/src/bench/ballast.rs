//! A GPU made to look like a smaller card: `provd bench ballast` holds all
//! of a device's memory but `--device-memory` (a [`Ballast`]) until its
//! standard input closes, and [`Beside`] starts one for a bench's own
//! `--device-memory`. The cap is physical: the provd beside it can allocate
//! no more than a card of that size would give it.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use provd_kernels::{Ballast, Gpu};

/// Takes all of `gpu`'s memory but `leave` bytes, says so on stdout, and
/// holds it until stdin closes.
pub fn hold(gpu: &Gpu, leave: u64) -> anyhow::Result<()> {
    let ballast = Ballast::hold(gpu, leave as usize).context("taking the device's memory")?;
    let (free, total) = gpu.memory()?;
    println!(
        "ballast: holding {} MiB of {}'s {} MiB; {} MiB free",
        ballast.held_bytes() >> 20,
        gpu.info().name,
        total >> 20,
        free >> 20
    );
    // Held until whoever started it closes our stdin (or kills us).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(ballast);
    Ok(())
}

/// A `provd bench ballast` running beside this process, ended when dropped.
pub struct Beside {
    child: Child,
    /// Its line saying what it holds.
    pub held: String,
}

impl Beside {
    /// Starts one on device 0 leaving `device_memory` bytes, and waits until
    /// it holds the rest.
    pub fn start(device_memory: u64, data_dir: &std::path::Path) -> anyhow::Result<Self> {
        Self::start_from(&std::env::current_exe()?, device_memory, data_dir)
    }

    /// [`Beside::start`] with the `provd` binary at `provd` (a test's).
    /// Where the ballast cannot hold the memory (no CUDA device, or less
    /// free than `device_memory`), the error carries what it said.
    pub fn start_from(
        provd: &std::path::Path,
        device_memory: u64,
        data_dir: &std::path::Path,
    ) -> anyhow::Result<Self> {
        let mut child = Command::new(provd)
            .args(["bench", "ballast", "--device-memory", &device_memory.to_string()])
            .env("PROVD_DATA_DIR", data_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting provd bench ballast")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        let mut stderr = child.stderr.take().expect("piped");
        if !line.starts_with("ballast: holding") {
            let _ = child.kill();
            let mut said = String::new();
            let _ = stderr.read_to_string(&mut said);
            let _ = child.wait();
            anyhow::bail!("the ballast did not take the device's memory: {line}{said}");
        }
        // Its log goes on to ours; a pipe nobody read would block it.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::stderr()));
        Ok(Self { child, held: line.trim().to_string() })
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}
