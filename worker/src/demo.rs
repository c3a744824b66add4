//! `provd demo`: the service on a built-in circuit, fed a steady stream of
//! jobs by an in-process client over real HTTP, so that the gauges and the
//! live view have something to show.

use std::net::SocketAddr;
use std::time::Duration;

/// Submits jobs of `partitions` partitions whenever fewer than `low_water`
/// partitions wait, forever (until the process ends).
pub fn feed(addr: SocketAddr, circuit: String, partitions: usize, low_water: usize) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let base = format!("http://{addr}");
    let mut seed = 1u64;
    loop {
        let waiting = agent
            .get(format!("{base}/v1/status"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_json::<serde_json::Value>().ok())
            .and_then(|v| v["snapshot"]["partitions_waiting"].as_u64());
        if waiting.is_some_and(|w| (w as usize) < low_water) {
            let parts: Vec<_> =
                (0..partitions).map(|i| serde_json::json!({ "seed": seed + i as u64 })).collect();
            seed += partitions as u64;
            let body = serde_json::json!({ "circuit": circuit, "partitions": parts });
            match agent.post(format!("{base}/v1/prove")).send_json(&body) {
                Ok(r) if r.status() == 202 => {}
                Ok(r) if r.status() == 503 => return, // shutting down
                Ok(mut r) => {
                    let text = r.body_mut().read_to_string().unwrap_or_default();
                    tracing::warn!(code = r.status().as_u16(), body = %text.trim(), "demo client: job refused")
                }
                Err(e) => tracing::warn!("demo client: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
