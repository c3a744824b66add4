//! The service on a GPU: one worker serving two circuits, jobs alternating.
//! While both keys fit, each is uploaded once (provd_key_uploads_total);
//! under a gpu.key_memory_limit that holds one (plain bases, a, b, c on the
//! host), each switch evicts the other; under a limit below the larger key,
//! that key is streamed from the host.
//! Proofs verify in both cases. Skipped (saying why) where there is no GPU.

use provd_e2e::{partition_proof, request, Server};

const TWO_CIRCUITS: &str = "[[circuits]]\nkind = \"bench\"\nname = \"bench-14\"\n\
                            [[circuits]]\nkind = \"bench\"\nname = \"bench-15\"\n";

fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
}

/// Six jobs alternating between the circuits; every proof checked against
/// the served verifying key. Returns the /metrics text afterwards.
fn alternate(server: &Server) -> String {
    for round in 0..6u64 {
        let circuit = ["bench-14", "bench-15"][round as usize % 2];
        let body = format!(r#"{{"circuit":"{circuit}","partitions":[{{"seed":{round}}}]}}"#);
        let (code, job) = server.call("POST", "/v1/prove?wait=true", Some(&body));
        assert_eq!((code, job["state"].as_str()), (200, Some("succeeded")), "{job}");
        let verifier = server.verifier(circuit);
        let (proof, inputs) = partition_proof(&job["partitions"][0]);
        verifier.verify(&proof, &inputs).expect("the proof verifies");
    }
    String::from_utf8(request(server.addr, "GET", "/metrics", None, &[]).body).unwrap()
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh runs it (cargo test -- --include-ignored on a GPU machine)"]
fn two_circuits_stay_resident_until_device_memory_is_short() {
    let server = match Server::try_start(TWO_CIRCUITS, &[], "cuda") {
        Ok(s) => s,
        Err(stderr) if stderr.contains("no usable CUDA device") => {
            eprintln!("skipped: {}", stderr.lines().last().unwrap_or(""));
            return;
        }
        Err(stderr) => panic!("provd serve --backend cuda failed: {stderr}"),
    };
    let text = alternate(&server);
    for c in ["bench-14", "bench-15"] {
        assert_eq!(
            metric(&text, &format!("provd_key_uploads_total{{circuit=\"{c}\",device=\"cuda:0\"}}")),
            1.0
        );
        assert!(metric(&text, &format!("provd_srs_bytes{{circuit=\"{c}\",location=\"device\"}}")) > 0.0);
    }
    assert_eq!(metric(&text, "provd_key_evictions_total{device=\"cuda:0\"}"), 0.0);
    // the GPU-only families the dashboard and alerts use are all exported here
    for family in provd_e2e::GPU_ONLY_METRICS {
        assert!(text.contains(&format!("# TYPE {family} ")), "{family} in a GPU worker's scrape");
    }
    assert!(
        metric(&text, "provd_gpu_busy_seconds_total{device=\"cuda:0\"}") > 0.0,
        "device-measured busy time"
    );
    let (_, status) = server.call("GET", "/v1/status", None);
    let on_host = |status: &serde_json::Value| status["snapshot"]["gpus"][0]["products_on_host"].clone();
    assert_eq!(on_host(&status), serde_json::json!([]), "matrices beside both keys: {status}");
    drop(server);

    // Room for one key only: every switch evicts the other. Plain bases and
    // a, b, c on the host, so that a key's device bytes are its bases alone:
    // shifted bases and matrices go only where they fit beside the resident
    // keys, so under a limit a second key would stay in a smaller layout.
    let plain = format!("{TWO_CIRCUITS}[gpu]\nbases = \"plain\"\nproducts = \"cpu\"\n");
    let server = Server::try_start(&plain, &[], "cuda").unwrap();
    alternate(&server);
    let (_, circuits) = server.call("GET", "/v1/circuits", None);
    let mut named: Vec<(u64, String)> = circuits["circuits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["srs_device_bytes"].as_u64().unwrap(), c["name"].as_str().unwrap().to_string()))
        .collect();
    named.sort();
    let sizes: Vec<u64> = named.iter().map(|(bytes, _)| *bytes).collect();
    drop(server);
    let (smallest, largest) = (sizes[0], sizes[1]);
    assert!(smallest > 0, "both keys were resident: {sizes:?}");
    let limited = format!("{plain}key_memory_limit = {}\n", largest + smallest / 2);
    let server = Server::try_start(&limited, &[], "cuda").unwrap();
    let text = alternate(&server);
    let uploads: f64 = ["bench-14", "bench-15"]
        .iter()
        .map(|c| metric(&text, &format!("provd_key_uploads_total{{circuit=\"{c}\",device=\"cuda:0\"}}")))
        .sum();
    assert_eq!(uploads, 6.0, "{text}");
    assert_eq!(metric(&text, "provd_key_evictions_total{device=\"cuda:0\"}"), 5.0);
    drop(server);

    // A limit under the larger key: it is streamed from the host (and says
    // so in the metrics, /v1/circuits and the live view's snapshot), the
    // smaller stays resident, and every proof still verifies.
    let small_limit = format!("{plain}key_memory_limit = {}\n", largest - 1);
    let server = Server::try_start(&small_limit, &[], "cuda").unwrap();
    let text = alternate(&server);
    let (big, small) = (&named[1].1, &named[0].1);
    let layout = |c: &str, l: &str| {
        metric(&text, &format!("provd_key_layout{{circuit=\"{c}\",device=\"cuda:0\",layout=\"{l}\"}}"))
    };
    assert_eq!((layout(big, "streamed"), layout(big, "plain")), (1.0, 0.0), "{text}");
    assert_eq!((layout(small, "streamed"), layout(small, "plain")), (0.0, 1.0), "{text}");
    let (_, circuits) = server.call("GET", "/v1/circuits", None);
    let streamed_on = |c: &str| {
        let all = circuits["circuits"].as_array().unwrap();
        all.iter().find(|x| x["name"] == c).unwrap()["srs_streamed_on"].clone()
    };
    assert_eq!(
        (streamed_on(big), streamed_on(small)),
        (serde_json::json!(["cuda:0"]), serde_json::json!([]))
    );
    let (_, status) = server.call("GET", "/v1/status", None);
    assert_eq!(status["snapshot"]["gpus"][0]["streamed_keys"], serde_json::json!([big]), "{status}");
    assert_eq!(on_host(&status), serde_json::json!(["bench-14", "bench-15"]), "products = \"cpu\": {status}");
    println!(
        "resident: 1 upload per circuit over 6 alternating jobs; limited to one key: 6 uploads, 5 evictions; \
         under the larger key: it streamed, proofs verified"
    );
}
