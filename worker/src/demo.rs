//! `provd demo`: the service on a built-in circuit, fed a steady stream of
//! jobs by an in-process client over real HTTP, so that the gauges and the
//! live view have something to show.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One HTTP/1.1 request with `Connection: close`; returns (status, body).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// Submits jobs of `partitions` partitions whenever fewer than `low_water`
/// partitions wait, forever (until the process ends).
pub fn feed(addr: SocketAddr, circuit: String, partitions: usize, low_water: usize) {
    let mut seed = 1u64;
    loop {
        let waiting = http(addr, "GET", "/v1/status", None)
            .ok()
            .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| v["snapshot"]["partitions_waiting"].as_u64());
        if waiting.is_some_and(|w| (w as usize) < low_water) {
            let parts: Vec<String> =
                (0..partitions).map(|i| format!("{{\"seed\":{}}}", seed + i as u64)).collect();
            seed += partitions as u64;
            let body = format!("{{\"circuit\":\"{circuit}\",\"partitions\":[{}]}}", parts.join(","));
            match http(addr, "POST", "/v1/prove", Some(&body)) {
                Ok((202, _)) => {}
                Ok((503, _)) => return, // shutting down
                Ok((code, b)) => tracing::warn!(code, body = %b.trim(), "demo client: job refused"),
                Err(e) => tracing::warn!("demo client: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
