//! A poller's owner id: unique among every poller that ever uses the lease table, so a lease
//! owned by a poller that died is never mistaken for one of a new poller's.
//!
//! On ECS it is the task ARN, read from the task metadata endpoint (`ECS_CONTAINER_METADATA_URI_V4`,
//! which the ECS agent sets in every container); elsewhere, or when the endpoint does not answer,
//! `{host}-{pid}-{random}`.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The variable the ECS agent sets to the task metadata endpoint (version 4).
pub const ECS_METADATA_ENV: &str = "ECS_CONTAINER_METADATA_URI_V4";

/// How long the metadata endpoint may take to answer (it is local to the task).
const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

/// This process's owner id: the ECS task ARN where the metadata endpoint gives one, else
/// [`fallback_owner`].
pub async fn discover_owner() -> String {
    if let Ok(uri) = std::env::var(ECS_METADATA_ENV) {
        match task_arn(&uri).await {
            Ok(arn) => return arn,
            Err(reason) => tracing::warn!(
                endpoint = %uri,
                reason = %reason,
                "could not read the ECS task ARN; the lease owner id is host, pid and a random suffix"
            ),
        }
    }
    fallback_owner(&host_name(), std::process::id())
}

/// `{host}-{pid}-{8 random hex digits}`.
pub fn fallback_owner(host: &str, pid: u32) -> String {
    let random = uuid::Uuid::now_v7().simple().to_string();
    let suffix = &random[random.len() - 8..];
    format!("{host}-{pid}-{suffix}")
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// `TaskARN` from the task metadata (`GET {uri}/task`).
async fn task_arn(uri: &str) -> Result<String, String> {
    let url: hyper::Uri = format!("{}/task", uri.trim_end_matches('/'))
        .parse()
        .map_err(|e| format!("not a URI: {e}"))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let response = tokio::time::timeout(METADATA_TIMEOUT, client.get(url))
        .await
        .map_err(|_| format!("no answer within {}s", METADATA_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let body = tokio::time::timeout(METADATA_TIMEOUT, response.into_body().collect())
        .await
        .map_err(|_| "the body did not arrive in time".to_owned())?
        .map_err(|e| e.to_string())?
        .to_bytes();
    arn_of(&body)
}

fn arn_of(body: &[u8]) -> Result<String, String> {
    let metadata: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    metadata
        .get("TaskARN")
        .and_then(serde_json::Value::as_str)
        .filter(|arn| !arn.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| "no TaskARN in the task metadata".to_owned())
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const ARN: &str = "arn:aws:ecs:eu-west-1:123456789012:task/outbox/0123456789abcdef";

    #[test]
    fn the_fallback_names_host_and_pid_and_differs_every_time() {
        let a = fallback_owner("ip-10-0-0-1", 42);
        let b = fallback_owner("ip-10-0-0-1", 42);
        assert!(a.starts_with("ip-10-0-0-1-42-"), "{a}");
        assert_eq!(a.len(), "ip-10-0-0-1-42-".len() + 8);
        assert_ne!(a, b);
    }

    #[test]
    fn the_task_arn_is_read_from_the_metadata_document() {
        let body = format!(r#"{{"Cluster":"outbox","TaskARN":"{ARN}","Family":"poller"}}"#);
        assert_eq!(arn_of(body.as_bytes()).unwrap(), ARN);
        assert!(arn_of(br#"{"Cluster":"outbox"}"#).is_err());
        assert!(arn_of(b"<html>").is_err());
    }

    #[tokio::test]
    async fn the_metadata_endpoint_is_asked_for_the_task() {
        // Given an endpoint that answers GET /v4/abc/task with a task document
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 4096];
            let read = socket.read(&mut request).await.unwrap();
            let request = String::from_utf8_lossy(&request[..read]).into_owned();
            let body = format!(r#"{{"TaskARN":"{ARN}"}}"#);
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(response.as_bytes()).await.unwrap();
            request
        });

        // When the task ARN is read from it
        let arn = task_arn(&format!("http://{address}/v4/abc")).await;

        // Then it asked for the task document and got the ARN
        assert_eq!(arn.unwrap(), ARN);
        let request = server.await.unwrap();
        assert!(request.starts_with("GET /v4/abc/task "), "{request}");
    }

    #[tokio::test]
    async fn an_endpoint_that_refuses_is_an_error_not_a_hang() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        assert!(task_arn(&format!("http://{address}/v4/abc")).await.is_err());
    }
}
