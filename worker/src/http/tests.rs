//! The router in process (`tower::ServiceExt::oneshot`): every route's
//! success and error shapes, on a circuit kind defined outside `circuits/`
//! (the service's tests' `SquareKind`): the kind seam needs nothing else to
//! serve a new kind.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use blstrs::Scalar;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, AppState};
use crate::config::Config;
use crate::groth16::VerifyingKey;
use crate::service::tests::{serve, square, square_key};

fn state(token: Option<&str>) -> Arc<AppState> {
    let mut config = Config::default();
    config.server.max_body_bytes = 2048;
    config.server.max_queued_partitions = 4;
    AppState::new(serve(config, square()), token.map(String::from))
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// The documented error shape: JSON with the status and a message containing `says`.
    fn assert_error(&self, status: StatusCode, says: &str) {
        assert_eq!(self.status, status, "{:?}", String::from_utf8_lossy(&self.body));
        assert_eq!(self.headers[header::CONTENT_TYPE], "application/json");
        let v = self.json();
        assert_eq!(v["status"], status.as_u16());
        assert!(v["error"].as_str().unwrap().contains(says), "wanted '{says}' in {v}");
    }
}

async fn call(state: &Arc<AppState>, req: Request<Body>) -> Reply {
    let res = router(state.clone()).oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes().to_vec(),
    }
}

async fn get(state: &Arc<AppState>, uri: &str) -> Reply {
    call(state, Request::get(uri).body(Body::empty()).unwrap()).await
}

async fn post_json(state: &Arc<AppState>, uri: &str, body: &str) -> Reply {
    let req = Request::post(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()));
    call(state, req.unwrap()).await
}

#[tokio::test(flavor = "multi_thread")]
async fn prove_and_jobs() {
    let s = state(None);
    let r =
        post_json(&s, "/v1/prove?wait=true", r#"{"circuit":"square","partitions":[{"x":3},{"x":4}]}"#).await;
    assert_eq!(r.status, StatusCode::OK);
    let job = r.json();
    assert_eq!(job["state"], "succeeded", "{job}");
    let inputs: Vec<&str> = job["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["public_inputs"][0].as_str().unwrap())
        .collect();
    assert_eq!(
        inputs,
        [crate::groth16::format_scalar(&Scalar::from(9)), crate::groth16::format_scalar(&Scalar::from(16))]
    );
    assert!(
        job["partitions"][0]["seconds"]["verify"].as_f64().is_some(),
        "proofs are checked by default: {job}"
    );

    let r = post_json(&s, "/v1/prove", r#"{"circuit":"square","partitions":[{"x":5}]}"#).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let id = r.json()["job_id"].as_str().unwrap().to_string();
    assert_eq!(r.headers[header::LOCATION], format!("/v1/jobs/{id}"));
    assert!(id.parse::<uuid::Uuid>().is_ok(), "job ids are UUIDs: {id}");
    let st = s.service.wait(id.parse().unwrap()).unwrap();
    assert_eq!(st.outcome, Some(crate::pipeline::Outcome::Succeeded));
    let r = get(&s, &format!("/v1/jobs/{id}")).await;
    assert_eq!((r.status, r.json()["state"].as_str()), (StatusCode::OK, Some("succeeded")));
    let r = call(&s, Request::delete(format!("/v1/jobs/{id}")).body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::OK);

    get(&s, "/v1/jobs/17").await.assert_error(StatusCode::NOT_FOUND, "job ids are UUIDs");
    let unknown = crate::pipeline::JobId::new();
    get(&s, &format!("/v1/jobs/{unknown}"))
        .await
        .assert_error(StatusCode::NOT_FOUND, "unknown, or its result has expired");
    call(&s, Request::delete(format!("/v1/jobs/{unknown}")).body(Body::empty()).unwrap())
        .await
        .assert_error(StatusCode::NOT_FOUND, "no job");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_json_errors() {
    let s = state(None);
    post_json(&s, "/v1/prove", "{not json")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid request body");
    post_json(&s, "/v1/prove", r#"{"circuit":"square"}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "a job has either \"partitions\"");
    post_json(&s, "/v1/prove", r#"{"circuit":"cube","partitions":[{"x":1}]}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "unknown circuit 'cube'; this worker serves: square");
    post_json(&s, "/v1/prove", r#"{"circuit":"square","partitions":[]}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "at least one witness");
    post_json(&s, "/v1/prove", r#"{"circuit":"square","partitions":[{"x":1},{"y":2}]}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "partition 1: expected {\"x\": N}");
    // A key given twice, at the top or inside a witness: two readers could
    // read it two ways, so neither is taken.
    post_json(&s, "/v1/prove", r#"{"circuit":"square","circuit":"square","partitions":[{"x":1}]}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "duplicate field `circuit`");
    post_json(&s, "/v1/prove", r#"{"circuit":"square","partitions":[{"x":1,"x":2}]}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "the key \"x\" is given twice in one object");
    post_json(
        &s,
        "/v1/prove",
        r#"{"circuit":"square","partitions":[{"x":1},{"x":1},{"x":1},{"x":1},{"x":1}]}"#,
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "at most 4");
    post_json(&s, "/v1/prove?wait=yes", r#"{"circuit":"square","partitions":[{"x":1}]}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid query");
    let big = format!(r#"{{"circuit":"square","partitions":[{}]}}"#, vec![r#"{"x":1}"#; 400].join(","));
    post_json(&s, "/v1/prove", &big).await.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "max_body_bytes");
    let plain =
        Request::post("/v1/prove").header(header::CONTENT_TYPE, "text/plain").body(Body::from("{}")).unwrap();
    call(&s, plain).await.assert_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "application/json");
    call(&s, Request::put("/v1/prove").body(Body::empty()).unwrap())
        .await
        .assert_error(StatusCode::METHOD_NOT_ALLOWED, "does not take that method");
    get(&s, "/v2/nothing").await.assert_error(StatusCode::NOT_FOUND, "no such route");
    // A body declared larger than the limit is refused before any of it is read.
    let declared = Request::post("/v1/prove")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, "2147483648")
        .body(Body::empty())
        .unwrap();
    call(&s, declared).await.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "max_body_bytes");
    // The live view's files answer GET and HEAD only.
    for method in ["POST", "TRACE", "DELETE"] {
        let r = call(&s, Request::builder().method(method).uri("/").body(Body::empty()).unwrap()).await;
        r.assert_error(StatusCode::METHOD_NOT_ALLOWED, "does not take that method");
        assert_eq!(r.headers[header::ALLOW], "GET, HEAD", "{method}");
    }
    // draining: 503 with Retry-After for new jobs, and not ready
    s.draining.store(true, Ordering::Release);
    let r = post_json(&s, "/v1/prove", r#"{"circuit":"square","partitions":[{"x":1}]}"#).await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    assert_eq!(r.headers[header::RETRY_AFTER], "10");
    get(&s, "/readyz").await.assert_error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
}

#[tokio::test(flavor = "multi_thread")]
async fn circuits_keys_status_and_health() {
    let s = state(None);
    let r = get(&s, "/v1/circuits").await;
    assert_eq!(r.status, StatusCode::OK);
    let c = &r.json()["circuits"][0];
    assert_eq!(
        (c["name"].as_str(), c["kind"].as_str(), c["reduction"].as_str()),
        (Some("square"), Some("square"), Some("bellperson"))
    );
    assert_eq!(c["key"], json!({ "source": "file", "path": "square.params" }));
    assert_eq!(c["public_inputs"], 1);
    assert!(c["srs_bytes"].as_u64().unwrap() > 0);

    let r = get(&s, "/v1/circuits/square/verifying-key").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers[header::CONTENT_TYPE], "application/octet-stream");
    assert_eq!(VerifyingKey::from_bytes(&r.body).unwrap(), square_key().vk);
    let r2 = get(&s, "/v1/circuits/square/verifying-key?encoding=bellperson").await;
    assert_eq!(r2.body, r.body);
    get(&s, "/v1/circuits/cube/verifying-key")
        .await
        .assert_error(StatusCode::NOT_FOUND, "unknown circuit 'cube'");
    get(&s, "/v1/circuits/square/verifying-key?encoding=json")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "unknown verifying key encoding 'json'");
    get(&s, "/v1/circuits/square/verifying-key?format=x")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid query");

    let st = get(&s, "/v1/status").await.json();
    assert_eq!(st["backends"][0]["name"], "cpu");
    assert_eq!(st["config"]["verify_proofs"], true);
    assert!(st["snapshot"]["key_bytes"].as_u64().unwrap() > 0, "the key is held against the budget: {st}");
    assert_eq!(st["snapshot"]["key_bytes"], st["snapshot"]["reserved_bytes"]);

    let m = get(&s, "/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    let text = String::from_utf8(m.body).unwrap();
    assert!(text.contains("provd_srs_bytes{circuit=\"square\",location=\"host\"}"), "{text}");
    assert!(text.contains("provd_proof_verify_seconds_count"), "{text}");

    assert_eq!(get(&s, "/healthz").await.json(), json!({ "ok": true }));
    assert_eq!(get(&s, "/readyz").await.json()["ready"], true);
    let r = get(&s, "/").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    let ev = get_head(&s, "/v1/events").await;
    assert_eq!(ev.0, StatusCode::OK);
    assert_eq!(ev.1, "text/event-stream");
}

/// Status and content type only (the event stream does not end).
async fn get_head(state: &Arc<AppState>, uri: &str) -> (StatusCode, String) {
    let res = router(state.clone()).oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
    (res.status(), res.headers()[header::CONTENT_TYPE].to_str().unwrap().to_string())
}

#[tokio::test]
async fn the_runbook_is_served_outside_the_token_with_every_alert_s_section() {
    let s = state(Some("t0ken"));
    let reply = get(&s, "/runbook").await;
    assert_eq!(reply.status, StatusCode::OK);
    let rules = include_str!("../../../deploy/prometheus/provd-rules.yml");
    for alert in rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
        let anchor = format!("#{}", alert.to_lowercase());
        assert!(rules.contains(&format!("/runbook{{{{ end }}}}{anchor}'")), "{alert}'s runbook_url");
        let text = String::from_utf8_lossy(&reply.body);
        assert!(text.contains(&format!("### {alert}\n")), "the runbook has no section for {alert}");
    }
}

#[tokio::test]
async fn the_token_guards_the_api_but_not_health_or_the_page() {
    let s = state(Some("t0ken"));
    get(&s, "/v1/status").await.assert_error(StatusCode::UNAUTHORIZED, "bearer token");
    get(&s, "/v1/circuits/square/verifying-key").await.assert_error(StatusCode::UNAUTHORIZED, "bearer token");
    let ok =
        Request::get("/v1/status").header(header::AUTHORIZATION, "Bearer t0ken").body(Body::empty()).unwrap();
    assert_eq!(call(&s, ok).await.status, StatusCode::OK);
    assert_eq!(get(&s, "/healthz").await.status, StatusCode::OK);
    assert_eq!(get(&s, "/").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn browsers_on_other_sites_cannot_drive_a_loopback_worker() {
    let s = state(None);
    let body = r#"{"circuit":"square","partitions":[{"x":2}]}"#;
    let with = |headers: &[(&str, &str)]| {
        let mut r = Request::post("/v1/prove").header(header::CONTENT_TYPE, "application/json");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(Body::from(body)).unwrap()
    };
    // DNS rebinding: a foreign name resolved to 127.0.0.1
    call(&s, with(&[("host", "evil.example:8080")]))
        .await
        .assert_error(StatusCode::FORBIDDEN, "not a loopback name");
    // CSRF: a page elsewhere posting to the worker
    call(&s, with(&[("host", "127.0.0.1:8080"), ("origin", "https://evil.example")]))
        .await
        .assert_error(StatusCode::FORBIDDEN, "cross-origin request");
    // the worker's own page, and clients that send no Origin, are served
    for ok in [
        &[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")][..],
        &[("host", "localhost:8080")],
        &[("host", "[::1]:8080")],
    ] {
        assert_eq!(call(&s, with(ok)).await.status, StatusCode::ACCEPTED, "{ok:?}");
    }
    assert!(super::is_loopback_host("LOCALHOST") && super::is_loopback_host("127.1.2.3"));
    assert!(!super::is_loopback_host("127.0.0.1.evil.example") && !super::is_loopback_host("10.0.0.1:80"));
    // the token's scheme is case-insensitive
    let s = state(Some("t0ken"));
    let lower =
        Request::get("/v1/status").header(header::AUTHORIZATION, "bearer t0ken").body(Body::empty()).unwrap();
    assert_eq!(call(&s, lower).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idempotency_key_returns_the_first_job() {
    let s = state(None);
    let post = |key: &str, uri: &str, body: &str| {
        Request::post(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", key)
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let body = r#"{"circuit":"square","partitions":[{"x":6}]}"#;
    let first = call(&s, post("retry-1", "/v1/prove", body)).await;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    assert!(first.headers.get("idempotent-replayed").is_none());
    let again = call(&s, post("retry-1", "/v1/prove", body)).await;
    assert_eq!(again.status, StatusCode::ACCEPTED);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again.json()["job_id"], first.json()["job_id"], "one job for both");
    // with ?wait=true the retry waits for that same job
    let waited = call(&s, post("retry-1", "/v1/prove?wait=true", body)).await;
    assert_eq!(
        (waited.status, waited.json()["id"].clone()),
        (StatusCode::OK, first.json()["job_id"].clone())
    );
    // the same key for another request is refused; a new key makes a new job
    call(&s, post("retry-1", "/v1/prove", r#"{"circuit":"square","partitions":[{"x":7}]}"#))
        .await
        .assert_error(StatusCode::UNPROCESSABLE_ENTITY, "was used for another request");
    let other = call(&s, post("retry-2", "/v1/prove", body)).await;
    assert_ne!(other.json()["job_id"], first.json()["job_id"]);
    call(&s, post(" ", "/v1/prove", body)).await.assert_error(StatusCode::BAD_REQUEST, "Idempotency-Key");
    // concurrent retries make one job
    let tries: Vec<_> = (0..8).map(|_| call(&s, post("burst", "/v1/prove", body))).collect();
    let ids: std::collections::BTreeSet<String> =
        futures_util::future::join_all(tries).await.iter().map(|r| r.json()["job_id"].to_string()).collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_s_priority_is_its_request_s_or_its_circuit_s_and_shows_everywhere() {
    let s = state(None);
    let r = post_json(&s, "/v1/prove?wait=true", r#"{"circuit":"square","partitions":[{"x":3}]}"#).await;
    assert_eq!(r.json()["priority"], "normal", "the circuit's (its kind's) default");
    let r = post_json(
        &s,
        "/v1/prove?wait=true",
        r#"{"circuit":"square","priority":"critical","partitions":[{"x":3}]}"#,
    )
    .await;
    assert_eq!(
        (r.json()["priority"].as_str(), r.json()["state"].as_str()),
        (Some("critical"), Some("succeeded"))
    );
    post_json(&s, "/v1/prove", r#"{"circuit":"square","priority":"urgent","partitions":[{"x":3}]}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "unknown variant `urgent`");
    post_json(&s, "/v1/prove?priority=high", r#"{"circuit":"square","partitions":[{"x":3}]}"#)
        .await
        .assert_error(StatusCode::BAD_REQUEST, "a JSON body gives them inside");
    assert_eq!(get(&s, "/v1/circuits").await.json()["circuits"][0]["priority"], "normal");
    let st = get(&s, "/v1/status").await.json();
    assert_eq!(st["snapshot"]["priorities"]["critical"], json!({ "queued": 0, "gpu_queue": 0 }), "{st}");
    assert_eq!(st["config"]["critical_permits"], 1);
    let text = String::from_utf8(get(&s, "/metrics").await.body).unwrap();
    assert!(
        text.contains("provd_partition_wait_seconds_count{priority=\"critical\",queue=\"admission\"} 1"),
        "{text}"
    );
    assert!(text.contains("provd_partitions_queued{priority=\"low\"} 0"), "{text}");
}
