//! A minimal HTTP/1.0 client for the test tools the emulators' script runs on loopback ports (the
//! OTLP receiver, the global table's replicator): one request per connection, a JSON reply.

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Sends `method path` (with `body` as JSON, if any) to `endpoint` (`http://host:port`); the
/// reply's status and its body read as JSON (a body that is not JSON is a JSON string).
///
/// # Panics
/// When nothing answers at `endpoint` or the reply is not HTTP.
pub async fn request(
    endpoint: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let host = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&host)
        .await
        .unwrap_or_else(|e| panic!("nothing answers at {endpoint}: {e}"));
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).await.expect("read reply");
    let reply = String::from_utf8(reply).expect("UTF-8 reply");
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP status line: {head}"));
    let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    (status, body)
}
