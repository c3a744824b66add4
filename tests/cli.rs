//! The command line, end to end: the real binary, a fresh data directory.

use provd_e2e::{provd, text};

#[test]
fn prove_generates_a_key_then_proves_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let o = provd(dir.path(), &["prove", "--circuit", "bench-10", "--backend", "cpu"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("bench-10: proof verified (cpu backend"), "{out}");
    assert!(err.contains("TEST-ONLY"), "key generation must say the key is test-only: {err}");
    // The proof is 192 bytes of hex at the end of the first line (the
    // public inputs follow on the next).
    let hex = out.lines().next().unwrap().rsplit(' ').next().unwrap();
    assert_eq!(hex.len(), 384, "{out}");
    // Second run: the cached key is reused.
    let o = provd(dir.path(), &["prove", "--circuit", "bench-10", "--backend", "cpu", "--seed", "7"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(err.contains("loaded cached key") && !err.contains("TEST-ONLY"), "{err}");
}

/// A prove → verify loop from the command line alone: `prove` writes the
/// proof and its public inputs, `vk export` the verifying key, and `verify`
/// accepts them (and refuses other inputs).
#[test]
fn a_proof_from_prove_is_checked_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (proof, public, vk) =
        (dir.path().join("p.hex"), dir.path().join("pub.json"), dir.path().join("vk.bin"));
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let o = provd(
        dir.path(),
        &[
            "prove",
            "--circuit",
            "bench-8",
            "--backend",
            "cpu",
            "--proof",
            &path(&proof),
            "--public",
            &path(&public),
        ],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("public inputs: [\"0x"), "{out}");
    let o = provd(dir.path(), &["vk", "export", "--circuit", "bench-8", "--out", &path(&vk)]);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = provd(
        dir.path(),
        &["verify", "--vk", &path(&vk), "--proof", &path(&proof), "--public", &path(&public)],
    );
    assert_eq!((o.status.code(), text(&o).0.trim()), (Some(0), "valid"), "{}", text(&o).1);
    std::fs::write(&public, "[\"0x01\"]").unwrap();
    let o = provd(
        dir.path(),
        &["verify", "--vk", &path(&vk), "--proof", &path(&proof), "--public", &path(&public)],
    );
    assert_eq!(o.status.code(), Some(1), "other inputs: {}", text(&o).0);
}

#[test]
fn auto_backend_says_why_the_gpu_is_unused() {
    let dir = tempfile::tempdir().unwrap();
    let o = provd(dir.path(), &["prove", "--circuit", "bench-6"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    if out.contains("(cpu backend") {
        assert!(err.contains("GPU unused, proving on the CPU: no usable CUDA device:"), "{err}");
    }
}

#[test]
fn unknown_circuit_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let o = provd(dir.path(), &["prove", "--circuit", "bench-99"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("unknown circuit 'bench-99'") && err.contains("bench-K"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn corrupt_cached_key_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let params = dir.path().join("params");
    std::fs::create_dir_all(&params).unwrap();
    let key = params.join("bench-6.v1.test-only.params");
    std::fs::write(&key, vec![7u8; 500]).unwrap();
    let o = provd(dir.path(), &["prove", "--circuit", "bench-6", "--backend", "cpu"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("unusable") && err.contains("delete it to regenerate"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Truncated after a valid start.
    std::fs::write(&key, []).unwrap();
    let (_, err) = text(&provd(dir.path(), &["prove", "--circuit", "bench-6", "--backend", "cpu"]));
    assert!(err.contains("ends early"), "{err}");
}

#[test]
fn cuda_backend_without_a_gpu_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let o = provd(dir.path(), &["prove", "--circuit", "bench-6", "--backend", "cuda"]);
    let (out, err) = text(&o);
    if o.status.success() {
        assert!(out.contains("cuda:0"), "{out}");
    } else {
        assert!(err.contains("no usable CUDA device"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn unsafe_serving_is_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |env: &[(&str, &str)], listen: &str| {
        let mut cmd = std::process::Command::new(provd_e2e::provd_bin());
        cmd.args(["serve", "--listen", listen, "--backend", "cpu"]).env("PROVD_DATA_DIR", dir.path());
        cmd.env_remove("PROVD_AUTH_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    // off loopback with no token
    let o = serve(&[], "0.0.0.0:0");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("off loopback") && err.contains("allow_unauthenticated"), "{err}");
    // a blank token is an error, not "no auth"
    let o = serve(&[("PROVD_AUTH_TOKEN", "   ")], "127.0.0.1:0");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("PROVD_AUTH_TOKEN is set but blank"), "{err}");
}

/// `bench prove` writes its medians to JSON, with the recorder's synthesis
/// as the baseline, or none with `--baseline none` (a GPU session short of
/// time skips seconds a proof at 2^24).
#[test]
fn bench_prove_writes_its_json_with_or_without_the_recorder_baseline() {
    let dir = tempfile::tempdir().unwrap();
    for (baseline, timed) in [("recorder", true), ("none", false)] {
        let json = dir.path().join(format!("{baseline}.json"));
        let args =
            ["bench", "prove", "--circuit", "bench-8", "--runs", "1", "--backend", "cpu", "--baseline"];
        let o = provd(dir.path(), &[&args[..], &[baseline, "--json", json.to_str().unwrap()]].concat());
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}{err}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert!(v["provd"]["median_ms"]["total"].is_string(), "{v}");
        assert_eq!(!v["provd"]["recorder_synthesis_ms"].is_null(), timed, "--baseline {baseline}: {v}");
        assert_eq!(out.contains("against the recorder's"), timed, "{out}");
    }
}
