//! circom circuits end to end, with the real tools from npm (`circom2`,
//! `snarkjs`, `circomlib`, installed in `tests/circom/` by `npm ci`): each
//! circuit is compiled for BLS12-381, set up with snarkjs on the committed
//! powers of tau, its witness computed by snarkjs, proved by provd (CLI and
//! HTTP, CPU) and verified by `snarkjs groth16 verify`. The circuits: a
//! multiplier, a Poseidon hash, and a 13-level Merkle path of Poseidon hashes
//! (3,159 constraints; 3,162 rows with the three snarkjs adds for 1, the root and the leaf).
//!
//! Without the npm tools these tests say they are skipped, or fail when
//! PROVD_REQUIRE_CIRCOM is set (CI sets it).
//!
//! `tests/circom/pot12_bls12381.ptau` (2^12, enough for domains up to 2^12)
//! is committed because making it takes minutes in JavaScript; it was made
//! with snarkjs 0.7.6:
//! `snarkjs powersoftau new bls12381 12 0.ptau`,
//! `snarkjs powersoftau contribute 0.ptau 1.ptau --name=provd-tests -e=<random>`,
//! `snarkjs powersoftau prepare phase2 1.ptau pot12_bls12381.ptau`.
//! TEST-ONLY: one contribution, its entropy not destroyed with care.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use provd_e2e::{provd, text, Server};
use serde_json::Value;

const CIRCUITS: [&str; 3] = ["multiplier", "poseidon", "merkle"];

fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("circom")
}

fn bin(name: &str) -> PathBuf {
    tools_dir().join("node_modules/.bin").join(name)
}

/// Runs a tool; panics with its output unless it succeeds.
fn run(program: &Path, args: &[&str], cwd: &Path) -> String {
    let out = Command::new(program).args(args).current_dir(cwd).output().expect("the tool runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{} {args:?} failed\nstdout: {stdout}\nstderr: {stderr}",
        program.display()
    );
    stdout.into_owned()
}

/// `snarkjs groth16 verify`: whether snarkjs accepts the proof.
fn snarkjs_verifies(vk: &Path, public: &Path, proof: &Path) -> bool {
    let out = Command::new(bin("snarkjs"))
        .args(["groth16", "verify"])
        .args([vk, public, proof])
        .output()
        .expect("snarkjs runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    match (out.status.success(), stdout.contains("OK!")) {
        (true, true) => true,
        (false, false) => false,
        _ => panic!("snarkjs's exit status and output disagree: {stdout}"),
    }
}

/// The compiled, set-up circuits and their witnesses, made once per run.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn zkey(&self, c: &str) -> PathBuf {
        self.dir.path().join(format!("{c}.zkey"))
    }
    fn wtns(&self, c: &str) -> PathBuf {
        self.dir.path().join(format!("{c}.wtns"))
    }
    fn vk(&self, c: &str) -> PathBuf {
        self.dir.path().join(format!("{c}.vk.json"))
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn fixture() -> Option<&'static Fixture> {
    static FIXTURE: OnceLock<Option<Fixture>> = OnceLock::new();
    FIXTURE.get_or_init(build_fixture).as_ref()
}

fn build_fixture() -> Option<Fixture> {
    if !bin("snarkjs").exists() || !bin("circom2").exists() {
        assert!(
            std::env::var_os("PROVD_REQUIRE_CIRCOM").is_none(),
            "circom2 and snarkjs required: run `npm ci` in tests/circom"
        );
        eprintln!("skipped: circom2 and snarkjs not installed (`npm ci` in tests/circom)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let tools = tools_dir();
    let ptau = tools.join("pot12_bls12381.ptau");
    let ptau = ptau.to_str().unwrap();
    let (circom, snarkjs) = (bin("circom2"), bin("snarkjs"));
    std::thread::scope(|s| {
        for c in CIRCUITS {
            let (circom, snarkjs, tools) = (&circom, &snarkjs, &tools);
            s.spawn(move || {
                let src = format!("{c}.circom");
                run(
                    circom,
                    &[
                        &src,
                        "--r1cs",
                        "--wasm",
                        "--O2",
                        "--prime",
                        "bls12381",
                        "-l",
                        "node_modules",
                        "-o",
                        out,
                    ],
                    tools,
                );
                let at = |ext: &str| format!("{out}/{c}{ext}");
                run(snarkjs, &["groth16", "setup", &at(".r1cs"), ptau, &at(".zkey")], tools);
                run(snarkjs, &["zkey", "export", "verificationkey", &at(".zkey"), &at(".vk.json")], tools);
                let wasm = format!("{out}/{c}_js/{c}.wasm");
                run(snarkjs, &["wtns", "calculate", &wasm, &format!("{c}.input.json"), &at(".wtns")], tools);
            });
        }
        // A circuit for the other curve, to be refused: the multiplier on bn128.
        let (circom, snarkjs, tools) = (&circom, &snarkjs, &tools);
        s.spawn(move || {
            let bn = format!("{out}/bn128");
            std::fs::create_dir(&bn).unwrap();
            run(circom, &["multiplier.circom", "--r1cs", "-o", &bn], tools);
            run(snarkjs, &["powersoftau", "new", "bn128", "4", &format!("{bn}/0.ptau")], tools);
            run(
                snarkjs,
                &["powersoftau", "prepare", "phase2", &format!("{bn}/0.ptau"), &format!("{bn}/1.ptau")],
                tools,
            );
            let (r1cs, zkey) = (format!("{bn}/multiplier.r1cs"), format!("{out}/bn128.zkey"));
            run(snarkjs, &["groth16", "setup", &r1cs, &format!("{bn}/1.ptau"), &zkey], tools);
        });
    });
    Some(Fixture { dir })
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &Value) {
    std::fs::write(p, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

#[test]
fn cli_proofs_verify_with_snarkjs_and_tampering_is_caught() {
    let Some(f) = fixture() else { return };
    let data = tempfile::tempdir().unwrap();
    for c in CIRCUITS {
        let (proof, public) = (f.path(&format!("{c}.proof.json")), f.path(&format!("{c}.public.json")));
        let args = [f.zkey(c), f.wtns(c), proof.clone(), public.clone()];
        let args: Vec<&str> = args.iter().map(|p| p.to_str().unwrap()).collect();
        let out = provd(data.path(), &[&["groth16", "prove"], &args[..], &["--backend", "cpu"]].concat());
        assert!(out.status.success(), "{c}: {:?}", text(&out));
        assert!(snarkjs_verifies(&f.vk(c), &public, &proof), "{c}: snarkjs rejects provd's proof");

        // A proof is bound to its public signals, and every point counts.
        let mut signals = read_json(&public);
        if let Some(first) = signals.as_array_mut().and_then(|s| s.first_mut()) {
            let v: u64 = first.as_str().unwrap().parse().unwrap_or(0);
            *first = (v + 1).to_string().into();
            let wrong = f.path(&format!("{c}.wrong-public.json"));
            write_json(&wrong, &signals);
            assert!(!snarkjs_verifies(&f.vk(c), &wrong, &proof), "{c}: a wrong public signal verified");
        }
        let mut p = read_json(&proof);
        p["pi_c"] = p["pi_a"].clone();
        let tampered = f.path(&format!("{c}.tampered.json"));
        write_json(&tampered, &p);
        assert!(!snarkjs_verifies(&f.vk(c), &public, &tampered), "{c}: a tampered proof verified");
    }
    // The multiplier's public signals are c = 33, then a = 3.
    let public = read_json(&f.path("multiplier.public.json"));
    assert_eq!(public, serde_json::json!(["33", "3"]));
}

/// provd's TEST-ONLY setup follows snarkjs's conventions: snarkjs proves with
/// its zkey and verifies those proofs, and provd's proofs under it.
#[test]
fn test_only_zkeys_from_r1cs_work_with_snarkjs() {
    let Some(f) = fixture() else { return };
    let data = tempfile::tempdir().unwrap();
    let (r1cs, zkey, vk) =
        (f.path("merkle.r1cs"), f.path("merkle.provd.zkey"), f.path("merkle.provd.vk.json"));
    let out =
        provd(data.path(), &["groth16", "setup-test-only", r1cs.to_str().unwrap(), zkey.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    let tools = tools_dir();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    run(&bin("snarkjs"), &["zkey", "export", "verificationkey", &s(&zkey), &s(&vk)], &tools);
    let (proof, public) =
        (f.path("merkle.snarkjs-on-provd-zkey.json"), f.path("merkle.snarkjs-on-provd-zkey.public.json"));
    run(
        &bin("snarkjs"),
        &["groth16", "prove", &s(&zkey), &s(&f.wtns("merkle")), &s(&proof), &s(&public)],
        &tools,
    );
    assert!(snarkjs_verifies(&vk, &public, &proof), "snarkjs's proof under provd's zkey");
    let out = provd(
        data.path(),
        &["groth16", "prove", &s(&zkey), &s(&f.wtns("merkle")), &s(&proof), &s(&public), "--backend", "cpu"],
    );
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(snarkjs_verifies(&vk, &public, &proof), "provd's proof under provd's zkey");
}

#[test]
fn exported_verifying_key_is_snarkjs_own() {
    let Some(f) = fixture() else { return };
    let data = tempfile::tempdir().unwrap();
    let out_path = f.path("merkle.provd-vk.json");
    let out = provd(
        data.path(),
        &["groth16", "export-vk", f.zkey("merkle").to_str().unwrap(), out_path.to_str().unwrap()],
    );
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(read_json(&out_path), read_json(&f.vk("merkle")));
}

#[test]
fn other_curves_and_wrong_witnesses_are_clear_errors() {
    let Some(f) = fixture() else { return };
    let data = tempfile::tempdir().unwrap();
    let prove = |zkey: &Path, wtns: &Path| {
        let (proof, public) = (f.path("x.proof.json"), f.path("x.public.json"));
        let args = [zkey, wtns, &proof, &public].map(|p| p.to_str().unwrap().to_string());
        let out = provd(
            data.path(),
            &["groth16", "prove", &args[0], &args[1], &args[2], &args[3], "--backend", "cpu"],
        );
        assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
        text(&out).1
    };
    let stderr = prove(&f.path("bn128.zkey"), &f.wtns("multiplier"));
    assert!(stderr.contains("this zkey is for bn128; provd proves BLS12-381"), "{stderr}");
    let stderr = prove(&f.zkey("multiplier"), &f.wtns("merkle"));
    assert!(stderr.contains("the witness has"), "{stderr}");
    assert!(stderr.contains("this circuit's zkey needs 4"), "{stderr}");
    let stderr = prove(&f.zkey("multiplier"), &f.zkey("multiplier"));
    assert!(stderr.contains("not a .wtns file"), "{stderr}");
}

fn circom_server(f: &Fixture) -> Server {
    circom_server_with(f, "")
}

fn circom_server_with(f: &Fixture, extra: &str) -> Server {
    Server::start(&circom_config(f, extra), &[])
}

/// `extra`, then a `[[circuits]]` table for each fixture circuit.
fn circom_config(f: &Fixture, extra: &str) -> String {
    let mut config = extra.to_string();
    for c in CIRCUITS {
        config +=
            &format!("[[circuits]]\nkind = \"circom\"\nname = \"{c}\"\nzkey = \"{}\"\n", f.zkey(c).display());
        // The multiplier's witnesses are checked against its constraints; the others' are not.
        if c == "multiplier" {
            config += &format!("r1cs = \"{}\"\n", f.path("multiplier.r1cs").display());
        }
    }
    config
}

#[test]
fn http_proofs_verify_with_snarkjs() {
    use base64::Engine as _;
    let Some(f) = fixture() else { return };
    let server = circom_server(f);
    for c in CIRCUITS {
        let wtns = base64::engine::general_purpose::STANDARD.encode(std::fs::read(f.wtns(c)).unwrap());
        let body = serde_json::json!({"circuit": c, "partitions": [{"wtns": wtns}, {"wtns": wtns}]});
        let (status, job) = server.call("POST", "/v1/prove?wait=true", Some(&body.to_string()));
        assert_eq!(status, 200, "{c}: {job}");
        assert_eq!(job["state"], "succeeded", "{c}: {job}");
        let (vk_status, _, vk) = provd_e2e::raw_request(
            server.addr,
            "GET",
            &format!("/v1/circuits/{c}/verifying-key?encoding=snarkjs"),
            None,
            &[],
        );
        assert_eq!(vk_status, 200);
        let vk: Value = serde_json::from_str(&vk).unwrap();
        assert_eq!(vk, read_json(&f.vk(c)), "{c}: the served verifying key is not snarkjs's");
        for (i, p) in job["partitions"].as_array().unwrap().iter().enumerate() {
            let (proof, public) =
                (f.path(&format!("{c}.http{i}.json")), f.path(&format!("{c}.http{i}.public.json")));
            write_json(&proof, &p["proof"]);
            write_json(&public, &p["public"]);
            assert!(snarkjs_verifies(&f.vk(c), &public, &proof), "{c} partition {i}: snarkjs rejects it");
        }
    }
    // With the r1cs, a witness that does not satisfy the circuit fails its
    // job naming the constraint, before any proving.
    let mut bad =
        provd::circuits::circom::Witness::parse(&std::fs::read(f.wtns("multiplier")).unwrap(), 4).unwrap();
    bad.values[1] += blstrs::Scalar::from(1u64); // c = 34 ≠ 3·11
    let wtns = base64::engine::general_purpose::STANDARD.encode(bad.to_bytes());
    let body = serde_json::json!({"circuit": "multiplier", "partitions": [{"wtns": wtns}]});
    let (status, job) = server.call("POST", "/v1/prove?wait=true", Some(&body.to_string()));
    assert_eq!((status, job["state"].as_str()), (200, Some("failed")), "{job}");
    assert!(job["error"].as_str().unwrap().contains("does not satisfy constraint #0"), "{job}");

    // Without it (merkle), the bad witness's proof fails verification: the job
    // fails saying so, and the device is not blamed (it stays in service).
    let good = std::fs::read(f.wtns("merkle")).unwrap();
    let (_, merkle) =
        provd::circuits::circom::read_zkey(&f.zkey("merkle"), provd::groth16::PointCheck::OnCurve).unwrap();
    assert!(merkle.constraints() > 3000, "the Merkle path has several thousand constraints");
    let mut bad = provd::circuits::circom::Witness::parse(&good, merkle.witness_len()).unwrap();
    bad.values[5] += blstrs::Scalar::from(1u64);
    let wtns = base64::engine::general_purpose::STANDARD.encode(bad.to_bytes());
    for _ in 0..4 {
        let body = serde_json::json!({"circuit": "merkle", "partitions": [{"wtns": wtns}]});
        let (status, job) = server.call("POST", "/v1/prove?wait=true", Some(&body.to_string()));
        assert_eq!((status, job["state"].as_str()), (200, Some("failed")), "{job}");
        assert!(job["error"].as_str().unwrap().contains("Nothing checked the witness"), "{job}");
    }
    let wtns = base64::engine::general_purpose::STANDARD.encode(&good);
    let body = serde_json::json!({"circuit": "merkle", "partitions": [{"wtns": wtns}]});
    let (_, job) = server.call("POST", "/v1/prove?wait=true", Some(&body.to_string()));
    assert_eq!(job["state"], "succeeded", "{job}");

    // A witness for another circuit is the client's error, with the reason.
    let wtns = base64::engine::general_purpose::STANDARD.encode(std::fs::read(f.wtns("merkle")).unwrap());
    let body = serde_json::json!({"circuit": "multiplier", "partitions": [{"wtns": wtns}]});
    let (status, err) = server.call("POST", "/v1/prove", Some(&body.to_string()));
    assert_eq!(status, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("this circuit's zkey needs 4"), "{err}");
}

/// Submits a binary witness for `circuit`; the job's id (202 expected).
fn submit_binary(server: &Server, circuit: &str, wtns: &[u8]) -> String {
    let octet = [("Content-Type", "application/octet-stream")];
    let path = format!("/v1/prove?circuit={circuit}");
    let r = provd_e2e::request_bytes(server.addr, "POST", &path, Some(wtns), &octet);
    assert_eq!(r.status, 202);
    serde_json::from_slice::<Value>(&r.body).unwrap()["job_id"].as_str().unwrap().to_string()
}

#[test]
fn binary_witness_bodies_prove_and_are_held_in_the_budget() {
    let Some(f) = fixture() else { return };
    let server = circom_server_with(f, "[[circuits]]\nkind = \"bench\"\nname = \"bench-10\"\n");
    let octet = [("Content-Type", "application/octet-stream")];
    let wtns = std::fs::read(f.wtns("merkle")).unwrap();
    let r = provd_e2e::request_bytes(
        server.addr,
        "POST",
        "/v1/prove?circuit=merkle&wait=true",
        Some(&wtns),
        &octet,
    );
    let job: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!((r.status, job["state"].as_str()), (200, Some("succeeded")), "{job}");
    let p = &job["partitions"][0];
    let (proof, public) = (f.path("merkle.binary.json"), f.path("merkle.binary.public.json"));
    write_json(&proof, &p["proof"]);
    write_json(&public, &p["public"]);
    assert!(snarkjs_verifies(&f.vk("merkle"), &public, &proof));

    // The body limit is the circuit's witness size; the reasons are the client's.
    let r =
        provd_e2e::request_bytes(server.addr, "POST", "/v1/prove?circuit=multiplier", Some(&wtns), &octet);
    let err: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(r.status, 413, "{err}");
    assert!(err["error"].as_str().unwrap().contains("larger than a witness of multiplier"), "{err}");
    let r = provd_e2e::request_bytes(server.addr, "POST", "/v1/prove?circuit=bench-10", Some(b"x"), &octet);
    assert_eq!(r.status, 415);
    let r = provd_e2e::request_bytes(server.addr, "POST", "/v1/prove", Some(&wtns), &octet);
    assert_eq!(r.status, 400);
    let r =
        provd_e2e::request_bytes(server.addr, "POST", "/v1/prove?circuit=merkle", Some(&wtns[..100]), &octet);
    let err: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(r.status, 400, "{err}");

    // Jobs in flight hold their witnesses; afterwards nothing is held.
    let ids: Vec<String> = (0..6).map(|_| submit_binary(&server, "merkle", &wtns)).collect();
    for id in &ids {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (_, job) = server.call("GET", &format!("/v1/jobs/{id}"), None);
            if job["state"] == "succeeded" {
                break;
            }
            assert!(std::time::Instant::now() < deadline && job["state"] != "failed", "{job}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    assert_eq!(server.metric("provd_witness_bytes"), 0.0);
    let (_, status) = server.call("GET", "/v1/status", None);
    assert_eq!(status["snapshot"]["witness_bytes"], 0, "{status}");
    assert_eq!(status["snapshot"]["reserved_bytes"], status["snapshot"]["key_bytes"], "{status}");
}

/// Binary-witness jobs killed before they ran (queued behind bench jobs,
/// one partition admitted at a time) run again after the restart from the
/// witnesses the journal kept, read only once the budget holds them: every
/// one succeeds, snarkjs accepts the proof, and no witness stays held.
#[test]
fn binary_witness_jobs_run_again_after_a_kill_9() {
    let Some(f) = fixture() else { return };
    let config = circom_config(
        f,
        "[server]\nmax_queued_partitions = 256\n[pipeline]\npartition_permits = 1\n\
         [[circuits]]\nkind = \"bench\"\nname = \"bench-12\"\n",
    );
    let server = Server::start(&config, &[]);
    for i in 0..16 {
        let body =
            format!(r#"{{"circuit": "bench-12", "partitions": [{{"seed": {i}}}, {{"seed": {}}}]}}"#, i + 100);
        assert_eq!(server.call("POST", "/v1/prove", Some(&body)).0, 202);
    }
    let wtns = std::fs::read(f.wtns("merkle")).unwrap();
    let ids: Vec<String> = (0..3).map(|_| submit_binary(&server, "merkle", &wtns)).collect();
    let (_, last) = server.call("GET", &format!("/v1/jobs/{}", ids[2]), None);
    assert_eq!(last["state"], "queued", "the job ran before the kill: nothing was tested");
    let data_dir = server.kill_9();

    let server =
        Server::try_start_in(&config, &[], "cpu", data_dir).unwrap_or_else(|e| panic!("restart: {e}"));
    let ended = server.wait_all(&ids, provd_e2e::JOBS_DEADLINE);
    for (id, job) in &ended {
        assert_eq!(job["state"], "succeeded", "job {id}: {job}");
    }
    let p = &ended[&ids[2]]["partitions"][0];
    let (proof, public) = (f.path("merkle.restarted.json"), f.path("merkle.restarted.public.json"));
    write_json(&proof, &p["proof"]);
    write_json(&public, &p["public"]);
    assert!(snarkjs_verifies(&f.vk("merkle"), &public, &proof));
    assert_eq!(server.metric("provd_witness_bytes"), 0.0);
}

#[test]
fn a_witness_the_budget_can_never_hold_is_refused_with_the_reason() {
    let Some(f) = fixture() else { return };
    // Room for the keys and a little more: less than a witness and a partition.
    let keys = {
        let server = circom_server(f);
        let (_, status) = server.call("GET", "/v1/status", None);
        status["snapshot"]["key_bytes"].as_u64().unwrap()
    };
    let server = circom_server_with(f, &format!("[pipeline]\nmemory_budget = {}\n", keys + 100_000));
    let wtns = std::fs::read(f.wtns("merkle")).unwrap();
    let octet = [("Content-Type", "application/octet-stream")];
    let r = provd_e2e::request_bytes(server.addr, "POST", "/v1/prove?circuit=merkle", Some(&wtns), &octet);
    let err: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(r.status, 413, "{err}");
    assert!(err["error"].as_str().unwrap().contains("raise pipeline.memory_budget"), "{err}");
    assert_eq!(server.metric("provd_witness_bytes"), 0.0);
}
