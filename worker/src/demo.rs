//! `provd demo`: the service on a built-in circuit, fed a steady stream of
//! jobs by an in-process client over real HTTP, so that the gauges and the
//! live view have something to show.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A plain HTTP/1.1 client, enough for the demo feeder and the end-to-end
/// tests: one request per connection.
pub struct Response {
    pub status: u16,
    /// Status line and headers, as received.
    pub head: String,
    pub body: String,
}

/// One request with `Connection: close`. Reads the head, then exactly
/// Content-Length bytes when given (some servers keep the connection open
/// regardless), else until the peer closes.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let body = body.unwrap_or("");
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let mut expected: Option<usize> = None;
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let want = *expected.get_or_insert_with(|| {
                let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
                head.lines()
                    .find_map(|l| {
                        l.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok())
                    })
                    .map_or(usize::MAX, |len| end + 4 + len)
            });
            if raw.len() >= want {
                break;
            }
        }
        match s.read(&mut buf)? {
            0 => break,
            n => raw.extend_from_slice(&buf[..n]),
        }
    }
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok(Response { status, head: head.to_string(), body: body.to_string() })
}

/// GET or POST without extra headers; returns (status, body).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    request(addr, method, path, body, &[]).map(|r| (r.status, r.body))
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
